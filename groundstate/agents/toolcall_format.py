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

`parse_content` reads tool calls from the *content* of an endpoint's reply, for servers that return a model's calls
as text instead of `tool_calls` (transformers serve, llama.cpp without its template flags, some vLLM parser
settings). Its formats (`CONTENT_FORMATS`): `hermes` (the tag blocks above, JSON bodies), `qwen` (`<function=...>`
elements, tagged or not), `json` (fenced or bare JSON objects `{"name": ..., "arguments": {...}}`, or lists of
them), `xml` (a self-closing element named after a tool, `<get_order order_id="1" />`) and `auto` (the first of
hermes/qwen, json, xml that finds a call). Every call it returns names its parser in `ToolCallRequest.parser`.
Prose is never a call: a JSON object counts only with the shape of a call (`name` and `arguments`/`parameters`)
or the name of an offered tool, and an XML element only when named after an offered tool.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from groundstate.jsontext import MAX_DEPTH, too_deep
from groundstate.types import ToolCallRequest

__all__ = [
    "CONTENT_FORMATS",
    "ParsedResponse",
    "looks_like_tool_call",
    "parse_content",
    "parse_response",
    "parse_tool_calls",
    "render_tool_call",
    "split_reasoning",
]

# what `--tool-call-format` accepts: `native` reads only the server's `tool_calls`, the others also the content
TOOL_CALL_FORMATS = ("auto", "native", "json", "hermes", "qwen", "xml")
CONTENT_FORMATS = ("auto", "json", "hermes", "qwen", "xml")

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
    for c in calls:  # XML bodies were labelled `qwen` by their parser; the rest are Hermes blocks
        c.parser = c.parser or "hermes"
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
    except RecursionError:
        return _malformed(call_id, body, "tool call is nested too deeply to read")
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
        except RecursionError:
            return ToolCallRequest(call_id, name, body, parse_error=f"arguments of {name} are nested too deeply to read")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCallRequest(call_id, name, body, parse_error=f"arguments of {name} must be a JSON object")
    if too_deep(args):
        return ToolCallRequest(call_id, name, body, parse_error=f"arguments of {name} are nested deeper than {MAX_DEPTH} levels")
    return ToolCallRequest(call_id, name, args)


def _parse_xml(call_id: str, body: str, string_params: dict[str, set[str]]) -> ToolCallRequest:
    call = _parse_xml_body(call_id, body, string_params)
    call.parser = "qwen"
    return call


def _parse_xml_body(call_id: str, body: str, string_params: dict[str, set[str]]) -> ToolCallRequest:
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
    except (json.JSONDecodeError, RecursionError):
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


