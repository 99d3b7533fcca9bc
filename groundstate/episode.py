"""One attempt: the loop of agent ⇄ tools ⇄ sandbox and agent ⇄ user, with limits and a finish reason.

The first user message is the task's instruction; the system message is the domain's policy. The
agent's tool calls run against the attempt's own sandbox; a text message without tool calls goes to
the user, who replies or ends the conversation. The result is a `Trajectory`.

Limits end an episode with a finish reason, never an exception, and the state reached is graded:
- `max_turns` / `max_tool_calls`: agent turns and executed tool calls;
- `max_tokens`: tokens billed for the agent's turns (input + output, as the endpoint reported them);
  the calls of the turn that crosses the budget are answered with an error and not executed;
- `timeout`: the attempt's wall clock. Waiting for the agent is cut off at the deadline (a slow agent
  is the agent's failure). A tool or user-simulator call that alone outlasts the whole budget is a hang
  of the harness, not of the agent: `EpisodeHang` is raised and `attempt.play` records a system error.
- `max_result_chars` caps the tool result the agent is shown (with a visible marker); the trajectory
  keeps the full result.

Whatever the agent emits is its own doing: every turn passes through `agents.base.well_formed`, so a tool
call with a lone surrogate in its name or arguments is answered with an error, and its reply is kept as valid
text (U+FFFD), never a system error when the conversation is sent back, judged or written.

A tool call that fails because the sandbox's database connection died (a server restart) raises
`SandboxLost`: the agent is not shown a dead database, and the attempt becomes a system error.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from groundstate.agents.base import Agent, Usage, UserSimulator, valid_text, well_formed
from groundstate.state.base import Sandbox
from groundstate.tasks import Domain, Task

FINISH_REASONS = ("agent_done", "user_done", "max_turns", "max_tool_calls", "max_tokens", "timeout")


class EpisodeHang(RuntimeError):
    """A tool, backend or user-simulator call did not return within the attempt's time limit (infrastructure)."""


class SandboxLost(RuntimeError):
    """The sandbox's database connection died under a tool call (a server restart): the attempt cannot be graded."""


def _connection_lost(sandbox: Sandbox | None) -> bool:
    return bool(getattr(getattr(getattr(sandbox, "connection", None), "raw", None), "broken", False))


def truncate_result(content: str, max_chars: int | None) -> str:
    """The tool result as the agent sees it: at most `max_chars` characters, with a marker saying what was cut."""
    if max_chars is None or len(content) <= max_chars:
        return content
    return content[:max_chars] + f"\n…[truncated: showing {max_chars} of {len(content)} characters]"


async def _in_daemon_thread(fn: Any, *args: Any) -> Any:
    """Run a blocking call in a daemon thread and await it (cancellable: a hung call cannot hold up exit)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)

    def target() -> None:
        try:
            value, error = fn(*args), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
            value, error = None, e
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop closed while the call hung: nobody awaits it any more
            pass

    threading.Thread(target=target, name="groundstate-tool", daemon=True).start()
    return await fut


def _call_tool(sandbox: Sandbox, toolset: Any, name: str, arguments: Any) -> Any:
    """One in-process tool call from a worker thread, holding the sandbox open until the call returns."""
    with sandbox.in_use():
        return toolset.call(sandbox.connection, name, arguments)


@dataclass
class Trajectory:
    messages: list[dict[str, Any]]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {name, arguments, ok, result, write}
    finish_reason: str = ""
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    seconds: float = 0.0
    extra: list[dict[str, Any]] = field(default_factory=list)  # per agent turn engine data (e.g. token ids)

    @property
    def final_reply(self) -> str | None:
        """The agent's last text message to the user (what reply rubrics judge)."""
        for m in reversed(self.messages):
            if m["role"] == "assistant" and m.get("content"):
                return m["content"]
        return None

    def to_json(self) -> dict[str, Any]:
        return {"messages": self.messages, "tool_calls": self.tool_calls, "finish_reason": self.finish_reason, "turns": self.turns}


