"""A certified suite as OpenEnv's RFC 008 validation report (`tasks certify --format openenv`): the report schema
`openenv.validation` ships (`report.schema.json`, version 1, severity policy v1), filled from the certificates.

The checks it fills, each over every certified task, with the counts in `measured` and the tasks that failed it in
`evidence`:

- `semantic.oracle_max`: the gold (the oracle, replayed in the sandbox) reaches the maximum reward, 1;
- `semantic.floor_gap`: the no-op gets the floor, 0 (a gap of 1, the declared `floor_margin`);
- `semantic.canary_floor`: every counted lint mutant of the gold (a near miss) is killed;
- `semantic.verifier_portability`: every attempt gets the same reward on SQLite and PostgreSQL (SKIP, saying so, when
  certified on one backend);
- `statistical.adversarial_floor` (reserved in RFC 008): no reward-hacking agent passes;
- `statistical.gameability_gap` (reserved): honest work passes where gaming does not: every valid alternative
  solution passes and no hack does.

Checks certify does not measure (the build, runtime and resource checks, `replayability`, `no_solution_leakage`,
`verifier_determinism`) are left out, not claimed. The statistical checks are the hub lane's, so the report is
`lane: hub`; its verdict follows policy v1 (`apply_policy`): FAIL if a fail-severity check failed, WARN if a
warn-severity one failed or a check was skipped, else PASS. Plain data: OpenEnv is not needed to write it
(`tests/integrations/openenv_env` checks it with OpenEnv's own model, schema and policy).
"""

from __future__ import annotations

import hashlib
from typing import Any

from groundstate.audits.certify import Certificate
from groundstate.types import Domain

POLICY_VERSION = "v1"
SEVERITY = {  # policy v1's severities for the checks filled here
    "semantic.oracle_max": "fail",
    "semantic.floor_gap": "fail",
    "semantic.canary_floor": "fail",
    "semantic.verifier_portability": "fail",
    "statistical.adversarial_floor": "fail",
    "statistical.gameability_gap": "warn",
}
EVIDENCE = 20  # task ids listed per failed check; the count is always whole
# declarations, not measurements: an episode is a sandbox (a SQLite file or a PostgreSQL clone) and one process; its
# wall clock is what `serve --attempt-timeout` bounds (none by default): serve with 600 for the declaration to hold
RESOURCES = {"cpu": 1.0, "memory_mb": 1024, "disk_mb": 1024, "episode_timeout_s": 600.0}


def validation_report(target: str, certs: list[Certificate], domains: list[Domain], judge: str | None) -> dict[str, Any]:
    """The report of `certs` (one per task of `domains`) for `target` (what was certified: a selector or domain names)."""
    if not certs:
        raise ValueError("no certificate to report")
    results = [
        _oracle_max(certs),
        _floor_gap(certs),
        _canary_floor(certs),
        _portability(certs),
        _adversarial_floor(certs),
        _gameability_gap(certs),
    ]
    return {
        "report_schema_version": "1",
        "target": target,
        "source_digest": _digest(certs),
        "signature": "openenv.yaml",  # served through OpenEnv's protocol (`groundstate serve --protocol openenv`)
        "manifest": _manifest(target, certs, domains, judge),
        "policy_version": POLICY_VERSION,
        "lane": "hub",
        "levels_run": [3, 4],  # semantic, statistical
        "results": results,
        "verdict": _verdict(results),
    }


def _digest(certs: list[Certificate]) -> str:
    """sha256 over every certificate's task, domain and checking-code hashes: changes when any of them does."""
    h = hashlib.sha256()
    for c in sorted(certs, key=lambda c: c.task_id):
        h.update(f"{c.task_id}\0{c.task_hash}\0{c.domain_hash}\0{c.checker_hash}\n".encode())
    return h.hexdigest()


def _manifest(target: str, certs: list[Certificate], domains: list[Domain], judge: str | None) -> dict[str, Any]:
    judged = judge is not None and any(c.reply is not None for c in certs)
    tools = sorted({name for d in domains for name in d.tools.specs})
    return {
        "manifest_schema_version": "1",
        "name": target,
        "version": _digest(certs)[:12],
        "signature": "openenv.yaml",
        "reward": {"range": [0.0, 1.0], "oracle_tolerance": 0.0, "floor_margin": 1.0, **({"variance_tolerance": 0.0} if judged else {})},
        **({"judge": {"model": judge, "version": "as served"}} if judged else {}),
        "resources": RESOURCES,
        "task_distribution": {"dataset_version": _digest(certs)},
        "network": {"mode": "no-network"},  # tools are SQL on the sandbox (bridged worlds: their own servers, local)
        "capabilities": {
            "oracle": {"form": "script", "location": "tasks"},  # each task's gold tool calls, in its domain's tasks/ files
            "verifier": {"kind": "reward_channel"},
            "set_state": False,
            "llm_judged": judged,
            "rubric_tree": False,
            "task_api": True,
            "declared_tools": tools,
            "declared_task_count": {"all": len(certs)},
        },
        "types": {"tags": ["tool-use", "final-state"]},
    }


