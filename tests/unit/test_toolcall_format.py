"""Reading tool calls out of a local model's text: Hermes JSON, Qwen3-Coder XML, malformed calls, reasoning."""

from __future__ import annotations

import json

import pytest

from groundstate.agents.toolcall_format import parse_response, parse_tool_calls, render_tool_call, split_reasoning

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add_note",
            "description": "Note.",
            "parameters": {
                "type": "object",
                "properties": {"customer_id": {"type": "integer"}, "body": {"type": "string"}},
                "required": ["customer_id", "body"],
            },
        },
    },
]


def test_hermes_single_call():
    content, calls = parse_tool_calls('<tool_call>\n{"name": "get_order", "arguments": {"order_id": 7}}\n</tool_call>')
    assert content == ""
    assert [(c.id, c.name, c.arguments, c.parse_error) for c in calls] == [("call_0", "get_order", {"order_id": 7}, None)]


def test_hermes_many_calls_with_text_and_id_offset():
    text = (
        "Let me check both.\n"
        '<tool_call>{"name": "get_order", "arguments": {"order_id": 1}}</tool_call>\n'
        '<tool_call>\n{"name": "find_customer", "arguments": {"email": "c1@example.com"}}\n</tool_call>'
    )
    content, calls = parse_tool_calls(text, id_offset=3)
    assert content == "Let me check both."
    assert [c.id for c in calls] == ["call_3", "call_4"]
    assert [c.name for c in calls] == ["get_order", "find_customer"]
    assert calls[1].arguments == {"email": "c1@example.com"}
    assert all(c.parse_error is None for c in calls)


def test_hermes_variants_are_accepted():
    # double-encoded arguments, missing arguments, `parameters` instead of `arguments`
    _, calls = parse_tool_calls(
        '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'
        '<tool_call>{"name": "b"}</tool_call>'
        '<tool_call>{"name": "c", "parameters": {"y": "z"}}</tool_call>'
    )
    assert [(c.name, c.arguments, c.parse_error) for c in calls] == [("a", {"x": 1}, None), ("b", {}, None), ("c", {"y": "z"}, None)]


def test_qwen3_coder_xml():
    text = (
        "<tool_call>\n<function=set_total>\n<parameter=order_id>\n3\n</parameter>\n"
        "<parameter=total>\n42.5\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call><function=add_note><parameter=customer_id>2</parameter>"
        "<parameter=body>\nRefused: order 2 shipped.\nSee policy.\n</parameter></function></tool_call>"
    )
    content, calls = parse_tool_calls(text)
    assert content == ""
    assert [(c.id, c.name, c.arguments, c.parse_error) for c in calls] == [
        ("call_0", "set_total", {"order_id": 3, "total": 42.5}, None),
        ("call_1", "add_note", {"customer_id": 2, "body": "Refused: order 2 shipped.\nSee policy."}, None),
    ]


def test_qwen3_coder_values_json_else_string_and_schema_strings_stay_strings():
    text = "<tool_call><function=add_note><parameter=customer_id>5</parameter><parameter=body>123</parameter></function></tool_call>"
    assert parse_tool_calls(text)[1][0].arguments == {"customer_id": 5, "body": 123}
    assert parse_tool_calls(text, tools=TOOLS)[1][0].arguments == {"customer_id": 5, "body": "123"}
    text = (
        "<tool_call><function=f><parameter=a>[1, 2]</parameter><parameter=b>true</parameter><parameter=c>not json</parameter></function></tool_call>"
    )
    assert parse_tool_calls(text)[1][0].arguments == {"a": [1, 2], "b": True, "c": "not json"}


