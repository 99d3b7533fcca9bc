"""`groundstate regrade`: stored attempts replayed (no model calls) against edited task definitions give exactly the
expected verdict flips; unchanged tasks keep their verdicts whole; what cannot be replayed is kept and counted."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from groundstate.audits.regrade import regrade_records
from groundstate.cli import app
from groundstate.records import read_records
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.domain import Domain

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"
runner = CliRunner()


def copy_shop(tmp_path: Path) -> Path:
    shop = tmp_path / "shop"
    shutil.copytree(SHOP, shop)
    return shop


def run(shop: Path, agent: str, out: Path, k: int = 2) -> list:
    r = runner.invoke(app, ["run", "--agent", agent, "--tasks", str(shop), "--k", str(k), "--out", str(out)])
    assert r.exit_code == 0, r.output
    return read_records(out)


def edit_task(shop: Path, old: str, new: str) -> None:
    tasks = shop / "tasks" / "basic.yaml"
    text = tasks.read_text()
    assert text.count(old) == 1
    tasks.write_text(text.replace(old, new))


def test_a_fixed_gold_flips_exactly_the_attempts_it_should(tmp_path):
    shop = copy_shop(tmp_path)
    gold = run(shop, "scripted:gold", tmp_path / "gold.jsonl")
    noop = run(shop, "scripted:noop", tmp_path / "noop.jsonl", k=1)
    assert {r.outcome for r in gold} == {"pass"} and {r.outcome for r in noop} == {"fail"}
    # the fix: order 1 must not be cancelled after all, only looked up (the correct outcome is now "no change")
    edit_task(shop, "      - {tool: cancel_order, args: {order_id: 1}}\n", "      - {tool: get_order, args: {order_id: 1}}\n")
    flips = {}
    for name, records in (("gold", gold), ("noop", noop)):
        out = tmp_path / f"{name}.regraded.jsonl"
        r = runner.invoke(app, ["regrade", str(tmp_path / f"{name}.jsonl"), "--out", str(out), "--tasks", str(shop), "--json"])
        assert r.exit_code == 0, r.output
        report = json.loads(r.stdout)
        flips[name] = report["flips"]
        assert report["replayed"] == len(records) and report["kept"] == {}
        new = read_records(out)
        assert [x.key for x in new] == [x.key for x in records]  # every attempt, in the run's order
        for before, after in zip(records, new, strict=True):
            assert after.regraded["reward"] == before.reward and after.usage == before.usage and after.run == before.run
            if before.task_id != "shop-cancel":  # untouched tasks: the whole verdict as it was
                assert after.verdict == before.verdict and after.task_fingerprint == before.task_fingerprint
            else:
                assert after.task_fingerprint != before.task_fingerprint
    assert flips == {"gold": {"shop-cancel": {"pass→fail": 2}}, "noop": {"shop-cancel": {"fail→pass": 1}}}
    # the regraded file is a run the analysis commands read
    m = runner.invoke(app, ["metrics", str(tmp_path / "gold.regraded.jsonl"), "--json"])
    assert m.exit_code == 0, m.output
    assert json.loads(m.stdout)["pass_at_1"] == (len(gold) - 2) / len(gold)


def test_regrading_an_unchanged_run_of_a_noisy_agent_changes_nothing(tmp_path):
    run_file = tmp_path / "noisy.jsonl"
    records = run(copy_shop(tmp_path), "scripted:noisy:0.5", run_file, k=4)
    assert {r.outcome for r in records} == {"pass", "fail"}
    r = runner.invoke(app, ["regrade", str(run_file), "--out", str(tmp_path / "again.jsonl"), "--tasks", str(tmp_path / "shop"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["flips"] == {}
    again = read_records(tmp_path / "again.jsonl")
    assert [(x.reward, x.verdict, x.finish_reason) for x in again] == [(x.reward, x.verdict, x.finish_reason) for x in records]


def test_what_cannot_be_replayed_is_kept_and_counted_and_the_input_is_never_overwritten(tmp_path):
    shop = copy_shop(tmp_path)
    records = run(shop, "scripted:gold", tmp_path / "run.jsonl", k=1)
    broken = records[0].model_copy(update={"reward": None, "system_error": "SandboxLost: gone", "trajectory": None, "finish_reason": None})
    cut = records[1].model_copy(
        update={
            "reward": None,
            "system_error": "EpisodeHang: a tool hung",
            "trajectory": records[1].trajectory.model_copy(update={"finish_reason": ""}),
        }
    )
    pairs = {t.id: (t, d) for d in [Domain(shop)] for t in d.tasks}
    del pairs[records[2].task_id]  # a task that no longer exists
    garbled = [
        records[0].model_copy(
            update={"trajectory": records[0].trajectory.model_copy(update={"messages": [{"role": "user", "content": ["not text"]}]})}
        ),
        records[1].model_copy(
            update={"trajectory": records[1].trajectory.model_copy(update={"messages": [{"role": "assistant", "tool_calls": "x"}]})}
        ),
        records[0].model_copy(update={"attempt": 5, "domain": "another"}),
    ]
    result = asyncio.run(regrade_records([broken, cut, *records[2:], *garbled], pairs, SqliteBackend()))
    assert result.kept == {
        "no trajectory": 1,
        "cut short by a system error": 1,
        "task no longer defined": 1,
        "malformed trajectory": 2,
        "task id now in another domain": 1,
    }
    assert result.records[:3] == [broken, cut, records[2]] and result.records[-3:] == garbled and result.replayed == len(records) - 3
    before = (tmp_path / "run.jsonl").read_bytes()
    r = runner.invoke(app, ["regrade", str(tmp_path / "run.jsonl"), "--out", str(tmp_path / "run.jsonl"), "--tasks", str(shop)])
    assert r.exit_code == 2 and "never rewrites the run it reads" in r.output
    (tmp_path / "taken.jsonl").write_text("")
    r = runner.invoke(app, ["regrade", str(tmp_path / "run.jsonl"), "--out", str(tmp_path / "taken.jsonl"), "--tasks", str(shop)])
    assert r.exit_code == 2 and "exists" in r.output
    assert (tmp_path / "run.jsonl").read_bytes() == before


def test_a_rubric_judgement_is_kept_only_while_the_state_still_passes(tmp_path):
    shop = copy_shop(tmp_path)
    edit_task(shop, "    family: single_write\n", "    family: single_write\n    rubrics: [Did the agent confirm the cancellation?]\n")
    records = [r for r in run(shop, "scripted:gold", tmp_path / "run.jsonl", k=1) if r.task_id == "shop-cancel"]
    [unjudged] = records
    assert unjudged.unjudged and unjudged.verdict.state_reward == 1
    judged = unjudged.model_copy(update={"reward": 1, "unjudged": False})  # as a run with --judge recorded it
    pairs = {t.id: (t, d) for d in [Domain(shop)] for t in d.tasks}
    [kept] = asyncio.run(regrade_records([judged], pairs, SqliteBackend())).records
    assert kept.reward == 1 and not kept.unjudged and any("recorded judgement is kept" in x for x in kept.verdict.reasons)
    [still] = asyncio.run(regrade_records([unjudged], pairs, SqliteBackend())).records
    assert still.unjudged and still.reward is None  # never judged: regrade does not guess
    edit_task(shop, "      - {tool: cancel_order, args: {order_id: 1}}\n", "      - {tool: get_order, args: {order_id: 1}}\n")
    pairs = {t.id: (t, d) for d in [Domain(shop)] for t in d.tasks}
    [failed] = asyncio.run(regrade_records([judged], pairs, SqliteBackend())).records
    assert failed.reward == 0 and not failed.unjudged  # a failing state is a 0 whatever the reply


def test_a_dead_judge_is_one_line_before_any_replay(tmp_path):
    import socket

    shop = copy_shop(tmp_path)
    run(shop, "scripted:gold", tmp_path / "run.jsonl", k=1)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"openai:j@http://127.0.0.1:{s.getsockname()[1]}/v1"
    out = tmp_path / "regraded.jsonl"
    r = runner.invoke(app, ["regrade", str(tmp_path / "run.jsonl"), "--tasks", str(shop), "--judge", dead, "--out", str(out)])
    assert r.exit_code == 2 and f"--judge {dead}: cannot reach" in r.output and "nothing was regraded or written" in r.output, r.output
    assert len([line for line in r.output.splitlines() if line.strip()]) == 1 and not out.exists()


def test_a_tool_call_id_that_is_an_object_or_a_list_is_a_malformed_trajectory_kept_and_counted(tmp_path):
    """#32 item 17: an unhashable id (in an assistant's tool call, or a tool message's `tool_call_id`) crashed the
    whole regrade with "unhashable type" and wrote nothing; such a record is kept as it is and counted."""
    shop = copy_shop(tmp_path)
    records = run(shop, "scripted:gold", tmp_path / "run.jsonl", k=1)
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    hostile = []
    for n, bad in enumerate(({"id": "call_1"}, ["call_1"])):
        for where in ("assistant", "tool"):
            rec = json.loads(lines[0])
            for m in rec["trajectory"]["messages"]:
                if where == "assistant" and m["role"] == "assistant" and m.get("tool_calls"):
                    m["tool_calls"][0]["id"] = bad
                if where == "tool" and m["role"] == "tool":
                    m["tool_call_id"] = bad
            rec["attempt"] = 10 + 2 * n + (where == "tool")
            hostile.append(json.dumps(rec))
    (tmp_path / "run.jsonl").write_text("\n".join(lines + hostile) + "\n")
    out = tmp_path / "regraded.jsonl"
    r = runner.invoke(app, ["regrade", str(tmp_path / "run.jsonl"), "--out", str(out), "--tasks", str(shop), "--json"])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    report = json.loads(r.stdout)
    assert report["kept"] == {"malformed trajectory": 4} and report["replayed"] == len(records) and report["flips"] == {}
    new = read_records(out)
    assert [x.key for x in new] == [x.key for x in read_records(tmp_path / "run.jsonl")]  # every record, in order
    assert out.read_text().splitlines()[len(records) :] == hostile  # kept byte for byte


# -- tool-call ids are labels, not keys (#32, review of item 17) ----------------------------------------------------


def same_ids(record_line: str, ids) -> dict:
    """A recorded attempt whose calls are renamed by `ids` (turn index, index in turn → id), then one more call that the
    tool-call limit stopped, as the episode answers it: the record a model server that omits call ids leaves."""
    rec = json.loads(record_line)
    msgs, turn = [], -1
    for m in rec["trajectory"]["messages"]:
        m = dict(m)
        if m["role"] == "assistant" and m.get("tool_calls"):
            turn += 1
            m["tool_calls"] = [dict(c, id=ids(turn, k)) for k, c in enumerate(m["tool_calls"])]
            answered = 0
        if m["role"] == "tool":
            m["tool_call_id"] = ids(turn, answered)
            answered += 1
        msgs.append(m)
    assert msgs.pop()["role"] == "assistant"  # "Done.": the agent calls once more instead
    late = ids(turn + 1, 0)
    msgs.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": late, "type": "function", "function": {"name": "cancel_order", "arguments": '{"order_id": 3}'}}],
        }
    )
    msgs.append({"role": "tool", "tool_call_id": late, "name": "cancel_order", "content": "error: tool-call limit reached; call not executed"})
    rec["trajectory"] = {**rec["trajectory"], "messages": msgs, "finish_reason": "max_tool_calls"}
    rec["finish_reason"] = "max_tool_calls"
    return rec


def test_calls_that_share_an_id_are_replayed_when_they_ran(tmp_path):
    """A passing multi-step attempt whose server omitted call ids (every call `call_0`, as `openai_compat` named them per
    turn) and whose last call the tool-call limit stopped: matched by id, every `call_0` was skipped, the executed
    writes too, and an unchanged task flipped pass→fail. Matched by position, it regrades as it was; so does the same
    record with unique ids."""
    shop = copy_shop(tmp_path)
    run(shop, "scripted:gold", tmp_path / "gold.jsonl", k=1)
    [line] = [x for x in (tmp_path / "gold.jsonl").read_text().splitlines() if json.loads(x)["task_id"] == "shop-multi"]
    for name, ids in (("repeated", lambda turn, k: "call_0"), ("unique", lambda turn, k: f"call_{turn}_{k}")):
        rec = same_ids(line, ids)
        assert rec["reward"] == 1 and len([m for m in rec["trajectory"]["messages"] if m["role"] == "tool"]) == 6
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(rec) + "\n")
        out = tmp_path / f"{name}.regraded.jsonl"
        r = runner.invoke(app, ["regrade", str(tmp_path / f"{name}.jsonl"), "--out", str(out), "--tasks", str(shop), "--json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["flips"] == {}, (name, r.stdout)
        [after] = read_records(out)
        assert after.reward == 1 and after.verdict.to_json() == rec["verdict"], (name, after.verdict)


def test_a_turn_whose_calls_share_an_id_replays_every_call_that_ran():
    """An episode of a model whose calls all share ids across turns and within one (call_0, call_1 in every turn), the
    tool-call limit stopping the second call of the last turn: the replay runs exactly the calls that ran, in order."""
    from groundstate.agents.scripted import ScriptedUser
    from groundstate.audits.regrade import ReplayAgent, ReplayUser
    from groundstate.types import AgentTurn, EpisodeLimits, ToolCallRequest
    from groundstate.worlds.attempt import play

    domain = Domain(SHOP)
    task = domain.task("shop-multi")
    gold = [(c.tool, dict(c.args)) for c in task.gold]

    class SameIds:
        def __init__(self, turns):
            self.turns = list(turns)

        async def act(self, conversation, tools):
            if not self.turns:
                return AgentTurn(text="Done.", done=True)
            return AgentTurn(tool_calls=[ToolCallRequest(f"call_{k}", name, args) for k, (name, args) in enumerate(self.turns.pop(0))])

    # a lookup whose error quotes the words of a stopped call: it ran, and is replayed
    quoting = ("find_customer", {"email": "nobody; tool-call limit reached; call not executed"})
    turns = [[gold[0], quoting], gold[1:3], [gold[3], ("cancel_order", {"order_id": 3})], gold[4:]]
    limits = EpisodeLimits(max_tool_calls=5)  # the 6th call (the second of the third turn) is stopped, and the episode ends
    first = asyncio.run(play(task, domain, SameIds(turns), ScriptedUser([]), limits, backend=SqliteBackend()))
    ran = [(c.name, c.arguments) for c in first.trajectory.tool_calls]
    assert ran == [gold[0], quoting, *gold[1:4]] and first.trajectory.finish_reason == "max_tool_calls"
    messages = first.trajectory.messages
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ["call_0", "call_1"] * 3
    assert messages[4]["content"].endswith("call not executed") and messages[-1]["content"] == "error: tool-call limit reached; call not executed"
    again = asyncio.run(play(task, domain, ReplayAgent(first.trajectory), ReplayUser(first.trajectory), EpisodeLimits(), backend=SqliteBackend()))
    assert [(c.name, c.arguments) for c in again.trajectory.tool_calls] == ran
    assert again.verdict.to_json() == first.verdict.to_json()
