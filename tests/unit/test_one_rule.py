"""#32 items 2–5 and 8: one rule for every figure, in the default configuration (rubric tasks without a judge).

Every command that reads a run (metrics, compare, report, select, power, the quickstart's sanity line) computes its
figures over one task set, `stats.basis`: a rubric task of a judge-less run is set apart, counted and named, never
dropped in silence and never scored 0; the same records give the same figure in every command; on one task set
pass^k ≤ pass@1 ≤ pass@k. Runs of different n are compared at their common n; records of two versions of one task
are refused; prices are bounded and no JSON written holds NaN or Infinity; power says when a design needs more tasks
than there are.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.pipeline.quickstart import sanity_line
from groundstate.pipeline.report import render
from groundstate.pipeline.runner import RunConfig, run
from groundstate.pipeline.selection import select
from groundstate.records import AttemptRecord, RecordError, RunIdentity, read_records
from groundstate.state.sqlite import SqliteBackend
from groundstate.stats.compare import compare
from groundstate.stats.cost import load_prices
from groundstate.stats.estimators import pass_at_k, pass_hat_k
from groundstate.stats.metrics import compute
from groundstate.stats.power import plan
from groundstate.worlds.selectors import select_tasks

cli = CliRunner()


def flat(output: str) -> str:
    return " ".join(output.split())


def strict_json(text: str):
    """JSON as any other reader parses it: NaN and Infinity are not JSON."""

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def retail(tmp_path_factory):
    """A judge-less noisy run of 40 retail tasks, 12 of them with reply rubrics, k=4 (the default configuration of #32)."""
    pairs = select_tasks("retail")
    rubric = [p for p in pairs if p[0].rubrics][:12]
    plain = [p for p in pairs if not p[0].rubrics][:28]
    chosen = sorted(rubric + plain, key=lambda p: p[0].id)
    out = tmp_path_factory.mktemp("one_rule")
    for spec, name in (("scripted:noisy:0.3", "noisy"), ("scripted:gold", "gold"), ("scripted:noop", "noop")):
        run(chosen, RunConfig(agent=spec, k=4 if name == "noisy" else 1), SqliteBackend(), out / f"{name}.jsonl")
    return {"dir": out, "rubric": {t.id for t, _ in rubric}, "plain": {t.id for t, _ in plain}, "pairs": chosen}


def test_rubric_tasks_of_a_judge_less_run_are_set_apart_by_every_figure(retail):
    records = read_records(retail["dir"] / "noisy.jsonl")
    assert all(r.rubrics == (1 if r.task_id in retail["rubric"] else 0) for r in records)
    # the run had rubric tasks whose state failed in some attempts (judged 0) and passed in others (unjudged): the old
    # figures kept the failures and dropped the passes, so a rubric task counted only when the agent failed it
    assert any(r.task_id in retail["rubric"] and r.reward == 0 for r in records)
    assert any(r.unjudged for r in records)
    m = compute(records)
    assert m["tasks"] == 40 and m["tasks_covered"] == 28
    assert {row["task_id"] for row in m["set_apart"]} == retail["rubric"]
    assert m["set_apart_by_kind"] == {"awaits_judge": 12}
    assert m["basis"] == "28 of 40 tasks (set apart: 12 rubric tasks without a judge)"
    plain = [r for r in records if r.task_id in retail["plain"]]
    assert m["pass_at_1"] == pytest.approx(sum(r.reward for r in plain) / len(plain))
    assert m["pass_hat_k"] <= m["pass_at_1"] <= m["pass_at_k"]
    # the same figure in every command: metrics' table, its JSON, the report, power and select
    r = cli.invoke(app, ["metrics", str(retail["dir"] / "noisy.jsonl")])
    assert r.exit_code == 0, r.output
    assert "28 of 40 tasks (set apart: 12 rubric tasks without a judge) × n=4" in flat(r.output)
    assert f"{m['pass_at_1']:.2%}" in r.output and "12 tasks left out of the figures" in flat(r.output)
    j = strict_json(cli.invoke(app, ["metrics", str(retail["dir"] / "noisy.jsonl"), "--json"]).stdout)
    assert j["pass_at_1"] == m["pass_at_1"] and j["pass_at_k"] == m["pass_at_k"] and j["tasks_covered"] == 28
    page = render(records, "noisy")
    assert f"{m['pass_at_1']:.1%}" in page and f"{m['pass_at_k']:.1%}" in page and "12 tasks set apart from the figures" in page
    assert re.search(r"figures over 28 of 40 tasks", page)
    p = plan(records, lift=0.05)
    assert p.tasks == 28 and p.base_pass_at_1 == pytest.approx(m["pass_at_1"])
    sel = select(records)
    decided = {row["task_id"]: row["decision"] for row in sel.rows}
    assert {t for t, d in decided.items() if d == "awaits_judge"} == retail["rubric"]
    assert sel.counts()["decisions"]["awaits_judge"] == 12


def test_compare_report_and_the_quickstart_sanity_line_share_the_rule(retail):
    noisy, gold = read_records(retail["dir"] / "noisy.jsonl"), read_records(retail["dir"] / "gold.jsonl")
    c = compare(gold, [r for r in noisy if r.attempt < 1])
    assert c["shared_tasks"] == 28 and c["n"] == 1
    assert {row["task_id"] for row in c["left_out"]} == retail["rubric"]
    assert all("reply rubrics and no judge" in row["reason"] for row in c["left_out"])
    # gold passes every task it is judged on; the rubric tasks wait for a judge, said, never counted as failures
    line = sanity_line(gold, read_records(retail["dir"] / "noop.jsonl"))
    assert line == "  40 tasks: gold 100% pass, no-op 0% pass, of 28 (set apart: 12 rubric tasks without a judge)"


def test_a_judged_run_keeps_its_rubric_tasks(retail):
    """The rule sets apart what waits on a judge, not rubric tasks as such: a run with a judge covers them."""
    records = read_records(retail["dir"] / "noisy.jsonl")
    ident = records[0].run.model_copy(update={"judge": "openai:judge@http://127.0.0.1:1/v1"})
    judged = [
        r.model_copy(update={"run": ident, "unjudged": False, "reward": 1 if r.unjudged else r.reward}) for r in records
    ]  # as a judge that accepts every reply would have left them
    m = compute(judged)
    assert m["tasks_covered"] == 40 and m["set_apart"] == []


# -- the property: one task set, ordered estimators, nothing dropped ------------------------------------------

OUTCOME = st.sampled_from(["pass", "fail", "system_error", "unjudged", "missing"])


def _record(task: str, attempt: int, outcome: str, rubric: bool) -> AttemptRecord:
    ident = RunIdentity(agent="scripted:noisy:0.3", user="scripted", seed=0, tasks="x")
    return AttemptRecord.model_validate(
        {
            "task_id": task,
            "attempt": attempt,
            "reward": {"pass": 1, "fail": 0}.get(outcome),
            "system_error": "endpoint down" if outcome == "system_error" else None,
            "unjudged": outcome == "unjudged",
            "record_version": 2,
            "run": ident,
            "task_fingerprint": "f",
            "rubrics": int(rubric),
            "domain": "d",
            "family": "f",
            "agent": "scripted:noisy:0.3",
        }
    )


@st.composite
def runs(draw):
    tasks = draw(st.integers(1, 8))
    n = draw(st.integers(1, 6))
    records = []
    for i in range(tasks):
        rubric = draw(st.booleans())
        attempts = draw(st.integers(1, n))  # mixed n: a task may have fewer attempts than the run's n
        for a in range(attempts):
            outcome = draw(OUTCOME)
            if outcome == "unjudged" and not rubric:
                outcome = "pass"
            if outcome != "missing":
                records.append(_record(f"t{i}", a, outcome, rubric))
    return records


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(1, 6))
def test_every_figure_is_over_one_task_set_and_the_estimators_are_ordered(records, k):
    if not records:
        return
    n = max(r.attempt for r in records) + 1
    k = min(k, n)
    m = compute(records, k=sorted({1, k}), allow_incomplete=True, bootstrap_reps=50)
    # nothing dropped in silence: every task is covered or set apart with a reason
    assert m["tasks_covered"] + len(m["set_apart"]) == m["tasks"] == len({r.task_id for r in records})
    covered = [row for row in m["per_task"] if row["covered"]]
    assert len(covered) == m["tasks_covered"]
    assert all(row["n"] >= k for row in covered)  # every covered task has the attempts each figure needs
    if not covered:
        assert m["pass_at_1"] is None and m["pass_at_k"] is None and m["observed_k_of_k_rate"] is None
        return
    eps = 1e-12
    for j, at in m["at_k"].items():
        assert at["pass_hat_k"] <= m["pass_at_1"] + eps <= at["pass_at_k"] + 2 * eps, (j, at, m["pass_at_1"])
        assert at["pass_at_k"] == pytest.approx(sum(pass_at_k(t["n"], t["c"], int(j)) for t in covered) / len(covered))
        assert at["pass_hat_k"] == pytest.approx(sum(pass_hat_k(t["n"], t["c"], int(j)) for t in covered) / len(covered))
    assert m["pass_at_1"] == pytest.approx(sum(t["c"] / t["n"] for t in covered) / len(covered))
    assert m["observed_k_of_k"] <= len(covered)
    assert sum(v["tasks"] for v in m["by_domain"].values()) == len(covered)
    # no record of a rubric task of this judge-less run is ever covered, whatever its outcomes
    rubric_tasks = {r.task_id for r in records if r.rubrics}
    assert not rubric_tasks & {row["task_id"] for row in covered}


