"""Deterministic seed for the HR world of Brightwater Systems.

`generate(rng, scale)` returns rows per table in foreign-key order. Every draw comes from `rng`, and
dates are computed from the fixed business date `TODAY`, so the same seed gives the same world on
every machine. `scale` multiplies the number of staff per team and so everything that hangs off
people (balances, leave, checklists, pay history, bank accounts, claims, notes); the departments,
pay grades and blackout calendar are fixed.

The rows agree with each other the way the tools keep them: a balance's used days are the approved
leave of that year, a new hire is `onboarding` exactly while a checklist item is pending, a salary
is the last applied adjustment's new salary, and each employee has one active bank account.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

from groundstate.domains import _kit
from groundstate.domains._kit import People, Rows, business_date, day_between, digits, first_of_month, iso, round_money, routing_number, scaled

TODAY = business_date(Path(__file__).parent)
YEAR = TODAY.year
EMAIL_DOMAIN = "brightwater.example"

# Company holidays (tools.py counts working days with the same list).
HOLIDAYS = frozenset(
    dt.date.fromisoformat(d)
    for d in (
        "2026-01-01",
        "2026-01-19",
        "2026-02-16",
        "2026-05-25",
        "2026-06-19",
        "2026-07-03",
        "2026-09-07",
        "2026-11-26",
        "2026-11-27",
        "2026-12-24",
        "2026-12-25",
    )
)

FIRST_NAMES = [*_kit.FIRST_NAMES, "Anika", "Kwame", "Lena", "Marco", "Nadia", "Rafael", "Sana", "Viktor", "Elena", "Tariq"]
LAST_NAMES = [*_kit.LAST_NAMES, "Mensah", "Ibrahim", "Larsen", "Costa", "Moreau", "Schmidt", "Sato", "Ivanova", "Reyes", "Shah"]

# (code, name, cost centre, the individual contributors' role)
DEPARTMENTS = [
    ("ENG", "Engineering", "CC-1100", "Software Engineer"),
    ("PRD", "Product", "CC-1200", "Product Manager"),
    ("DAT", "Data & Analytics", "CC-1300", "Data Analyst"),
    ("SAL", "Sales", "CC-2100", "Account Executive"),
    ("MKT", "Marketing", "CC-2200", "Marketing Specialist"),
    ("CSU", "Customer Success", "CC-2300", "Customer Success Manager"),
    ("OPS", "Operations", "CC-3100", "Operations Coordinator"),
    ("FIN", "Finance", "CC-4100", "Financial Analyst"),
    ("LGL", "Legal", "CC-4200", "Legal Counsel"),
    ("HRO", "People Operations", "CC-4300", "People Partner"),
]

# (grade, title, min, max): IC grades G1-G4, managers G5-G6, department heads G7-G8.
SALARY_BANDS = [
    ("G1", "Associate", 42000.0, 58000.0),
    ("G2", "Professional", 52000.0, 72000.0),
    ("G3", "Senior Professional", 65000.0, 90000.0),
    ("G4", "Lead", 80000.0, 110000.0),
    ("G5", "Manager", 95000.0, 130000.0),
    ("G6", "Senior Manager", 115000.0, 155000.0),
    ("G7", "Director", 140000.0, 190000.0),
    ("G8", "Vice President", 175000.0, 250000.0),
]
IC_TITLE = {1: "Associate {role}", 2: "{role}", 3: "Senior {role}", 4: "Lead {role}"}

# Department blackout periods of the year (no annual leave), by department code.
BLACKOUTS = {
    "FIN": [
        ("Q1 close", "2026-03-23", "2026-04-03"),
        ("Q2 close", "2026-06-22", "2026-07-02"),
        ("Q3 close", "2026-09-21", "2026-10-02"),
        ("Year-end close", "2026-12-14", "2026-12-31"),
    ],
    "SAL": [
        ("Q2 quarter-end push", "2026-06-15", "2026-06-30"),
        ("Q3 quarter-end push", "2026-09-14", "2026-09-30"),
        ("Q4 quarter-end push", "2026-12-07", "2026-12-23"),
    ],
    "ENG": [("Platform 5.0 release freeze", "2026-07-27", "2026-08-07"), ("Year-end change freeze", "2026-12-14", "2026-12-31")],
    "OPS": [("Peak season", "2026-11-16", "2026-12-04")],
    "CSU": [("Annual renewals window", "2026-09-28", "2026-10-09")],
    "MKT": [("Spring campaign launch", "2026-04-20", "2026-04-24"), ("Product launch week", "2026-10-12", "2026-10-16")],
    "PRD": [("Annual planning week", "2026-09-14", "2026-09-18")],
    "LGL": [("Annual audit", "2026-06-01", "2026-06-05")],
    "HRO": [("Benefits open enrollment", "2026-11-02", "2026-11-13")],
    "DAT": [("Q2 board reporting", "2026-07-06", "2026-07-10")],
}

# (item, mandatory, due days after the hire date)
ONBOARDING_ITEMS = [
    ("laptop_setup", 0, 0),
    ("badge_access", 0, 1),
    ("payroll_enrollment", 1, 7),
    ("policy_acknowledgement", 1, 7),
    ("security_training", 1, 14),
    ("benefits_enrollment", 0, 30),
]

# (bank, routing prefix): the ninth routing digit is the ABA check digit.
BANKS = [
    ("First Harbor Bank", "02100002"),
    ("Pinecrest Credit Union", "32407123"),
    ("Union Ledger Bank", "07100001"),
    ("Summit National Bank", "12200066"),
    ("Riverbend Savings", "26107436"),
    ("Lakeshore Federal", "07200080"),
    ("Cascade Community Bank", "12510010"),
    ("Meridian Trust", "05300044"),
]

EXPENSES = {  # category -> (weight, low, high, descriptions)
    "travel": (
        30,
        35.0,
        900.0,
        [
            "Flight to the Chicago client workshop",
            "Train tickets to the Boston office",
            "Taxi from the airport",
            "Mileage for customer site visits",
            "Rental car for the Denver offsite",
        ],
    ),
    "lodging": (15, 120.0, 820.0, ["Hotel for the Austin sales kickoff", "Two nights at the conference hotel", "Hotel near the client site"]),
    "meals": (25, 12.0, 75.0, ["Team lunch with a candidate", "Dinner while travelling for the workshop", "Client breakfast meeting"]),
    "equipment": (
        12,
        19.0,
        480.0,
        ["Noise-cancelling headset", "External monitor for the home office", "Ergonomic keyboard", "USB-C docking station"],
    ),
    "training": (10, 49.0, 1400.0, ["Online course on data modelling", "Industry conference ticket", "Certification exam fee", "Technical books"]),
    "other": (8, 9.0, 140.0, ["Courier fee for signed contracts", "Printing of workshop materials", "Parking at the client office"]),
}

NOTE_BODIES = [
    "Employee asked how annual leave accrues; explained the monthly credit and the carry-over cap.",
    "Asked for a copy of the last payslip; pointed to the payroll portal.",
    "Asked about the expense limits for meals; explained the $75 per-claim limit.",
    "Manager asked how to waive a badge for a remote hire; explained that only optional items can be waived.",
    "Employee confirmed their home address for tax forms; no change needed.",
    "Asked when an approved expense claim will be paid; explained it goes out with the next payroll.",
]
ESCALATION_REASONS = {
    "compensation_approval": "Manager requested a 14% retention raise; above the 10% desk limit.",
    "expense_approval": "Manager wants to approve a $1,850.00 conference claim; above the $1,000.00 limit.",
    "policy_exception": "Employee asks for leave during the quarter-end blackout for a family wedding.",
    "security": "A caller asked to change a colleague's payroll bank account; no change made.",
}


def working_days(start: dt.date, end: dt.date) -> int:
    n, d = 0, start
    while d <= end:
        if d.weekday() < 5 and d not in HOLIDAYS:
            n += 1
        d += dt.timedelta(days=1)
    return n


def generate(rng: random.Random, scale: float = 1.0) -> Rows:
    """The world's rows per table, in foreign-key insertion order; every column present in every row."""
    departments = [{"id": i, "code": c, "name": n, "cost_center": cc} for i, (c, n, cc, _) in enumerate(DEPARTMENTS, start=1)]
    bands = [{"id": i, "grade": g, "title": t, "min_salary": lo, "max_salary": hi} for i, (g, t, lo, hi) in enumerate(SALARY_BANDS, start=1)]
    personnel = _personnel(rng, scale, bands)
    blackouts = _blackouts(departments)
    requests, balances = _leave(rng, personnel, departments, blackouts)
    items = _onboarding(rng, personnel)
    adjustments = _salary_history(rng, personnel, bands)
    accounts = _bank_accounts(rng, personnel)
    claims = _claims(rng, personnel)
    notes = _notes(rng, scaled(40, scale), personnel)
    escalations = _escalations(rng, scaled(8, scale), personnel)
    return {
        "hr_departments": departments,
        "salary_bands": bands,
        "personnel": personnel,
        "leave_balances": balances,
        "leave_requests": requests,
        "leave_blackouts": blackouts,
        "onboarding_items": items,
        "salary_adjustments": adjustments,
        "personnel_bank_accounts": accounts,
        "expense_claims": claims,
        "hr_notes": notes,
        "hr_escalations": escalations,
    }


