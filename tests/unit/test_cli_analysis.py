"""metrics, compare and report on real scripted runs of the benchmark (noisy 0.3 vs 0.1, k = 8)."""

import json

import pytest
from typer.testing import CliRunner

from groundstate.cli import app


@pytest.fixture(scope="module")
def bench_runs(tmp_path_factory):
    from openai_stub import OpenAIStub, fact_judge

    d = tmp_path_factory.mktemp("bench")
    runner = CliRunner()
    with OpenAIStub(responder=fact_judge) as judge:  # the benchmark's rubric tasks judged, deterministically
        for p in ("0.3", "0.1"):
            args = ["run", "--agent", f"scripted:noisy:{p}", "--tasks", "bench", "--k", "8", "--judge", f"openai:facts@{judge.base_url}"]
            r = runner.invoke(app, [*args, "--out", str(d / f"n{p}.jsonl")])
            assert r.exit_code == 0, r.output
        assert "results written to" in r.output
    return d


def test_metrics_compare_report_on_noisy_benchmark_runs(bench_runs):
    runner = CliRunner()
    m3 = json.loads(runner.invoke(app, ["metrics", str(bench_runs / "n0.3.jsonl"), "--json"]).stdout)
    m1 = json.loads(runner.invoke(app, ["metrics", str(bench_runs / "n0.1.jsonl"), "--json"]).stdout)
    assert m3["tasks"] == m1["tasks"] >= 180 and m3["k"] == 8 and m3["attempts"] == 8 * m3["tasks"]
    assert m1["pass_at_1"] > m3["pass_at_1"] and m1["observed_k_of_k"] > m3["observed_k_of_k"]
    assert set(m3["by_domain"]) == {"travel", "insurance", "hr"}
    c = json.loads(runner.invoke(app, ["compare", str(bench_runs / "n0.3.jsonl"), str(bench_runs / "n0.1.jsonl"), "--json"]).stdout)
    assert c["shared_tasks"] == m3["tasks"] and c["metrics"]["pass_at_1"]["lift"] > 0 and c["metrics"]["pass_at_1"]["p_lift_positive"] > 0.95
    out = bench_runs / "report.html"
    r = runner.invoke(app, ["report", str(bench_runs / "n0.1.jsonl"), "--baseline", str(bench_runs / "n0.3.jsonl"), "-o", str(out)])
    assert r.exit_code == 0 and out.stat().st_size > 10_000 and "success-grid" in out.read_text()
    human = runner.invoke(app, ["metrics", str(bench_runs / "n0.3.jsonl")]).stdout
    assert "pass^8 (unbiased)" in human and "Observed 8/8" in human
