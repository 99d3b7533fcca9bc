"""`tasks lint`: prove that each task's checks can tell right from wrong.

For every task, on a chosen backend: the gold solution must pass; a no-op agent must fail; and
*mutants* of the gold solution (each write call dropped, duplicated, or with one argument changed)
must be killed. Mutants whose final state differs from gold only in masked columns (volatile or free
text), or whose mutated call the tool refused (atomic calls write nothing when refused), are
*equivalent* and not counted. A mutant that passes with the final state identical to gold is a
*survivor*: the checks cannot see it, and the report says why.

Domains that bring their own environments (`open_environment`, e.g. ThinkingBox tasks served by MCP server
processes) are linted through `groundstate.attempt.play` with the same scripted agents. Their state is
only seen through the server's verdict, so a mutant that passes is a survivor only when its mutated call
succeeded and the call can change state as far as the server's tool list says (`readOnlyHint`). Their
mutants run `ENV_MUTANT_CONCURRENCY` at a time: each attempt owns its environment (its server processes).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from groundstate.agents import make_agent
from groundstate.agents.scripted import ScriptedAgent, ScriptedUser
from groundstate.attempt import play, prepare_domains
from groundstate.episode import run_episode
from groundstate.grading import Verdict, grader_for
from groundstate.state.base import Backend
from groundstate.tasks import Domain, Task
from groundstate.tools.mutate import mutants

ENV_MUTANT_CONCURRENCY = 4


@dataclass
class MutantResult:
    description: str
    outcome: str  # killed | survived | equivalent
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
        return sum(m.outcome != "equivalent" for m in self.mutants)


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
            "mutants_equivalent": sum(len(t.mutants) - t.counted for t in self.tasks),
            "mutant_kill_rate": killed / counted if counted else 1.0,
            "problems": [f"{t.task_id}: {p}" for t in self.tasks for p in t.problems],
            "survivors": [
                {"task_id": t.task_id, "mutant": m.description, "reason": m.reason}
                for t in self.tasks for m in t.mutants if m.outcome == "survived"
            ],
        }

    @property
    def ok(self) -> bool:
        return all(t.gold_pass and t.noop_fail for t in self.tasks)

    def to_json(self) -> dict[str, Any]:
        return {**self.summary(), "per_task": [asdict(t) for t in self.tasks]}


async def _attempt(task: Task, domain: Domain, backend: Backend, agent: ScriptedAgent) -> tuple[Verdict, Any, Any]:
    template = backend.prepare(domain, task.patch)
    sandbox = backend.open(template)
    try:
        traj = await run_episode(task, domain, sandbox, agent, ScriptedUser(task.user.script), offload=False)
        verdict = grader_for(backend).grade(task, sandbox, traj)
        return verdict, traj, sandbox.changes()
    finally:
        sandbox.close()


def lint_task(task: Task, domain: Domain, backend: Backend) -> TaskLint:
    if hasattr(domain, "open_environment"):
        return asyncio.run(_lint_env_task(task, domain, backend))
    return asyncio.run(_lint_task(task, domain, backend))


async def _lint_env_task(task: Task, domain: Any, backend: Backend) -> TaskLint:
    """Lint a task whose domain opens its own environment (see the module docstring)."""
    grader = grader_for(backend)

    async def attempt(agent: ScriptedAgent):
        out = await play(task, domain, agent, ScriptedUser(task.user.script), backend=backend, grader=grader)
        return out.verdict, out.trajectory

    out = TaskLint(task.id, domain.name, gold_pass=False, noop_fail=False)
    gold_v, gold_traj = await attempt(make_agent("scripted:gold", task, domain))
    out.rewards["gold"] = gold_v.state_reward
    out.gold_pass = gold_v.state_reward == 1
    if not out.gold_pass:
        out.problems.append("gold fails: " + (gold_v.system_error or "; ".join(gold_v.reasons)))
        return out
    gold_writes = [c["write"] for c in gold_traj.tool_calls]
    noop_v, _ = await attempt(make_agent("scripted:noop", task, domain))
    out.rewards["noop"] = noop_v.state_reward
    out.noop_fail = noop_v.state_reward == 0
    if not out.noop_fail:
        out.problems.append("no-op passes: " + (noop_v.system_error or "the gold solution changes nothing the checks can see"))
    slots = asyncio.Semaphore(ENV_MUTANT_CONCURRENCY)

    async def bounded(calls: list[dict[str, Any]]):
        async with slots:
            return await attempt(ScriptedAgent(calls))

    cases = mutants([c.model_dump() for c in task.gold], domain.tools)
    outcomes = await asyncio.gather(*(bounded(calls) for _, calls, _ in cases))
    for (description, _, index), (v, traj) in zip(cases, outcomes):
        out.rewards[description] = v.state_reward
        if v.system_error:
            out.problems.append(f"system error on mutant {description}: {v.system_error}")
            continue
        if v.state_reward == 0:
            out.mutants.append(MutantResult(description, "killed", "; ".join(v.reasons)))
            continue
        dropped = description.startswith("drop")
        call = None if dropped or index >= len(traj.tool_calls) else traj.tool_calls[index]
        if call is not None and not call["ok"]:
            out.mutants.append(MutantResult(description, "equivalent", "the tool refused the mutated call, so it wrote nothing"))
        elif not (gold_writes[index] if dropped else call is None or call["write"]):
            out.mutants.append(MutantResult(description, "equivalent", "the server marks the tool read-only: it cannot change the state"))
        elif dropped:
            out.mutants.append(MutantResult(description, "survived", "dropping the call leaves the same final state: the gold call has no visible effect"))
        elif description.startswith("duplicate"):
            out.mutants.append(MutantResult(description, "survived", "the repeated call succeeded without a visible effect (idempotent write, or a read)"))
        else:
            out.mutants.append(MutantResult(description, "survived", "the changed argument does not reach the final state"))
    return out


async def _lint_task(task: Task, domain: Domain, backend: Backend) -> TaskLint:
    out = TaskLint(task.id, domain.name, gold_pass=False, noop_fail=False)
    gold_v, _, _ = await _attempt(task, domain, backend, make_agent("scripted:gold", task, domain))
    out.rewards["gold"] = gold_v.state_reward
    out.gold_pass = gold_v.state_reward == 1
    if not out.gold_pass:
        out.problems.append("gold fails: " + (gold_v.system_error or "; ".join(gold_v.reasons)))
        return out
    noop_v, _, _ = await _attempt(task, domain, backend, make_agent("scripted:noop", task, domain))
    out.rewards["noop"] = noop_v.state_reward
    out.noop_fail = noop_v.state_reward == 0
    if not out.noop_fail:
        out.problems.append("no-op passes: the gold solution changes nothing the checks can see")
    golden_raw = grader_for(backend).golden(task, backend.prepare(domain, task.patch))
    for description, calls, index in mutants([c.model_dump() for c in task.gold], domain.tools):
        v, traj, raw = await _attempt(task, domain, backend, ScriptedAgent(calls))
        out.rewards[description] = v.state_reward
        if v.system_error:
            out.problems.append(f"system error on mutant {description}: {v.system_error}")
            continue
        if v.state_reward == 0:
            out.mutants.append(MutantResult(description, "killed", "; ".join(v.reasons)))
        elif raw.to_json() != golden_raw.to_json():
            out.mutants.append(MutantResult(description, "equivalent", "differs from gold only in masked (volatile or free-text) columns"))
        elif description.startswith("drop"):
            out.mutants.append(MutantResult(description, "survived", "dropping the call leaves the same final state: the gold call has no visible effect"))
        elif index < len(traj.tool_calls) and not traj.tool_calls[index]["ok"]:
            out.mutants.append(MutantResult(description, "equivalent", "the tool refused the mutated call, so it wrote nothing"))
        elif description.startswith("duplicate"):
            out.mutants.append(MutantResult(description, "survived", "the repeated call succeeded without a visible effect (idempotent write)"))
        else:
            out.mutants.append(MutantResult(description, "survived", "the changed argument does not reach the final state"))
    return out


def lint(
    tasks: list[tuple[Task, Domain]],
    backend: Backend,
    workers: int = 1,
    on_done: Callable[[TaskLint], None] | None = None,
) -> LintReport:
    """Lint many tasks; `workers` > 1 runs tasks in threads (useful on PostgreSQL, whose calls wait on the server)."""
    prepare_domains(tasks, backend)  # a schema the server rejects is one error naming the file, not a problem per task
    results: dict[str, TaskLint] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(lint_task, t, d, backend): t.id for t, d in tasks}
        for fut in futures:
            r = fut.result()
            results[r.task_id] = r
            if on_done:
                on_done(r)
    return LintReport(backend.name, [results[t.id] for t, _ in tasks])
