"""Records: typed and validated on every read, stamped with their run's identity and their task's fingerprint.

Covers the hardening items of the results readers: hostile lines name file and line in every command; resuming
another run, or changed tasks, is refused; metrics and compare refuse blends and incomplete runs and say what
they leave out; `metrics --k` takes any k <= n; report labels are plain text.
"""

import json
import math
import shutil
from itertools import combinations
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.metrics import compare, compute, pass_at_k, pass_hat_k
from groundstate.report import render
from groundstate import results, runner
from groundstate.results import read_records
from groundstate.runner import RunConfig, run
from groundstate.selectors import select_tasks
from groundstate.state.sqlite import SqliteBackend

SHOP = str(Path(__file__).parent / "fixtures" / "shop")
cli = CliRunner()


def pairs_of(shop):
    return [(t, shop) for t in shop.tasks]


@pytest.fixture
def gold_run(tmp_path, shop):
    path = tmp_path / "gold.jsonl"
    run(pairs_of(shop), RunConfig(agent="scripted:gold", k=2), SqliteBackend(), path)
    return path


def flat(output: str) -> str:
    """Command output with the console's line wrapping undone."""
    return " ".join(output.split())


def clean_exit(result, code: int) -> None:
    """The command ended with a message and exit code, not a traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output


# -- #15 item 8 and #20 item 15: one typed record model, validated on read -----------------------------

GOOD = {"task_id": "shop-cancel", "attempt": 0, "reward": 1, "system_error": None, "unjudged": False, "domain": "shop",
        "agent": "scripted:gold", "usage": {"input_tokens": 1, "output_tokens": 1, "cached_input_tokens": 0}}
HOSTILE = {
    "null": ("null", "not a record"),
    "array": ("[]", "not a record"),
    "empty object": ("{}", "'task_id'"),
    "string": ('"x"', "not a record"),
    "reward 7": (json.dumps({**GOOD, "reward": 7}), "reward must be 1 or 0"),
    "reward true": (json.dumps({**GOOD, "reward": True}), "'reward'"),
    "attempt zero": (json.dumps({**GOOD, "attempt": "zero"}), "'attempt'"),
    "negative attempt": (json.dumps({**GOOD, "attempt": -1}), "'attempt'"),
    "null reward of a clean attempt": (json.dumps({**GOOD, "reward": None}), "neither a system error nor unjudged"),
    "NaN tokens": (json.dumps(GOOD).replace('"input_tokens": 1', '"input_tokens": NaN'), "'usage.input_tokens'"),
    "infinite tokens": (json.dumps(GOOD).replace('"output_tokens": 1', '"output_tokens": Infinity'), "'usage.output_tokens'"),
    "negative tokens": (json.dumps({**GOOD, "usage": {"input_tokens": -5}}), "'usage.input_tokens'"),
    "not JSON": ("{task_id: 1", "not a JSON record"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_every_reader_refuses_a_line_that_is_not_a_record_naming_file_line_and_field(tmp_path, case):
    line, expect = HOSTILE[case]
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + line + "\n" + json.dumps({**GOOD, "attempt": 1}) + "\n")
    with pytest.raises(results.RecordError) as e:
        read_records(path)
    assert str(e.value).startswith(f"{path}:2: ") and expect in str(e.value)
    commands = {
        "metrics": ["metrics", str(path)],
        "compare": ["compare", str(path), str(path)],
        "report": ["report", str(path), "-o", str(tmp_path / "r.html")],
        "export": ["export", str(path), "--format", "sft-jsonl", "--out", str(tmp_path / "export")],
        "select": ["select", str(path), "--out-dir", str(tmp_path / "sel")],
        "run": ["run", "--agent", "scripted:gold", "--tasks", SHOP, "--out", str(path)],
    }
    before = path.read_bytes()
    for name, args in commands.items():
        r = cli.invoke(app, args)
        assert r.exit_code in (1, 2) and isinstance(r.exception, SystemExit), (name, r.output, r.exception)
        assert "r.jsonl:2:" in r.output.replace("\n", ""), (name, r.output)
    assert path.read_bytes() == before  # run refused before writing anything
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "export").exists()


def test_records_written_by_a_run_are_typed_and_stamped(gold_run):
    for r in read_records(gold_run):
        assert r["record_version"] == 2 and r["task_fingerprint"]
        assert r["run"]["agent"] == "scripted:gold" and r["run"]["seed"] == 0 and r["run"]["limits"]["max_turns"] is None
        assert set(r["usage"]) == {"input_tokens", "output_tokens", "cached_input_tokens"}


@pytest.mark.parametrize("change,named", [
    ({"agent": "scripted:noisy:0.5"}, "agent"),
    ({"seed": 7}, "seed"),
    ({"k": 1}, "k=1"),
    ({"sampling": {"temperature": 0.7}}, "sampling"),
    ({"max_turns": 3}, "limits"),
    ({"user": "openai:some-user"}, "user"),
])
def test_resuming_with_another_identity_is_refused_naming_what_differs(gold_run, shop, change, named):
    before = gold_run.read_bytes()
    cfg = RunConfig(**{"agent": "scripted:gold", "k": 2, **change})
    with pytest.raises(runner.ResumeRefused, match=named) as e:
        run(pairs_of(shop), cfg, SqliteBackend(), gold_run)
    assert str(gold_run) in str(e.value)
    assert gold_run.read_bytes() == before


def test_resuming_with_another_task_set_is_refused_and_the_cli_says_so(gold_run, shop):
    with pytest.raises(runner.ResumeRefused, match="selected tasks"):
        run(pairs_of(shop)[:2], RunConfig(agent="scripted:gold", k=2), SqliteBackend(), gold_run)
    r = cli.invoke(app, ["run", "--agent", "scripted:noisy:0.3", "--tasks", SHOP, "--k", "2", "--out", str(gold_run)])
    clean_exit(r, 2)
    assert "another run" in flat(r.output) and "agent" in r.output


def test_a_changed_task_is_refused_then_rerun_with_rerun_changed(gold_run, shop):
    before = read_records(gold_run)
    edited = [(t.model_copy(update={"instruction": t.instruction + " Quickly."}) if t.id == "shop-refuse" else t, d)
              for t, d in pairs_of(shop)]
    with pytest.raises(runner.ResumeRefused, match="shop-refuse"):
        run(edited, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), gold_run)
    s = run(edited, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), gold_run, rerun_changed=True)
    assert (s.ran, s.skipped) == (2, 4) and any("changed tasks" in n for n in s.notes)
    after = read_records(gold_run)
    assert [r for r in after if r["task_id"] != "shop-refuse"] == [r for r in before if r["task_id"] != "shop-refuse"]
    new = {r["task_fingerprint"] for r in after if r["task_id"] == "shop-refuse"}
    old = {r["task_fingerprint"] for r in before if r["task_id"] == "shop-refuse"}
    assert len(new) == 1 and new != old and len(after) == 6


def test_backend_is_not_part_of_the_identity_a_sqlite_run_resumes_on_postgres(tmp_path, shop, pg_backend):
    path = tmp_path / "r.jsonl"
    run(pairs_of(shop)[:2], RunConfig(agent="scripted:gold", k=2), SqliteBackend(), path)
    s = run(pairs_of(shop)[:2], RunConfig(agent="scripted:gold", k=2), pg_backend, path)
    assert (s.ran, s.skipped) == (0, 4)


# -- #15 item 12: metrics --k ---------------------------------------------------------------------------

def synthetic(counts, n):
    return [{**GOOD, "task_id": t, "attempt": a, "reward": int(a < c)} for t, c in counts.items() for a in range(n)]


def brute_pass_at_k(n, c, k):
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


def test_a_complete_last_record_without_newline_is_kept_not_rerun(gold_run, shop):
    whole = gold_run.read_bytes()
    gold_run.write_bytes(whole.rstrip(b"\n"))
    assert len(read_records(gold_run)) == 6
    s = run(pairs_of(shop), RunConfig(agent="scripted:gold", k=2), SqliteBackend(), gold_run)
    assert s.ran == 0 and gold_run.read_bytes() == whole


def test_duplicate_keys_on_resume_are_resolved_and_said(gold_run, shop):
    lines = gold_run.read_text().splitlines(keepends=True)
    later = {**json.loads(lines[0]), "timings": {"total_s": 99.0}}  # a second record of the first key
    gold_run.write_text("".join(lines) + json.dumps(later) + "\n")
    s = run(pairs_of(shop), RunConfig(agent="scripted:gold", k=2), SqliteBackend(), gold_run)
    assert s.ran == 0 and any("more than once" in n for n in s.notes)
    after = read_records(gold_run)
    assert len(after) == 6 and later in after and json.loads(lines[0]) not in after  # one record per key: the last one
    gold_run.write_text("".join(lines) + json.dumps(later) + "\n")
    r = cli.invoke(app, ["run", "--agent", "scripted:gold", "--tasks", SHOP, "--k", "2", "--out", str(gold_run)])
    assert r.exit_code == 0 and "recorded more than once" in flat(r.output)


def test_a_missing_results_file_is_named_as_missing(tmp_path):
    for args in (["metrics", str(tmp_path / "missing.jsonl")], ["report", str(tmp_path / "missing.jsonl")],
                 ["export", str(tmp_path / "missing.jsonl"), "--format", "sft-jsonl", "--out", str(tmp_path / "e")]):
        r = cli.invoke(app, args)
        clean_exit(r, 2)
        assert "no such results file" in flat(r.output)


# -- #20 item 2: compare says what it leaves out ----------------------------------------------------------

