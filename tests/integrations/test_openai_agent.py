"""The OpenAI-compatible agent and LLM user, driven through the real `openai` client against a local stub server."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from openai_stub import OpenAIStub, completion, delayed, error, text, tool_call, tool_calls

from groundstate.agents.openai_compat import (
    STOP_TOKEN,
    EndpointError,
    OpenAIAgent,
    RetryPolicy,
    make_openai_agent,
    make_openai_user,
    parse_endpoint,
    split_reasoning,
    user_view,
)
from groundstate.grading.grader import grade
from groundstate.state.sqlite import SqliteBackend
from groundstate.tasks import UserSpec
from groundstate.types import Usage
from groundstate.worlds.domain import Domain
from groundstate.worlds.environment import SqlEnvironment
from groundstate.worlds.episode import run_episode

# tiny delays keep the retry tests fast while exercising the real backoff path
FAST = RetryPolicy(max_retries=2, base_delay=0.001, max_delay=0.01)


@pytest.fixture(scope="module")
def domain() -> Domain:
    return Domain(Path(__file__).parents[1] / "fixtures" / "shop")


@pytest.fixture
def stub():
    with OpenAIStub() as s:
        yield s


def agent_for(stub: OpenAIStub, sampling=None, model: str = "agent-model", **kw) -> OpenAIAgent:
    kw.setdefault("retry", FAST)
    kw.setdefault("timeout", 5.0)
    return make_openai_agent(f"openai:{model}@{stub.base_url}", sampling, **kw)


def run_graded(domain, task, agent, user=None):
    backend = SqliteBackend()
    with backend.open(backend.prepare(domain, task.patch)) as sandbox:
        traj = asyncio.run(run_episode(SqlEnvironment(task, sandbox), agent, user))
        verdict = grade(task, sandbox, traj)
    return traj, verdict


def act(agent, conversation=None, tools=None):
    return asyncio.run(agent.act(conversation or [{"role": "system", "content": "policy"}, {"role": "user", "content": "hi"}], tools or []))


# -- episodes ----------------------------------------------------------------------------------------


def test_episode_cancel_passes_with_usage_and_sampling(domain, stub):
    task = domain.task("shop-cancel")
    stub.push(tool_call("cancel_order", {"order_id": 1}, usage=(100, 10, 40)), text("Order 1 is cancelled.", usage=(150, 12)))
    agent = agent_for(stub, {"temperature": 0.3, "top_p": 0.9, "max_tokens": 256, "top_k": 20})
    traj, verdict = run_graded(domain, task, agent)

    assert verdict.reward == 1, verdict.reasons
    assert traj.finish_reason == "user_done" and traj.turns == 2
    assert [c.to_json() for c in traj.tool_calls] == [
        {"name": "cancel_order", "arguments": {"order_id": 1}, "ok": True, "result": traj.tool_calls[0].result, "write": True, "parser": "native"}
    ]
    assert traj.final_reply == "Order 1 is cancelled."
    assert traj.usage == Usage(input_tokens=250, output_tokens=22, cached_input_tokens=40)
    assert [e["finish_reason"] for e in traj.extra] == ["tool_calls", "stop"]

    first, second = stub.bodies()
    for body in (first, second):
        assert body["model"] == "agent-model"
        assert (body["temperature"], body["top_p"], body["max_tokens"], body["top_k"]) == (0.3, 0.9, 256, 20)
        assert body["tool_choice"] == "auto"
        assert {t["function"]["name"] for t in body["tools"]} == set(domain.tools.names())
    assert first["messages"] == [{"role": "system", "content": domain.system_prompt()}, {"role": "user", "content": task.instruction}]
    asst, tool = second["messages"][2:]
    assert asst["role"] == "assistant" and asst["content"] is None
    assert asst["tool_calls"] == [
        {"id": "call_0_cancel_order", "type": "function", "function": {"name": "cancel_order", "arguments": '{"order_id": 1}'}}
    ]
    assert tool == {"role": "tool", "tool_call_id": "call_0_cancel_order", "content": traj.tool_calls[0].result}


def test_unset_sampling_is_not_sent_and_unknown_is_rejected(stub):
    stub.push(text("hello"))
    act(agent_for(stub))
    [body] = stub.bodies()
    assert not {"temperature", "top_p", "max_tokens", "top_k", "seed"} & body.keys()
    assert "tools" not in body and "tool_choice" not in body  # no tools: servers reject a bare tool_choice
    with pytest.raises(ValueError, match="temprature"):
        agent_for(stub, {"temprature": 0.5})


def test_malformed_tool_json_becomes_tool_error_and_episode_continues(domain, stub):
    task = domain.task("shop-cancel")
    raw = '{"order_id": 1'
    stub.push(tool_call("cancel_order", raw), tool_call("cancel_order", {"order_id": 1}), text("Cancelled."))
    traj, verdict = run_graded(domain, task, agent_for(stub))

    assert verdict.reward == 1, verdict.reasons
    bad, good = traj.tool_calls
    assert bad.ok is False and bad.arguments == raw and good.ok is True
    [err_msg] = [m for m in traj.messages if m["role"] == "tool" and m["content"].startswith("error:")]
    assert "could not parse the arguments of cancel_order" in err_msg["content"] and raw in err_msg["content"]
    assert traj.messages[2]["tool_calls"][0]["function"]["arguments"] == raw  # the trajectory keeps what the model wrote
    # ...but the history sent back holds a valid object, which servers that json-decode history require
    resent = stub.bodies()[1]["messages"]
    assert resent[2]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert resent[3]["role"] == "tool" and raw in resent[3]["content"]


def test_tool_arguments_edge_cases(stub):
    stub.push(tool_calls(("get_order", ""), ("get_order", "[1, 2]")))
    turn = act(agent_for(stub))
    empty, listy = turn.tool_calls
    assert empty.arguments == {} and empty.parse_error is None
    assert listy.arguments == "[1, 2]" and "must be a JSON object" in listy.parse_error


def test_reasoning_goes_to_extra_not_text(stub):
    stub.push(text("Visible answer.", reasoning_content="side-channel thoughts"), text("<think>inline thoughts</think>\n\nInline answer."))
    agent = agent_for(stub)
    side = act(agent)
    assert side.text == "Visible answer." and side.extra["reasoning_content"] == "side-channel thoughts"
    inline = act(agent)
    assert inline.text == "Inline answer." and inline.extra["reasoning_content"] == "inline thoughts"


def test_split_reasoning_forms():
    assert split_reasoning("plain") == ("plain", None)
    assert split_reasoning("thoughts</think>answer") == ("answer", "thoughts")  # template opened the block
    assert split_reasoning("<think>cut off by max_tokens") == (None, "cut off by max_tokens")
    assert split_reasoning("") == (None, None)


# -- retries and failures ----------------------------------------------------------------------------


def test_429_then_success_is_retried(stub):
    stub.push(error(429, "slow down"), error(503), text("finally"))
    turn = act(agent_for(stub))
    assert turn.text == "finally" and len(stub.requests) == 3


def test_persistent_500_raises_endpoint_error_after_retries(stub):
    stub.default = error(500, "boom")
    with pytest.raises(EndpointError) as e:
        act(agent_for(stub))
    assert len(stub.requests) == FAST.max_retries + 1
    assert e.value.attempts == 3 and e.value.status == 500 and e.value.transient
    assert "gave up after 3 attempt(s)" in str(e.value)


def test_timeouts_raise_endpoint_error_after_retries(stub):
    stub.default = delayed(1.0, text("too late"))
    start = time.perf_counter()
    with pytest.raises(EndpointError) as e:
        act(agent_for(stub, retry=RetryPolicy(max_retries=1, base_delay=0.001, max_delay=0.01), timeout=0.2))
    assert e.value.attempts == 2 and e.value.status is None and "APITimeoutError" in str(e.value)
    assert len(stub.requests) == 2
    assert time.perf_counter() - start < 0.9  # the client gave up; it did not wait for the slow server


def test_connection_refused_is_transient(stub):
    url = stub.base_url
    stub.__exit__(None, None, None)  # nothing listens on the port any more
    with pytest.raises(EndpointError) as e:
        act(make_openai_agent(f"openai:m@{url}", retry=FAST, timeout=2.0))
    assert e.value.transient and e.value.attempts == 3 and "APIConnectionError" in str(e.value)


@pytest.mark.parametrize("status", [400, 401, 404])
def test_non_transient_errors_raise_at_once(stub, status):
    stub.default = error(status)
    with pytest.raises(EndpointError) as e:
        act(agent_for(stub))
    assert len(stub.requests) == 1 and e.value.status == status and not e.value.transient


def test_retry_policy_delays():
    policy = RetryPolicy(max_retries=5, base_delay=1.0, max_delay=4.0)
    for attempt, cap in [(0, 1.0), (1, 2.0), (2, 4.0), (6, 4.0)]:
        for _ in range(20):
            assert cap / 2 <= policy.delay(attempt) <= cap


# -- endpoints ---------------------------------------------------------------------------------------


def test_parse_endpoint(monkeypatch):
    assert parse_endpoint("openai:qwen3-8b@http://127.0.0.1:8000/v1") == ("qwen3-8b", "http://127.0.0.1:8000/v1")
    assert parse_endpoint("openai:gpt-4.1-mini") == ("gpt-4.1-mini", None)
    assert parse_endpoint("openai:org/model@v2") == ("org/model@v2", None)  # `@` not followed by a URL is part of the name
    for bad in ("qwen3-8b", "hf:model", "openai:", "openai:@http://x/v1"):
        with pytest.raises(ValueError):
            parse_endpoint(bad)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.0.0.1:9000/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = make_openai_agent("openai:m")
    assert agent.base_url is None and agent.endpoint == "m@http://10.0.0.1:9000/v1"


def test_api_key_from_env_or_empty(stub, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    stub.push(text("a"), text("b"))
    act(agent_for(stub))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    act(agent_for(stub))
    assert [r["headers"].get("authorization") for r in stub.requests] == ["Bearer EMPTY", "Bearer sk-test"]


# -- the LLM user ------------------------------------------------------------------------------------


def test_llm_user_sees_only_text_turns_and_stop_ends(domain, stub):
    task = domain.task("shop-cancel").model_copy(update={"user": UserSpec(persona="You are Ada, terse.", context="Your order id is 1.")})
    stub.push(
        text("Sure, which order?", reasoning_content="SECRET-REASONING"),  # agent → user
        text("Order 1."),  # user
        tool_call("cancel_order", {"order_id": 1}, content="Let me cancel that now."),  # agent (not delivered)
        text("Order 1 is cancelled."),  # agent → user
        text(f"Thanks, bye! {STOP_TOKEN}"),  # user ends
    )
    agent = agent_for(stub, model="agent-model")
    user = make_openai_user(f"openai:user-model@{stub.base_url}", task, retry=FAST, timeout=5.0)
    traj, verdict = run_graded(domain, task, agent, user)

    assert verdict.reward == 1 and traj.finish_reason == "user_done"
    assert [m["content"] for m in traj.messages if m["role"] == "user"] == [task.instruction, "Order 1."]
    first, last = stub.bodies("user-model")
    assert "tools" not in last and last["temperature"] == 0.0
    system = last["messages"][0]
    assert system["role"] == "system" and "You are Ada, terse." in system["content"] and "Your order id is 1." in system["content"]
    assert STOP_TOKEN in system["content"] and task.instruction in system["content"]
    assert [(m["role"], m["content"]) for m in last["messages"][1:]] == [
        ("user", "Hi! How can I help you today?"),
        ("assistant", task.instruction),
        ("user", "Sure, which order?"),
        ("assistant", "Order 1."),
        ("user", "Order 1 is cancelled."),
    ]
    dump = json.dumps(stub.bodies("user-model"))
    for hidden in ("SECRET-REASONING", "cancel_order", "Let me cancel that now.", domain.system_prompt()[:40], '"tool"'):
        assert hidden not in dump
    assert all(set(m) == {"role", "content"} for body in (first, last) for m in body["messages"])


@pytest.mark.parametrize("reply", ["", "   ", STOP_TOKEN, f"  {STOP_TOKEN}\n", "<think>done</think>"])
def test_llm_user_ends_on_stop_or_empty(domain, stub, reply):
    stub.push(text(reply))
    user = make_openai_user(f"openai:u@{stub.base_url}", domain.task("shop-cancel"), retry=FAST)
    assert asyncio.run(user.reply([{"role": "user", "content": "x"}, {"role": "assistant", "content": "Done."}])) is None


def test_llm_user_endpoint_failure_raises(domain, stub):
    stub.default = error(502)
    user = make_openai_user(f"openai:u@{stub.base_url}", domain.task("shop-cancel"), retry=FAST)
    with pytest.raises(EndpointError):
        asyncio.run(user.reply([{"role": "user", "content": "x"}, {"role": "assistant", "content": "?"}]))
    assert len(stub.requests) == 3


def test_user_view_merges_and_drops():
    conv = [
        {"role": "system", "content": "agent policy"},
        {"role": "user", "content": "help"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "x", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "name": "x", "content": "secret row"},
        {"role": "assistant", "content": "first"},
        {"role": "assistant", "content": "second"},
    ]
    assert user_view(conv, "S") == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Hi! How can I help you today?"},
        {"role": "assistant", "content": "help"},
        {"role": "user", "content": "first\n\nsecond"},
    ]


# -- call ids are unique in an episode, whatever the server sends (#32, review of item 17) ---------------------------


def test_calls_without_server_ids_are_numbered_across_the_episode(domain, stub):
    """A server that omits call ids, over three turns (native calls, two in one turn, then calls written as text): every
    call gets its own id (`call_<calls before it in the episode>`), so no two calls of a record share one; before, every
    turn restarted at call_0."""
    task = domain.task("shop-multi")
    native = [{"type": "function", "function": {"name": "find_customer", "arguments": '{"email": "c3@example.com"}'}}]
    two = [
        {"type": "function", "function": {"name": "set_tier", "arguments": '{"customer_id": 3, "tier": "gold"}'}},
        {"type": "function", "function": {"name": "set_total", "arguments": '{"order_id": 3, "total": 42.5}'}},
    ]
    hermes = '<tool_call>{"name": "cancel_order", "arguments": {"order_id": 3}}</tool_call>\n<tool_call>{"name": "tag_customer", "arguments": {"customer_id": 3, "tag": "vip"}}</tool_call>'
    stub.push(
        completion({"content": None, "tool_calls": native}, "tool_calls"),
        completion({"content": None, "tool_calls": two}, "tool_calls"),
        text(hermes),
        text("All done."),
    )
    traj, verdict = run_graded(domain, task, agent_for(stub))
    assert verdict.reward == 1, verdict.reasons
    ids = [c["id"] for m in traj.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert ids == ["call_0", "call_1", "call_2", "call_3", "call_4"]
    assert [m["tool_call_id"] for m in traj.messages if m["role"] == "tool"] == ids


# -- the LLM user's token budget (#32 item 7, review) ------------------------------------------------------------------


def test_the_llm_user_has_a_token_budget_and_a_reply_cut_by_it_is_a_flood(domain, stub):
    """Every request of the LLM user caps its output (`USER_MAX_TOKENS`, as `max_completion_tokens`, which reasoning
    models accept where they refuse `max_tokens`); a reply the server cut at that budget (finish reason `length`) is an
    `overlong_reply`, never delivered and never read as the user leaving (a thinking model cut mid-thought has no text).
    A caller's own `max_tokens` replaces the budget."""
    from groundstate.agents.openai_compat import USER_MAX_TOKENS
    from groundstate.agents.user_audit import UserSimulatorFault

    conv = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "Which order?"}]
    stub.push(
        text("Order 1."),
        text("ok " * 2_000, finish_reason="length"),
        text(None, reasoning_content="Let me think about which order... " * 50, finish_reason="length"),
        text("Order 1."),
    )
    user = make_openai_user(f"openai:u@{stub.base_url}", domain.task("shop-cancel"), retry=FAST)
    assert asyncio.run(user.reply(conv)) == "Order 1."
    for _ in range(2):
        with pytest.raises(UserSimulatorFault) as e:
            asyncio.run(user.reply(conv))
        assert e.value.kind == "overlong_reply" and f"within its budget of {USER_MAX_TOKENS:,} tokens" in str(e.value), e.value
        assert e.value.reply is None and len(str(e.value)) < 500
    assert [b.get("max_completion_tokens") for b in stub.bodies()] == [USER_MAX_TOKENS] * 3
    assert not any("max_tokens" in b for b in stub.bodies()) and USER_MAX_TOKENS * 3 <= 100_000
    own = make_openai_user(f"openai:u@{stub.base_url}", domain.task("shop-cancel"), {"max_tokens": 64}, retry=FAST)
    assert asyncio.run(own.reply(conv)) == "Order 1."
    assert stub.bodies()[-1]["max_tokens"] == 64 and "max_completion_tokens" not in stub.bodies()[-1]
