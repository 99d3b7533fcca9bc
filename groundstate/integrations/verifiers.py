"""groundstate tasks as a verifiers environment (verifiers 0.4, `verifiers.v1`), rewarded by their final-state verdicts.

    vf-eval groundstate-verifiers --env.taskset.tasks kiosk --model M --client.base-url URL \\
        --client.api-key-var OPENAI_API_KEY --env.agent.runtime.type subprocess --no-push

or in Python `load_environment(tasks="kiosk")` (a `vf.Env`). The taskset id `groundstate-verifiers` is the
top-level module `groundstate_verifiers`, which exports the three classes below (verifiers finds a taskset, its
default harness and its env by what a module's `__all__` exports).

What goes where:

- `GroundstateTaskset` is a task selection (`--env.taskset.tasks`, the `--tasks` syntax of `groundstate run`); a
  task's data is its domain's reference and its id (a spawned env-server worker resolves them itself), with the
  instruction as the prompt and the domain's policy as the system prompt;
- `GroundstateHarness` plays the attempt with groundstate's own attempt path (`attempt.play`: a fresh sandbox, the
  task's simulated user, the episode limits, the grader under its bound, the sandbox closed whatever happens),
  its agent the OpenAI-compatible client pointed at verifiers' interception endpoint, so every model call is in
  verifiers' trace under the run's model and sampling;
- the reward `final_state` is the verdict (1.0 or 0.0, read from the final database: a reply alone cannot earn
  it). A system error (the backend failed, a tool hung, the endpoint failed, the grader ran out of time) raises
  `GroundstateError`, so verifiers records the rollout as failed (`ok` false, the error in `errors`), never as a 0.
  Trainers must skip rollouts that are not `ok`: verifiers' own `reward` property reads 0 for them.
- `trace.info["groundstate"]` holds the attempt: verdict (reasons, row diff, change counts), finish reason, tool
  calls.

Options: the harness's (`backend`, `user`, `max-turns`, `max-tool-calls`, `attempt-timeout`, `grade-timeout`) are set on
the command line after naming the harness: `--env.agent.harness.id groundstate-verifiers --env.agent.harness.max-turns
8` (without the id verifiers does not know the harness's fields yet); bad values are refused when the flags are parsed.

Limits: the episode's limits are groundstate's (those options; unset, the task's own and groundstate's defaults).
verifiers' own caps (`--env.agent.max-turns`, token caps) also hold: when one refuses a model call, the agent stops
there and the final state is graded, as verifiers scores its capped rollouts. verifiers' rollout timeout
(`--env.agent.timeout.rollout`) cancels the attempt: its sandbox is closed and the rollout fails with no verdict; to
grade what an agent reached in time, set `attempt-timeout` below it. Tasks with reply rubrics are refused (this path
has no judge).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import verifiers.v1 as vf
from openai import AsyncOpenAI
from pydantic import Field, field_validator

from groundstate.agents import make_user
from groundstate.agents.openai_compat import EndpointError, OpenAIAgent, RetryPolicy
from groundstate.specs import parse_user
from groundstate.state import make_backend
from groundstate.state.base import Backend
from groundstate.types import Agent, AgentTurn, EpisodeLimits
from groundstate.worlds.attempt import Outcome, play
from groundstate.worlds.refs import TaskResolver
from groundstate.worlds.selectors import select_tasks

TASKSET_ID = "groundstate-verifiers"
INFO_KEY = "groundstate"


class GroundstateError(vf.RolloutError):
    """A groundstate system error: infrastructure failed, so the attempt has no verdict (recorded as `groundstate_error`)."""


class GroundstateData(vf.TaskData):
    """One task by reference: the domain's (`Domain.ref()`), the task's id and fingerprint."""

    domain_ref: str
    task_id: str
    fingerprint: str


class GroundstateTask(vf.Task[GroundstateData]):
    @vf.reward
    async def final_state(self, trace: vf.Trace) -> float:
        """The final-state verdict of the attempt the harness played; a system error raises."""
        attempt = trace.info.get(INFO_KEY)
        if attempt is None:
            raise GroundstateError(f"no groundstate attempt was played for task {self.data.task_id}: run it with the harness {TASKSET_ID!r}")
        if attempt.get("stopped"):
            raise GroundstateError(f"task {self.data.task_id}: {attempt['stopped']}")
        verdict = attempt["verdict"]
        if verdict["system_error"] is not None:
            raise GroundstateError(f"task {self.data.task_id}: {verdict['system_error']}")
        if verdict["reward"] is None:
            raise GroundstateError(f"task {self.data.task_id}: the attempt was not judged")
        return float(verdict["reward"])


class GroundstateTasksetConfig(vf.TasksetConfig):
    id: str = TASKSET_ID
    tasks: str = "bench"
    """Which tasks: the `--tasks` syntax of `groundstate run` (a domain, a split, ids, a folder, `all`)."""

    @field_validator("tasks")
    @classmethod
    def _selects(cls, value: str) -> str:
        """Checked when the flags are parsed, so a bad selection is a config error naming the flag."""
        try:
            pairs = select_tasks(value)
        except (ValueError, KeyError, OSError) as e:
            raise ValueError(f"--env.taskset.tasks {value!r}: {e}") from None
        if not pairs:
            raise ValueError(f"--env.taskset.tasks {value!r} selects no tasks")
        return value


class GroundstateTaskset(vf.Taskset[GroundstateTask, GroundstateTasksetConfig]):
    def load(self) -> list[GroundstateTask]:
        out = []
        for task, domain in select_tasks(self.config.tasks):
            if task.rubrics:
                raise ValueError(
                    f"task {task.id} has reply rubrics, which this environment cannot judge: leave rubric tasks out of "
                    f"--env.taskset.tasks, or evaluate them with `groundstate run --judge`"
                )
            data = GroundstateData(
                id=task.id,
                name=task.id,
                prompt=task.instruction,
                system_prompt=domain.system_prompt(),
                domain_ref=domain.ref(),
                task_id=task.id,
                fingerprint=task.fingerprint(),
            )
            out.append(GroundstateTask(data, self.config.task))
        return out


class GroundstateHarnessConfig(vf.HarnessConfig):
    id: str = TASKSET_ID
    backend: str = "sqlite"
    """Where sandboxes live: `sqlite` or `postgres` (DSN from GROUNDSTATE_PG_DSN)."""
    user: str = "scripted"
    """The simulated user: `scripted` (the task's script) or `openai:MODEL[@URL]`."""
    max_turns: int | None = Field(None, gt=0)
    """Agent turns per attempt (unset: the task's own limit); `run --max-turns`."""
    max_tool_calls: int | None = Field(None, ge=0)
    """Tool calls per attempt (unset: the task's own limit)."""
    attempt_timeout: float | None = Field(None, gt=0)
    """Wall-clock seconds per attempt (the agent running out is graded, a hung tool is a system error); `run --attempt-timeout`."""
    grade_timeout: float | None = Field(None, gt=0)
    """Seconds grading may take (unset: groundstate's default bound); running out is a system error."""

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in ("sqlite", "postgres", "postgresql", "pg"):
            raise ValueError(f"unknown backend {value!r}: use sqlite or postgres")
        return value

    @field_validator("user")
    @classmethod
    def _known_user(cls, value: str) -> str:
        parse_user(value)  # raises, naming what is wrong with the spec
        return value


class _UntilCapped:
    """The agent, until one of verifiers' caps refuses a model call: then it stops (the final state is graded)."""

    def __init__(self, agent: Agent, trace: vf.Trace):
        self.agent, self.trace = agent, trace

    async def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        try:
            return await self.agent.act(conversation, tools)
        except EndpointError:
            if self.trace.stop_condition is None:  # a real endpoint failure: a system error
                raise
            return AgentTurn(done=True, extra={"stopped_by": self.trace.stop_condition})


_LOCK = threading.Lock()
_BACKENDS: dict[str, Backend] = {}
_RESOLVER = TaskResolver()


def shared_backend(name: str) -> Backend:
    """One backend per kind for the process: verifiers builds a harness per rollout, and a backend per rollout would
    rebuild every template and golden state each time (and, on PostgreSQL, keep a clone pool and connections each)."""
    with _LOCK:
        if name not in _BACKENDS:
            _BACKENDS[name] = make_backend(name)
        return _BACKENDS[name]


class GroundstateHarness(vf.Harness[GroundstateHarnessConfig]):
    """Plays each rollout with groundstate's attempt path, in process; the model is reached through `endpoint`."""

    APPENDS_SYSTEM_PROMPT = True
    NEEDS_CONTAINER = False
    EXECUTES_CODE = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: GroundstateData,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        task, domain = _RESOLVER.resolve(data.domain_ref, data.task_id)
        if task.fingerprint() != data.fingerprint:
            raise GroundstateError(f"task {data.task_id} changed since the taskset was loaded (its fingerprint differs)")
        cfg = self.config
        limits = EpisodeLimits(max_turns=cfg.max_turns, max_tool_calls=cfg.max_tool_calls, timeout=cfg.attempt_timeout)
        if cfg.grade_timeout is not None:
            limits = dataclasses.replace(limits, grade_timeout=cfg.grade_timeout)
        # retrying is the interception's (`--env.agent.retries`): one request per model call here
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        try:
            agent = _UntilCapped(OpenAIAgent(ctx.model, endpoint, client=client, retry=RetryPolicy(max_retries=0)), trace)
            outcome = await play(task, domain, agent, make_user(cfg.user, task), limits, backend=shared_backend(cfg.backend))
        except asyncio.CancelledError:  # verifiers stopped the rollout (its --env.agent.timeout.rollout): play closed the sandbox
            trace.info[INFO_KEY] = {
                "stopped": "verifiers stopped the rollout before groundstate graded it (its rollout timeout): no verdict. Set "
                "--env.agent.harness.attempt-timeout below verifiers' rollout timeout to grade the state an agent reached in time"
            }
            raise
        finally:
            await client.close()
        trace.info[INFO_KEY] = attempt_info(outcome)
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def attempt_info(outcome: Outcome) -> dict[str, Any]:
    traj = outcome.trajectory
    return {
        "verdict": outcome.verdict.to_json(),
        "finish_reason": traj.finish_reason if traj else None,
        "turns": traj.turns if traj else 0,
        "tool_calls": [{"name": c.name, "arguments": c.arguments, "ok": c.ok, "write": c.write} for c in traj.tool_calls] if traj else [],
    }


def load_environment(tasks: str = "bench", **harness: Any) -> vf.Env:
    """A verifiers env over the `tasks` selection, played by groundstate's harness (options: `GroundstateHarnessConfig`),
    on a local runtime (the harness runs in process; verifiers' default runtime is a remote sandbox)."""
    from verifiers.v1.runtimes import SubprocessConfig

    config = vf.SingleAgentEnvConfig(
        taskset=GroundstateTasksetConfig(tasks=tasks),
        agent=vf.AgentConfig(harness=GroundstateHarnessConfig(**harness), runtime=SubprocessConfig()),
    )
    return vf.load_environment(config)


__all__ = ["GroundstateTaskset", "GroundstateHarness", "GroundstateError", "load_environment"]
