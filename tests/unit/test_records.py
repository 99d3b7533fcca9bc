"""Records: typed and validated on every read, stamped with their run's identity and their task's fingerprint.

Covers the hardening items of the results readers: hostile lines name file and line in every command; resuming
another run, or changed tasks, is refused; metrics and compare refuse blends and incomplete runs and say what
they leave out; `metrics --k` takes any k <= n; report labels are plain text.
"""

import json
import math
import shutil
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate import records as results
from groundstate.cli import app
from groundstate.pipeline import runner
from groundstate.pipeline.report import render
from groundstate.pipeline.runner import RunConfig, run
from groundstate.records import AttemptRecord, read_records
from groundstate.state.sqlite import SqliteBackend
from groundstate.stats.compare import compare
from groundstate.stats.estimators import pass_at_k, pass_hat_k
from groundstate.stats.metrics import compute
from groundstate.types import EpisodeLimits
from groundstate.worlds.domain import Domain
from groundstate.worlds.selectors import select_tasks

SHOP = str(Path(__file__).parents[1] / "fixtures" / "shop")
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

GOOD = {
    "task_id": "shop-cancel",
    "attempt": 0,
    "reward": 1,
    "system_error": None,
    "unjudged": False,
    "domain": "shop",
    "agent": "scripted:gold",
    "usage": {"input_tokens": 1, "output_tokens": 1, "cached_input_tokens": 0},
}
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
        "power": ["power", str(path)],
        "report": ["report", str(path), "-o", str(tmp_path / "r.html")],
        "export": ["export", str(path), "--format", "sft-jsonl", "--out", str(tmp_path / "export")],
        "select": ["select", str(path), "--out", str(tmp_path / "sel")],
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
        assert r.record_version == 2 and r.task_fingerprint
        assert r.run.agent == "scripted:gold" and r.run.seed == 0 and r.run.limits["max_turns"] is None
        assert set(r.usage.model_dump()) == {"input_tokens", "output_tokens", "cached_input_tokens"}
    lines = gold_run.read_text().splitlines(keepends=True)
    assert [r.to_line() for r in read_records(gold_run)] == lines  # a record read is written back byte for byte
    fresh = read_records(gold_run)[0].model_copy(update={"reward": 0})
    assert json.loads(fresh.to_line())["reward"] == 0  # a changed copy is written from its fields


def test_report_renders_names_that_look_like_mathtext_as_plain_text():
    recs = [
        rec(task_id=f"t{i}", attempt=a, reward=a % 2, domain=name)
        for i, name in enumerate([r"$\frac{a}$", "$x^$", r"$\undefined{$"])
        for a in range(2)
    ]
    html = render(recs, "labels")
    assert "success-grid" in html and html.count("data:image/png") >= 3


# -- #15 item 5: run identity and task fingerprints ----------------------------------------------------


@pytest.mark.parametrize(
    "change,named",
    [
        ({"agent": "scripted:noisy:0.5"}, "agent"),
        ({"seed": 7}, "seed"),
        ({"k": 1}, "k=1"),
        ({"sampling": {"temperature": 0.7}}, "sampling"),
        ({"limits": EpisodeLimits(max_turns=3)}, "limits"),
        ({"user": "openai:some-user"}, "user"),
    ],
)
def test_resuming_with_another_identity_is_refused_naming_what_differs(gold_run, shop, change, named):
    gold_run.write_bytes(gold_run.read_bytes() + b'{"task_id": "shop-can')  # even a crash's partial line stays as it was
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


def test_a_run_may_grow_its_k_and_stays_one_run(gold_run, shop):
    s = run(pairs_of(shop), RunConfig(agent="scripted:gold", k=3), SqliteBackend(), gold_run)
    assert (s.ran, s.skipped) == (3, 6)
    m = compute(read_records(gold_run), prices={}, bootstrap_reps=0)
    assert (m["n"], m["observed_k_of_k"]) == (3, 3)