# -- people ------------------------------------------------------------------------------------------


def _personnel(rng: random.Random, scale: float, bands: list[dict]) -> list[dict]:
    """Per department: a head (G7/G8), 3-5 managers (G5/G6) under the head, and ICs (G1-G4) under each manager."""
    rows: list[dict] = []
    people = People(rng, EMAIL_DOMAIN, FIRST_NAMES, LAST_NAMES)

    def salary(grade: int) -> float:
        band = bands[grade - 1]
        return float(round(rng.uniform(band["min_salary"], band["max_salary"] - 4000) / 100) * 100)

    def person(
        dept_id: int,
        manager_id: int | None,
        grade: int,
        title: str,
        status: str,
        hired: dt.date,
        left: dt.date | None = None,
        part_time: bool = False,
    ) -> dict:
        first, last, email = people.draw()
        pid = len(rows) + 1
        row = {
            "id": pid,
            "employee_no": f"E{10000 + pid}",
            "first_name": first,
            "last_name": last,
            "work_email": email,
            "department_id": dept_id,
            "manager_id": manager_id,
            "job_title": title,
            "band_id": grade,
            "salary": salary(grade),
            "employment_type": "part_time" if part_time else "full_time",
            "status": status,
            "hire_date": hired.isoformat(),
            "termination_date": iso(left),
            "ssn_last4": f"{rng.randint(0, 9999):04d}",
        }
        rows.append(row)
        return row

    for dept_id, (_, name, _, role) in enumerate(DEPARTMENTS, start=1):
        head_grade = rng.choice([7, 8])
        head = person(
            dept_id,
            None,
            head_grade,
            f"{'VP' if head_grade == 8 else 'Director'} of {name}",
            "active",
            day_between(rng, dt.date(2014, 1, 1), dt.date(2020, 12, 31)),
        )
        for _ in range(rng.randint(3, 5)):
            grade = rng.choice([5, 5, 6])
            manager = person(
                dept_id,
                head["id"],
                grade,
                f"{'Senior ' if grade == 6 else ''}{name} Manager",
                "active",
                day_between(rng, dt.date(2015, 1, 1), dt.date(2023, 12, 31)),
            )
            for _ in range(scaled(rng.randint(5, 10), scale)):
                grade = rng.choices([1, 2, 3, 4], weights=[20, 35, 30, 15])[0]
                title = IC_TITLE[grade].format(role=role)
                roll = rng.random()
                if roll < 0.05:  # started in the last few weeks: still working through the checklist
                    person(dept_id, manager["id"], grade, title, "onboarding", TODAY - dt.timedelta(days=rng.randint(3, 25)))
                elif roll < 0.09:
                    hired = day_between(rng, dt.date(2016, 1, 1), dt.date(2024, 6, 30))
                    person(
                        dept_id,
                        manager["id"],
                        grade,
                        title,
                        "terminated",
                        hired,
                        left=day_between(rng, hired + dt.timedelta(days=300), TODAY - dt.timedelta(days=10)),
                    )
                else:
                    # Recent hires are more frequent: the company grows.
                    hired = TODAY - dt.timedelta(days=min(int(rng.expovariate(1 / 900)) + 30, 3700))
                    person(dept_id, manager["id"], grade, title, "active", hired, part_time=rng.random() < 0.08)
    return rows


