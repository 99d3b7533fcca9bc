"""One attempt: the loop of agent ⇄ environment and agent ⇄ user, with limits and a finish reason.

The conversation starts from the environment's `initial_messages()` (the domain's policy as the system message,
the task's instruction as the first user message). The agent's tool calls go to the environment's `call_tool`;
a text message without tool calls goes to the user, who replies or ends the conversation. The result is a
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
    task = env.task
    max_turns, max_tool_calls = limits.turns_for(task), limits.tool_calls_for(task)
    timeout, max_result_chars, max_tokens = limits.timeout, limits.max_result_chars, limits.max_tokens
    tools = env.tool_schemas()
    traj = Trajectory(messages=env.initial_messages())
    messages = traj.messages  # the conversation, appended to in place
    start = time.perf_counter()
    deadline = start + timeout if timeout is not None else None
    calls_made = 0

    def expired() -> bool:
        return deadline is not None and time.perf_counter() >= deadline

    async def run_call(call: Any) -> tuple[bool, str, bool]:
        if call.parse_error:
            return False, f"error: {call.parse_error}", False
        r = await env.call_tool(call.name, call.arguments)
        return r.ok, r.content, r.write

    while True:
        if traj.turns >= max_turns:
            traj.finish_reason = "max_turns"
            break
        if expired():
            traj.finish_reason = "timeout"
            break
        if deadline is None:
            turn = await agent.act(messages, tools)
        else:
            try:
                turn = await asyncio.wait_for(agent.act(messages, tools), deadline - time.perf_counter())
            except TimeoutError:  # the agent ran out of time: its failure, graded on the state reached
                traj.finish_reason = "timeout"
                break
        turn = well_formed(turn)  # malformed model output is the agent's failure, never a crash of the harness
        size = reply_chars(turn)
        flooded = size > MAX_REPLY_CHARS
        if flooded:  # the agent's failure: graded on the state reached, and the record keeps a cut, never the flood
            turn = cut_reply(turn, size)
        traj.turns += 1
        traj.usage.add(turn.usage)
        if turn.extra:
            traj.extra.append(turn.extra)
        msg: dict[str, Any] = {"role": "assistant", "content": turn.text or ""}
        if turn.tool_calls:
            msg["tool_calls"] = [c.to_message() for c in turn.tool_calls]
        messages.append(msg)
        over_tokens = max_tokens is not None and traj.usage.input_tokens + traj.usage.output_tokens > max_tokens
        if turn.tool_calls:
            stop: str | None = "max_reply_chars" if flooded else "max_tokens" if over_tokens else None
            for call in turn.tool_calls:
                if stop is None and calls_made >= max_tool_calls:
                    stop = "max_tool_calls"
                if stop is None and expired():
                    stop = "timeout"
                if stop is not None:
                    # answer every call id so the conversation stays well-formed for chat templates and training
                    content = f"error: {LIMIT_NAMES[stop]} reached; {NOT_EXECUTED}"
                    messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
                    continue
                calls_made += 1
                ok, content, write = await run_call(call)
                truncated = max_result_chars is not None and len(content) > max_result_chars  # the agent saw a cut
                # `parser`: which parser read the call from the model's output (`agents.toolcall_format`)
                traj.tool_calls.append(
                    ToolCallRecord(
                        name=call.name, arguments=call.arguments, ok=ok, result=content, write=write, parser=call.parser, truncated=truncated
                    )
                )
                messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": truncate_result(content, max_result_chars)})
            if stop is not None:
                traj.finish_reason = stop
                break
            if not turn.done:
                continue
        if flooded:  # nothing of it reaches the user
            traj.finish_reason = "max_reply_chars"
            break
        if turn.done:
            traj.finish_reason = "agent_done"
            break
        if over_tokens:  # no reply to the user: the agent's budget is spent
            traj.finish_reason = "max_tokens"
            break
        reply = None
        if user is not None:
            reply = await within(
                user.reply(messages), timeout, lambda: EpisodeHang(f"the user simulator did not return within the attempt time limit ({timeout:g} s)")
            )
        refuse_overlong(reply)  # any simulator's: a flood is a system error, never sent to the agent or recorded
        if reply is None:
            traj.finish_reason = "user_done"
            break
        messages.append({"role": "user", "content": valid_text(reply)})  # an LLM user's lone surrogate must not break the next request
    traj.seconds = time.perf_counter() - start
    return traj