def test_a_changed_task_is_refused_then_rerun_with_rerun_changed(gold_run, shop):
    before = read_records(gold_run)
    edited = [(t.model_copy(update={"instruction": t.instruction + " Quickly."}) if t.id == "shop-refuse" else t, d) for t, d in pairs_of(shop)]
    with pytest.raises(runner.ResumeRefused, match="shop-refuse"):
        run(edited, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), gold_run)
    s = run(edited, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), gold_run, rerun_changed=True)
    assert (s.ran, s.skipped) == (2, 4) and any("changed tasks" in n for n in s.notes)
    after = read_records(gold_run)
    assert [r for r in after if r.task_id != "shop-refuse"] == [r for r in before if r.task_id != "shop-refuse"]
    new = {r.task_fingerprint for r in after if r.task_id == "shop-refuse"}
    old = {r.task_fingerprint for r in before if r.task_id == "shop-refuse"}
    assert len(new) == 1 and new != old and len(after) == 6


def test_metrics_refuses_a_file_that_mixes_runs(tmp_path, shop):
    gold, noisy = tmp_path / "gold.jsonl", tmp_path / "noisy.jsonl"
    run(pairs_of(shop), RunConfig(agent="scripted:gold", k=2), SqliteBackend(), gold)
    run(pairs_of(shop), RunConfig(agent="scripted:noisy:0.9", k=2, seed=1), SqliteBackend(), noisy)
    mixed = tmp_path / "mixed.jsonl"
    records = read_records(gold)
    noisy_records = read_records(noisy)
    # the blend of the issue: half the attempts from each run, every key once, so coverage alone cannot tell
    mixed.write_text("".join(r.to_line() for r in records if r.attempt == 0) + "".join(r.to_line() for r in noisy_records if r.attempt == 1))
    with pytest.raises(ValueError, match="mixes 2 runs.*agent.*seed"):
        compute(read_records(mixed))
    r = cli.invoke(app, ["metrics", str(mixed)])
    clean_exit(r, 1)
    assert "mixes 2 runs" in flat(r.output)
    for args in (["compare", str(gold), str(mixed)], ["report", str(mixed), "-o", str(tmp_path / "x.html")]):
        clean_exit(cli.invoke(app, args), 1)
    r = cli.invoke(app, ["select", str(mixed), "--out", str(tmp_path / "sel")])
    clean_exit(r, 2)
    assert "mixes 2 runs" in flat(r.output) and not (tmp_path / "sel").exists()


def test_records_without_identity_are_read_as_their_own_run_but_never_resumed(gold_run, shop):
    legacy = [r.model_copy(update={"record_version": 1, "run": None, "task_fingerprint": None}) for r in read_records(gold_run)]
    gold_run.write_text("".join(json.dumps(r.model_dump(exclude={"record_version", "run", "task_fingerprint"})) + "\n" for r in legacy))
    assert compute(read_records(gold_run), prices={})["pass_at_1"] == 1.0
    with pytest.raises(runner.ResumeRefused, match="no run identity"):
        run(pairs_of(shop), RunConfig(agent="scripted:gold", k=2), SqliteBackend(), gold_run)
    blend = legacy[:3] + [r.model_copy(update={"agent": "scripted:noop"}) for r in legacy[3:]]
    with pytest.raises(ValueError, match="mixes 2 runs"):
        compute(blend, prices={})


def test_backend_is_not_part_of_the_identity_a_sqlite_run_resumes_on_postgres(tmp_path, shop, pg_backend):
    path = tmp_path / "r.jsonl"
    run(pairs_of(shop)[:2], RunConfig(agent="scripted:gold", k=2), SqliteBackend(), path)
    s = run(pairs_of(shop)[:2], RunConfig(agent="scripted:gold", k=2), pg_backend, path)
    assert (s.ran, s.skipped) == (0, 4)


# -- #15 item 12: metrics --k ---------------------------------------------------------------------------


def rec(**fields):
    """A record like GOOD with `fields` changed."""
    return AttemptRecord.model_validate({**GOOD, **fields})


def jsonl(records) -> str:
    return "".join(r.to_line() for r in records)


def synthetic(counts, n):
    return [rec(task_id=t, attempt=a, reward=int(a < c)) for t, c in counts.items() for a in range(n)]


def brute_pass_at_k(n, c, k):
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