# -- leave -------------------------------------------------------------------------------------------


def _blackouts(departments: list[dict]) -> list[dict]:
    rows = []
    for d in departments:
        for label, start, end in BLACKOUTS[d["code"]]:
            rows.append({"id": len(rows) + 1, "department_id": d["id"], "label": label, "start_date": start, "end_date": end})
    return rows


def annual_entitlement(p: dict) -> float:
    """Yearly annual leave: 20 days, 22 after 2 years, 25 after 5 (tenure on Jan 1); part-time staff get 60%."""
    tenure = (dt.date(YEAR, 1, 1) - dt.date.fromisoformat(p["hire_date"])).days / 365.25
    days = 25.0 if tenure >= 5 else 22.0 if tenure >= 2 else 20.0
    return round(days * (0.6 if p["employment_type"] == "part_time" else 1.0), 2)


def accrual_credits(p: dict) -> int:
    """Monthly credits so far this year: one on each first of the month the employee was already employed."""
    hired = dt.date.fromisoformat(p["hire_date"])
    return sum(1 for m in range(1, TODAY.month + 1) if dt.date(YEAR, m, 1) > hired)


def _leave(rng, personnel, departments, blackouts):  # noqa: C901 - one row's rules in the order they draw from the rng; a split would change no logic
    """Leave requests of this year (plus some history) and the balances they imply."""
    dept_blackouts: dict[int, list[tuple[str, str]]] = {}
    for b in blackouts:
        dept_blackouts.setdefault(b["department_id"], []).append((b["start_date"], b["end_date"]))
    requests: list[dict] = []
    balances: list[dict] = []

    for p in personnel:
        if p["status"] == "terminated":
            continue
        hired = dt.date.fromisoformat(p["hire_date"])
        entitlement = annual_entitlement(p)
        accrued = round(entitlement * accrual_credits(p) / 12, 2)
        tenure_days = (dt.date(YEAR, 1, 1) - hired).days
        carried = (
            0.0 if tenure_days < 0 else rng.choice([0.0, 0.0, 1.0, 2.0, 2.5, 3.0, 4.0, 5.0]) if tenure_days > 365 else rng.choice([0.0, 1.0, 2.0])
        )
        sick_entitlement = 6.0 if p["employment_type"] == "part_time" else 10.0
        budget = {"annual": carried + accrued, "sick": sick_entitlement}
        used = {"annual": 0.0, "sick": 0.0}
        taken: list[tuple[dt.date, dt.date]] = []
        blocked = dept_blackouts.get(p["department_id"], [])

        def free(start: dt.date, end: dt.date, annual: bool, taken: list = taken, blocked: list = blocked) -> bool:
            if any(s <= end and start <= e for s, e in taken):
                return False
            return not annual or not any(dt.date.fromisoformat(s) <= end and start <= dt.date.fromisoformat(e) for s, e in blocked)

        def add(
            leave_type, start, end, status, requested, decided=None, decided_by=None, cancelled=None, *, p=p, taken=taken, budget=budget, used=used
        ):
            days = working_days(start, end)
            requests.append(
                {
                    "id": len(requests) + 1,
                    "personnel_id": p["id"],
                    "leave_type": leave_type,
                    "start_date": start.isoformat(),
                    "end_date": end.isoformat(),
                    "days": float(days),
                    "status": status,
                    "requested_on": requested.isoformat(),
                    "decided_on": iso(decided),
                    "decided_by": decided_by,
                    "cancelled_on": iso(cancelled),
                }
            )
            taken.append((start, end))
            if status in ("approved", "pending"):
                budget[leave_type] -= days
            if status == "approved":
                used[leave_type] += days

        def span(lo: dt.date, hi: dt.date, length: int) -> tuple[dt.date, dt.date] | None:
            """A Monday-based stretch of `length` working days in [lo, hi], or None."""
            if hi < lo:
                return None
            start = day_between(rng, lo, hi)
            start += dt.timedelta(days=(7 - start.weekday()) % 7)  # next Monday
            end = start + dt.timedelta(days=length - 1)
            if end > hi or working_days(start, end) == 0:
                return None
            return start, end

        start_of_year = max(dt.date(YEAR, 1, 5), hired + dt.timedelta(days=30))
        has_manager = p["manager_id"] is not None
        # Annual leave already taken this year.
        for _ in range(rng.choice([0, 1, 1, 2]) if has_manager else 0):
            s = span(start_of_year, TODAY - dt.timedelta(days=7), rng.randint(1, 5))
            if s and free(*s, annual=True) and working_days(*s) <= budget["annual"]:
                requested = s[0] - dt.timedelta(days=rng.randint(15, 45))
                add("annual", *s, "approved", requested, requested + dt.timedelta(days=rng.randint(1, 3)), p["manager_id"])
        # Leave booked for later this year: approved, or still waiting for the manager.
        if has_manager and rng.random() < 0.4:
            s = span(TODAY + dt.timedelta(days=14), dt.date(YEAR, 12, 18), rng.randint(2, 5))
            if s and free(*s, annual=True) and working_days(*s) <= budget["annual"]:
                if rng.random() < 0.6:
                    requested = TODAY - dt.timedelta(days=rng.randint(5, 40))
                    add("annual", *s, "approved", requested, requested + dt.timedelta(days=rng.randint(1, 3)), p["manager_id"])
                else:
                    add("annual", *s, "pending", TODAY - dt.timedelta(days=rng.randint(0, 6)))
        # A sick day or two.
        if rng.random() < 0.35 and start_of_year < TODAY - dt.timedelta(days=3):
            s = span(start_of_year, TODAY - dt.timedelta(days=3), rng.randint(1, 2))
            if s and free(*s, annual=False):
                recorded = min(s[1] + dt.timedelta(days=rng.randint(0, 1)), TODAY)
                add("sick", *s, "approved", recorded, recorded)
        # History that does not count: a rejected or a cancelled request.
        if has_manager and rng.random() < 0.15:
            s = span(start_of_year, TODAY - dt.timedelta(days=20), rng.randint(1, 4))
            if s and free(*s, annual=True):
                requested = s[0] - dt.timedelta(days=rng.randint(15, 40))
                if rng.random() < 0.5:
                    add("annual", *s, "rejected", requested, requested + dt.timedelta(days=2), p["manager_id"])
                else:
                    add(
                        "annual",
                        *s,
                        "cancelled",
                        requested,
                        requested + dt.timedelta(days=2),
                        p["manager_id"],
                        cancelled=s[0] - dt.timedelta(days=rng.randint(1, 10)),
                    )

        for leave_type, ent, acc, carry in (("annual", entitlement, accrued, carried), ("sick", sick_entitlement, sick_entitlement, 0.0)):
            balances.append(
                {
                    "id": len(balances) + 1,
                    "personnel_id": p["id"],
                    "leave_type": leave_type,
                    "year": YEAR,
                    "entitlement_days": ent,
                    "carried_over_days": carry,
                    "accrued_days": acc,
                    "used_days": round(used[leave_type], 2),
                }
            )
    return requests, balances


