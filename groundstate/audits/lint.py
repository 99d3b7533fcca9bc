"""`tasks lint`: prove that each task's checks can tell right from wrong.

For every task, on a chosen backend: the gold solution must pass; a no-op agent must fail; and
*mutants* of the gold solution (each write call dropped, duplicated, or with one argument changed)
must be killed. Every one of them is a production attempt (`groundstate.worlds.attempt.play`), whatever the
source of the task, so lint exercises the path evaluation and training take.

A mutant that passes is *equivalent* (not counted) or a *survivor* (the checks cannot see it; the report
says why). Where the environment shows its final state (SQL sandboxes: `Environment.changes()`), a passing
mutant whose change set differs from gold's only in masked columns (volatile or free text), or whose mutated
call the tool refused (atomic calls write nothing when refused), is equivalent, and one whose change set is
gold's is a survivor. Where the state is seen only through the verdict (ThinkingBox tasks served by MCP server
processes), a passing mutant whose mutated call the server refused is *refused*; one whose mutated call changed
nothing — the world's state digest (`Environment.state_digest`) the same before and after it, replayed on a fresh
environment — is a *no-op*; neither is counted. Where the world gives no digest, a call the server's tool list
marks read-only (`readOnlyHint`) cannot change state and is not counted either. Only a mutant whose call changed
the state and still passed is a survivor. A task's mutants run `within_task(backend)` at a time (each attempt owns its
environment): `MUTANT_CONCURRENCY` on SQLite, one on a server backend, where the tasks run in parallel instead.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from groundstate.agents.scripted import ScriptedAgent, make_scripted_agent, scripted_agent, scripted_user
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.tools.mutate import Mutant, mutants
from groundstate.types import Domain
from groundstate.worlds.attempt import Outcome, play, prepare_domains

MUTANT_CONCURRENCY = 4


def within_task(backend: Backend) -> int:
    """How many attempts of one task an audit plays at once on `backend`: `MUTANT_CONCURRENCY`, but one on a server
    backend, whose every attempt of a task in flight at once needs a clone of its own (a CREATE DATABASE, tens of
    milliseconds, against a few for a pooled clone reused); there the tasks run in parallel instead."""
    return MUTANT_CONCURRENCY if backend.name == "sqlite" else 1


# killed and survived are counted; equivalent (same state as gold's but for masked columns), refused (the tool
# refused the mutated call) and no-op (the mutated call changed nothing) are not
MutantOutcome = Literal["killed", "survived", "equivalent", "refused", "no-op"]
COUNTED: frozenset[str] = frozenset({"killed", "survived"})


@dataclass
class MutantResult:
    description: str
    outcome: MutantOutcome
    reason: str


@dataclass
class TaskLint:
    task_id: str
    domain: str
    gold_pass: bool
    noop_fail: bool
    mutants: list[MutantResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    rewards: dict[str, int | None] = field(default_factory=dict)  # trajectory name -> reward (parity checks)

    @property
    def killed(self) -> int:
        return sum(m.outcome == "killed" for m in self.mutants)

    @property
    def counted(self) -> int:
        return sum(m.outcome in COUNTED for m in self.mutants)

    def count(self, outcome: MutantOutcome) -> int:
        return sum(m.outcome == outcome for m in self.mutants)


@dataclass
class LintReport:
    backend: str
    tasks: list[TaskLint]

    def summary(self) -> dict[str, Any]:
        counted = sum(t.counted for t in self.tasks)
        killed = sum(t.killed for t in self.tasks)
        return {
            "backend": self.backend,
            "tasks": len(self.tasks),
            "gold_pass": sum(t.gold_pass for t in self.tasks),
            "noop_fail": sum(t.noop_fail for t in self.tasks),
            "mutants": counted,
            "mutants_killed": killed,
            "mutants_equivalent": sum(t.count("equivalent") for t in self.tasks),
            "mutants_refused": sum(t.count("refused") for t in self.tasks),
            "mutants_noop": sum(t.count("no-op") for t in self.tasks),
            "mutant_kill_rate": killed / counted if counted else 1.0,
            "problems": [f"{t.task_id}: {p}" for t in self.tasks for p in t.problems],
            "survivors": [
                {"task_id": t.task_id, "mutant": m.description, "reason": m.reason} for t in self.tasks for m in t.mutants if m.outcome == "survived"
            ],
        }

    @property
    def ok(self) -> bool:
        return all(t.gold_pass and t.noop_fail for t in self.tasks)

    def to_json(self) -> dict[str, Any]:
        return {**self.summary(), "per_task": [asdict(t) for t in self.tasks]}


def _classify(mutant: Mutant, outcome: Outcome, gold: Outcome, changed: bool | None = None) -> MutantResult | str:
    """A mutant's outcome (see the module docstring), or the problem that kept it from being graded. `changed`: whether
    the mutated call changed the world's state digest (None: not known, or the world gives no digest)."""
    v, traj = outcome.verdict, outcome.trajectory
    if v.system_error:
        return f"system error on mutant {mutant.description}: {v.system_error}"
    if v.state_reward == 0:
        return MutantResult(mutant.description, "killed", "; ".join(v.reasons))
    calls = traj.tool_calls if traj is not None else []
    call = calls[mutant.index] if mutant.kind != "drop" and mutant.index < len(calls) else None
    if outcome.changes is not None and gold.changes is not None:  # the world shows its state: compare it with gold's
        if outcome.changes.to_json() != gold.changes.to_json():
            return MutantResult(mutant.description, "equivalent", "differs from gold only in masked (volatile or free-text) columns")
        if mutant.kind == "drop":
            return MutantResult(mutant.description, "survived", DROP_SURVIVES)
        if call is not None and not call.ok:
            return MutantResult(mutant.description, "refused", REFUSED)
        if mutant.kind == "duplicate":
            return MutantResult(mutant.description, "survived", "the repeated call succeeded without a visible effect (idempotent write)")
        return MutantResult(mutant.description, "survived", CHANGE_SURVIVES)
    # the state is seen only through the verdict: what the calls themselves say, and the state digest around them, decide
    if call is not None and not call.ok:
        return MutantResult(mutant.description, "refused", REFUSED)
    if changed is False:
        return MutantResult(mutant.description, "no-op", NOOP)
    gold_calls = gold.trajectory.tool_calls if gold.trajectory is not None else []
    if changed is None and not (gold_calls[mutant.index].write if mutant.kind == "drop" else call is None or call.write):
        return MutantResult(mutant.description, "no-op", "the server marks the tool read-only: it cannot change the state")
    if mutant.kind == "drop":
        return MutantResult(mutant.description, "survived", DROP_SURVIVES)
    if mutant.kind == "duplicate":
        return MutantResult(mutant.description, "survived", "the repeated call changed the state, yet the checks pass")
    return MutantResult(mutant.description, "survived", CHANGE_SURVIVES)


