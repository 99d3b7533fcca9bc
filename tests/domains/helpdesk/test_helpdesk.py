"""The bundled `helpdesk` domain: its seed's invariants, its tools' rules and its tasks' shape.

Tools run through `Toolset.call` on engine SQLite sandboxes (the shared `sb` fixture), so refusals are
checked exactly as an agent sees them and partial writes are rolled back by the engine. The checks every
domain passes are in tests/domains/test_every_domain.py.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import random
import re
from typing import Any

from domain_testing import FAMILIES

INJECTION = "x'); DROP TABLE staff_members; --"


def call(domain, sb, name: str, **args: Any):
    return domain.tools.call(sb.connection, name, args)


def ok(domain, sb, name: str, **args: Any) -> Any:
    r = call(domain, sb, name, **args)
    assert r.ok, r.content
    return json.loads(r.content)


def refused(domain, sb, name: str, fragment: str = "", **args: Any) -> str:
    r = call(domain, sb, name, **args)
    assert not r.ok, f"{name}{args} should have been refused, got {r.content}"
    assert r.content.startswith("error:") and fragment in r.content, r.content
    return r.content


def one(sb, sql: str, *params: Any) -> dict | None:
    return sb.connection.one(sql, *params)


def scalar(sb, sql: str, *params: Any) -> Any:
    return sb.connection.scalar(sql, *params)


def today(domain) -> str:
    return domain.config.today.isoformat()


def days(domain, n: int) -> str:
    return (domain.config.today + dt.timedelta(days=n)).isoformat()


def active_staff(sb, where: str = "1 = 1", *params: Any) -> dict:
    return one(sb, f"SELECT * FROM staff_members WHERE employment_status = 'active' AND {where} ORDER BY id LIMIT 1", *params)


# -- schema and seed ----------------------------------------------------------------------------------


def test_schema_size(domain):
    assert 6 <= len(domain.tables) <= 10


def test_seed_agrees_with_the_business_date(domain, domain_module):
    assert domain.config.today == domain_module("seed").TODAY


def test_seed_scale_and_invariants(domain, sb, domain_module):
    seed = domain_module("seed")
    small, big = seed.generate(random.Random(1), scale=0.25), seed.generate(random.Random(1), scale=2.0)
    for table in ("staff_members", "software_access_grants", "hardware_assets", "it_tickets"):
        assert len(small[table]) < len(big[table]), table
    # Every active staff member has exactly one laptop, and today has an on-call engineer per team.
    assert (
        scalar(
            sb,
            "SELECT COUNT(*) FROM staff_members s WHERE employment_status = 'active' AND (SELECT COUNT(*) FROM "
            "hardware_assets a WHERE a.assigned_to = s.id AND a.kind = 'laptop') <> 1",
        )
        == 0
    )
    assert scalar(sb, "SELECT COUNT(DISTINCT team) FROM oncall_shifts WHERE starts_on <= ? AND ends_on >= ?", today(domain), today(domain)) == 3


# -- tools: shape and safety ----------------------------------------------------------------------------


def test_toolset_shape(domain):
    tools = domain.tools
    assert 8 <= len(tools.names()) <= 15
    writes = {n for n in tools.names() if tools[n].write}
    assert writes == {
        "open_it_ticket",
        "update_it_ticket",
        "page_oncall",
        "request_software_access",
        "grant_software_access",
        "revoke_software_access",
        "lend_hardware",
        "replace_hardware",
        "reset_credential",
        "add_desk_note",
    }
    source = (domain.path / "tools.py").read_text()
    assert not re.search(r"(query|one|scalar|execute)\(f\"[^\"]*\{(?!placeholders)", source), "values must be bound, not formatted into SQL"


def test_injection_strings_are_inert(domain, sb):
    staff = active_staff(sb, "role = 'employee'")
    before = scalar(sb, "SELECT COUNT(*) FROM staff_members")
    refused(domain, sb, "find_staff_member", "no staff member", email=INJECTION)
    assert ok(domain, sb, "search_software", query=INJECTION) == []
    refused(domain, sb, "get_it_ticket", "invalid arguments", ticket_id=INJECTION)
    refused(domain, sb, "lend_hardware", "invalid arguments", asset_id=1, staff_id=staff["id"], due_on=days(domain, 3), purpose=INJECTION)
    refused(
        domain,
        sb,
        "reset_credential",
        "identity check failed",
        staff_id=staff["id"],
        credential="password",
        employee_number=INJECTION,
        date_of_birth=staff["date_of_birth"],
    )
    note = ok(domain, sb, "add_desk_note", staff_id=staff["id"], body=INJECTION)
    assert scalar(sb, "SELECT body FROM service_desk_notes WHERE id = ?", note["note_id"]) == INJECTION  # stored as plain text
    assert scalar(sb, "SELECT COUNT(*) FROM staff_members") == before
    assert "unknown tool" in call(domain, sb, "drop_everything").content


# -- tools: reads ---------------------------------------------------------------------------------------


def test_reads(domain, sb):
    s = active_staff(sb, "role = 'employee' AND department = 'engineering'")
    found = ok(domain, sb, "find_staff_member", email=f"  {s['email'].upper()} ")
    assert found["staff_id"] == s["id"] and found["department"] == "engineering"
    profile = ok(domain, sb, "get_staff_profile", staff_id=s["id"])
    assert profile["manager"]["staff_id"] == s["manager_id"]
    assert "employee_number" not in json.dumps(profile) and s["date_of_birth"] not in json.dumps(profile)  # identity data stays hidden
    assert [a["kind"] for a in profile["hardware"]].count("laptop") == 1
    assert {g["app"] for g in profile["software_access"]} >= {"Slack", "Zoom"}
    laptop = next(a for a in profile["hardware"] if a["kind"] == "laptop")
    assert laptop["age_days"] == (domain.config.today - dt.date.fromisoformat(laptop["purchased_on"])).days
    github = ok(domain, sb, "search_software", query="github")
    assert [a["name"] for a in github] == ["GitHub Enterprise"] and github[0]["allowed_departments"] == ["engineering", "it"]
    assert github[0]["seats_free"] == github[0]["seats_total"] - github[0]["seats_used"] > 0
    assert "HipChat" not in {a["name"] for a in ok(domain, sb, "search_software", query="")}  # retired apps are not offered
    spares = ok(domain, sb, "search_hardware", kind="laptop")
    assert spares and [a["asset_tag"] for a in spares] == sorted(a["asset_tag"] for a in spares)
    ticket = ok(domain, sb, "get_it_ticket", ticket_id=1)
    assert ticket["ticket_id"] == 1 and "pages" in ticket
    refused(domain, sb, "find_staff_member", "no staff member", email="nobody@brightline.example")
    refused(domain, sb, "get_staff_profile", "no staff member", staff_id=10**6)
    refused(domain, sb, "search_hardware", "invalid arguments", kind="printer")


# -- tools: tickets and on-call ---------------------------------------------------------------------------


def test_open_and_update_ticket(domain, sb):
    s = active_staff(sb, "role = 'employee'")
    args = dict(staff_id=s["id"], category="network", priority="P3", subject="VPN drops", description="Drops hourly.")
    t = ok(domain, sb, "open_it_ticket", **args)
    row = one(sb, "SELECT status, priority, opened_on, due_on FROM it_tickets WHERE id = ?", t["ticket_id"])
    assert row == {"status": "new", "priority": "P3", "opened_on": today(domain), "due_on": days(domain, 3)}
    refused(domain, sb, "open_it_ticket", "already open", **{**args, "subject": " vpn DROPS "})
    refused(domain, sb, "open_it_ticket", "must not be empty", **{**args, "subject": "Other", "description": "  "})
    other_asset = scalar(sb, "SELECT id FROM hardware_assets WHERE assigned_to <> ? ORDER BY id LIMIT 1", s["id"])
    refused(domain, sb, "open_it_ticket", "is not held by", **{**args, "subject": "Monitor", "asset_id": other_asset})

    ok(domain, sb, "update_it_ticket", ticket_id=t["ticket_id"], priority="P1")
    assert scalar(sb, "SELECT due_on FROM it_tickets WHERE id = ?", t["ticket_id"]) == today(domain)
    refused(domain, sb, "update_it_ticket", "already has priority P1", ticket_id=t["ticket_id"], priority="P1")
    refused(domain, sb, "update_it_ticket", "give a new status", ticket_id=t["ticket_id"])
    ok(domain, sb, "update_it_ticket", ticket_id=t["ticket_id"], status="resolved")
    assert scalar(sb, "SELECT resolved_on FROM it_tickets WHERE id = ?", t["ticket_id"]) == today(domain)
    refused(domain, sb, "update_it_ticket", "already resolved", ticket_id=t["ticket_id"], status="resolved")
    ok(domain, sb, "update_it_ticket", ticket_id=t["ticket_id"], status="in_progress")  # reopened
    assert scalar(sb, "SELECT resolved_on FROM it_tickets WHERE id = ?", t["ticket_id"]) is None
    ok(domain, sb, "update_it_ticket", ticket_id=t["ticket_id"], status="closed")
    refused(domain, sb, "update_it_ticket", "closed and cannot change", ticket_id=t["ticket_id"], status="new")
    refused(domain, sb, "update_it_ticket", "no ticket", ticket_id=10**6, status="new")


def test_page_oncall(domain, sb):
    s = active_staff(sb, "role = 'employee'")
    p3 = ok(domain, sb, "open_it_ticket", staff_id=s["id"], category="network", priority="P3", subject="Slow", description="Slow Wi-Fi.")
    refused(domain, sb, "page_oncall", "only P1 tickets", ticket_id=p3["ticket_id"], team="infrastructure", message="help")
    p1 = ok(domain, sb, "open_it_ticket", staff_id=s["id"], category="network", priority="P1", subject="Down", description="Office down.")
    page = ok(domain, sb, "page_oncall", ticket_id=p1["ticket_id"], team="infrastructure", message="Office Wi-Fi down.")
    shift = one(
        sb, "SELECT s.team, s.starts_on, s.ends_on FROM oncall_pages p JOIN oncall_shifts s ON s.id = p.shift_id WHERE p.id = ?", page["page_id"]
    )
    assert shift["team"] == "infrastructure" and shift["starts_on"] <= today(domain) <= shift["ends_on"]
    refused(domain, sb, "page_oncall", "already been paged", ticket_id=p1["ticket_id"], team="infrastructure", message="again")
    ok(domain, sb, "page_oncall", ticket_id=p1["ticket_id"], team="security", message="Also security.")  # another team is a real page
    assert [p["team"] for p in ok(domain, sb, "get_it_ticket", ticket_id=p1["ticket_id"])["pages"]] == ["infrastructure", "security"]
    ok(domain, sb, "update_it_ticket", ticket_id=p1["ticket_id"], status="resolved")
    refused(domain, sb, "page_oncall", "only open tickets", ticket_id=p1["ticket_id"], team="applications", message="late")


# -- tools: software access --------------------------------------------------------------------------


def _app(sb, name: str) -> dict:
    return one(sb, "SELECT * FROM software_apps WHERE name = ?", name)


def _holds(sb, staff_id: int, app_id: int) -> bool:
    return bool(scalar(sb, "SELECT COUNT(*) FROM software_access_grants WHERE staff_id = ? AND app_id = ? AND revoked_on IS NULL", staff_id, app_id))


def test_request_then_grant_admin(domain, sb):
    jira = _app(sb, "Jira")
    s = active_staff(
        sb,
        "role = 'employee' AND department = 'engineering' AND NOT EXISTS (SELECT 1 FROM software_access_requests r "
        "WHERE r.staff_id = staff_members.id)",
    )
    refused(domain, sb, "grant_software_access", "needs an approved access request", staff_id=s["id"], app_id=jira["id"], access_level="admin")
    req = ok(domain, sb, "request_software_access", staff_id=s["id"], app_id=jira["id"], access_level="admin", justification="Runs the board.")
    assert req["approver_id"] == s["manager_id"]
    refused(
        domain,
        sb,
        "request_software_access",
        "already awaiting_approval",
        staff_id=s["id"],
        app_id=jira["id"],
        access_level="admin",
        justification="again",
    )
    refused(
        domain, sb, "grant_software_access", "not approved", staff_id=s["id"], app_id=jira["id"], access_level="admin", request_id=req["request_id"]
    )
    sb.connection.execute("UPDATE software_access_requests SET status = 'approved' WHERE id = ?", req["request_id"])
    figma = _app(sb, "Figma")
    refused(
        domain,
        sb,
        "grant_software_access",
        "is not a request of",
        staff_id=s["id"],
        app_id=figma["id"],
        access_level="admin",
        request_id=req["request_id"],
    )
    g = ok(domain, sb, "grant_software_access", staff_id=s["id"], app_id=jira["id"], access_level="admin", request_id=req["request_id"])
    assert one(sb, "SELECT access_level, request_id, granted_on FROM software_access_grants WHERE id = ?", g["grant_id"]) == {
        "access_level": "admin",
        "request_id": req["request_id"],
        "granted_on": today(domain),
    }
    assert scalar(sb, "SELECT status FROM software_access_requests WHERE id = ?", req["request_id"]) == "fulfilled"
    refused(
        domain,
        sb,
        "grant_software_access",
        "already has admin access",
        staff_id=s["id"],
        app_id=jira["id"],
        access_level="admin",
        request_id=req["request_id"],
    )


def test_grant_standard_rules(domain, sb):
    adobe = _app(sb, "Adobe Creative Cloud")
    s = active_staff(
        sb,
        "role = 'employee' AND department = 'marketing' AND NOT EXISTS (SELECT 1 FROM software_access_grants g "
        "WHERE g.staff_id = staff_members.id AND g.app_id = ?)",
        adobe["id"],
    )
    refused(
        domain, sb, "grant_software_access", "after today", staff_id=s["id"], app_id=adobe["id"], access_level="standard", expires_on=today(domain)
    )
    refused(domain, sb, "grant_software_access", "ISO date", staff_id=s["id"], app_id=adobe["id"], access_level="standard", expires_on="next week")
    used = ok(domain, sb, "search_software", query="adobe")[0]["seats_used"]
    sb.connection.execute("UPDATE software_apps SET seats_total = ? WHERE id = ?", used, adobe["id"])
    refused(domain, sb, "grant_software_access", "no free licence seat", staff_id=s["id"], app_id=adobe["id"], access_level="standard")
    sb.connection.execute("UPDATE software_apps SET seats_total = ? WHERE id = ?", used + 1, adobe["id"])
    g = ok(domain, sb, "grant_software_access", staff_id=s["id"], app_id=adobe["id"], access_level="standard", expires_on=days(domain, 30))
    assert g["expires_on"] == days(domain, 30) and _holds(sb, s["id"], adobe["id"])
    refused(domain, sb, "grant_software_access", "already has standard access", staff_id=s["id"], app_id=adobe["id"], access_level="standard")
    refused(
        domain, sb, "grant_software_access", "no active software app", staff_id=s["id"], app_id=_app(sb, "HipChat")["id"], access_level="standard"
    )
    gone = one(sb, "SELECT * FROM staff_members WHERE employment_status = 'terminated' ORDER BY id LIMIT 1")
    refused(domain, sb, "grant_software_access", "account is disabled", staff_id=gone["id"], app_id=adobe["id"], access_level="standard")


def test_contractor_access_ends_with_the_contract(domain, sb):
    miro = _app(sb, "Miro")
    c = active_staff(
        sb,
        "role = 'contractor' AND NOT EXISTS (SELECT 1 FROM software_access_grants g WHERE g.staff_id = staff_members.id AND g.app_id = ?)",
        miro["id"],
    )
    refused(domain, sb, "grant_software_access", "contractor", staff_id=c["id"], app_id=miro["id"], access_level="standard")
    after = (dt.date.fromisoformat(c["contract_end"]) + dt.timedelta(days=1)).isoformat()
    refused(domain, sb, "grant_software_access", "contractor", staff_id=c["id"], app_id=miro["id"], access_level="standard", expires_on=after)
    ok(domain, sb, "grant_software_access", staff_id=c["id"], app_id=miro["id"], access_level="standard", expires_on=c["contract_end"])


def test_revoke_software_access(domain, sb):
    g = one(sb, "SELECT * FROM software_access_grants WHERE revoked_on IS NULL AND expires_on IS NULL ORDER BY id LIMIT 1")
    out = ok(domain, sb, "revoke_software_access", grant_id=g["id"], reason="role_change")
    assert out["revoked_on"] == today(domain)
    assert one(sb, "SELECT revoked_on, revoke_reason FROM software_access_grants WHERE id = ?", g["id"]) == {
        "revoked_on": today(domain),
        "revoke_reason": "role_change",
    }
    refused(domain, sb, "revoke_software_access", "already revoked", grant_id=g["id"], reason="role_change")
    refused(domain, sb, "revoke_software_access", "invalid arguments", grant_id=g["id"], reason="because")
    refused(domain, sb, "revoke_software_access", "no access grant", grant_id=10**6, reason="offboarding")
    assert g["app_id"] not in {x["app_id"] for x in ok(domain, sb, "get_staff_profile", staff_id=g["staff_id"])["software_access"]}


# -- tools: hardware --------------------------------------------------------------------------------------


def test_lend_hardware(domain, sb):
    s = active_staff(sb, "role = 'employee'")
    spare = ok(domain, sb, "search_hardware", kind="tablet")[0]
    refused(domain, sb, "lend_hardware", "at most 30 days", asset_id=spare["asset_id"], staff_id=s["id"], due_on=days(domain, 31), purpose="travel")
    refused(domain, sb, "lend_hardware", "after today", asset_id=spare["asset_id"], staff_id=s["id"], due_on=today(domain), purpose="travel")
    out = ok(domain, sb, "lend_hardware", asset_id=spare["asset_id"], staff_id=s["id"], due_on=days(domain, 30), purpose="training")
    assert scalar(sb, "SELECT status FROM hardware_assets WHERE id = ?", spare["asset_id"]) == "on_loan"
    assert one(sb, "SELECT kind, reason, due_on, returned_on FROM hardware_handovers WHERE id = ?", out["handover_id"]) == {
        "kind": "loan",
        "reason": "training",
        "due_on": days(domain, 30),
        "returned_on": None,
    }
    refused(domain, sb, "lend_hardware", "not in stock", asset_id=spare["asset_id"], staff_id=s["id"], due_on=days(domain, 5), purpose="travel")
    assert spare["asset_id"] in {x["asset_id"] for x in ok(domain, sb, "get_staff_profile", staff_id=s["id"])["loans"]}


def test_replace_hardware(domain, sb):
    s = active_staff(sb, "role = 'employee'")
    old = one(sb, "SELECT * FROM hardware_assets WHERE assigned_to = ? AND kind = 'laptop'", s["id"])
    spare = ok(domain, sb, "search_hardware", kind="laptop")[0]
    monitor = ok(domain, sb, "search_hardware", kind="monitor")[0]
    refused(domain, sb, "replace_hardware", "not a laptop", asset_id=old["id"], replacement_asset_id=monitor["asset_id"], reason="broken")
    out = ok(domain, sb, "replace_hardware", asset_id=old["id"], replacement_asset_id=spare["asset_id"], reason="stolen")
    assert one(sb, "SELECT status, assigned_to FROM hardware_assets WHERE id = ?", old["id"]) == {"status": "lost", "assigned_to": None}
    assert one(sb, "SELECT status, assigned_to FROM hardware_assets WHERE id = ?", spare["asset_id"]) == {
        "status": "assigned",
        "assigned_to": s["id"],
    }
    assert one(sb, "SELECT kind, reason, replaces_asset_id FROM hardware_handovers WHERE id = ?", out["handover_id"]) == {
        "kind": "replacement",
        "reason": "stolen",
        "replaces_asset_id": old["id"],
    }
    second = ok(domain, sb, "search_hardware", kind="laptop")[0]
    refused(domain, sb, "replace_hardware", "only a device assigned", asset_id=old["id"], replacement_asset_id=second["asset_id"], reason="broken")
    refused(domain, sb, "replace_hardware", "not in stock", asset_id=spare["asset_id"], replacement_asset_id=old["id"], reason="broken")


# -- tools: credentials and notes ---------------------------------------------------------------------------


def test_reset_credential(domain, sb):
    s = active_staff(sb, "role = 'employee' AND password_reset_on IS NULL")
    sb.connection.execute("UPDATE staff_members SET account_locked = 1 WHERE id = ?", s["id"])
    wrong_dob = (dt.date.fromisoformat(s["date_of_birth"]) + dt.timedelta(days=1)).isoformat()
    refused(
        domain,
        sb,
        "reset_credential",
        "identity check failed",
        staff_id=s["id"],
        credential="password",
        employee_number=s["employee_number"],
        date_of_birth=wrong_dob,
    )
    assert scalar(sb, "SELECT account_locked FROM staff_members WHERE id = ?", s["id"]) == 1
    args = dict(staff_id=s["id"], employee_number=f" {s['employee_number'].lower()} ", date_of_birth=s["date_of_birth"])
    ok(domain, sb, "reset_credential", credential="password", **args)
    assert one(sb, "SELECT account_locked, password_reset_on FROM staff_members WHERE id = ?", s["id"]) == {
        "account_locked": 0,
        "password_reset_on": today(domain),
    }
    refused(domain, sb, "reset_credential", "already reset today", credential="password", **args)
    ok(domain, sb, "reset_credential", credential="mfa", **args)
    assert one(sb, "SELECT mfa_method, mfa_reset_on FROM staff_members WHERE id = ?", s["id"]) == {
        "mfa_method": "none",
        "mfa_reset_on": today(domain),
    }
    refused(domain, sb, "reset_credential", "already reset today", credential="mfa", **args)
    gone = one(sb, "SELECT * FROM staff_members WHERE employment_status = 'terminated' ORDER BY id LIMIT 1")
    refused(
        domain,
        sb,
        "reset_credential",
        "has left the company",
        staff_id=gone["id"],
        credential="password",
        employee_number=gone["employee_number"],
        date_of_birth=gone["date_of_birth"],
    )


def test_add_desk_note(domain, sb):
    t = one(sb, "SELECT * FROM it_tickets ORDER BY id LIMIT 1")
    n = ok(domain, sb, "add_desk_note", staff_id=t["staff_id"], body="Refused: not their report.", ticket_id=t["id"])
    assert one(sb, "SELECT staff_id, ticket_id, created_on FROM service_desk_notes WHERE id = ?", n["note_id"]) == {
        "staff_id": t["staff_id"],
        "ticket_id": t["id"],
        "created_on": today(domain),
    }
    ok(domain, sb, "add_desk_note", staff_id=t["staff_id"], body="Second note.")  # a second note is a real record
    refused(domain, sb, "add_desk_note", "must not be empty", staff_id=t["staff_id"], body="  ")
    other = scalar(sb, "SELECT id FROM staff_members WHERE id <> ? ORDER BY id LIMIT 1", t["staff_id"])
    refused(domain, sb, "add_desk_note", "is not", staff_id=other, body="x", ticket_id=t["id"])
    refused(domain, sb, "add_desk_note", "no staff member", staff_id=10**6, body="x")


# -- tasks ----------------------------------------------------------------------------------------------


def test_tasks_load_with_every_family(domain):
    tasks = domain.tasks
    assert len(tasks) >= 150
    families = collections.Counter(t.family for t in tasks)
    for family in FAMILIES:
        assert families[family] >= 15, families
    calls = [len(t.gold) for t in tasks]
    assert min(calls) == 1 and max(calls) == 8
