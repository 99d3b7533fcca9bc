"""One graded attempt, whatever world it runs in: open an environment, play the episode, grade, always close.

The runner, GRPO rollouts and engine integrations (TRL, verl) all call `play`, so an attempt is played and
graded the same way everywhere. An *environment* is what one attempt runs against:

- native domains: a private sandbox of the task's template on a backend (`SandboxEnvironment`), tools
  called in-process, graded by the backend's `Grader` (change set vs golden change set, checks, rubrics);
- other sources plug in by giving their domain object an async `open_environment(task)` method that
  returns an object with the same three members (`toolset`, `grade`, `close`) — e.g. the ThinkingBox
  bridge, whose tools live in an MCP server process.

Anything that goes wrong outside the agent's control (a backend down, a server that dies, a grader bug)
becomes a system error verdict; the environment is closed in every case.

Grading is bounded on every source by `grade_timeout` (`--grade-timeout`, default `DEFAULT_GRADE_TIMEOUT_S`):
the golden replay of a native task, its state comparison, checks and rubric judging; a ThinkingBox case's
effects and its test function in ThinkingBox's worker. Running out is a system error (`GradingTimeout`),
never a verdict on the agent; work that can be stopped (a worker process, an MCP request) is stopped.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Protocol

from groundstate.agents.base import Agent, UserSimulator
from groundstate.episode import Trajectory, run_episode
from groundstate.grading import Grader, Verdict, system_error
from groundstate.state.base import Backend, Sandbox
from groundstate.tasks import Domain, Task, TaskFileError


DEFAULT_GRADE_TIMEOUT_S = 300.0


class GradingTimeout(RuntimeError):
    """Grading ran past its bound (`grade_timeout`): a system error, never the agent's failure."""


async def bounded(awaitable: Any, seconds: float | None, what: str) -> Any:
    """Await `awaitable` (cancelled when it runs out); raise `GradingTimeout` naming `what` after `seconds`."""
    try:
        async with asyncio.timeout(seconds) as scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise GradingTimeout(f"{what} ran past the grading bound of {seconds:g} s (--grade-timeout)") from None
        raise


class Environment(Protocol):
    """What one attempt runs against. `toolset` None means the domain's own tools on `sandbox`."""

    sandbox: Sandbox | None
    toolset: Any
    offload: bool

    async def grade(self, task: Task, trajectory: Trajectory, judge: Any = None) -> Verdict: ...

    async def close(self) -> None: ...


class SandboxEnvironment:
    """A native domain: one private sandbox of the task's template, graded against the golden change set."""

    toolset = None

    def __init__(self, sandbox: Sandbox, grader: Grader, offload: bool):
        self.sandbox = sandbox
        self.grader = grader
        self.offload = offload

    @classmethod
    async def open(cls, task: Task, domain: Domain, backend: Backend, grader: Grader,
                   grade_timeout: float | None = DEFAULT_GRADE_TIMEOUT_S) -> "SandboxEnvironment":
        offload = backend.name != "sqlite"  # PostgreSQL calls block on the network: keep them off the event loop
        # The golden state (cached per task) is computed before the attempt takes its sandbox: replaying gold
        # needs a sandbox of its own, and an attempt that held one while waiting for another could deadlock a
        # bounded pool (every slot held by an attempt waiting to grade). It is grading, so it runs under the
        # grading bound, in a thread so that the bound can fire (a replay past it finishes there, unawaited).
        if offload:
            template = await asyncio.to_thread(backend.prepare, domain, task.patch)
        else:
            template = backend.prepare(domain, task.patch)
        await bounded(asyncio.to_thread(grader.golden, task, template), grade_timeout, f"the golden replay of {task.id}")
        sandbox = await asyncio.to_thread(backend.open, template) if offload else backend.open(template)
        return cls(sandbox, grader, offload)

    async def grade(self, task: Task, trajectory: Trajectory, judge: Any = None) -> Verdict:
        # in a thread on every backend, so that `play`'s grading bound can fire while the grader works; the grader
        # holds the sandbox (`in_use`), so a close at the bound interrupts it and releases the sandbox only after it
        return await asyncio.to_thread(self._grade, task, trajectory, judge)

    def _grade(self, task: Task, trajectory: Trajectory, judge: Any) -> Verdict:
        with self.sandbox.in_use():
            return self.grader.grade(task, self.sandbox, trajectory, judge)

    async def close(self) -> None:
        if self.offload:
            await asyncio.to_thread(self.sandbox.close)
        else:
            self.sandbox.close()


