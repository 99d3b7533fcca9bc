"""The bundled `insurance` benchmark domain: its seed's invariants, its tools' rules and its tasks' shape.

Tools run through `Toolset.call` on SQLite sandboxes of the engine (`SqliteBackend`), each test on its
own copy of the seeded world (plus a patch where a test needs a particular situation). The checks every
domain passes are in tests/domains/test_every_domain.py.
"""

from __future__ import annotations

import collections
import datetime as dt
import random
import re

import pytest
from domain_testing import FAMILIES, Desk, open_sandbox

from groundstate.worlds.domain import load_domain

INJECTION = "x'); DROP TABLE motor_claims; --"
WRITES = {
    "add_named_driver",
    "remove_named_driver",
    "add_insured_vehicle",
    "remove_insured_vehicle",
    "change_policy_cover",
    "file_motor_claim",
    "approve_motor_claim",
    "deny_motor_claim",
    "pay_motor_claim",
    "add_insurance_note",
    "refer_to_specialist",
}


def _ago(domain, days: int) -> str:
    return (domain.config.today - dt.timedelta(days=days)).isoformat()


def _policy(world, *, coverage: str | None = None, vehicles: int | None = None, started: int = 60) -> dict:
    """A seed policy that is active, started at least `started` days ago, runs another month, and has no claims."""
    today = load_domain("insurance").config.today
    claimed = {c["policy_id"] for c in world["motor_claims"]}
    covered = collections.Counter(v["policy_id"] for v in world["insured_vehicles"] if v["status"] == "covered")
    for p in world["motor_policies"]:
        start, end = dt.date.fromisoformat(p["start_date"]), dt.date.fromisoformat(p["end_date"])
        if (
            p["status"] == "active"
            and p["id"] not in claimed
            and (today - start).days >= started
            and (end - today).days >= 30
            and (coverage is None or p["coverage"] == coverage)
            and (vehicles is None or covered[p["id"]] == vehicles)
        ):
            return p
    raise LookupError("no such policy in the seed")


def _vehicles(world, policy_id: int) -> list[dict]:
    return [v for v in world["insured_vehicles"] if v["policy_id"] == policy_id and v["status"] == "covered"]


def _holder(world, policy: dict) -> dict:
    return next(h for h in world["policyholders"] if h["id"] == policy["policyholder_id"])


def _self_driver(world, policy: dict) -> dict:
    return next(d for d in world["named_drivers"] if d["policy_id"] == policy["id"] and d["relationship"] == "self")


def _premium_matches_parts(db, policy_id: int) -> bool:
    parts = db.scalar("SELECT COALESCE(SUM(annual_premium), 0) FROM insured_vehicles WHERE policy_id = ? AND status = 'covered'", policy_id)
    parts += db.scalar("SELECT COALESCE(SUM(premium_loading), 0) FROM named_drivers WHERE policy_id = ? AND status = 'active'", policy_id)
    return round(parts, 2) == round(db.scalar("SELECT annual_premium FROM motor_policies WHERE id = ?", policy_id), 2)


# -- schema and seed --------------------------------------------------------------------------------


def test_schema_and_toolset_sizes(domain):
    assert 6 <= len(domain.tables) <= 9
    # Counted from the files themselves too, as they are written.
    tables = set(re.findall(r"CREATE TABLE (\w+)", (domain.path / "schema.sql").read_text()))
    tools = set(re.findall(r"@tool(?:\(write=True\))?\s*\ndef (\w+)", (domain.path / "tools.py").read_text()))
    assert len(tools) == 15 and len(tables) == 9


def test_seed_dates_agree_with_today(domain, world):
    today = domain.config.today.isoformat()
    assert all(c["reported_on"] <= today and c["incident_date"] <= c["reported_on"] for c in world["motor_claims"])
    assert all(p["status"] != "active" or p["start_date"] <= today <= p["end_date"] for p in world["motor_policies"])


def test_seed_scale_and_premiums(world, sb, domain_module):
    seed = domain_module("seed")
    small, big = seed.generate(random.Random(1), scale=0.25), seed.generate(random.Random(1), scale=2.0)
    assert len(small["motor_policies"]) < len(world["motor_policies"]) < len(big["motor_policies"])
    db = sb.connection
    # A policy's premium is always the sum of its parts, as the tools keep it.
    assert all(_premium_matches_parts(db, p["id"]) for p in world["motor_policies"])


