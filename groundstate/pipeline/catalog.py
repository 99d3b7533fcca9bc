"""The task catalogue behind `groundstate tasks list | show | generate`: counts by domain, split and family, one task
in full (with its certificate on request), and task files regenerated from the domains' seeded generators."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import Domain


def count_tasks(pairs: list[tuple[Task, Domain]]) -> dict[tuple[str, str, str], int]:
    """Tasks per (domain, split, family), in that order (a task without a split counts under "")."""
    counts: dict[tuple[str, str, str], int] = {}
    for t, _ in pairs:
        key = (t.domain, t.split or "", t.family)
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


class NoSuchTask(LookupError):
    """No task of the given ones has the id; `near` holds up to three ids close to it."""

    def __init__(self, task_id: str, near: list[str]):
        super().__init__(task_id)
        self.task_id, self.near = task_id, near


def show_task(pairs: list[tuple[Task, Domain]], task_id: str, certify_on: Backend | None = None) -> tuple[Task, Domain, dict[str, Any]]:
    """The task of `pairs` with this id, its domain, and the task as one JSON object: `task` (as its file holds it),
    `fingerprint`, `domain_path`, and with a backend to `certify_on` its `certificate` (with `certified`).
    `NoSuchTask` where no task has the id; `TaskFileError` where the backend rejects the domain's files."""
    found = [(t, d) for t, d in pairs if t.id == task_id]
    if not found:
        raise NoSuchTask(task_id, difflib.get_close_matches(task_id, [t.id for t, _ in pairs], n=3))
    task, dom = found[0]
    data: dict[str, Any] = {
        "task": task.model_dump(mode="json", exclude_defaults=False),
        "fingerprint": task.fingerprint(),
        "domain_path": str(dom.path),
    }
    if certify_on is not None:
        from groundstate.audits.certify import certify

        cert = certify([(task, dom)], [certify_on])[0]
        data["certificate"] = {**asdict(cert), "certified": cert.certified}
    return task, dom, data


@dataclass(frozen=True)
class GenerateJob:
    """What `groundstate tasks generate` asks: these defaults are the command's."""

    domains: tuple[str, ...] = ()  # domain names or folders; none: every bundled domain with a generator
    check: bool = False  # only compare: write nothing, list the files that would change


@dataclass
class Generated:
    """What `generate_task_files` did: the domains it went through, and with `check` the files out of date."""

    domains: list[str]
    stale: list[str]


def generate_task_files(job: GenerateJob, on_written: Callable[[str, Path, int], None] | None = None) -> Generated:
    """Render each domain's task file from its seeded generator (`worlds.domain.render_generated_tasks`); write it,
    calling `on_written(domain, path, tasks)`, or with `job.check` only compare it with the file there. `KeyError` or
    `TaskFileError` for a domain that cannot be loaded, `ValueError` for one without a generator, raised when that
    domain's turn comes (the domains before it are written)."""
    from groundstate.worlds.domain import bundled_domains, load_domain, render_generated_tasks

    names = list(job.domains) or [d for d in bundled_domains() if (load_domain(d).path / "taskgen.py").exists()]
    stale = []
    for name in names:
        dom = load_domain(name)
        if not (dom.path / "taskgen.py").exists():
            raise ValueError(f"domain {name!r} has no task generator: {dom.path / 'taskgen.py'} is missing")
        path, text = render_generated_tasks(dom)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if job.check:
            if current != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if on_written:
            on_written(name, path, text.count("\n- id: "))
    return Generated(names, stale)