async def _changed_state(task: Task, domain: Domain, backend: Backend, calls: list[dict[str, Any]], index: int) -> bool | None:
    """Whether `calls[index]`, replayed after `calls[:index]` on a fresh environment, changes the world's state digest;
    None where the world gives no digest."""
    env = await domain.open_environment(task, backend)
    try:
        for call in calls[:index]:
            await env.call_tool(call["tool"], call["args"])
        before = await env.state_digest()
        if before is None:
            return None
        await env.call_tool(calls[index]["tool"], calls[index]["args"])
        return await env.state_digest() != before
    finally:
        await env.close()


DROP_SURVIVES = "dropping the call leaves the same final state: the gold call has no visible effect"
CHANGE_SURVIVES = "the changed argument does not reach the final state"
REFUSED = "the tool refused the mutated call, so it wrote nothing"
NOOP = "the mutated call changed nothing: the world's state digest is the same before and after it"


async def _lint(task: Task, domain: Domain, backend: Backend, concurrency: int) -> TaskLint:
    async def attempt(agent: ScriptedAgent) -> Outcome:
        return await play(task, domain, agent, scripted_user(task), backend=backend, keep_changes=True)

    out = TaskLint(task.id, domain.name, gold_pass=False, noop_fail=False)
    gold = await attempt(make_scripted_agent("scripted:gold", task, domain))
    out.rewards["gold"] = gold.verdict.state_reward
    out.gold_pass = gold.verdict.state_reward == 1
    if not out.gold_pass:
        out.problems.append("gold fails: " + (gold.verdict.system_error or "; ".join(gold.verdict.reasons)))
        return out
    noop = (await attempt(make_scripted_agent("scripted:noop", task, domain))).verdict
    out.rewards["noop"] = noop.state_reward
    out.noop_fail = noop.state_reward == 0
    if not out.noop_fail:
        out.problems.append("no-op passes: " + (noop.system_error or "the gold solution changes nothing the checks can see"))
    slots = asyncio.Semaphore(concurrency)

    async def bounded(m: Mutant) -> Outcome:
        async with slots:
            return await attempt(scripted_agent(m.calls, task))  # the calls judged, not the words

    async def probe(m: Mutant, outcome: Outcome) -> bool | None:
        """For a mutant that passed where the state shows only through the verdict: did its mutated call change it?"""
        v, traj = outcome.verdict, outcome.trajectory
        if v.system_error or v.state_reward != 1 or outcome.changes is not None:
            return None
        if m.kind != "drop" and not (traj is not None and m.index < len(traj.tool_calls) and traj.tool_calls[m.index].ok):
            return None  # refused (or never made): nothing to replay
        async with slots:
            return await _changed_state(task, domain, backend, gold_calls if m.kind == "drop" else m.calls, m.index)

    gold_calls = [c.model_dump() for c in task.gold]
    cases = mutants(gold_calls, domain.tools)
    outcomes = await asyncio.gather(*(bounded(m) for m in cases))
    changed = await asyncio.gather(*(probe(m, o) for m, o in zip(cases, outcomes, strict=True)))
    for m, outcome, moved in zip(cases, outcomes, changed, strict=True):
        out.rewards[m.description] = outcome.verdict.state_reward
        result = _classify(m, outcome, gold, moved)
        if isinstance(result, str):
            out.problems.append(result)
        else:
            out.mutants.append(result)
    return out


