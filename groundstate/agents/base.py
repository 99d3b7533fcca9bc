"""What an episode makes of an agent's output: every turn well-formed, whatever the model emitted.

Conversations are lists of OpenAI-style chat messages (`system`, `user`, `assistant` with `tool_calls`,
`tool`); the agent and user-simulator interfaces and the turn types are in `groundstate.types`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from groundstate.jsontext import MAX_DEPTH, too_deep
from groundstate.types import AgentTurn, ToolCallRequest

# Surrogate code points never pair up inside a Python str read from JSON (json.loads joins escaped pairs), so
# any one left is lone: it cannot be encoded as UTF-8, i.e. sent to an endpoint, shown to a judge or written.
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
TOO_DEEP = f"(arguments nested deeper than {MAX_DEPTH} levels, not kept)"  # what the record keeps of such a call's arguments


def valid_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (the Unicode replacement character)."""
    return _SURROGATE.sub(REPLACEMENT, text)


def _well_formed_call(call: ToolCallRequest) -> ToolCallRequest:
    if not isinstance(call.arguments, str) and too_deep(call.arguments):  # whatever made the call: never written, never run
        problem = f"the arguments of the call are nested deeper than {MAX_DEPTH} levels; the call was not run"
        return ToolCallRequest(valid_text(call.id), valid_text(call.name), TOO_DEEP, parse_error=problem, parser=call.parser)
    raw = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False, default=str)
    invalid = [part for part, value in (("name", call.name), ("arguments", raw)) if _SURROGATE.search(value)]
    if not invalid:
        clean_id, clean_error = valid_text(call.id), valid_text(call.parse_error) if call.parse_error else None
        return dataclasses.replace(call, id=clean_id, parse_error=clean_error)
    name = valid_text(call.name)
    problem = (
        f"the tool call's {' and '.join(invalid)} {'is' if invalid == ['name'] else 'are'} not valid Unicode "
        f"(a lone surrogate, shown here as {REPLACEMENT}); the call was not run"
    )
    return ToolCallRequest(valid_text(call.id), name, valid_text(raw), parse_error=problem, parser=call.parser)


def well_formed(turn: AgentTurn) -> AgentTurn:
    """The turn as an episode can use it, whatever the model emitted: every text encodable as UTF-8.

    What a model emits is the agent's responsibility, so malformed output must never become a system error
    (an exception when the conversation is sent back, judged or written). Arguments nested deeper than `MAX_DEPTH`
    are an error answered to the model, kept as `TOO_DEEP`. Lone surrogates in the reply (and
    in string `extra` values) become U+FFFD; a tool call whose name or arguments hold one is not run: it
    gets a `parse_error`, which the episode answers with an error message the model sees.
    """
    extra = {k: valid_text(v) if isinstance(v, str) else v for k, v in turn.extra.items()}
    return dataclasses.replace(
        turn, text=valid_text(turn.text) if turn.text is not None else None, tool_calls=[_well_formed_call(c) for c in turn.tool_calls], extra=extra
    )


def delivered_turns(conversation: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The text turns the customer saw, in order, as (role, text): its own messages (`user`) and the agent's messages
    delivered to it (`assistant` text without tool calls; text that came with tool calls was never delivered). Empty
    texts are left out. What an LLM user is shown (`openai_compat.user_view`) and what the user-turn audit reads."""
    turns = []
    for m in conversation:
        if m["role"] == "user" or (m["role"] == "assistant" and not m.get("tool_calls")):
            content = m.get("content") or ""
            if content.strip():
                turns.append((m["role"], content))
    return turns