@pytest.mark.parametrize(
    "text, name, error",
    [
        ('<tool_call>{"name": "get_order", "arguments": {"order_id": 1</tool_call>', "get_order", "not valid JSON"),
        ('<tool_call>{"arguments": {"order_id": 1}}</tool_call>', "unknown", 'no "name"'),
        ('<tool_call>{"name": "", "arguments": {}}</tool_call>', "unknown", 'no "name"'),
        ("<tool_call>[1, 2]</tool_call>", "unknown", "JSON object"),
        ('<tool_call>{"name": "get_order", "arguments": [1]}</tool_call>', "get_order", "must be a JSON object"),
        ('<tool_call>{"name": "get_order", "arguments": "{oops"}</tool_call>', "get_order", "not valid JSON"),
        ('<tool_call>{"name": "cancel_order", "arguments": {"order_id": 1}}', "cancel_order", "unclosed <tool_call>"),
        ("<tool_call><function=cancel_order><parameter=order_id>1</parameter></tool_call>", "cancel_order", "<function=NAME>"),
        ("<tool_call><function=cancel_order><parameter=order_id>1</function></tool_call>", "cancel_order", "unclosed <parameter>"),
        ("<tool_call><function=><parameter=a>1</parameter></function></tool_call>", "unknown", "no function name"),
        ("<tool_call></tool_call>", "unknown", "not valid JSON"),
    ],
)
def test_malformed_calls_become_errors_the_agent_sees(text, name, error):
    content, calls = parse_tool_calls("Sure. " + text)
    assert content == "Sure."
    assert len(calls) == 1
    call = calls[0]
    assert call.id == "call_0" and call.name == name
    assert call.parse_error and error in call.parse_error
    assert isinstance(call.arguments, str) and call.arguments in text  # the raw text, for the record
    assert call.to_message()["function"]["name"] == name


def test_unclosed_call_before_a_good_one_does_not_swallow_it():
    text = '<tool_call>{"name": "a", "arguments": {}}\n<tool_call>{"name": "b", "arguments": {"x": 1}}</tool_call>'
    _, calls = parse_tool_calls(text)
    assert [(c.name, c.parse_error is None) for c in calls] == [("a", False), ("b", True)]
    assert calls[1].arguments == {"x": 1} and calls[1].id == "call_1"


def test_plain_text_has_no_calls_and_stray_close_tags_are_dropped():
    assert parse_tool_calls("  Your order is cancelled.  ") == ("Your order is cancelled.", [])
    assert parse_tool_calls("done</tool_call>") == ("done", [])
    assert parse_tool_calls("") == ("", [])


def test_think_is_split_off():
    r = parse_response(
        '<think>\nThe order is pending.\n</think>\n\nI will cancel it.<tool_call>{"name": "cancel_order", "arguments": {"order_id": 1}}</tool_call>'
    )
    assert r.reasoning == "The order is pending."
    assert r.content == "I will cancel it."
    assert [c.name for c in r.tool_calls] == ["cancel_order"]
    # a tool call inside the reasoning is a thought, not a call
    r = parse_response('<think>maybe <tool_call>{"name": "x"}</tool_call>?</think>ok')
    assert (r.content, r.tool_calls) == ("ok", [])
    assert parse_tool_calls("<think>a</think>b") == ("b", [])


def test_split_reasoning_edge_cases():
    assert split_reasoning("no thoughts") == (None, "no thoughts")
    assert split_reasoning("<think>cut off by the token lim") == ("cut off by the token lim", "")
    assert split_reasoning("opened in the prompt</think>answer") == ("opened in the prompt", "answer")
    assert split_reasoning("<think>a</think>x<think>b</think>y") == ("a\nb", "xy")
    assert split_reasoning("<think></think>x") == (None, "x")


@pytest.mark.parametrize(
    "name, args",
    [
        ("cancel_order", {"order_id": 1}),
        ("add_note", {"customer_id": 2, "body": 'Refused: "shipped" — sorry\nnew line'}),
        ("noop", {}),
        ("nested", {"a": {"b": [1, 2.5, None, True]}, "é": "ü"}),
    ],
)
def test_render_round_trips(name, args):
    rendered = render_tool_call(name, args)
    assert rendered.startswith("<tool_call>\n{") and rendered.endswith("}\n</tool_call>")
    assert json.loads(rendered.removeprefix("<tool_call>").removesuffix("</tool_call>")) == {"name": name, "arguments": args}
    content, calls = parse_tool_calls("Working on it.\n" + rendered + "\n" + render_tool_call(name, args))
    assert content == "Working on it."
    assert [(c.id, c.name, c.arguments, c.parse_error) for c in calls] == [("call_0", name, args, None), ("call_1", name, args, None)]
