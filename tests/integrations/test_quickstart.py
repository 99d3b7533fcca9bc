"""A reduced quickstart (few tasks and steps) runs every stage end to end; the full one is `make quickstart`."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")


REDUCED = dict(
    sft_max_steps=40,
    sft_demonstrations=400,
    probe_n=2,
    eval_k=2,
    grpo_steps=2,
    group_size=4,
    tasks_per_step=2,
    max_pool=30,
    ood=False,
    sanity=False,
    test_fraction=0.3,
    bands=("too_hard", "hard", "medium", "easy", "too_easy"),  # a barely trained base: keep every band
)


@pytest.mark.slow
def test_reduced_quickstart_writes_every_artefact_and_a_log_of_its_stages_only(tmp_path):
    # the command itself, in a process of its own (real stderr, warning filters and library loggers), with reduced
    # settings the CLI does not offer (they would make a poor demo)
    code = (
        "import functools, sys\n"
        "import groundstate.cli.quickstart as q\n"
        f"q.QuickstartConfig = functools.partial(q.QuickstartConfig, **{REDUCED!r})\n"
        "from groundstate.cli import app\n"
        "app(['quickstart', '--out', sys.argv[1], '--no-ood', '--grpo-steps', '2', '--sft-max-steps', '40', '--max-pool', '30'],"
        " prog_name='groundstate')\n"
    )
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    env.pop("PYTHONWARNINGS", None)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    log = r.stderr  # the stages (stdout has the before/after table)
    lines = log.splitlines()
    # the stages and their results only: no loading bars, no warnings, no raw Python dicts (#21 item 6)
    assert not [line for line in lines if "it/s]" in line or "s/it]" in line or re.search(r"\d+%\|", line)], log
    assert not [line for line in lines if re.search(r"warn", line, re.IGNORECASE)], log
    assert not [line for line in lines if re.search(r"\{'|\[\{", line)], log
    assert lines[0].startswith("quickstart: the whole method offline") and "about 8 minutes" in lines[0]  # the time, up front
    assert "held-out validation" in r.stdout and f"summary written to {tmp_path / 'summary.json'}" in log
    assert lines[-4].startswith("next, on your own model"), log[-1500:]  # it ends with what a user runs next
    assert [line.split()[:2] for line in lines[-3:]] == [["groundstate", "probe"], ["groundstate", "select"], ["groundstate", "train"]]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) >= {"base", "trained", "base_ood", "trained_ood", "stage_seconds"}
    for key in ("base", "trained"):
        assert summary[key]["k"] == 2 and summary[key]["tasks"] == summary["val_tasks"] > 0
        assert {"pass_at_1", "pass_at_k", "pass_hat_k", "observed_k_of_k", "cost_per_dependable_task"} <= set(summary[key])
    assert (tmp_path / "report.html").exists() and (tmp_path / "selection" / "train.yaml").exists()
    # the report costs the run at the same notional prices as the console table, rather than showing "—"
    assert re.search(r"<td>cost \(USD\)</td><td>\d+\.\d{4}</td>", (tmp_path / "report.html").read_text())
    assert (tmp_path / "grpo" / "final" / "groundstate.json").exists()
    # the ledger beside the outputs adds up to its phases' files, and the curve and the ledger are summarised and drawn
    from groundstate.records import read_records
    from groundstate.train.ledger import read_curve, read_ledger

    ledger = read_ledger(tmp_path / "ledger.json")
    assert ledger.probing.rollouts == len(read_records(tmp_path / "probes.jsonl")) and ledger.probing.wall_seconds > 0
    curve = read_curve(tmp_path / "grpo")
    assert ledger.training.rollouts == sum(s.rollouts for s in curve.steps) > 0 and len(curve.steps) == 2
    assert [v.step for v in curve.validation] == [0, 1, 2]  # the base and each checkpoint (save_steps = 1 here)
    assert all(v.error is None for v in curve.validation)
    # step 0 is the base's evaluation itself (the same model, tasks and seed), not run a second time nor counted twice
    assert curve.validation[0].file == str(tmp_path / "eval" / "base_val.jsonl") and not (tmp_path / "grpo" / "validation" / "step-0.jsonl").exists()
    evaluated = {tmp_path / "eval" / "base_val.jsonl", tmp_path / "eval" / "trained_val.jsonl", *(Path(v.file) for v in curve.validation)}
    assert ledger.evaluation.rollouts == sum(len(read_records(f)) for f in evaluated)
    assert summary["paths"]["ledger"] == str(tmp_path / "ledger.json") and "informative share" in summary["training_summary"]
    assert summary["training_summary"] in " ".join(r.stdout.split()) or summary["training_summary"][:60] in r.stdout
    page = (tmp_path / "report.html").read_text()
    assert "id='curve'" in page and "id='ledger'" in page and "cost per dependable task (with training and probing)" in page
    assert any("validation = unseen instances of seen templates" in line for line in lines)
    assert len(summary["stage_seconds"]) >= 6
    # the selection the quickstart printed, run by hand with `groundstate select`, gives the very same split
    import shlex

    from typer.testing import CliRunner

    from groundstate.cli import app

    args = shlex.split(summary["select_command"])
    assert args[:2] == ["groundstate", "select"] and any(summary["select_command"] in line for line in lines)
    again = tmp_path / "again"
    args[args.index("--out") + 1] = str(again)
    r = CliRunner().invoke(app, args[1:])
    assert r.exit_code == 0, r.output
    for name in ("train.yaml", "val.yaml"):
        assert (again / name).read_text().splitlines()[1:] == (tmp_path / "selection" / name).read_text().splitlines()[1:], name