# -- tools: shape and safety ------------------------------------------------------------------------


def test_toolset_shape(domain):
    tools = domain.tools
    assert 8 <= len(tools.names()) <= 15
    assert {n for n in tools.names() if tools[n].write} == WRITES


def test_bad_arguments_and_injection_are_inert(domain, world, desk):
    p = _policy(world)
    h = _holder(world, p)
    assert "unknown tool" in desk.call("drop_everything").content
    desk.refused("get_motor_policy", "invalid arguments", policy_id=INJECTION)
    desk.refused("find_policyholder", "no policyholder matches", email=INJECTION, date_of_birth=h["date_of_birth"])
    desk.refused("find_policyholder", "ISO date", email=h["email"], date_of_birth=INJECTION)
    desk.refused("change_policy_cover", "invalid arguments", policy_id=p["id"], coverage=INJECTION, deductible=500)
    desk.refused(
        "add_named_driver",
        "not a licence number",
        policy_id=p["id"],
        first_name="Ann",
        last_name="Lee",
        date_of_birth="1980-01-01",
        licence_number=INJECTION,
        licence_issued_on="2000-01-01",
        relationship="spouse",
    )
    desk.refused("get_policyholder", "invalid arguments", policyholder_id=1, extra=1)
    # Stored as plain text: the quote and the DROP never reach the SQL.
    note = desk.ok("add_insurance_note", policyholder_id=h["id"], body=INJECTION, policy_id=p["id"])
    assert desk.db.scalar("SELECT body FROM insurance_notes WHERE id = ?", note["note_id"]) == INJECTION
    assert desk.db.scalar("SELECT COUNT(*) FROM motor_claims") == len(world["motor_claims"])


# -- tools: reads -----------------------------------------------------------------------------------


def test_identification_and_profile(world, desk):
    p = _policy(world)
    h = _holder(world, p)
    found = desk.ok("find_policyholder", email=f"  {h['email'].upper()} ", date_of_birth=h["date_of_birth"])
    assert found["policyholder_id"] == h["id"]
    wrong_dob = (dt.date.fromisoformat(h["date_of_birth"]) + dt.timedelta(days=1)).isoformat()
    desk.refused("find_policyholder", "no policyholder matches", email=h["email"], date_of_birth=wrong_dob)
    profile = desk.ok("get_policyholder", policyholder_id=h["id"])
    assert p["id"] in [x["policy_id"] for x in profile["policies"]]
    desk.refused("get_policyholder", "no policyholder", policyholder_id=10**6)


def test_get_motor_policy_and_claim(domain, world, desk, domain_module):
    p = _policy(world)
    view = desk.ok("get_motor_policy", policy_id=p["id"])
    assert view["policyholder_id"] == p["policyholder_id"] and view["vehicles"] and view["drivers"]
    me = next(d for d in view["drivers"] if d["relationship"] == "self")
    assert me["age"] == domain_module("tools").years_between(dt.date.fromisoformat(me["date_of_birth"]), domain.config.today)
    c = next(c for c in world["motor_claims"] if c["status"] == "paid")
    claim = desk.ok("get_motor_claim", claim_id=c["id"])
    assert (
        claim["payouts"]
        and claim["days_from_incident_to_report"] == (dt.date.fromisoformat(c["reported_on"]) - dt.date.fromisoformat(c["incident_date"])).days
    )
    desk.refused("get_motor_policy", "no policy", policy_id=10**6)
    desk.refused("get_motor_claim", "no claim", claim_id=10**6)


# -- tools: policy changes ----------------------------------------------------------------------------

DRIVER = dict(
    first_name="Ana", last_name="Reyes", date_of_birth="1984-03-02", licence_number="K1234567", licence_issued_on="2003-05-01", relationship="spouse"
)


