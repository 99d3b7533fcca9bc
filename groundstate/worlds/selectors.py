"""Task selectors for `--tasks`: `pool`, `bench`, a domain name, a YAML list of task ids, or a glob over ids.

`thinkingbox:DATASET_DIR[::TEST_LIST]` selects ThinkingBox-format test cases (see docs/THINKINGBOX.md); their
servers come from `tb_servers` (`--tb-servers servers.yaml`), which only running them needs.
`tau2:DOMAIN[:SPLIT]` selects τ²-bench tasks (see docs/TAU2.md; τ² must be installed: `make tau2`).
Several selectors may be joined with commas; the result keeps a stable order without duplicates. A task id
that two selected sources define differently (another domain, another definition) is refused, naming both.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from groundstate.tasks import Task, TaskFileError, read_data_file
from groundstate.worlds.domain import Domain, bundled_domains, iter_tasks, load_domain


def select_tasks(
    selector: str, domains: list[str] | None = None, *, tb_servers: Path | str | None = None, tb_no_sources: bool = False
) -> list[tuple[Task, Domain]]:
    """Resolve a selector to (task, domain) pairs; raises ValueError naming what matched nothing.

    ThinkingBox domains among the result get `tb_servers` and `tb_no_sources` (drop the init configuration's
    knowledge-base `sources`)."""
    cache: list[list[tuple[Task, Domain]]] = []

    def universe() -> list[tuple[Task, Domain]]:
        if not cache:
            cache.append(iter_tasks(domains))
        return cache[0]

    chosen: dict[str, tuple[Task, Domain, str]] = {}
    for part in [p.strip() for p in selector.split(",") if p.strip()]:
        matched = _resolve(part, universe)
        if not matched:
            raise ValueError(f"task selector {part!r} matched no task")
        for t, d in matched:
            if t.id not in chosen:
                chosen[t.id] = (t, d, part)
                continue
            t0, d0, source = chosen[t.id]
            if t0 != t or d0.name != d.name or d0.content_hash != d.content_hash:  # the same task selected twice is fine
                where = "twice by" if source == part else f"by {source!r} and by"
                raise ValueError(
                    f"task id {t.id!r} is defined differently {where} {part!r} (domain {d0.name} and domain {d.name}"
                    f"{', different definitions' if t0 != t else ', different domain files'}): select only one of them"
                )
    pairs = [(t, d) for t, d, _ in chosen.values()]
    if any(p.strip().startswith("thinkingbox:") for p in selector.split(",")):
        from groundstate.worlds.thinkingbox import configure_servers

        configure_servers(pairs, tb_servers, tb_no_sources)
    return pairs


def absolute_selector(selector: str) -> str:
    """`selector` with each part that `select_tasks` reads as a path (a domain folder, a file of task ids) made absolute,
    so that it selects the same tasks from any working directory; every other part (a bundled domain, `pool`, an id
    pattern) as it is, even where a folder of that name happens to exist."""
    parts = [p.strip() for p in selector.split(",") if p.strip()]
    return ",".join(str(Path(p).resolve()) if _is_path(p) else p for p in parts)


def _is_path(part: str) -> bool:
    """Whether `_resolve` reads `part` as a path (in its order: a domain folder first, a data file after the names)."""
    path = Path(part)
    if part.startswith(("tau2:", "thinkingbox:")):
        return False
    if (path / "domain.yaml").exists():
        return True
    named = part in ("pool", "bench", "all") or part in bundled_domains()
    return not named and path.suffix in (".yaml", ".yml", ".json") and path.exists()


def state_graded_only(pairs: list[tuple[Task, Domain]]) -> list[tuple[Task, Domain]]:
    """The pairs whose task is graded by its final state alone: those with reply rubrics (which need an LLM judge, and
    which a path that never sees the reply, such as TRL's `environment_factory`, cannot grade) are left out, in order.
    Raises ValueError when none is left."""
    kept = [(t, d) for t, d in pairs if not t.rubrics]
    if pairs and not kept:
        raise ValueError(f"all {len(pairs)} selected tasks have reply rubrics: none is graded by its final state alone")
    return kept


def _resolve(part: str, universe) -> list[tuple[Task, Domain]]:
    if part.startswith("tau2:"):
        from groundstate.worlds.tau2 import load_tau2, parse_selector

        return load_tau2(*parse_selector(part))  # type: ignore[return-value]
    if part.startswith("thinkingbox:"):
        from groundstate.worlds.thinkingbox import load_thinkingbox, parse_selector

        return load_thinkingbox(*parse_selector(part))  # type: ignore[return-value]
    path = Path(part)
    if _is_path(part) and path.is_dir():
        d = load_domain(str(path))
        return [(t, d) for t in d.tasks]
    if part in ("pool", "bench"):
        return [(t, d) for t, d in universe() if t.split == part]
    if part == "all":
        return universe()
    if part in bundled_domains():
        d = load_domain(part)
        return [(t, d) for t in d.tasks]
    if _is_path(part):
        ids = read_data_file(path)
        if isinstance(ids, dict):
            ids = ids.get("tasks", ids.get("task_ids"))
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise TaskFileError(path, "a task list must be a YAML list of task ids", field="tasks")
        by_id = {t.id: (t, d) for t, d in universe()}
        if any(i.startswith("tau2-") and i not in by_id for i in ids):  # τ² ids (a selection of τ² tasks)
            from groundstate.worlds.tau2 import tau2_tasks_named

            by_id.update(tau2_tasks_named([i for i in ids if i not in by_id]))
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise TaskFileError(path, f"unknown task ids: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}", field="tasks")
        return [by_id[i] for i in ids]
    return [(t, d) for t, d in universe() if fnmatch.fnmatchcase(t.id, part)]