def test_metrics_reports_any_k_up_to_n_and_refuses_k_above_n(tmp_path):
    counts = {"t0": 0, "t1": 3, "t2": 12, "t3": 20}
    recs = synthetic(counts, 20)
    m = compute(recs, [1, 5, 20], prices={}, bootstrap_reps=200)
    assert m["complete"] and m["n"] == 20 and m["ks"] == [1, 5, 20] and m["k"] == 20
    for k in (1, 5, 20):
        assert m["at_k"][str(k)]["pass_at_k"] == pytest.approx(sum(pass_at_k(20, c, k) for c in counts.values()) / 4)
        assert m["at_k"][str(k)]["pass_hat_k"] == pytest.approx(sum(pass_hat_k(20, c, k) for c in counts.values()) / 4)
    assert pass_at_k(20, 3, 5) == pytest.approx(brute_pass_at_k(20, 3, 5))
    assert m["at_k"]["1"]["pass_at_k"] == pytest.approx(m["pass_at_1"])
    assert m["observed_k_of_k"] == 1  # Observed n/n: only t3 passed all 20
    only5 = compute(recs, 5, prices={}, bootstrap_reps=0)
    assert only5["k"] == 5 and only5["observed_k_of_k"] == 1
    with pytest.raises(ValueError, match="k=21 exceeds n=20"):
        compute(recs, [5, 21], prices={})
    path = tmp_path / "r.jsonl"
    path.write_text(jsonl(recs))
    r = cli.invoke(app, ["metrics", str(path), "--k", "1,5,20", "--json"])
    assert r.exit_code == 0, r.output
    assert set(json.loads(r.stdout)["at_k"]) == {"1", "5", "20"}
    human = cli.invoke(app, ["metrics", str(path), "--k", "5"]).stdout
    assert "pass@5 (unbiased)" in flat(human) and "Observed 20/20" in flat(human)
    for bad in ("0", "-1", "x", "1,,2", "25", "\u00b2", "9" * 5000):  # a superscript two and 5,000 digits pass str.isdigit
        r = cli.invoke(app, ["metrics", str(path), "--k", bad])
        clean_exit(r, 2 if bad != "25" else 1)
        assert "--k" in r.output or bad == "25", r.output


# -- #15 item 13: smaller reader issues ---------------------------------------------------------------


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
    kept = [r.model_dump() for r in after]
    assert len(after) == 6 and later in kept and json.loads(lines[0]) not in kept  # one record per key: the last one
    gold_run.write_text("".join(lines) + json.dumps(later) + "\n")
    r = cli.invoke(app, ["run", "--agent", "scripted:gold", "--tasks", SHOP, "--k", "2", "--out", str(gold_run)])
    assert r.exit_code == 0 and "recorded more than once" in flat(r.output)


def test_a_task_id_defined_differently_by_two_selected_sources_is_refused(tmp_path):
    copy = tmp_path / "shop2"
    shutil.copytree(SHOP, copy)
    tasks = copy / "tasks" / "basic.yaml"
    tasks.write_text(tasks.read_text().replace("Please cancel order 1.", "Please cancel order 1 now."))
    with pytest.raises(ValueError, match=f"'shop-cancel'.*{SHOP}.*{copy}"):
        select_tasks(f"{SHOP},{copy}")
    assert len(select_tasks(f"{SHOP},{SHOP}")) == 3  # the same tasks selected twice are one selection
    r = cli.invoke(app, ["run", "--agent", "scripted:gold", "--tasks", f"{SHOP},{copy}", "--out", str(tmp_path / "r.jsonl")])
    clean_exit(r, 2)
    assert not (tmp_path / "r.jsonl").exists()


def test_a_missing_results_file_is_named_as_missing(tmp_path):
    for args in (
        ["metrics", str(tmp_path / "missing.jsonl")],
        ["report", str(tmp_path / "missing.jsonl")],
        ["export", str(tmp_path / "missing.jsonl"), "--format", "sft-jsonl", "--out", str(tmp_path / "e")],
    ):
        r = cli.invoke(app, args)
        clean_exit(r, 2)
        assert "no such results file" in flat(r.output)


# -- #20 item 2: compare says what it leaves out ----------------------------------------------------------


