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

import asyncio
import contextlib
import hashlib
import json
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from groundstate.agents.openai_compat import EndpointError
from groundstate.agents.scripted import scripted_agent, scripted_user
from groundstate.agents.user_audit import UserSimulatorFault
from groundstate.agents.user_cache import early_stop_fault, provoked_findings
from groundstate.deadlines import GradingTimeout, bounded
from groundstate.grading.judge import JudgeError
from groundstate.state.base import Backend, ForkUnsupported
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
    Usage,
    UserSimulator,
    Verdict,
    system_error,
)
from groundstate.worlds.episode import Episode


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
    usage: Usage = field(default_factory=Usage)  # the tokens the agent's turns billed: a system error's too (no trajectory)


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


def failed(e: Exception) -> Verdict:
    """The system-error verdict of an attempt that `e` ended before its grading came back (called in the handler):
    the golden replay out of its bound, an LLM user that broke its persona (the user's failure), anything else."""
    if isinstance(e, GradingTimeout):  # the golden replay ran out of its bound (`SqlEnvironment.open`)
        return system_error(str(e), "time_limit")
    if isinstance(e, UserSimulatorFault):  # the LLM user broke its persona (`agents.user_audit`): not the agent's failure
        verdict = system_error(str(e), "user_fault", e.kind)
        if e.reply is not None:
            verdict.reasons.append(f"the user's whole reply: {e.reply!r}")
        return verdict
    return crashed(e)


