"""Tools of the Brightwater Systems HR service desk agent.

Each tool is a typed function over the sandbox `Db`; its docstring is what the agent reads. Reads
return JSON-ready dicts. Writes check the rules the HR systems themselves enforce (leave balances and
overlaps, who is whose manager, salary bands, SSN verification, routing checksums, mandatory
checklist items) and raise `ToolError` to refuse; the engine then rolls back whatever the call wrote.
Rules that need judgement (notice periods, blackouts, the 10% raise limit, expense limits and the
submission window, when to escalate) live in policy.md, so following the policy is the agent's job.

Conventions: SQL is portable and every argument is bound as a parameter; money is handled in whole
cents and stored rounded to 2 decimals; leave days are stored rounded to 2 decimals; dates are ISO
strings and all date arithmetic is done here from `db.today`; repeating a write that has already
taken effect (deciding a decided request, re-adding the active bank account) is refused rather than
applied twice.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from groundstate.state.db import Db
from groundstate.tools import ToolError, tool

LeaveType = Literal["annual", "sick"]
LeaveDecision = Literal["approved", "rejected"]
ChecklistOutcome = Literal["done", "waived"]
RaiseReason = Literal["merit", "market_adjustment", "retention", "correction"]
ExpenseCategory = Literal["travel", "lodging", "meals", "equipment", "training", "other"]
ClaimFilter = Literal["any", "submitted", "approved", "rejected", "reimbursed"]
ClaimDecision = Literal["approved", "rejected"]
EscalationCategory = Literal["compensation_approval", "expense_approval", "policy_exception", "security"]

# Company holidays (also listed in policy.md and seed.py; a test keeps the three in step).
HOLIDAYS = frozenset(dt.date.fromisoformat(d) for d in (
    "2026-01-01", "2026-01-19", "2026-02-16", "2026-05-25", "2026-06-19", "2026-07-03",
    "2026-09-07", "2026-11-26", "2026-11-27", "2026-12-24", "2026-12-25",
))
SICK_LEAVE_LOOKBACK_DAYS = 30

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DIGITS = re.compile(r"^\d+$")


# -- helpers ------------------------------------------------------------------------------------

def working_days(start: dt.date, end: dt.date) -> int:
    """Working days in [start, end]: Monday to Friday, company holidays excluded."""
    n, d = 0, start
    while d <= end:
        if d.weekday() < 5 and d not in HOLIDAYS:
            n += 1
        d += dt.timedelta(days=1)
    return n


def _cents(amount: Any) -> int:
    """Money as whole cents: exact comparisons whatever float the database hands back."""
    return int(round(float(amount) * 100))


def _dollars(cents: int) -> float:
    return round(cents / 100, 2)


def _money_arg(amount: float, what: str) -> int:
    cents = _cents(amount)
    if cents <= 0:
        raise ToolError(f"{what} must be positive")
    if abs(amount * 100 - cents) > 1e-6:
        raise ToolError(f"{amount} is not a whole number of cents")
    return cents


def _days(x: Any) -> float:
    return round(float(x), 2)


def _date(value: str, what: str) -> dt.date:
    value = value.strip()
    try:
        if not _ISO_DATE.match(value):
            raise ValueError
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ToolError(f"{what} must be an ISO date like 2026-06-01, not {value!r}") from None


def _text(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise ToolError(f"{what} must not be empty")
    return value


def _person(db: Db, personnel_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM personnel WHERE id = ?", personnel_id)
    if row is None:
        raise ToolError(f"no employee with personnel id {personnel_id}")
    return row


def _employed(db: Db, personnel_id: int) -> dict[str, Any]:
    p = _person(db, personnel_id)
    if p["status"] == "terminated":
        raise ToolError(f"{_name(p)} left the company on {p['termination_date']}; their records are closed")
    return p


def _name(p: dict[str, Any]) -> str:
    return f"{p['first_name']} {p['last_name']}"


def _require_manager(employee: dict[str, Any], manager_id: int, action: str) -> None:
    """The HR systems only accept decisions from the employee's direct manager."""
    if employee["manager_id"] != manager_id:
        raise ToolError(f"only {_name(employee)}'s direct manager (personnel id {employee['manager_id']}) can {action}; "
                        f"personnel id {manager_id} is not")


