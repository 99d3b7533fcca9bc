"""`groundstate conformance`: the same trajectory gets the same verdict and the same final change set through
every adapter (`groundstate.integrations`) as through `groundstate run`'s attempt path.

For each selected task, the trajectories are lint's: the gold solution, the no-op, and every mutant of gold
(a write call dropped, duplicated or with one argument changed). Each is played as a list of tool calls:

- `run`: `attempt.play` with a scripted agent and the task's scripted user (the reference);
- `trl`: TRL's environment (`integrations.trl`): `reset(**row)`, each tool method called as TRL calls it,
  `get_reward()`;
- `gymnasium`: `groundstate/Text-v0`: `reset`, each call as a `<tool_call>` action, then replies until done;
- `openenv`: the OpenEnv environment a server runs per session: `reset_async`, `call_tool` actions, then
  replies until done.

An adapter agrees when the whole verdict (reward, reasons, row diff, change counts, system error) and the
final change set (read just before grading, by an `AttemptObserver` each path is given through its own API) equal
the reference's. Adapters whose framework is not installed are reported as skipped.

With `fork`, every trajectory is also played forked (`fork`, counted in `forked`): the calls the reference executed
up to the middle one on a fresh environment, which is then forked (`Environment.fork`) and closed; the rest on the
fork, which is graded. Its verdict and change set must equal the reference's, played straight through.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from groundstate.agents.scripted import scripted_agent, scripted_user
from groundstate.agents.toolcall_format import render_tool_call
from groundstate.integrations.loop import run_sync
from groundstate.state.base import Backend
from groundstate.state.changes import ChangeSet
from groundstate.tasks import Task
from groundstate.tools.mutate import mutants
from groundstate.types import EpisodeLimits, ToolCallRequest, Trajectory, Verdict
from groundstate.worlds.attempt import play, prepare_domains
from groundstate.worlds.domain import Domain

ADAPTERS = ("trl", "gymnasium", "openenv")
_FRAMEWORK = {"trl": "trl", "gymnasium": "gymnasium", "openenv": "openenv"}  # the package each adapter's framework is
# adapters that refuse tasks with reply rubrics, and why: their framework gives the environment no final reply to judge
NO_REPLY = {"trl": "TRL's environment_factory gives the environment no final reply to judge"}
# adapters that serve SQL domains only, and why (τ²'s tasks are compared through the others)
# every path's user: the task's script, and the user's own gold calls where the task has some (τ²'s telecom), made when
# the scripted agent hands over after its calls
GOLD_USER = "scripted:gold"
SQL_ONLY = {"trl": "TRL's environment_factory makes each tool a typed method of a SQL domain's tool catalog"}


@dataclass
class Played:
    """What one path made of one trajectory: the verdict and the change set it was graded on."""

    verdict: dict[str, Any]
    changes: list[dict[str, Any]] | None


@dataclass
class Mismatch:
    adapter: str
    task_id: str
    trajectory: str
    field: str  # verdict | changes
    expected: Any
    got: Any


@dataclass
class ConformanceReport:
    adapters: list[str]
    skipped: dict[str, str]  # adapter -> why
    tasks: int = 0
    trajectories: int = 0
    checked: dict[str, int] = field(default_factory=dict)  # adapter -> trajectories compared
    refused: dict[str, dict[str, Any]] = field(default_factory=dict)  # adapter -> {tasks, reason}: rubric tasks it refuses
    mismatches: list[Mismatch] = field(default_factory=list)
    forked: int = 0  # continuations played from a fork (`fork=True`)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_json(self) -> dict[str, Any]:
        return {
            "adapters": self.adapters,
            "skipped": self.skipped,
            "tasks": self.tasks,
            "trajectories": self.trajectories,
            "checked": self.checked,
            "refused": self.refused,
            "mismatches": [m.__dict__ for m in self.mismatches],
            "forked": self.forked,
        }


class _Judged:
    """An `AttemptObserver` that keeps the change set the last graded attempt's verdict judged."""

    def __init__(self) -> None:
        self.changes: ChangeSet | None = None

    def graded(self, task: Task, trajectory: Trajectory, verdict: Verdict, changes: ChangeSet | None) -> None:
        self.changes = changes

    def played(self, verdict: dict[str, Any]) -> Played:
        """What the path made of the attempt just played: its verdict and the change set it was graded on (None if it
        was not graded); the next attempt starts with none."""
        changes, self.changes = self.changes, None
        return Played(verdict, changes.to_json() if changes is not None else None)


