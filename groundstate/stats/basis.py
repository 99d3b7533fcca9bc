"""Which tasks and attempts a figure is computed over (the one rule of `stats.metrics`): per-task counts of clean
attempts, what is set apart (system errors, attempts awaiting a judge), the `basis` task set for a k, and the
completeness a run must have before figures are given."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from groundstate.records import AttemptRecord, latest_per_key, task_set_hash
from groundstate.types import FAULT_KINDS


@dataclass
class TaskCounts:
    task_id: str
    domain: str | None
    family: str | None
    n: int = 0  # clean attempts
    c: int = 0  # successes
    system_errors: int = 0
    unjudged: int = 0
    attempts: set[int] = field(default_factory=set)
    awaits_judge: bool = False  # a rubric task of a run without a judge (`AttemptRecord.awaits_judge`): set apart


@dataclass
class Coverage:
    complete: bool
    n: int  # attempts per task: the highest attempt index + 1 of any task
    missing: list[tuple[str, int]]  # a few of the missing keys (`missing_count` of them in all)
    duplicated: list[tuple[str, int]]
    system_errors: list[tuple[str, int]]
    unequal: dict[str, int]  # task -> clean attempts, where it differs from n
    missing_count: int = 0
    foreign_task_set: bool = False  # the file's task ids are not the set its run selected

    def problems(self) -> list[str]:
        """What the run lacks, a sentence each, naming a few of the keys (`task attempt i`)."""
        out = []
        if self.missing_count:
            out.append(f"{self.missing_count} missing keys, e.g. {_keys(self.missing, self.missing_count)}")
        if self.duplicated:
            out.append(f"{len(self.duplicated)} duplicated keys, e.g. {_keys(self.duplicated)}")
        if self.system_errors:
            out.append(f"{len(self.system_errors)} system errors, e.g. {_keys(self.system_errors)}")
        if self.foreign_task_set:
            out.append(
                "the file's tasks are not the run's selected task set (a task's records are gone, or records of a "
                "task the run did not select were added)"
            )
        if self.unequal:
            shown = ", ".join(f"{t} has {n}" for t, n in list(self.unequal.items())[:5]) + (", …" if len(self.unequal) > 5 else "")
            out.append(f"{len(self.unequal)} tasks without exactly n={self.n} clean attempts, e.g. {shown}")
        return out


def _keys(keys: list[tuple[str, int]], total: int | None = None) -> str:
    """A few attempt keys as a person reads them: `t1 attempt 0, t2 attempt 3, …`."""
    shown = ", ".join(f"{t} attempt {a}" for t, a in keys[:5])
    return shown + (", …" if (total if total is not None else len(keys)) > 5 else "")


def task_counts(records: Iterable[AttemptRecord]) -> dict[str, TaskCounts]:
    """Per task (in task-id order), over the records that count (`results.latest_per_key`): clean attempts, successes,
    system errors, unjudged."""
    out: dict[str, TaskCounts] = {}
    for r in latest_per_key(records).values():
        t = out.setdefault(r.task_id, TaskCounts(r.task_id, r.domain, r.family))
        t.attempts.add(r.attempt)
        t.awaits_judge |= r.awaits_judge
        outcome = r.outcome
        if outcome == "system_error":
            t.system_errors += 1
        elif outcome == "unjudged":
            t.unjudged += 1
        else:
            t.n += 1
            t.c += outcome == "pass"
    # by task id, whatever order the attempts finished in: the bootstrap resamples positions, so the same records
    # give the same intervals only in one order
    return dict(sorted(out.items()))


def coverage(records: list[AttemptRecord]) -> Coverage:
    """Whether every task has the same n clean attempts 0..n−1, each once (unjudged tasks are counted apart)."""
    seen = Counter(r.key for r in records)
    counts = task_counts(records)
    n = max((max(t.attempts) + 1 for t in counts.values()), default=0)
    # n comes from the records (one attempt index of 10**15 makes it that): count the missing keys and name a few,
    # never list every index below n
    missing_count = sum(n - len(t.attempts) for t in counts.values())
    missing = list(itertools.islice(((tid, a) for tid in sorted(counts) for a in _missing_below(counts[tid].attempts, n)), 5))
    duplicated = sorted(key for key, c in seen.items() if c > 1)
    errors = sorted(key for key, r in latest_per_key(records).items() if r.outcome == "system_error")
    unequal = {tid: t.n for tid, t in counts.items() if t.n != n and not t.awaits_judge}
    # a record names its run's selected task set (a hash of the ids): a task with no record left, or one never selected,
    # is invisible to the per-task rules above
    selected = {r.run.tasks for r in records if r.run is not None}
    foreign = len(selected) == 1 and selected != {task_set_hash(list(counts))}
    return Coverage(
        not (missing_count or duplicated or errors or unequal or foreign), n, missing, duplicated, errors, unequal, missing_count, foreign
    )


APART_KINDS = {
    "awaits_judge": "rubric tasks without a judge",
    "no_clean_attempt": "without a clean attempt",
    "fewer_than_k": "with fewer than k clean attempts",
}


@dataclass(frozen=True)
class Basis:
    """What every figure of a run is computed over (metrics, compare, report, select, power, the quickstart): the
    `covered` tasks, each with at least `k` clean attempts, and the tasks set `apart`, each with its kind
    (`APART_KINDS`) and a sentence. A task is set apart when its verdicts wait on a judge nobody gave (a rubric task of
    a judge-less run), when it has no clean attempt, or (an incomplete run) fewer than k; `unjudged` counts the attempts
    of the set-apart rubric tasks that passed on state and wait for the judge."""

    covered: dict[str, TaskCounts]
    apart: dict[str, tuple[str, str]]
    n: int
    k: int

    @property
    def tasks(self) -> int:
        return len(self.covered) + len(self.apart)

    def kinds(self) -> dict[str, int]:
        """Set-apart tasks per kind, in `APART_KINDS` order (kinds with none left out)."""
        seen = Counter(kind for kind, _ in self.apart.values())
        return {kind: seen[kind] for kind in APART_KINDS if seen[kind]}

    def sentence(self) -> str:
        """`201 of 206 tasks (set apart: 5 rubric tasks without a judge)`: the task set, as every figure is labelled."""
        if not self.apart:
            return f"{self.tasks} tasks"
        return f"{len(self.covered)} of {self.tasks} tasks (set apart: {self.apart_text()})"

    def apart_text(self) -> str:
        """`5 rubric tasks without a judge, 1 without a clean attempt` ("" when none is set apart)."""
        return ", ".join(f"{n} {APART_KINDS[kind]}" for kind, n in self.kinds().items())

    def rows(self) -> list[dict[str, str]]:
        return [{"task_id": t, "kind": kind, "reason": why} for t, (kind, why) in self.apart.items()]


def basis(counts: dict[str, TaskCounts], n: int, k: int | None = None) -> Basis:
    """The one rule (`Basis`) over `counts` (`task_counts`) of a run of n attempts per task, for figures up to `k`
    (default n)."""
    k = n if k is None else k
    covered: dict[str, TaskCounts] = {}
    apart: dict[str, tuple[str, str]] = {}
    for tid, t in counts.items():
        if t.awaits_judge:
            waiting = f"{t.unjudged} unjudged (state passed)" + (f", {t.n - t.c} failed on state" if t.n > t.c else "")
            apart[tid] = ("awaits_judge", f"reply rubrics and no judge: {waiting} of {len(t.attempts)} attempts; give --judge to judge them")
        elif t.n == 0:
            apart[tid] = ("no_clean_attempt", f"no clean attempt ({t.system_errors} system errors)")
        elif t.n < k:
            apart[tid] = ("fewer_than_k", f"{t.n} clean attempts, fewer than k={k} ({t.system_errors} system errors)")
        else:
            covered[tid] = t
    return Basis(covered, apart, n, k)


class IncompleteRun(ValueError):
    """A run that is not complete by `coverage`'s rule, refused by every read command unless `--allow-incomplete`."""


