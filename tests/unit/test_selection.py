"""Training-pool selection: bands and signal against numerical integration, benchmark exclusion by id and
content, a deterministic grouped split, and the probe → select path end to end (library and CLI)."""

import hashlib
import json
from pathlib import Path

import pytest
from scipy import integrate, stats
from typer.testing import CliRunner

from groundstate.audits.near_duplicates import lsh_params, near_duplicates, shingles
from groundstate.audits.overlap import ExcludeSet, build_exclude_set, fingerprint
from groundstate.pipeline.runner import RunConfig, run
from groundstate.pipeline.selection import select, select_files
from groundstate.pipeline.selection_rules import SelectionParams
from groundstate.pipeline.split import SplitItem, split
from groundstate.records import AttemptRecord, read_records
from groundstate.state.sqlite import SqliteBackend
from groundstate.stats.difficulty import BANDS, DEFAULT_EDGES, band_masses, band_of, signal
from groundstate.tasks import Task, ToolCall
from groundstate.worlds.domain import iter_tasks
from groundstate.worlds.selectors import select_tasks

SHOP = str(Path(__file__).parents[1] / "fixtures" / "shop")
NC = [
    (0, 0),
    (1, 0),
    (1, 1),
    (3, 0),
    (3, 1),
    (4, 2),
    (5, 5),
    (8, 1),
    (8, 3),
    (8, 4),
    (8, 6),
    (8, 8),
    (10, 9),
    (16, 0),
    (16, 2),
    (16, 7),
    (16, 12),
    (16, 15),
    (32, 31),
    (40, 20),
]


# -- numerical reference ------------------------------------------------------------------------


def quad_masses(n, c, edges):
    a, b = c + 0.5, n - c + 0.5
    cuts = [0.0, *edges, 1.0]
    return [integrate.quad(lambda p: stats.beta.pdf(p, a, b), lo, hi, limit=200)[0] for lo, hi in zip(cuts, cuts[1:], strict=False)]


def quad_signal(n, c):
    a, b = c + 0.5, n - c + 0.5
    return integrate.quad(lambda p: p * (1 - p) * stats.beta.pdf(p, a, b), 0, 1, limit=200)[0]


def quad_band(n, c, edges):
    m = quad_masses(n, c, edges)
    top = sorted(m, reverse=True)
    assert top[0] - top[1] > 1e-6, "crafted case must not be a tie"
    return BANDS[m.index(top[0])]


def write_jsonl(path, records):
    path.write_text("".join(r.to_line() for r in records))
    return path


def probe_records(counts, system_errors=None):
    """{task_id: (n, c)} → records with c successes first, then failures, then system errors."""
    system_errors = system_errors or {}
    out = []
    for tid, (n, c) in counts.items():
        for a in range(n):
            out.append(AttemptRecord(task_id=tid, attempt=a, reward=int(a < c)))
        for j in range(system_errors.get(tid, 0)):
            out.append(AttemptRecord(task_id=tid, attempt=n + j, reward=None, system_error="ConnectionError: endpoint down"))
    return out


def make_task(tid, instruction, template=None, family="single_write", domain="synthetic", gold=None, patch=None):
    return Task(
        id=tid,
        domain=domain,
        instruction=instruction,
        template=template,
        family=family,
        split="pool",
        gold=gold if gold is not None else [ToolCall(tool="noop", args={"ref": tid})],
        patch=patch or {},
    )


# -- bands and signal ---------------------------------------------------------------------------


@pytest.mark.parametrize("edges", [DEFAULT_EDGES, (0.1, 0.3, 0.7, 0.95)])
def test_band_masses_band_and_signal_match_numerical_integration(edges):
    for n, c in NC:
        m = band_masses(n, c, edges)
        assert list(m) == list(BANDS)
        assert [m[b] for b in BANDS] == pytest.approx(quad_masses(n, c, edges), abs=1e-7)
        assert sum(m.values()) == pytest.approx(1.0, abs=1e-12)
        assert band_of(n, c, edges) == quad_band(n, c, edges), (n, c)
        assert signal(n, c) == pytest.approx(quad_signal(n, c), abs=1e-9)
        assert 0 < signal(n, c) <= 0.25


