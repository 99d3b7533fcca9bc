"""One attempt: the loop of agent ⇄ tools ⇄ sandbox and agent ⇄ user, with limits and a finish reason.

The first user message is the task's instruction; the system message is the domain's policy. The
agent's tool calls run against the attempt's own sandbox; a text message without tool calls goes to
the user, who replies or ends the conversation. The result is a `Trajectory`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from groundstate.agents.base import Agent, Usage, UserSimulator
from groundstate.state.base import Sandbox
from groundstate.tasks import Domain, Task

FINISH_REASONS = ("agent_done", "user_done", "max_turns", "max_tool_calls")


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
) -> Trajectory:
    """Run one attempt to its end and return the trajectory. Tool failures are results, never exceptions.

    `offload` runs tool calls in a worker thread (default: on PostgreSQL, whose calls block on the network).
    `toolset` replaces the domain's tools, e.g. an `McpToolset` (async `acall`) for tools served over MCP;
    with such a toolset `sandbox` may be None (the tools' server owns the state).
    """
    max_turns = max_turns or task.limits.max_turns
    max_tool_calls = task.limits.max_tool_calls if max_tool_calls is None else max_tool_calls
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
    calls_made = 0
    while True:
        if traj.turns >= max_turns:
            traj.finish_reason = "max_turns"
            break
        turn = await agent.act(messages, tools)
        traj.turns += 1
        traj.usage.add(turn.usage)
        if turn.extra:
            traj.extra.append(turn.extra)
        msg: dict[str, Any] = {"role": "assistant", "content": turn.text or ""}
        if turn.tool_calls:
            msg["tool_calls"] = [c.to_message() for c in turn.tool_calls]
        messages.append(msg)
        if turn.tool_calls:
            over = False
            for call in turn.tool_calls:
                if over or calls_made >= max_tool_calls:
                    # answer every call id so the conversation stays well-formed for chat templates and training
                    over = True
                    messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": "error: tool-call limit reached; call not executed"})
                    continue
                calls_made += 1
                if call.parse_error:
                    ok, content, write = False, f"error: {call.parse_error}", False
                elif hasattr(toolset, "acall"):  # tools served over MCP: the server owns the writes
                    r = await toolset.acall(call.name, call.arguments)
                    ok, content, write = r.ok, r.content, r.write
                elif offload:
                    r = await asyncio.to_thread(toolset.call, sandbox.connection, call.name, call.arguments)
                    ok, content, write = r.ok, r.content, r.write
                else:
                    r = toolset.call(sandbox.connection, call.name, call.arguments)
                    ok, content, write = r.ok, r.content, r.write
                traj.tool_calls.append({"name": call.name, "arguments": call.arguments, "ok": ok, "result": content, "write": write})
                messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
            if over:
                traj.finish_reason = "max_tool_calls"
                break
            if not turn.done:
                continue
        if turn.done:
            traj.finish_reason = "agent_done"
            break
        reply = await user.reply(messages) if user is not None else None
        if reply is None:
            traj.finish_reason = "user_done"
            break
        messages.append({"role": "user", "content": reply})
    traj.seconds = time.perf_counter() - start
    return traj