def _balance(db: Db, personnel_id: int, leave_type: str, year: int) -> dict[str, Any]:
    """A leave balance with what is pending and still available (all in days)."""
    b = db.one("SELECT * FROM leave_balances WHERE personnel_id = ? AND leave_type = ? AND year = ?", personnel_id, leave_type, year)
    if b is None:
        raise ToolError(f"personnel id {personnel_id} has no {leave_type} leave balance for {year}")
    pending = sum(
        _days(r["days"]) for r in db.query(
            "SELECT days FROM leave_requests WHERE personnel_id = ? AND leave_type = ? AND status = 'pending' "
            "AND start_date >= ? AND start_date <= ? ORDER BY id",
            personnel_id, leave_type, f"{year}-01-01", f"{year}-12-31",
        )
    )
    credited = _days(b["carried_over_days"]) + _days(b["accrued_days"])
    return {
        "balance_id": b["id"], "leave_type": leave_type, "year": year,
        "entitlement_days": _days(b["entitlement_days"]), "carried_over_days": _days(b["carried_over_days"]),
        "accrued_days": _days(b["accrued_days"]), "used_days": _days(b["used_days"]), "pending_days": _days(pending),
        "available_days": _days(credited - _days(b["used_days"]) - pending),
    }


def _add_used(db: Db, balance_id: int, delta: float) -> None:
    used = db.scalar("SELECT used_days FROM leave_balances WHERE id = ?", balance_id)
    db.execute("UPDATE leave_balances SET used_days = ? WHERE id = ?", _days(_days(used) + delta), balance_id)


def _routing_ok(routing: str) -> bool:
    """ABA routing number checksum: 3·(d1+d4+d7) + 7·(d2+d5+d8) + (d3+d6+d9) ≡ 0 (mod 10)."""
    d = [int(c) for c in routing]
    return (3 * (d[0] + d[3] + d[6]) + 7 * (d[1] + d[4] + d[7]) + d[2] + d[5] + d[8]) % 10 == 0


def _request_view(r: dict[str, Any]) -> dict[str, Any]:
    return {"request_id": r["id"], "leave_type": r["leave_type"], "start_date": r["start_date"], "end_date": r["end_date"],
            "days": _days(r["days"]), "status": r["status"], "requested_on": r["requested_on"],
            "decided_on": r["decided_on"], "decided_by": r["decided_by"]}


def _claim_view(c: dict[str, Any]) -> dict[str, Any]:
    return {"claim_id": c["id"], "personnel_id": c["personnel_id"], "category": c["category"], "amount": _dollars(_cents(c["amount"])),
            "incurred_on": c["incurred_on"], "description": c["description"], "status": c["status"],
            "submitted_on": c["submitted_on"], "decided_on": c["decided_on"], "decided_by": c["decided_by"]}


# -- reads --------------------------------------------------------------------------------------

@tool
def find_personnel(db: Db, query: str) -> dict[str, Any]:
    """Find an employee by work email or employee number. Use it to identify the caller before acting.

    Args:
        query: The work email (e.g. "ana.silva@brightwater.example") or employee number (e.g. "E10234"); case does not matter.
    """
    q = query.strip().lower()
    row = db.one("SELECT * FROM personnel WHERE LOWER(work_email) = ? OR LOWER(employee_no) = ?", q, q)
    if row is None:
        raise ToolError(f"no employee with work email or employee number {query.strip()!r}")
    dept = db.one("SELECT name FROM hr_departments WHERE id = ?", row["department_id"])
    return {"personnel_id": row["id"], "employee_no": row["employee_no"], "first_name": row["first_name"], "last_name": row["last_name"],
            "work_email": row["work_email"], "department": dept["name"], "job_title": row["job_title"], "status": row["status"],
            "manager_id": row["manager_id"]}