def test_signal_peaks_at_half_and_grows_more_certain():
    assert signal(8, 4) > signal(8, 2) > signal(8, 0)
    assert signal(40, 20) > signal(8, 4)  # more runs: the posterior concentrates on p = ½
    assert signal(40, 0) < signal(8, 0)  # and on p ≈ 0


def test_crafted_probe_file_bands_signal_and_system_errors(tmp_path):
    counts = {f"t{i:02d}": nc for i, nc in enumerate(NC) if nc[0] >= 3}
    errors = {"t03": 4, "t07": 2}
    path = write_jsonl(tmp_path / "probes.jsonl", probe_records(counts, errors))
    res = select(read_records(path), params=SelectionParams(min_clean_runs=3))
    rows = {r["task_id"]: r for r in res.rows}
    assert set(rows) == set(counts)
    for tid, (n, c) in counts.items():
        r = rows[tid]
        assert (r["clean_runs"], r["successes"]) == (n, c)  # system errors are not runs
        assert r["system_errors"] == errors.get(tid, 0)
        assert r["band"] == quad_band(n, c, DEFAULT_EDGES)
        assert r["signal"] == pytest.approx(quad_signal(n, c), abs=1e-6)
        assert r["decision"] in ("train", "val", "dropped_band")
        assert (r["decision"] == "dropped_band") == (r["band"] in ("too_hard", "too_easy"))
        assert not r["resolved"] and not r["content_checked"]
    assert any("no loadable definition" in note for note in res.notes)


def test_insufficient_runs_are_reported_not_dropped(tmp_path):
    counts = {"enough": (4, 2), "few": (2, 1), "errors": (1, 0), "all-errors": (0, 0)}
    path = write_jsonl(tmp_path / "probes.jsonl", probe_records(counts, {"few": 3, "errors": 5, "all-errors": 4}))
    res = select(read_records(path), params=SelectionParams(min_clean_runs=3))
    rows = {r["task_id"]: r for r in res.rows}
    assert set(rows) == set(counts)
    for tid in ("few", "errors", "all-errors"):
        assert rows[tid]["decision"] == "insufficient_runs"
        assert f"{counts[tid][0]} clean runs < 3" in rows[tid]["reason"] and "system errors" in rows[tid]["reason"]
    assert rows["all-errors"]["system_errors"] == 4 and rows["all-errors"]["clean_runs"] == 0
    assert rows["enough"]["decision"] in ("train", "val")
    assert res.counts()["decisions"]["insufficient_runs"] == 3
    assert any("fewer than 3 clean runs" in n for n in res.notes)
    written = [json.loads(x) for x in res.render()["selection.jsonl"].decode().splitlines()]
    assert {r["task_id"] for r in written if r["decision"] == "insufficient_runs"} == {"few", "errors", "all-errors"}
    for r in written:
        assert {"task_id", "clean_runs", "successes", "band", "signal", "decision", "reason"} <= set(r)


