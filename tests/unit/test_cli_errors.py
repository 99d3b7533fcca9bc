"""Mistakes a new user makes end in one line naming the thing and the fix, exit 2, nothing written (#21 item 3)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from groundstate.agents.local import ModelLoadError, check_model_ref, load_pretrained
from groundstate.cli import app

DEAD_PG = "postgresql://nobody:s3cret@127.0.0.1:1/nowhere"  # nothing listens on port 1


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})


def one_error_line(r) -> str:
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--agent", "scripted:gold", "--tasks", "hr", "--backend", "postgres"],
        ["tasks", "lint", "--domain", "hr", "--backend", "postgres"],
        ["tasks", "certify", "--domain", "hr", "--backend", "sqlite", "--backend", "postgres"],
    ],
)
def test_an_unreachable_postgres_stops_before_any_work(tmp_path, command):
    out = tmp_path / "results.jsonl"
    extra = ["--out", str(out)] if command[0] == "run" else []
    r = invoke(*command, "--pg-dsn", DEAD_PG, *extra)
    assert r.exit_code == 2
    line = one_error_line(r)
    assert "cannot reach PostgreSQL at nobody@127.0.0.1:1/nowhere" in line and "--pg-dsn" in line
    assert "s3cret" not in r.output  # the DSN's password is never printed
    assert list(tmp_path.iterdir()) == []


def test_a_wrong_postgres_database_is_named(tmp_path):
    r = invoke("tasks", "lint", "--domain", "hr", "--backend", "postgres", "--pg-dsn", "postgresql://postgres@127.0.0.1:5432/no_such_db_here")
    assert r.exit_code == 2 and 'database "no_such_db_here" does not exist' in one_error_line(r)


def test_train_names_a_model_that_is_not_there(tmp_path):
    (tmp_path / "weights.bin").write_text("x")
    (tmp_path / "empty").mkdir()
    cases = {
        str(tmp_path / "missing"): "no such model folder",
        "./runs/not-here": "no such model folder",
        str(tmp_path / "weights.bin"): "is a file, not a model folder",
        str(tmp_path / "empty"): "is not a Hugging Face model folder (no config.json in it)",
    }
    for ref, says in cases.items():
        out = tmp_path / "out"
        r = invoke("train", "--model", ref, "--train", "hr", "--out", str(out), "--steps", "1")
        assert r.exit_code == 2 and f"--model {ref}: {says}" in one_error_line(r)
        assert not out.exists()


def test_model_references():
    for hub_id in ("Qwen/Qwen2.5-0.5B-Instruct", "gpt2", "HuggingFaceTB/SmolLM2-135M-Instruct"):
        check_model_ref(hub_id)  # a hub id is left to the hub
    for bad in ("/nonexistent", "~/nope", "a/b/c", "has space"):
        with pytest.raises(ValueError, match="no such model folder"):
            check_model_ref(bad)
    with pytest.raises(ValueError, match="no model given"):
        check_model_ref(" ")
    with pytest.raises(ModelLoadError, match="no such model folder"):
        load_pretrained("/nonexistent")