def _user_notes(verdict: Verdict, user: UserSimulator | None) -> Verdict:
    """The verdict with what the user's side says about the attempt: a user that walked away from an unfinished task
    (its failure: a system error), and findings the agent's own messages provoked (graded as they stand)."""
    early = early_stop_fault(user)
    if early is not None and verdict.system_error is None:
        if verdict.state_reward == 0:  # the user walked away from an unfinished task: its failure, not the agent's
            verdict = system_error(f"{early}; the final state fails, so the task was left undone by the user", "user_fault", early.kind)
        else:
            verdict.reasons.append(f"the user ended the conversation when asked for a fact, after the task was done: {early.detail}")
    verdict.reasons.extend(provoked_findings(user))  # graded as it stands: the agent's own message asked for it
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
    episode: Episode | None = None
    try:
        t0 = time.perf_counter()
        env = await domain.open_environment(task, backend, limits)
        timings["sandbox_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        episode = Episode(env, agent, user, limits)
        reason = await episode.run()
        assert reason is not None  # only a pause returns None
        traj = episode.finish(reason)
        timings["episode_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        verdict = await grade_bounded(env, traj, limits, judge, observer)
        timings["grade_s"] = time.perf_counter() - t0
        # past the grading bound the grader's thread may still be reading the sandbox: a second reader on its connection
        # (SQLite's is shared by both threads) can deadlock the two, so the state is not read again
        if keep_changes and verdict.error_kind != "time_limit":
            changes = await env.changes()
    except Exception as e:  # endpoint down, database gone, a bug: never the agent's failure
        verdict = failed(e)
    finally:
        if env is not None:
            with contextlib.suppress(Exception):  # a failed release must not hide the attempt's result
                await env.close()
    verdict = _user_notes(verdict, user)
    if blame and traj is not None and verdict.system_error is None and verdict.state_reward == 0:
        t0 = time.perf_counter()  # after the attempt's sandbox is released: the replay takes a fresh one
        try:
            verdict.blame = await domain.blame(task, backend, traj, limits)
        except Exception as e:  # noqa: BLE001 - blame explains a verdict; failing to find it never changes one
            verdict.blame = Blame(kind="unavailable", reason=f"{type(e).__name__}: {e}")
        timings["blame_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - started
    return Outcome(traj, verdict, timings, changes, episode.traj.usage if episode is not None else Usage())


@dataclass
class Tree:
    """The attempts of `play_tree`: `outcomes`, one per branch, each the outcome of one whole attempt (its trajectory
    holds the shared prefix and its own continuation; its `total_s` counts its continuation and grading alone), and
    `prefix`, the shared part as it stood at the branch point with `prefix_s`, the seconds it took (opening included).
    `prefix` is None where there was no branch point: the attempt ended before it (`outcomes` then holds that one
    attempt, played to its end and graded) or failed before it (every branch gets its system error)."""

    outcomes: list[Outcome]
    prefix: Trajectory | None = None
    prefix_s: float = 0.0


Brancher = Callable[[Agent, UserSimulator | None], tuple[Agent, UserSimulator | None]]


async def play_tree(
    task: Task,
    domain: Domain,
    agent: Agent,
    user: UserSimulator | None,
    branches: Brancher,
    width: int,
    branch_turn: int,
    limits: EpisodeLimits = EpisodeLimits(),
    *,
    backend: Backend,
    judge: Judge | None = None,
) -> Tree:
    """Attempts that share a prefix: `agent` and `user` play the task's first `branch_turn` agent turns once; the
    environment is then forked (`Environment.fork`) into `width` copies and each continues on its own, with the agent
    and user `branches(agent, user)` makes for it (each called once per branch, after the prefix: copies of the
    prefix's agent and user in their state at the branch point), and is graded as one whole attempt. Every environment
    is closed whatever happens.

    A branch's verdict is what `play` gives the same attempt played straight through: the episode's limits count from
    the attempt's start (`worlds.episode.Episode.branch`), grading and the user's notes are `play`'s. A failure of one
    branch is its own system error; a failure before the branch point is every branch's. A world that cannot fork
    raises `ForkUnsupported` (`groundstate.state.base`): a setting to change, not a verdict."""
    if width < 1 or branch_turn < 1:
        raise ValueError(f"need width >= 1 and branch_turn >= 1, got {width} and {branch_turn}")
    started = time.perf_counter()
    envs: list[Environment] = []
    episode: Episode | None = None
    try:
        try:
            env = await domain.open_environment(task, backend, limits)
            envs.append(env)
            episode = Episode(env, agent, user, limits)
            reason = await episode.run(pause_at=branch_turn)
            if reason is not None:  # over before the branch point: one whole attempt
                traj = episode.finish(reason)
                verdict = await grade_bounded(env, traj, limits, judge)
                return Tree([Outcome(traj, _user_notes(verdict, user), {"total_s": time.perf_counter() - started}, usage=traj.usage)])
            prefix = episode.traj.fork()
            for _ in range(width - 1):  # every fork is taken before any branch moves on; the last branch keeps `env`
                envs.append(await env.fork())
        except ForkUnsupported:
            raise
        except Exception as e:  # noqa: BLE001 - before the branch point: every branch's system error
            verdict = _user_notes(failed(e), user)
            spent = [episode.traj.usage if episode is not None else Usage()] + [Usage()] * (width - 1)  # the prefix's, once
            timing = {"total_s": time.perf_counter() - started}
            return Tree([Outcome(None, verdict.model_copy(deep=True), dict(timing), usage=u) for u in spent])
        prefix_s = time.perf_counter() - started
        outcomes = await asyncio.gather(*(_branch(episode, e, branches, agent, user, limits, judge) for e in [*envs[1:], envs[0]]))
        return Tree(list(outcomes), prefix, prefix_s)
    finally:
        for e in envs:
            with contextlib.suppress(Exception):  # a failed release must not hide the attempts' results
                await e.close()


async def _branch(
    paused: Episode, env: Environment, branches: Brancher, agent: Agent, user: UserSimulator | None, limits: EpisodeLimits, judge: Judge | None
) -> Outcome:
    """One branch of `play_tree` on `env`: built (`branches`), played to its end, graded and closed, as `play` does
    after opening; a branch that cannot be built is its own system error."""
    t0 = time.perf_counter()
    traj: Trajectory | None = None
    run: Episode | None = None
    own_user = user
    try:
        own_agent, own_user = branches(agent, user)
        run = paused.branch(env, own_agent, own_user)
        reason = await run.run()
        assert reason is not None  # only a pause returns None
        traj = run.finish(reason)
        verdict = await grade_bounded(env, traj, limits, judge)
    except Exception as e:  # noqa: BLE001 - never the agent's failure
        verdict = failed(e)
    finally:
        with contextlib.suppress(Exception):
            await env.close()
    usage = run.traj.usage if run is not None else Usage()
    return Outcome(traj, _user_notes(verdict, own_user), {"total_s": time.perf_counter() - t0}, usage=usage)


async def play_calls(
    task: Task,
    domain: Domain,
    calls: list[dict[str, Any]],
    *,
    backend: Backend,
    final_text: str | None = None,
    judge: Judge | None = None,
    keep_changes: bool = False,
) -> Outcome:
    """`play` of a scripted agent that makes `calls` (`{tool, args}`) in order and then says `final_text` (by default
    the task's gold reply, else "Done.": a variation of the calls is then judged by what the calls did, never by the
    words, which some worlds check — τ²'s `communicate_info`), facing the task's scripted user (`agents.scripted.scripted_agent`): how lint's mutants, the
    hacks, the alternatives and certificates play a list of calls."""
    agent = scripted_agent(calls, task, final_text)
    return await play(task, domain, agent, scripted_user(task), backend=backend, judge=judge, keep_changes=keep_changes)


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
