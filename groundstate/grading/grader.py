"""The grader: final state vs golden state, plus the task's extra checks, gives a `Verdict`.

The golden change set comes from replaying the task's gold tool calls on a fresh sandbox (cached per
task and backend). An attempt passes iff its change set equals the golden one after normalisation
(volatile columns masked, free text by presence, the generated keys of inserted rows matched up whatever order they
were given in: `align_inserted`) and every extra SQL check holds. The verdict never
looks at the path the agent took; only reply rubrics (judged elsewhere) read the final reply. Any
failure of the infrastructure or of the grader itself is a *system error*, never a 0.
"""

from __future__ import annotations

import threading
import traceback
import weakref
from typing import Any

from groundstate.state.base import Backend, Sandbox, Template
from groundstate.state.changes import ChangeSet, align_inserted, canon_value, diff
from groundstate.tasks import Task
from groundstate.types import Judge, Trajectory, Verdict, system_error

CHECK_TIME_LIMIT_S = 10.0  # a task check that runs longer (e.g. an unbounded recursive CTE) is a system error, not a hang


class GoldReplayError(RuntimeError):
    """The gold solution does not run: the task is broken, not the agent."""


def replay(sandbox: Sandbox, calls: list[dict[str, Any]]) -> list[tuple[bool, str]]:
    """Run tool calls in order on a sandbox; returns (ok, result) per call."""
    tools = sandbox.template.domain.tools
    return [(r.ok, r.content) for r in (tools.call(sandbox.connection, c["tool"], c["args"]) for c in calls)]


class Grader:
    """Grades attempts of tasks on one backend; caches each task's golden change set."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self._golden: dict[tuple[str, str], ChangeSet] = {}
        self._lock = threading.Lock()

    def cached(self, task: Task, template: Template) -> ChangeSet | None:
        """The task's golden change set if it was computed already, else None."""
        with self._lock:
            return self._golden.get((template.key, task.fingerprint()))

    def golden(self, task: Task, template: Template) -> ChangeSet:
        """The raw golden change set of a task: its gold calls replayed on a fresh sandbox."""
        key = (template.key, task.fingerprint())
        cached = self.cached(task, template)
        if cached is not None:
            return cached
        with self.backend.open(template) as sandbox:
            results = replay(sandbox, [c.model_dump() for c in task.gold])
            failed = [(i, r) for i, (ok, r) in enumerate(results) if not ok]
            if failed:
                i, r = failed[0]
                raise GoldReplayError(f"gold call {i} ({task.gold[i].tool}) of task {task.id} failed: {r}")
            golden = sandbox.changes()
        with self._lock:
            self._golden[key] = golden
        return golden

    def grade(self, task: Task, sandbox: Sandbox, trajectory: Trajectory | None = None, judge: Judge | None = None) -> Verdict:
        """Verdict of an attempt from its sandbox's final state (and, for rubric tasks, a judge of the reply)."""
        try:
            norm = sandbox.normaliser
            expected = self.golden(task, sandbox.template).masked(norm)
            actual_raw = sandbox.changes()
            world = sandbox.template.domain
            actual = align_inserted(expected, actual_raw.masked(norm), world.primary_keys, world.references)
            reasons: list[str] = []
            rows = diff(expected, actual)
            if rows:
                reasons.append(f"final state differs from the golden state in {len(rows)} row(s)")
            for i, check in enumerate(task.checks):
                got = [[canon_value(v) for v in r.values()] for r in sandbox.connection.query_bounded(check.sql, CHECK_TIME_LIMIT_S)]
                want = [[canon_value(v) for v in r] for r in check.expect]
                if got != want:
                    reasons.append(f"check {i} failed: {check.sql!r} returned {got}, expected {want}")
            state_reward = 0 if reasons else 1
            verdict = Verdict(
                reward=state_reward,
                reasons=reasons or ["final state matches the golden state"],
                diff=rows,
                state_reward=state_reward,
                changes=actual_raw.counts(),
            )
        except Exception as e:  # the grader or the database failed: not the agent's fault
            return system_error(f"grader failed: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}", "grader")
        return with_rubrics(task, trajectory, verdict, judge)


def with_rubrics(task: Task, trajectory: Trajectory | None, verdict: Verdict, judge: Judge | None = None) -> Verdict:
    """A final-state verdict completed by the task's reply rubrics. Any source's grader ends with this.

    A failed final state is a 0 whatever the rubrics would say, and the judge is not asked (so the
    verdict is the same with or without `--judge`). A passed state is judged where a judge is given,
    otherwise *unjudged* (reward None, counted apart — never a pass or a fail).
    """
    if verdict.system_error is not None or not task.rubrics:
        return verdict
    if verdict.state_reward != 1:
        verdict.reward = 0
        verdict.reasons.append(f"{len(task.rubrics)} reply rubric(s) not judged: the final state failed")
        return verdict
    if judge is None:
        verdict.reward, verdict.unjudged = None, True
        verdict.reasons.append(f"{len(task.rubrics)} reply rubric(s) unjudged: no judge configured (--judge openai:MODEL[@URL])")
        return verdict
    return judge.apply(task, trajectory, verdict)


_graders: weakref.WeakKeyDictionary[Backend, Grader] = weakref.WeakKeyDictionary()
_graders_lock = threading.Lock()


def grader_for(backend: Backend) -> Grader:
    """The backend's grader (one per backend object, so golden states are computed once)."""
    with _graders_lock:
        grader = _graders.get(backend)
        if grader is None:
            grader = _graders[backend] = Grader(backend)
        return grader


def grade(task: Task, sandbox: Sandbox, trajectory: Trajectory | None = None, judge: Judge | None = None) -> Verdict:
    """Grade one attempt from its sandbox's final state."""
    owner = sandbox.template.owner
    if owner is None:
        return system_error("sandbox has no backend to replay the gold solution on", "grader")
    return grader_for(owner).grade(task, sandbox, trajectory, judge)