# -- onboarding ----------------------------------------------------------------------------------------


def _onboarding(rng, personnel):
    """Checklists of everyone hired in the last year; only `onboarding` staff still have pending items."""
    rows = []
    for p in personnel:
        hired = dt.date.fromisoformat(p["hire_date"])
        if p["status"] == "terminated" or (TODAY - hired).days > 365:
            continue
        onboarding = p["status"] == "onboarding"
        states = []
        for _item, mandatory, due in ONBOARDING_ITEMS:
            due_on = hired + dt.timedelta(days=due)
            if not onboarding:
                waived = not mandatory and rng.random() < 0.1
                states.append("waived" if waived else "done")
            else:
                states.append("done" if due_on < TODAY and rng.random() < 0.6 else "pending")
        if onboarding and "pending" not in states:
            states[-1] = "pending"  # benefits enrollment: due 30 days after the hire date
        for (item, mandatory, due), state in zip(ONBOARDING_ITEMS, states, strict=True):
            due_on = hired + dt.timedelta(days=due)
            completed = None if state == "pending" else min(due_on + dt.timedelta(days=rng.randint(-1, 3)), TODAY)
            if completed is not None:
                completed = max(completed, hired)
            by = None if state == "pending" else p["manager_id"] if state == "waived" or item == "laptop_setup" else p["id"]
            rows.append(
                {
                    "id": len(rows) + 1,
                    "personnel_id": p["id"],
                    "item": item,
                    "mandatory": mandatory,
                    "due_date": due_on.isoformat(),
                    "status": state,
                    "completed_on": iso(completed),
                    "completed_by": by,
                }
            )
    return rows


