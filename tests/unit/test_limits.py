"""Resource limits: wall-clock timeout, tool-result cap, token cap. Hitting one is a finish reason, never a crash.

- the agent running out of time ends the attempt with finish reason `timeout`, graded on the state reached;
- a tool that hangs (a query that never returns) is infrastructure: a system error, the query is
  interrupted and the sandbox released, on both backends;
- results longer than `max_result_chars` are cut for the agent with a visible marker, kept whole in the trajectory;
- crossing `max_tokens` (agent input + output tokens) ends the attempt with finish reason `max_tokens`;
- the same limits drive `groundstate run` end to end against an OpenAI-compatible endpoint.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from openai_stub import OpenAIStub, delayed, text, tool_call
from typer.testing import CliRunner

from groundstate.agents import make_agent, make_user
from groundstate.cli import app
from groundstate.pipeline.report import render
from groundstate.records import read_records
from groundstate.state.sqlite import SqliteBackend
from groundstate.stats.metrics import compute
from groundstate.types import FINISH_REASONS, AgentTurn, EpisodeLimits, ToolCallRequest, ToolResult, Usage
from groundstate.worlds.attempt import play
from groundstate.worlds.environment import SqlEnvironment
from groundstate.worlds.episode import truncate_result

SHOP = str(Path(__file__).parents[1] / "fixtures" / "shop")


class Turns:
    """Plays the given turns in order; a turn may be an `asyncio.Event` to wait on (a slow agent)."""

    def __init__(self, *turns):
        self.turns = list(turns)

    async def act(self, conversation, tools) -> AgentTurn:
        turn = self.turns.pop(0) if self.turns else AgentTurn(text="Done.", done=True)
        if isinstance(turn, asyncio.Event):
            await turn.wait()
            return AgentTurn(text="finally", done=True)
        return turn


def call(name, **args) -> AgentTurn:
    return AgentTurn(tool_calls=[ToolCallRequest(f"c_{name}", name, args)], usage=Usage(60, 10))


def test_finish_reasons_are_declared():
    assert {"timeout", "max_tokens", "max_turns", "max_tool_calls", "agent_done", "user_done"} <= set(FINISH_REASONS)


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="timeout must be positive"):
        EpisodeLimits(timeout=0)
    with pytest.raises(ValueError, match="max_tokens must be positive"):
        EpisodeLimits(max_tokens=-5)


# -- wall clock ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("writes, reward", [(True, 1), (False, 0)])
def test_agent_out_of_time_is_graded_on_the_state_reached(shop, writes, reward):
    """The agent stalls after its first turn: finish reason `timeout`, and the verdict reads the final state."""
    task = shop.task("shop-cancel")
    backend = SqliteBackend()
    first = call("cancel_order", order_id=1) if writes else call("get_order", order_id=1)
    out = asyncio.run(play(task, shop, Turns(first, asyncio.Event()), None, EpisodeLimits(timeout=1.0), backend=backend))
    assert out.verdict.system_error is None
    assert out.trajectory.finish_reason == "timeout" and out.trajectory.turns == 1
    assert out.verdict.reward == reward, out.verdict.reasons


class HangingEnvironment(SqlEnvironment):
    """A SQL domain's environment, except that `get_order` runs a query that never ends (a hung tool or backend)."""

    hung_call_ended = threading.Event()
    hung_error: BaseException | None = None

    def _call(self, name, arguments) -> ToolResult:
        if name != "get_order":
            return super()._call(name, arguments)
        forever = (
            "SELECT pg_sleep(3600)"
            if self.sandbox.connection.dialect == "postgres"
            else "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
        )
        try:
            with self.sandbox.in_use():
                self.sandbox.connection.query(forever)
        except Exception as e:  # interrupted by the episode's time limit
            type(self).hung_error = e
        finally:
            self.hung_call_ended.set()
        return ToolResult(True, "{}")


class HangingDomain:
    """A domain whose attempts run in a `HangingEnvironment`."""

    def __init__(self, domain):
        self.domain = domain

    def __getattr__(self, name):
        return getattr(self.domain, name)

    async def open_environment(self, task, backend, limits):
        return await HangingEnvironment.open(task, self.domain, backend, limits)