def test_add_and_remove_named_driver(domain, world, desk):
    p = _policy(world)
    out = desk.ok("add_named_driver", policy_id=p["id"], **DRIVER)
    db = desk.db
    assert db.one("SELECT status, premium_loading, added_on FROM named_drivers WHERE id = ?", out["driver_id"]) == {
        "status": "active",
        "premium_loading": 90.0,
        "added_on": domain.config.today.isoformat(),
    }
    assert out["annual_premium_after"] == pytest.approx(p["annual_premium"] + 90.0)
    e = db.one("SELECT * FROM policy_endorsements WHERE id = ?", out["endorsement_id"])
    assert e["kind"] == "add_driver" and e["driver_id"] == out["driver_id"] and 0 < e["prorated_amount"] <= 90.0
    assert _premium_matches_parts(db, p["id"])
    desk.refused("add_named_driver", "already named", policy_id=p["id"], **DRIVER)
    desk.refused(
        "add_named_driver", "at least 17", policy_id=p["id"], **{**DRIVER, "licence_number": "K7654321", "date_of_birth": _ago(domain, 15 * 365)}
    )
    desk.refused(
        "add_named_driver", "in the future", policy_id=p["id"], **{**DRIVER, "licence_number": "K7654321", "licence_issued_on": "2099-01-01"}
    )
    desk.refused("add_named_driver", "invalid arguments", policy_id=p["id"], **{**DRIVER, "relationship": "cousin"})
    lapsed = next(x for x in world["motor_policies"] if x["status"] == "lapsed")
    desk.refused("add_named_driver", "only active policies", policy_id=lapsed["id"], **DRIVER)

    removed = desk.ok("remove_named_driver", driver_id=out["driver_id"])
    assert removed["annual_premium_after"] == pytest.approx(p["annual_premium"]) and removed["prorated_amount"] < 0
    desk.refused("remove_named_driver", "already removed", driver_id=out["driver_id"])
    desk.refused("remove_named_driver", "cannot be removed", driver_id=_self_driver(world, p)["id"])
    desk.refused("remove_named_driver", "no named driver", driver_id=10**6)


CAR = dict(registration="9ZZZ001", make="Kia", model="Niro", model_year=2024, vehicle_value=26000.0, usage="commute")


def test_add_replace_and_remove_vehicles(domain, world, desk, domain_module):
    p = _policy(world, vehicles=1)
    (old,) = _vehicles(world, p["id"])
    desk.refused("remove_insured_vehicle", "only vehicle", vehicle_id=old["id"])
    out = desk.ok("add_insured_vehicle", policy_id=p["id"], **{**CAR, "registration": " 9zzz 001 "})
    db = desk.db
    row = db.one("SELECT registration, annual_premium, usage FROM insured_vehicles WHERE id = ?", out["vehicle_id"])
    tools = domain_module("tools")
    assert row == {
        "registration": "9ZZZ001",
        "usage": "commute",
        "annual_premium": tools.vehicle_premium(p["coverage"], p["deductible"], 26000.0, "commute"),
    }
    desk.refused("add_insured_vehicle", "already covered", policy_id=p["id"], **CAR)
    desk.refused("add_insured_vehicle", "not a licence plate", policy_id=p["id"], **{**CAR, "registration": "9ZZZ001-x"})
    desk.refused("add_insured_vehicle", "positive", policy_id=p["id"], **{**CAR, "registration": "9ZZZ002", "vehicle_value": 0})
    desk.ok("remove_insured_vehicle", vehicle_id=old["id"])
    assert db.scalar("SELECT status FROM insured_vehicles WHERE id = ?", old["id"]) == "removed"
    assert _premium_matches_parts(db, p["id"])
    desk.refused("remove_insured_vehicle", "already removed", vehicle_id=old["id"])
    kinds = [r["kind"] for r in db.query("SELECT kind FROM policy_endorsements WHERE policy_id = ? ORDER BY id", p["id"])]
    assert kinds[-2:] == ["add_vehicle", "remove_vehicle"]


def test_change_policy_cover(world, desk):
    p = _policy(world, coverage="third_party")
    out = desk.ok("change_policy_cover", policy_id=p["id"], coverage="comprehensive", deductible=int(p["deductible"]))
    assert out["annual_premium_after"] > out["annual_premium_before"]
    assert desk.db.scalar("SELECT coverage FROM motor_policies WHERE id = ?", p["id"]) == "comprehensive"
    assert _premium_matches_parts(desk.db, p["id"])
    desk.refused("change_policy_cover", "already has", policy_id=p["id"], coverage="comprehensive", deductible=int(p["deductible"]))
    desk.refused("change_policy_cover", "invalid arguments", policy_id=p["id"], coverage="comprehensive", deductible=750)


