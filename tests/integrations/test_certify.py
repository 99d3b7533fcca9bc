"""`groundstate tasks certify`: a certificate per task on SQLite and PostgreSQL, void when the task or domain changes,
and a task with a defect is named and not certified."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.certify import certify_task
from groundstate.cli import app
from groundstate.domain import Domain, iter_tasks
from groundstate.state.postgres import default_dsn
from groundstate.state.sqlite import SqliteBackend

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"
KEYS = ("tasks", "alternatives_tried", "alternatives_accepted", "hacks_tried", "hacks_passed", "certified")


def certify_cli(*args: str) -> tuple[int, dict]:
    r = CliRunner().invoke(app, ["tasks", "certify", "--json", *args])
    start = r.stdout.index("{")
    return r.exit_code, json.loads(r.stdout[start:])


def test_shop_is_certified_on_both_backends_but_for_its_seeded_flaw(pg_backend, tmp_path):
    code, totals = certify_cli("--domain", str(SHOP), "--pg-dsn", default_dsn(), "--out", str(tmp_path / "certs.json"))
    assert set(KEYS) <= set(totals) and totals["tasks"] == 3 and totals["sqlite_equals_postgres"] == 3
    assert totals["backends"] == ["postgres", "sqlite"] and totals["hacks_passed"] == 0
    assert totals["alternatives_accepted"] + totals["alternatives_invalid"] == totals["alternatives_tried"] > 0
    # shop-multi's set_tier is invisible to its checks (the flaw lint's own tests rely on): named, not certified, exit 1
    assert code == 1 and totals["certified"] == 2
    (bad,) = totals["not_certified"]
    assert bad["task_id"] == "shop-multi" and "drop gold[1] set_tier" in [m["mutant"] for m in bad["survivors"]]
    per_task = {c["task_id"]: c for c in json.loads((tmp_path / "certs.json").read_text())["per_task"]}
    multi = per_task["shop-multi"]
    assert multi["gold_pass"] and multi["noop_fail"] and multi["mutants_killed"] < multi["mutants_counted"]
    assert multi["alternatives_tried"] >= 4 and multi["alternatives_accepted"] == multi["alternatives_tried"] and multi["hacks_tried"] >= 3
    refuse = per_task["shop-refuse"]
    assert refuse["certified"] and refuse["backends"] == ["sqlite", "postgres"] and refuse["sqlite_equals_postgres"] is True
    assert len(refuse["task_hash"]) == len(refuse["domain_hash"]) == 16


def test_a_task_whose_check_punishes_a_valid_alternative_is_not_certified(tmp_path):
    shop = tmp_path / "shop"
    shutil.copytree(SHOP, shop)
    tasks = shop / "tasks" / "basic.yaml"
    old = '      - {tool: add_note, args: {customer_id: 2, body: "Refused cancellation: order 2 already shipped."}}\n'
    check = (
        '    checks:\n      - {sql: "SELECT body FROM notes WHERE customer_id = 2", expect: [["Refused cancellation: order 2 already shipped."]]}\n'
    )
    tasks.write_text(tasks.read_text().replace(old, old + check, 1))
    code, totals = certify_cli("--domain", str(shop), "--backend", "sqlite")
    assert code == 1 and totals["certified"] == 1 and totals["tasks"] == 3
    bad = {b["task_id"]: b for b in totals["not_certified"]}["shop-refuse"]
    assert bad["false_negatives"][0]["alternative"] == "call 1 (add_note): body reworded" and not bad["survivors"]


def test_a_certificate_is_void_once_its_task_or_its_domain_changes(tmp_path):
    shop = tmp_path / "shop"
    shutil.copytree(SHOP, shop)
    domain = Domain(shop)
    task = domain.task("shop-cancel")
    cert = certify_task(task, domain, [SqliteBackend()], domain.tasks)
    assert cert.certified and cert.sqlite_equals_postgres is None and cert.valid_for(task, domain)
    assert not cert.valid_for(task.model_copy(update={"instruction": "Please cancel order 1 today."}), domain)
    (shop / "tools.py").write_text((shop / "tools.py").read_text() + "\n# a change\n")
    assert not cert.valid_for(task, Domain(shop))


@pytest.mark.slow
def test_every_bundled_task_is_certified(tmp_path):
    """The must-show run on SQLite (on both backends it takes ~7 minutes: benchmarks/RESULTS.md)."""
    code, totals = certify_cli("--backend", "sqlite", "--out", str(tmp_path / "certs.json"))
    assert totals["tasks"] == len(iter_tasks()) and totals["not_certified"] == []
    assert code == 0 and totals["certified"] == totals["tasks"] and totals["hacks_passed"] == 0
    assert totals["alternatives_accepted"] + totals["alternatives_invalid"] == totals["alternatives_tried"]