def test_the_manifests_bands_and_histogram_count_the_same_tasks(tmp_path):
    """`counts()["bands"]` and `histogram()` (both in manifest.json) count one task set, the banded tasks: an excluded
    task short of clean runs is in neither (the histogram counted it), a task the reference's missing judge set apart is
    in both (the histogram left it out), and the command's table adds up to the probed tasks."""
    from groundstate.cli import app
    from groundstate.records import RunIdentity

    counts = {"ok": (4, 2), "short-excluded": (2, 2), "ref-waits": (4, 2), "few": (1, 0)}
    ex = ExcludeSet()
    ex.add(ids=["short-excluded"], source="list")
    ident = RunIdentity(agent="scripted:gold", user="scripted", seed=0, tasks="x")  # no judge
    ref = [r.model_copy(update={"rubrics": 1 if r.task_id == "ref-waits" else 0, "run": ident}) for r in probe_records(counts)]
    res = select(probe_records(counts), exclude=ex, reference_records=ref, params=SelectionParams(min_clean_runs=3))
    decided = {r["task_id"]: r["decision"] for r in res.rows}
    assert (decided["short-excluded"], decided["ref-waits"], decided["few"]) == ("excluded", "awaits_judge", "insufficient_runs")
    manifest = json.loads(res.render()["manifest.json"])
    histogram = {h["band"]: h["tasks"] for h in manifest["histogram"]}
    assert histogram == manifest["counts"]["bands"] and sum(histogram.values()) == 2  # ok and ref-waits
    assert manifest["counts"]["not_banded"] == {"awaits_judge": 0, "insufficient_runs": 2}
    probes, reference = write_jsonl(tmp_path / "p.jsonl", probe_records(counts)), write_jsonl(tmp_path / "r.jsonl", ref)
    (tmp_path / "ex.yaml").write_text("- short-excluded\n")
    args = ["select", str(probes), "--reference", str(reference), "--exclude-list", str(tmp_path / "ex.yaml"), "--out", str(tmp_path / "s")]
    r = CliRunner().invoke(app, [*args, "--min-clean-runs", "3", "--allow-incomplete"])
    assert r.exit_code == 0, r.output
    table = [line for line in r.output.splitlines() if line.startswith("│") and line.split("│")[3].strip().isdigit()]
    assert sum(int(line.split("│")[3]) for line in table) == len(counts)


def test_band_and_signal_filters_and_reference_gate(tmp_path):
    counts = {"zero": (8, 0), "half": (8, 4), "mostly": (8, 6), "all": (8, 8), "rare": (8, 1), "unref": (8, 3)}
    ref = probe_records({"zero": (4, 0), "half": (4, 3), "mostly": (1, 1), "all": (4, 4), "rare": (4, 1)})
    res = select(probe_records(counts), reference_records=ref, params=SelectionParams(reference_min_runs=2, min_signal=0.15))
    d = {r["task_id"]: (r["decision"], r["reason"]) for r in res.rows}
    assert d["zero"][0] == "failed_reference_gate" and "never solved" in d["zero"][1]
    assert d["mostly"][0] == "failed_reference_gate" and "only 1 clean reference runs" in d["mostly"][1]
    assert d["unref"][0] == "failed_reference_gate" and "no clean reference runs" in d["unref"][1]
    assert d["all"][0] == "dropped_band" and "too_easy" in d["all"][1]
    assert d["rare"][0] == "dropped_signal"  # hard band, but E[p(1-p)] ≈ 0.13 < 0.15
    assert d["half"][0] in ("train", "val")
    only_medium = select(probe_records(counts), params=SelectionParams(keep_bands=("medium",)))
    assert {r["task_id"] for r in only_medium.rows if r["decision"] in ("train", "val")} == {"half"}


# -- content fingerprints and benchmark exclusion -----------------------------------------------


def test_fingerprint_ignores_id_domain_wording_and_number_form():
    a = make_task("a-1", "Please  cancel order 1!", patch={"orders": [{"id": 1, "total": 10.0}]})
    b = a.model_copy(update={"id": "b-9", "domain": "other", "instruction": "please cancel ORDER 1"})
    c = a.model_copy(update={"patch": {"orders": [{"total": 10, "id": 1}]}})
    assert fingerprint(a) == fingerprint(b) == fingerprint(c)
    assert fingerprint(a).patch_gold != fingerprint(a.model_copy(update={"gold": []})).patch_gold
    assert fingerprint(make_task("x", "do nothing", gold=[])).patch_gold is None  # empty patch and gold identify nothing