def test_compare_applies_the_completeness_rule_and_names_left_out_tasks(tmp_path):
    counts = {"t0": 1, "t1": 2, "t2": 0, "t3": 2}
    base = synthetic(counts, 2)
    cand = [r if r.task_id != "t2" else r.model_copy(update={"reward": None, "system_error": "endpoint down"}) for r in synthetic(counts, 2)]
    with pytest.raises(ValueError, match="incomplete candidate run: 2 system errors"):
        compare(base, cand, prices={})
    c = compare(base, cand, prices={}, allow_incomplete=True)
    assert c["shared_tasks"] == 3
    assert c["left_out"] == [{"task_id": "t2", "reason": "no clean attempt (2 system errors) in the candidate run"}]
    b, k = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    b.write_text(jsonl(base))
    k.write_text(jsonl(cand + synthetic({"t9": 1}, 2)))
    clean_exit(cli.invoke(app, ["compare", str(b), str(k)]), 1)
    r = cli.invoke(app, ["compare", str(b), str(k), "--allow-incomplete"])
    assert r.exit_code == 0 and "2 tasks left out" in flat(r.output)
    assert "t2: no clean attempt (2 system errors) in the candidate run" in flat(r.output) and "t9: only in the candidate run" in flat(r.output)
    html = render(cand, "with baseline", baseline=base)
    assert "left-out" in html and "no clean attempt (2 system errors) in the candidate run" in html
    assert not math.isnan(c["metrics"]["pass_at_1"]["lift"])


def test_an_edited_policy_changes_every_task_of_its_domain(tmp_path):
    """The policy is the agent's system message: an attempt made under another policy is not this task's attempt."""
    folder = tmp_path / "shop"
    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "shop", folder)
    out = tmp_path / "r.jsonl"
    run([(t, d) for d in [Domain(folder)] for t in d.tasks], RunConfig(agent="scripted:gold", k=1), SqliteBackend(), out)
    (folder / "policy.md").write_text((folder / "policy.md").read_text() + "\nNever cancel an order.\n")
    edited = Domain(folder)
    with pytest.raises(runner.ResumeRefused, match="shop-cancel"):
        run([(t, edited) for t in edited.tasks], RunConfig(agent="scripted:gold", k=1), SqliteBackend(), out)
    s = run([(t, edited) for t in edited.tasks], RunConfig(agent="scripted:gold", k=1), SqliteBackend(), out, rerun_changed=True)
    assert (s.ran, s.skipped) == (3, 0)