# -- pay -----------------------------------------------------------------------------------------------


def _salary_history(rng, personnel, bands):
    """Applied raises that end at today's salary, and a few raises scheduled for the coming months."""
    rows = []
    for p in personnel:
        if p["manager_id"] is None or p["status"] != "active":
            continue
        hired = dt.date.fromisoformat(p["hire_date"])
        band = bands[p["band_id"] - 1]
        if hired < dt.date(2025, 1, 1) and rng.random() < 0.55:
            # Walk back from the current salary: each applied raise of 2-8% on a 1 March (annual review).
            salary, history = p["salary"], []
            for year in range(2026, 2026 - rng.randint(1, 2), -1):
                effective = dt.date(year, 3, 1)
                if effective <= hired:
                    break
                old = float(round(salary / (1 + rng.choice([0.02, 0.03, 0.04, 0.05, 0.06, 0.08])) / 100) * 100)
                history.append((old, salary, effective))
                salary = old
            for old, new, effective in reversed(history):
                rows.append(
                    {
                        "id": len(rows) + 1,
                        "personnel_id": p["id"],
                        "requested_by": p["manager_id"],
                        "old_salary": old,
                        "new_salary": new,
                        "reason": rng.choices(["merit", "market_adjustment", "retention"], weights=[70, 25, 5])[0],
                        "effective_date": effective.isoformat(),
                        "status": "applied",
                        "recorded_on": (effective - dt.timedelta(days=rng.randint(10, 30))).isoformat(),
                    }
                )
        elif rng.random() < 0.04:
            new = min(float(round(p["salary"] * 1.03 / 100) * 100), band["max_salary"])
            if new > p["salary"]:
                rows.append(
                    {
                        "id": len(rows) + 1,
                        "personnel_id": p["id"],
                        "requested_by": p["manager_id"],
                        "old_salary": p["salary"],
                        "new_salary": new,
                        "reason": "merit",
                        "effective_date": first_of_month(TODAY, rng.randint(1, 2)).isoformat(),
                        "status": "scheduled",
                        "recorded_on": (TODAY - dt.timedelta(days=rng.randint(1, 20))).isoformat(),
                    }
                )
    return rows


