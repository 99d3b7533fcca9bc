"""One reply is at most `types.MAX_REPLY_CHARS` characters (#32 item 14): an agent that floods ends its episode with
finish reason `max_reply_chars` (its failure, graded on the state reached, nothing of the turn run or sent to the user)
and the conversation keeps a cut, never the flood; an LLM user that floods is a system error (`overlong_reply`), audited
or not, and its reply reaches neither the agent nor the record."""

from __future__ import annotations

import asyncio
import json

import pytest
from openai_stub import OpenAIStub, text

from groundstate.agents import make_user
from groundstate.audits.regrade import ReplayAgent
from groundstate.state.sqlite import SqliteBackend
from groundstate.types import FINISH_REASONS, MAX_REPLY_CHARS, AgentTurn, ToolCallRequest
from groundstate.worlds.attempt import play

FLOOD = "spam " * (3 * MAX_REPLY_CHARS // 5)  # 3 x the limit


class Turns:
    def __init__(self, *turns):
        self.turns = list(turns)

    async def act(self, conversation, tools) -> AgentTurn:
        return self.turns.pop(0) if self.turns else AgentTurn(text="Done.", done=True)


class Listener:
    """A user that records what it was sent and answers "ok"."""

    def __init__(self):
        self.heard: list[str] = []

    async def reply(self, conversation, tools=None):
        self.heard.append(conversation[-1]["content"])
        return "ok"


def cancel(order_id=1, call_id="c1") -> ToolCallRequest:
    return ToolCallRequest(call_id, "cancel_order", {"order_id": order_id})


def test_the_limit_is_a_finish_reason():
    assert "max_reply_chars" in FINISH_REASONS


def test_an_agent_that_floods_the_user_ends_its_episode_graded_and_the_record_keeps_a_cut(shop):
    task, user = shop.task("shop-cancel"), Listener()
    out = asyncio.run(play(task, shop, Turns(AgentTurn(text=FLOOD)), user, backend=SqliteBackend()))
    assert out.verdict.system_error is None and out.verdict.reward == 0  # the agent's failure: graded, never repaired
    assert out.trajectory.finish_reason == "max_reply_chars" and user.heard == []  # the user never saw it
    said = out.trajectory.messages[-1]["content"]
    assert said.startswith("spam spam") and len(said) < MAX_REPLY_CHARS + 300
    assert f"the reply was {len(FLOOD):,} characters" in said and "none of it was run" in said
    assert len(json.dumps(out.trajectory.to_json())) < MAX_REPLY_CHARS + 2_000  # what the results file gets


def test_a_flood_of_tool_arguments_is_not_run_and_is_cut(shop):
    """The calls of a flooding turn are answered "not executed" (chat templates need every id answered), a call that
    does not fit is left out of the conversation, and the state the earlier turns reached is what is graded."""
    task = shop.task("shop-cancel")
    flood = AgentTurn(
        tool_calls=[cancel(call_id="small"), ToolCallRequest("big", "add_note", {"customer_id": 1, "body": FLOOD}), cancel(call_id="after")]
    )
    out = asyncio.run(play(task, shop, Turns(flood), Listener(), backend=SqliteBackend()))
    traj = out.trajectory
    assert traj.finish_reason == "max_reply_chars" and traj.tool_calls == [] and out.verdict.reward == 0
    flooded = next(m for m in traj.messages if m["role"] == "assistant")
    assert [c["id"] for c in flooded["tool_calls"]] == ["small"] and "2 tool calls left out" in flooded["content"]
    answers = [m for m in traj.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answers] == ["small"] and answers[0]["content"].endswith("call not executed")
    assert len(json.dumps(traj.to_json())) < 10_000
    # the state reached before the flood is graded: a cancel in an earlier turn passes
    out = asyncio.run(play(task, shop, Turns(AgentTurn(tool_calls=[cancel()]), AgentTurn(text=FLOOD)), Listener(), backend=SqliteBackend()))
    assert out.trajectory.finish_reason == "max_reply_chars" and out.verdict.reward == 1
    # regrade replays the kept cut: the same finish, the same state
    replay = asyncio.run(play(task, shop, ReplayAgent(out.trajectory), Listener(), backend=SqliteBackend()))
    assert replay.trajectory.finish_reason == "max_reply_chars" and replay.verdict.reward == 1


def test_a_reply_at_the_limit_is_delivered(shop):
    user = Listener()
    at_limit = "x" * MAX_REPLY_CHARS
    out = asyncio.run(play(shop.task("shop-cancel"), shop, Turns(AgentTurn(text=at_limit)), user, backend=SqliteBackend()))
    assert user.heard == [at_limit] and out.trajectory.finish_reason != "max_reply_chars"


@pytest.mark.parametrize("audit", [True, False])
@pytest.mark.parametrize("agent", ["How can I help you today?", "Which order? Please list everything you know about it."])
def test_an_llm_user_that_floods_is_a_system_error_and_its_reply_goes_nowhere(shop, audit, agent):
    """After a plain message (`user_audit._plain`) or without the audit, a flood is the user model's fault, a system
    error; after any other message the audit counts it as the agent's doing (#32 item 7, review): the conversation ends
    there and the attempt is graded as it stands. Either way the flood reaches neither the agent nor the record."""
    task = shop.task("shop-cancel")
    with OpenAIStub([text(FLOOD)]) as stub:
        user = make_user(f"openai:user@{stub.base_url}", task, audit=audit)
        out = asyncio.run(play(task, shop, Turns(AgentTurn(text=agent)), user, backend=SqliteBackend()))
    if audit and agent.startswith("Which"):
        assert out.verdict.system_error is None and out.verdict.reward == 0 and out.trajectory.finish_reason == "user_done", out.verdict
        [note] = [r for r in out.verdict.reasons if "provoked" in r]
        assert note.startswith("user-turn audit: overlong_reply the agent provoked") and "the conversation ended there" in note
    else:
        assert (out.verdict.error_kind, out.verdict.fault) == ("user_fault", "overlong_reply"), out.verdict
        assert f"the reply is {len(FLOOD.strip()):,} characters" in out.verdict.system_error
    assert sum(map(len, out.verdict.reasons)) < 2_000  # the fault quotes the start of it, nothing more


def test_any_user_simulator_that_floods_is_stopped_by_the_episode(shop):
    class Flooder:
        async def reply(self, conversation, tools=None):
            return FLOOD

    class Agent:
        def __init__(self):
            self.seen: list[str] = []

        async def act(self, conversation, tools):
            self.seen += [m["content"] for m in conversation if m["role"] == "user"]
            return AgentTurn(text="Which order?")

    agent = Agent()
    out = asyncio.run(play(shop.task("shop-cancel"), shop, agent, Flooder(), backend=SqliteBackend()))
    assert (out.verdict.error_kind, out.verdict.fault) == ("user_fault", "overlong_reply") and FLOOD not in agent.seen
