"""The rules every bundled domain keeps, written once and run for each (docs/DOMAINS.md states them).

Each domain's own tests (its tools' behaviour, its seed's invariants, its task counts) are in
tests/domains/<name>/test_<name>.py; the rules about the whole suite (sizes, splits, no shared names
between any two domains) are in tests/domains/test_suite.py.
"""

from __future__ import annotations

import copy
import random
import re
import sqlite3

import pytest
import yaml
from domain_testing import FAMILIES, SUITE

from groundstate.grading.grader import grade, replay
from groundstate.tools import Toolset
from groundstate.worlds.domain import DOMAINS_DIR, bundled_domains, render_generated_tasks

NON_PORTABLE = re.compile(r"\b(AUTOINCREMENT|SERIAL|BOOLEAN|DATETIME|TIMESTAMP|INSERT\s+OR)\b|\bNOW\s*\(", re.IGNORECASE)


@pytest.fixture(scope="module", params=bundled_domains())
def domain_name(request) -> str:
    return request.param


# -- schema and seed ------------------------------------------------------------------------------------


def test_schema_is_portable_keyed_and_in_fk_order(domain):
    conn = sqlite3.connect(":memory:")
    conn.executescript(domain.schema_sql)
    created: set[str] = set()
    for table in domain.tables:
        assert domain.primary_keys[table] == ["id"], f"{table}: the generators and the lint's mutants key rows by `id`"
        for _, col, typ, *_ in conn.execute(f"PRAGMA table_info({table})"):
            assert typ in ("INTEGER", "TEXT", "REAL"), f"{table}.{col} has non-portable type {typ}"
        for ref in conn.execute(f"PRAGMA foreign_key_list({table})"):
            assert ref[2] in created or ref[2] == table, f"{table} references {ref[2]}, which is created after it"
        created.add(table)
    assert not NON_PORTABLE.search(domain.schema_sql), NON_PORTABLE.search(domain.schema_sql).group(0)


def test_names_are_the_domains_own(domain):
    """No other domain folder creates one of its tables or defines a function named like one of its tools
    (read from the files, so a sibling domain that does not load yet is still compared)."""
    for other in sorted(p for p in DOMAINS_DIR.iterdir() if p != domain.path and (p / "schema.sql").exists()):
        tables = set(re.findall(r"CREATE TABLE\s+(\w+)", (other / "schema.sql").read_text(), re.IGNORECASE))
        functions = set(re.findall(r"^def\s+(\w+)", (other / "tools.py").read_text(), re.MULTILINE)) if (other / "tools.py").exists() else set()
        assert not tables & set(domain.tables), (other.name, tables & set(domain.tables))
        assert not functions & set(domain.tools.names()), (other.name, functions & set(domain.tools.names()))


def test_seed_is_deterministic_complete_and_scales(domain, world, domain_module):
    seed = domain_module("seed")
    assert seed.generate(random.Random(domain.config.seed)) == world, "the same rng must give the same rows"
    assert sum(len(rows) for rows in world.values()) >= 2000
    assert list(world) == domain.tables, "seed tables must come in the schema's foreign-key order"
    for table, rows in world.items():
        if domain.name in SUITE:
            assert rows, f"{table} has no seed rows"
        for row in rows:
            assert list(row) == domain.columns[table], f"{table} row {row.get('id')} lacks or reorders columns"
    size = {s: sum(len(r) for r in seed.generate(random.Random(1), scale=s).values()) for s in (0.25, 1.0, 2.0)}
    assert size[0.25] < size[1.0] < size[2.0], size


def test_seeded_world_keeps_its_foreign_keys(sb):
    assert sb.connection.raw.execute("PRAGMA foreign_key_check").fetchall() == []


# -- tools ----------------------------------------------------------------------------------------------