# -- tools: claims ----------------------------------------------------------------------------------


def test_file_motor_claim(domain, world, desk):
    p = _policy(world, coverage="comprehensive")
    v = _vehicles(world, p["id"])[0]
    me = _self_driver(world, p)
    args = dict(
        vehicle_id=v["id"],
        incident_date=_ago(domain, 5),
        incident_type="collision",
        description="Hit a bollard while parking.",
        estimated_damage=1250.5,
        driver_id=me["id"],
    )
    out = desk.ok("file_motor_claim", **args)
    row = desk.db.one("SELECT * FROM motor_claims WHERE id = ?", out["claim_id"])
    assert (row["status"], row["reported_on"], row["policy_id"], row["estimated_damage"]) == (
        "open",
        domain.config.today.isoformat(),
        p["id"],
        1250.5,
    )
    desk.refused("file_motor_claim", "already covers", **args)
    desk.refused("file_motor_claim", "in the future", **{**args, "incident_date": _ago(domain, -1)})
    desk.refused("file_motor_claim", "did not cover", **{**args, "incident_date": "2020-01-01"})
    desk.refused("file_motor_claim", "whole number of cents", **{**args, "incident_date": _ago(domain, 6), "estimated_damage": 10.005})
    other = next(d for d in world["named_drivers"] if d["policy_id"] != p["id"])
    desk.refused("file_motor_claim", "not a named driver", **{**args, "incident_date": _ago(domain, 6), "driver_id": other["id"]})
    tp = _policy(world, coverage="third_party")
    desk.refused(
        "file_motor_claim",
        "does not pay for collision",
        **{**args, "vehicle_id": _vehicles(world, tp["id"])[0]["id"], "driver_id": _self_driver(world, tp)["id"]},
    )


def _open_claim_patch(domain, world, estimate: float = 2400.0) -> tuple[dict, dict]:
    p = _policy(world, coverage="comprehensive")
    v = _vehicles(world, p["id"])[0]
    claim = {
        "id": 90001,
        "policy_id": p["id"],
        "vehicle_id": v["id"],
        "driver_id": None,
        "incident_date": _ago(domain, 12),
        "reported_on": _ago(domain, 10),
        "incident_type": "vandalism",
        "description": "Keyed.",
        "estimated_damage": estimate,
        "status": "open",
        "approved_amount": None,
        "denial_reason": None,
        "decided_on": None,
    }
    return {"motor_claims": [claim]}, claim


def test_approve_pay_and_deny(domain, world, engine):
    patch, claim = _open_claim_patch(domain, world)
    with open_sandbox(domain, engine, patch) as sandbox:
        desk = Desk(domain, sandbox)
        desk.refused("pay_motor_claim", "only approved claims", claim_id=claim["id"], method="cheque")
        desk.refused("approve_motor_claim", "more than the claim's estimated damage", claim_id=claim["id"], amount=2400.01)
        desk.refused("approve_motor_claim", "positive", claim_id=claim["id"], amount=0)
        desk.ok("approve_motor_claim", claim_id=claim["id"], amount=1900.0)
        desk.refused("approve_motor_claim", "only open claims", claim_id=claim["id"], amount=1900.0)
        desk.refused("deny_motor_claim", "only open claims", claim_id=claim["id"], reason="late_report")
        paid = desk.ok("pay_motor_claim", claim_id=claim["id"], method="repairer")
        assert desk.db.one("SELECT amount, method FROM claim_payouts WHERE id = ?", paid["payout_id"]) == {"amount": 1900.0, "method": "repairer"}
        assert desk.db.scalar("SELECT status FROM motor_claims WHERE id = ?", claim["id"]) == "paid"
        desk.refused("pay_motor_claim", "already been paid", claim_id=claim["id"], method="repairer")
    with open_sandbox(domain, engine, patch) as sandbox:
        desk = Desk(domain, sandbox)
        desk.ok("deny_motor_claim", claim_id=claim["id"], reason="below_deductible")
        assert desk.db.one("SELECT status, denial_reason FROM motor_claims WHERE id = ?", claim["id"]) == {
            "status": "denied",
            "denial_reason": "below_deductible",
        }
        desk.refused("deny_motor_claim", "only open claims", claim_id=claim["id"], reason="below_deductible")
        desk.refused("deny_motor_claim", "invalid arguments", claim_id=claim["id"], reason="too_expensive")