# -- tool calls in an endpoint's content -------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)```", re.DOTALL)
_BARE_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)</function>", re.DOTALL)
_XML_ELEMENT = re.compile(r"<([A-Za-z_][\w.-]*)((?:\s+[\w.-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)\s*(?:/>|>\s*</\1\s*>)")
_XML_ATTR = re.compile(r"([\w.-]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
_CALL_SHAPE_KEYS = ("arguments", "parameters")
_JSON_START = re.compile(r'\{\s*"|\[\s*\{')
MAX_JSON_STARTS = 64  # JSON starts tried per reply (a call is one of the first; prose rarely has many)


def parse_content(text: str, fmt: str, tools: list[dict[str, Any]] | None = None, id_offset: int = 0) -> ParsedResponse:
    """The tool calls an endpoint's reply wrote in its content, in format `fmt` (`CONTENT_FORMATS`), and the text left.

    The content returned has the calls (and reasoning) removed; text beside them stays. With `auto`, the first format
    in the order hermes/qwen (tags), json, xml that finds any call is used, so one call is never read twice.
    """
    if fmt not in CONTENT_FORMATS:
        raise ValueError(f"unknown tool-call format {fmt!r}: use one of {', '.join(TOOL_CALL_FORMATS)}")
    reasoning, rest = split_reasoning(text)
    names = {fn.get("name", "") for fn in (t.get("function", t) for t in tools or [])} - {""}
    order = {"auto": ("tags", "json", "xml"), "hermes": ("tags",), "qwen": ("tags",), "json": ("json",), "xml": ("xml",)}[fmt]
    for family in order:
        if family == "tags":
            parsed = _tagged(rest, tools, id_offset, bare_functions=fmt in ("auto", "qwen"))
        elif family == "json":
            parsed = _json_calls(rest, names, id_offset)
        else:
            parsed = _xml_calls(rest, names, tools, id_offset)
        if parsed.tool_calls:
            parsed.reasoning = reasoning
            return parsed
    return ParsedResponse(rest.strip(), [], reasoning)


def looks_like_tool_call(text: str, tool_names: set[str] | frozenset[str]) -> bool:
    """Whether a text reply reads as an attempted tool call: the `auto` parser finds one, or it writes an offered
    tool's name as a call (`get_order(`, `"name": "get_order"`). For the run summary's warning, not for execution."""
    if not text:
        return False
    tools = [{"name": n} for n in tool_names]
    if parse_content(text, "auto", tools).tool_calls:
        return True
    return any(re.search(rf"(?<![\w.]){re.escape(n)}\s*\(|\"name\"\s*:\s*\"{re.escape(n)}\"", text) for n in tool_names)


def _label(calls: list[ToolCallRequest], parser: str) -> list[ToolCallRequest]:
    for c in calls:
        c.parser = parser
    return calls


def _tagged(text: str, tools: list[dict[str, Any]] | None, id_offset: int, bare_functions: bool) -> ParsedResponse:
    """`<tool_call>` blocks (Hermes JSON or Qwen XML bodies) and, when asked, bare `<function=...>` elements."""
    if CALL_OPEN in text:
        return parse_response(text, tools, id_offset)
    if not bare_functions or "<function=" not in text:
        return ParsedResponse(text.strip())
    string_params = _string_params(tools)
    calls: list[ToolCallRequest] = []

    def take(m: re.Match[str]) -> str:
        calls.append(_parse_xml(f"call_{id_offset + len(calls)}", m.group(0), string_params))
        return ""

    rest = _BARE_FUNCTION.sub(take, text)
    return ParsedResponse(rest.strip(), _label(calls, "qwen"))


def _json_calls(text: str, names: set[str], id_offset: int) -> ParsedResponse:
    """Calls in fenced blocks, then (outside them) bare top-level JSON objects or lists of them."""
    calls: list[ToolCallRequest] = []
    spans: list[tuple[int, int]] = []
    for m in _FENCE.finditer(text):
        found = _calls_in_json_text(m.group(2), names, id_offset + len(calls), fenced=True)
        if found:
            calls += found
            spans.append(m.span())
    outside = _cut(text, spans)
    bare, bare_spans = _bare_json(outside, names, id_offset + len(calls))
    calls += bare
    rest = _cut(outside, bare_spans)
    return ParsedResponse(rest.strip(), _label(calls, "json"))


def _calls_in_json_text(body: str, names: set[str], id_offset: int, fenced: bool) -> list[ToolCallRequest]:
    stripped = body.strip()
    try:
        obj = json.loads(stripped)
    except RecursionError:  # nested deeper than the decoder goes: not a call
        return []
    except json.JSONDecodeError as e:
        # a fenced block that names an offered tool, or has a call's keys, was meant as a call: answer it with the error
        m = _NAME_FIELD.search(stripped)
        meant = m is not None and (m.group(1) in names or any(f'"{k}"' in stripped for k in _CALL_SHAPE_KEYS))
        if fenced and meant:
            return [_malformed(f"call_{id_offset}", body, f"tool call is not valid JSON: {e.msg} at position {e.pos}")]
        return []
    items = obj if isinstance(obj, list) else [obj]
    if not items or not all(_is_call(x, names) for x in items):
        return []
    return [_from_object(f"call_{id_offset + i}", x) for i, x in enumerate(items)]


def _bare_json(text: str, names: set[str], id_offset: int) -> tuple[list[ToolCallRequest], list[tuple[int, int]]]:
    """Top-level JSON calls in free text. Only starts that can open a call (`{"` or `[{`) are tried, at most
    `MAX_JSON_STARTS` of them, and nesting too deep for the decoder is not a call: a hostile reply of a million
    brackets costs milliseconds and never raises."""
    decoder = json.JSONDecoder()
    calls: list[ToolCallRequest] = []
    spans: list[tuple[int, int]] = []
    pos, tried = 0, 0
    for m in _JSON_START.finditer(text):
        start = m.start()
        if start < pos:
            continue
        if tried == MAX_JSON_STARTS:
            break
        tried += 1
        try:
            obj, end = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            continue
        items = obj if isinstance(obj, list) else [obj]
        if items and all(_is_call(x, names) for x in items):
            calls += [_from_object(f"call_{id_offset + len(calls) + i}", x) for i, x in enumerate(items)]
            spans.append((start, end))
        pos = end
    return calls, spans


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """`{"type": "function", "function": {...}}` and `{"function": {...}}` (OpenAI's own shape) → the inner call."""
    inner = obj.get("function")
    return inner if isinstance(inner, dict) and "name" in inner else obj


def _is_call(obj: Any, names: set[str]) -> bool:
    if not isinstance(obj, dict):
        return False
    obj = _unwrap(obj)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return False
    if name in names:
        return set(obj) <= {"name", "arguments", "parameters", "id", "type"}
    return any(k in obj for k in _CALL_SHAPE_KEYS) and set(obj) <= {"name", "arguments", "parameters", "id", "type"}


def _from_object(call_id: str, obj: dict[str, Any]) -> ToolCallRequest:
    return _parse_block(call_id, json.dumps(_unwrap(obj), ensure_ascii=False), {})


def _xml_calls(text: str, names: set[str], tools: list[dict[str, Any]] | None, id_offset: int) -> ParsedResponse:
    string_params = _string_params(tools)
    calls: list[ToolCallRequest] = []

    def take(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in names:
            return m.group(0)
        args = {
            a.group(1): _xml_value(a.group(2) if a.group(2) is not None else a.group(3), a.group(1) in string_params.get(name, ()))
            for a in _XML_ATTR.finditer(m.group(2))
        }
        calls.append(ToolCallRequest(f"call_{id_offset + len(calls)}", name, args, parser="xml"))
        return ""

    rest = _XML_ELEMENT.sub(take, text)
    return ParsedResponse(rest.strip(), calls)


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for a, b in sorted(spans):
        out.append(text[pos:a])
        pos = b
    out.append(text[pos:])
    return "".join(out)
