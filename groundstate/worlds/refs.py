"""Tasks by reference: how another process (a Ray actor, a verl agent-loop worker) finds the driver's task.

Processes never exchange pickled tasks or domains (domains hold tool functions, caches and, for ThinkingBox,
server settings). A task travels as `(domain.ref(), task id)`, with the task's fingerprint and the
domain's content hash where the receiver must prove it loaded the same definition. A reference is:

- a bundled domain: its name (each node has its own install);
- any other domain folder: its absolute path (it must exist on every node);
- a τ² domain: `tau2-ref:` + its name (τ² must be installed on every node);
- ThinkingBox cases: `thinkingbox-ref:` + JSON of how they were loaded (dataset directory, test list, agent,
  servers file, `--tb-no-sources`), all absolute paths.
"""

from __future__ import annotations

import json
import threading

from groundstate.tasks import Task
from groundstate.types import Domain
from groundstate.worlds.domain import load_domain
from groundstate.worlds.tau2.domain import TAU2_REF
from groundstate.worlds.thinkingbox.domain import TB_REF


class TaskResolver:
    """Resolves `(domain reference, task id)` in this process, loading each domain (or ThinkingBox source) once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._domains: dict[str, Domain] = {}
        self._tb: dict[str, dict[str, tuple[Task, Domain]]] = {}

    def resolve(self, ref: str, task_id: str) -> tuple[Task, Domain]:
        if ref.startswith(TAU2_REF):
            from groundstate.worlds.tau2 import tau2_domain

            domain = tau2_domain(ref[len(TAU2_REF) :])
            task = next((t for t in domain.tasks if t.id == task_id), None)
            if task is None:
                raise KeyError(f"task {task_id!r} is not a task of τ² domain {domain.tau2_domain}")
            return task, domain
        if ref.startswith(TB_REF):
            with self._lock:
                cases = self._tb.get(ref)
                if cases is None:
                    cases = self._tb[ref] = _load_thinkingbox(ref)
            if task_id not in cases:
                raise KeyError(f"task {task_id!r} is not among the ThinkingBox cases of {ref[len(TB_REF) :]}")
            return cases[task_id]
        with self._lock:
            domain = self._domains.get(ref)
            if domain is None:
                domain = self._domains[ref] = load_domain(ref)
        return domain.task(task_id), domain


def _load_thinkingbox(ref: str) -> dict[str, tuple[Task, Domain]]:
    from groundstate.worlds.thinkingbox import configure_servers, load_thinkingbox

    spec = json.loads(ref[len(TB_REF) :])
    pairs = load_thinkingbox(spec["dataset"], spec["test_list"], agent=spec["agent"], allow_python=spec["allow_python"])
    configure_servers(pairs, spec["servers"], spec["no_sources"])
    return {t.id: (t, d) for t, d in pairs}
