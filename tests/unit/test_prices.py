"""Cost where people look: records of OpenAI-compatible endpoints priced from the bundled table, dated names matched
without false matches, an unpriced model named (with the fix) in metrics and report, and `report --prices`."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.records import AttemptRecord, read_records
from groundstate.stats.cost import cost_note, load_prices, price_key, record_cost
from groundstate.stats.metrics import compute

SHOP = Path(__file__).resolve().parents[1] / "fixtures" / "shop"
TOKENS = (1000, 100)  # prompt, completion tokens per agent turn (the stub's usage)


def record(agent: str | None, model: str | None = None, tokens=(1_000_000, 0, 1_000_000)) -> AttemptRecord:
    return AttemptRecord.model_validate(
        {
            "task_id": "t",
            "attempt": 0,
            "reward": 1,
            "agent": agent,
            "model": model,
            "usage": {"input_tokens": tokens[0], "cached_input_tokens": tokens[1], "output_tokens": tokens[2]},
        }
    )


@pytest.fixture(scope="module")
def endpoint_runs(tmp_path_factory):
    """Real runs through an OpenAI-compatible stub: one of a model the bundled table prices, one of a self-hosted model."""
    from openai_stub import OpenAIStub, text

    d = tmp_path_factory.mktemp("priced")
    runner = CliRunner()
    with OpenAIStub(default=text("Done.", usage=TOKENS)) as stub:
        for name, model in (("hosted", "gpt-4.1-mini"), ("local", "qwen3-8b")):
            args = ["run", "--agent", f"openai:{model}@{stub.base_url}", "--tasks", str(SHOP), "--k", "2", "--out", str(d / f"{name}.jsonl")]
            r = runner.invoke(app, args)
            assert r.exit_code == 0, r.output
    return d


def test_endpoint_records_are_priced_from_the_bundled_table(endpoint_runs):
    records = read_records(endpoint_runs / "hosted.jsonl")
    assert records and all(r.agent.startswith("openai:gpt-4.1-mini@http://") for r in records)
    prices = load_prices()
    m = compute(records, prices=prices, bootstrap_reps=0)
    p = prices["gpt-4.1-mini"]
    expected = sum((r.usage.input_tokens * p["input"] + r.usage.output_tokens * p["output"]) / 1e6 for r in records)
    assert m["cost_usd"] == pytest.approx(expected) and expected > 0
    assert m["unpriced_models"] == {} and m["cost_note"] is None
    # a record of another tool names only its agent spec: the spec's MODEL is what is priced
    bare = [r.model_copy(update={"model": None}) for r in records]
    assert compute(bare, prices=prices, bootstrap_reps=0)["cost_usd"] == pytest.approx(expected)


def test_an_unpriced_model_is_named_with_the_fix(endpoint_runs, tmp_path):
    runner = CliRunner()
    local = endpoint_runs / "local.jsonl"
    m = json.loads(runner.invoke(app, ["metrics", str(local), "--json"]).stdout)
    assert m["cost_usd"] is None and m["unpriced_models"] == {"qwen3-8b": 6}
    assert "qwen3-8b" in m["cost_note"] and "--prices FILE" in m["cost_note"]
    human = runner.invoke(app, ["metrics", str(local)]).stdout
    assert "no price for qwen3-8b" in human and "--prices FILE" in human
    page = tmp_path / "report.html"
    assert runner.invoke(app, ["report", str(local), "-o", str(page)]).exit_code == 0
    html = page.read_text()
    assert "no price for qwen3-8b" in html and "--prices FILE" in html


def test_report_prices_shows_a_cost(endpoint_runs, tmp_path):
    runner = CliRunner()
    local = endpoint_runs / "local.jsonl"
    table = tmp_path / "prices.yaml"
    table.write_text("qwen3-8b: {input: 2.0, output: 10.0}\n")
    page = tmp_path / "report.html"
    r = runner.invoke(app, ["report", str(local), "--prices", str(table), "-o", str(page)])
    assert r.exit_code == 0, r.output
    records = read_records(local)
    expected = sum(r.usage.input_tokens * 2.0 + r.usage.output_tokens * 10.0 for r in records) / 1e6
    html = page.read_text()
    assert f"<td>cost (USD)</td><td>{expected:.4f}</td>" in html and expected > 0
    assert "no price for" not in html
    # and the baseline comparison of the report is costed with the same table
    r = runner.invoke(app, ["report", str(local), "--baseline", str(local), "--prices", str(table), "-o", str(page)])
    assert r.exit_code == 0, r.output
    assert "id='agreement'>Run-to-run agreement: 6 of 6 attempts (100.0%)" in page.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("qwen3-8b: {inptu: 1}\n")
    r = runner.invoke(app, ["report", str(local), "--prices", str(bad), "-o", str(page)])
    assert r.exit_code == 1 and "inptu" in r.output


@pytest.mark.parametrize(
    ("agent", "model", "key"),
    [
        ("openai:gpt-4.1-mini@http://127.0.0.1:8000/v1", None, "gpt-4.1-mini"),
        ("openai:gpt-4.1-mini-2025-04-14", "gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"),
        ("openai:gpt-4o-mini-2024-07-18", None, "gpt-4o-mini"),  # the mini, not gpt-4o
        ("openai:gpt-4o-2024-08-06@https://api.example.com/v1", None, "gpt-4o"),
        ("openai:openai/gpt-4o-mini@https://router.example/v1", None, "gpt-4o-mini"),
        ("openai:GPT-4.1", None, "gpt-4.1"),
        ("openai:gpt-4.1-mini", None, "gpt-4.1-mini"),  # never the shorter gpt-4.1
        ("openai:o3-mini", None, "o3-mini"),
        ("openai:ft:gpt-4o-mini:acme::abc123", None, None),  # a fine-tune has prices of its own
        ("openai:gpt-4.1-mini-high", None, None),
        ("openai:gpt-4.1-turbo", None, None),
        ("openai:qwen3-8b@http://localhost:8000/v1", None, None),
        ("hf:runs/base", "runs/base", None),
        (None, None, None),
    ],
)
def test_price_lookup_matches_names_without_false_matches(agent, model, key):
    prices = load_prices()
    assert price_key(record(agent, model), prices) == key


def test_own_prices_win_over_the_bundled_and_match_specs_and_paths(tmp_path):
    table = tmp_path / "prices.yaml"
    table.write_text(
        "gpt-4.1-mini-2025-04-14: {input: 9, output: 9}\n"
        "runs/base: {input: 1, output: 1}\n"
        "'openai:qwen3-8b@http://gpu:8000/v1': {input: 3, output: 3}\n"
    )
    prices = load_prices(table)
    assert price_key(record("openai:gpt-4.1-mini-2025-04-14"), prices) == "gpt-4.1-mini-2025-04-14"  # the exact entry
    assert record_cost(record("hf:runs/base", "runs/base"), prices) == pytest.approx(2.0)
    assert record_cost(record("openai:qwen3-8b@http://gpu:8000/v1", "qwen3-8b"), prices) == pytest.approx(6.0)
    assert record_cost(record("openai:qwen3-8b@http://other:8000/v1", "qwen3-8b"), prices) is None


def test_scripted_agents_cost_nothing_and_no_note():
    m = compute([record("scripted:gold", "scripted:gold")], prices=load_prices(), bootstrap_reps=0)
    assert m["cost_usd"] == 0.0 and m["cost_note"] is None
    assert cost_note({}) is None
