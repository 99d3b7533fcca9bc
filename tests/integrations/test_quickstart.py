"""A reduced quickstart (few tasks and steps) runs every stage end to end; the full one is `make quickstart`."""

import json
import re

import pytest

pytest.importorskip("trl")

from groundstate.quickstart import QuickstartConfig, run_quickstart  # noqa: E402


@pytest.mark.slow
def test_reduced_quickstart_writes_every_artefact(tmp_path):
    cfg = QuickstartConfig(
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
        bands=("too_hard", "hard", "medium", "easy", "too_easy"),
    )  # a barely trained base: keep every band
    lines = []
    s = run_quickstart(tmp_path, cfg, log=lines.append)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) >= {"base", "trained", "base_ood", "trained_ood", "stage_seconds"}
    for key in ("base", "trained"):
        assert summary[key]["k"] == 2 and summary[key]["tasks"] == s["val_tasks"] > 0
        assert {"pass_at_1", "pass_at_k", "pass_hat_k", "observed_k_of_k", "cost_per_dependable_task"} <= set(summary[key])
    assert (tmp_path / "report.html").exists() and (tmp_path / "selection" / "train.yaml").exists()
    # the report costs the run at the same notional prices as the console table, rather than showing "—"
    assert re.search(r"<td>cost \(USD\)</td><td>\d+\.\d{4}</td>", (tmp_path / "report.html").read_text())
    assert (tmp_path / "grpo" / "final" / "groundstate.json").exists()
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
