"""`groundstate tasks certify`: a certificate per task on SQLite and PostgreSQL, void when the task or domain changes,
and a task with a defect is named and not certified."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.audits.certify import certify_task, reusable
from groundstate.cli import app
from groundstate.state.postgres import default_dsn
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.domain import Domain, iter_tasks

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
    """The must-show run on SQLite, replies judged by a deterministic judge (on both backends it takes ~7 minutes:
    benchmarks/RESULTS.md)."""
    from openai_stub import OpenAIStub, fact_judge

    with OpenAIStub(responder=fact_judge) as stub:
        code, totals = certify_cli("--backend", "sqlite", "--judge", f"openai:facts@{stub.base_url}", "--out", str(tmp_path / "certs.json"))
    assert totals["tasks"] == len(iter_tasks()) and totals["not_certified"] == []
    assert code == 0 and totals["certified"] == totals["tasks"] and totals["hacks_passed"] == 0
    assert totals["alternatives_accepted"] + totals["alternatives_invalid"] == totals["alternatives_tried"]
    assert totals["replies_judged"] == totals["rubric_tasks"] == 48


RUBRIC_TEMPLATES = ",".join(
    f"{t}-0*"
    for t in (
        "retail-damaged-refund",
        "retail-price-adjustment",
        "retail-return-expired",
        "travel-delay-compensation",
        "insurance-settle-claim",
        "hr-book-annual-leave",
        "helpdesk-loaner",
        "banking-overdraft-fee-error",
    )
)


def test_about_one_bundled_task_in_twenty_must_also_tell_the_customer_something():
    pairs = iter_tasks()
    rubric = [t for t, _ in pairs if t.rubrics]
    assert 0.04 <= len(rubric) / len(pairs) <= 0.06 and len({t.domain for t in rubric}) == 6
    assert {t.split for t in rubric} == {"pool", "bench"} and not any(t.domain == "kiosk" for t in rubric)
    for t in rubric:  # the gold reply states every quoted fact of every rubric (the kit refuses a generator that does not)
        facts = [f for r in t.rubrics for f in r.split('"')[1::2]]
        assert facts and all(f in t.gold_reply for f in facts), t.id
    assert not any(t.gold_reply for t, _ in pairs if not t.rubrics)


def test_rubric_tasks_are_certified_with_a_judge_and_on_their_state_only_without(tmp_path):
    from openai_stub import OpenAIStub, fact_judge

    code, totals = certify_cli("--tasks", RUBRIC_TEMPLATES, "--backend", "sqlite")
    assert code == 0 and totals["rubric_tasks"] == totals["tasks"] == 48 and totals["replies_judged"] == 0
    with OpenAIStub(responder=fact_judge) as stub:
        code, totals = certify_cli("--tasks", RUBRIC_TEMPLATES, "--backend", "sqlite", "--judge", f"openai:facts@{stub.base_url}")
        asked = len(stub.requests)
    assert code == 0 and totals["replies_judged"] == totals["certified"] == 48, totals["not_certified"]
    assert asked == 1 + 2 * 48  # the probe, then per task the gold reply (yes) and the silent one (no); failed states never


def test_a_gold_reply_that_omits_the_fact_is_not_certified(tmp_path):
    from openai_stub import OpenAIStub, fact_judge

    from groundstate.grading.judge import Judge

    shop = tmp_path / "shop"
    shutil.copytree(SHOP, shop)
    tasks = shop / "tasks" / "basic.yaml"
    old = "    family: single_write\n"
    told = '    rubrics: [\'Does the reply say that order "1" is cancelled?\']\n    gold_reply: "Order 1 is cancelled."\n'
    tasks.write_text(tasks.read_text().replace(old, told + old, 1))
    with OpenAIStub(responder=fact_judge) as stub:
        judge = Judge(f"openai:facts@{stub.base_url}")
        domain = Domain(shop)
        cert = certify_task(domain.task("shop-cancel"), domain, [SqliteBackend()], domain.tasks, judge)
        assert cert.certified and cert.reply == "judged" and cert.judge == judge.spec
        other = Judge(f"openai:other@{stub.base_url}")  # --reuse keeps a judged reply only for the judge that judged it
        assert reusable(cert, domain.task("shop-cancel"), domain, ["sqlite"], judge)
        assert not reusable(cert, domain.task("shop-cancel"), domain, ["sqlite"], other)
        unjudged = certify_task(domain.task("shop-cancel"), domain, [SqliteBackend()], domain.tasks)
        assert unjudged.certified and unjudged.reply == "unjudged"
        tasks.write_text(tasks.read_text().replace('gold_reply: "Order 1 is cancelled."', 'gold_reply: "Done, it is cancelled."'))
        domain = Domain(shop)
        cert = certify_task(domain.task("shop-cancel"), domain, [SqliteBackend()], domain.tasks, judge)
    assert not cert.certified and cert.reply == "the gold reply got 0, must get 1"


def test_reuse_certifies_anew_exactly_the_tasks_whose_certificate_is_void(tmp_path):
    shop = tmp_path / "shop"
    shutil.copytree(SHOP, shop)
    first = tmp_path / "first.json"
    certify_cli("--domain", str(shop), "--backend", "sqlite", "--out", str(first))
    before = {c["task_id"]: c for c in json.loads(first.read_text())["per_task"]}
    tasks = shop / "tasks" / "basic.yaml"
    tasks.write_text(tasks.read_text().replace("Please cancel order 1.", "Please cancel my order 1.", 1))
    second = tmp_path / "second.json"
    _, totals = certify_cli("--domain", str(shop), "--backend", "sqlite", "--reuse", str(first), "--out", str(second))
    after = {c["task_id"]: c for c in json.loads(second.read_text())["per_task"]}
    # shop-cancel's wording changed and shop-multi was not certified (a failure is always tried again): one kept
    assert totals["reused"] == 1 and totals["tasks"] == 3 and totals["sqlite_equals_postgres"] is None
    assert after["shop-cancel"]["task_hash"] != before["shop-cancel"]["task_hash"]
    assert after["shop-refuse"] == before["shop-refuse"] and after["shop-multi"] == before["shop-multi"]
    _, totals = certify_cli("--domain", str(shop), "--backend", "sqlite", "--backend", "postgres", "--reuse", str(second))
    assert totals["reused"] == 0  # certified on SQLite alone: not a certificate of SQLite = PostgreSQL


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1, 2]", "is not a `tasks certify --out` file"),
        ('{"tasks": 1, "per_task": [{"task_id": "a"}]}', "is not a `tasks certify --out` file"),  # e.g. a lint report
        ('{"certified": 1, "per_task": [7]}', "field 'per_task[0]': must be a mapping"),
        ('{"certified": 1, "per_task": [{"task_id": "x"}]}', "field 'per_task[0].domain': Field required"),
        ('{"certified": 1, "per_task": [{"task_id": 5}]}', "field 'per_task[0]"),
    ],
)
def test_a_broken_reuse_file_is_one_line_naming_it(tmp_path, text, message):
    bad = tmp_path / "old.json"
    bad.write_text(text)
    r = CliRunner().invoke(app, ["tasks", "certify", "--domain", str(SHOP), "--backend", "sqlite", "--reuse", str(bad)])
    assert r.exit_code == 2 and str(bad) in r.output and message in r.output and "Traceback" not in r.output, r.output


def test_a_dead_judge_is_one_line_before_any_attempt(monkeypatch):
    monkeypatch.setenv("GROUNDSTATE_ENDPOINT_RETRIES", "0")
    r = CliRunner().invoke(
        app, ["tasks", "certify", "--tasks", "hr-book-annual-leave-001", "--backend", "sqlite", "--judge", "openai:x@http://127.0.0.1:9/v1"]
    )
    assert r.exit_code == 2 and "--judge openai:x@http://127.0.0.1:9/v1" in r.output and "certify (" not in r.output, r.output


@pytest.mark.parametrize(
    "forge, field, message",
    [
        ({"mutants_counted": -3, "mutants_killed": -3}, "mutants_counted", "greater than or equal to 0"),  # the filed case
        ({"hacks_tried": -1}, "hacks_tried", "greater than or equal to 0"),
        ({"mutants_killed": 99}, "", "mutants_killed (99) exceeds mutants_counted"),
        ({"hacks_tried": 0, "hacks_passed": 0, "alternatives_tried": 0}, "", "alternatives_accepted"),
        ({"hacks_passed": 5}, "", "hacks_passed (5) exceeds hacks_tried"),
        ({"gold_pass": False}, "", "certified is True, but its fields make it False"),
        ({"certified": "yes"}, "", "certified is 'yes'"),
    ],
)
def test_a_forged_reuse_certificate_is_refused_naming_the_file_and_the_field(tmp_path, forge, field, message):
    """#32 item 6: a certificate with the task's real hashes and impossible counts was kept as certified (and its counts
    summed into the totals). `--reuse` is a cache: every count is bounded and `certified` must follow from them."""
    first = tmp_path / "first.json"
    certify_cli("--domain", str(SHOP), "--backend", "sqlite", "--out", str(first))
    data = json.loads(first.read_text())
    i = next(i for i, c in enumerate(data["per_task"]) if c["task_id"] == "shop-refuse")
    data["per_task"][i].update(forge)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    r = CliRunner().invoke(app, ["tasks", "certify", "--domain", str(SHOP), "--backend", "sqlite", "--reuse", str(forged)])
    want = f"{forged}: task 'shop-refuse': field 'per_task[{i}]{'.' + field if field else ''}': "
    assert r.exit_code == 2 and want in r.output and message in r.output and "Traceback" not in r.output, r.output
    assert "certify (" not in r.output  # refused before any task is certified


def test_a_reuse_file_with_two_certificates_of_one_task_is_refused(tmp_path):
    first = tmp_path / "first.json"
    certify_cli("--domain", str(SHOP), "--backend", "sqlite", "--out", str(first))
    data = json.loads(first.read_text())
    data["per_task"].append({**data["per_task"][0], "mutants_equivalent": 0})  # which one would count is not the file's to say
    first.write_text(json.dumps(data))
    r = CliRunner().invoke(app, ["tasks", "certify", "--domain", str(SHOP), "--backend", "sqlite", "--reuse", str(first)])
    n, task = len(data["per_task"]) - 1, data["per_task"][0]["task_id"]
    assert r.exit_code == 2 and f"{first}: task {task!r}: field 'per_task[{n}]': a second certificate of the task" in r.output, r.output
