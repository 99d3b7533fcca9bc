"""The agent and user-simulator interfaces.

Conversations are lists of OpenAI-style chat messages (`system`, `user`, `assistant` with
`tool_calls`, `tool`). An agent turn is text and/or tool calls, with token usage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def add(self, other: "Usage") -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_input_tokens += other.cached_input_tokens

    def to_json(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "cached_input_tokens": self.cached_input_tokens}


@dataclass
class ToolCallRequest:
    id: str
    name: str
    arguments: dict[str, Any] | str  # a string when the model produced unparsed JSON
    parse_error: str | None = None  # set when the model's call could not be parsed: the agent sees this error

    def to_message(self) -> dict[str, Any]:
        args = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


@dataclass
class AgentTurn:
    text: str | None = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    done: bool = False  # the agent declares the conversation finished
    extra: dict[str, Any] = field(default_factory=dict)  # engine-specific data (token ids, log-probs)


class Agent(Protocol):
    async def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn: ...


class UserSimulator(Protocol):
    async def reply(self, conversation: list[dict[str, Any]]) -> str | None:
        """The user's next message, or None when the user ends the conversation."""
        ...
