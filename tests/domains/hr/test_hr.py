"""The bundled `hr` benchmark domain: its seed's invariants, its tools' rules and its tasks' shape.

Tools run through `Toolset.call` on SQLite sandboxes of the engine (`SqliteBackend`), each test on its
own copy of the seeded world (plus a patch where a test needs a particular situation). The checks every
domain passes are in tests/domains/test_every_domain.py.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import random
import re

import pytest
from domain_testing import FAMILIES, Desk, open_sandbox

INJECTION = "x'); DROP TABLE personnel; --"


# -- helpers over the seeded world ---------------------------------------------------------------------


def _clean_employee(db, skip: int = 0) -> dict:
    """An active employee with a manager, nothing pending or booked ahead, and at least 5 annual days available."""
    today = db.today.isoformat()
    rows = db.query(
        "SELECT p.* FROM personnel p JOIN leave_balances b ON b.personnel_id = p.id AND b.leave_type = 'annual' "
        "WHERE p.status = 'active' AND p.manager_id IS NOT NULL AND b.carried_over_days + b.accrued_days - b.used_days >= 6 "
        "AND NOT EXISTS (SELECT 1 FROM leave_requests r WHERE r.personnel_id = p.id AND r.status IN ('pending', 'approved') AND r.end_date >= ?) "
        "AND NOT EXISTS (SELECT 1 FROM salary_adjustments s WHERE s.personnel_id = p.id AND s.status = 'scheduled') "
        "AND NOT EXISTS (SELECT 1 FROM leave_blackouts x WHERE x.department_id = p.department_id AND x.start_date <= '2026-08-21' "
        "AND x.end_date >= '2026-08-17') ORDER BY p.id",
        today,
    )
    return rows[skip]


def _annual(db, personnel_id: int) -> dict:
    return db.one("SELECT * FROM leave_balances WHERE personnel_id = ? AND leave_type = 'annual'", personnel_id)


def _new_hire(db) -> dict:
    return db.one("SELECT * FROM personnel WHERE status = 'onboarding' ORDER BY id")


# -- schema and seed -------------------------------------------------------------------------------------


def test_schema_size(domain):
    assert 6 <= len(domain.tables) <= 12


def test_seed_scales(world, domain_module):
    seed = domain_module("seed")
    small, big = seed.generate(random.Random(1), scale=0.25), seed.generate(random.Random(1), scale=2.0)
    assert len(small["personnel"]) < len(world["personnel"]) < len(big["personnel"])


def test_seed_is_consistent(domain, world):
    today = domain.config.today.isoformat()
    # Used days are exactly the approved leave of the year; salaries sit in their bands.
    for b in world["leave_balances"]:
        approved = sum(
            r["days"]
            for r in world["leave_requests"]
            if r["personnel_id"] == b["personnel_id"] and r["leave_type"] == b["leave_type"] and r["status"] == "approved"
        )
        assert b["used_days"] == pytest.approx(approved), b
        assert b["used_days"] <= b["carried_over_days"] + b["accrued_days"] + 1e-9 or b["leave_type"] == "sick"
    bands = {b["id"]: b for b in world["salary_bands"]}
    for p in world["personnel"]:
        assert bands[p["band_id"]]["min_salary"] <= p["salary"] <= bands[p["band_id"]]["max_salary"], p["id"]
        assert p["hire_date"] <= today and (p["manager_id"] is None or p["manager_id"] < p["id"])
    # A new hire is onboarding exactly while a checklist item is pending; one active bank account each.
    pending = {i["personnel_id"] for i in world["onboarding_items"] if i["status"] == "pending"}
    assert pending == {p["id"] for p in world["personnel"] if p["status"] == "onboarding"}
    active = collections.Counter(a["personnel_id"] for a in world["personnel_bank_accounts"] if a["status"] == "active")
    assert set(active.values()) == {1} and len(active) == len(world["personnel"])


def test_holidays_agree_across_files(domain, domain_module):
    tools, seed = domain_module("tools"), domain_module("seed")
    assert tools.HOLIDAYS == seed.HOLIDAYS
    listed = re.search(r"Company holidays in 2026: (.*?)\.", domain.policy.replace("\n", " ")).group(1)
    days = {dt.datetime.strptime(f"{d.strip()} 2026", "%b %d %Y").date() for d in listed.replace(" and ", ", ").split(",")}
    assert days == set(tools.HOLIDAYS)
    assert tools._routing_ok(seed.routing_number("02100002"))


# -- tools: shape and reads --------------------------------------------------------------------------------


def test_toolset_shape(domain):
    tools = domain.tools
    assert 8 <= len(tools.names()) <= 15
    writes = {n for n in tools.names() if tools[n].write}
    assert writes == {
        "submit_leave_request",
        "decide_leave_request",
        "cancel_leave_request",
        "update_onboarding_item",
        "schedule_salary_adjustment",
        "update_payroll_bank_account",
        "submit_expense_claim",
        "review_expense_claim",
        "add_hr_note",
        "escalate_hr_case",
    }


def test_bad_arguments_and_injection_are_inert(desk):
    assert "unknown tool" in desk.call("drop_everything").content
    desk.refused("find_personnel", "no employee", query=INJECTION)
    desk.refused("find_personnel", "no employee", query="' OR '1'='1")
    desk.refused("get_personnel", "invalid arguments", personnel_id=INJECTION)
    desk.refused("decide_leave_request", "invalid arguments", request_id=1, approver_id=1, decision=INJECTION)
    desk.refused("submit_leave_request", "ISO date", personnel_id=1, leave_type="annual", start_date=INJECTION, end_date="2026-08-21")
    note = desk.ok("add_hr_note", personnel_id=1, body=INJECTION)
    assert desk.db.scalar("SELECT body FROM hr_notes WHERE id = ?", note["note_id"]) == INJECTION
    assert desk.db.scalar("SELECT COUNT(*) FROM personnel") > 300  # the table is still there


def test_reads(desk, world):
    p = next(p for p in world["personnel"] if p["status"] == "active" and p["manager_id"])
    assert desk.ok("find_personnel", query=f"  {p['work_email'].upper()} ")["personnel_id"] == p["id"]
    assert desk.ok("find_personnel", query=p["employee_no"].lower())["personnel_id"] == p["id"]
    boss = desk.ok("get_personnel", personnel_id=p["manager_id"])
    assert p["id"] in [r["personnel_id"] for r in boss["direct_reports"]]
    file = desk.ok("get_personnel", personnel_id=p["id"])
    assert "ssn_last4" not in json.dumps(file) and len(file["bank_account"]["account_last4"]) == 4
    overview = desk.ok("get_leave_overview", personnel_id=p["id"])
    b = _annual(desk.db, p["id"])
    annual = next(x for x in overview["balances"] if x["leave_type"] == "annual")
    assert annual["available_days"] == pytest.approx(b["carried_over_days"] + b["accrued_days"] - b["used_days"] - annual["pending_days"])
    claims = desk.ok("list_expense_claims", personnel_id=p["id"], status="any")
    assert [c["claim_id"] for c in claims] == [c["claim_id"] for c in sorted(claims, key=lambda c: (c["incurred_on"], c["claim_id"]), reverse=True)]
    desk.refused("get_personnel", "no employee", personnel_id=10**6)


# -- tools: writes ----------------------------------------------------------------------------------------


def test_submit_leave_request(desk):
    p = _clean_employee(desk.db)
    before = _annual(desk.db, p["id"])["used_days"]
    out = desk.ok("submit_leave_request", personnel_id=p["id"], leave_type="annual", start_date="2026-08-17", end_date="2026-08-21")
    assert (out["status"], out["days"]) == ("pending", 5.0)
    assert _annual(desk.db, p["id"])["used_days"] == before  # pending leave is reserved, not used
    desk.refused("submit_leave_request", "overlaps", personnel_id=p["id"], leave_type="annual", start_date="2026-08-17", end_date="2026-08-21")
    desk.refused(
        "submit_leave_request", "must start after today", personnel_id=p["id"], leave_type="annual", start_date="2026-05-11", end_date="2026-05-12"
    )
    desk.refused("submit_leave_request", "only", personnel_id=p["id"], leave_type="annual", start_date="2026-09-01", end_date="2026-11-30")
    desk.refused(
        "submit_leave_request", "before start_date", personnel_id=p["id"], leave_type="annual", start_date="2026-09-02", end_date="2026-09-01"
    )
    desk.refused("submit_leave_request", "no working days", personnel_id=p["id"], leave_type="annual", start_date="2026-09-05", end_date="2026-09-07")
    desk.refused("submit_leave_request", "ISO date", personnel_id=p["id"], leave_type="annual", start_date="17/08/2026", end_date="2026-08-21")
    # Labor Day (a company holiday) and the weekend are not counted.
    assert desk.ok("submit_leave_request", personnel_id=p["id"], leave_type="annual", start_date="2026-09-05", end_date="2026-09-08")["days"] == 1.0
    # Sick leave: after the fact, approved at once.
    sick = desk.ok("submit_leave_request", personnel_id=p["id"], leave_type="sick", start_date="2026-05-07", end_date="2026-05-08")
    assert sick["status"] == "approved" and sick["days"] == 2.0
    desk.refused("submit_leave_request", "after today", personnel_id=p["id"], leave_type="sick", start_date="2026-05-11", end_date="2026-05-12")
    desk.refused("submit_leave_request", "too long ago", personnel_id=p["id"], leave_type="sick", start_date="2026-03-02", end_date="2026-03-02")
    gone = desk.db.scalar("SELECT id FROM personnel WHERE status = 'terminated' ORDER BY id")
    desk.refused("submit_leave_request", "left the company", personnel_id=gone, leave_type="sick", start_date="2026-05-07", end_date="2026-05-07")


def test_decide_and_cancel_leave(desk):
    p = _clean_employee(desk.db)
    before = _annual(desk.db, p["id"])["used_days"]
    req = desk.ok("submit_leave_request", personnel_id=p["id"], leave_type="annual", start_date="2026-08-17", end_date="2026-08-21")["request_id"]
    desk.refused("decide_leave_request", "direct manager", request_id=req, approver_id=p["id"], decision="approved")
    desk.ok("decide_leave_request", request_id=req, approver_id=p["manager_id"], decision="approved")
    assert desk.db.one("SELECT status, decided_by FROM leave_requests WHERE id = ?", req) == {"status": "approved", "decided_by": p["manager_id"]}
    assert _annual(desk.db, p["id"])["used_days"] == pytest.approx(before + 5)
    desk.refused("decide_leave_request", "already approved", request_id=req, approver_id=p["manager_id"], decision="rejected")
    other = _clean_employee(desk.db, skip=1)
    desk.refused("cancel_leave_request", "not a request of", request_id=req, personnel_id=other["id"])
    desk.ok("cancel_leave_request", request_id=req, personnel_id=p["id"])
    assert _annual(desk.db, p["id"])["used_days"] == pytest.approx(before)
    desk.refused("cancel_leave_request", "already cancelled", request_id=req, personnel_id=p["id"])
    # Rejection leaves the balance alone; leave that has started cannot be cancelled.
    req2 = desk.ok("submit_leave_request", personnel_id=p["id"], leave_type="annual", start_date="2026-08-24", end_date="2026-08-25")["request_id"]
    desk.ok("decide_leave_request", request_id=req2, approver_id=p["manager_id"], decision="rejected")
    assert _annual(desk.db, p["id"])["used_days"] == pytest.approx(before)
    sick = desk.ok("submit_leave_request", personnel_id=p["id"], leave_type="sick", start_date="2026-05-08", end_date="2026-05-08")["request_id"]
    desk.refused("cancel_leave_request", "has not started", request_id=sick, personnel_id=p["id"])
    desk.refused("decide_leave_request", "no leave request", request_id=10**6, approver_id=1, decision="approved")


def test_update_onboarding_item(domain, engine):
    with open_sandbox(domain, engine) as sandbox:
        desk = Desk(domain, sandbox)
        hire = _new_hire(desk.db)
        items = {i["item"]: i for i in desk.db.query("SELECT * FROM onboarding_items WHERE personnel_id = ? ORDER BY id", hire["id"])}
    # A clean situation: only the badge and the security training are still open.
    patch = {
        "onboarding_items": [
            {
                "id": i["id"],
                "status": "pending" if name in ("badge_access", "security_training") else "done",
                "completed_on": None if name in ("badge_access", "security_training") else "2026-05-01",
                "completed_by": None if name in ("badge_access", "security_training") else hire["id"],
            }
            for name, i in items.items()
        ]
    }
    with open_sandbox(domain, engine, patch) as sandbox:
        desk = Desk(domain, sandbox)
        badge, training = items["badge_access"]["id"], items["security_training"]["id"]
        desk.refused("update_onboarding_item", "mandatory", item_id=training, status="waived", confirmed_by=hire["manager_id"])
        desk.refused("update_onboarding_item", "only the new hire's direct manager", item_id=badge, status="waived", confirmed_by=hire["id"])
        desk.refused("update_onboarding_item", "cannot", item_id=badge, status="done", confirmed_by=1 if hire["manager_id"] != 1 else 2)
        out = desk.ok("update_onboarding_item", item_id=badge, status="waived", confirmed_by=hire["manager_id"])
        assert out["items_pending"] == 1 and not out["employee_activated"]
        desk.refused("update_onboarding_item", "already waived", item_id=badge, status="done", confirmed_by=hire["id"])
        out = desk.ok("update_onboarding_item", item_id=training, status="done", confirmed_by=hire["id"])
        assert out["employee_activated"] and desk.db.scalar("SELECT status FROM personnel WHERE id = ?", hire["id"]) == "active"
        assert desk.db.one("SELECT status, completed_on, completed_by FROM onboarding_items WHERE id = ?", training) == {
            "status": "done",
            "completed_on": domain.config.today.isoformat(),
            "completed_by": hire["id"],
        }


def test_schedule_salary_adjustment(desk):
    p = _clean_employee(desk.db)
    band = desk.db.one("SELECT * FROM salary_bands WHERE id = ?", p["band_id"])
    new = round(p["salary"] + 1000, 2)
    args = dict(personnel_id=p["id"], requested_by=p["manager_id"], new_salary=new, reason="merit", effective_date="2026-07-01")
    desk.refused("schedule_salary_adjustment", "direct manager", **{**args, "requested_by": p["id"]})
    desk.refused("schedule_salary_adjustment", "outside grade", **{**args, "new_salary": band["max_salary"] + 1})
    desk.refused("schedule_salary_adjustment", "first day of a coming month", **{**args, "effective_date": "2026-07-02"})
    desk.refused("schedule_salary_adjustment", "first day of a coming month", **{**args, "effective_date": "2026-05-01"})
    desk.refused("schedule_salary_adjustment", "only be a correction", **{**args, "new_salary": p["salary"] - 100})
    desk.refused("schedule_salary_adjustment", "already earns", **{**args, "new_salary": p["salary"]})
    out = desk.ok("schedule_salary_adjustment", **args)
    assert (out["old_salary"], out["new_salary"], out["status"]) == (p["salary"], new, "scheduled")
    assert desk.db.scalar("SELECT salary FROM personnel WHERE id = ?", p["id"]) == p["salary"]  # payroll applies it later
    desk.refused("schedule_salary_adjustment", "already scheduled", **args)


def test_update_payroll_bank_account(desk):
    p = _clean_employee(desk.db)
    old = desk.db.one("SELECT * FROM personnel_bank_accounts WHERE personnel_id = ? AND status = 'active'", p["id"])
    wrong = f"{(int(p['ssn_last4']) + 1) % 10000:04d}"
    args = dict(personnel_id=p["id"], ssn_last4=p["ssn_last4"], bank_name="First Harbor Bank", routing_number="021000021", account_number="123456789")
    desk.refused("update_payroll_bank_account", "verification failed", **{**args, "ssn_last4": wrong})
    desk.refused("update_payroll_bank_account", "routing number", **{**args, "routing_number": "021000022"})
    desk.refused("update_payroll_bank_account", "4 to 17 digits", **{**args, "account_number": "12-34"})
    out = desk.ok("update_payroll_bank_account", **args)
    assert out["account_last4"] == "6789"
    assert desk.db.one("SELECT status, replaced_on FROM personnel_bank_accounts WHERE id = ?", old["id"]) == {
        "status": "replaced",
        "replaced_on": desk.db.today.isoformat(),
    }
    assert desk.db.scalar("SELECT COUNT(*) FROM personnel_bank_accounts WHERE personnel_id = ? AND status = 'active'", p["id"]) == 1
    desk.refused("update_payroll_bank_account", "already paid into", **args)


def test_expense_claims(desk):
    p = _clean_employee(desk.db)
    args = dict(personnel_id=p["id"], category="meals", amount=42.5, incurred_on="2026-05-04", description=INJECTION)
    out = desk.ok("submit_expense_claim", **args)
    assert desk.db.one("SELECT status, amount, description FROM expense_claims WHERE id = ?", out["claim_id"]) == {
        "status": "submitted",
        "amount": 42.5,
        "description": INJECTION,
    }
    desk.refused("submit_expense_claim", "already covers", **args)
    desk.refused("submit_expense_claim", "in the future", **{**args, "incurred_on": "2026-05-12"})
    desk.refused("submit_expense_claim", "whole number of cents", **{**args, "amount": 10.005})
    desk.refused("submit_expense_claim", "must be positive", **{**args, "amount": 0})
    desk.refused("submit_expense_claim", "must not be empty", **{**args, "amount": 12.0, "description": "  "})
    desk.refused("review_expense_claim", "direct manager", claim_id=out["claim_id"], approver_id=p["id"], decision="approved")
    desk.ok("review_expense_claim", claim_id=out["claim_id"], approver_id=p["manager_id"], decision="approved")
    assert desk.db.one("SELECT status, decided_by FROM expense_claims WHERE id = ?", out["claim_id"]) == {
        "status": "approved",
        "decided_by": p["manager_id"],
    }
    desk.refused("review_expense_claim", "already approved", claim_id=out["claim_id"], approver_id=p["manager_id"], decision="rejected")
    desk.refused("review_expense_claim", "no expense claim", claim_id=10**6, approver_id=p["manager_id"], decision="rejected")


def test_notes_and_escalations(desk):
    p = _clean_employee(desk.db)
    desk.ok("add_hr_note", personnel_id=p["id"], body="Refused: less than 14 days' notice.")
    desk.refused("add_hr_note", "must not be empty", personnel_id=p["id"], body=" ")
    desk.refused("add_hr_note", "no employee", personnel_id=10**6, body="x")
    e = desk.ok("escalate_hr_case", personnel_id=p["id"], category="compensation_approval", reason="15% raise requested.")
    assert desk.db.scalar("SELECT status FROM hr_escalations WHERE id = ?", e["escalation_id"]) == "open"
    desk.refused("escalate_hr_case", "already open", personnel_id=p["id"], category="compensation_approval", reason="again")
    desk.ok("escalate_hr_case", personnel_id=p["id"], category="security", reason="Manager asked to change the bank account.")
    desk.refused("escalate_hr_case", "invalid arguments", personnel_id=p["id"], category="urgent", reason="x")


# -- tasks ------------------------------------------------------------------------------------------------


def test_tasks_load_with_every_family(domain):
    tasks = domain.tasks
    assert len(tasks) >= 60
    families = collections.Counter(t.family for t in tasks)
    for family in FAMILIES:
        assert families[family] >= 6, families
    assert max(len(t.gold) for t in tasks) >= 8 and min(len(t.gold) for t in tasks) <= 2