@tool
def get_personnel(db: Db, personnel_id: int) -> dict[str, Any]:
    """Get an employee's file: job, department, manager, grade and salary band, salary, scheduled pay changes,
    payroll bank account (masked), onboarding checklist and direct reports.

    Args:
        personnel_id: The employee's personnel id (from find_personnel or a direct_reports list).
    """
    p = _person(db, personnel_id)
    dept = db.one("SELECT * FROM hr_departments WHERE id = ?", p["department_id"])
    band = db.one("SELECT * FROM salary_bands WHERE id = ?", p["band_id"])
    manager = db.one("SELECT id, first_name, last_name FROM personnel WHERE id = ?", p["manager_id"]) if p["manager_id"] else None
    reports = db.query("SELECT id, first_name, last_name, job_title, status FROM personnel WHERE manager_id = ? ORDER BY id", personnel_id)
    items = db.query("SELECT * FROM onboarding_items WHERE personnel_id = ? ORDER BY id", personnel_id)
    account = db.one("SELECT * FROM personnel_bank_accounts WHERE personnel_id = ? AND status = 'active' ORDER BY id", personnel_id)
    scheduled = db.query("SELECT * FROM salary_adjustments WHERE personnel_id = ? AND status = 'scheduled' ORDER BY id", personnel_id)
    return {
        "personnel_id": p["id"], "employee_no": p["employee_no"], "first_name": p["first_name"], "last_name": p["last_name"],
        "work_email": p["work_email"], "job_title": p["job_title"], "employment_type": p["employment_type"], "status": p["status"],
        "hire_date": p["hire_date"], "termination_date": p["termination_date"],
        "department": {"department_id": dept["id"], "code": dept["code"], "name": dept["name"]},
        "manager": {"personnel_id": manager["id"], "name": _name(manager)} if manager else None,
        "grade": band["grade"], "band": {"title": band["title"], "min_salary": _dollars(_cents(band["min_salary"])),
                                         "max_salary": _dollars(_cents(band["max_salary"]))},
        "salary": _dollars(_cents(p["salary"])),
        "scheduled_salary_adjustments": [
            {"adjustment_id": s["id"], "new_salary": _dollars(_cents(s["new_salary"])), "reason": s["reason"], "effective_date": s["effective_date"]}
            for s in scheduled
        ],
        "bank_account": None if account is None else {
            "bank_name": account["bank_name"], "routing_number": account["routing_number"],
            "account_last4": account["account_number"][-4:], "since": account["added_on"]},
        "onboarding_checklist": [
            {"item_id": i["id"], "item": i["item"], "mandatory": bool(i["mandatory"]), "due_date": i["due_date"], "status": i["status"],
             "completed_on": i["completed_on"]}
            for i in items
        ],
        "direct_reports": [{"personnel_id": r["id"], "name": _name(r), "job_title": r["job_title"], "status": r["status"]} for r in reports],
    }


@tool
def get_leave_overview(db: Db, personnel_id: int) -> dict[str, Any]:
    """Get an employee's leave for this year: balances (with available days), leave requests, the blackout
    periods of their department and the remaining company holidays.

    Args:
        personnel_id: The employee's personnel id.
    """
    p = _person(db, personnel_id)
    year = db.today.year
    balances = []
    for leave_type in ("annual", "sick"):
        try:
            balances.append(_balance(db, personnel_id, leave_type, year))
        except ToolError:
            pass  # no balance row (e.g. a former employee): nothing to show
    requests = db.query("SELECT * FROM leave_requests WHERE personnel_id = ? AND end_date >= ? ORDER BY start_date, id",
                        personnel_id, f"{year}-01-01")
    blackouts = db.query("SELECT * FROM leave_blackouts WHERE department_id = ? AND end_date >= ? ORDER BY start_date, id",
                         p["department_id"], db.today.isoformat())
    return {
        "personnel_id": p["id"], "name": _name(p), "today": db.today.isoformat(),
        "balances": [{k: v for k, v in b.items() if k != "balance_id"} for b in balances],
        "requests": [_request_view(r) for r in requests],
        "department_blackouts": [{"label": b["label"], "start_date": b["start_date"], "end_date": b["end_date"]} for b in blackouts],
        "company_holidays_left": sorted(d.isoformat() for d in HOLIDAYS if d >= db.today and d.year == year),
    }


@tool
def list_expense_claims(db: Db, personnel_id: int, status: ClaimFilter = "any") -> list[dict[str, Any]]:
    """List an employee's expense claims, newest expense first.

    Args:
        personnel_id: The claimant's personnel id.
        status: Only claims with this status, or "any".
    """
    _person(db, personnel_id)
    sql, params = "SELECT * FROM expense_claims WHERE personnel_id = ?", [personnel_id]
    if status != "any":
        sql += " AND status = ?"
        params.append(status)
    return [_claim_view(c) for c in db.query(sql + " ORDER BY incurred_on DESC, id DESC", *params)]


