"""`tasks certify --format openenv`: the suite's certificates as OpenEnv's RFC 008 validation report, checked with
OpenEnv 0.10's own `ValidationReport` model, its `report.schema.json` and its severity policy (`apply_policy`), on a
certified suite and on certificates with each kind of failure."""

import dataclasses
import json
from importlib.resources import files

import jsonschema
import pytest
from openenv.validation import CheckResult, Lane, ValidationReport, apply_policy
from openenv.validation.policy import load_policy
from typer.testing import CliRunner

from groundstate.audits.certify import certify_task
from groundstate.audits.openenv_report import validation_report
from groundstate.cli import app
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.selectors import select_tasks

SCHEMA = json.loads(files("openenv.validation").joinpath("schemas", "report.schema.json").read_text())


def _accepted(report: dict) -> ValidationReport:
    """OpenEnv's own checks of a report: its JSON schema, its model, and its policy's verdict equal to the report's."""
    jsonschema.validate(report, SCHEMA)
    parsed = ValidationReport.model_validate(report)
    recomputed = apply_policy([CheckResult.model_validate(r.model_dump()) for r in parsed.results], load_policy(parsed.policy_version), Lane.HUB)
    assert recomputed == parsed.verdict, (recomputed, parsed.verdict)
    return parsed


@pytest.mark.postgres
def test_a_certified_suite_on_both_backends_is_a_report_openenv_accepts_and_passes(tmp_path):
    r = CliRunner().invoke(app, ["tasks", "certify", "--tasks", "kiosk-cancel-00[12]", "--format", "openenv"])
    assert r.exit_code == 0, r.output[-3000:]
    report = _accepted(json.loads(r.stdout))
    assert report.verdict.value == "pass" and report.lane is Lane.HUB and report.target == "kiosk-cancel-00[12]"
    by_id = {c.check_id: c for c in report.results}
    assert set(by_id) == {
        "semantic.oracle_max",
        "semantic.floor_gap",
        "semantic.canary_floor",
        "semantic.verifier_portability",
        "statistical.adversarial_floor",
        "statistical.gameability_gap",
    }
    assert all(c.status.value == "pass" for c in report.results)
    assert by_id["semantic.verifier_portability"].measured == {"backends": ["postgres", "sqlite"], "tasks_compared": 2, "tasks_agreeing": 2}
    assert by_id["semantic.canary_floor"].measured["mutants"] == by_id["semantic.canary_floor"].measured["killed"] > 0
    assert by_id["statistical.adversarial_floor"].measured["hacks_tried"] > 0
    assert report.manifest.capabilities.declared_task_count == {"all": 2} and "cancel_kiosk_order" in report.manifest.capabilities.declared_tools


def test_each_failure_is_a_failed_check_and_the_verdict_is_openenvs_policys():
    task, domain = select_tasks("kiosk-cancel-001")[0]
    cert = certify_task(task, domain, [SqliteBackend()], [])
    one = _accepted(validation_report("kiosk", [cert], [domain], None))
    assert one.verdict.value == "warn"  # one backend: portability is skipped, and says why
    skipped = [c for c in one.results if c.status.value == "skip"]
    assert [c.check_id for c in skipped] == ["semantic.verifier_portability"] and "one backend" in skipped[0].evidence[0]
    broken = {
        "semantic.oracle_max": {"gold_pass": False},
        "semantic.floor_gap": {"noop_fail": False},
        "statistical.adversarial_floor": {"hacks_passed": 1, "hacks_tried": max(cert.hacks_tried, 1), "hacks_that_passed": ["blind_update"]},
    }
    for check_id, change in broken.items():
        report = _accepted(validation_report("kiosk", [cert, dataclasses.replace(cert, task_id="kiosk-x", **change)], [domain], None))
        failed = [c for c in report.results if c.status.value == "fail"]
        assert check_id in {c.check_id for c in failed} and report.verdict.value == "fail", check_id
        assert all("1 task(s): kiosk-x" in c.evidence[0] and c.remediation for c in failed)
    survivor = {"survivors": [{"mutant": "m"}], "mutants_counted": cert.mutants_counted + 1}
    assert _accepted(validation_report("kiosk", [dataclasses.replace(cert, **survivor)], [domain], None)).verdict.value == "fail"
