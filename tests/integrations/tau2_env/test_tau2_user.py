"""An LLM user on τ²'s telecom: offered its own tools (the customer's phone), it calls them through the real `openai`
client (against the local stub server), the attempt runs them on τ²'s environment, and the verdict is τ²'s own for the
same calls. The user cache serves no reply of such a user: its calls change the state."""

from __future__ import annotations

import asyncio

from openai_stub import OpenAIStub, text, tool_calls

from groundstate.agents import make_user
from groundstate.agents.openai_compat import MAX_USER_TOOL_ROUNDS, STOP_TOKEN
from groundstate.agents.scripted import ScriptedAgent
from groundstate.agents.user_audit import UserSimulatorFault
from groundstate.agents.user_cache import UserCache, UserReplies
from groundstate.worlds.episode import run_episode
from groundstate.worlds.tau2 import load_tau2
from groundstate.worlds.tau2.parity import Variant, theirs

ASK = "Please toggle the setting on your phone and run a speed test."


def telecom_task():
    return next((t, d) for t, d in load_tau2(["telecom"], "small", local=True) if len(t.user.actions) >= 2)


def attempt(task, domain, user):
    async def go():
        env = await domain.open_environment(task, None)
        try:
            agent = ScriptedAgent([c.model_dump() for c in task.gold], final_text=ASK, hand_over=True)
            traj = await run_episode(env, agent, user)
            return traj, await env.grade(traj)
        finally:
            await env.close()

    return asyncio.run(go())


def test_an_llm_user_acts_on_its_phone_and_gets_taus_verdict(tmp_path):
    task, domain = telecom_task()
    mine = [(c.tool, c.args) for c in task.user.actions]
    with OpenAIStub() as stub:
        # first its own calls, one round each, then it answers; on the next turn it leaves
        stub.push(*(tool_calls(call) for call in mine), text("It works now, thanks."), text(STOP_TOKEN))
        user = make_user(f"openai:user-model@{stub.base_url}", task)
        traj, verdict = attempt(task, domain, user)
        bodies = stub.bodies()
    assert [c.name for c in traj.user_tool_calls] == [name for name, _ in mine] and all(c.ok for c in traj.user_tool_calls)
    assert verdict.system_error is None and traj.finish_reason == "user_done"
    reward, _ = theirs(task, domain, Variant([c.model_dump() for c in task.gold], ASK, [c.model_dump() for c in task.user.actions]))
    assert verdict.reward == int(reward) == 1
    # offered its tools; each round saw the results of the last; its exchanges stay in its view on the next turn
    assert all(b["tools"] and {t["function"]["name"] for t in b["tools"]} >= {n for n, _ in mine} for b in bodies)
    assert [sum(m["role"] == "tool" for m in b["messages"]) for b in bodies] == [*range(len(mine) + 1), len(mine)]
    assert "tools of your own" in bodies[0]["messages"][0]["content"]
    # the agent never saw them: its conversation answers its own calls only, and holds the user's words only
    assert sum(m["role"] == "tool" for m in traj.messages) == len(traj.tool_calls)
    assert [m["content"] for m in traj.messages if m["role"] == "user"][1:] == ["It works now, thanks."]


def test_a_user_that_never_stops_calling_is_a_user_fault_and_the_cache_serves_it_nothing(tmp_path):
    task, domain = telecom_task()
    name, args = task.user.actions[0].tool, task.user.actions[0].args
    with OpenAIStub() as stub:
        stub.push(*(tool_calls((name, args)) for _ in range(MAX_USER_TOOL_ROUNDS + 1)))
        user = make_user(f"openai:user-model@{stub.base_url}", task, audit=False)
        try:
            attempt(task, domain, user)
            raise AssertionError("no fault")
        except UserSimulatorFault as e:
            assert e.kind == "overlong_reply" and "tool calls" in str(e)
        # a cache: the same conversation twice, the model asked both times (nothing stored, nothing served)
        stub.push(tool_calls((name, args)), text(STOP_TOKEN), tool_calls((name, args)), text(STOP_TOKEN))
        cache, replies = UserCache(tmp_path / "users.sqlite"), UserReplies()
        for _ in range(2):
            user = make_user(f"openai:user-model@{stub.base_url}", task, cache=cache, replies=replies)
            traj, _ = attempt(task, domain, user)
            assert [c.name for c in traj.user_tool_calls] == [name]
    assert (replies.generated, replies.cached) == (2, 0)