# -- writes: leave ------------------------------------------------------------------------------

@tool(write=True)
def submit_leave_request(db: Db, personnel_id: int, leave_type: LeaveType, start_date: str, end_date: str) -> dict[str, Any]:
    """Book leave for an employee; the tool counts the working days and checks the balance.

    Annual leave must start after today and is created `pending` until the direct manager decides.
    Sick leave is recorded for days already taken (up to today, at most 30 days back) and is approved
    at once. Requests may not overlap the employee's pending or approved leave, and one request
    covers one calendar year.

    Args:
        personnel_id: The employee taking the leave.
        leave_type: annual or sick.
        start_date: First day of leave, ISO date (e.g. "2026-06-15").
        end_date: Last day of leave (inclusive), ISO date.
    """
    p = _employed(db, personnel_id)
    start, end = _date(start_date, "start_date"), _date(end_date, "end_date")
    if end < start:
        raise ToolError(f"end_date {end} is before start_date {start}")
    if start.year != end.year:
        raise ToolError("a request covers one calendar year: split it at the new year")
    today = db.today
    if leave_type == "annual" and start <= today:
        raise ToolError(f"annual leave must start after today ({today}); absences already taken are recorded as sick leave")
    if leave_type == "sick":
        if end > today:
            raise ToolError(f"sick leave is recorded for days already taken: end_date {end} is after today ({today})")
        if (today - start).days > SICK_LEAVE_LOOKBACK_DAYS:
            raise ToolError(f"sick leave can be recorded at most {SICK_LEAVE_LOOKBACK_DAYS} days back; {start} is too long ago")
    days = working_days(start, end)
    if days == 0:
        raise ToolError(f"{start} to {end} contains no working days")
    clash = db.one(
        "SELECT id, start_date, end_date, status FROM leave_requests WHERE personnel_id = ? AND status IN ('pending', 'approved') "
        "AND start_date <= ? AND end_date >= ? ORDER BY id",
        personnel_id, end.isoformat(), start.isoformat(),
    )
    if clash:
        raise ToolError(f"overlaps {_name(p)}'s {clash['status']} leave request #{clash['id']} ({clash['start_date']} to {clash['end_date']})")
    balance = _balance(db, personnel_id, leave_type, start.year)
    if days > balance["available_days"] + 1e-9:
        raise ToolError(f"{days} working days requested but only {balance['available_days']} {leave_type} days are available")
    status = "pending" if leave_type == "annual" else "approved"
    request_id = db.insert(
        "leave_requests", personnel_id=personnel_id, leave_type=leave_type, start_date=start.isoformat(), end_date=end.isoformat(),
        days=float(days), status=status, requested_on=today.isoformat(),
        decided_on=today.isoformat() if status == "approved" else None, decided_by=None, cancelled_on=None,
    )
    if status == "approved":
        _add_used(db, balance["balance_id"], days)
    return {"request_id": request_id, "leave_type": leave_type, "start_date": start.isoformat(), "end_date": end.isoformat(),
            "days": float(days), "status": status, "available_days_after": _days(balance["available_days"] - days)}


@tool(write=True)
def decide_leave_request(db: Db, request_id: int, approver_id: int, decision: LeaveDecision) -> dict[str, Any]:
    """Approve or reject a pending leave request, for the requester's direct manager. Approval deducts the days.

    Args:
        request_id: The leave request (see get_leave_overview of the requester).
        approver_id: The personnel id of the manager deciding (the caller).
        decision: approved or rejected.
    """
    r = db.one("SELECT * FROM leave_requests WHERE id = ?", request_id)
    if r is None:
        raise ToolError(f"no leave request #{request_id}")
    if r["status"] != "pending":
        raise ToolError(f"leave request #{request_id} is already {r['status']}")
    _require_manager(_person(db, r["personnel_id"]), approver_id, "decide this request")
    today = db.today.isoformat()
    if decision == "approved":
        balance = _balance(db, r["personnel_id"], r["leave_type"], int(r["start_date"][:4]))
        _add_used(db, balance["balance_id"], _days(r["days"]))
    db.execute("UPDATE leave_requests SET status = ?, decided_on = ?, decided_by = ? WHERE id = ?", decision, today, approver_id, request_id)
    return {"request_id": request_id, "status": decision, "days": _days(r["days"]), "decided_by": approver_id}