def lint_task(task: Task, domain: Domain, backend: Backend, concurrency: int | None = None) -> TaskLint:
    """Lint one task: gold, no-op and every mutant, each a production attempt (`attempt.play`), `concurrency` at a time
    (default: `within_task(backend)`)."""
    return asyncio.run(_lint(task, domain, backend, concurrency or within_task(backend)))


def lint(
    tasks: list[tuple[Task, Domain]],
    backend: Backend,
    workers: int = 1,
    on_done: Callable[[TaskLint], None] | None = None,
) -> LintReport:
    """Lint many tasks; `workers` > 1 runs tasks in threads (useful on PostgreSQL, whose calls wait on the server).

    With a bounded sandbox pool (`backend.max_open`), at most as many tasks run at once as the pool can serve their
    mutants (one slot kept for golden replays)."""
    prepare_domains((d for _, d in tasks), backend)  # a schema the server rejects is one error naming the file, not a problem per task
    if backend.max_open is not None:
        workers = min(workers, max(1, (backend.max_open - 1) // within_task(backend)))
    results: dict[str, TaskLint] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(lint_task, t, d, backend): t.id for t, d in tasks}
        for fut in futures:
            r = fut.result()
            results[r.task_id] = r
            if on_done:
                on_done(r)
    return LintReport(backend.name, [results[t.id] for t, _ in tasks])


@dataclass(frozen=True)
class LintJob:
    """What `groundstate tasks lint` asks of `lint_suite`; these defaults are the command's."""

    concurrency: int = 0  # tasks linted at once; 0: 1 on SQLite, 8 on a server backend (whose calls wait on the server)
    out: Path | None = None  # also write the whole report (`LintReport.to_json`) here


def lint_suite(
    tasks: list[tuple[Task, Domain]], backend: Backend, job: LintJob = LintJob(), on_done: Callable[[TaskLint], None] | None = None
) -> LintReport:
    """`lint` at the job's concurrency, its report written to `job.out` where one is given."""
    report = lint(tasks, backend, workers=job.concurrency or (1 if backend.name == "sqlite" else 8), on_done=on_done)
    if job.out:
        job.out.parent.mkdir(parents=True, exist_ok=True)
        job.out.write_text(json.dumps(report.to_json(), indent=1, default=str))
    return report