def test_tools_are_described_and_documented(domain, domain_module):
    tools = Toolset.from_module(domain_module("tools"))
    assert tools.names() == domain.tools.names()
    assert any(tools[n].write for n in tools.names()) and any(not tools[n].write for n in tools.names())
    for name in tools.names():
        assert tools[name].description, name
        for param, prop in tools[name].json_schema().get("properties", {}).items():
            assert prop.get("description"), f"{name}.{param} is not documented in the docstring"


# -- tasks ----------------------------------------------------------------------------------------------


def test_tasks_follow_the_rules(domain):
    tasks = domain.tasks
    writes = {n for n in domain.tools.names() if domain.tools[n].write}
    assert len({t.fingerprint() for t in tasks}) == len(tasks), "two tasks have the same patch and gold"
    assert len({t.instruction for t in tasks}) == len(tasks), "two tasks have the same instruction"
    for t in tasks:
        assert t.template and t.id.startswith(f"{domain.name}-{t.template.replace('_', '-')}-"), t.id
        assert t.split == domain.config.split, t.id
        assert any(c.tool in writes for c in t.gold), f"{t.id}: no write, so doing nothing would pass"
        if t.family == "needs_user_info":
            assert len(t.user.script) >= 2, f"{t.id}: the script must supply the missing fact"
        if t.family == "policy_refusal":
            assert t.gold[-1].tool in writes, f"{t.id}: a refusal must leave a record"
    if domain.name not in SUITE:
        return
    assert {t.family for t in tasks} == set(FAMILIES)
    assert len({t.template for t in tasks}) >= 8
    for t in tasks:
        assert t.user.persona and t.user.context and t.user.script, f"{t.id}: the simulated user needs a persona, facts and a script"
        assert t.tags[-2:] == [f"calls:{len(t.gold)}", f"writes:{sum(c.tool in writes for c in t.gold)}"], t.id
        if t.family == "multi_step":
            assert 3 <= len(t.gold) <= 8, t.id


def test_every_gold_passes_and_doing_nothing_fails(domain, engine):
    for task in domain.tasks:
        template = engine.prepare(domain, task.patch)
        with engine.open(template) as sandbox:
            assert sandbox.connection.raw.execute("PRAGMA foreign_key_check").fetchall() == [], f"{task.id}: patch breaks a foreign key"
            results = replay(sandbox, [c.model_dump() for c in task.gold])
            for i, (ok, content) in enumerate(results):
                assert ok, f"{task.id}: gold[{i}] {task.gold[i].tool} failed: {content}"
            verdict = grade(task, sandbox)
            assert verdict.state_reward == 1, f"{task.id}: {verdict.reasons}"
            assert verdict.reward == (None if task.rubrics else 1) and verdict.unjudged == bool(task.rubrics), task.id
        with engine.open(template) as noop:
            assert grade(task, noop).reward == 0, f"{task.id}: doing nothing passes"


def test_generator_reproduces_the_task_file_and_leaves_the_world_alone(domain, world, domain_module):
    path, text = render_generated_tasks(domain)
    assert path == domain.path / "tasks" / f"{domain.name}.yaml"
    assert text == path.read_text(encoding="utf-8"), f"{path} is stale: run  groundstate tasks generate --domain {domain.name}"
    before = copy.deepcopy(world)
    again = domain_module("taskgen").generate(world, domain.config.today, random.Random(domain.config.seed))
    assert world == before, "the generator modified the seed world"
    assert again == yaml.safe_load(text)["tasks"], "a second run in the same process gives other tasks"


# -- backends -------------------------------------------------------------------------------------------


@pytest.mark.postgres
def test_backends_agree_on_golden_changes(domain, backend):
    """One task per family: the golden change set is the same on SQLite and PostgreSQL."""
    from groundstate.grading.grader import grader_for
    from groundstate.state.sqlite import SqliteBackend

    reference = SqliteBackend()
    picked = {}
    for t in domain.tasks:
        picked.setdefault(t.family, t)
    for t in picked.values():
        got = grader_for(backend).golden(t, backend.prepare(domain, t.patch))
        want = grader_for(reference).golden(t, reference.prepare(domain, t.patch))
        assert got.to_json() == want.to_json(), t.id