# -- item 3: runs of different n -------------------------------------------------------------------------------


def test_runs_of_different_n_are_compared_at_their_common_n(retail, tmp_path):
    noisy = read_records(retail["dir"] / "noisy.jsonl")
    four = [r for r in noisy if r.attempt < 2]  # the same run, at n = 2
    c = compare(four, noisy)
    assert c["n"] == 2 and c["runs_n"] == {"base": 2, "candidate": 4} and c["k"] == 2
    assert c["truncated"] == {"candidate": "the candidate run has n=4: read at its attempts 0–1, as many as the other run's n=2"}
    # the same attempts on both sides: nothing moved, and Observed 2/2 is an observation of two attempts on each side
    assert c["observed_k_of_k"]["k"] == 2 and c["observed_k_of_k"]["moved_in"] == c["observed_k_of_k"]["fell_out"] == 0
    assert all(v["lift"] == 0 for v in c["metrics"].values())
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(r.to_line() for r in four))
    b.write_text("".join(r.to_line() for r in noisy))
    r = cli.invoke(app, ["compare", str(a), str(b)])
    assert r.exit_code == 0, r.output
    text = flat(r.output)
    assert "the candidate run has n=4: read at its attempts 0–1" in text and "× n=2 · k=2" in text
    assert "Observed 2/2 │" in r.output and "Observed 2/2: " in text


