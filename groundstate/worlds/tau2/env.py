"""One attempt's τ² environment: τ²'s own `Environment` of the task's domain, in the task's initial state.

The agent's calls go to τ²'s `Environment.get_response`, exactly as τ²'s orchestrator sends them (its tools, its
error texts); every executed call is logged as the τ² `ToolCall` and `ToolMessage` it was, so that grading can hand
τ²'s evaluators the conversation as τ² would have recorded it (`grading.tau2_messages`). A call whose arguments are
not a JSON object never reaches τ² (τ²'s `ToolCall` cannot hold one): it is an error result and changes nothing.

Where τ²'s domain gives the user tools of its own (telecom: the customer's phone), `user_tools()` runs them for the
user (`Tau2UserTools`): one user message's calls in order, logged as τ² logs them (requestor `user`). τ²'s orchestrator
syncs the two sides after every step (`Environment.sync_tools`: the phone reads the line's state, a paid bill reaches
the billing database); here after every agent call and after each user message's calls, which is every step that
changes a side (agent tools never read the phone, so a turn of several agent calls synced between them reads the
same).

Tools run in a worker thread, bounded by the attempt's time limit: a τ² tool that does not return ends the attempt
with `EpisodeHang`, a system error, and its thread runs on. One that holds Python's lock (retail's `calculate` on
`9**9**9**9`) stops the whole process: which is why τ² runs in a process of its own (`remote`), killed for it.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from groundstate.deadlines import within
from groundstate.tasks import Task
from groundstate.types import EpisodeHang, EpisodeLimits, Judge, ToolCallRecord, ToolCallRequest, ToolResult, Trajectory, Verdict
from groundstate.worlds.tau2.conversation import opening, tau2_messages, to_chat
from groundstate.worlds.tau2.grading import Attempt, GoldState, grade_attempt, start


class Tau2Environment:
    """A τ² environment for one attempt of one τ² task (a `groundstate.types.Environment`); see the module docstring.
    Made by `Tau2Domain.open_environment` with what it needs of the domain: τ²'s system prompt, which tools may write,
    and the task's gold state (computed once per task)."""

    def __init__(
        self,
        task: Task,
        tau2_task: Any,
        env: Any,
        limits: EpisodeLimits,
        *,
        system_prompt: str,
        writes: dict[str, bool],
        schemas: Callable[[], list[dict[str, Any]]],
        gold: Callable[[], GoldState],
        log: list[tuple[Any, Any]] | None = None,
    ):
        self.task, self.tau2_task, self.env, self.limits = task, tau2_task, env, limits
        self.system_prompt, self.writes, self.schemas, self.gold = system_prompt, writes, schemas, gold
        self.log: list[tuple[Any, Any]] = log if log is not None else []  # (τ² ToolCall, τ² ToolMessage) of each executed call

    @classmethod
    def open(cls, task: Task, tau2_task: Any, env: Any, limits: EpisodeLimits = EpisodeLimits(), **domain: Any) -> Tau2Environment:
        """`env` (a fresh τ² environment) set to the task's initial state as τ²'s orchestrator sets it (data, actions,
        history); `domain`: the keywords of the constructor."""
        start(env, tau2_task)
        return cls(task, tau2_task, env, limits, **domain)

    def initial_messages(self) -> list[dict[str, Any]]:
        """τ²'s agent system prompt, then the conversation before the agent's first turn (`conversation.opening`)."""
        return [{"role": "system", "content": self.system_prompt}] + [m for msg in opening(self.tau2_task, self.task) for m in to_chat(msg)]

    def tool_schemas(self) -> list[dict[str, Any]]:
        """τ²'s agent tools in the OpenAI format (the domain's, made once: `Tau2ToolCatalog.openai_schemas`)."""
        return self.schemas()

    async def call_tool(self, name: str, arguments: Any) -> ToolResult:
        if not isinstance(arguments, dict):
            return ToolResult(False, f"error: the arguments of {name} must be a JSON object, not {type(arguments).__name__}")
        from tau2.data_model.message import ToolCall

        call = ToolCall(id=f"gs_{len(self.log) + 1}", name=name, arguments=arguments, requestor="assistant")
        timeout = self.limits.timeout
        message = await within(
            asyncio.to_thread(self._respond, [call]),
            timeout,
            lambda: EpisodeHang(f"τ² tool {name} did not return within the attempt time limit ({timeout:g} s)"),
        )
        return ToolResult(not message[0].error, message[0].content or "", write=self.writes.get(name, False))

    def _respond(self, calls: list[Any]) -> list[Any]:
        """One message's calls answered by τ²'s environment, in order, each logged; then the sides synced (one step)."""
        out = []
        for call in calls:
            message = self.env.get_response(call)
            self.log.append((call, message))
            out.append(message)
        self.env.sync_tools()
        return out

    def user_tools(self) -> Tau2UserTools | None:
        """The user's own tools where τ²'s domain has them (telecom's phone), else None."""
        return Tau2UserTools(self) if self.env.user_tools is not None else None

    async def grade(self, trajectory: Trajectory | None, judge: Judge | None = None) -> Verdict:
        attempt = Attempt(self.task, self.tau2_task, self.env, self.log, len(self.initial_messages()), self.gold)
        return await grade_attempt(attempt, trajectory, judge)

    def conversation(self, trajectory: Trajectory) -> list[Any]:
        """The attempt's conversation in τ²'s message types, as τ²'s orchestrator would have recorded it (what τ²'s
        evaluators read: `conversation.tau2_messages`)."""
        return tau2_messages(self.tau2_task, self.task, self.log, len(self.initial_messages()), trajectory)

    async def changes(self) -> None:
        """None: τ²'s databases are compared by τ²'s hashes (the verdict's diff names what differs)."""
        return None

    async def state_digest(self) -> str:
        """τ²'s own hashes of the agent's and the user's databases."""
        return await asyncio.to_thread(lambda: f"{self.env.get_db_hash()}|{self.env.get_user_db_hash()}")

    async def fork(self) -> Tau2Environment:
        """A deep copy of the live τ² environment and of its call log, independent from here on."""
        return Tau2Environment(
            self.task,
            self.tau2_task,
            copy.deepcopy(self.env),
            self.limits,
            system_prompt=self.system_prompt,
            writes=self.writes,
            schemas=self.schemas,
            gold=self.gold,
            log=list(self.log),
        )

    async def close(self) -> None:
        self.env = None


