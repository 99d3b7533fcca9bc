"""The episode loop: message order, limits, finish reasons, scripted users, and tool errors as results."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from groundstate.agents import ScriptedUser, make_agent, make_user
from groundstate.grading.grader import grade
from groundstate.state.sqlite import SqliteBackend
from groundstate.tasks import Task
from groundstate.types import FINISH_REASONS, AgentTurn, EpisodeLimits, ToolCallRequest, Usage
from groundstate.worlds.domain import load_domain
from groundstate.worlds.environment import SqlEnvironment
from groundstate.worlds.episode import run_episode

FIXTURE = Path(__file__).parents[1] / "fixtures" / "shop"


@pytest.fixture(scope="module")
def domain():
    return load_domain(str(FIXTURE))


@pytest.fixture(scope="module")
def sqlite_backend():
    return SqliteBackend()


def make_task(domain, **over) -> Task:
    item = {
        "id": "ep-test",
        "instruction": "Look at order 1.",
        "gold": [],
        "patch": {"orders": [{"id": 1, "customer_id": 1, "status": "pending", "total": 10.0, "updated_at": None}]},
    }
    return domain.validate_task(FIXTURE / "tasks" / "inline.yaml", 0, {**item, **over})


def run(task, domain, sqlite_backend, agent, user=None, **kw):
    template = sqlite_backend.prepare(domain, task.patch)
    with sqlite_backend.open(template) as sandbox:
        traj = asyncio.run(run_episode(SqlEnvironment(task, sandbox, EpisodeLimits(**kw)), agent, user, EpisodeLimits(**kw)))
        status = sandbox.connection.scalar("SELECT status FROM orders WHERE id = 1")
    return traj, status


class Recorder:
    """Base for test agents: keeps a copy of every conversation it was shown."""

    def __init__(self):
        self.seen: list[list[dict[str, Any]]] = []
        self.tools_seen: list[list[dict[str, Any]]] = []

    async def act(self, conversation, tools) -> AgentTurn:
        self.seen.append([dict(m) for m in conversation])
        self.tools_seen.append(tools)
        return self.turn(len(self.seen))

    def turn(self, n: int) -> AgentTurn:  # pragma: no cover - overridden
        raise NotImplementedError


class Forever(Recorder):
    """Calls tools forever, `per_turn` calls a turn, never done."""

    def __init__(self, per_turn: int = 1, usage: Usage | None = None):
        super().__init__()
        self.per_turn = per_turn
        self.usage = usage

    def turn(self, n):
        calls = [ToolCallRequest(f"c{n}_{k}", "get_order", {"order_id": 1}) for k in range(self.per_turn)]
        return AgentTurn(tool_calls=calls, usage=self.usage or Usage())


class Scripted(Recorder):
    """Plays a fixed list of turns, then says it is done."""

    def __init__(self, turns: list[AgentTurn]):
        super().__init__()
        self.turns = turns

    def turn(self, n):
        return self.turns[n - 1] if n <= len(self.turns) else AgentTurn(text="Bye.", done=True)


# -- the gold agent ----------------------------------------------------------------------------------


def test_gold_agent_trajectory(domain, sqlite_backend):
    task = domain.task("shop-multi")
    template = sqlite_backend.prepare(domain, task.patch)
    with sqlite_backend.open(template) as sandbox:
        traj = asyncio.run(run_episode(SqlEnvironment(task, sandbox), make_agent("scripted:gold", task, domain), make_user("scripted", task)))
        verdict = grade(task, sandbox, traj)
    assert traj.finish_reason == "agent_done"
    assert traj.finish_reason in FINISH_REASONS
    m = traj.messages
    assert m[0] == {"role": "system", "content": domain.system_prompt()}
    assert "Only pending orders can be cancelled" in m[0]["content"]
    assert m[1] == {"role": "user", "content": task.instruction}
    gold = [c.model_dump() for c in task.gold]
    assert [x["role"] for x in m] == ["system", "user"] + ["assistant", "tool"] * len(gold) + ["assistant"]
    for k, call in enumerate(gold):
        asst, result = m[2 + 2 * k], m[3 + 2 * k]
        [tc] = asst["tool_calls"]
        assert tc["type"] == "function"
        assert tc["function"]["name"] == call["tool"]
        assert json.loads(tc["function"]["arguments"]) == call["args"]
        assert result["tool_call_id"] == tc["id"] and result["name"] == call["tool"]
        assert not result["content"].startswith("error"), result["content"]
    assert m[-1] == {"role": "assistant", "content": "Done."}
    assert [c.name for c in traj.tool_calls] == [c["tool"] for c in gold]
    assert all(c.ok for c in traj.tool_calls)
    assert [c.write for c in traj.tool_calls] == [False, True, True, True, True]
    assert json.loads(traj.tool_calls[0].result)["email"] == "c3@example.com"
    assert traj.turns == len(gold) + 1
    assert traj.final_reply == "Done."
    assert traj.to_json()["finish_reason"] == "agent_done"
    assert verdict.reward == 1, verdict.reasons


def test_noop_agent_fails_a_write_task(domain, sqlite_backend):
    task = domain.task("shop-cancel")
    template = sqlite_backend.prepare(domain, task.patch)
    with sqlite_backend.open(template) as sandbox:
        traj = asyncio.run(run_episode(SqlEnvironment(task, sandbox), make_agent("scripted:noop", task, domain), None))
        verdict = grade(task, sandbox, traj)
    assert traj.finish_reason == "agent_done" and traj.turns == 1 and traj.tool_calls == []
    assert traj.final_reply.startswith("I have looked into it")
    assert verdict.reward == 0


def test_agent_sees_the_domain_tools(domain, sqlite_backend):
    agent = Scripted([])
    run(make_task(domain), domain, sqlite_backend, agent)
    assert [t["function"]["name"] for t in agent.tools_seen[0]] == domain.tools.names()


# -- limits ------------------------------------------------------------------------------------------


def test_max_turns(domain, sqlite_backend):
    agent = Forever()
    traj, _ = run(make_task(domain), domain, sqlite_backend, agent, max_turns=3)
    assert traj.finish_reason == "max_turns"
    assert traj.turns == 3 and len(agent.seen) == 3
    assert len(traj.tool_calls) == 3
    assert [m["role"] for m in traj.messages] == ["system", "user"] + ["assistant", "tool"] * 3
    assert traj.final_reply is None  # the agent never wrote text


def test_max_turns_from_task_limits(domain, sqlite_backend):
    task = make_task(domain, limits={"max_turns": 2})
    traj, _ = run(task, domain, sqlite_backend, Forever())
    assert (traj.finish_reason, traj.turns) == ("max_turns", 2)


def test_max_tool_calls(domain, sqlite_backend):
    agent = Forever(per_turn=2)
    traj, _ = run(make_task(domain), domain, sqlite_backend, agent, max_tool_calls=3)
    assert traj.finish_reason == "max_tool_calls"
    assert len(traj.tool_calls) == 3  # the 4th call is never run
    assert traj.turns == 2
    # every call id is answered (the 4th with a limit error) so the conversation stays well-formed
    tool_msgs = [m for m in traj.messages if m["role"] == "tool"]
    assert len(tool_msgs) == 4 and "limit reached" in tool_msgs[-1]["content"]


def test_max_tool_calls_from_task_limits_and_zero(domain, sqlite_backend):
    traj, _ = run(make_task(domain, limits={"max_tool_calls": 1}), domain, sqlite_backend, Forever())
    assert (traj.finish_reason, len(traj.tool_calls), traj.turns) == ("max_tool_calls", 1, 2)
    traj, _ = run(make_task(domain), domain, sqlite_backend, Forever(), max_tool_calls=0)
    assert (traj.finish_reason, len(traj.tool_calls), traj.turns) == ("max_tool_calls", 0, 1)


def test_exactly_max_tool_calls_then_done_is_agent_done(domain, sqlite_backend):
    agent = Scripted([AgentTurn(tool_calls=[ToolCallRequest("a", "get_order", {"order_id": 1}), ToolCallRequest("b", "get_order", {"order_id": 1})])])
    traj, _ = run(make_task(domain), domain, sqlite_backend, agent, max_tool_calls=2)
    assert traj.finish_reason == "agent_done"
    assert len(traj.tool_calls) == 2


# -- the user -------------------------------------------------------------------------------------------


def test_text_goes_to_the_scripted_user_in_order(domain, sqlite_backend):
    class Chatty(Recorder):
        def turn(self, n):
            return AgentTurn(text=f"question {n}")

    agent = Chatty()
    task = make_task(domain, user={"script": ["first answer", "second answer"]})
    traj, _ = run(task, domain, sqlite_backend, agent, make_user("scripted", task))
    assert traj.finish_reason == "user_done"
    assert traj.turns == 3
    assert [(m["role"], m["content"]) for m in traj.messages[1:]] == [
        ("user", task.instruction),
        ("assistant", "question 1"),
        ("user", "first answer"),
        ("assistant", "question 2"),
        ("user", "second answer"),
        ("assistant", "question 3"),
    ]
    # the agent saw each reply before its next turn
    assert agent.seen[1][-1] == {"role": "user", "content": "first answer"}
    assert agent.seen[2][-1] == {"role": "user", "content": "second answer"}
    assert traj.final_reply == "question 3"
    assert task.user.script == ["first answer", "second answer"]  # the user consumed a copy


def test_text_without_a_user_ends_the_episode(domain, sqlite_backend):
    traj, _ = run(make_task(domain), domain, sqlite_backend, Scripted([AgentTurn(text="Anything else?")]), None)
    assert (traj.finish_reason, traj.turns, traj.final_reply) == ("user_done", 1, "Anything else?")


def test_tool_calls_and_done_in_one_turn(domain, sqlite_backend):
    agent = Scripted([AgentTurn(text="Cancelled.", done=True, tool_calls=[ToolCallRequest("x", "cancel_order", {"order_id": 1})])])
    traj, status = run(make_task(domain), domain, sqlite_backend, agent, ScriptedUser(["never asked"]))
    assert traj.finish_reason == "agent_done" and traj.turns == 1
    assert status == "cancelled"
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "tool"]
    assert traj.final_reply == "Cancelled."


# -- tool errors are results -----------------------------------------------------------------------


def test_parse_error_becomes_an_error_tool_message(domain, sqlite_backend):
    agent = Scripted(
        [
            AgentTurn(tool_calls=[ToolCallRequest("bad", "cancel_order", '{"order_id": 1', parse_error="could not parse the arguments")]),
            AgentTurn(tool_calls=[ToolCallRequest("good", "get_order", {"order_id": 1})]),
        ]
    )
    traj, status = run(make_task(domain), domain, sqlite_backend, agent)
    assert traj.finish_reason == "agent_done" and traj.turns == 3
    tool_msgs = [m for m in traj.messages if m["role"] == "tool"]
    assert tool_msgs[0] == {"role": "tool", "tool_call_id": "bad", "name": "cancel_order", "content": "error: could not parse the arguments"}
    assert traj.tool_calls[0].to_json() == {
        "name": "cancel_order",
        "arguments": '{"order_id": 1',
        "ok": False,
        "result": "error: could not parse the arguments",
        "write": False,
    }
    assert traj.messages[2]["tool_calls"][0]["function"]["arguments"] == '{"order_id": 1'  # raw text kept
    assert agent.seen[1][-1]["content"] == "error: could not parse the arguments"
    assert traj.tool_calls[1].ok is True
    assert status == "pending"  # the unparsed call never ran


@pytest.mark.parametrize(
    "name, args, fragment",
    [
        ("refund_order", {"order_id": 1}, "error: unknown tool 'refund_order'"),
        ("cancel_order", {"order_id": "one"}, "error: invalid arguments for cancel_order: order_id"),
        ("cancel_order", {"id": 1}, "error: invalid arguments for cancel_order: order_id: Field required"),
        ("cancel_order", "not json", "error: arguments of cancel_order are not valid JSON"),
        ("broken_tool", {"order_id": 1}, "error: broken_tool failed: RuntimeError: bug in tool"),
    ],
    ids=["unknown-tool", "wrong-type", "missing", "not-json", "crashing-tool"],
)
def test_bad_calls_become_error_tool_messages(domain, sqlite_backend, name, args, fragment):
    agent = Scripted(
        [
            AgentTurn(tool_calls=[ToolCallRequest("c1", name, args)]),
            AgentTurn(tool_calls=[ToolCallRequest("c2", "cancel_order", '{"order_id": 1}')]),  # string args work
        ]
    )
    traj, status = run(make_task(domain), domain, sqlite_backend, agent)
    assert traj.finish_reason == "agent_done"
    first, second = traj.tool_calls
    assert first.ok is False and first.result.startswith(fragment), first.result
    assert agent.seen[1][-1] == {"role": "tool", "tool_call_id": "c1", "name": name, "content": first.result}
    assert second.ok is True and json.loads(second.result) == {"order_id": 1, "status": "cancelled"}
    assert status == "cancelled"


def test_crashing_tool_write_is_rolled_back_in_an_episode(domain, sqlite_backend):
    agent = Scripted([AgentTurn(tool_calls=[ToolCallRequest("c1", "broken_tool", {"order_id": 1})])])
    task = make_task(domain)
    template = sqlite_backend.prepare(domain, task.patch)
    with sqlite_backend.open(template) as sandbox:
        traj = asyncio.run(run_episode(SqlEnvironment(task, sandbox), agent, None))
        assert traj.tool_calls[0].ok is False
        assert sandbox.connection.scalar("SELECT total FROM orders WHERE id = 1") == 10.0
        assert len(sandbox.changes()) == 0


# -- final reply and usage -------------------------------------------------------------------------


def test_final_reply_is_the_last_assistant_text(domain, sqlite_backend):
    agent = Scripted(
        [
            AgentTurn(text="Let me check.", tool_calls=[ToolCallRequest("c1", "get_order", {"order_id": 1})]),
            AgentTurn(tool_calls=[ToolCallRequest("c2", "get_order", {"order_id": 1})]),
            AgentTurn(text="Order 1 is pending.", done=True),
        ]
    )
    traj, _ = run(make_task(domain), domain, sqlite_backend, agent)
    assert traj.final_reply == "Order 1 is pending."
    agent = Scripted(
        [
            AgentTurn(text="Let me check.", tool_calls=[ToolCallRequest("c1", "get_order", {"order_id": 1})]),
            AgentTurn(tool_calls=[ToolCallRequest("c2", "get_order", {"order_id": 1})], done=True),
        ]
    )
    traj, _ = run(make_task(domain), domain, sqlite_backend, agent)
    assert traj.final_reply == "Let me check."  # later tool-only turns carry no text


def test_usage_is_summed_over_turns(domain, sqlite_backend):
    agent = Forever(usage=Usage(input_tokens=100, output_tokens=7, cached_input_tokens=40))
    traj, _ = run(make_task(domain), domain, sqlite_backend, agent, max_turns=4)
    assert traj.usage.to_json() == {"input_tokens": 400, "output_tokens": 28, "cached_input_tokens": 160}


def test_usage_of_mixed_turns_and_extra(domain, sqlite_backend):
    agent = Scripted(
        [
            AgentTurn(text="a", usage=Usage(3, 1, 0), extra={"ids": [1, 2]}),
            AgentTurn(text="b", usage=Usage(5, 2, 4), done=True),
        ]
    )
    traj, _ = run(make_task(domain), domain, sqlite_backend, agent, ScriptedUser(["ok"]))
    assert (traj.usage.input_tokens, traj.usage.output_tokens, traj.usage.cached_input_tokens) == (8, 3, 4)
    assert traj.extra == [{"ids": [1, 2]}]
    assert traj.finish_reason == "agent_done"