# -- item 4: task versions --------------------------------------------------------------------------------------


def test_records_of_two_versions_of_a_task_are_refused_naming_it(retail, tmp_path):
    noisy = read_records(retail["dir"] / "noisy.jsonl")
    tid = noisy[0].task_id
    blended = [r.model_copy(update={"task_fingerprint": "0123456789abcdef"}) if r.task_id == tid and r.attempt >= 2 else r for r in noisy]
    with pytest.raises(RecordError, match=f"2 versions of task {tid} are blended in the records: 2 records of version 0123456789abcdef, 2 records"):
        compute(blended)
    path = tmp_path / "blend.jsonl"
    path.write_text("".join(r.to_line() for r in blended))
    for args in (["metrics", str(path)], ["report", str(path)], ["power", str(path)], ["select", str(path), "--out", str(tmp_path / "s")]):
        r = cli.invoke(app, args)
        assert r.exit_code != 0 and f"versions of task {tid}" in flat(r.output), (args, r.output)
        assert "Traceback" not in r.output


# -- item 5: prices and JSON -------------------------------------------------------------------------------------


def test_a_price_beyond_any_model_is_refused_naming_the_file_and_field(tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("my-model: {input: 1e308, output: 1}\n")
    with pytest.raises(Exception, match=r"my-model\.input.*from 0 to 1,000,000 USD"):
        load_prices(prices)


def test_no_json_written_holds_nan_or_infinity(retail, tmp_path):
    """A run whose every task waits on a judge has no pass@1: null in every JSON, never NaN."""
    path = tmp_path / "rubric_only.jsonl"
    run([p for p in retail["pairs"] if p[0].id in retail["rubric"]], RunConfig(agent="scripted:noisy:0.3", k=2), SqliteBackend(), path)
    records = read_records(path)
    r = cli.invoke(app, ["metrics", str(path), "--json"])
    assert r.exit_code == 0, r.output
    j = strict_json(r.stdout)
    assert j["pass_at_1"] is None and j["tasks_covered"] == 0 and j["observed_k_of_k_rate"] is None
    r = cli.invoke(app, ["select", str(path), "--out", str(tmp_path / "sel"), "--json"])
    strict_json((tmp_path / "sel" / "manifest.json").read_text())
    for line in (tmp_path / "sel" / "selection.jsonl").read_text().splitlines():
        strict_json(line)
    # a record whose arguments held a non-finite float (a model's `NaN`) is written as JSON, not as Python's NaN
    rec = records[0].model_copy(
        update={
            "trajectory": {
                "messages": [],
                "tool_calls": [{"name": "x", "arguments": {"v": math.nan, "w": math.inf}, "ok": False, "result": "", "write": False}],
            }
        }
    )
    assert strict_json(rec.to_line())["trajectory"]["tool_calls"][0]["arguments"] == {"v": None, "w": None}


# -- item 8: power within the tasks there are ---------------------------------------------------------------------


def test_power_says_when_a_design_needs_more_tasks_than_there_are(retail, tmp_path):
    path = retail["dir"] / "noisy.jsonl"
    r = cli.invoke(app, ["power", str(path), "--lift", "0.03"])
    assert r.exit_code == 0, r.output
    text = flat(r.output)
    assert "more than the 28 available" in text or "need more than the 28 tasks available" in text
    assert "(too many)" in r.output and "lift the 28 tasks detect" in text
    j = strict_json(cli.invoke(app, ["power", str(path), "--lift", "0.03", "--json", "--tasks-available", "500"]).stdout)
    assert j["available_tasks"] == 500
    assert all(d["lift_with_available"] is None or d["lift_with_available"] > 0 for d in j["designs"])
    r = cli.invoke(app, ["power", str(path), "--tasks-available", "1"])
    assert r.exit_code == 2 and "Traceback" not in r.output


# -- the reviewer's findings: older records, agreement, blame, the reference gate --------------------------------------


def test_records_written_before_rubrics_was_a_field_are_set_apart_alike(retail):
    """A record without `rubrics` says its task has rubrics in the reasons the grader has always written: the same basis."""
    records = read_records(retail["dir"] / "noisy.jsonl")
    old = [r.model_copy(update={"rubrics": None}) for r in records]
    assert compute(old)["set_apart"] == compute(records)["set_apart"]
    # a rubric task whose every attempt failed on state is one of them (it used to be scored 0 while the others left)
    assert all(r.awaits_judge for r in old if r.task_id in retail["rubric"])


def test_agreement_and_blame_count_the_keys_the_figures_count(retail):
    noisy = read_records(retail["dir"] / "noisy.jsonl")
    c = compare([r for r in noisy if r.attempt < 2], noisy)
    assert c["agreement"]["computed"] and c["agreement"]["keys"] == c["shared_tasks"] * c["n"] == 28 * 2
    assert c["agreement"]["tasks"] == 28 and c["agreement"]["not_compared"]["in_one_run_only"] == 0
    m = compute(noisy)
    failed_covered = sum(1 for r in noisy if r.task_id in retail["plain"] and r.reward == 0)
    assert sum(b["failed"] for b in m["blame_by_family"].values()) == failed_covered


def test_a_reference_run_without_a_judge_cannot_gate_a_rubric_task(retail):
    noisy = read_records(retail["dir"] / "noisy.jsonl")
    ident = noisy[0].run.model_copy(update={"judge": "openai:judge@http://127.0.0.1:1/v1"})
    judged = [r.model_copy(update={"run": ident, "unjudged": False, "reward": 1 if r.unjudged else r.reward}) for r in noisy]
    sel = select(judged, reference_records=noisy)
    rows = {row["task_id"]: row for row in sel.rows}
    for tid in retail["rubric"]:
        assert rows[tid]["decision"] == "awaits_judge" and "the reference run has this task's reply rubrics" in rows[tid]["reason"]
    assert not any(rows[t]["decision"] == "awaits_judge" for t in retail["plain"])