_READERS_UNDER_A_MEMORY_CAP = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # before the fix: a MemoryError here, not a machine out of memory
from groundstate.cli import app
from groundstate.stats.basis import coverage
from groundstate.records import AttemptRecord
cov = coverage([AttemptRecord.model_construct(task_id="t", attempt=0, reward=1), AttemptRecord.model_construct(task_id="t", attempt=10**15, reward=1)])
assert cov.missing_count == 10**15 - 1 and cov.missing == [("t", a) for a in range(1, 6)] and not cov.complete
sys.argv = ["groundstate", *sys.argv[1:]]
app()
"""


def test_an_absurd_attempt_index_is_refused_not_laid_out(tmp_path):
    """`attempt: 10**15` is a record to the old model, and every reader then laid out 10**15 attempts per task
    (`metrics` was killed for memory). An attempt index is below `MAX_ATTEMPTS`, the largest `run --k`; coverage
    counts missing keys without listing them."""
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "attempt": 10**15}) + "\n")
    commands = [
        ["metrics", str(path)],
        ["compare", str(path), str(path)],
        ["report", str(path), "-o", str(tmp_path / "r.html")],
        ["select", str(path), "--out", str(tmp_path / "sel")],
        ["run", "--agent", "scripted:gold", "--tasks", SHOP, "--out", str(path)],
    ]
    for args in commands:
        p = subprocess.run([sys.executable, "-c", _READERS_UNDER_A_MEMORY_CAP, *args], capture_output=True, text=True, cwd=tmp_path)
        out = " ".join((p.stdout + p.stderr).split())
        assert p.returncode == 2 and "r.jsonl:2: field 'attempt'" in out and "Traceback" not in out, (args, out[-2000:])
    r = cli.invoke(
        app, ["run", "--agent", "scripted:gold", "--tasks", SHOP, "--k", str(results.MAX_ATTEMPTS + 1), "--out", str(tmp_path / "k.jsonl")]
    )
    assert r.exit_code == 2 and "--k" in r.output and not (tmp_path / "k.jsonl").exists()


@pytest.mark.parametrize("edit", ["a task's records removed", "a task the run never selected"])
def test_a_file_whose_tasks_are_not_the_runs_task_set_is_incomplete(gold_run, edit):
    """Every record names its run's selected task set (a hash): a file that lost a whole task, or gained records of a
    task the run did not select, does not describe that run. Before: `metrics` called it complete (2 or 4 tasks)."""
    recs = read_records(gold_run)
    if edit == "a task's records removed":
        recs = [r for r in recs if r.task_id != "shop-multi"]
    else:
        recs += [r.model_copy(update={"task_id": "ghost", "reward": 0}) for r in recs if r.task_id == "shop-cancel"]
    gold_run.write_text(jsonl(recs))
    with pytest.raises(ValueError, match="not the run's selected task set"):
        compute(read_records(gold_run), prices={}, bootstrap_reps=0)
    r = cli.invoke(app, ["metrics", str(gold_run)])
    clean_exit(r, 1)
    assert "not the run's selected task set" in flat(r.output)
    assert cli.invoke(app, ["metrics", str(gold_run), "--allow-incomplete"]).exit_code == 0


def test_compare_allow_incomplete_says_what_it_compared_anyway(tmp_path):
    """#20 item 2, verify pass: with --allow-incomplete, a task with one system error of two attempts stayed in the comparison
    with n=1, and compare said nothing about it (no task was left out), while `metrics` lists the system error. Now what
    each run lacks is said on stderr (also with --json) and in `incomplete`; and (#32 item 2) a task with fewer than k
    clean attempts is left out with that reason, since its pass^k and Observed k/k are not defined at k."""
    counts = {"t0": 1, "t1": 2, "t2": 0}
    base = synthetic(counts, 2)
    cand = [r if r.key != ("t1", 0) else r.model_copy(update={"reward": None, "system_error": "endpoint down"}) for r in synthetic(counts, 2)]
    c = compare(base, cand, prices={}, allow_incomplete=True)
    assert c["left_out"] == [{"task_id": "t1", "reason": "1 clean attempts, fewer than k=2 (1 system errors) in the candidate run"}]
    assert c["shared_tasks"] == 2
    assert list(c["incomplete"]) == ["candidate"] and "1 system errors, e.g. t1 attempt 0" in c["incomplete"]["candidate"][0]
    b, k = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    b.write_text(jsonl(base))
    k.write_text(jsonl(cand))
    for extra in ([], ["--json"]):
        r = cli.invoke(app, ["compare", str(b), str(k), "--allow-incomplete", *extra])
        assert r.exit_code == 0 and "candidate run incomplete, compared anyway: 1 system errors" in flat(r.output), r.output
    html = render(base, "with baseline", baseline=cand)  # the report's comparison says it too, of the baseline here
    assert "the baseline is incomplete, compared anyway: 1 system errors" in html


def test_a_line_holds_the_optional_fields_only_where_they_say_something(gold_run):
    """`source_id`, `user_replies`, `user_faults` and `replaced_usage` are written only where set, so a run of our own
    tasks writes the lines it always wrote (before: every line had `"source_id": null`, a second serializer of the
    class having replaced the first)."""
    lines = [json.loads(line) for line in gold_run.read_text().splitlines()]
    assert lines and all(not {"source_id", "user_replies", "user_faults", "replaced_usage"} & line.keys() for line in lines)
    record = read_records(gold_run)[0]
    tagged = json.loads(record.model_copy(update={"source_id": "7", "replaced_usage": [{"input_tokens": 5}]}).model_dump_json())
    assert tagged["source_id"] == "7" and tagged["replaced_usage"] == [{"input_tokens": 5, "output_tokens": 0, "cached_input_tokens": 0}]