def random_bank_account(rng: random.Random, exclude: str | None = None) -> dict:
    """A bank, its routing number and a fresh account number (also used by the task generator)."""
    while True:
        bank, prefix = rng.choice(BANKS)
        if bank != exclude:
            break
    return {"bank_name": bank, "routing_number": routing_number(prefix), "account_number": digits(rng, 9, 12)}


def _bank_accounts(rng, personnel):
    rows = []
    for p in personnel:
        hired = dt.date.fromisoformat(p["hire_date"])
        added = hired
        if (TODAY - hired).days > 400 and rng.random() < 0.2:  # switched banks once
            switched = day_between(rng, hired + dt.timedelta(days=60), TODAY - dt.timedelta(days=30))
            rows.append(
                {
                    "id": len(rows) + 1,
                    "personnel_id": p["id"],
                    **random_bank_account(rng),
                    "status": "replaced",
                    "added_on": hired.isoformat(),
                    "replaced_on": switched.isoformat(),
                }
            )
            added = switched
        rows.append(
            {
                "id": len(rows) + 1,
                "personnel_id": p["id"],
                **random_bank_account(rng),
                "status": "active",
                "added_on": added.isoformat(),
                "replaced_on": None,
            }
        )
    return rows


# -- expenses, notes, escalations ----------------------------------------------------------------------