class Tau2UserTools:
    """The user's own τ² tools in one attempt (a `groundstate.types.UserTools`): τ²'s user-side tools, answered by the
    attempt's τ² environment as its orchestrator answers a user message's calls (logged with requestor `user`, one batch
    per message: `conversation.tau2_messages` rebuilds the message from the calls' ids)."""

    def __init__(self, owner: Tau2Environment):
        self.owner = owner
        self.kit = owner.env.user_tools

    def schemas(self) -> list[dict[str, Any]]:
        return [t.openai_schema for t in self.owner.env.get_user_tools()]

    async def act(self, calls: list[ToolCallRequest]) -> list[ToolCallRecord]:
        from tau2.data_model.message import ToolCall

        owner = self.owner
        batch = 1 + len({c.id.split("_")[1] for c, _ in owner.log if c.requestor == "user"})
        sent, refused = [], {}
        for i, c in enumerate(calls):
            if c.parse_error or not isinstance(c.arguments, dict):
                refused[i] = f"error: {c.parse_error or f'the arguments of {c.name} must be a JSON object'}"
            else:
                sent.append(ToolCall(id=f"user_{batch}_{i + 1}", name=c.name, arguments=c.arguments, requestor="user"))
        timeout = owner.limits.timeout
        answers = iter(
            await within(
                asyncio.to_thread(owner._respond, sent),
                timeout,
                lambda: EpisodeHang(f"τ² user tools did not return within the attempt time limit ({timeout:g} s)"),
            )
        )
        out = []
        for i, c in enumerate(calls):
            if i in refused:
                out.append(ToolCallRecord(name=c.name, arguments=c.arguments, ok=False, result=refused[i], write=False))
                continue
            m = next(answers)
            write = self.kit.tool_type(c.name).value not in ("read", "think") if self.kit.has_tool(c.name) else False
            out.append(ToolCallRecord(name=c.name, arguments=c.arguments, ok=not m.error, result=m.content or "", write=write))
        return out