@tool(write=True)
def cancel_leave_request(db: Db, request_id: int, personnel_id: int) -> dict[str, Any]:
    """Cancel an employee's own pending or approved leave that has not started yet; approved days return to the balance.

    Args:
        request_id: The leave request to cancel.
        personnel_id: The employee whose request it is (the caller).
    """
    r = db.one("SELECT * FROM leave_requests WHERE id = ?", request_id)
    if r is None:
        raise ToolError(f"no leave request #{request_id}")
    if r["personnel_id"] != personnel_id:
        raise ToolError(f"leave request #{request_id} is not a request of personnel id {personnel_id}")
    if r["status"] not in ("pending", "approved"):
        raise ToolError(f"leave request #{request_id} is already {r['status']}")
    if dt.date.fromisoformat(r["start_date"]) <= db.today:
        raise ToolError(f"leave request #{request_id} started on {r['start_date']}: only leave that has not started can be cancelled")
    if r["status"] == "approved":
        balance = _balance(db, personnel_id, r["leave_type"], int(r["start_date"][:4]))
        _add_used(db, balance["balance_id"], -_days(r["days"]))
    db.execute("UPDATE leave_requests SET status = 'cancelled', cancelled_on = ? WHERE id = ?", db.today.isoformat(), request_id)
    return {"request_id": request_id, "status": "cancelled", "days_returned": _days(r["days"]) if r["status"] == "approved" else 0.0}


# -- writes: onboarding -------------------------------------------------------------------------

@tool(write=True)
def update_onboarding_item(db: Db, item_id: int, status: ChecklistOutcome, confirmed_by: int) -> dict[str, Any]:
    """Complete a new hire's onboarding checklist item: done (finished) or waived (not needed; manager only, never mandatory items).

    When no item is left pending, the new hire's status changes from onboarding to active.

    Args:
        item_id: The checklist item (see onboarding_checklist in get_personnel).
        status: done or waived.
        confirmed_by: The personnel id of the caller: the new hire or their direct manager.
    """
    item = db.one("SELECT * FROM onboarding_items WHERE id = ?", item_id)
    if item is None:
        raise ToolError(f"no onboarding item {item_id}")
    if item["status"] != "pending":
        raise ToolError(f"onboarding item {item_id} ({item['item']}) is already {item['status']}")
    p = _employed(db, item["personnel_id"])
    if confirmed_by not in (p["id"], p["manager_id"]):
        raise ToolError(f"only {_name(p)} or their direct manager can confirm checklist items; personnel id {confirmed_by} cannot")
    if status == "waived":
        if item["mandatory"]:
            raise ToolError(f"{item['item']} is mandatory and can never be waived")
        if confirmed_by != p["manager_id"]:
            raise ToolError("only the new hire's direct manager can waive a checklist item")
    today = db.today.isoformat()
    db.execute("UPDATE onboarding_items SET status = ?, completed_on = ?, completed_by = ? WHERE id = ?", status, today, confirmed_by, item_id)
    left = db.scalar("SELECT COUNT(*) AS n FROM onboarding_items WHERE personnel_id = ? AND status = 'pending'", p["id"])
    activated = False
    if left == 0 and p["status"] == "onboarding":
        db.execute("UPDATE personnel SET status = 'active' WHERE id = ?", p["id"])
        activated = True
    return {"item_id": item_id, "item": item["item"], "status": status, "items_pending": int(left), "employee_activated": activated}


# -- writes: pay --------------------------------------------------------------------------------

