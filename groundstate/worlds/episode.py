"""One attempt: the loop of agent ⇄ environment and agent ⇄ user, with limits and a finish reason.

The conversation starts from the environment's `initial_messages()` (the domain's policy as the system message,
the task's instruction as the first user message). The agent's tool calls go to the environment's `call_tool`;
a text message without tool calls goes to the user, who replies or ends the conversation (where the world gives
the user tools of its own, `Environment.user_tools`, the user may call them first: the trajectory records those calls
in `user_tool_calls`, and the agent never sees them). The result is a
`Trajectory`. The limits (one `EpisodeLimits`) end an episode with a finish reason, never an exception, and the
state reached is graded:

- `max_turns` / `max_tool_calls`: agent turns and executed tool calls;
- `max_tokens`: tokens billed for the agent's turns (input + output, as the endpoint reported them);
  the calls of the turn that crosses the budget are answered with an error and not executed;
- `timeout`: the attempt's wall clock. Waiting for the agent is cut off at the deadline (a slow agent
  is the agent's failure). A tool or user-simulator call that alone outlasts the whole budget is a hang
  of the harness, not of the agent: `EpisodeHang` is raised (by the environment for its tools) and
  `attempt.play` records a system error.
- `max_result_chars` caps the tool result the agent is shown (with a visible marker); the trajectory
  keeps the full result.
- `types.MAX_REPLY_CHARS` (fixed, not a setting) caps one reply. An agent turn longer than that (its text, tool names
  and arguments together) is a flood of the agent's own making: the episode ends with `max_reply_chars`, nothing in
  the turn is run or sent to the user, and the conversation keeps a cut of it (`cut_reply`: the text and the calls
  that fit, with a marker saying what was dropped), so a record is never a copy of the flood. A user reply longer than
  that is the simulator's fault (`user_audit.refuse_overlong`, a system error) unless the agent's own messages asked
  for it, by the audit's rule (`agents.user_audit`): then the conversation ends there and the state is graded.

Whatever the agent emits is its own doing: every turn passes through `agents.base.well_formed`, so a tool
call with a lone surrogate in its name or arguments is answered with an error, and its reply is kept as valid
text (U+FFFD), never a system error when the conversation is sent back, judged or written.

Anything else the environment raises (`SandboxLost`, a server that died) ends the episode the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

from groundstate.agents.base import valid_text, well_formed
from groundstate.agents.user_audit import refuse_overlong
from groundstate.deadlines import within
from groundstate.types import (
    MAX_REPLY_CHARS,
    Agent,
    AgentTurn,
    Environment,
    EpisodeHang,
    EpisodeLimits,
    ToolCallRecord,
    ToolCallRequest,
    Trajectory,
    UserSimulator,
    UserToolBatch,
    UserTools,
)

NOT_EXECUTED = "call not executed"  # the end of the tool message that answers a call a limit stopped (regrade skips those calls)
LIMIT_NAMES = {"max_reply_chars": "reply length limit", "max_tokens": "token limit", "max_tool_calls": "tool-call limit", "timeout": "time limit"}


def truncate_result(content: str, max_chars: int | None) -> str:
    """The tool result as the agent sees it: at most `max_chars` characters, with a marker saying what was cut."""
    if max_chars is None or len(content) <= max_chars:
        return content
    return content[:max_chars] + f"\n…[truncated: showing {max_chars} of {len(content)} characters]"


def _raw_arguments(call: ToolCallRequest) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False, default=str)


def reply_chars(turn: AgentTurn) -> int:
    """The size of an agent turn as `MAX_REPLY_CHARS` counts it: its text, and each tool call's name and arguments."""
    return len(turn.text or "") + sum(len(c.name) + len(_raw_arguments(c)) for c in turn.tool_calls)


def cut_reply(turn: AgentTurn, size: int) -> AgentTurn:
    """A turn over `MAX_REPLY_CHARS` as the conversation keeps it: its text up to the limit, then the tool calls that
    still fit, whole, in order; a marker at the end of the text says what the turn was and what was left out."""
    text = (turn.text or "")[:MAX_REPLY_CHARS]
    room, kept = MAX_REPLY_CHARS - len(text), []
    for call in turn.tool_calls:
        need = len(call.name) + len(_raw_arguments(call))
        if need > room:
            break
        kept.append(call)
        room -= need
    dropped = len(turn.tool_calls) - len(kept)
    calls = f" and {len(turn.tool_calls)} tool calls" if turn.tool_calls else ""
    left_out = f"; {dropped} tool calls left out" if dropped else ""
    marker = f"\n…[cut: the reply was {size:,} characters{calls}, more than the {MAX_REPLY_CHARS:,} a reply may have{left_out}; none of it was run]"
    return dataclasses.replace(turn, text=text + marker, tool_calls=kept)


