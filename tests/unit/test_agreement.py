"""Run-to-run agreement: two real seeded runs of one agent checked against counts made from the files alone; each
attribution (judge, user simulator, agent) on hand-built records; records without trajectories or verdicts."""

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.records import AttemptRecord, RecordError, validate_record
from groundstate.stats.agreement import attribute, cohen_kappa, run_agreement
from groundstate.stats.compare import compare

SHOP = Path(__file__).resolve().parents[1] / "fixtures" / "shop"
K = 8


@pytest.fixture(scope="module")
def seeded_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("agreement")
    runner = CliRunner()
    for name, agent, seed in (("s0", "scripted:noisy:0.3", "0"), ("s1", "scripted:noisy:0.3", "1"), ("other", "scripted:noisy:0.1", "0")):
        r = runner.invoke(app, ["run", "--agent", agent, "--seed", seed, "--tasks", str(SHOP), "--k", str(K), "--out", str(d / f"{name}.jsonl")])
        assert r.exit_code == 0, r.output
    return d


def rewards(path: Path) -> dict[tuple[str, int], int]:
    """(task, attempt) → reward, read from the file with nothing but json."""
    out = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        out[(row["task_id"], row["attempt"])] = row["reward"]
    return out


def test_two_seeds_of_one_agent_agree_as_counted_from_the_files(seeded_runs):
    a, b = rewards(seeded_runs / "s0.jsonl"), rewards(seeded_runs / "s1.jsonl")
    assert set(a) == set(b) and len(a) == 3 * K
    same = sum(a[key] == b[key] for key in a)
    assert 0 < same < len(a)  # seeds 0 and 1 of noisy:0.3 disagree somewhere, and agree somewhere
    pa, pb = sum(a.values()) / len(a), sum(b.values()) / len(b)
    chance = pa * pb + (1 - pa) * (1 - pb)
    tasks = sorted({t for t, _ in a})
    same_c_n = sum(sum(a[(t, i)] for i in range(K)) == sum(b[(t, i)] for i in range(K)) for t in tasks)

    r = CliRunner().invoke(app, ["compare", str(seeded_runs / "s0.jsonl"), str(seeded_runs / "s1.jsonl"), "--json"])
    assert r.exit_code == 0, r.output
    g = json.loads(r.stdout)["agreement"]
    assert g["computed"] and g["keys"] == len(a) and g["agree"] == same
    assert g["agreement"] == pytest.approx(same / len(a))
    assert g["chance_agreement"] == pytest.approx(chance)
    assert g["kappa"] == pytest.approx((same / len(a) - chance) / (1 - chance))
    assert g["tasks"] == len(tasks) and g["tasks_same_c_n"] == same_c_n
    for row in g["per_task"]:
        t = row["task_id"]
        assert row["agree"] == sum(a[(t, i)] == b[(t, i)] for i in range(K)) and row["attempts"] == K
        assert row["base"] == f"{sum(a[(t, i)] for i in range(K))}/{K}" and row["candidate"] == f"{sum(b[(t, i)] for i in range(K))}/{K}"
    # a scripted user and no judge: every disagreement is the agent's sampling
    assert g["disagreements_by_cause"] == {"agent": len(a) - same, "user": 0, "judge": 0, "unknown": 0}
    assert {(d["task_id"], d["attempt"]) for d in g["disagreements"]} == {key for key in a if a[key] != b[key]}
    assert g["runs_differ_in"] == ["seed: 0 → 1"] and g["note"] is None

    human = CliRunner().invoke(app, ["compare", str(seeded_runs / "s0.jsonl"), str(seeded_runs / "s1.jsonl")]).stdout
    assert f"run-to-run agreement: {same} of {len(a)} attempts" in human and f"agent sampling {len(a) - same}" in human
    assert "tasks whose attempts disagree" in human


def test_runs_of_different_agents_are_not_compared_for_agreement(seeded_runs):
    r = CliRunner().invoke(app, ["compare", str(seeded_runs / "s0.jsonl"), str(seeded_runs / "other.jsonl"), "--json"])
    g = json.loads(r.stdout)["agreement"]
    assert g == {"computed": False, "note": "different agents: agreement not computed (scripted:noisy:0.3 vs scripted:noisy:0.1)"}
    human = CliRunner().invoke(app, ["compare", str(seeded_runs / "s0.jsonl"), str(seeded_runs / "other.jsonl")]).stdout
    assert "run-to-run agreement: different agents: agreement not computed" in human


# -- hand-built records ------------------------------------------------------------------------------------------


def call(name: str, args: dict, call_id: str = "call_1") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def rec(reward, messages=None, state_reward="same", finish="agent_done", agent="openai:m", attempt=0, task="t", **extra) -> AttemptRecord:
    verdict = {"reward": reward, "state_reward": reward if state_reward == "same" else state_reward}
    data = {"task_id": task, "attempt": attempt, "reward": reward, "agent": agent, "finish_reason": finish, "verdict": verdict}
    if messages is not None:
        data["trajectory"] = {"messages": messages, "finish_reason": finish}
    return AttemptRecord.model_validate(data | extra)


