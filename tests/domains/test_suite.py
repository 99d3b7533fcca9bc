"""The bundled suite: sizes, splits, out-of-distribution separation, reproducible generation, and the noisy spread."""

import json

import pytest
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.worlds.domain import bundled_domains, iter_tasks, load_domain, render_generated_tasks

TRAINING = ["retail", "helpdesk", "banking"]
BENCHMARK = ["travel", "insurance", "hr"]


def test_every_bundled_domain_meets_the_suite_card():
    for name in TRAINING + BENCHMARK:
        d = load_domain(name)
        assert len(d.tables) >= 5, name
        assert sum(len(rows) for rows in d.seed_rows().values()) >= 2000, name
        assert 8 <= len(d.tools.names()) <= 15, name
        assert any(s.write for s in d.tools.specs.values()) and any(not s.write for s in d.tools.specs.values())
        families = {t.family for t in d.tasks}
        assert families >= {"single_write", "multi_step", "lookup_then_act", "policy_refusal", "needs_user_info", "collateral_trap"}, name
        lengths = [len(t.gold) for t in d.tasks]
        assert min(lengths) <= 2 and max(lengths) >= 6, f"{name}: difficulty must vary (1 to 8 calls)"
        assert all(t.template and t.split == d.config.split for t in d.tasks)


def test_pool_and_benchmark_sizes_and_separation():
    pool = [t for t, d in iter_tasks(TRAINING)]
    bench = [t for t, d in iter_tasks(BENCHMARK)]
    assert len(pool) >= 450 and {t.split for t in pool} == {"pool"}
    assert len(bench) >= 180 and {t.split for t in bench} == {"bench"}
    assert all(len([t for t in bench if t.domain == n]) >= 60 for n in BENCHMARK)
    assert all(len([t for t in pool if t.domain == n]) >= 150 for n in TRAINING)


def test_no_table_or_tool_name_is_shared_between_any_two_domains():
    seen_tables: dict[str, str] = {}
    seen_tools: dict[str, str] = {}
    for name in bundled_domains():
        d = load_domain(name)
        for t in d.tables:
            assert t not in seen_tables, f"table {t} is in both {seen_tables.get(t)} and {name}"
            seen_tables[t] = name
        for tool in d.tools.names():
            assert tool not in seen_tools, f"tool {tool} is in both {seen_tools.get(tool)} and {name}"
            seen_tools[tool] = name


@pytest.mark.parametrize("name", [n for n in bundled_domains() if (load_domain(n).path / "taskgen.py").exists()])
def test_regeneration_reproduces_the_checked_in_files_exactly(name):
    path, text = render_generated_tasks(load_domain(name))
    assert text == path.read_text(encoding="utf-8"), f"{path} is stale: groundstate tasks generate --domain {name}"


def test_tasks_list_json():
    result = CliRunner().invoke(app, ["tasks", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {"id", "domain", "split", "family"} <= set(rows[0])
    assert sum(r["split"] == "pool" and r["domain"] in TRAINING for r in rows) >= 450
    assert sum(r["split"] == "bench" for r in rows) >= 180
    only_bench = json.loads(CliRunner().invoke(app, ["tasks", "list", "--json", "--split", "bench"]).stdout)
    assert {r["domain"] for r in only_bench} == set(BENCHMARK)


def test_noisy_agent_spreads_benchmark_pass_rates(tmp_path):
    from groundstate.pipeline.runner import RunConfig, run
    from groundstate.records import read_records
    from groundstate.state.sqlite import SqliteBackend
    from groundstate.stats.basis import task_counts
    from groundstate.worlds.selectors import select_tasks

    run(select_tasks("bench"), RunConfig(agent="scripted:noisy:0.3", k=4), SqliteBackend(), tmp_path / "r.jsonl")
    rates = [t.c / t.n for t in task_counts(read_records(tmp_path / "r.jsonl")).values() if t.n]  # a rubric task unjudged each time has none
    assert len(set(rates)) >= 3 and sum(0 < r < 1 for r in rates) >= len(rates) // 4  # a spread, not all at 0 or 1