Calls = list[dict[str, Any]]


class _Paths:
    """Every path's way of playing a list of tool calls on one task; each adapter's environment is built once
    per task (as a trainer builds it once per run) and reset for every trajectory. Every path is given the same
    observer (`_Judged`), through its own API, to read the change set each verdict judged."""

    def __init__(self, task: Task, domain: Domain, backend: Backend, adapters: list[str]):
        self.task, self.domain, self.backend = task, domain, backend
        self.judged = _Judged()
        self.reference: Trajectory | None = None  # the trajectory the last `run` played
        self.drivers: dict[str, Callable[[Calls], Played]] = {}
        if "trl" in adapters:
            from groundstate.integrations.trl import environment_factory, trl_dataset

            trl_env = environment_factory([(task, domain)], backend=backend, observer=self.judged)[domain.name]()
            row = trl_dataset([(task, domain)])[0]
            self.drivers["trl"] = lambda calls: self._trl(trl_env, row, calls)
        if "gymnasium" in adapters:
            from groundstate.integrations.gymnasium import TextEnv

            gym_env = TextEnv([(task, domain)], backend=backend, user=GOLD_USER, observer=self.judged)
            self.drivers["gymnasium"] = lambda calls: self._gymnasium(gym_env, calls)
        if "openenv" in adapters:
            from groundstate.integrations.openenv import environment_factory as openenv_factory

            # the whole verdict, compared
            session = openenv_factory([(task, domain)], backend, user=GOLD_USER, reveal_verdict=True, observer=self.judged)()
            self.drivers["openenv"] = lambda calls: run_sync(self._openenv(session, calls))

    def run(self, calls: Calls) -> Played:
        async def attempt() -> Played:
            user = scripted_user(self.task)
            agent = scripted_agent(calls, self.task, "Done.")  # what every adapter's driver says last
            out = await play(self.task, self.domain, agent, user, backend=self.backend, observer=self.judged)
            self.reference = out.trajectory
            return self.judged.played(out.verdict.to_json())

        return run_sync(attempt())

    def forked(self) -> Played:
        """The calls the last `run` executed, replayed up to the middle one on a fresh environment, the rest on its fork
        (the original closed first: the fork stands alone), then the user's own calls (one message, as the scripted
        user makes them), graded as `play` grades (no judge)."""
        trajectory = self.reference
        assert trajectory is not None, "forked() replays the trajectory run() played"
        executed = [(c.name, c.arguments) for c in trajectory.tool_calls]
        users = [ToolCallRequest(f"user_{i + 1}", c.name, c.arguments) for i, c in enumerate(trajectory.user_tool_calls)]
        branch = len(executed) // 2

        async def attempt() -> Played:
            env = await self.domain.open_environment(self.task, self.backend, EpisodeLimits())
            try:
                for name, arguments in executed[:branch]:
                    await env.call_tool(name, arguments)
                fork = await env.fork()
            finally:
                await env.close()
            try:
                for name, arguments in executed[branch:]:
                    await fork.call_tool(name, arguments)
                own = fork.user_tools()
                if users and own is not None:
                    await own.act(users)
                changes = await fork.changes()
                verdict = await fork.grade(trajectory.fork())
            finally:
                await fork.close()
            return Played(verdict.to_json(), changes.to_json() if changes is not None else None)

        return run_sync(attempt())

    def _trl(self, env: Any, row: dict[str, Any], calls: Calls) -> Played:
        env.reset(**row)
        for call in calls:
            getattr(env, call["tool"])(**call["args"])  # as TRL calls a tool: the method of that name, keyword arguments
        env.get_reward()
        return self.judged.played(env.verdict.to_json())

    def _gymnasium(self, env: Any, calls: Calls) -> Played:
        env.reset(options={"task_id": self.task.id})
        done, info = False, {}
        for call in calls:
            _, _, terminated, truncated, info = env.step(render_tool_call(call["tool"], call["args"]))
            done = terminated or truncated
            if done:
                break
        while not done:
            _, _, terminated, truncated, info = env.step("Done.")
            done = terminated or truncated
        return self.judged.played(info["verdict"])

    async def _openenv(self, env: Any, calls: Calls) -> Played:
        from groundstate.integrations.openenv import GroundstateAction

        observation = await env.reset_async(task_id=self.task.id)
        for call in calls:
            observation = await env.step_async(GroundstateAction(type="call_tool", tool_name=call["tool"], arguments=call["args"]))
            if observation.done:
                break
        while not observation.done:
            observation = await env.step_async(GroundstateAction(type="reply", content="Done."))
        return self.judged.played(observation.verdict)