@tool(write=True)
def schedule_salary_adjustment(
    db: Db, personnel_id: int, requested_by: int, new_salary: float, reason: RaiseReason, effective_date: str
) -> dict[str, Any]:
    """Schedule a change to an employee's annual salary, requested by their direct manager; payroll applies it on the effective date.

    The new salary must lie within the band of the employee's grade; decreases are for corrections
    only; one scheduled change per employee at a time.

    Args:
        personnel_id: The employee whose salary changes.
        requested_by: The personnel id of the requesting manager (the caller).
        new_salary: The new annual salary in dollars, e.g. 88400.00.
        reason: merit, market_adjustment, retention, or correction.
        effective_date: The first day of a coming month, ISO date (e.g. "2026-07-01").
    """
    p = _employed(db, personnel_id)
    _require_manager(p, requested_by, "request a salary change")
    pending = db.one("SELECT id, effective_date FROM salary_adjustments WHERE personnel_id = ? AND status = 'scheduled' ORDER BY id", personnel_id)
    if pending:
        raise ToolError(f"adjustment #{pending['id']} is already scheduled for {pending['effective_date']}")
    cents, current = _money_arg(new_salary, "new_salary"), _cents(p["salary"])
    if cents == current:
        raise ToolError(f"{_name(p)} already earns ${_dollars(current):,.2f}")
    if cents < current and reason != "correction":
        raise ToolError("a salary decrease can only be a correction")
    band = db.one("SELECT * FROM salary_bands WHERE id = ?", p["band_id"])
    lo, hi = _cents(band["min_salary"]), _cents(band["max_salary"])
    if not lo <= cents <= hi:
        raise ToolError(f"${_dollars(cents):,.2f} is outside grade {band['grade']}'s band (${_dollars(lo):,.2f} to ${_dollars(hi):,.2f})")
    effective = _date(effective_date, "effective_date")
    if effective.day != 1 or effective <= db.today:
        raise ToolError(f"effective_date must be the first day of a coming month, not {effective}")
    adjustment_id = db.insert(
        "salary_adjustments", personnel_id=personnel_id, requested_by=requested_by, old_salary=_dollars(current), new_salary=_dollars(cents),
        reason=reason, effective_date=effective.isoformat(), status="scheduled", recorded_on=db.today.isoformat(),
    )
    return {"adjustment_id": adjustment_id, "personnel_id": personnel_id, "old_salary": _dollars(current), "new_salary": _dollars(cents),
            "change_percent": round((cents - current) * 100 / current, 2), "reason": reason, "effective_date": effective.isoformat(),
            "status": "scheduled"}


@tool(write=True)
def update_payroll_bank_account(
    db: Db, personnel_id: int, ssn_last4: str, bank_name: str, routing_number: str, account_number: str
) -> dict[str, Any]:
    """Change the bank account an employee's salary is paid into, after verifying them with the last four digits of their SSN.

    The previous account is kept on file as replaced.

    Args:
        personnel_id: The employee (the caller themself).
        ssn_last4: The last four digits of the employee's Social Security number, as they give them.
        bank_name: The bank's name, e.g. "First Harbor Bank".
        routing_number: The 9-digit ABA routing number.
        account_number: The account number (4 to 17 digits).
    """
    p = _employed(db, personnel_id)
    if ssn_last4.strip() != p["ssn_last4"]:
        raise ToolError("identity verification failed: those digits do not match the employee's record")
    bank_name = _text(bank_name, "bank_name")
    routing, account = routing_number.strip(), account_number.strip()
    if len(routing) != 9 or not _DIGITS.match(routing) or not _routing_ok(routing):
        raise ToolError(f"{routing!r} is not a valid 9-digit ABA routing number")
    if not 4 <= len(account) <= 17 or not _DIGITS.match(account):
        raise ToolError("the account number must be 4 to 17 digits")
    current = db.one("SELECT * FROM personnel_bank_accounts WHERE personnel_id = ? AND status = 'active' ORDER BY id", personnel_id)
    today = db.today.isoformat()
    if current is not None:
        if (current["routing_number"], current["account_number"]) == (routing, account):
            raise ToolError("salary is already paid into that account")
        db.execute("UPDATE personnel_bank_accounts SET status = 'replaced', replaced_on = ? WHERE id = ?", today, current["id"])
    account_id = db.insert("personnel_bank_accounts", personnel_id=personnel_id, bank_name=bank_name, routing_number=routing,
                           account_number=account, status="active", added_on=today, replaced_on=None)
    return {"bank_account_id": account_id, "personnel_id": personnel_id, "bank_name": bank_name, "routing_number": routing,
            "account_last4": account[-4:], "status": "active"}


# -- writes: expenses ---------------------------------------------------------------------------

