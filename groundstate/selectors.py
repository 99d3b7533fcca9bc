"""Task selectors for `--tasks`: `pool`, `bench`, a domain name, a YAML list of task ids, or a glob over ids.

Several selectors may be joined with commas; the result keeps a stable order without duplicates.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from groundstate.tasks import Domain, Task, TaskFileError, bundled_domains, iter_tasks, load_domain, read_data_file


def select_tasks(selector: str, domains: list[str] | None = None) -> list[tuple[Task, Domain]]:
    """Resolve a selector to (task, domain) pairs; raises ValueError naming what matched nothing."""
    cache: list[list[tuple[Task, Domain]]] = []

    def universe() -> list[tuple[Task, Domain]]:
        if not cache:
            cache.append(iter_tasks(domains))
        return cache[0]

    chosen: dict[str, tuple[Task, Domain]] = {}
    for part in [p.strip() for p in selector.split(",") if p.strip()]:
        matched = _resolve(part, universe)
        if not matched:
            raise ValueError(f"task selector {part!r} matched no task")
        for t, d in matched:
            chosen.setdefault(t.id, (t, d))
    return list(chosen.values())


def _resolve(part: str, universe) -> list[tuple[Task, Domain]]:
    path = Path(part)
    if (path / "domain.yaml").exists():
        d = load_domain(str(path))
        return [(t, d) for t in d.tasks]
    if part in ("pool", "bench"):
        return [(t, d) for t, d in universe() if t.split == part]
    if part == "all":
        return universe()
    if part in bundled_domains():
        d = load_domain(part)
        return [(t, d) for t in d.tasks]
    if path.suffix in (".yaml", ".yml", ".json") and path.exists():
        ids = read_data_file(path)
        if isinstance(ids, dict):
            ids = ids.get("tasks", ids.get("task_ids"))
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise TaskFileError(path, "a task list must be a YAML list of task ids", field="tasks")
        by_id = {t.id: (t, d) for t, d in universe()}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise TaskFileError(path, f"unknown task ids: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}", field="tasks")
        return [by_id[i] for i in ids]
    return [(t, d) for t, d in universe() if fnmatch.fnmatchcase(t.id, part)]