def _check(check_id: str, failed: list[str], measured: dict[str, Any], remediation: str, skip: str | None = None) -> dict[str, Any]:
    evidence = (
        [skip] if skip else [f"{len(failed)} task(s): {', '.join(failed[:EVIDENCE])}{' ...' if len(failed) > EVIDENCE else ''}"] if failed else []
    )
    return {
        "check_id": check_id,
        "status": "skip" if skip else "fail" if failed else "pass",
        "measured": measured,
        "evidence": evidence,
        "remediation": remediation if failed else None,
        "duration_s": 0.0,  # measured by certify per task, not per check
    }


def _oracle_max(certs: list[Certificate]) -> dict[str, Any]:
    failed = [c.task_id for c in certs if not c.gold_pass]
    unjudged = sum(c.reply == "unjudged" for c in certs)
    measured = {"tasks": len(certs), "oracle_passed": len(certs) - len(failed), "oracle_reward": 0.0 if failed else 1.0, "declared_tolerance": 0.0}
    check = _check("semantic.oracle_max", failed, measured, "fix the task's gold (or its checks): `groundstate tasks certify` names what failed")
    if unjudged:
        check["evidence"].append(f"{unjudged} rubric task(s): replies unjudged, the final state certified only")
    return check


def _floor_gap(certs: list[Certificate]) -> dict[str, Any]:
    failed = [c.task_id for c in certs if not c.noop_fail]
    measured = {"tasks": len(certs), "noop_failed": len(certs) - len(failed), "floor_reward": 1.0 if failed else 0.0, "floor_margin": 1.0}
    return _check("semantic.floor_gap", failed, measured, "a task its no-op passes asks for no change: give it one, or a check")


def _canary_floor(certs: list[Certificate]) -> dict[str, Any]:
    failed = [c.task_id for c in certs if c.mutants_killed != c.mutants_counted]
    measured = {
        "mutants": sum(c.mutants_counted for c in certs),
        "killed": sum(c.mutants_killed for c in certs),
        "equivalent": sum(c.mutants_equivalent for c in certs),
        "refused": sum(c.mutants_refused for c in certs),
        "no_op": sum(c.mutants_noop for c in certs),
    }
    return _check(
        "semantic.canary_floor", failed, measured, "a mutant of the gold that passes is a check missing: `groundstate tasks lint` lists them"
    )


def _portability(certs: list[Certificate]) -> dict[str, Any]:
    failed = [c.task_id for c in certs if c.sqlite_equals_postgres is False]
    compared = sum(c.sqlite_equals_postgres is not None for c in certs)
    skip = None if compared else "certified on one backend: give --backend sqlite --backend postgres to compare them"
    measured = {"backends": sorted({b for c in certs for b in c.backends}), "tasks_compared": compared, "tasks_agreeing": compared - len(failed)}
    return _check("semantic.verifier_portability", failed, measured, "the backends disagree: see the certificate's disagreements", skip)


def _adversarial_floor(certs: list[Certificate]) -> dict[str, Any]:
    failed = [c.task_id for c in certs if c.hacks_passed]
    measured = {
        "hacks_tried": sum(c.hacks_tried for c in certs),
        "hacks_passed": sum(c.hacks_passed for c in certs),
        "adversarial_reward": 1.0 if failed else 0.0,
    }
    return _check("statistical.adversarial_floor", failed, measured, "a reward-hacking agent passed: `groundstate tasks hacks` shows how")


def _gameability_gap(certs: list[Certificate]) -> dict[str, Any]:
    failed = [c.task_id for c in certs if c.false_negatives or c.hacks_passed]
    honest = 0.0 if any(c.false_negatives or not c.gold_pass for c in certs) else 1.0
    gaming = 1.0 if any(c.hacks_passed for c in certs) else 0.0
    measured = {
        "alternatives_tried": sum(c.alternatives_tried for c in certs),
        "alternatives_accepted": sum(c.alternatives_accepted for c in certs),
        "alternatives_rejected": sum(len(c.false_negatives) for c in certs),
        "honest_reward_min": honest,
        "gaming_reward_max": gaming,
        "gap": honest - gaming,
    }
    return _check("statistical.gameability_gap", failed, measured, "a valid solution failed or a hack passed: see the certificate")


def _verdict(results: list[dict[str, Any]]) -> str:
    verdict = "pass"
    for r in results:
        if r["status"] == "fail" and SEVERITY[r["check_id"]] == "fail":
            return "fail"
        if r["status"] == "fail" or r["status"] == "skip":
            verdict = "warn"
    return verdict
