"""Agents (policies) and user simulators."""

from groundstate.agents.base import Agent, AgentTurn, ToolCallRequest, Usage, UserSimulator
from groundstate.agents.scripted import ScriptedAgent, ScriptedUser, make_agent, make_user

__all__ = ["Agent", "AgentTurn", "ToolCallRequest", "Usage", "UserSimulator", "ScriptedAgent", "ScriptedUser", "make_agent", "make_user"]