@tool(write=True)
def submit_expense_claim(
    db: Db, personnel_id: int, category: ExpenseCategory, amount: float, incurred_on: str, description: str
) -> dict[str, Any]:
    """Submit an expense claim for an employee's own business expense; it waits for their manager's review.

    Args:
        personnel_id: The employee who paid (the caller).
        category: travel, lodging, meals, equipment, training, or other.
        amount: Dollars to reimburse, e.g. 42.50.
        incurred_on: The date of the expense, ISO date (not in the future).
        description: What the expense was, in your words.
    """
    _employed(db, personnel_id)
    cents = _money_arg(amount, "amount")
    incurred = _date(incurred_on, "incurred_on")
    if incurred > db.today:
        raise ToolError(f"incurred_on {incurred} is in the future")
    description = _text(description, "description")
    for c in db.query("SELECT id, amount FROM expense_claims WHERE personnel_id = ? AND category = ? AND incurred_on = ? AND status <> 'rejected' "
                      "ORDER BY id", personnel_id, category, incurred.isoformat()):
        if _cents(c["amount"]) == cents:
            raise ToolError(f"claim #{c['id']} already covers this {category} expense of ${_dollars(cents):.2f} on {incurred}")
    claim_id = db.insert("expense_claims", personnel_id=personnel_id, category=category, amount=_dollars(cents), incurred_on=incurred.isoformat(),
                         description=description, status="submitted", submitted_on=db.today.isoformat(), decided_on=None, decided_by=None)
    return {"claim_id": claim_id, "category": category, "amount": _dollars(cents), "incurred_on": incurred.isoformat(), "status": "submitted"}


@tool(write=True)
def review_expense_claim(db: Db, claim_id: int, approver_id: int, decision: ClaimDecision) -> dict[str, Any]:
    """Approve or reject a submitted expense claim, for the claimant's direct manager. Approved claims are paid with the next payroll.

    Args:
        claim_id: The claim (see list_expense_claims of the claimant).
        approver_id: The personnel id of the manager deciding (the caller).
        decision: approved or rejected.
    """
    c = db.one("SELECT * FROM expense_claims WHERE id = ?", claim_id)
    if c is None:
        raise ToolError(f"no expense claim #{claim_id}")
    if c["status"] != "submitted":
        raise ToolError(f"expense claim #{claim_id} is already {c['status']}")
    _require_manager(_person(db, c["personnel_id"]), approver_id, "review this claim")
    db.execute("UPDATE expense_claims SET status = ?, decided_on = ?, decided_by = ? WHERE id = ?",
               decision, db.today.isoformat(), approver_id, claim_id)
    return {"claim_id": claim_id, "status": decision, "amount": _dollars(_cents(c["amount"])), "decided_by": approver_id}


# -- writes: records ----------------------------------------------------------------------------

@tool(write=True)
def add_hr_note(db: Db, personnel_id: int, body: str) -> dict[str, Any]:
    """Add a note to an employee's file, e.g. to record a request you refused and why.

    Args:
        personnel_id: The employee whose file gets the note.
        body: The note, in your words.
    """
    _person(db, personnel_id)
    note_id = db.insert("hr_notes", personnel_id=personnel_id, body=_text(body, "body"), created_on=db.today.isoformat())
    return {"note_id": note_id, "personnel_id": personnel_id}


@tool(write=True)
def escalate_hr_case(db: Db, personnel_id: int, category: EscalationCategory, reason: str) -> dict[str, Any]:
    """Hand a case to the HR lead: raises or expenses above your limits, security concerns, or an exception the caller insists on.

    Args:
        personnel_id: The employee the case is about.
        category: compensation_approval, expense_approval, policy_exception, or security.
        reason: What the HR lead needs to know, in your words (include amounts and dates).
    """
    _person(db, personnel_id)
    open_case = db.one("SELECT id FROM hr_escalations WHERE personnel_id = ? AND category = ? AND status = 'open' ORDER BY id",
                       personnel_id, category)
    if open_case:
        raise ToolError(f"escalation #{open_case['id']} is already open for this employee and category")
    escalation_id = db.insert("hr_escalations", personnel_id=personnel_id, category=category, status="open",
                              reason=_text(reason, "reason"), created_on=db.today.isoformat())
    return {"escalation_id": escalation_id, "personnel_id": personnel_id, "category": category, "status": "open"}