def trajectories(task: Task, domain: Domain) -> list[tuple[str, Calls]]:
    """Lint's trajectories of a task: gold, no-op and every mutant of gold, as lists of tool calls."""
    gold = [c.model_dump() for c in task.gold]
    return [("gold", gold), ("noop", [])] + [(m.description, m.calls) for m in mutants(gold, domain.tools)]


def conformance(
    tasks: list[tuple[Task, Domain]],
    backend: Backend,
    adapters: list[str] | None = None,
    on_task: Callable[[Task], None] | None = None,
    fork: bool = False,
) -> ConformanceReport:
    """Play every trajectory of every task through `groundstate run`'s path and each adapter (every one for None, none
    for []), and with `fork` also forked at its middle call; report mismatches.

    SQL domains and τ²'s (`worlds.tau2`; the fork replays the user's own calls too). A task with reply rubrics is
    compared through the adapters that can see a final reply (its verdict is unjudged on every path); those that cannot
    (`NO_REPLY`) refuse it, as those that serve SQL domains only (`SQL_ONLY`) refuse τ²'s, counted in `refused`."""
    wanted = list(ADAPTERS if adapters is None else adapters)
    unknown = [a for a in wanted if a not in ADAPTERS]
    if unknown:
        raise ValueError(f"unknown adapter(s) {', '.join(unknown)}: choose from {', '.join(ADAPTERS)}")
    skipped = {a: f"{_FRAMEWORK[a]} is not installed" for a in wanted if importlib.util.find_spec(_FRAMEWORK[a]) is None}
    active = [a for a in wanted if a not in skipped]
    from groundstate.worlds.tau2 import RemoteTau2Domain, Tau2Domain

    for task, domain in tasks:
        if not isinstance(domain, (Domain, Tau2Domain, RemoteTau2Domain)):
            raise ValueError(f"task {task.id}: conformance covers SQL domains and τ²'s; {type(domain).__name__} is neither")
    prepare_domains([d for _, d in tasks], backend)
    report = ConformanceReport(active, skipped, checked={a: 0 for a in active})
    for task, domain in tasks:
        why = {a: NO_REPLY[a] for a in active if task.rubrics and a in NO_REPLY}
        why |= {a: SQL_ONLY[a] for a in active if not isinstance(domain, Domain) and a in SQL_ONLY}
        here = [a for a in active if a not in why]
        for adapter in sorted(why):
            entry = report.refused.setdefault(adapter, {"tasks": 0, "reason": why[adapter]})
            entry["tasks"] += 1
            if why[adapter] not in entry["reason"]:
                entry["reason"] += f"; {why[adapter]}"
        paths = _Paths(task, domain, backend, here)
        report.tasks += 1
        for name, calls in trajectories(task, domain):
            report.trajectories += 1
            expected = paths.run(calls)
            for adapter in [*here, "fork"] if fork else here:
                got = paths.forked() if adapter == "fork" else paths.drivers[adapter](calls)
                if adapter == "fork":
                    report.forked += 1
                else:
                    report.checked[adapter] += 1
                for field_name in ("verdict", "changes"):
                    if getattr(got, field_name) != getattr(expected, field_name):
                        report.mismatches.append(
                            Mismatch(adapter, task.id, name, field_name, getattr(expected, field_name), getattr(got, field_name))
                        )
        if on_task is not None:
            on_task(task)
    return report
