"""`groundstate --version`, `tasks list` (every id, never cut at 80 columns), `tasks show ID`, and filters that refuse
values they do not know (#21 items 8 and 9)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version

from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.worlds.domain import load_domain

NARROW = {"COLUMNS": "80", "TERM": "dumb"}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env=NARROW)


def test_version():
    r = invoke("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"groundstate {version('groundstate')}"


def test_list_prints_every_id_whole_at_80_columns():
    ids = [t.id for t in load_domain("hr").tasks]
    # a process of its own: the consoles take their width from COLUMNS when they are made, at import
    r = subprocess.run(
        [sys.executable, "-m", "groundstate.cli", "tasks", "list", "--domain", "hr"], capture_output=True, text=True, env={**os.environ, **NARROW}
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    for tid in ids:  # each id on one line, whole: a person copies it from here
        assert sum(1 for line in lines if f" {tid} " in line) == 1, tid
    assert f"{len(ids)} tasks by domain, split and family" in r.stdout


def test_list_counts_only():
    r = invoke("tasks", "list", "--domain", "hr", "--counts")
    assert r.exit_code == 0 and "hr-book-annual-leave-001" not in r.stdout and "policy_refusal" in r.stdout


def test_an_unknown_split_is_a_usage_error_and_an_empty_listing_an_error():
    r = invoke("tasks", "list", "--split", "test")
    assert r.exit_code == 2 and "'test' is not one of pool, bench" in r.output
    r = invoke("tasks", "list", "--domain", "hr", "--split", "pool")  # hr has benchmark tasks only
    assert r.exit_code == 1 and "no tasks match --split pool" in r.output


def test_show_prints_the_task_in_full():
    task = load_domain("hr").tasks[0]
    r = invoke("tasks", "show", task.id)
    assert r.exit_code == 0, r.output
    assert task.instruction in r.stdout and task.user.context.split(".")[0] in r.stdout
    for i, call in enumerate(task.gold, 1):
        assert f"{i}. {call.tool}(" in r.stdout
    for section in ("instruction", "user", "data patch", "gold solution", "checks", "rubrics", "gold reply", "limits"):
        assert f"\n{section}\n" in r.stdout
    data = json.loads(invoke("tasks", "show", task.id, "--json").stdout)
    assert data["task"]["id"] == task.id and data["fingerprint"] == task.fingerprint() and "certificate" not in data


def test_show_certifies_on_request():
    task = load_domain("hr").tasks[0]
    data = json.loads(invoke("tasks", "show", task.id, "--certify", "--json").stdout)
    cert = data["certificate"]
    assert cert["certified"] is True and cert["gold_pass"] and cert["noop_fail"] and cert["backends"] == ["sqlite"]
    r = invoke("tasks", "show", task.id, "--certify")
    assert "certificate (sqlite): certified" in r.stdout


def test_show_an_unknown_id_suggests_near_ones():
    r = invoke("tasks", "show", "hr-book-annual-leave-01", "--domain", "hr")
    assert r.exit_code == 1 and "no task 'hr-book-annual-leave-01' in hr" in r.output and "hr-book-annual-leave-001" in r.output
    r = invoke("tasks", "show", "zzz-[bold]nothing", "--domain", "hr")  # markup in an id is printed as written
    assert r.exit_code == 1 and "zzz-[bold]nothing" in r.output and "tasks list" in r.output


def test_metrics_refuses_an_unknown_breakdown(tmp_path):
    r = invoke("metrics", str(tmp_path / "missing.jsonl"), "--by", "foo")
    assert r.exit_code == 2 and "'foo' is not one of domain, family" in r.output


# -- output a person can read: narrow terminals and no terminal at all (#21 item 4) -------------------------------


def run_narrow(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """The command in a process of its own at 80 columns and without a terminal (a log file, CI, a pipe)."""
    return subprocess.run([sys.executable, "-m", "groundstate.cli", *args], capture_output=True, text=True, env={**os.environ, **NARROW}, cwd=cwd)


def test_without_a_terminal_a_run_prints_plain_progress_lines_and_whole_paths(tmp_path):
    out = tmp_path / ("a-rather-long-folder-name-for-the-results-of-this-run" * 2) / "results.jsonl"
    r = run_narrow("run", "--agent", "scripted:gold", "--tasks", "hr", "--out", str(out))
    assert r.returncode == 0, r.stderr
    progress = [line for line in r.stderr.splitlines() if line.startswith("run scripted:gold: ")]
    assert len(progress) >= 5 and progress[-1].startswith("run scripted:gold: 68/68 (100%) pass "), r.stderr
    assert f"results written to {out}" in r.stderr.splitlines()  # one line, never cut inside the path


def test_lint_lists_every_problem_in_full_and_ids_whole(tmp_path):
    from groundstate.pipeline.scaffold import new_domain

    folder = new_domain(tmp_path, "narrow")
    tools = folder / "tools.py"
    text = tools.read_text()
    at = text.index("def cancel_narrow_order")
    body = text.index('"""', text.index('"""', at) + 3) + 3
    tools.write_text(text[:body] + "\n    1 / 0" + text[body:])  # a tool with a bug: every gold replay fails
    r = run_narrow("tasks", "lint", "--domain", str(folder))
    assert r.returncode == 1
    problems = [line for line in r.stdout.splitlines() if line.startswith("problem ")]
    assert problems and all("ZeroDivisionError: division by zero" in line for line in problems), r.stdout
    ids = [line.split()[1].rstrip(":") for line in problems]
    assert len(set(ids)) == len(ids) and all(f"│ {i} " in r.stdout for i in ids)  # whole in the table too


def test_certify_and_blame_tables_keep_ids_names_and_headers_whole_at_80_columns(tmp_path):
    from groundstate.worlds.domain import iter_tasks

    longest = max((t.id for t, _ in iter_tasks()), key=len)  # the longest bundled id, beside a few short ones
    ids = [longest, *[t.id for t in load_domain("hr").tasks if not t.rubrics][:3]]
    r = run_narrow("tasks", "certify", "--tasks", ",".join(ids), "--backend", "sqlite", "--backend", "postgres")
    assert r.returncode == 0, r.stderr
    table = r.stdout[: r.stdout.index("mutants killed/counted")]  # the table, above its caption
    assert all(len(line) <= 80 for line in table.splitlines()) and "…" not in table, table
    assert all(sum(1 for line in table.splitlines() if line.split()[:1] == [tid]) == 1 for tid in ids), table
    assert table.splitlines()[1].split() == ["task", "gold", "no-op", "mutants", "alts", "hacks", "="]
    results = tmp_path / "k.jsonl"
    assert run_narrow("run", "--agent", "scripted:noisy:0.3", "--tasks", "kiosk", "--k", "2", "--out", str(results)).returncode == 0
    r = run_narrow("metrics", str(results))
    blame = r.stdout[r.stdout.index("where failed attempts went wrong") :]
    assert all(len(line) <= 80 for line in blame.splitlines()) and "…" not in blame, blame
    families = {t.family for t in load_domain("kiosk").tasks}
    shown = [line.split(":")[0].strip() for line in blame.splitlines() if ": most common: " in line]
    assert shown and set(shown) <= families and all(f"│ {f} " in blame for f in shown)  # whole, in the table and below


# -- defaults that do not surprise (#21 item 11) and one name for outputs (item 8) --------------------------------


def test_run_says_the_defaults_it_chose(tmp_path):
    r = CliRunner().invoke(app, ["run", "--agent", "scripted:gold", "--out", str(tmp_path / "r.jsonl")])
    assert r.exit_code == 0, r.output
    assert "defaults: --tasks bench --k 1 (" in r.output and "give them to choose" in r.output
    r = CliRunner().invoke(app, ["run", "--agent", "scripted:gold", "--tasks", "hr", "--k", "1", "--out", str(tmp_path / "s.jsonl")])
    assert "defaults:" not in r.output


def test_sft_export_keeps_passing_attempts_unless_asked_and_says_what_it_kept(tmp_path):
    results = tmp_path / "r.jsonl"
    assert CliRunner().invoke(app, ["run", "--agent", "scripted:noisy:0.5", "--tasks", "hr", "--k", "2", "--out", str(results)]).exit_code == 0
    r = CliRunner().invoke(app, ["export", str(results), "--format", "sft-jsonl", "--out", str(tmp_path / "sft")])
    assert r.exit_code == 0 and "passed attempts only (--all-attempts to keep the rest)" in r.output, r.output
    counts = json.loads((tmp_path / "sft" / "export.json").read_text())["counts"]
    assert counts["not_passed"] > 0 and counts["not_passed_kept"] == 0
    rows = [json.loads(line) for line in next((tmp_path / "sft").glob("*.jsonl")).read_text().splitlines()]
    assert rows and all(row.get("reward") in (1, None) for row in rows)
    r = CliRunner().invoke(app, ["export", str(results), "--format", "sft-jsonl", "--all-attempts", "--out", str(tmp_path / "all")])
    counts = json.loads((tmp_path / "all" / "export.json").read_text())["counts"]
    assert r.exit_code == 0 and counts["not_passed"] == 0 and counts["not_passed_kept"] > 0 and "of them not passed" in r.output


def test_report_writes_beside_its_results_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "runs" / "r.jsonl"
    assert CliRunner().invoke(app, ["run", "--agent", "scripted:gold", "--tasks", "hr", "--out", str(results)]).exit_code == 0
    r = CliRunner().invoke(app, ["report", str(results)])
    assert r.exit_code == 0 and (tmp_path / "runs" / "r.report.html").exists() and not (tmp_path / "report.html").exists()
    assert f"report written to {tmp_path / 'runs' / 'r.report.html'}" in r.output
    r = CliRunner().invoke(app, ["report", str(results), "--out", "mine.html"])  # the one name for outputs, as run's
    assert r.exit_code == 0 and (tmp_path / "mine.html").exists()


def test_probe_says_its_defaults_before_it_starts(tmp_path):
    r = CliRunner().invoke(app, ["probe", "--agent", "scripted:gold", "--tasks", "hr", "--out", str(tmp_path / "p.jsonl")], env=NARROW)
    assert r.exit_code == 0, r.output
    n = len(load_domain("hr").tasks)
    assert f"defaults: --k 8 ({n} tasks × 8 = {n * 8} attempts); give them to choose" in r.output
    assert r.output.index("defaults:") < r.output.index("attempts run")


def test_an_empty_selection_says_so_and_never_says_how_to_train_on_it(tmp_path):
    probes = tmp_path / "p.jsonl"
    assert CliRunner().invoke(app, ["probe", "--agent", "scripted:gold", "--tasks", "hr", "--k", "3", "--out", str(probes)]).exit_code == 0
    r = CliRunner().invoke(app, ["select", str(probes), "--out", str(tmp_path / "sel")], env=NARROW)
    assert r.exit_code == 0, r.output
    assert "nothing to train on: no task was selected for training" in r.output  # gold passes all: every task too easy
    assert "groundstate train" not in r.output and "train.yaml written to" in r.output


def test_verl_dry_run_says_the_topology_it_assumed(tmp_path):
    args = ["train", "--engine", "verl", "--dry-run", "--train", "hr", "--model", "Qwen/Qwen3-0.6B", "--out", str(tmp_path / "v")]
    r = CliRunner().invoke(app, args, env=NARROW)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("verl topology: 3 nodes × 8 GPUs (the reference recipe; --nodes and --gpus-per-node to change)")
    r = CliRunner().invoke(app, [*args, "--nodes", "1", "--gpus-per-node", "8"], env=NARROW)
    assert r.exit_code == 0 and "verl topology" not in r.output and "recipe OK: 8 GPUs" in r.output
    assert not (tmp_path / "v").exists()  # a dry run writes nothing