def test_hung_tool_is_a_system_error_and_its_query_is_interrupted(backend, shop):
    task = shop.task("shop-cancel")
    domain = HangingDomain(shop)
    HangingEnvironment.hung_call_ended.clear()
    HangingEnvironment.hung_error = None
    agent = Turns(call("cancel_order", order_id=1), call("get_order", order_id=1))
    in_use = getattr(backend, "in_use", 0)
    out = asyncio.run(play(task, domain, agent, None, EpisodeLimits(timeout=2.0), backend=backend))
    assert out.verdict.reward is None
    assert "tool get_order did not return within the attempt time limit" in out.verdict.system_error
    assert HangingEnvironment.hung_call_ended.wait(10), "the hung query was not interrupted"
    assert HangingEnvironment.hung_error is not None  # sqlite3 'interrupted' / psycopg QueryCanceled
    assert getattr(backend, "in_use", 0) == in_use  # the sandbox was released


def test_hung_user_simulator_is_a_system_error(shop):
    task = shop.task("shop-cancel")
    backend = SqliteBackend()

    class HungUser:
        async def reply(self, conversation, tools=None):
            await asyncio.Event().wait()

    agent = Turns(call("cancel_order", order_id=1), AgentTurn(text="Cancelled. Anything else?"))
    out = asyncio.run(play(task, shop, agent, HungUser(), EpisodeLimits(timeout=1.0), backend=backend))
    assert out.verdict.reward is None and "the user simulator did not return within the attempt time limit" in out.verdict.system_error
    assert backend.in_use == 0


# -- tool-result size ---------------------------------------------------------------------------------


def test_long_tool_results_are_cut_for_the_agent_and_kept_in_the_trajectory(shop):
    task = shop.task("shop-multi")
    backend = SqliteBackend()
    out = asyncio.run(
        play(task, shop, make_agent("scripted:gold", task, shop), make_user("scripted", task), EpisodeLimits(max_result_chars=30), backend=backend)
    )
    traj = out.trajectory
    assert out.verdict.reward == 1  # the cap changes what the agent sees, not what the tools do
    full = traj.tool_calls[0].result
    assert len(full) > 30 and json.loads(full)["email"] == "c3@example.com" and traj.tool_calls[0].truncated is True
    shown = [m["content"] for m in traj.messages if m["role"] == "tool"][0]
    assert shown == full[:30] + f"\n…[truncated: showing 30 of {len(full)} characters]"
    assert truncate_result("short", 30) == "short"
    assert all(not c.truncated for c in traj.tool_calls if len(c.result) <= 30)


# -- tokens -------------------------------------------------------------------------------------------


def test_crossing_the_token_budget_ends_the_attempt_and_skips_that_turns_calls(shop):
    task = shop.task("shop-multi")
    backend = SqliteBackend()
    agent = Turns(call("set_tier", customer_id=3, tier="gold"), call("set_total", order_id=3, total=42.5), call("cancel_order", order_id=3))
    out = asyncio.run(play(task, shop, agent, None, EpisodeLimits(max_tokens=150), backend=backend))
    traj = out.trajectory
    # turn 1: 70 tokens, turn 2: 140, turn 3: 210 > 150 — its call is answered with an error, not executed
    assert traj.finish_reason == "max_tokens" and traj.turns == 3
    assert [c.name for c in traj.tool_calls] == ["set_tier", "set_total"]
    assert traj.messages[-1]["content"] == "error: token limit reached; call not executed"
    assert out.verdict.system_error is None and out.verdict.reward == 0
    assert out.verdict.changes  # graded on the two writes that happened


def test_a_text_turn_over_the_budget_does_not_reach_the_user(shop):
    task = shop.task("shop-cancel")
    backend = SqliteBackend()

    class NeverUser:
        async def reply(self, conversation, tools=None):  # pragma: no cover - must not be called
            raise AssertionError("the user was asked after the budget was spent")

    agent = Turns(AgentTurn(text="Which order?", usage=Usage(500, 20)))
    out = asyncio.run(play(task, shop, agent, NeverUser(), EpisodeLimits(max_tokens=100), backend=backend))
    assert out.trajectory.finish_reason == "max_tokens" and out.verdict.reward == 0


# -- end to end through the command line --------------------------------------------------------------


def run_cli(tmp_path, stub, *flags):
    path = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        app, ["run", "--agent", f"openai:m@{stub.base_url}", "--tasks", SHOP, "--out", str(path), "--concurrency", "1", *flags]
    )
    assert result.exit_code == 0, result.output
    return read_records(path)