def _bench_tasks(source):
    bench = [t for t, _ in iter_tasks(split="bench")] if source == "bundled" else []
    if bench:
        return bench, build_exclude_set(["bench"])
    built = [
        make_task(
            f"bench-{i}",
            f"Hello, I am customer number {i} and I would like to change the delivery address of my "
            f"order {100 + i} to 12 Harbour Road, then cancel the duplicate order {200 + i} that I placed yesterday.",
            template=f"tmpl{i}",
        )
        for i in range(3)
    ]
    ex = ExcludeSet()
    ex.add(built, source="built")
    return built, ex


def _reword(text):
    words = text.split()
    words[0], words[len(words) // 2], words[-1] = "Greetings,", "kindly", "soon."
    return " ".join(words)


@pytest.mark.parametrize("source", ["bundled", "built"])
def test_benchmark_copy_with_new_id_and_reworded_instruction_is_excluded(source):
    """A bench task (from the bundled bench domains when there are any, and one built here) copied with a new id."""
    bench, ex = _bench_tasks(source)
    src = max(bench, key=lambda t: (len(t.instruction.split()), t.id))
    reworded = _reword(src.instruction)
    assert reworded != src.instruction
    copy = src.model_copy(update={"id": "pool-copy-001", "domain": "retail", "instruction": reworded, "split": "pool"})
    # the same words but a different solution: only the near-duplicate rule can catch it
    near = copy.model_copy(update={"id": "pool-near-001", "gold": [ToolCall(tool="something_else", args={})], "patch": {}})
    # a different solution, same instruction up to case, punctuation and spacing
    same_text = near.model_copy(update={"id": "pool-text-001", "instruction": "  " + src.instruction.upper().replace(",", " ") + " "})
    other = make_task("pool-unrelated", "Which of my two savings accounts pays more interest this quarter?")
    tasks = {t.id: t for t in (copy, near, same_text, other)}
    records = probe_records({tid: (6, 3) for tid in tasks} | {src.id: (6, 3)})
    res = select(records, tasks=tasks | {src.id: src}, exclude=ex)
    rows = {r["task_id"]: r for r in res.rows}
    for tid, rule in (
        ("pool-copy-001", "patch_gold"),
        ("pool-near-001", "near_duplicate_instruction"),
        ("pool-text-001", "instruction"),
        (src.id, "id"),
    ):
        r = rows[tid]
        assert r["decision"] == "excluded", tid
        assert src.id in r["reason"] and rule in [m["rule"] for m in r["exclusions"]], (tid, r["exclusions"])
        assert r["exclusions"][0]["task_id"] == src.id
    assert rows["pool-copy-001"]["exclusions"][0]["rule"] == "patch_gold"
    assert {m["rule"] for m in rows["pool-copy-001"]["exclusions"]} >= {"patch_gold", "near_duplicate_instruction"}
    nd = [m for m in rows["pool-near-001"]["exclusions"] if m["rule"] == "near_duplicate_instruction"][0]
    assert 0.7 <= nd["jaccard"] < 1
    assert f"Jaccard {nd['jaccard']:.2f}" in rows["pool-near-001"]["reason"]
    assert rows["pool-unrelated"]["decision"] in ("train", "val") and rows["pool-unrelated"]["exclusions"] == []
    # MinHash LSH finds the same near duplicates as comparing every pair
    cands = {t.id: t.instruction for t in tasks.values()} | {f"orig-{t.id}": t.instruction for t in bench[:50]}
    refs = {t.id: t.instruction for t in bench}
    assert near_duplicates(cands, refs, method="minhash") == near_duplicates(cands, refs, method="exact")


def test_near_duplicates_threshold_and_determinism():
    base = (
        "please move my dental appointment on friday the third of july to the following monday morning at nine "
        "and send the new confirmation to my work email address"
    )
    refs = {"r1": base, "r2": "what is the balance of my savings account right now please"}
    cands = {"c1": base.replace("friday", "thursday"), "c2": "tell me a joke about databases and tables", "c3": base}
    hits = near_duplicates(cands, refs, threshold=0.7)
    assert set(hits) == {"c1", "c3"} and hits["c3"] == [("r1", 1.0)]
    exact = len(shingles(cands["c1"]) & shingles(base)) / len(shingles(cands["c1"]) | shingles(base))
    assert hits["c1"] == [("r1", round(exact, 6))]
    assert near_duplicates(cands, refs, threshold=0.7) == hits
    assert near_duplicates(cands, refs, threshold=0.7, method="minhash") == near_duplicates(cands, refs, threshold=0.7, method="exact") == hits
    assert "c1" not in near_duplicates(cands, refs, threshold=min(1.0, exact + 0.01))


def test_lsh_banding_misses_pairs_at_the_threshold_rarely():
    for t in (0.5, 0.7, 0.9):
        b, r = lsh_params(t, 128)
        assert b * r <= 128 and (1 - t**r) ** b <= 1e-6


def test_unresolved_tasks_are_id_checked_and_optionally_excluded():
    ex = ExcludeSet()
    ex.add(ids=["ext-bench-1"], source="list")
    recs = probe_records({"ext-bench-1": (4, 2), "ext-pool-1": (4, 2)})
    rows = {r["task_id"]: r for r in select(recs, exclude=ex).rows}
    assert rows["ext-bench-1"]["decision"] == "excluded" and "ext-bench-1" in rows["ext-bench-1"]["reason"]
    assert rows["ext-pool-1"]["decision"] in ("train", "val") and "not content-checked" in rows["ext-pool-1"]["reason"]
    strict = {r["task_id"]: r for r in select(recs, exclude=ex, params=SelectionParams(require_content_check=True)).rows}
    assert strict["ext-pool-1"]["decision"] == "excluded" and "content-checked" in strict["ext-pool-1"]["reason"]


# -- split --------------------------------------------------------------------------------------


def _templated(n_templates=10, per=5):
    """Tasks in templates, with success counts spread over the bands."""
    tasks, counts = {}, {}
    pattern = [(8, 1), (8, 2), (8, 4), (8, 6), (8, 7)]
    for t in range(n_templates):
        for i in range(per):
            tid = f"tpl{t:02d}-{i:03d}"
            tasks[tid] = make_task(tid, f"templated request number {i} of kind {t}", template=f"tpl{t:02d}", family=f"fam{t % 3}")
            counts[tid] = pattern[(t + i // 3) % len(pattern)]
    return tasks, counts


def test_same_inputs_same_seed_byte_identical_and_other_seed_changes_split(tmp_path):
    tasks, counts = _templated()
    path = write_jsonl(tmp_path / "probes.jsonl", probe_records(counts, {"tpl00-000": 1}))
    outs = []
    for i, seed in enumerate([7, 7, 8]):
        res = select(read_records(path), tasks=tasks, params=SelectionParams(seed=seed))
        res.write(tmp_path / f"out{i}")
        outs.append(res)
    names = ("train.yaml", "val.yaml", "selection.jsonl", "manifest.json")
    for name in names:
        assert (tmp_path / "out0" / name).read_bytes() == (tmp_path / "out1" / name).read_bytes(), name
    assert outs[0].val and outs[0].train
    assert (outs[0].train, outs[0].val) != (outs[2].train, outs[2].val)
    assert {r["task_id"]: r["band"] for r in outs[0].rows} == {r["task_id"]: r["band"] for r in outs[2].rows}
    assert {r["task_id"]: r["signal"] for r in outs[0].rows} == {r["task_id"]: r["signal"] for r in outs[2].rows}
    manifest = json.loads((tmp_path / "out0" / "manifest.json").read_text())
    for name in ("train.yaml", "val.yaml", "selection.jsonl"):
        assert manifest["outputs"][name] == hashlib.sha256((tmp_path / "out0" / name).read_bytes()).hexdigest()
    assert manifest["parameters"]["seed"] == 7 and "time" not in json.dumps(manifest)


@pytest.mark.parametrize("group_by, attr", [("template", "template"), ("family", "family")])
def test_grouping_keeps_each_group_on_one_side(group_by, attr):
    tasks, counts = _templated()
    for seed in range(6):
        res = select(probe_records(counts), tasks=tasks, params=SelectionParams(group_by=group_by, seed=seed, test_fraction=0.3))
        sides: dict[str, set[str]] = {}
        for r in res.rows:
            if r["decision"] in ("train", "val"):
                sides.setdefault(getattr(tasks[r["task_id"]], attr), set()).add(r["decision"])
        assert all(len(s) == 1 for s in sides.values()), sides
        assert res.val and res.train


def test_group_by_none_holds_out_instances_stratified_by_band():
    tasks, counts = _templated()
    straddled = False
    for seed in range(6):
        res = select(probe_records(counts), tasks=tasks, params=SelectionParams(group_by="none", seed=seed))
        kept = [r for r in res.rows if r["decision"] in ("train", "val")]
        for band in {r["band"] for r in kept}:
            in_band = [r for r in kept if r["band"] == band]
            assert abs(sum(r["decision"] == "val" for r in in_band) - 0.2 * len(in_band)) <= 0.5
        by_t: dict[str, set[str]] = {}
        for r in kept:
            by_t.setdefault(tasks[r["task_id"]].template, set()).add(r["decision"])
        straddled |= any(len(s) == 2 for s in by_t.values())
    assert straddled


def test_split_edge_fractions():
    items = [SplitItem(f"t{i}", "medium", f"g{i}") for i in range(10)]
    assert set(split(items, 0.0, 1).values()) == {"train"}
    assert set(split(items, 1.0, 1).values()) == {"val"}
    assert sum(v == "val" for v in split(items, 0.3, 1).values()) == 3
    with pytest.raises(ValueError):
        split(items, 1.5, 1)


# -- end to end ---------------------------------------------------------------------------------


def _app():
    from groundstate.cli import app

    return app


def test_end_to_end_probe_then_select_library_and_cli(tmp_path):
    pairs = select_tasks(SHOP)
    probes = tmp_path / "probes.jsonl"
    s = run(pairs, RunConfig(agent="scripted:noisy:0.3", k=4, seed=0), SqliteBackend(), probes)
    assert s.ran == len(pairs) * 4 and s.system_errors == 0
    has_bench = bool(iter_tasks(split="bench"))
    exclude = ["bench"] if has_bench else []

    res = select_files(probes, exclude=exclude, domain_paths=[SHOP], params=SelectionParams(test_fraction=0.34))
    lib_paths = res.write(tmp_path / "lib")
    rows = {r["task_id"]: r for r in res.rows}
    assert set(rows) == {t.id for t, _ in pairs}
    for tid, r in rows.items():
        n = sum(1 for x in read_records(probes) if x.task_id == tid and not x.system_error)
        c = sum(1 for x in read_records(probes) if x.task_id == tid and not x.system_error and x.reward == 1)
        assert (r["clean_runs"], r["successes"]) == (n, c) == (4, c)
        assert r["band"] == band_of(n, c) and r["resolved"] and r["content_checked"]
        assert r["decision"] in ("train", "val", "dropped_band")
        assert r["exclusions"] == []  # the fixture world shares nothing with the benchmark
    train = [x for x in (tmp_path / "lib" / "train.yaml").read_text().splitlines() if x.startswith("- ")]
    assert [x[2:] for x in train] == res.train
    if res.train:  # usable as --tasks (with the fixture world in the task universe)
        assert [t.id for t, _ in select_tasks(str(lib_paths["train.yaml"]), [SHOP])] == res.train

    runner = CliRunner()
    app = _app()
    args = ["select", str(probes), "--out", str(tmp_path / "cli"), "--domain", SHOP, "--test-fraction", "0.34"]
    args += [x for sel in exclude for x in ("--exclude", sel)]
    r = runner.invoke(app, args + ["--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["tasks"] == len(pairs) and summary["train"] == len(res.train) and summary["val"] == len(res.val)
    assert "train.yaml written to" in r.stderr
    for name in ("train.yaml", "val.yaml", "selection.jsonl", "manifest.json"):
        assert (tmp_path / "cli" / name).read_bytes() == lib_paths[name].read_bytes(), name

    r = runner.invoke(app, args[:3] + [str(tmp_path / "cli2")] + args[4:] + ["--seed", "1", "--group-by", "none"])
    assert r.exit_code == 0, r.output
    assert "difficulty of 3 probed tasks" in r.stdout and "written to" in r.stderr
    assert {json.loads(x)["task_id"]: json.loads(x)["band"] for x in (tmp_path / "cli2" / "selection.jsonl").read_text().splitlines()} == {
        tid: row["band"] for tid, row in rows.items()
    }

    # the probe command: the same attempts as the runner, and resumable
    cli_probes = tmp_path / "cli_probes.jsonl"
    r = runner.invoke(app, ["probe", "--agent", "scripted:noisy:0.3", "--tasks", SHOP, "--k", "4", "--out", str(cli_probes)])
    assert r.exit_code == 0, r.output
    assert f"probes written to {cli_probes}" in r.stderr.replace("\n", "")

    def key(recs):
        return {(x.task_id, x.attempt): x.reward for x in recs}

    assert key(read_records(cli_probes)) == key(read_records(probes))
    r = runner.invoke(app, ["probe", "--agent", "scripted:noisy:0.3", "--tasks", SHOP, "--k", "4", "--out", str(cli_probes)])
    assert r.exit_code == 0 and "0 attempts run (12 already done)" in r.stdout.replace("\n", " ")

    # an id list and a reference run (here: the gold policy, which solves everything)
    (tmp_path / "never.yaml").write_text("- shop-refuse\n")
    gold = tmp_path / "gold.jsonl"
    run(pairs, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), gold)
    r = runner.invoke(
        app,
        [
            "select",
            str(probes),
            "--out",
            str(tmp_path / "cli3"),
            "--domain",
            SHOP,
            "--exclude-list",
            str(tmp_path / "never.yaml"),
            "--reference",
            str(gold),
            "--reference-min-runs",
            "2",
            "--bands",
            ",".join(BANDS),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    rows3 = {json.loads(x)["task_id"]: json.loads(x) for x in (tmp_path / "cli3" / "selection.jsonl").read_text().splitlines()}
    assert rows3["shop-refuse"]["decision"] == "excluded" and "shop-refuse" in rows3["shop-refuse"]["reason"]
    assert all(
        rows3[t]["decision"] in ("train", "val") and rows3[t]["reference"] == {"clean_runs": 2, "successes": 2, "awaits_judge": False}
        for t in ("shop-cancel", "shop-multi")
    )
    assert json.loads(r.stdout)["decisions"]["excluded"] == 1

    bad = runner.invoke(app, ["select", str(probes), "--out", str(tmp_path / "bad"), "--band-edges", "0.5,0.4,0.6,0.9"])
    assert bad.exit_code == 2 and "band edges" in bad.stderr


def test_probe_takes_the_runs_attempt_limits(tmp_path):
    """Probes run under the same limits as the evaluation they stand in for (`run`'s --max-result-chars etc.)."""
    path = tmp_path / "probes.jsonl"
    r = CliRunner().invoke(
        _app(),
        ["probe", "--agent", "scripted:gold", "--tasks", SHOP, "--k", "1", "--out", str(path), "--max-result-chars", "5", "--attempt-timeout", "120"],
    )
    assert r.exit_code == 0, r.output
    records = read_records(path)
    assert records and all(x.reward == 1 for x in records)  # the state is graded, whatever the agent was shown
    calls = [c for x in records for c in x.trajectory.tool_calls]
    assert any(c.truncated for c in calls)
    shown = [m["content"] for x in records for m in x.trajectory.messages if m["role"] == "tool"]
    assert any("[truncated: showing 5 of" in s for s in shown)
