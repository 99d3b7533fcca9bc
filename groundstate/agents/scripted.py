"""Scripted agents and users: deterministic policies for tests, lint and calibration.

- `gold` replays the task's gold tool calls, one per turn, then says it is done.
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
from groundstate.types import AgentTurn, Domain, ToolCallRequest


class ScriptedAgent:
    """Emits the given calls, one per turn, then a final message."""

    def __init__(self, calls: list[dict[str, Any]], final_text: str = "Done.", name: str = "scripted", injected: list[Injected] | None = None):
        self.calls = list(calls)
        self.final_text = final_text
        self.name = name
        self.injected = list(injected or [])  # the noisy agent's mistakes, where `calls` are a corrupted gold
        self._next = 0

    async def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        if self._next < len(self.calls):
            call = self.calls[self._next]
            self._next += 1
            return AgentTurn(tool_calls=[ToolCallRequest(f"call_{self._next}", call["tool"], dict(call["args"]))])
        return AgentTurn(text=self.final_text, done=True)


class ScriptedUser:
    """Replies from the task's script, in order; ends the conversation when the script runs out."""

    def __init__(self, script: list[str]):
        self.script = list(script)

    async def reply(self, conversation: list[dict[str, Any]]) -> str | None:
        return self.script.pop(0) if self.script else None


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
        return ScriptedAgent(gold, final_text=task.gold_reply or "Done.", name="scripted:gold")
    if kind == "noop":
        return ScriptedAgent([], final_text="I have looked into it; nothing needs to change.", name="scripted:noop")
    rng = random.Random(attempt_seed(task.id, attempt, seed))
    calls, injected = corrupt_noting(gold, domain.tools, p, rng)
    return ScriptedAgent(calls, final_text=task.gold_reply or "Done.", name=f"scripted:noisy:{p}", injected=injected)
