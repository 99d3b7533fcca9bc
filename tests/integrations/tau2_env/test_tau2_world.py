"""τ² tasks as a groundstate world: the selector, the command line end to end, the verdict's diff, hostile calls, forks
and references in another process. Parity with τ²'s own harness is `test_tau2_parity.py`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser
from groundstate.records import read_records
from groundstate.worlds.episode import Episode, run_episode
from groundstate.worlds.refs import TaskResolver
from groundstate.worlds.selectors import select_tasks
from groundstate.worlds.tau2 import load_tau2
from groundstate.worlds.tau2.domain import task_id

CLI = str(Path(sys.executable).parent / "groundstate")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_selectors_name_domains_and_taus_own_splits():
    sizes = {
        s: len(select_tasks(s))
        for s in (
            "tau2:airline",
            "tau2:airline:train",
            "tau2:airline:test",
            "tau2:retail:train",
            "tau2:retail:test",
            "tau2:telecom",
            "tau2:telecom:train",
            "tau2:telecom:test",
            "tau2:telecom:small",
            "tau2:telecom:full",
            "tau2:mock",
            "tau2:all",
            "tau2:all:test",
        )
    }
    assert sizes == {
        "tau2:airline": 50,
        "tau2:airline:train": 30,
        "tau2:airline:test": 20,
        "tau2:retail:train": 74,
        "tau2:retail:test": 40,
        "tau2:telecom": 114,  # τ²'s default list (`base`) of its 2,285
        "tau2:telecom:train": 74,
        "tau2:telecom:test": 40,
        "tau2:telecom:small": 20,
        "tau2:telecom:full": 2285,
        "tau2:mock": 9,
        "tau2:all": 287,
        "tau2:all:test": 100,  # mock has no lists: left out
    }
    with pytest.raises(ValueError, match="no task list 'small'"):
        select_tasks("tau2:airline:small")
    train = {t.split for t, _ in select_tasks("tau2:retail:train")}
    test = {t.split for t, _ in select_tasks("tau2:retail:test")}
    assert (train, test) == ({"pool"}, {"bench"})
    task = next(t for t, _ in select_tasks("tau2:airline") if t.id == "tau2-airline-7")
    assert task.source_id == "7" and task.domain == "tau2-airline"


def test_a_task_file_names_any_task_a_domain_has_on_whichever_list(tmp_path):
    """A list of ids (a selection's train.yaml) found only τ²'s default lists: a telecom task of its `small` or `full`
    list alone was an unknown id. Every task the domain has is found, in the file's order; an unknown id is refused."""
    small = next(t.id for t, _ in select_tasks("tau2:telecom:small"))
    base = {t.id for t, _ in select_tasks("tau2:telecom")}
    full = next(t.id for t, _ in select_tasks("tau2:telecom:full") if t.id not in base and t.id != small)
    ids = [full, "tau2-airline-7", small]
    (tmp_path / "train.yaml").write_text("tasks:\n" + "".join(f"  - {json.dumps(i)}\n" for i in ids))
    assert [t.id for t, _ in select_tasks(str(tmp_path / "train.yaml"))] == ids
    (tmp_path / "bad.yaml").write_text("tasks: [tau2-telecom-no_such_task]\n")
    with pytest.raises(ValueError, match="unknown task ids: tau2-telecom-no_such_task"):
        select_tasks(str(tmp_path / "bad.yaml"))


def test_the_agents_tools_are_taus_own_schemas_in_every_attempt():
    """Made once per domain, the schemas are what τ²'s `get_tools` gives on the attempt's own environment (its task's
    initial state set), each attempt owns its copy, and a domain served from τ²'s own interpreter has the same."""

    async def schemas(task, domain):
        env = await domain.open_environment(task, None)
        try:
            return env.tool_schemas(), [t.openai_schema for t in env.env.get_tools()]
        finally:
            await env.close()

    for name in ("airline", "retail", "telecom", "mock"):
        pairs = load_tau2([name], local=True)
        (first, domain), (last, _) = pairs[0], pairs[-1]
        ours, theirs = asyncio.run(schemas(first, domain))
        assert ours == theirs and len(ours) >= 4, name
        ours[0]["function"]["name"] = "changed"
        again, theirs = asyncio.run(schemas(last, domain))
        assert again == theirs, name
        assert load_tau2([name])[0][1].tools.openai_schemas() == theirs, name  # τ² in its own interpreter: the same


@pytest.mark.slow
def test_run_gold_and_noop_from_the_command_line(tmp_path):
    """The README's command, `groundstate run --agent scripted:gold --tasks tau2:...`, read back by `metrics`: gold, with the
    gold user making the user's own calls (`--user scripted:gold`), passes every telecom task and retail's test split;
    doing nothing passes the 19 airline tasks whose right answer changes and says nothing checkable (τ²'s own count)
    and no telecom task. Retail's no-op (τ²'s count: 7) and gold on its train split are checked against τ²'s own
    harness task by task in `test_tau2_parity.py` (all of them under `GROUNDSTATE_TAU2_SWEEP=full`), not again here:
    a retail attempt is most of a second of τ²'s own copying and hashing."""
    cli("run", "--agent", "scripted:gold", "--user", "scripted:gold", "--tasks", "tau2:retail:test,tau2:telecom", "--out", "gold.jsonl", cwd=tmp_path)
    plain = cli("run", "--agent", "scripted:gold", "--tasks", "tau2:telecom:small", "--out", "plain.jsonl", cwd=tmp_path)
    assert "16 of these tasks need the user to act" in plain.stdout + plain.stderr  # said before it starts
    assert sum(r.reward for r in read_records(tmp_path / "plain.jsonl")) == 4  # the plain scripted user never acts
    cli("run", "--agent", "scripted:noop", "--tasks", "tau2:airline,tau2:telecom", "--out", "noop.jsonl", cwd=tmp_path)
    gold = json.loads(cli("metrics", "gold.jsonl", "--json", cwd=tmp_path).stdout)
    assert (gold["tasks"], gold["pass_at_1"], gold["system_errors"]) == (154, 1.0, 0)
    # telecom's user made its own gold calls on its phone, recorded apart from the agent's
    made = {r.task_id: r.trajectory.user_tool_calls for r in read_records(tmp_path / "gold.jsonl") if r.domain == "tau2-telecom"}
    assert sum(bool(calls) for calls in made.values()) == 94 and all(c.ok for calls in made.values() for c in calls)
    noop = read_records(tmp_path / "noop.jsonl")
    passed = {r.domain: 0 for r in noop}
    for r in noop:
        passed[r.domain] += r.reward
    assert passed == {"tau2-airline": 19, "tau2-telecom": 0}
    assert all(r.task_id == task_id(r.domain.removeprefix("tau2-"), r.source_id) for r in noop)  # τ²'s id, unchanged
    assert {r.source_id for r in noop if r.domain == "tau2-telecom"} >= {
        "[mobile_data_issue]airplane_mode_on|user_abroad_roaming_enabled_off[PERSONA:None]"
    }


def play(task, domain, calls, text="Done."):
    async def go():
        env = await domain.open_environment(task, None)
        try:
            traj = await run_episode(env, ScriptedAgent(calls, final_text=text), ScriptedUser([]))
            return await env.grade(traj), traj, list(env.log)
        finally:
            await env.close()

    return asyncio.run(go())


def test_a_failed_state_names_the_record_and_field_that_differ():
    task, domain = next((t, d) for t, d in load_tau2(["retail"], local=True) if t.id == "tau2-retail-0")
    gold = [c.model_dump() for c in task.gold]
    write = next(i for i, c in enumerate(gold) if domain.tools.specs[c["tool"]].write)
    verdict, _, _ = play(task, domain, gold[:write] + gold[write + 1 :], task.gold_reply or "Done.")
    assert verdict.reward == 0 and verdict.reasons[0].startswith("DB: the database differs from the gold state")
    assert verdict.diff and all({"table", "key", "field", "result", "golden"} <= set(item) for item in verdict.diff)
    assert {item["table"] for item in verdict.diff} <= {"orders", "users", "products"}


def test_hostile_calls_are_the_agents_errors_and_change_nothing():
    task, domain = next((t, d) for t, d in load_tau2(["airline"], local=True) if t.id == "tau2-airline-0")
    calls = [
        {"tool": "no_such_tool", "args": {}},  # τ²'s own error, executed and recorded by τ²'s rules
        {"tool": "get_user_details", "args": {"user_id": ["not", "a", "string"]}},
        {"tool": "get_user_details", "args": {"user_id": "emma_kim_9957", "extra": 1}},
    ]
    verdict, traj, log = play(task, domain, calls)
    assert [c.ok for c in traj.tool_calls] == [False, False, False]
    assert len(log) == 3 and verdict.system_error is None

    # a call whose arguments are not an object never reaches τ² and is not in the conversation τ² reads
    async def raw():
        env = await domain.open_environment(task, None)
        try:
            result = await env.call_tool("get_user_details", ["emma_kim_9957"])
            return result, len(env.log)
        finally:
            await env.close()

    result, logged = asyncio.run(raw())
    assert not result.ok and "must be a JSON object" in result.content and logged == 0


def test_a_continuation_from_a_fork_gets_the_straight_verdict():
    task, domain = next((t, d) for t, d in load_tau2(["retail"], local=True) if t.id == "tau2-retail-1")
    gold = [c.model_dump() for c in task.gold]
    straight, _, _ = play(task, domain, gold, task.gold_reply or "Done.")

    async def forked():
        env = await domain.open_environment(task, None)
        episode = Episode(env, ScriptedAgent(gold, final_text=task.gold_reply or "Done."), ScriptedUser([]), env.limits)
        assert await episode.run(pause_at=len(gold) // 2) is None
        copy = await env.fork()
        branch = episode.branch(copy, episode.agent, ScriptedUser([]))
        try:
            traj = branch.finish(await branch.run())
            return await copy.grade(traj), len(env.log), len(copy.log)
        finally:
            await copy.close()
            await env.close()

    verdict, source_calls, fork_calls = asyncio.run(forked())
    assert straight.reward == verdict.reward == 1
    assert source_calls == len(gold) // 2 and fork_calls == len(gold)  # the source is untouched by the branch


def test_another_process_finds_the_task_by_reference():
    task, domain = load_tau2(["mock"], local=True)[0]
    found, again = TaskResolver().resolve(domain.ref(), task.id)
    assert found == task and again.content_hash == domain.content_hash
    with pytest.raises(KeyError):
        TaskResolver().resolve(domain.ref(), "tau2-mock-nope")


def test_taus_own_limits_apply_ten_failed_calls_end_its_run():
    """τ²'s orchestrator ends a run at its 10th failed tool call (TOO_MANY_ERRORS, scored 0) even where the agent goes on
    to do everything right: the verdict follows it, and τ²'s own harness agrees."""
    from groundstate.worlds.tau2.parity import Variant, theirs

    task, domain = next((t, d) for t, d in load_tau2(["retail"], local=True) if t.id == "tau2-retail-1")
    gold = [c.model_dump() for c in task.gold]
    bad = [{"tool": "get_order_details", "args": {"order_id": f"#W{i}"}} for i in range(10)]  # unknown orders: τ² errors
    for calls, expected in ((bad[:9] + gold, 1), (bad + gold, 0)):
        verdict, _, _ = play(task, domain, calls, task.gold_reply or "Done.")
        reward, _ = theirs(task, domain, Variant(calls, task.gold_reply or "Done."))
        assert verdict.reward == int(reward) == expected, (len(calls), verdict.reasons)
    assert "10 failed tool calls" in verdict.reasons[0]


def test_a_log_the_trajectory_does_not_hold_is_a_grader_error_never_a_verdict():
    task, domain = next((t, d) for t, d in load_tau2(["airline"], local=True) if t.id == "tau2-airline-3")

    async def go():
        env = await domain.open_environment(task, None)
        try:
            traj = await run_episode(env, ScriptedAgent([c.model_dump() for c in task.gold], final_text="Done."), ScriptedUser([]))
            env.log.append(env.log[0])  # a call the trajectory never made
            return await env.grade(traj)
        finally:
            await env.close()

    verdict = asyncio.run(go())
    assert verdict.reward is None and verdict.error_kind == "grader" and "not in the trajectory" in verdict.system_error


def test_the_users_own_calls_hostile_ones_included_are_graded_as_taus_are():
    """Telecom's user acts on its own phone: its calls are recorded apart, never shown to the agent, and graded as τ²'s
    own harness grades the same calls: a tool the phone does not have is an error that changes nothing, and ten failed
    calls end τ²'s run whoever made them."""
    from groundstate.types import ToolCallRequest
    from groundstate.worlds.tau2.parity import Variant, theirs

    task, domain = next((t, d) for t, d in load_tau2(["telecom"], "small", local=True) if t.user.actions)
    gold, mine = [c.model_dump() for c in task.gold], [c.model_dump() for c in task.user.actions]
    unknown = {"tool": "format_the_disk", "args": {}}

    async def go(user_calls):
        env = await domain.open_environment(task, None)
        try:
            agent = ScriptedAgent(gold, final_text="Please do this on your phone.", hand_over=True)
            traj = await run_episode(env, agent, ScriptedUser([], user_calls))
            refused = await env.user_tools().act([ToolCallRequest("x", "toggle_roaming", ["on"])])  # not an object
            return await env.grade(traj), traj, refused, len(env.log)
        finally:
            await env.close()

    for user_calls, expected in ((mine + [unknown], 1), ([unknown] * 10 + mine, 0)):
        verdict, traj, refused, logged = asyncio.run(go(user_calls))
        reward, _ = theirs(task, domain, Variant(gold, "Please do this on your phone.", user_calls))
        assert verdict.reward == int(reward) == expected, (len(user_calls), verdict.reasons)
        assert [c.name for c in traj.user_tool_calls] == [c["tool"] for c in user_calls]
        assert not any("format_the_disk" in json.dumps(m) for m in traj.messages)  # the agent never saw them
        assert not refused[0].ok and "JSON object" in refused[0].result and logged == len(gold) + len(user_calls)
    assert "10 failed tool calls" in verdict.reasons[0]


def test_blame_names_the_call_that_went_wrong():
    """A duplicated write that creates a record the gold state lacks is blamed on that call (diverged); a dropped write
    leaves it short (never_acted where it was the only one); where τ² compares no database (telecom) blame is unavailable, saying why."""
    task, domain = next((t, d) for t, d in load_tau2(["airline"], local=True) if t.id == "tau2-airline-2")
    gold = [c.model_dump() for c in task.gold]
    at = next(i for i, c in enumerate(gold) if c["tool"] == "send_certificate")

    def blamed(calls):
        verdict, traj, _ = play(task, domain, calls, task.gold_reply or "Done.")
        assert verdict.reward == 0
        return asyncio.run(domain.blame(task, None, traj)).to_json()

    twice = blamed(gold[: at + 1] + [gold[at]] + gold[at + 1 :])
    assert (twice["kind"], twice["call"], twice["tool"]) == ("diverged", at + 1, "send_certificate")
    assert twice["rows"][0]["table"] == "users" and twice["rows"][0]["golden"] is None  # a certificate gold never sends
    assert blamed(gold[:at] + gold[at + 1 :])["kind"] == "never_acted"  # its one write, left out
    telecom, tdomain = load_tau2(["telecom"], "small", local=True)[0]
    verdict, traj, _ = play(telecom, tdomain, [])
    assert asyncio.run(tdomain.blame(telecom, None, traj)).to_json() == {
        "kind": "unavailable",
        "reason": "τ² does not compare this task's database (its checks are assertions and actions)",
    }