U, A, T = "user", "assistant", "tool"


def m(role, content="", **kw):
    return {"role": role, "content": content, **kw}


def test_same_final_state_different_reward_is_the_judge():
    conv = [m(U, "refund order 3"), m(A, "", tool_calls=[call("refund", {"order_id": 3})]), m(A, "Refunded.")]
    cause, why = attribute(rec(1, conv, state_reward=1), rec(0, conv, state_reward=1))
    assert cause == "judge" and "state reward 1" in why


def test_a_user_message_differing_first_is_the_user_simulator():
    # the agent's calls are the same (new call ids and a tool result with another timestamp do not count); then the
    # simulated user asks for something else
    base = [
        m("system", "policy"),
        m(U, "I need help with order 3"),
        m(A, "", tool_calls=[call("get_order", {"order_id": 3}, "call_abc")]),
        m(T, '{"id": 3, "at": "10:00"}', tool_call_id="call_abc"),
        m(A, "What would you like to do?"),
        m(U, "cancel it"),
        m(A, "", tool_calls=[call("cancel_order", {"order_id": 3})]),
    ]
    cand = base[:2] + [
        m(A, "", tool_calls=[call("get_order", {"order_id": 3}, "call_xyz")]),
        m(T, '{"id": 3, "at": "10:01"}', tool_call_id="call_xyz"),
        m(A, "What would you like to do? "),
        m(U, "refund it"),
        m(A, "", tool_calls=[call("refund", {"order_id": 3})]),
    ]
    cause, why = attribute(rec(1, base, finish="user_done"), rec(0, cand, finish="user_done"))
    assert cause == "user" and "user simulator" in why
    # a user that ends the conversation where the other one went on is the user's doing too
    assert attribute(rec(0, base[:5], finish="user_done"), rec(1, base, finish="user_done"))[0] == "user"


