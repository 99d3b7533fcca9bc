"""The method on τ²: probe τ²'s train split, select (τ²'s test split excluded by id and content), train with GRPO (TRL)
on the selection, and evaluate the trained checkpoint on τ²'s test split, each as a user types it. The tiny model scores
what a model that cannot call tools scores; the path is what is under test: every stage ends cleanly, with no system
error, and hands its files to the next."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from groundstate.records import read_records


def cli(*args: str, cwd) -> str:
    done = subprocess.run([sys.executable, "-m", "groundstate.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (args[0], done.stderr[-3000:])
    return done.stdout


@pytest.mark.slow
def test_probe_select_train_and_evaluate_on_tau2(tiny_shop_model, tmp_path):
    cli("probe", "--agent", "scripted:noisy:0.3", "--tasks", "tau2:airline:train", "--k", "3", "--out", "probe.jsonl", cwd=tmp_path)
    cli("select", "probe.jsonl", "--out", "selection", "--exclude", "tau2:airline:test", "--domain", "tau2:airline", cwd=tmp_path)
    train = (tmp_path / "selection" / "train.yaml").read_text()
    assert "tau2-airline-" in train
    rows = [json.loads(line) for line in (tmp_path / "selection" / "selection.jsonl").read_text().splitlines()]
    assert not [r for r in rows if r["decision"] in ("train", "val") and r["task_id"] in {f"tau2-airline-{i}" for i in (2, 6, 8)}]
    cli("train", "--model", str(tiny_shop_model), "--train", "selection/train.yaml", "--steps", "1", "--group-size", "2",
        "--tasks-per-step", "2", "--max-new-tokens", "8", "--out", "grpo", cwd=tmp_path)  # fmt: skip
    steps = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if r["kind"] == "step"] == [1]
    cli("run", "--agent", f"hf:{tmp_path / 'grpo' / 'final'}", "--tasks", "tau2:airline:test", "--k", "1", "--max-turns", "2",
        "--max-tokens", "8", "--out", "test.jsonl", cwd=tmp_path)  # fmt: skip
    records = read_records(tmp_path / "test.jsonl")
    assert len(records) == 20 and all(r.system_error is None and r.source_id for r in records)