def test_cli_token_and_result_caps_are_finish_reasons(tmp_path):
    # the endpoint keeps calling get_order at 110 tokens a turn: the third turn crosses 250
    with OpenAIStub(default=tool_call("get_order", {"order_id": 1}, usage=(100, 10))) as stub:
        records = run_cli(tmp_path, stub, "--max-attempt-tokens", "250", "--max-result-chars", "12")
    assert len(records) == 3
    for r in records:
        assert r.system_error is None and r.reward == 0 and r.finish_reason == "max_tokens"
        assert r.usage.input_tokens + r.usage.output_tokens == 330
        shown = [m["content"] for m in r.trajectory.messages if m["role"] == "tool"]
        assert shown[0].startswith(r.trajectory.tool_calls[0].result[:12] + "\n…[truncated: showing 12 of ")
    manifest = json.loads((tmp_path / "results.jsonl.manifest.json").read_text())
    assert manifest["config"]["limits"]["max_tokens"] == 250 and manifest["config"]["limits"]["max_result_chars"] == 12
    assert compute(records, bootstrap_reps=0)["finish_reasons"] == {"max_tokens": 3}
    assert "finish reasons: max_tokens 3" in render(records, "limits")


def test_cli_attempt_timeout_is_a_finish_reason_not_a_system_error(tmp_path):
    # the endpoint answers the first turn at once, then stalls far beyond the attempt's time limit
    replies = [tool_call("get_order", {"order_id": 1}), delayed(30, text("too late"))] * 3
    with OpenAIStub(replies) as stub:
        records = run_cli(tmp_path, stub, "--attempt-timeout", "1.5")
    assert len(records) == 3
    for r in records:
        assert r.system_error is None and r.finish_reason == "timeout" and r.reward == 0
        assert r.trajectory.turns == 1


def test_cli_arguments_nested_past_the_bound_are_the_agents_error_never_a_crash(tmp_path):
    """Arguments one level past `MAX_DEPTH`, deep enough to break the record's writer (600), and past the JSON parser
    itself (2,000): each is an error answered to the model, the record keeps the raw text, and the attempt is graded
    on the state reached (before: a traceback that stopped the run, or a system error)."""
    from groundstate.jsontext import MAX_DEPTH

    deep = {n: '{"order_id": ' + "[" * n + "1" + "]" * n + "}" for n in (MAX_DEPTH, 600, 2000)}
    replies = [r for raw in deep.values() for r in (tool_call("get_order", raw), text("Done."))]
    with OpenAIStub(replies) as stub:
        records = run_cli(tmp_path, stub)
    assert len(records) == 3 and all(r.system_error is None and r.reward in (0, 1) for r in records)
    calls = {c.arguments: c for r in records for c in r.trajectory.tool_calls}
    assert set(calls) == set(deep.values())  # each attempt's raw arguments, kept as the model wrote them
    assert all(not c.ok and f"nested deeper than {MAX_DEPTH} levels" in c.result for c in calls.values())
    results = str(tmp_path / "results.jsonl")  # and every reader of the file takes them as it wrote them
    exported = CliRunner().invoke(app, ["export", results, "--format", "sft-jsonl", "--all-attempts", "--out", str(tmp_path / "sft")])
    assert exported.exit_code == 0 and "Traceback" not in exported.output, exported.output
    regraded = CliRunner().invoke(app, ["regrade", results, "--tasks", SHOP, "--out", str(tmp_path / "regraded.jsonl")])
    assert regraded.exit_code == 0 and "no verdict flipped" in regraded.output, regraded.output


def test_arguments_nested_past_the_bound_from_any_agent_are_not_run():
    """The episode's last guard, for an agent that hands over parsed arguments (scripted, adapters, local models)."""
    from groundstate.agents.base import TOO_DEEP, well_formed
    from groundstate.agents.toolcall_format import parse_content
    from groundstate.jsontext import MAX_DEPTH, too_deep

    nested: object = 1
    for _ in range(MAX_DEPTH):
        nested = [nested]
    assert not too_deep({"x": nested}, MAX_DEPTH + 1) and too_deep({"x": nested})
    ok = ToolCallRequest("c1", "get_order", {"x": nested[0]})  # type: ignore[index]
    deep = ToolCallRequest("c2", "get_order", {"x": nested})
    kept, refused = well_formed(AgentTurn(tool_calls=[ok, deep])).tool_calls
    assert kept == ok
    assert refused.arguments == TOO_DEEP and f"deeper than {MAX_DEPTH}" in (refused.parse_error or "")
    body = json.dumps({"name": "get_order", "arguments": {"x": nested}})
    [call] = parse_content(f"<tool_call>{body}</tool_call>", "hermes").tool_calls
    assert call.arguments == body and "nested deeper" in (call.parse_error or "")
