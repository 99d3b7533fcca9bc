"""The conversation of a τ² attempt in τ²'s own message types, and τ²'s rules about it.

`opening` is what precedes the agent's first turn as τ²'s orchestrator starts a run; `tau2_messages` rebuilds from a
groundstate trajectory and the environment's call log the conversation τ²'s orchestrator would have recorded (what τ²'s
evaluators read); `tau2_cutoff` says where τ²'s own run would have stopped early.
"""

from __future__ import annotations

import json
from typing import Any

from groundstate.tasks import Task
from groundstate.types import Trajectory

GREETING = "Hi! How can I help you today?"  # τ²'s orchestrator opens every conversation without history with it


class ConversationMismatch(RuntimeError):
    """The trajectory and the environment's call log disagree: a harness bug, never the agent's doing."""


def _arguments(call: dict[str, Any]) -> Any:
    raw = call.get("function", {}).get("arguments")
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            return raw
    return raw


def tau2_cutoff(messages: list[Any], start: int) -> str | None:
    """Why τ²'s orchestrator would have ended this conversation early, or None: it counts a step per message sent (a
    user or agent message, or the tool messages answering one) from `messages[start]` on, and after each step that
    does not go to the environment ends the run once the steps reach `DEFAULT_MAX_STEPS` or the failed tool calls
    `DEFAULT_MAX_ERRORS` (even after a stop message: its checks come after the stop)."""
    from tau2.config import DEFAULT_MAX_ERRORS, DEFAULT_MAX_STEPS

    steps = errors = 0
    for i, m in enumerate(messages[start:], start):
        if m.role == "tool":
            errors += bool(m.error)
            if i + 1 < len(messages) and messages[i + 1].role == "tool":
                continue  # the tool messages answering one message are one step
        steps += 1
        if m.role != "tool" and m.is_tool_call():
            continue  # to the environment: τ² checks nothing yet
        if steps >= DEFAULT_MAX_STEPS:
            return f"τ²'s run stops at {DEFAULT_MAX_STEPS} steps"
        if errors >= DEFAULT_MAX_ERRORS:
            return f"τ²'s run stops at {DEFAULT_MAX_ERRORS} failed tool calls"
    return None


def tau2_messages(t2: Any, task: Task, log: list[tuple[Any, Any]], start: int, trajectory: Trajectory) -> list[Any]:
    """The attempt's conversation as τ²'s orchestrator would have recorded it: the opening (`opening`); then, from the
    trajectory's message `start` on (what followed the environment's initial messages), each agent message with the calls τ² executed (from the environment's log, in order),
    each followed by its tool message, and each user message. Calls that never reached τ² (malformed, stopped by a
    limit) are not in it: they changed nothing. The user's own calls (`env.Tau2UserTools`, made while it wrote its next
    message) come before that message, or last where the user then ended the conversation: one τ² user message per
    batch, each followed by its tool messages. Raises `ConversationMismatch` when a logged call is left over."""
    from tau2.data_model.message import AssistantMessage, UserMessage

    out: list[Any] = opening(t2, task)
    i = 0

    def users_calls() -> None:
        nonlocal i
        while i < len(log) and log[i][0].requestor == "user":
            batch = log[i][0].id.rsplit("_", 1)[0]
            j = i
            while j < len(log) and log[j][0].requestor == "user" and log[j][0].id.rsplit("_", 1)[0] == batch:
                j += 1
            out.append(UserMessage(role="user", tool_calls=[c for c, _ in log[i:j]]))
            out.extend(r for _, r in log[i:j])
            i = j

    for m in trajectory.messages[start:]:
        role = m.get("role")
        if role == "user":
            users_calls()
            out.append(UserMessage(role="user", content=m.get("content") or ""))
        elif role == "assistant":
            calls, results = [], []
            for c in m.get("tool_calls") or []:
                if (
                    i < len(log)
                    and log[i][0].requestor == "assistant"
                    and log[i][0].name == c.get("function", {}).get("name")
                    and log[i][0].arguments == _arguments(c)
                ):
                    calls.append(log[i][0])
                    results.append(log[i][1])
                    i += 1
            text = m.get("content") or None
            if text is None and not calls:
                continue
            out.append(AssistantMessage(role="assistant", content=text, tool_calls=calls or None))
            out += results
    users_calls()
    if i != len(log):
        raise ConversationMismatch(f"{len(log) - i} executed τ² call(s) are not in the trajectory (first: {log[i][0].name})")
    return out


def opening(t2: Any, task: Task) -> list[Any]:
    """The τ² messages before the agent's first turn, as τ²'s orchestrator starts: the task's history, or its greeting;
    then, where the agent spoke last (the greeting, or the history's last text), the user's opening (the task's
    instruction, τ²'s `reason_for_call`)."""
    from tau2.data_model.message import AssistantMessage, UserMessage

    out = history(t2) or [AssistantMessage(role="assistant", content=GREETING)]
    if out[-1].role == "assistant" and not out[-1].is_tool_call():
        out.append(UserMessage(role="user", content=task.instruction))
    return out


def history(t2: Any) -> list[Any]:
    """The τ² task's message history (the conversation it starts in the middle of), or []."""
    init = t2.initial_state
    return list(init.message_history or []) if init is not None else []


def to_chat(message: Any) -> list[dict[str, Any]]:
    """A τ² message as the OpenAI-style chat messages of a groundstate conversation."""
    role = message.role
    if role == "tool":
        return [{"role": "tool", "tool_call_id": message.id, "content": message.content or ""}]
    out: dict[str, Any] = {"role": role, "content": message.content or ""}
    if role == "assistant" and message.tool_calls:
        import json

        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in message.tool_calls
        ]
    return [out]