def test_an_open_claim_keeps_its_vehicle_covered(domain, world, engine):
    p = _policy(world, coverage="comprehensive", vehicles=2)
    v, spare = _vehicles(world, p["id"])
    claim = {**_open_claim_patch(domain, world)[1], "policy_id": p["id"], "vehicle_id": v["id"]}
    with open_sandbox(domain, engine, {"motor_claims": [claim]}) as sandbox:
        desk = Desk(domain, sandbox)
        desk.refused("remove_insured_vehicle", "not settled", vehicle_id=v["id"])
        desk.ok("remove_insured_vehicle", vehicle_id=spare["id"])


# -- tools: records ---------------------------------------------------------------------------------


def test_notes_and_referrals(domain, world, engine):
    patch, claim = _open_claim_patch(domain, world)
    p = next(x for x in world["motor_policies"] if x["id"] == claim["policy_id"])
    h = _holder(world, p)
    stranger = next(x for x in world["motor_policies"] if x["policyholder_id"] != h["id"])
    with open_sandbox(domain, engine, patch) as sandbox:
        desk = Desk(domain, sandbox)
        note = desk.ok("add_insurance_note", policyholder_id=h["id"], body="Refused a late claim.", claim_id=claim["id"])
        assert (note["policy_id"], note["claim_id"]) == (p["id"], claim["id"]), "a claim's note carries its policy"
        assert desk.ok("add_insurance_note", policyholder_id=h["id"], body="General remark.")["policy_id"] is None
        desk.refused("add_insurance_note", "must not be empty", policyholder_id=h["id"], body="  ")
        desk.refused("add_insurance_note", "does not belong", policyholder_id=h["id"], body="x", policy_id=stranger["id"])
        # A claim named with another of the same policyholder's policies is a contradiction, not a guess to fix.
        holder_of = {x["id"]: x["policyholder_id"] for x in world["motor_policies"]}
        c, q = next(
            (c, q)
            for c in world["motor_claims"]
            for q in world["motor_policies"]
            if q["policyholder_id"] == holder_of[c["policy_id"]] and q["id"] != c["policy_id"]
        )
        desk.refused("add_insurance_note", "is on policy", policyholder_id=q["policyholder_id"], body="x", claim_id=c["id"], policy_id=q["id"])
        ref = desk.ok("refer_to_specialist", policyholder_id=h["id"], team="claims_adjuster", reason="Payable $7,200.", claim_id=claim["id"])
        assert desk.db.one("SELECT team, status, policy_id FROM specialist_referrals WHERE id = ?", ref["referral_id"]) == {
            "team": "claims_adjuster",
            "status": "open",
            "policy_id": p["id"],
        }
        desk.refused(
            "refer_to_specialist",
            "already open",
            policyholder_id=h["id"],
            team="claims_adjuster",
            reason="again",
            policy_id=p["id"],
            claim_id=claim["id"],
        )
        desk.ok("refer_to_specialist", policyholder_id=h["id"], team="fraud", reason="Did not make it.", claim_id=claim["id"])
        desk.refused("refer_to_specialist", "invalid arguments", policyholder_id=h["id"], team="legal", reason="x")


# -- tasks ------------------------------------------------------------------------------------------


def test_tasks_load_with_every_family(domain):
    tasks = domain.tasks
    assert len(tasks) >= 60
    families = collections.Counter(t.family for t in tasks)
    assert set(families) == set(FAMILIES) and all(families[f] >= 6 for f in FAMILIES), families
    calls = {len(t.gold) for t in tasks}
    assert min(calls) == 1 and max(calls) >= 8, "difficulty must range from one call to eight"
    for t in tasks:
        assert t.split == "bench"
        if t.family == "policy_refusal":
            assert {c.tool for c in t.gold} & {"add_insurance_note", "refer_to_specialist", "deny_motor_claim"}, t.id