def prepare_domains(pairs: list[tuple[Task, Any]], backend: Backend) -> None:
    """Build the base of every native domain among `pairs` on `backend`, before any attempt is played.

    A schema the server rejects or seed rows that do not load raise `TaskFileError` naming the file here,
    once, instead of making every attempt a system error (and leaving a half-built database behind).
    Any other failure is the infrastructure's (a server that is down): it is left to the attempts, which
    record it as a system error to repair, as ever. Domains that open their own environments have no base.
    """
    seen: set[int] = set()
    for _, domain in pairs:
        if isinstance(domain, Domain) and id(domain) not in seen:
            seen.add(id(domain))
            try:
                backend.prepare(domain)
            except TaskFileError:
                raise
            except Exception:  # noqa: BLE001 - not the domain's fault: each attempt meets it and records a system error
                pass


async def open_environment(task: Task, domain: Any, backend: Backend, grader: Grader,
                           grade_timeout: float | None = DEFAULT_GRADE_TIMEOUT_S) -> Environment:
    opener = getattr(domain, "open_environment", None)
    if opener is not None:
        return await opener(task)
    return await SandboxEnvironment.open(task, domain, backend, grader, grade_timeout)


@dataclass
class Outcome:
    trajectory: Trajectory | None
    verdict: Verdict
    timings: dict[str, float] = field(default_factory=dict)


async def play(
    task: Task,
    domain: Any,
    agent: Agent,
    user: UserSimulator | None,
    *,
    backend: Backend,
    grader: Grader,
    judge: Any = None,
    max_turns: int | None = None,
    max_tool_calls: int | None = None,
    timeout: float | None = None,
    max_result_chars: int | None = None,
    max_tokens: int | None = None,
    grade_timeout: float | None = DEFAULT_GRADE_TIMEOUT_S,
) -> Outcome:
    """Open the task's environment, run the episode, grade it and close the environment, whatever happens.

    `timeout`, `max_result_chars` and `max_tokens` are the episode limits of `run_episode`: hitting one
    is a finish reason and the state reached is graded; a hung tool or user simulator is a system error.
    `grade_timeout` bounds grading (see the module docstring); None leaves it unbounded.
    """
    started = time.perf_counter()
    timings: dict[str, float] = {}
    traj: Trajectory | None = None
    env: Environment | None = None
    try:
        t0 = time.perf_counter()
        env = await open_environment(task, domain, backend, grader, grade_timeout)
        timings["sandbox_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        traj = await run_episode(task, domain, env.sandbox, agent, user, max_turns=max_turns, max_tool_calls=max_tool_calls,
                                 offload=env.offload, toolset=env.toolset, timeout=timeout, max_result_chars=max_result_chars,
                                 max_tokens=max_tokens)
        timings["episode_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        verdict = await bounded(env.grade(task, traj, judge), grade_timeout, f"grading {task.id}")
        timings["grade_s"] = time.perf_counter() - t0
    except GradingTimeout as e:
        verdict = system_error(str(e))
    except Exception as e:  # endpoint down, database gone, a bug: never the agent's failure
        verdict = system_error(f"{type(e).__name__}: {e}")
        verdict.reasons.append(traceback.format_exc(limit=4))
    finally:
        if env is not None:
            try:
                await env.close()
            except Exception:  # noqa: BLE001 - a failed release must not hide the attempt's result
                pass
    timings["total_s"] = time.perf_counter() - started
    return Outcome(traj, verdict, timings)
