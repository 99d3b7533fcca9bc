"""Tool calls in a local model's raw text: parse what the model wrote, render what it should write.

Two formats are recognised inside `<tool_call>...</tool_call>` blocks:

- Hermes (Qwen2.5 and most fine-tunes): `<tool_call>{"name": "get_order", "arguments": {"order_id": 1}}</tool_call>`
- Qwen3-Coder XML: `<tool_call><function=get_order><parameter=order_id>1</parameter></function></tool_call>`
  (a value is read as JSON when it parses, else kept as a string; given the tool schemas, a parameter
  declared as a string always stays a string).

A block that cannot be read (bad JSON, no name, unclosed tag) still becomes a `ToolCallRequest`, with
`parse_error` set, so the episode answers it with an error the model can see instead of dropping it.
`<think>...</think>` reasoning is split off and never reaches the conversation's content. Call ids are
deterministic (`call_0`, `call_1`, ... from `id_offset`). Pure functions: no model library is imported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from groundstate.types import ToolCallRequest

__all__ = ["ParsedResponse", "parse_response", "parse_tool_calls", "render_tool_call", "split_reasoning"]

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)</function>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>(.*?)</parameter>", re.DOTALL)
_NAME_FIELD = re.compile(r'"name"\s*:\s*"([^"\\]+)"')
_FUNCTION_NAME = re.compile(r"<function=([^>\n]+)>")


@dataclass
class ParsedResponse:
    content: str  # the text for the conversation: reasoning and tool-call blocks removed, stripped
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    reasoning: str | None = None  # the `<think>` text, when the model wrote some


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """One call in the Hermes format, byte for byte as `train/chat_template.jinja` renders it."""
    return f"{CALL_OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CALL_CLOSE}"


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning, the rest). Handles closed blocks, an unclosed `<think>` (cut off by the token limit)
    and a bare `</think>` (templates that open the block in the prompt)."""
    parts: list[str] = []
    if THINK_OPEN not in text and THINK_CLOSE in text:
        head, _, text = text.partition(THINK_CLOSE)
        parts.append(head)
    while THINK_OPEN in text:
        before, _, after = text.partition(THINK_OPEN)
        inner, closed, rest = after.partition(THINK_CLOSE)
        parts.append(inner)
        text = before + rest if closed else before
    reasoning = "\n".join(p.strip() for p in parts if p.strip())
    return (reasoning or None), text


def parse_response(text: str, tools: list[dict[str, Any]] | None = None, id_offset: int = 0) -> ParsedResponse:
    """Reasoning, content and tool calls of one generated assistant message."""
    reasoning, text = split_reasoning(text)
    string_params = _string_params(tools)
    content: list[str] = []
    calls: list[ToolCallRequest] = []
    pos = 0
    while True:
        start = text.find(CALL_OPEN, pos)
        if start < 0:
            content.append(text[pos:])
            # a stray closing tag is noise from the model, not content for the user
            break
        content.append(text[pos:start])
        body_start = start + len(CALL_OPEN)
        end = text.find(CALL_CLOSE, body_start)
        next_open = text.find(CALL_OPEN, body_start)
        call_id = f"call_{id_offset + len(calls)}"
        if end < 0 or 0 <= next_open < end:
            stop = next_open if next_open >= 0 else len(text)
            body = text[body_start:stop]
            calls.append(_malformed(call_id, body, "unclosed <tool_call> tag (the call was cut off or not closed with </tool_call>)"))
            pos = stop
            continue
        calls.append(_parse_block(call_id, text[body_start:end], string_params))
        pos = end + len(CALL_CLOSE)
    joined = "".join(content).replace(CALL_CLOSE, "")
    return ParsedResponse(joined.strip(), calls, reasoning)


def parse_tool_calls(text: str, tools: list[dict[str, Any]] | None = None, id_offset: int = 0) -> tuple[str, list[ToolCallRequest]]:
    """(content without reasoning and calls, the calls). See `parse_response` for the reasoning too."""
    parsed = parse_response(text, tools, id_offset)
    return parsed.content, parsed.tool_calls


def _parse_block(call_id: str, body: str, string_params: dict[str, set[str]]) -> ToolCallRequest:
    stripped = body.strip()
    if stripped.startswith("<function"):
        return _parse_xml(call_id, stripped, string_params)
    try:
        obj = json.loads(stripped)
    except json.JSONDecodeError as e:
        return _malformed(call_id, body, f"tool call is not valid JSON: {e.msg} at position {e.pos}")
    if not isinstance(obj, dict):
        return _malformed(call_id, body, 'tool call must be a JSON object {"name": ..., "arguments": {...}}')
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return _malformed(call_id, body, 'tool call has no "name"')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return ToolCallRequest(call_id, name, body, parse_error=f"arguments of {name} are not valid JSON: {e.msg}")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCallRequest(call_id, name, body, parse_error=f"arguments of {name} must be a JSON object")
    return ToolCallRequest(call_id, name, args)


def _parse_xml(call_id: str, body: str, string_params: dict[str, set[str]]) -> ToolCallRequest:
    m = _FUNCTION.fullmatch(body)
    if m is None:
        return _malformed(call_id, body, "tool call has no complete <function=NAME>...</function> element")
    name = m.group(1).strip()
    if not name:
        return _malformed(call_id, body, "tool call has no function name")
    inner = m.group(2)
    args: dict[str, Any] = {}
    leftover = _PARAMETER.sub("", inner)
    if "<parameter" in leftover or "</parameter>" in leftover:
        return ToolCallRequest(call_id, name, body, parse_error=f"call of {name} has an unclosed <parameter> tag")
    for pm in _PARAMETER.finditer(inner):
        key = pm.group(1).strip()
        args[key] = _xml_value(pm.group(2), keep_string=key in string_params.get(name, ()))
    return ToolCallRequest(call_id, name, args)


def _xml_value(raw: str, keep_string: bool) -> Any:
    # the format puts the value on its own line: drop exactly one newline on each side
    value = raw[1:] if raw.startswith("\n") else raw
    value = value[:-1] if value.endswith("\n") else value
    if keep_string:
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _malformed(call_id: str, body: str, error: str) -> ToolCallRequest:
    m = _NAME_FIELD.search(body) or _FUNCTION_NAME.search(body)
    name = m.group(1).strip() if m and m.group(1).strip() else "unknown"
    return ToolCallRequest(call_id, name, body, parse_error=error)


def _string_params(tools: list[dict[str, Any]] | None) -> dict[str, set[str]]:
    """Tool name -> parameters whose schema type is exactly string (their XML values stay verbatim)."""
    out: dict[str, set[str]] = {}
    for t in tools or []:
        fn = t.get("function", t)
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[fn.get("name", "")] = {k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"}
    return out