def require_complete(records: list[AttemptRecord], verb: str, allow_incomplete: bool = False, name: str = "") -> list[str]:
    """The one rule of every read command (metrics, compare, power, report, select): a run with missing, duplicated or
    system-error keys, or tasks with fewer clean attempts, is refused (`IncompleteRun`, naming what it lacks and both
    ways on: --repair, or --allow-incomplete to `verb` anyway); allowed, it returns the problems for the command to say.
    `name` names the run in the message (`base`, `candidate`)."""
    cov = coverage(records)
    if cov.complete:
        return []
    problems = cov.problems()
    if not allow_incomplete:
        run = f"{name} run" if name else "run"
        raise IncompleteRun(
            f"incomplete {run}: " + "; ".join(problems) + user_fault_note(records)
            + f" — re-run it with --repair to finish it, or use --allow-incomplete to {verb} anyway"
        )  # fmt: skip
    return problems


def _missing_below(attempts: set[int], n: int) -> Iterator[int]:
    """The indices in 0..n−1 that `attempts` lacks, ascending; the next one comes after at most len(attempts) steps."""
    a = 0
    while a < n:
        if a not in attempts:
            yield a
        a += 1


def solved_every_time(t: TaskCounts, n: int) -> bool:
    """Observed n/n: the task has all n clean attempts and passed every one."""
    return t.n == n and t.c == n


def user_simulator_faults(records: Iterable[AttemptRecord]) -> dict[str, dict[str, Any]]:
    """Per LLM user (the records' `user`, `openai:` specs only): `tries`, the `faults` among them
    (`agents.user_audit`: system errors whose text names a fault kind), their `rate` and the count per kind (`kinds`),
    and `unrepaired`, the faults still standing. A try is a record that counts, or an earlier try of its key that a
    fault ended and `--repair` replaced (kept in the new record's `user_faults`), so the rate survives a repair."""
    out: dict[str, dict[str, Any]] = {}
    for r in latest_per_key(records).values():
        if not (r.user or "").startswith("openai:"):
            continue
        earlier = r.user_faults
        now = r.fault
        d = out.setdefault(r.user, {"tries": 0, "faults": 0, "unrepaired": 0, "kinds": Counter()})
        d["tries"] += 1 + len(earlier)
        d["faults"] += len(earlier) + (now is not None)
        d["unrepaired"] += now is not None
        d["kinds"].update(earlier + ([now] if now else []))
    for d in out.values():
        d["rate"] = d["faults"] / d["tries"]
        d["kinds"] = {k: d["kinds"][k] for k in FAULT_KINDS}
    return dict(sorted(out.items()))


def user_fault_note(records: Iterable[AttemptRecord]) -> str:
    """The user-simulator fault rate of each LLM user, as a clause of the refusal of an incomplete run ("" if none)."""
    parts = [
        f"{user}: {d['faults']} of {d['tries']} tries ({d['rate']:.1%}; " + ", ".join(f"{k} {n}" for k, n in d["kinds"].items() if n) + ")"
        for user, d in user_simulator_faults(records).items()
        if d["faults"]
    ]
    return "; user-simulator faults " + "; ".join(parts) if parts else ""
