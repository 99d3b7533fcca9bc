"""One graded attempt, whatever world it runs in: open an environment, play the episode, grade, always close.

The runner, lint, GRPO rollouts and engine integrations (TRL, verl) all call `play`, so an attempt is played and
graded the same way everywhere. The world is any `groundstate.types.Domain`: a SQL domain folder opens a private
sandbox on the backend (`SqlEnvironment`), a ThinkingBox scenario starts its MCP server processes; the episode
loop and the grading bound below are the same for both.

Anything that goes wrong outside the agent's control (a backend down, a server that dies, a grader bug, an LLM user
that breaks its persona: `agents.user_audit.UserSimulatorFault`) becomes a system error verdict; the environment is
closed in every case.

Grading is bounded on every source by `limits.grade_timeout` (`--grade-timeout`, default
`DEFAULT_GRADE_TIMEOUT_S`): the golden replay of a SQL task, its state comparison, checks and rubric judging; a
ThinkingBox case's effects and its test function in ThinkingBox's worker. Running out is a system error
(`GradingTimeout`), never a verdict on the agent; work that can be stopped (a worker process, an MCP request) is
stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from groundstate.agents.openai_compat import EndpointError
from groundstate.agents.scripted import ScriptedAgent, ScriptedUser
from groundstate.agents.user_audit import UserSimulatorFault
from groundstate.agents.user_cache import early_stop_fault, provoked_findings
from groundstate.deadlines import GradingTimeout, bounded
from groundstate.grading.judge import JudgeError
from groundstate.state.base import Backend
from groundstate.state.changes import ChangeSet
from groundstate.tasks import Task, TaskFileError
from groundstate.types import (
    Agent,
    AttemptObserver,
    Blame,
    Domain,
    Environment,
    EpisodeHang,
    EpisodeLimits,
    ErrorKind,
    Judge,
    Trajectory,
    UserSimulator,
    Verdict,
    system_error,
)
from groundstate.worlds.episode import run_episode


def prepare_domains(domains: Iterable[Domain], backend: Backend) -> None:
    """Build what every domain among `domains` needs on `backend`, once each, before any attempt is played.

    A schema the server rejects or seed rows that do not load raise `TaskFileError` naming the file here,
    once, instead of making every attempt a system error (and leaving a half-built database behind).
    Any other failure is the infrastructure's (a server that is down): it is left to the attempts, which
    record it as a system error to repair, as ever.
    """
    seen: set[int] = set()
    for domain in domains:
        if id(domain) in seen:
            continue
        seen.add(id(domain))
        try:
            domain.prepare(backend)
        except TaskFileError:
            raise
        except Exception:  # noqa: BLE001 - not the domain's fault: each attempt meets it and records a system error
            pass


@dataclass
class Outcome:
    trajectory: Trajectory | None
    verdict: Verdict
    timings: dict[str, float] = field(default_factory=dict)
    changes: ChangeSet | None = None  # the final change set, where asked for and the environment has one


def error_kind(e: BaseException) -> ErrorKind:
    """Which party an exception that ended an attempt says failed, read from its type (never from its text)."""
    if isinstance(e, EndpointError):
        return "malformed_response" if e.malformed else "endpoint"
    if isinstance(e, UserSimulatorFault):
        return "user_fault"
    if isinstance(e, JudgeError):
        return "judge"
    if isinstance(e, (GradingTimeout, EpisodeHang)):
        return "time_limit"
    return "infrastructure"


def crashed(e: Exception) -> Verdict:
    """The system-error verdict of an attempt that `e` ended: its kind (`error_kind`), its message and where it arose."""
    verdict = system_error(f"{type(e).__name__}: {e}", error_kind(e))
    verdict.reasons.append(traceback.format_exc(limit=4))
    return verdict


async def grade_bounded(
    env: Environment, trajectory: Trajectory, limits: EpisodeLimits, judge: Judge | None = None, observer: AttemptObserver | None = None
) -> Verdict:
    """`env.grade` under the attempt's grading bound; running out, or a grader that fails, is a system error.
    `observer` sees the grading (`AttemptObserver.graded`).

    What every path that grades an environment calls: `play`, and the adapters whose framework runs the
    episode itself (`groundstate.integrations`)."""
    try:
        return await bounded(_graded(env, trajectory, judge, observer), limits.grade_timeout, f"grading {env.task.id}")
    except GradingTimeout as e:
        return system_error(str(e), "time_limit")
    except Exception as e:  # noqa: BLE001 - a grader bug or a database gone: never the agent's failure
        return crashed(e)


async def _graded(env: Environment, trajectory: Trajectory, judge: Judge | None, observer: AttemptObserver | None) -> Verdict:
    if observer is None:
        return await env.grade(trajectory, judge)
    changes = await env.changes()  # read before grading: the state as the agent left it, which the verdict judges
    verdict = await env.grade(trajectory, judge)
    observer.graded(env.task, trajectory, verdict, changes)
    return verdict


async def play(
    task: Task,
    domain: Domain,
    agent: Agent,
    user: UserSimulator | None,
    limits: EpisodeLimits = EpisodeLimits(),
    *,
    backend: Backend,
    judge: Judge | None = None,
    keep_changes: bool = False,
    blame: bool = False,
    observer: AttemptObserver | None = None,
) -> Outcome:
    """Open the task's environment, run the episode, grade it and close the environment, whatever happens.

    `limits` are the episode's (see `groundstate.worlds.episode`) and the grading bound; `keep_changes` also returns the
    environment's final change set (lint compares mutants with gold by it); `blame` (what runs record) then finds
    where a failed final state went wrong (`Domain.blame`, on a fresh world: `Verdict.blame`), which never changes the
    verdict itself. `observer` sees the grading (`AttemptObserver`).
    """
    started = time.perf_counter()
    timings: dict[str, float] = {}
    traj: Trajectory | None = None
    changes: ChangeSet | None = None
    env: Environment | None = None
    try:
        t0 = time.perf_counter()
        env = await domain.open_environment(task, backend, limits)
        timings["sandbox_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        traj = await run_episode(env, agent, user, limits)
        timings["episode_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        verdict = await grade_bounded(env, traj, limits, judge, observer)
        timings["grade_s"] = time.perf_counter() - t0
        if keep_changes:
            changes = await env.changes()
    except GradingTimeout as e:  # the golden replay ran out of its bound (`SqlEnvironment.open`)
        verdict = system_error(str(e), "time_limit")
    except UserSimulatorFault as e:  # the LLM user broke its persona (`agents.user_audit`): the user's failure, not the agent's
        verdict = system_error(str(e), "user_fault", e.kind)
        if e.reply is not None:
            verdict.reasons.append(f"the user's whole reply: {e.reply!r}")
    except Exception as e:  # endpoint down, database gone, a bug: never the agent's failure
        verdict = crashed(e)
    finally:
        if env is not None:
            with contextlib.suppress(Exception):  # a failed release must not hide the attempt's result
                await env.close()
    early = early_stop_fault(user)
    if early is not None and verdict.system_error is None:
        if verdict.state_reward == 0:  # the user walked away from an unfinished task: its failure, not the agent's
            verdict = system_error(f"{early}; the final state fails, so the task was left undone by the user", "user_fault", early.kind)
        else:
            verdict.reasons.append(f"the user ended the conversation when asked for a fact, after the task was done: {early.detail}")
    verdict.reasons.extend(provoked_findings(user))  # graded as it stands: the agent's own message asked for it
    if blame and traj is not None and verdict.system_error is None and verdict.state_reward == 0:
        t0 = time.perf_counter()  # after the attempt's sandbox is released: the replay takes a fresh one
        try:
            verdict.blame = await domain.blame(task, backend, traj, limits)
        except Exception as e:  # noqa: BLE001 - blame explains a verdict; failing to find it never changes one
            verdict.blame = Blame(kind="unavailable", reason=f"{type(e).__name__}: {e}")
        timings["blame_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - started
    return Outcome(traj, verdict, timings, changes)


async def play_calls(
    task: Task,
    domain: Domain,
    calls: list[dict[str, Any]],
    *,
    backend: Backend,
    final_text: str = "Done.",
    judge: Judge | None = None,
    keep_changes: bool = False,
) -> Outcome:
    """`play` of a scripted agent that makes `calls` (`{tool, args}`) in order and then says `final_text`, facing the
    task's scripted user: how lint's mutants, the hacks, the alternatives and certificates play a list of calls."""
    agent = ScriptedAgent(calls, final_text=final_text)
    return await play(task, domain, agent, ScriptedUser(task.user.script), backend=backend, judge=judge, keep_changes=keep_changes)


def task_fingerprint(task: Task, domain: Domain) -> str:
    """The version of a task as an attempt meets it: everything of the task that the agent sees or the grader uses
    (instruction, user, patch, gold, checks, rubrics, limits), its domain's content and the domain's system prompt (the
    policy the agent is told to follow); not tags or grouping labels."""
    body = json.dumps(
        {
            "task": task.model_dump(mode="json", exclude={"tags", "family", "template", "split"}),
            "domain": domain.content_hash,
            "system_prompt": domain.system_prompt(),
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(body.encode()).hexdigest()[:16]