def _claims(rng, personnel):
    """Claims of the last ~200 days: recent ones wait for the manager, older ones were decided (and mostly paid)."""
    rows = []
    categories = list(EXPENSES)
    weights = [EXPENSES[c][0] for c in categories]
    for p in personnel:
        if p["manager_id"] is None or p["status"] != "active":
            continue
        hired = dt.date.fromisoformat(p["hire_date"])
        for _ in range(rng.choice([0, 0, 1, 1, 1, 2, 2, 3])):
            category = rng.choices(categories, weights=weights)[0]
            _, lo, hi, descriptions = EXPENSES[category]
            incurred = day_between(rng, max(TODAY - dt.timedelta(days=200), hired), TODAY - dt.timedelta(days=1))
            submitted = min(incurred + dt.timedelta(days=rng.randint(0, 10)), TODAY)
            age = (TODAY - submitted).days
            status, decided, by = "submitted", None, None
            if age > 7:
                decided = submitted + dt.timedelta(days=rng.randint(1, 5))
                status = "rejected" if rng.random() < 0.1 else "reimbursed" if (TODAY - decided).days > 14 else "approved"
                by = p["manager_id"]
            rows.append(
                {
                    "id": len(rows) + 1,
                    "personnel_id": p["id"],
                    "category": category,
                    "amount": round_money(rng.uniform(lo, hi)),
                    "incurred_on": incurred.isoformat(),
                    "description": rng.choice(descriptions),
                    "status": status,
                    "submitted_on": submitted.isoformat(),
                    "decided_on": iso(decided),
                    "decided_by": by,
                }
            )
    return rows


def _notes(rng, n, personnel):
    staff = [p for p in personnel if p["status"] != "terminated"]
    return [
        {
            "id": i,
            "personnel_id": rng.choice(staff)["id"],
            "body": rng.choice(NOTE_BODIES),
            "created_on": (TODAY - dt.timedelta(days=rng.randint(0, 300))).isoformat(),
        }
        for i in range(1, n + 1)
    ]


def _escalations(rng, n, personnel):
    staff = [p for p in personnel if p["status"] == "active" and p["manager_id"] is not None]
    rows = []
    for i in range(1, n + 1):
        category = rng.choice(sorted(ESCALATION_REASONS))
        created = TODAY - dt.timedelta(days=rng.randint(1, 120))
        rows.append(
            {
                "id": i,
                "personnel_id": rng.choice(staff)["id"],
                "category": category,
                "status": "closed" if (TODAY - created).days > 21 else "open",
                "reason": ESCALATION_REASONS[category],
                "created_on": created.isoformat(),
            }
        )
    return rows
