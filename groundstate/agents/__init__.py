"""Agents (policies) and user simulators, built from spec strings.

Agent specs: `scripted:gold|noop|noisy:P`, `openai:MODEL[@BASE_URL]`, `hf:PATH`.
User specs: `scripted` (the task's script) or `openai:MODEL[@BASE_URL]` (an LLM playing the persona).
"""

from __future__ import annotations

from typing import Any

from groundstate.agents.base import Agent, AgentTurn, ToolCallRequest, Usage, UserSimulator
from groundstate.agents.scripted import ScriptedAgent, ScriptedUser, make_scripted_agent

__all__ = ["Agent", "AgentTurn", "ToolCallRequest", "Usage", "UserSimulator", "ScriptedAgent", "ScriptedUser", "make_agent", "make_user"]


def make_agent(spec: str, task: Any, domain: Any, attempt: int = 0, seed: int = 0, sampling: dict[str, Any] | None = None) -> Agent:
    """An agent for one attempt. Model-backed agents ignore task and attempt (callers may share them)."""
    kind = spec.split(":", 1)[0]
    if kind == "scripted":
        return make_scripted_agent(spec, task, domain, attempt, seed)
    if kind == "openai":
        from groundstate.agents.openai_compat import make_openai_agent

        return make_openai_agent(spec, sampling or {})
    if kind == "hf":
        from groundstate.agents.hf import make_hf_agent

        return make_hf_agent(spec, sampling or {})
    raise ValueError(f"unknown agent spec {spec!r}: use scripted:gold|noop|noisy:P, openai:MODEL[@URL] or hf:PATH")


def make_user(spec: str, task: Any) -> UserSimulator:
    """The simulated user of one attempt."""
    if spec in ("scripted", "scripted:task"):
        return ScriptedUser(task.user.script)
    if spec.startswith("openai:"):
        from groundstate.agents.openai_compat import make_openai_user

        return make_openai_user(spec, task)
    raise ValueError(f"unknown user spec {spec!r}: use scripted or openai:MODEL[@URL]")