def test_an_agent_message_differing_first_is_agent_sampling():
    base = [m(U, "cancel order 1"), m(A, "", tool_calls=[call("cancel_order", {"order_id": 1})]), m(A, "Done."), m(U, "thanks")]
    cand = [m(U, "cancel order 1"), m(A, "", tool_calls=[call("cancel_order", {"order_id": 2})]), m(A, "Done."), m(U, "that was the wrong one")]
    assert attribute(rec(1, base), rec(0, cand))[0] == "agent"  # the user differs too, but only after the agent did
    # an agent that stops where the other one went on (the user never got the turn) is the agent's doing
    stopped = base[:3]
    assert attribute(rec(0, stopped, finish="agent_done"), rec(1, base, finish="user_done"))[0] == "agent"
    # the same calls with their arguments in another order are the same calls
    same = [m(U, "x"), m(A, "", tool_calls=[{"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1, "b": 2}'}}])]
    other = [m(U, "x"), m(A, "", tool_calls=[{"id": "2", "type": "function", "function": {"name": "f", "arguments": '{"b": 2, "a": 1}'}}])]
    assert attribute(rec(1, same, state_reward=1), rec(0, other, state_reward=0))[0] == "unknown"  # same conversation


def test_run_agreement_counts_each_cause_and_kappa():
    conv = [m(U, "x"), m(A, "y")]
    base = [
        rec(1, conv, attempt=0),
        rec(1, conv, attempt=1, state_reward=1),
        rec(0, conv, attempt=2),
        rec(0, [m(U, "x"), m(A, "z")], attempt=3),
    ]
    cand = [
        rec(1, conv, attempt=0),
        rec(0, conv, attempt=1, state_reward=1),  # judge
        rec(0, conv, attempt=2),
        rec(1, [m(U, "x"), m(A, "w")], attempt=3),  # agent
    ]
    g = run_agreement(base, cand)
    assert g["keys"] == 4 and g["agree"] == 2 and g["agreement"] == 0.5
    assert g["disagreements_by_cause"] == {"agent": 1, "user": 0, "judge": 1, "unknown": 0}
    assert g["per_task"] == [
        {
            "task_id": "t",
            "attempts": 4,
            "agree": 2,
            "agreement": 0.5,
            "base": "2/4",
            "candidate": "2/4",
            "same_c_n": True,
            "disagreements_by_cause": {"judge": 1, "agent": 1},
        }
    ]
    assert g["kappa"] == pytest.approx(0.0) and g["chance_agreement"] == pytest.approx(0.5)
    assert cohen_kappa([True, True, False, False], [True, False, False, False]) == (pytest.approx(0.5), pytest.approx(0.5))
    assert cohen_kappa([True, True], [True, True]) == (None, 1.0)
    assert cohen_kappa([], []) == (None, None)


def test_different_sampling_is_not_compared():
    from groundstate.records import RunIdentity

    def stamped(reward, temperature):
        run = RunIdentity(agent="openai:m", user="scripted", seed=0, sampling={"temperature": temperature}, tasks="h")
        return rec(reward, record_version=2, run=run.model_dump(), task_fingerprint="f")

    g = run_agreement([stamped(1, 0.0)], [stamped(1, 1.0)])
    assert not g["computed"] and g["note"].startswith("different sampling: agreement not computed")
    same = run_agreement([stamped(1, 1.0)], [stamped(0, 1.0)])
    assert same["computed"] and same["runs_differ_in"] == [] and same["agree"] == 0


# -- hostile input: records of older versions and of other tools -----------------------------------------------------


def bare(reward, attempt=0, **extra) -> AttemptRecord:
    return AttemptRecord.model_validate({"task_id": "t", "attempt": attempt, "reward": reward} | extra)


def test_records_without_trajectories_or_verdicts_are_unknown_and_said(tmp_path):
    base = [bare(1, 0), bare(0, 1), bare(1, 2)]
    cand = [bare(0, 0), bare(0, 1), bare(None, 2, system_error="boom")]
    # k=2: the candidate's task has 2 clean attempts of 3, so figures at k=3 would leave it out (`stats.basis`)
    g = compare(base, cand, k=2, prices={}, allow_incomplete=True, reps=50)["agreement"]
    assert g["computed"] and g["keys"] == 2 and g["agree"] == 1
    assert g["disagreements_by_cause"]["unknown"] == 1 and "no trajectory" in g["disagreements"][0]["why"]
    assert g["not_compared"] == {"in_one_run_only": 0, "system_error_or_unjudged": 1}
    assert "do not name their agent" in g["note"] and "could not be attributed" in g["note"]
    # the same through the command line, from files another tool wrote
    paths = []
    for name, recs in (("a", base), ("b", cand)):
        p = tmp_path / f"{name}.jsonl"
        p.write_text(
            "".join(json.dumps({"task_id": r.task_id, "attempt": r.attempt, "reward": r.reward, "system_error": r.system_error}) + "\n" for r in recs)
        )
        paths.append(str(p))
    r = CliRunner().invoke(app, ["compare", *paths, "--allow-incomplete", "--k", "2"])
    assert r.exit_code == 0, r.output
    assert "unknown 1" in r.stdout and "could not be attributed" in r.stdout


@pytest.mark.parametrize(
    "trajectory",
    [
        {"messages": [{}, {"role": 3}, {"role": "assistant", "content": None, "tool_calls": "nope"}]},
        {
            "messages": [
                {"role": "assistant", "content": {"parts": [1]}, "tool_calls": [None, {"function": "f"}, {"function": {"arguments": "{bad"}}]}
            ]
        },
        {"messages": []},
    ],
)
def test_malformed_trajectories_do_not_crash(trajectory):
    good = rec(1, [m(U, "x"), m(A, "y")])
    odd = AttemptRecord.model_validate({"task_id": "t", "attempt": 0, "reward": 0, "trajectory": trajectory})
    with pytest.raises(ValueError, match="verdict.state_reward"):  # a verdict is typed: another shape is refused on read
        AttemptRecord.model_validate({"task_id": "t", "attempt": 0, "reward": 0, "verdict": {"reward": 0, "state_reward": "yes"}})
    for a, b in ((good, odd), (odd, good)):
        cause, why = attribute(a, b)
        assert cause in ("agent", "user", "unknown") and why
    assert Counter(run_agreement([good], [odd])["disagreements_by_cause"]).total() == 1


@pytest.mark.parametrize(
    "trajectory, field",
    [
        ({"messages": "not a list"}, "trajectory.messages"),
        ({"messages": [None, 3, "x"]}, "trajectory.messages.0"),
        ({}, "trajectory.messages"),
        ({"messages": [], "tool_calls": "nope"}, "trajectory.tool_calls"),
        ({"messages": [], "tool_calls": [{"name": "x", "arguments": {}}]}, "trajectory.tool_calls.0.ok"),
        ({"messages": [], "finish_reason": ["x"]}, "trajectory.finish_reason"),
        ({"messages": [], "usage": {"input_tokens": 1}}, "trajectory"),  # the running attempt's alone, never recorded
    ],
)
def test_a_trajectory_of_another_shape_is_refused_on_read_naming_the_line_and_field(trajectory, field):
    """A trajectory is typed (`types.Trajectory`): one that is not one is a clear error on read, never a guess later."""
    with pytest.raises(RecordError, match=rf"^run.jsonl:3: field {field!r}: "):
        validate_record({"task_id": "t", "attempt": 0, "reward": 0, "trajectory": trajectory}, "run.jsonl:3")
