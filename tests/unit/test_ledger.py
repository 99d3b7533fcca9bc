"""The ledger adds up to the run's totals, the curve reads per step, and the report draws both.

The training folder is written in the TRL engine's format from real `GroupSampler` steps (rollouts scripted, no model:
the engine's own rows are checked by tests/integrations/test_train.py); probing and evaluation are real results files."""

import asyncio
import json

import pytest

from groundstate.pipeline.report import render
from groundstate.pipeline.runner import RunConfig, run
from groundstate.records import read_records, rewrite_atomically
from groundstate.state.sqlite import SqliteBackend
from groundstate.stats.metrics import compute
from groundstate.train import grpo
from groundstate.train.grpo import GroupSampler, Rollout
from groundstate.train.ledger import WASTE_REASONS, Spend, build_ledger, read_curve, read_ledger, whole_cost_per_dependable_task, write_ledger

G = 4


def _results(path, pairs, agent, k, tokens):
    """A real run's results file, each record given `tokens` × (attempt + 1) input and half as many output tokens."""
    run(pairs, RunConfig(agent=agent, k=k), SqliteBackend(), path)
    recs = [r.model_copy(update={"usage": {"input_tokens": tokens * (r.attempt + 1), "output_tokens": tokens // 2}}) for r in read_records(path)]
    rewrite_atomically(path, recs)
    return read_records(path)


@pytest.fixture
def training(shop, tmp_path, monkeypatch):
    """Three steps of two tasks × G: shop-refuse always passes (all-pass), shop-multi fails (all-fail), shop-cancel is
    mixed; the first rollout of the third step is a system error and its sixth is unjudged (a rubric task without a
    judge: reward None, no error); refills within the bound. Rows as the engine writes."""
    pool = [(t, shop) for t in shop.tasks]
    ran, at = [], {"step": 0, "first": 0}

    async def scripted(task, domain, policy, backend, user_spec, limits):
        n = len(ran)
        ran.append(task.id)
        error = "sandbox gone" if at["step"] == 3 and n == at["first"] else None  # the first rollout of the third step
        unjudged = at["step"] == 3 and n == at["first"] + 5
        reward = None if error or unjudged else {"shop-refuse": 1.0, "shop-multi": 0.0}.get(task.id, float(n % 2))
        return Rollout(task.id, reward, error, [1] * 5, [2] * 7, [1] * 3 + [0] * 4, [-0.1] * 7, input_tokens=10 + n, output_tokens=3, seconds=0.5)

    monkeypatch.setattr(grpo, "rollout", scripted)
    sampler = GroupSampler(pool, None, None, G, refill_ratio=0.5, seed=1)
    out = tmp_path / "grpo"
    out.mkdir()
    by_id = {t.id: (t, d) for t, d in pool}
    with (out / "metrics.jsonl").open("w") as f:
        for step, ids in enumerate([("shop-refuse", "shop-cancel"), ("shop-multi", "shop-cancel"), ("shop-cancel", "shop-refuse")], 1):
            at.update(step=step, first=len(ran))
            _, stats = asyncio.run(sampler.step([by_id[i] for i in ids]))
            f.write(json.dumps({"kind": "rollouts", "step": step, "rollout_seconds": 1.0, **stats.to_json()}) + "\n")
            f.write(json.dumps({"kind": "trainer", "step": step, "loss": 0.1}) + "\n")
            f.write(json.dumps({"kind": "step", "step": step, "seconds": 2.5}) + "\n")
    return out, ran


def test_the_ledger_adds_up_to_the_runs_totals(shop, tmp_path, training):
    train_dir, ran = training
    pairs = [(t, shop) for t in shop.tasks]
    probes = _results(tmp_path / "probes.jsonl", pairs, "scripted:noisy:0.4", 3, 100)
    evals = _results(tmp_path / "eval.jsonl", pairs, "scripted:noisy:0.2", 2, 40)
    ledger = build_ledger([tmp_path / "probes.jsonl", tmp_path / "missing.jsonl"], train_dir, [tmp_path / "eval.jsonl"], {"probing": 7.0})

    # probing and evaluation: what `metrics` reads of the same files
    for phase, recs in ((ledger.probing, probes), (ledger.evaluation, evals)):
        m = compute(recs, prices={}, allow_incomplete=True, bootstrap_reps=0)
        assert phase.rollouts == m["attempts"] == len(recs)
        assert (phase.input_tokens, phase.output_tokens) == (m["tokens"]["input"], m["tokens"]["output"])
        assert phase.attempt_seconds == pytest.approx(sum(r.timings["total_s"] for r in recs))
    assert ledger.probing.sources == [str(tmp_path / "probes.jsonl")] and ledger.probing.wall_seconds == 7.0
    assert ledger.evaluation.wall_seconds is None  # not measured: never made up

    # training: every rollout the steps ran, refills and dropped groups included
    t = ledger.training
    assert t.steps == 3 and t.rollouts == len(ran)
    assert t.input_tokens == sum(10 + n for n in range(len(ran))) and t.output_tokens == 3 * len(ran)
    assert t.attempt_seconds == pytest.approx(0.5 * len(ran)) and t.wall_seconds == pytest.approx(7.5)
    parts = [t.informative, *t.wasted.values()]
    for key in Spend.model_fields:
        assert sum(getattr(p, key) for p in parts) == pytest.approx(getattr(t, key)), key
    rows = [r for r in map(json.loads, (train_dir / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "rollouts"]
    for reason in WASTE_REASONS:
        assert t.wasted[reason].rollouts == sum(r[f"wasted_{reason}"] for r in rows) > 0, reason
        assert t.wasted[reason].input_tokens == sum(r["wasted_usage"][reason]["input_tokens"] for r in rows)
    assert t.informative.rollouts == len(ran) - sum(r["wasted"] for r in rows) > 0

    # the whole: the sum of the phases
    total = ledger.total()
    assert total.rollouts == len(probes) + len(ran) + len(evals)
    assert total.input_tokens == ledger.probing.input_tokens + t.input_tokens + ledger.evaluation.input_tokens
    assert read_ledger(write_ledger(ledger, tmp_path / "ledger.json")) == ledger


def test_the_curve_has_a_row_per_step_with_shares_and_validation(training):
    train_dir, _ = training
    with (train_dir / "metrics.jsonl").open("a") as f:
        for step, p in ((0, 0.4), (3, 0.6)):
            f.write(
                json.dumps({"kind": "validation", "step": step, "pass_at_1": p, "ci_95": [p - 0.1, p + 0.1], "tasks": 5, "k": 2, "seconds": 1.5})
                + "\n"
            )
        f.write('{"kind": "rollouts", "step": 4, "gro')  # a torn last line: skipped
    curve = read_curve(train_dir)
    assert [s.step for s in curve.steps] == [1, 2, 3] and all(s.seconds == 2.5 for s in curve.steps)
    first = curve.steps[0]  # shop-refuse all-pass, shop-cancel mixed: half the first groups gave a signal
    assert first.informative_share == 0.5 and first.wasted_share == first.wasted / first.rollouts > 0
    assert curve.steps[2].wasted_system_error == G
    assert [(v.step, v.pass_at_1) for v in curve.validation] == [(0, 0.4), (3, 0.6)]


def test_cost_per_dependable_task_with_training_and_probing(shop, tmp_path, training):
    train_dir, _ = training
    pairs = [(t, shop) for t in shop.tasks]
    probes = tmp_path / "probes.jsonl"
    _results(probes, pairs, "scripted:noisy:0.4", 3, 100)
    recs = _results(tmp_path / "eval.jsonl", pairs, "scripted:gold", 2, 40)
    recs = [r.model_copy(update={"agent": "hf:/m", "model": "/m"}) for r in recs]  # priced like a model
    prices = {"/m": {"input": 1.0, "output": 2.0}}
    m = compute(recs, prices=prices, allow_incomplete=True, bootstrap_reps=0)
    ledger = build_ledger([probes], train_dir)
    value, note = whole_cost_per_dependable_task(recs, m, ledger, prices)
    spent = ledger.probing.input_tokens + ledger.training.input_tokens + 2 * (ledger.probing.output_tokens + ledger.training.output_tokens)
    assert value == pytest.approx(m["cost_per_dependable_task"] + spent / 1e6 / m["observed_k_of_k"])
    assert f"{m['observed_k_of_k']} tasks solved 2/2" in note
    assert whole_cost_per_dependable_task(recs, m, ledger, {})[0] is None  # no price: not costed at 0

    page = render(recs, "t", prices=prices, training=train_dir, ledger=ledger)
    section = page[page.index("id='training'") : page.index("<h2>Failing attempts")]
    assert section.count("<img") == 3 + 1  # the curve's reward, rollouts and tokens plots, and the ledger's
    assert "id='curve'" in section and "id='ledger'" in section
    metrics = page[page.index("id='metrics'") : page.index("</table>", page.index("id='metrics'"))]
    assert "cost per dependable task (inference alone)" in metrics and "cost per dependable task (with training and probing)" in metrics
    assert f"{value:.4f}" in metrics
    assert "id='training'" not in render(recs, "t", prices=prices)  # without a training folder or a ledger: as before


def test_validation_at_checkpoints_is_the_trl_engines():
    from groundstate.train.job import TrainJob, TrainRefused, _check_specs

    assert TrainJob(model="m", train="t").val_checkpoints is False  # opt-in: a second copy of the model per checkpoint
    with pytest.raises(TrainRefused, match="val_checkpoints is for --engine trl"):
        _check_specs(TrainJob(model="m", train="t", engine="verl", val_checkpoints=True))


def test_a_torn_last_line_is_cut_before_the_next_row_and_any_other_bad_line_is_named(tmp_path):
    from groundstate.train.ledger import MetricsFileError, append_row, metrics_rows

    path = tmp_path / "metrics.jsonl"
    append_row(path, {"kind": "step", "step": 1, "seconds": 1.0})
    with path.open("a") as f:
        f.write('{"kind": "step", "step": 2, "sec')  # a run killed mid-write
    assert [r["step"] for r in metrics_rows(tmp_path)] == [1]  # read: the torn tail is skipped
    append_row(path, {"kind": "step", "step": 2, "seconds": 2.0})  # the resumed run's row stands on its own line
    assert [r["step"] for r in metrics_rows(tmp_path)] == [1, 2] and path.read_text().count("\n") == 2
    for bad, why in (("{oops", "not JSON"), ("[1, 2]", "a kind and an integer step"), ('{"kind": "step", "step": "3"}', "integer step")):
        path.write_text(f'{{"kind": "step", "step": 1}}\n{bad}\n{{"kind": "step", "step": 2}}\n')
        with pytest.raises(MetricsFileError, match=rf"{path}:2: .*{why}"):
            metrics_rows(tmp_path)


def test_a_checkpoint_validation_that_fails_is_a_row_with_its_error_and_training_goes_on(shop, tmp_path):
    from types import SimpleNamespace

    from groundstate.train.ledger import metrics_rows
    from groundstate.train.trl_engine import _metrics_logger

    def broken(model_dir, step):
        raise RuntimeError("out of memory loading the checkpoint")

    logger = _metrics_logger(object, tmp_path / "metrics.jsonl", str(tmp_path / "base"), None, None, broken)
    logger.on_train_begin(None, SimpleNamespace(global_step=0), None)  # raises nothing
    rows = metrics_rows(tmp_path)
    assert len(rows) == 1 and rows[0]["kind"] == "validation" and rows[0]["pass_at_1"] is None
    assert rows[0]["error"] == "RuntimeError: out of memory loading the checkpoint"
    assert read_curve(tmp_path).validation[0].error == rows[0]["error"]
    logger.on_train_begin(None, SimpleNamespace(global_step=0), None)  # a step already validated is not run again
    assert len(metrics_rows(tmp_path)) == 1
    recs = _results(tmp_path / "eval.jsonl", [(t, shop) for t in shop.tasks], "scripted:gold", 1, 10)
    page = render(recs, "t", training=tmp_path)
    assert "validation failed at step 0 (RuntimeError: out of memory loading the checkpoint)" in page  # the gap is said


def test_the_report_command_draws_a_training_folder_and_refuses_what_is_not_one(shop, tmp_path, training):
    from typer.testing import CliRunner

    from groundstate.cli import app

    train_dir, _ = training
    _results(tmp_path / "eval.jsonl", [(t, shop) for t in shop.tasks], "scripted:gold", 1, 10)
    ledger = write_ledger(build_ledger([], train_dir, [tmp_path / "eval.jsonl"]), tmp_path / "ledger.json")
    runner = CliRunner()
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(tmp_path / "eval.jsonl"), "--out", str(out), "--training", str(train_dir), "--ledger", str(ledger)])
    assert r.exit_code == 0, r.output
    assert "id='curve'" in out.read_text() and "id='ledger'" in out.read_text() and str(out) in r.output
    r = runner.invoke(app, ["report", str(tmp_path / "eval.jsonl"), "--training", str(tmp_path / "no-such-run")])
    assert r.exit_code == 2 and "does not exist" in r.output  # a typo is refused, not a report without its curve
    (tmp_path / "empty").mkdir()
    r = runner.invoke(app, ["report", str(tmp_path / "eval.jsonl"), "--training", str(tmp_path / "empty")])
    assert r.exit_code == 1 and "no metrics.jsonl" in r.output


BAD_ROWS = {  # a metrics.jsonl line 2 → the field (or problem) the error names
    b'{"kind": "rollouts", "step": 1, "groups": "4"}': "field 'groups': Input should be a valid integer",
    b'{"kind": "rollouts", "step": 1, "groups": 4, "all_pass": null}': "field 'all_pass': Input should be a valid integer",
    b'{"kind": "rollouts", "step": 1, "rollouts": -8}': "field 'rollouts': Input should be greater than or equal to 0",
    b'{"kind": "rollouts", "step": 1, "sampled_reward": NaN}': "field 'sampled_reward': Input should be a finite number",
    b'{"kind": "rollouts", "step": 1, "wasted_usage": []}': "field 'wasted_usage': Input should be a valid dictionary",
    b'{"kind": "rollouts", "step": 1, "groups": 2, "all_pass": 3}': "3 all-pass, all-fail, unjudged and system-error groups of 2 groups",
    b'{"kind": "step", "step": 1, "seconds": "x"}': "field 'seconds': Input should be a valid number",
    b'{"kind": "validation", "step": 1, "pass_at_1": "high"}': "field 'pass_at_1': Input should be a valid number",
    b'{"kind": "step", "step": 1, "note": "\xff"}': r"not UTF-8 text \(byte 0xff at column 38\)",
}


def test_a_metrics_row_of_the_wrong_type_is_named_by_file_line_and_field(shop, tmp_path):
    """A `metrics.jsonl` row whose counts are strings or null made `report --training` crash with a traceback
    (`TypeError: unsupported operand type(s) for -: 'str' and 'int'`: `_curve_step` did arithmetic on the raw row), and a
    byte that is not UTF-8 gave `'utf-8' codec can't decode byte 0xff …` without the file. Every row the readers use is
    validated first: one line naming the file, the line and the field, from the curve, the ledger and the command."""
    from typer.testing import CliRunner

    from groundstate.cli import app
    from groundstate.train.ledger import MetricsFileError, training_spend

    results = tmp_path / "eval.jsonl"
    _results(results, [(t, shop) for t in shop.tasks], "scripted:gold", 1, 10)
    train_dir = tmp_path / "grpo"
    train_dir.mkdir()
    path = train_dir / "metrics.jsonl"
    for bad, why in BAD_ROWS.items():
        path.write_bytes(b'{"kind": "step", "step": 0, "seconds": 1.0}\n' + bad + b"\n")
        for read in (read_curve, training_spend):
            with pytest.raises(MetricsFileError, match=rf"^{path}:2: {why}$"):
                read(train_dir)
        r = CliRunner().invoke(app, ["report", str(results), "--training", str(train_dir), "--out", str(tmp_path / "r.html")])
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (r.exception, r.output)  # an error line, not a crash
        assert " ".join(r.output.split()).startswith(f"error: {path}:2: ") and "Traceback" not in r.output, r.output
        assert not (tmp_path / "r.html").exists()


BAD_LEDGERS = {  # a ledger.json's phases → the field the error names and why
    '"probing": {"rollouts": -10, "output_tokens": -90000000}': "field 'probing.rollouts': Input should be greater than or equal to 0 \\(and 1 more\\)",
    '"training": {"wasted": {"all_pass": {"output_tokens": -1}}}': "field 'training.wasted.all_pass.output_tokens': Input should be greater than or equal to 0",
    '"evaluation": {"attempt_seconds": NaN}': "field 'evaluation.attempt_seconds': Input should be a finite number",
    '"probing": {"wall_seconds": -5.0}': "field 'probing.wall_seconds': Input should be greater than or equal to 0",
    '"training": {"steps": "3"}': "field 'training.steps': Input should be a valid integer",
    '"probing": {"input_tokens": 1' + "0" * 400 + "}": "field 'probing.input_tokens': Input should be less than 1000000000000000000",
}


def test_a_ledger_with_negative_or_non_finite_counts_is_refused_naming_file_and_field(shop, tmp_path):
    """A `ledger.json` with negative probing rollouts and output tokens made `report --ledger` print a negative cost per
    dependable task (-899.9055), and a count beyond any float crashed it (`OverflowError`): a ledger's counts are whole
    and ≥ 0, its seconds finite and ≥ 0 (`Spend`), else one line naming the file and the field, and no report."""
    from typer.testing import CliRunner

    from groundstate.cli import app
    from groundstate.train.ledger import LedgerError

    results = tmp_path / "eval.jsonl"
    _results(results, [(t, shop) for t in shop.tasks], "scripted:gold", 1, 10)
    path = tmp_path / "ledger.json"
    for phases, why in BAD_LEDGERS.items():
        path.write_text("{" + phases + "}")
        with pytest.raises(LedgerError, match=rf"^{path}: {why}$"):
            read_ledger(path)
        r = CliRunner().invoke(app, ["report", str(results), "--ledger", str(path), "--out", str(tmp_path / "r.html")])
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (r.exception, r.output)  # an error line, not a crash
        assert " ".join(r.output.split()).startswith(f"error: {path}: field '"), r.output
        assert not (tmp_path / "r.html").exists()
    path.write_text('{"probing": {"rollouts": 10, "output_tokens": 90000000}}')
    assert read_ledger(path).probing.output_tokens == 90_000_000  # a ledger of counts ≥ 0 reads as before
