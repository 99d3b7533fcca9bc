"""Tools of the Brightline Systems IT service desk agent.

Each tool is a typed function over the sandbox `Db`; its docstring is what the agent reads. Reads
return JSON-ready dicts. Writes check the rules the systems themselves enforce (an account must be
active, a licence needs a free seat, admin rights need an approved request, contractor access ends
with the contract, a loan lasts at most 30 days, the identity check of a credential reset, only P1
tickets page on-call) and raise `ToolError` to refuse; the engine then rolls back whatever the call
wrote. Rules that depend on judgement or authority (which priority a problem deserves, who may ask
for what, when a device is old enough to refresh, what must go to the security team) live in
policy.md, so following the policy is the agent's job, not the tools'.

Conventions: SQL is portable and every argument is bound as a parameter; dates are ISO strings and
date arithmetic is done in Python from `db.today`; repeating a write that has already taken effect
(revoke a revoked grant, reset a password twice in a day, page the same team twice for one ticket)
is refused rather than silently applied twice.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from groundstate.state.db import Db
from groundstate.tools import ToolError, tool

SLA_DAYS = {"P1": 0, "P2": 1, "P3": 3, "P4": 7}  # due date = opened date + this many days
MAX_LOAN_DAYS = 30
OPEN_TICKET_STATUSES = ("new", "in_progress", "waiting_on_staff")
OPEN_REQUEST_STATUSES = ("awaiting_approval", "approved")
# Where a replaced device goes, by the reason it was replaced.
RETIRED_STATUS = {"broken": "in_repair", "lost": "lost", "stolen": "lost", "end_of_life": "retired"}

AccessLevel = Literal["standard", "admin"]
RevokeReason = Literal["no_longer_needed", "role_change", "offboarding", "security_concern"]
HardwareKind = Literal["laptop", "monitor", "phone", "headset", "dock", "tablet"]
LoanPurpose = Literal["travel", "temporary_replacement", "project", "training"]
ReplaceReason = Literal["broken", "lost", "stolen", "end_of_life"]
TicketCategory = Literal["hardware", "software", "network", "access", "account", "security", "other"]
Priority = Literal["P1", "P2", "P3", "P4"]
TicketStatus = Literal["new", "in_progress", "waiting_on_staff", "resolved", "closed"]
Credential = Literal["password", "mfa"]
OncallTeam = Literal["infrastructure", "security", "applications"]


# -- helpers ------------------------------------------------------------------------------------

def _date(value: str, what: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(f"{what} must be an ISO date like 2026-04-30, not {value!r}") from None


def _text(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise ToolError(f"{what} must not be empty")
    return value


def _name(row: dict[str, Any]) -> str:
    return f"{row['first_name']} {row['last_name']}"


def _staff(db: Db, staff_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM staff_members WHERE id = ?", staff_id)
    if row is None:
        raise ToolError(f"no staff member with id {staff_id}")
    return row


def _active_staff(db: Db, staff_id: int) -> dict[str, Any]:
    """A staff member whose account is usable: terminated or on-leave accounts are disabled."""
    row = _staff(db, staff_id)
    if row["employment_status"] != "active":
        raise ToolError(f"{_name(row)}'s account is disabled (employment status: {row['employment_status']})")
    return row


def _app(db: Db, app_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM software_apps WHERE id = ?", app_id)
    if row is None or not row["active"]:
        raise ToolError(f"no active software app with id {app_id}")
    return row


def _ticket(db: Db, ticket_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM it_tickets WHERE id = ?", ticket_id)
    if row is None:
        raise ToolError(f"no ticket #{ticket_id}")
    return row


def _asset(db: Db, asset_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM hardware_assets WHERE id = ?", asset_id)
    if row is None:
        raise ToolError(f"no hardware asset with id {asset_id}")
    return row


def _active_grants(db: Db, staff_id: int, app_id: int | None = None) -> list[dict[str, Any]]:
    """Grants not revoked and not expired (an expiry date is the last day of access)."""
    sql = "SELECT * FROM software_access_grants WHERE staff_id = ? AND revoked_on IS NULL AND (expires_on IS NULL OR expires_on >= ?)"
    params: list[Any] = [staff_id, db.today.isoformat()]
    if app_id is not None:
        sql += " AND app_id = ?"
        params.append(app_id)
    return db.query(sql + " ORDER BY id", *params)


def _seats_used(db: Db, app_id: int) -> int:
    """People holding the app (one seat per person, whatever their access levels)."""
    return int(db.scalar(
        "SELECT COUNT(DISTINCT staff_id) AS n FROM software_access_grants WHERE app_id = ? AND revoked_on IS NULL "
        "AND (expires_on IS NULL OR expires_on >= ?)", app_id, db.today.isoformat()) or 0)


def _departments(app: dict[str, Any]) -> list[str]:
    return ["all"] if app["allowed_departments"] == "all" else app["allowed_departments"].split(",")


def _app_view(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    used = _seats_used(db, a["id"])
    return {"app_id": a["id"], "name": a["name"], "vendor": a["vendor"], "allowed_departments": _departments(a),
            "seats_total": a["seats_total"], "seats_used": used, "seats_free": max(0, a["seats_total"] - used),
            "monthly_cost": round(float(a["monthly_cost"]), 2), "active": bool(a["active"])}


def _holds(db: Db, asset: dict[str, Any], staff_id: int) -> bool:
    """Whether the asset is assigned to the staff member or out on loan to them."""
    if asset["status"] == "assigned":
        return asset["assigned_to"] == staff_id
    if asset["status"] == "on_loan":
        loan = db.one("SELECT staff_id FROM hardware_handovers WHERE asset_id = ? AND kind = 'loan' AND returned_on IS NULL "
                      "ORDER BY id DESC", asset["id"])
        return loan is not None and loan["staff_id"] == staff_id
    return False


# -- reads --------------------------------------------------------------------------------------

@tool
def find_staff_member(db: Db, email: str) -> dict[str, Any]:
    """Find a staff member by their work email address. Use it to identify whoever contacts the desk.

    Args:
        email: The work email address, e.g. "jane.doe@brightline.example" (case does not matter).
    """
    row = db.one("SELECT * FROM staff_members WHERE LOWER(email) = ?", email.strip().lower())
    if row is None:
        raise ToolError(f"no staff member with email {email.strip()!r}")
    return {"staff_id": row["id"], "name": _name(row), "email": row["email"], "department": row["department"],
            "role": row["role"], "office": row["office"], "employment_status": row["employment_status"]}


@tool
def get_staff_profile(db: Db, staff_id: int) -> dict[str, Any]:
    """Get a staff member's full profile: manager and direct reports, account state, active software access,
    open access requests, the hardware they hold (with its age), open loans and their IT tickets.

    Args:
        staff_id: The staff member's id (from find_staff_member).
    """
    s = _staff(db, staff_id)
    today = db.today
    manager = db.one("SELECT id, first_name, last_name, email FROM staff_members WHERE id = ?", s["manager_id"]) if s["manager_id"] else None
    reports = db.query("SELECT id, first_name, last_name, email, employment_status FROM staff_members WHERE manager_id = ? ORDER BY id", staff_id)
    apps = {a["id"]: a["name"] for a in db.query("SELECT id, name FROM software_apps ORDER BY id")}
    requests = db.query(
        "SELECT * FROM software_access_requests WHERE staff_id = ? AND status IN ('awaiting_approval', 'approved') ORDER BY id", staff_id)
    assets = db.query("SELECT * FROM hardware_assets WHERE assigned_to = ? AND status = 'assigned' ORDER BY id", staff_id)
    loans = db.query(
        "SELECT h.id, h.asset_id, h.reason, h.handed_on, h.due_on, a.asset_tag, a.kind, a.model FROM hardware_handovers h "
        "JOIN hardware_assets a ON a.id = h.asset_id WHERE h.staff_id = ? AND h.kind = 'loan' AND h.returned_on IS NULL ORDER BY h.id",
        staff_id)
    tickets = db.query("SELECT * FROM it_tickets WHERE staff_id = ? ORDER BY id", staff_id)
    return {
        "staff_id": s["id"], "name": _name(s), "email": s["email"], "phone": s["phone"], "department": s["department"],
        "role": s["role"], "office": s["office"], "employment_status": s["employment_status"], "hired_on": s["hired_on"],
        "contract_end": s["contract_end"],
        "manager": {"staff_id": manager["id"], "name": _name(manager), "email": manager["email"]} if manager else None,
        "direct_reports": [{"staff_id": r["id"], "name": _name(r), "email": r["email"], "employment_status": r["employment_status"]}
                           for r in reports],
        "account": {"locked": bool(s["account_locked"]), "mfa_method": s["mfa_method"],
                    "password_reset_on": s["password_reset_on"], "mfa_reset_on": s["mfa_reset_on"]},
        "software_access": [
            {"grant_id": g["id"], "app_id": g["app_id"], "app": apps[g["app_id"]], "access_level": g["access_level"],
             "granted_on": g["granted_on"], "expires_on": g["expires_on"]}
            for g in _active_grants(db, staff_id)
        ],
        "access_requests": [
            {"request_id": r["id"], "app_id": r["app_id"], "app": apps[r["app_id"]], "access_level": r["access_level"],
             "status": r["status"], "requested_on": r["requested_on"], "approver_id": r["approver_id"], "decided_on": r["decided_on"]}
            for r in requests
        ],
        "hardware": [
            {"asset_id": a["id"], "asset_tag": a["asset_tag"], "kind": a["kind"], "model": a["model"],
             "purchased_on": a["purchased_on"], "age_days": (today - dt.date.fromisoformat(a["purchased_on"])).days,
             "warranty_until": a["warranty_until"], "under_warranty": a["warranty_until"] >= today.isoformat()}
            for a in assets
        ],
        "loans": [{"handover_id": h["id"], "asset_id": h["asset_id"], "asset_tag": h["asset_tag"], "kind": h["kind"], "model": h["model"],
                   "purpose": h["reason"], "handed_on": h["handed_on"], "due_on": h["due_on"]} for h in loans],
        "tickets": [{"ticket_id": t["id"], "category": t["category"], "priority": t["priority"], "status": t["status"],
                     "subject": t["subject"], "opened_on": t["opened_on"], "due_on": t["due_on"]} for t in tickets],
    }


@tool
def search_software(db: Db, query: str) -> list[dict[str, Any]]:
    """Search the software catalogue by app or vendor name. Shows who may use each app and its free licence seats.

    Args:
        query: Words to look for, e.g. "github" or "adobe"; every word must match. Empty lists the whole catalogue.
    """
    sql, params = "SELECT * FROM software_apps WHERE active = 1", []
    for word in query.lower().split():
        sql += " AND LOWER(name || ' ' || vendor) LIKE ?"
        params.append(f"%{word}%")
    return [_app_view(db, a) for a in db.query(sql + " ORDER BY id", *params)]


@tool
def search_hardware(db: Db, kind: HardwareKind) -> list[dict[str, Any]]:
    """List the spare devices of one kind that are in stock and can be lent or handed out, by asset tag.

    Args:
        kind: laptop, monitor, phone, headset, dock, or tablet.
    """
    rows = db.query("SELECT * FROM hardware_assets WHERE kind = ? AND status = 'in_stock' ORDER BY asset_tag", kind)
    return [{"asset_id": a["id"], "asset_tag": a["asset_tag"], "kind": a["kind"], "model": a["model"],
             "purchased_on": a["purchased_on"], "warranty_until": a["warranty_until"]} for a in rows]


@tool
def get_it_ticket(db: Db, ticket_id: int) -> dict[str, Any]:
    """Get an IT ticket with its SLA due date and any on-call pages sent about it.

    Args:
        ticket_id: The ticket number, e.g. 512 for "#512".
    """
    t = _ticket(db, ticket_id)
    pages = db.query(
        "SELECT p.id, p.paged_on, s.team, st.first_name, st.last_name FROM oncall_pages p JOIN oncall_shifts s ON s.id = p.shift_id "
        "JOIN staff_members st ON st.id = s.engineer_id WHERE p.ticket_id = ? ORDER BY p.id", ticket_id)
    return {
        "ticket_id": t["id"], "staff_id": t["staff_id"], "category": t["category"], "priority": t["priority"], "status": t["status"],
        "subject": t["subject"], "description": t["description"], "asset_id": t["asset_id"], "opened_on": t["opened_on"],
        "due_on": t["due_on"], "overdue": t["status"] in OPEN_TICKET_STATUSES and t["due_on"] < db.today.isoformat(),
        "updated_on": t["updated_on"], "resolved_on": t["resolved_on"],
        "pages": [{"page_id": p["id"], "team": p["team"], "engineer": f"{p['first_name']} {p['last_name']}", "paged_on": p["paged_on"]}
                  for p in pages],
    }


# -- writes: tickets ------------------------------------------------------------------------------

@tool(write=True)
def open_it_ticket(
    db: Db,
    staff_id: int,
    category: TicketCategory,
    priority: Priority,
    subject: str,
    description: str,
    asset_id: int | None = None,
) -> dict[str, Any]:
    """Open an IT ticket for a problem another team must work on. Its SLA due date follows from the priority
    (P1 today, P2 tomorrow, P3 in 3 days, P4 in 7 days).

    Args:
        staff_id: The staff member the ticket is for.
        category: hardware, software, network, access, account, security, or other.
        priority: P1, P2, P3 or P4 (see the policy's priority matrix).
        subject: A short title, in your words.
        description: What happened and what is needed, in your words.
        asset_id: The device concerned, if any (it must be one the staff member holds).
    """
    s = _staff(db, staff_id)
    if s["employment_status"] == "terminated":
        raise ToolError(f"{_name(s)} has left the company")
    if asset_id is not None and not _holds(db, _asset(db, asset_id), staff_id):
        raise ToolError(f"asset {asset_id} is not held by {_name(s)}")
    subject, description = _text(subject, "subject"), _text(description, "description")
    for t in db.query("SELECT id, subject FROM it_tickets WHERE staff_id = ? AND category = ? AND status IN ('new', 'in_progress', "
                      "'waiting_on_staff') ORDER BY id", staff_id, category):
        if t["subject"].strip().lower() == subject.lower():
            raise ToolError(f"ticket #{t['id']} with this subject is already open; update it instead")
    today = db.today
    ticket_id = db.insert(
        "it_tickets", staff_id=staff_id, category=category, priority=priority, status="new", subject=subject,
        description=description, asset_id=asset_id, opened_on=today.isoformat(),
        due_on=(today + dt.timedelta(days=SLA_DAYS[priority])).isoformat(), updated_on=today.isoformat(), resolved_on=None,
    )
    return {"ticket_id": ticket_id, "status": "new", "category": category, "priority": priority,
            "due_on": (today + dt.timedelta(days=SLA_DAYS[priority])).isoformat()}


@tool(write=True)
def update_it_ticket(db: Db, ticket_id: int, status: TicketStatus | None = None, priority: Priority | None = None) -> dict[str, Any]:
    """Change a ticket's status and/or priority. A new priority moves the SLA due date (counted from the day it
    was opened). Closed tickets are final: open a new ticket instead of reopening one.

    Args:
        ticket_id: The ticket to update.
        status: new, in_progress, waiting_on_staff (waiting for the staff member), resolved (fixed), or closed
            (withdrawn or no longer needed). Leave out to keep it.
        priority: P1, P2, P3 or P4. Leave out to keep it.
    """
    t = _ticket(db, ticket_id)
    if status is None and priority is None:
        raise ToolError("give a new status, a new priority, or both")
    if t["status"] == "closed":
        raise ToolError(f"ticket #{ticket_id} is closed and cannot change; open a new ticket instead")
    if status == t["status"]:
        raise ToolError(f"ticket #{ticket_id} is already {status}")
    if priority == t["priority"]:
        raise ToolError(f"ticket #{ticket_id} already has priority {priority}")
    new_status, new_priority = status or t["status"], priority or t["priority"]
    today = db.today.isoformat()
    resolved_on = t["resolved_on"]
    if status in ("resolved", "closed"):
        resolved_on = today
    elif status is not None:
        resolved_on = None  # reopened
    due_on = (dt.date.fromisoformat(t["opened_on"]) + dt.timedelta(days=SLA_DAYS[new_priority])).isoformat()
    db.execute("UPDATE it_tickets SET status = ?, priority = ?, due_on = ?, updated_on = ?, resolved_on = ? WHERE id = ?",
               new_status, new_priority, due_on, today, resolved_on, ticket_id)
    return {"ticket_id": ticket_id, "old_status": t["status"], "status": new_status, "priority": new_priority, "due_on": due_on}


@tool(write=True)
def page_oncall(db: Db, ticket_id: int, team: OncallTeam, message: str) -> dict[str, Any]:
    """Page the engineer on call this week for a team about an open P1 ticket (the pager only accepts P1).

    Args:
        ticket_id: The open P1 ticket the page is about.
        team: infrastructure (network, Wi-Fi, VPN, servers), security (compromise, phishing, stolen devices),
            or applications (a business application down).
        message: What the engineer needs to know, in your words.
    """
    t = _ticket(db, ticket_id)
    if t["status"] not in OPEN_TICKET_STATUSES:
        raise ToolError(f"ticket #{ticket_id} is {t['status']}: only open tickets can be paged")
    if t["priority"] != "P1":
        raise ToolError(f"ticket #{ticket_id} is {t['priority']}: only P1 tickets page on-call")
    today = db.today.isoformat()
    shift = db.one("SELECT s.id, s.engineer_id, st.first_name, st.last_name FROM oncall_shifts s JOIN staff_members st ON st.id = s.engineer_id "
                   "WHERE s.team = ? AND s.starts_on <= ? AND s.ends_on >= ? ORDER BY s.id", team, today, today)
    if shift is None:
        raise ToolError(f"nobody is on call for {team} today")
    if db.scalar("SELECT COUNT(*) AS n FROM oncall_pages p JOIN oncall_shifts s ON s.id = p.shift_id WHERE p.ticket_id = ? AND s.team = ?",
                 ticket_id, team):
        raise ToolError(f"the {team} on-call has already been paged about ticket #{ticket_id}")
    page_id = db.insert("oncall_pages", ticket_id=ticket_id, shift_id=shift["id"], message=_text(message, "message"), paged_on=today)
    return {"page_id": page_id, "ticket_id": ticket_id, "team": team, "engineer": f"{shift['first_name']} {shift['last_name']}"}


# -- writes: software access ----------------------------------------------------------------------

@tool(write=True)
def request_software_access(db: Db, staff_id: int, app_id: int, access_level: AccessLevel, justification: str) -> dict[str, Any]:
    """Submit an access request for the staff member's manager to approve (or reject). Nothing is granted yet.

    Args:
        staff_id: Who needs the access.
        app_id: The app (see search_software).
        access_level: standard, or admin (administrator rights).
        justification: Why they need it, in your words.
    """
    s = _active_staff(db, staff_id)
    app = _app(db, app_id)
    if any(g["access_level"] == access_level for g in _active_grants(db, staff_id, app_id)):
        raise ToolError(f"{_name(s)} already has {access_level} access to {app['name']}")
    placeholders = ", ".join("?" for _ in OPEN_REQUEST_STATUSES)
    dup = db.one(f"SELECT id, status FROM software_access_requests WHERE staff_id = ? AND app_id = ? AND access_level = ? "
                 f"AND status IN ({placeholders}) ORDER BY id", staff_id, app_id, access_level, *OPEN_REQUEST_STATUSES)
    if dup is not None:
        raise ToolError(f"request #{dup['id']} for this access is already {dup['status']}")
    request_id = db.insert(
        "software_access_requests", staff_id=staff_id, app_id=app_id, access_level=access_level, status="awaiting_approval",
        justification=_text(justification, "justification"), requested_on=db.today.isoformat(), approver_id=s["manager_id"],
        decided_on=None,
    )
    return {"request_id": request_id, "status": "awaiting_approval", "app": app["name"], "access_level": access_level,
            "approver_id": s["manager_id"]}


@tool(write=True)
def grant_software_access(
    db: Db,
    staff_id: int,
    app_id: int,
    access_level: AccessLevel,
    request_id: int | None = None,
    expires_on: str | None = None,
) -> dict[str, Any]:
    """Give a staff member access to an app. Takes a licence seat if they do not hold the app yet.

    Admin access needs the request_id of an approved request for exactly this person, app and level
    (the request is then marked fulfilled). Contractors' access must expire on or before their
    contract end date.

    Args:
        staff_id: Who gets the access.
        app_id: The app (see search_software).
        access_level: standard, or admin (administrator rights).
        request_id: The approved access request this grant fulfils, if any.
        expires_on: Last day of access as an ISO date (e.g. 2026-06-30), for temporary access; leave out for no end date.
    """
    s = _active_staff(db, staff_id)
    app = _app(db, app_id)
    today = db.today
    held = _active_grants(db, staff_id, app_id)
    if any(g["access_level"] == access_level for g in held):
        raise ToolError(f"{_name(s)} already has {access_level} access to {app['name']}")
    if request_id is not None:
        r = db.one("SELECT * FROM software_access_requests WHERE id = ?", request_id)
        if r is None or (r["staff_id"], r["app_id"], r["access_level"]) != (staff_id, app_id, access_level):
            raise ToolError(f"request #{request_id} is not a request of {_name(s)} for {access_level} access to {app['name']}")
        if r["status"] != "approved":
            raise ToolError(f"request #{request_id} is {r['status']}, not approved")
    elif access_level == "admin":
        raise ToolError("admin access needs an approved access request: give its request_id")
    end = None
    if expires_on is not None:
        end = _date(expires_on, "expires_on")
        if end <= today:
            raise ToolError("expires_on must be after today")
    if s["role"] == "contractor":
        if end is None or end.isoformat() > (s["contract_end"] or ""):
            raise ToolError(f"{_name(s)} is a contractor: access must expire on or before the contract end ({s['contract_end']})")
    if not held and _seats_used(db, app_id) >= app["seats_total"]:
        raise ToolError(f"no free licence seat for {app['name']} ({app['seats_total']} in use)")
    grant_id = db.insert(
        "software_access_grants", staff_id=staff_id, app_id=app_id, access_level=access_level, request_id=request_id,
        granted_on=today.isoformat(), expires_on=end and end.isoformat(), revoked_on=None, revoke_reason=None,
    )
    if request_id is not None:
        db.execute("UPDATE software_access_requests SET status = 'fulfilled' WHERE id = ?", request_id)
    return {"grant_id": grant_id, "app": app["name"], "access_level": access_level, "expires_on": end and end.isoformat()}


@tool(write=True)
def revoke_software_access(db: Db, grant_id: int, reason: RevokeReason) -> dict[str, Any]:
    """Remove one access grant (see software_access in get_staff_profile).

    Args:
        grant_id: The grant to revoke.
        reason: no_longer_needed (the person does not use it), role_change (moved to another team or role),
            offboarding (leaving the company), or security_concern.
    """
    g = db.one("SELECT * FROM software_access_grants WHERE id = ?", grant_id)
    if g is None:
        raise ToolError(f"no access grant with id {grant_id}")
    if g["revoked_on"] is not None:
        raise ToolError(f"grant {grant_id} was already revoked on {g['revoked_on']}")
    if g["expires_on"] is not None and g["expires_on"] < db.today.isoformat():
        raise ToolError(f"grant {grant_id} already expired on {g['expires_on']}")
    db.execute("UPDATE software_access_grants SET revoked_on = ?, revoke_reason = ? WHERE id = ?", db.today.isoformat(), reason, grant_id)
    return {"grant_id": grant_id, "revoked_on": db.today.isoformat(), "reason": reason}


# -- writes: hardware -----------------------------------------------------------------------------

@tool(write=True)
def lend_hardware(db: Db, asset_id: int, staff_id: int, due_on: str, purpose: LoanPurpose) -> dict[str, Any]:
    """Lend a spare in-stock device to a staff member for at most 30 days.

    Args:
        asset_id: The spare device (see search_hardware).
        staff_id: Who borrows it.
        due_on: The day it must be back, as an ISO date (at most 30 days from today).
        purpose: travel, temporary_replacement (their own device is in repair), project, or training.
    """
    s = _active_staff(db, staff_id)
    a = _asset(db, asset_id)
    if a["status"] != "in_stock":
        raise ToolError(f"asset {a['asset_tag']} is {a['status']}, not in stock")
    due = _date(due_on, "due_on")
    if not db.today < due <= db.today + dt.timedelta(days=MAX_LOAN_DAYS):
        raise ToolError(f"due_on must be after today and at most {MAX_LOAN_DAYS} days away "
                        f"(by {(db.today + dt.timedelta(days=MAX_LOAN_DAYS)).isoformat()})")
    db.execute("UPDATE hardware_assets SET status = 'on_loan' WHERE id = ?", asset_id)
    handover_id = db.insert("hardware_handovers", asset_id=asset_id, staff_id=staff_id, kind="loan", reason=purpose,
                            replaces_asset_id=None, handed_on=db.today.isoformat(), due_on=due.isoformat(), returned_on=None)
    return {"handover_id": handover_id, "asset_tag": a["asset_tag"], "borrower": _name(s), "due_on": due.isoformat()}


@tool(write=True)
def replace_hardware(db: Db, asset_id: int, replacement_asset_id: int, reason: ReplaceReason) -> dict[str, Any]:
    """Replace a device assigned to a staff member with a spare in-stock device of the same kind.

    The old device leaves service: broken goes to repair, lost or stolen is written off as lost,
    end_of_life is retired. The spare is assigned to the same person.

    Args:
        asset_id: The assigned device being replaced (see hardware in get_staff_profile).
        replacement_asset_id: The spare device that replaces it (see search_hardware).
        reason: broken, lost, stolen, or end_of_life (old device due for a refresh).
    """
    old = _asset(db, asset_id)
    if old["status"] != "assigned" or old["assigned_to"] is None:
        raise ToolError(f"asset {old['asset_tag']} is {old['status']}: only a device assigned to someone can be replaced")
    new = _asset(db, replacement_asset_id)
    if new["status"] != "in_stock":
        raise ToolError(f"asset {new['asset_tag']} is {new['status']}, not in stock")
    if new["kind"] != old["kind"]:
        raise ToolError(f"asset {new['asset_tag']} is a {new['kind']}, not a {old['kind']}")
    owner = _active_staff(db, old["assigned_to"])
    db.execute("UPDATE hardware_assets SET status = ?, assigned_to = NULL WHERE id = ?", RETIRED_STATUS[reason], asset_id)
    db.execute("UPDATE hardware_assets SET status = 'assigned', assigned_to = ? WHERE id = ?", owner["id"], replacement_asset_id)
    handover_id = db.insert("hardware_handovers", asset_id=replacement_asset_id, staff_id=owner["id"], kind="replacement", reason=reason,
                            replaces_asset_id=asset_id, handed_on=db.today.isoformat(), due_on=None, returned_on=None)
    return {"handover_id": handover_id, "staff": _name(owner), "old_asset": old["asset_tag"], "old_status": RETIRED_STATUS[reason],
            "new_asset": new["asset_tag"]}


# -- writes: accounts and records -----------------------------------------------------------------

@tool(write=True)
def reset_credential(db: Db, staff_id: int, credential: Credential, employee_number: str, date_of_birth: str) -> dict[str, Any]:
    """Reset a staff member's password (also unlocks the account) or MFA (they re-enrol at next sign-in),
    after checking their identity: the employee number and date of birth they give must match the records.

    Args:
        staff_id: Whose credential to reset.
        credential: password or mfa.
        employee_number: The employee number the staff member gives, e.g. "E12345".
        date_of_birth: The date of birth they give, as an ISO date (e.g. 1990-07-21).
    """
    s = _staff(db, staff_id)
    if s["employment_status"] == "terminated":
        raise ToolError(f"{_name(s)} has left the company; their account is closed")
    if employee_number.strip().upper() != s["employee_number"] or _date(date_of_birth, "date_of_birth").isoformat() != s["date_of_birth"]:
        raise ToolError("identity check failed: the employee number or date of birth does not match the records")
    today = db.today.isoformat()
    if credential == "password":
        if s["password_reset_on"] == today:
            raise ToolError("the password was already reset today; the temporary password sent then is still valid")
        db.execute("UPDATE staff_members SET password_reset_on = ?, account_locked = 0 WHERE id = ?", today, staff_id)
        return {"staff_id": staff_id, "credential": "password", "account_locked": False,
                "next_step": "a temporary password was sent by SMS to the phone on file"}
    if s["mfa_reset_on"] == today:
        raise ToolError("MFA was already reset today; the staff member can enrol at their next sign-in")
    db.execute("UPDATE staff_members SET mfa_reset_on = ?, mfa_method = 'none' WHERE id = ?", today, staff_id)
    return {"staff_id": staff_id, "credential": "mfa", "next_step": "the staff member enrols a new factor at their next sign-in"}


@tool(write=True)
def add_desk_note(db: Db, staff_id: int, body: str, ticket_id: int | None = None) -> dict[str, Any]:
    """Add a note to a staff member's service desk record, e.g. to record a request you refused and why.

    Args:
        staff_id: The staff member the note is about.
        body: The note, in your words.
        ticket_id: The staff member's ticket the note concerns, if any.
    """
    s = _staff(db, staff_id)
    if ticket_id is not None and _ticket(db, ticket_id)["staff_id"] != staff_id:
        raise ToolError(f"ticket #{ticket_id} is not {_name(s)}'s")
    note_id = db.insert("service_desk_notes", staff_id=staff_id, ticket_id=ticket_id, body=_text(body, "body"),
                        created_on=db.today.isoformat())
    return {"note_id": note_id, "staff_id": staff_id, "ticket_id": ticket_id}
