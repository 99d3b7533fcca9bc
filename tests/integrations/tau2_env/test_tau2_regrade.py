"""`regrade` of τ² attempts: an unchanged task keeps its verdict. The replay starts after the environment's initial
messages (τ²'s greeting is not a turn of the agent's), and the user's own calls (telecom's phone) are made again where
they were made, in their batches; a record that does not say where is kept and counted, never replayed by a guess."""

from __future__ import annotations

import asyncio

from openai_stub import OpenAIStub, text, tool_calls

from groundstate.agents import make_agent, make_user
from groundstate.agents.openai_compat import STOP_TOKEN
from groundstate.agents.scripted import ScriptedAgent
from groundstate.audits.regrade import regrade_records
from groundstate.records import AttemptRecord, ResultsWriter, read_records
from groundstate.worlds.attempt import play
from groundstate.worlds.tau2 import load_tau2


def record(task, domain, outcome, attempt: int = 0) -> AttemptRecord:
    v, traj = outcome.verdict, outcome.trajectory
    return AttemptRecord(
        task_id=task.id,
        attempt=attempt,
        domain=domain.name,
        reward=v.reward,
        system_error=v.system_error,
        unjudged=v.unjudged,
        finish_reason=traj.finish_reason,
        verdict=v,
        trajectory=traj,
    )


def stored(records, tmp_path) -> list[AttemptRecord]:
    """The records as a results file holds them, read back."""
    path = tmp_path / "run.jsonl"
    with ResultsWriter(path) as writer:
        writer.rewrite(records)
    return read_records(path)


def gold(task, domain, user: str = "scripted"):
    agent = make_agent("scripted:gold", task, domain)
    return asyncio.run(play(task, domain, agent, make_user(user, task), backend=None))


def regraded(pairs, tmp_path, user: str = "scripted"):
    """Gold attempts of `pairs`, stored, and their regrade."""
    records = stored([record(t, d, gold(t, d, user)) for t, d in pairs], tmp_path)
    assert all(r.reward == 1 for r in records)
    return records, asyncio.run(regrade_records(records, {t.id: (t, d) for t, d in pairs}, None))


def test_gold_airline_attempts_regrade_to_their_verdicts(tmp_path):
    """Before: an airline attempt with a call flipped pass→fail: τ²'s greeting (an initial message) was replayed as the
    agent's first turn, which went to the user, who had no reply left, and the replay ended before any call."""
    pairs = [(t, d) for t, d in load_tau2(["airline"], local=True) if t.id in ("tau2-airline-1", "tau2-airline-2", "tau2-airline-3")]
    records, result = regraded(pairs, tmp_path)
    assert any(r.trajectory.tool_calls and r.trajectory.messages[1]["role"] == "assistant" for r in records)  # the greeting
    assert result.replayed == len(records) and result.kept == {} and result.flips == {}
    for before, after in zip(records, result.records, strict=True):
        assert (after.reward, after.finish_reason, after.verdict.to_json()) == (before.reward, before.finish_reason, before.verdict.to_json())


def test_gold_telecom_attempts_whose_user_acted_regrade_to_their_verdicts(tmp_path):
    """Before: the gold user's calls (made at its first turn) were never made again, and every such attempt flipped."""
    pairs = [(t, d) for t, d in load_tau2(["telecom"], "small", local=True) if len(t.user.actions) >= 2][:2]
    records, result = regraded(pairs, tmp_path, "scripted:gold")
    assert all(r.trajectory.user_tool_calls for r in records)
    assert result.replayed == len(records) and result.kept == {} and result.flips == {}
    for before, after in zip(records, result.records, strict=True):
        assert (after.reward, after.finish_reason, after.verdict.to_json()) == (before.reward, before.finish_reason, before.verdict.to_json())


def test_an_llm_users_calls_are_replayed_in_their_batches_at_their_turns(tmp_path):
    """An LLM user that acts in two rounds before its first reply and once more before leaving: the replay makes the
    same calls in the same batches at the same turns, and the verdict is the recorded one. The same record without
    its batches (as records were before they were kept) is not replayed: where its calls were made is unknown."""
    task, domain = next((t, d) for t, d in load_tau2(["telecom"], "small", local=True) if len(t.user.actions) >= 2)
    mine = [(c.tool, c.args) for c in task.user.actions]
    agent = ScriptedAgent([c.model_dump() for c in task.gold], final_text="Please fix your phone.", hand_over=True)
    with OpenAIStub() as stub:
        stub.push(tool_calls(mine[0]), tool_calls(*mine[1:]), text("Done on my side."), tool_calls(mine[0]), text(STOP_TOKEN))
        user = make_user(f"openai:user-model@{stub.base_url}", task)
        outcome = asyncio.run(play(task, domain, agent, user, backend=None))
    traj = outcome.trajectory
    assert traj.finish_reason == "user_done" and outcome.verdict.system_error is None
    reply = next(i for i, m in enumerate(traj.messages) if m["role"] == "user" and m["content"] == "Done on my side.")
    assert [(b.at, b.calls) for b in traj.user_tool_batches] == [(reply, 1), (reply, len(mine) - 1), (len(traj.messages), 1)]
    records = stored([record(task, domain, outcome)], tmp_path)
    result = asyncio.run(regrade_records(records, {task.id: (task, domain)}, None))
    assert result.flips == {} and result.replayed == 1
    [after] = result.records
    assert (after.reward, after.verdict.to_json()) == (records[0].reward, records[0].verdict.to_json())

    # the replayed attempt itself: the same user calls, batches and conversation
    from groundstate.audits.regrade import ReplayAgent, ReplayUser

    again = asyncio.run(play(task, domain, ReplayAgent(records[0].trajectory), ReplayUser(records[0].trajectory), backend=None)).trajectory
    assert again.user_tool_calls == traj.user_tool_calls and again.user_tool_batches == traj.user_tool_batches
    assert again.messages == traj.messages

    unplaced = records[0].model_copy(update={"trajectory": records[0].trajectory.model_copy(update={"user_tool_batches": []})})
    result = asyncio.run(regrade_records([unplaced], {task.id: (task, domain)}, None))
    assert result.replayed == 0 and result.kept == {"user's own calls not placed (recorded before their batches were)": 1}
    assert result.records == [unplaced]


def test_a_trajectory_with_fewer_assistant_messages_than_turns_is_kept_as_malformed(tmp_path):
    task, domain = next((t, d) for t, d in load_tau2(["airline"], local=True) if t.id == "tau2-airline-2")
    [rec] = stored([record(task, domain, gold(task, domain))], tmp_path)
    bad = rec.model_copy(
        update={"trajectory": rec.trajectory.model_copy(update={"turns": 1 + sum(m["role"] == "assistant" for m in rec.trajectory.messages)})}
    )
    result = asyncio.run(regrade_records([bad], {task.id: (task, domain)}, None))
    assert result.kept == {"malformed trajectory": 1} and result.records == [bad]