async def run_episode(env: Environment, agent: Agent, user: UserSimulator | None = None, limits: EpisodeLimits = EpisodeLimits()) -> Trajectory:
    """Run one attempt against `env` to its end and return the trajectory. Tool failures are results, never exceptions.

    Raises `EpisodeHang` when a tool or the user simulator hangs, and whatever else the environment raises for
    what is not the agent's doing (see the module docstring).
    """
    episode = Episode(env, agent, user, limits)
    reason = await episode.run()
    assert reason is not None  # only a pause returns None
    return episode.finish(reason)


class Episode:
    """One running attempt: its trajectory (whose `messages` are the conversation sent to the agent and the user), the
    limits it runs under, and the tool calls executed so far.

    `run()` plays it to its end (`run_episode`); `run(pause_at=n)` stops it before the agent's turn n + 1 instead, and
    `branch` continues a paused episode on a fork of its environment (`Environment.fork`), with its own agent and user:
    the continuation is the same attempt from there on, limits included (its turns, tool calls and clock count from the
    attempt's start), so a branch's trajectory and verdict are those of one attempt played straight through."""

    def __init__(
        self,
        env: Environment,
        agent: Agent,
        user: UserSimulator | None,
        limits: EpisodeLimits,
        traj: Trajectory | None = None,
        calls_made: int = 0,
        elapsed: float = 0.0,
    ):
        self.env, self.agent, self.user, self.limits = env, agent, user, limits
        self.max_turns, self.max_tool_calls = limits.turns_for(env.task), limits.tool_calls_for(env.task)
        self.timeout, self.max_result_chars, self.max_tokens = limits.timeout, limits.max_result_chars, limits.max_tokens
        self.tools = env.tool_schemas()
        self.traj = traj if traj is not None else Trajectory(messages=env.initial_messages())
        self.messages = self.traj.messages  # the conversation, appended to in place
        self.start = time.perf_counter() - elapsed
        self.deadline = self.start + self.timeout if self.timeout is not None else None
        self.calls_made = calls_made
        self.paused: float | None = None  # when `run(pause_at=...)` paused it
        own = env.user_tools()
        self.user_tools = RecordedUserTools(own, self.traj) if own is not None else None

    def branch(self, env: Environment, agent: Agent, user: UserSimulator | None) -> Episode:
        """A continuation of this paused episode on `env` (a fork of its environment, or the environment itself for
        one of them), with a copy of its trajectory and its counts: independent of this one and of other branches. Its
        clock goes on from the pause: the time spent forking between the pause and the branch is not the attempt's."""
        assert self.paused is not None, "branch a paused episode"
        return Episode(env, agent, user, self.limits, self.traj.fork(), self.calls_made, self.paused - self.start)

    def finish(self, reason: str) -> Trajectory:
        """The trajectory of the ended episode, with its finish reason and duration."""
        self.traj.finish_reason = reason
        self.traj.seconds = time.perf_counter() - self.start
        return self.traj

    def expired(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline

    async def run(self, pause_at: int | None = None) -> str | None:
        """Turns until one of them ends the attempt; returns the finish reason (`FINISH_REASONS`). With `pause_at`,
        returns None instead once `pause_at` agent turns are done and the attempt goes on with the agent's next turn."""
        while True:
            if self.traj.turns >= self.max_turns:
                return "max_turns"
            if self.expired():
                return "timeout"
            if pause_at is not None and self.traj.turns >= pause_at:
                self.paused = time.perf_counter()
                return None
            turn = await self.act()
            if turn is None:  # the agent ran out of time: its failure, graded on the state reached
                return "timeout"
            turn, flooded = self.add_turn(turn)
            usage = self.traj.usage
            over_tokens = self.max_tokens is not None and usage.input_tokens + usage.output_tokens > self.max_tokens
            if turn.tool_calls:
                stop = await self.run_calls(turn.tool_calls, "max_reply_chars" if flooded else "max_tokens" if over_tokens else None)
                if stop is not None:
                    return stop
                if not turn.done:
                    continue
            reason = _reply_ends(flooded, turn.done, over_tokens)
            if reason is not None:
                return reason
            reply = await self.user_reply()
            if reply is None:
                return "user_done"
            self.messages.append({"role": "user", "content": valid_text(reply)})  # an LLM user's lone surrogate must not break the next request

    async def act(self) -> AgentTurn | None:
        """The agent's next turn, or None when the attempt's deadline passed while waiting for it."""
        if self.deadline is None:
            return await self.agent.act(self.messages, self.tools)
        try:
            return await asyncio.wait_for(self.agent.act(self.messages, self.tools), self.deadline - time.perf_counter())
        except TimeoutError:
            return None

    def add_turn(self, turn: AgentTurn) -> tuple[AgentTurn, bool]:
        """Count the turn and add it to the conversation, made well-formed and, past `MAX_REPLY_CHARS`, cut (`cut_reply`);
        returns the turn as kept and whether it was a flood."""
        turn = well_formed(turn)  # malformed model output is the agent's failure, never a crash of the harness
        size = reply_chars(turn)
        flooded = size > MAX_REPLY_CHARS
        if flooded:  # the agent's failure: graded on the state reached, and the record keeps a cut, never the flood
            turn = cut_reply(turn, size)
        self.traj.turns += 1
        self.traj.usage.add(turn.usage)
        if turn.extra:
            self.traj.extra.append(turn.extra)
        msg: dict[str, Any] = {"role": "assistant", "content": turn.text or ""}
        if turn.tool_calls:
            msg["tool_calls"] = [c.to_message() for c in turn.tool_calls]
        self.messages.append(msg)
        return turn, flooded

    async def run_calls(self, calls: list[ToolCallRequest], stop: str | None) -> str | None:
        """Execute a turn's calls in order and answer each with a tool message. From the first call a limit stops (`stop`
        from the start: the whole turn), every call is answered with an error and not executed; returns that limit."""
        for call in calls:
            if stop is None and self.calls_made >= self.max_tool_calls:
                stop = "max_tool_calls"
            if stop is None and self.expired():
                stop = "timeout"
            if stop is not None:
                # answer every call id so the conversation stays well-formed for chat templates and training
                content = f"error: {LIMIT_NAMES[stop]} reached; {NOT_EXECUTED}"
                self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
                continue
            self.calls_made += 1
            record = await self.run_call(call)
            self.traj.tool_calls.append(record)
            shown = truncate_result(record.result, self.max_result_chars)
            self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": shown})
        return stop

    async def run_call(self, call: ToolCallRequest) -> ToolCallRecord:
        """One call executed by the environment (a call the model garbled is answered with its parse error), as recorded."""
        if call.parse_error:
            ok, content, write = False, f"error: {call.parse_error}", False
        else:
            r = await self.env.call_tool(call.name, call.arguments)
            ok, content, write = r.ok, r.content, r.write
        return ToolCallRecord(
            name=call.name,
            arguments=call.arguments,
            ok=ok,
            result=content,
            write=write,
            parser=call.parser,  # which parser read the call from the model's output (`agents.toolcall_format`)
            truncated=self.max_result_chars is not None and len(content) > self.max_result_chars,  # the agent saw a cut
        )

    async def user_reply(self) -> str | None:
        """The user's answer to the agent's text, or None when the user ends the conversation (or there is no user)."""
        reply = None
        if self.user is not None:
            timeout = self.timeout
            reply = await within(
                self.user.reply(self.messages, self.user_tools),
                timeout,
                lambda: EpisodeHang(f"the user simulator did not return within the attempt time limit ({timeout:g} s)"),
            )
        refuse_overlong(reply)  # any simulator's: a flood is a system error, never sent to the agent or recorded
        return reply


class RecordedUserTools:
    """A world's `UserTools` whose calls the trajectory records (`Trajectory.user_tool_calls`), in the order made, and
    where each batch was made (`Trajectory.user_tool_batches`: before the user message to come)."""

    def __init__(self, tools: UserTools, traj: Trajectory):
        self.tools, self.traj = tools, traj

    def schemas(self) -> list[dict[str, Any]]:
        return self.tools.schemas()

    async def act(self, calls: list[ToolCallRequest]) -> list[ToolCallRecord]:
        records = await self.tools.act(calls)
        self.traj.user_tool_calls.extend(records)
        self.traj.user_tool_batches.append(UserToolBatch(at=len(self.traj.messages), calls=len(records)))
        return records


def _reply_ends(flooded: bool, done: bool, over_tokens: bool) -> str | None:
    """Whether a turn that goes to the user ends the attempt instead, and why: a flood (nothing of it reaches the
    user), the agent's declared end, or a spent token budget (no reply to the user)."""
    if flooded:
        return "max_reply_chars"
    if done:
        return "agent_done"
    if over_tokens:
        return "max_tokens"
    return None
