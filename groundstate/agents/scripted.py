"""Scripted agents and users: deterministic policies for tests, lint and calibration.

- `gold` replays the task's gold tool calls, one per turn, then says it is done (or, where the task's user has gold
  calls of its own to make, hands over to the scripted user, who makes them and ends the conversation).
- `noop` answers without using any tool.
- `noisy:P` replays the gold calls with each one independently corrupted with probability P
  (dropped, one argument changed, or duplicated), seeded by (task, attempt, seed).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from groundstate.specs import AgentSpec, parse_agent
from groundstate.tasks import Task
from groundstate.tools.mutate import Injected, corrupt_noting
from groundstate.types import AgentTurn, Domain, ToolCallRequest, UserTools

NOOP_TEXT = "I have looked into it; nothing needs to change."


class ScriptedAgent:
    """Emits the given calls, one per turn, then a final message: the end of the conversation (`done`), or, with
    `hand_over`, a message for the user (whose own calls come next: `ScriptedUser`; the user then ends it)."""

    def __init__(
        self,
        calls: list[dict[str, Any]],
        final_text: str = "Done.",
        name: str = "scripted",
        injected: list[Injected] | None = None,
        hand_over: bool = False,
    ):
        self.calls = list(calls)
        self.final_text = final_text
        self.name = name
        self.injected = list(injected or [])  # the noisy agent's mistakes, where `calls` are a corrupted gold
        self.hand_over = hand_over
        self._next = 0

    async def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        if self._next < len(self.calls):
            call = self.calls[self._next]
            self._next += 1
            return AgentTurn(tool_calls=[ToolCallRequest(f"call_{self._next}", call["tool"], dict(call["args"]))])
        return AgentTurn(text=self.final_text, done=not self.hand_over)


class ScriptedUser:
    """Replies from the task's script, in order; ends the conversation when the script runs out. Given `actions` (the
    task's `UserSpec.actions`) and a world that gives the user tools, its first reply makes them first, as one message."""

    def __init__(self, script: list[str], actions: list[dict[str, Any]] | None = None):
        self.script = list(script)
        self.actions = list(actions or [])

    async def reply(self, conversation: list[dict[str, Any]], tools: UserTools | None = None) -> str | None:
        if self.actions and tools is not None:
            calls = [ToolCallRequest(f"user_{i + 1}", a["tool"], dict(a["args"])) for i, a in enumerate(self.actions)]
            self.actions = []
            await tools.act(calls)
        return self.script.pop(0) if self.script else None


def scripted_user(task: Task) -> ScriptedUser:
    """The task's scripted user: its script, and its own gold calls where it has some (`UserSpec.actions`)."""
    return ScriptedUser(task.user.script, [c.model_dump() for c in task.user.actions])


def scripted_agent(calls: list[dict[str, Any]], task: Task, final_text: str | None = None, **kw: Any) -> ScriptedAgent:
    """A scripted agent playing `calls` on `task`, ending with `final_text` (the task's gold reply by default) and, where
    the task's user has calls of its own to make (`UserSpec.actions`), handing the conversation over to the user."""
    text = final_text if final_text is not None else task.gold_reply or "Done."
    return ScriptedAgent(calls, final_text=text, hand_over=bool(task.user.actions), **kw)


def attempt_seed(task_id: str, attempt: int, seed: int = 0) -> int:
    return int.from_bytes(hashlib.sha256(f"{task_id}:{attempt}:{seed}".encode()).digest()[:8], "big")


def make_scripted_agent(spec: AgentSpec | str, task: Task, domain: Domain, attempt: int = 0, seed: int = 0):
    """The agent of a `scripted:` spec for one attempt (`scripted:gold`, `scripted:noop`, `scripted:noisy:0.3`)."""
    spec = parse_agent(spec)
    if spec.kind != "scripted":
        raise ValueError(f"unknown agent spec {spec.text!r}: use scripted:gold, scripted:noop or scripted:noisy:P")
    kind, p = spec.script, spec.noise
    gold = [c.model_dump() for c in task.gold]
    if kind == "gold":
        return scripted_agent(gold, task, name="scripted:gold")
    if kind == "noop":  # says nothing the user could act on: the conversation ends there
        return ScriptedAgent([], final_text=NOOP_TEXT, name="scripted:noop")
    rng = random.Random(attempt_seed(task.id, attempt, seed))
    calls, injected = corrupt_noting(gold, domain.tools, p, rng)
    return scripted_agent(calls, task, name=f"scripted:noisy:{p}", injected=injected)