async def run_episode(
    task: Task,
    domain: Domain,
    sandbox: Sandbox | None,
    agent: Agent,
    user: UserSimulator | None = None,
    *,
    max_turns: int | None = None,
    max_tool_calls: int | None = None,
    offload: bool | None = None,
    toolset: Any = None,
    timeout: float | None = None,
    max_result_chars: int | None = None,
    max_tokens: int | None = None,
) -> Trajectory:
    """Run one attempt to its end and return the trajectory. Tool failures are results, never exceptions.

    `offload` runs tool calls in a worker thread (default: on PostgreSQL, whose calls block on the network).
    `toolset` replaces the domain's tools, e.g. an `McpToolset` (async `acall`) for tools served over MCP;
    with such a toolset `sandbox` may be None (the tools' server owns the state).
    `timeout` (seconds), `max_result_chars` and `max_tokens` are the limits described in the module docstring;
    with a timeout, in-process tool calls also run in a thread so that a hung one can be abandoned.
    Raises `EpisodeHang` when a tool or the user simulator hangs.
    """
    max_turns = max_turns or task.limits.max_turns
    max_tool_calls = task.limits.max_tool_calls if max_tool_calls is None else max_tool_calls
    for name, value in (("timeout", timeout), ("max_result_chars", max_result_chars), ("max_tokens", max_tokens)):
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if offload is None:
        offload = sandbox is not None and sandbox.template.backend != "sqlite"
    toolset = domain.tools if toolset is None else toolset
    tools = toolset.openai_schemas()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": domain.system_prompt()},
        {"role": "user", "content": task.instruction},
    ]
    traj = Trajectory(messages)
    start = time.perf_counter()
    deadline = start + timeout if timeout is not None else None
    calls_made = 0

    def expired() -> bool:
        return deadline is not None and time.perf_counter() >= deadline

    async def harness(what: str, awaitable: Any, database: bool = True) -> Any:
        """Await a tool or user-simulator call; one that outlasts the whole attempt budget is a hang."""
        if timeout is None:
            return await awaitable
        try:
            return await asyncio.wait_for(awaitable, timeout)
        except TimeoutError:
            if database and sandbox is not None:  # a tool stuck in a query: ask the database to abandon it
                sandbox.interrupt()
            raise EpisodeHang(f"{what} did not return within the attempt time limit ({timeout:g} s)") from None

    async def run_call(call: Any) -> tuple[bool, str, bool]:
        if call.parse_error:
            return False, f"error: {call.parse_error}", False
        if hasattr(toolset, "acall"):  # tools served over MCP: the server owns the writes
            r = await harness(f"tool {call.name}", toolset.acall(call.name, call.arguments))
        elif timeout is not None:
            r = await harness(f"tool {call.name}", _in_daemon_thread(_call_tool, sandbox, toolset, call.name, call.arguments))
        elif offload:
            r = await asyncio.to_thread(_call_tool, sandbox, toolset, call.name, call.arguments)
        else:
            r = toolset.call(sandbox.connection, call.name, call.arguments)
        if not r.ok and _connection_lost(sandbox):  # not the agent's doing: stop now rather than show it a dead database
            raise SandboxLost(f"the sandbox's database connection was lost during tool {call.name}: {r.content}")
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
            stop: str | None = "max_tokens" if over_tokens else None
            for call in turn.tool_calls:
                if stop is None and calls_made >= max_tool_calls:
                    stop = "max_tool_calls"
                if stop is None and expired():
                    stop = "timeout"
                if stop is not None:
                    # answer every call id so the conversation stays well-formed for chat templates and training
                    limit = {"max_tokens": "token limit", "max_tool_calls": "tool-call limit", "timeout": "time limit"}[stop]
                    messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": f"error: {limit} reached; call not executed"})
                    continue
                calls_made += 1
                ok, content, write = await run_call(call)
                record: dict[str, Any] = {"name": call.name, "arguments": call.arguments, "ok": ok, "result": content, "write": write}
                if max_result_chars is not None and len(content) > max_result_chars:
                    record["truncated"] = True  # the agent saw only the first max_result_chars characters
                traj.tool_calls.append(record)
                messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": truncate_result(content, max_result_chars)})
            if stop is not None:
                traj.finish_reason = stop
                break
            if not turn.done:
                continue
        if turn.done:
            traj.finish_reason = "agent_done"
            break
        if over_tokens:  # no reply to the user: the agent's budget is spent
            traj.finish_reason = "max_tokens"
            break
        reply = await harness("the user simulator", user.reply(messages), database=False) if user is not None else None
        if reply is None:
            traj.finish_reason = "user_done"
            break
        messages.append({"role": "user", "content": valid_text(reply)})  # an LLM user's lone surrogate must not break the next request
    traj.seconds = time.perf_counter() - start
    return traj
