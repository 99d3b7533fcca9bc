"""Task generator for the HR domain: templates × entities sampled from the seed world.

`generate(world, today, rng)` is deterministic: the same world, date and rng give the same tasks, in
the same order, with the same ids. `world` is the seed (`seed.generate(Random(<domain seed>))`) and
is never modified; each task sets up its situation with a `patch` (rows upserted on top of the seed:
partial rows update, full rows insert, new rows get ids above the seed's).

Templates pick "clean" employees (active, with a manager, no pending or future leave, no scheduled
pay change, no open escalation) so that the leave, pay and claims a patch adds cannot clash with
rows already there, and each employee serves at most one task, so tasks spread across the world.
Ids that mutants shift by one (+1 on a request, claim or item id) land on rows where the shifted
write is visibly different or is refused, so the lint can tell the mutant from the gold.

The file tasks/hr.yaml is written by `groundstate tasks generate --domain hr` (and checked with
`--check`); this module only returns the task dicts.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from pathlib import Path

from groundstate.domains import _kit
from groundstate.domains._kit import WorldIndex, call, dollars, first_of_month, group_by, long_date, money, rubric, said

HERE = Path(__file__).resolve().parent

NOTICE_DAYS = 14
RAISE_LIMIT_PERCENT = 10
EXPENSE_WINDOW_DAYS = 60
EXPENSE_CAPS = {"meals": 75.00, "equipment": 500.00, "other": 150.00}
MANAGER_EXPENSE_LIMIT = 1000.00
MANDATORY_ITEMS = ("payroll_enrollment", "policy_acknowledgement", "security_training")

# What an employee says they spent money on: category -> [(phrase, low, high)].
EXPENSE_ASKS = {
    "travel": [
        ("train tickets to the Boston office", 60, 220),
        ("a taxi from the airport after a client visit", 25, 90),
        ("my flight to the Chicago client workshop", 180, 650),
        ("mileage for two customer site visits", 40, 160),
    ],
    "lodging": [("two nights at the hotel for the Austin sales kickoff", 240, 700), ("a hotel night near the client site", 130, 310)],
    "meals": [("a team lunch with a job candidate", 25, 74), ("dinner while travelling for the workshop", 18, 70)],
    "equipment": [("an external monitor for my home office", 120, 480), ("an ergonomic keyboard", 40, 180), ("a USB-C docking station", 90, 260)],
    "training": [
        ("an online course on data modelling", 90, 600),
        ("a ticket for an industry conference", 300, 950),
        ("a certification exam fee", 150, 450),
    ],
    "other": [("a courier fee for sending signed contracts", 15, 80), ("a notary fee for the signed vendor contract", 20, 140)],
}
# Phrases that are over the category's per-claim limit: category -> [(phrase, low, high)].
OVER_CAP_ASKS = {
    "meals": [("a client dinner for four people", 180, 320)],
    "equipment": [("a new laptop for working from home", 900, 1600)],
    "other": [("a team-building escape room outing", 220, 480)],
}
BIG_CLAIMS = [
    ("training", "the annual industry conference ticket and workshop"),
    ("travel", "flights to the Singapore customer summit"),
    ("lodging", "a week at the hotel for the Berlin customer onboarding"),
]
RAISE_REASONS = {
    "merit": ["for their excellent work this year", "as a merit increase after a strong review", "because of outstanding performance"],
    "market_adjustment": [
        "to bring the salary in line with the market",
        "after the latest pay benchmark came in",
        "as a market adjustment for the role",
    ],
    "retention": ["because there is a competing offer on the table", "to keep them: they are being recruited by a competitor"],
}
LEAVE_REASONS = [
    "for a family trip",
    "to visit my parents",
    "for my sister's wedding",
    "to move house",
    "for a hiking trip",
    "to look after my kids during their school break",
]


def day(d: dt.date) -> str:
    """A date as people say it: "Monday, June 15, 2026"."""
    return f"{d:%A}, {d:%B} {d.day}, {d.year}"


def span_text(start: dt.date, end: dt.date) -> str:
    if start == end:
        return f"on {day(start)}"
    return f"from {day(start)} to {day(end)}"


class Patch(_kit.Patch):
    order = _kit.table_order(HERE)


class Generator(WorldIndex):
    """Indexes over the seed world plus the sampling and phrasing helpers the templates share."""

    tones = ["polite and brief", "a little hurried", "friendly and chatty", "precise; answers exactly what is asked"]

    def __init__(self, world: dict[str, list[dict]], today: dt.date, rng: random.Random):
        super().__init__(world, today, rng)
        self.seed = _kit.sibling(HERE, "seed")
        self.people = {p["id"]: p for p in world["personnel"]}
        self.reports = group_by((p for p in world["personnel"] if p["manager_id"] is not None), "manager_id")
        self.bands = {b["id"]: b for b in world["salary_bands"]}
        self.balances = {(b["personnel_id"], b["leave_type"]): b for b in world["leave_balances"]}
        self.requests = group_by(world["leave_requests"], "personnel_id")
        self.claims = group_by(world["expense_claims"], "personnel_id")
        self.items = group_by(world["onboarding_items"], "personnel_id")
        self.accounts = {a["personnel_id"]: a for a in world["personnel_bank_accounts"] if a["status"] == "active"}
        self.blackouts = group_by(world["leave_blackouts"], "department_id")
        self.scheduled = {a["personnel_id"] for a in world["salary_adjustments"] if a["status"] == "scheduled"}
        self.escalated = {e["personnel_id"] for e in world["hr_escalations"] if e["status"] == "open"}
        self.used: set[int] = set()
        self.ident: dict[int, str] = {}  # personnel id -> the identifier the caller gave in their opening

    # -- world facts ------------------------------------------------------------------------------
    def clean(self, p: dict) -> bool:
        """Active, managed, unused, and with nothing pending that a task's patch could clash with."""
        if p["id"] in self.used or p["status"] != "active" or p["manager_id"] is None:
            return False
        if p["id"] in self.scheduled or p["id"] in self.escalated:
            return False
        today = self.today.isoformat()
        return not any(r["status"] == "pending" or (r["status"] == "approved" and r["end_date"] >= today) for r in self.requests.get(p["id"], []))

    def available(self, p: dict, leave_type: str = "annual") -> float:
        b = self.balances[(p["id"], leave_type)]
        pending = sum(r["days"] for r in self.requests.get(p["id"], []) if r["status"] == "pending" and r["leave_type"] == leave_type)
        return round(b["carried_over_days"] + b["accrued_days"] - b["used_days"] - pending, 2)

    def manager(self, p: dict) -> dict:
        return self.people[p["manager_id"]]

    def band(self, p: dict) -> dict:
        return self.bands[p["band_id"]]

    def in_blackout(self, p: dict, start: dt.date, end: dt.date) -> bool:
        return any(b["start_date"] <= end.isoformat() and start.isoformat() <= b["end_date"] for b in self.blackouts.get(p["department_id"], []))

    def days(self, start: dt.date, end: dt.date) -> int:
        return self.seed.working_days(start, end)

    # -- sampling ---------------------------------------------------------------------------------
    def claim(self, *people: dict) -> None:
        self.used.update(p["id"] for p in people)

    def pick_employee(self, ok: Callable[[dict], bool] = lambda p: True) -> dict:
        p = self.draw([p for p in self.world["personnel"] if self.clean(p) and ok(p)], "clean employee")
        self.claim(p)
        return p

    def pick_team(self, k: int, ok: Callable[[dict], bool] = lambda p: True) -> tuple[dict, list[dict]]:
        """A line manager (not a department head) and k of their clean direct reports satisfying `ok`."""
        teams = []
        for m in self.world["personnel"]:
            if m["id"] in self.used or m["status"] != "active" or m["manager_id"] is None or m["id"] not in self.reports:
                continue
            names = [(r["first_name"], r["last_name"]) for r in self.reports[m["id"]]]
            if len(set(names)) != len(names):
                continue  # two reports with the same name: the manager could not name one unambiguously
            fit = [r for r in self.reports[m["id"]] if self.clean(r) and ok(r)]
            if len(fit) >= k:
                teams.append((m, fit))
        m, fit = self.draw(teams, f"manager with {k} suitable clean reports")
        chosen = self.rng.sample(fit, k)
        self.claim(m, *chosen)
        return m, chosen

    def pick_new_hire(self, ok: Callable[[dict], bool] = lambda p: True) -> dict:
        p = self.draw([p for p in self.world["personnel"] if p["status"] == "onboarding" and p["id"] not in self.used and ok(p)], "new hire")
        self.claim(p)
        return p

    def future_span(self, p: dict, length: int, lo: int = NOTICE_DAYS + 2, hi: int = 150, monday: bool = True) -> tuple[dt.date, dt.date]:
        """`length` calendar days starting lo..hi days from today (on a Monday unless told otherwise), outside any blackout."""
        for _ in range(500):
            start = self.today + dt.timedelta(days=self.rng.randint(lo, hi))
            if monday:
                start += dt.timedelta(days=(7 - start.weekday()) % 7)
            elif start.weekday() >= 5:
                continue
            end = start + dt.timedelta(days=length - 1)
            if end.year != self.today.year or (start - self.today).days > hi or self.days(start, end) == 0:
                continue
            if not self.in_blackout(p, start, end):
                return start, end
        raise RuntimeError(f"no free span for personnel {p['id']}")

    def blackout_span(self, p: dict) -> tuple[dt.date, dt.date, dict]:
        """A working week overlapping one of the department's blackouts that starts with enough notice."""
        options = [
            b
            for b in self.blackouts.get(p["department_id"], [])
            if dt.date.fromisoformat(b["start_date"]) >= self.today + dt.timedelta(days=NOTICE_DAYS + 7)
        ]
        b = self.rng.choice(options)
        first = dt.date.fromisoformat(b["start_date"])
        start = first - dt.timedelta(days=first.weekday()) + dt.timedelta(days=7 * self.rng.randint(0, 1))
        if start.isoformat() > b["end_date"]:
            start -= dt.timedelta(days=7)
        end = start + dt.timedelta(days=self.rng.choice([2, 4]))
        if not (start.isoformat() <= b["end_date"] and b["start_date"] <= end.isoformat()):
            raise RuntimeError(f"span {start}..{end} misses blackout {b['id']}")
        return start, end, b

    def has_blackout_ahead(self, p: dict) -> bool:
        return any(
            dt.date.fromisoformat(b["start_date"]) >= self.today + dt.timedelta(days=NOTICE_DAYS + 7)
            for b in self.blackouts.get(p["department_id"], [])
        )

    # -- patches ----------------------------------------------------------------------------------
    def leave_request(self, patch: Patch, p: dict, start: dt.date, end: dt.date, status: str, requested_ago: int) -> dict:
        """Insert a future annual leave request; an approved one also counts in the balance's used days."""
        requested = self.today - dt.timedelta(days=requested_ago)
        days = float(self.days(start, end))
        row = {
            "id": self.new_id("leave_requests"),
            "personnel_id": p["id"],
            "leave_type": "annual",
            "start_date": start.isoformat(),
            "end_date": end.isoformat(),
            "days": days,
            "status": status,
            "requested_on": requested.isoformat(),
            "decided_on": (requested + dt.timedelta(days=1)).isoformat() if status == "approved" else None,
            "decided_by": p["manager_id"] if status == "approved" else None,
            "cancelled_on": None,
        }
        patch.add("leave_requests", row)
        if status == "approved":
            b = self.balances[(p["id"], "annual")]
            balance = patch.get("leave_balances", b["id"]) or patch.set("leave_balances", {"id": b["id"], "used_days": b["used_days"]})
            balance["used_days"] = round(balance["used_days"] + days, 2)
        return row

    def expense_claim(self, patch: Patch, p: dict, category: str, amount: float, incurred_ago: int, description: str) -> dict:
        incurred = self.today - dt.timedelta(days=incurred_ago)
        claim = {
            "id": self.new_id("expense_claims"),
            "personnel_id": p["id"],
            "category": category,
            "amount": amount,
            "incurred_on": incurred.isoformat(),
            "description": description,
            "status": "submitted",
            "submitted_on": (incurred + dt.timedelta(days=self.rng.randint(0, 2))).isoformat(),
            "decided_on": None,
            "decided_by": None,
        }
        patch.add("expense_claims", claim)
        return claim

    def checklist(self, patch: Patch, p: dict, pending: list[str]) -> dict[str, dict]:
        """Set a new hire's checklist: exactly the `pending` items open, every other item done by its due date."""
        out = {}
        for it in self.items[p["id"]]:
            if it["item"] in pending:
                row = {"id": it["id"], "status": "pending", "completed_on": None, "completed_by": None}
            else:
                done_on = min(dt.date.fromisoformat(it["due_date"]), self.today)
                row = {"id": it["id"], "status": "done", "completed_on": done_on.isoformat(), "completed_by": p["id"]}
            patch.add("onboarding_items", row)
            out[it["item"]] = it
        return out

    # -- phrasing ---------------------------------------------------------------------------------
    def hello(self, p: dict) -> str:
        """An opening that identifies the caller by name and work email or employee number (remembered for `find`)."""
        k = self.rng.randrange(3)
        self.ident[p["id"]] = p["employee_no"] if k == 2 else p["work_email"]
        name = f"{p['first_name']} {p['last_name']}"
        return [
            f"{self.greeting()} this is {name} ({p['work_email']}).",
            f"{self.greeting()} I'm {name}, my work email is {p['work_email']}.",
            f"{self.greeting()} {name} here, employee number {p['employee_no']}.",
        ][k]

    def find(self, p: dict) -> dict:
        """The lookup of the caller by the identifier they gave."""
        return call("find_personnel", query=self.ident.get(p["id"], p["work_email"]))

    def user(self, p: dict, context: str, first: list[str] | None = None) -> dict:
        """The simulated caller: persona, the facts they know, and scripted replies."""
        role = "a people manager" if p["id"] in self.reports else "an employee"
        return self.simulated_user(
            f"{p['first_name']} {p['last_name']}, {p['job_title']} at Brightwater Systems ({role})",
            f"Your work email is {p['work_email']} and your employee number is {p['employee_no']}. {context}",
            first,
        )

    def expense_ask(self, category: str | None = None) -> tuple[str, str, float]:
        category = category or self.rng.choice(sorted(EXPENSE_ASKS))
        phrase, lo, hi = self.rng.choice(EXPENSE_ASKS[category])
        return category, phrase, dollars(self.rng.randint(lo * 100, hi * 100))


def name(p: dict) -> str:
    return f"{p['first_name']} {p['last_name']}"


def pending_requests(personnel_id: int) -> str:
    return f"SELECT COUNT(*) FROM leave_requests WHERE personnel_id = {personnel_id} AND status = 'pending'"


def request_status(request_id: int) -> str:
    return f"SELECT status FROM leave_requests WHERE id = {request_id}"


# ================================================================================================
# Templates. Each returns one task (without id): instruction, user, patch, gold, optional checks.
# ================================================================================================

# -- single_write --------------------------------------------------------------------------------


def t_book_annual_leave(g: Generator) -> dict:
    length = g.rng.choice([1, 2, 3, 5, 5])
    p = g.pick_employee(lambda p: g.available(p) >= 5)
    start, end = g.future_span(p, length)
    why = g.rng.choice(LEAVE_REASONS)
    return {
        "instruction": f"{g.hello(p)} I'd like to book annual leave {span_text(start, end)}, {why}.",
        "user": g.user(p, f"You want annual leave {span_text(start, end)} {said(why)}."),
        "gold": [
            g.find(p),
            call("get_leave_overview", personnel_id=p["id"]),
            call("submit_leave_request", personnel_id=p["id"], leave_type="annual", start_date=start.isoformat(), end_date=end.isoformat()),
        ],
        "checks": [
            {
                "sql": f"SELECT status, days FROM leave_requests WHERE personnel_id = {p['id']} AND start_date = '{start}'",
                "expect": [["pending", g.days(start, end)]],
            }
        ],
        "rubrics": [rubric("Does the reply tell the employee the first day of the leave requested, {}?", long_date(start))],
        "gold_reply": "I have submitted your annual leave request "
        + (f"for {long_date(start)}" if start == end else f"from {long_date(start)} to {long_date(end)}")
        + "; it is pending your manager's approval.",
        "tags": ["leave", "annual", f"days:{g.days(start, end)}"],
    }


def _recent_weekdays(g: Generator, p: dict) -> tuple[dt.date, dt.date]:
    """One or two recent working days (before today) on which the employee has no leave yet."""
    taken = [(r["start_date"], r["end_date"]) for r in g.requests.get(p["id"], []) if r["status"] in ("pending", "approved")]
    for _ in range(100):
        start = g.today - dt.timedelta(days=g.rng.randint(1, 10))
        if g.days(start, start) == 0:
            continue
        end = start
        if g.rng.random() < 0.5:
            end = start + dt.timedelta(days=1)
            while g.days(end, end) == 0:
                end += dt.timedelta(days=1)
            if end >= g.today:
                end = start
        if not any(s <= end.isoformat() and start.isoformat() <= e for s, e in taken):
            return start, end
    raise RuntimeError(f"no free recent weekday for personnel {p['id']}")


def t_record_sick_days(g: Generator) -> dict:
    p = g.pick_employee(lambda p: g.available(p, "sick") >= 2)
    start, end = _recent_weekdays(g, p)
    when = f"on {day(start)}" if start == end else f"on {day(start)} and {day(end)}"
    return {
        "instruction": f"{g.hello(p)} I was off sick {when}. Could you record that as sick leave, please?",
        "user": g.user(p, f"You were ill and did not work {when}; you want it recorded as sick leave."),
        "gold": [
            g.find(p),
            call("submit_leave_request", personnel_id=p["id"], leave_type="sick", start_date=start.isoformat(), end_date=end.isoformat()),
        ],
        "checks": [
            {
                "sql": f"SELECT status FROM leave_requests WHERE personnel_id = {p['id']} AND leave_type = 'sick' AND start_date = '{start}'",
                "expect": [["approved"]],
            }
        ],
        "tags": ["leave", "sick"],
    }


def t_cancel_leave(g: Generator) -> dict:
    p = g.pick_employee(lambda p: g.available(p) >= 5)
    start, end = g.future_span(p, g.rng.choice([3, 5]))
    patch = Patch()
    status = g.rng.choice(["approved", "pending"])
    r = g.leave_request(patch, p, start, end, status, g.rng.randint(5, 30))
    return {
        "instruction": f"{g.hello(p)} Please cancel my annual leave {span_text(start, end)} (request #{r['id']}); my plans fell through.",
        "user": g.user(p, f"You want your {status} annual leave {span_text(start, end)}, request #{r['id']}, cancelled."),
        "patch": patch,
        "gold": [g.find(p), call("cancel_leave_request", request_id=r["id"], personnel_id=p["id"])],
        "checks": [{"sql": request_status(r["id"]), "expect": [["cancelled"]]}],
        "tags": ["leave", "cancel", status],
    }


def t_submit_expense(g: Generator) -> dict:
    p = g.pick_employee()
    category, phrase, amount = g.expense_ask()
    incurred = g.today - dt.timedelta(days=g.rng.randint(2, 40))
    return {
        "instruction": f"{g.hello(p)} Please file an expense claim for {phrase}: {money(amount)}, paid on {day(incurred)}.",
        "user": g.user(p, f"You paid {money(amount)} on {day(incurred)} for {phrase} and want it reimbursed."),
        "gold": [
            g.find(p),
            call(
                "submit_expense_claim",
                personnel_id=p["id"],
                category=category,
                amount=amount,
                incurred_on=incurred.isoformat(),
                description=phrase[0].upper() + phrase[1:],
            ),
        ],
        "tags": ["expense", category],
    }


# -- lookup_then_act -------------------------------------------------------------------------------


def t_decide_team_leave(g: Generator) -> dict:
    m, (r,) = g.pick_team(1, lambda p: g.available(p) >= 5)
    start, end = g.future_span(r, g.rng.choice([2, 3, 5]))
    patch = Patch()
    req = g.leave_request(patch, r, start, end, "pending", g.rng.randint(1, 5))
    decision = g.rng.choice(["approved", "approved", "rejected"])
    if decision == "approved":
        ask = f"Please approve {name(r)}'s annual leave request {span_text(start, end)}."
    else:
        ask = f"Please reject {name(r)}'s annual leave request {span_text(start, end)}; I can't spare them that week."
    return {
        "instruction": f"{g.hello(m)} {ask}",
        "user": g.user(
            m, f"You manage {name(r)}. You want their pending annual leave {span_text(start, end)} {decision} (you don't know the request number)."
        ),
        "patch": patch,
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call("get_leave_overview", personnel_id=r["id"]),
            call("decide_leave_request", request_id=req["id"], approver_id=m["id"], decision=decision),
        ],
        "checks": [{"sql": request_status(req["id"]), "expect": [[decision]]}],
        "tags": ["leave", "manager", decision],
    }


ITEM_DONE_PHRASES = {
    "laptop_setup": "my laptop is set up and working",
    "badge_access": "I picked up my badge and it opens the office doors",
    "payroll_enrollment": "I've completed my payroll enrollment forms",
    "policy_acknowledgement": "I've read and signed the employee handbook acknowledgement",
    "security_training": "I finished the security awareness training",
    "benefits_enrollment": "I've enrolled in the benefits plan",
}


def t_finish_onboarding_item(g: Generator) -> dict:
    p = g.pick_new_hire()
    items = [it["item"] for it in g.items[p["id"]]]
    target = g.rng.choice(items)
    last = g.rng.random() < 0.5  # half the time it is the last open item, so the hire becomes active
    pending = [target] if last else [target, g.rng.choice([i for i in items if i != target])]
    patch = Patch()
    by_item = g.checklist(patch, p, pending)
    return {
        "instruction": f"{g.hello(p)} Quick update on my onboarding: {ITEM_DONE_PHRASES[target]}.",
        "user": g.user(p, f"You are a new hire. On your onboarding checklist, {ITEM_DONE_PHRASES[target]}; you want it marked done."),
        "patch": patch,
        "gold": [
            g.find(p),
            call("get_personnel", personnel_id=p["id"]),
            call("update_onboarding_item", item_id=by_item[target]["id"], status="done", confirmed_by=p["id"]),
        ],
        "checks": [{"sql": f"SELECT status FROM personnel WHERE id = {p['id']}", "expect": [["active" if last else "onboarding"]]}],
        "tags": ["onboarding", target, "activates" if last else "still_onboarding"],
    }


def t_raise_by_percent(g: Generator) -> dict:
    def fits(p: dict) -> bool:
        return p["salary"] * 1.03 <= g.band(p)["max_salary"]

    m, (r,) = g.pick_team(1, fits)
    band_max = g.band(r)["max_salary"]
    options = [pct for pct in range(3, RAISE_LIMIT_PERCENT + 1) if r["salary"] * (100 + pct) / 100 <= band_max]
    pct = g.rng.choice(options)
    new = round(r["salary"] * (100 + pct) / 100, 2)
    reason = g.rng.choice(sorted(RAISE_REASONS))
    phrase = g.rng.choice(RAISE_REASONS[reason])
    if g.rng.random() < 0.5:  # unsaid: the policy's default, the first of next month
        effective, when = first_of_month(g.today, 1), ""
    else:
        effective = first_of_month(g.today, g.rng.choice([2, 3]))
        when = f", effective {effective:%B} 1"
    return {
        "instruction": f"{g.hello(m)} I'd like to give {name(r)} a {pct}% raise{when}, {phrase}.",
        "user": g.user(m, f"You manage {name(r)} and want to raise their salary by {pct}%{when} {said(phrase)}."),
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call("get_personnel", personnel_id=r["id"]),
            call(
                "schedule_salary_adjustment",
                personnel_id=r["id"],
                requested_by=m["id"],
                new_salary=new,
                reason=reason,
                effective_date=effective.isoformat(),
            ),
        ],
        "checks": [
            {
                "sql": f"SELECT new_salary, effective_date FROM salary_adjustments WHERE personnel_id = {r['id']} AND status = 'scheduled'",
                "expect": [[new, effective.isoformat()]],
            }
        ],
        "tags": ["salary", reason, f"percent:{pct}"],
    }


def t_approve_team_expense(g: Generator) -> dict:
    m, (r,) = g.pick_team(1)
    category, phrase, amount = g.expense_ask(g.rng.choice(["travel", "lodging", "training", "equipment"]))
    patch = Patch()
    claim = g.expense_claim(patch, r, category, amount, g.rng.randint(5, 20), phrase[0].upper() + phrase[1:])
    return {
        "instruction": f"{g.hello(m)} {name(r)} submitted an expense claim of {money(amount)} for {phrase.replace('my ', 'the ')}. "
        f"Please approve it.",
        "user": g.user(m, f"You manage {name(r)} and approve their {money(amount)} claim for {phrase.replace('my ', 'the ')}."),
        "patch": patch,
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call("list_expense_claims", personnel_id=r["id"], status="submitted"),
            call("review_expense_claim", claim_id=claim["id"], approver_id=m["id"], decision="approved"),
        ],
        "checks": [{"sql": f"SELECT status FROM expense_claims WHERE id = {claim['id']}", "expect": [["approved"]]}],
        "tags": ["expense", "manager", category],
    }


# -- policy_refusal --------------------------------------------------------------------------------


def t_leave_in_blackout(g: Generator) -> dict:
    p = g.pick_employee(lambda p: g.available(p) >= 5 and g.has_blackout_ahead(p))
    start, end, b = g.blackout_span(p)
    return {
        "instruction": f"{g.hello(p)} Please book annual leave for me {span_text(start, end)}.",
        "user": g.user(p, f"You want annual leave {span_text(start, end)}. You accept a refusal and do not ask for an exception."),
        "gold": [
            g.find(p),
            call("get_leave_overview", personnel_id=p["id"]),
            call(
                "add_hr_note",
                personnel_id=p["id"],
                body=f"Asked for annual leave {start} to {end}; refused: overlaps the department blackout '{b['label']}' "
                f"({b['start_date']} to {b['end_date']}).",
            ),
        ],
        "checks": [{"sql": pending_requests(p["id"]), "expect": [[0]]}],
        "tags": ["leave", "refusal", "blackout"],
    }


def t_leave_short_notice(g: Generator) -> dict:
    p = g.pick_employee(lambda p: g.available(p) >= 5)
    start, end = g.future_span(p, g.rng.choice([1, 2, 3]), lo=2, hi=NOTICE_DAYS - 4, monday=False)
    return {
        "instruction": f"{g.hello(p)} Something came up: I need annual leave {span_text(start, end)}.",
        "user": g.user(p, f"You want annual leave {span_text(start, end)} at short notice. You accept a refusal."),
        "gold": [
            g.find(p),
            call("get_leave_overview", personnel_id=p["id"]),
            call(
                "add_hr_note", personnel_id=p["id"], body=f"Asked for annual leave {start} to {end}; refused: less than {NOTICE_DAYS} days' notice."
            ),
        ],
        "checks": [{"sql": pending_requests(p["id"]), "expect": [[0]]}],
        "tags": ["leave", "refusal", "notice"],
    }


def t_approve_blackout_leave(g: Generator) -> dict:
    m, (r,) = g.pick_team(1, lambda p: g.available(p) >= 5 and g.has_blackout_ahead(p))
    start, end, b = g.blackout_span(r)
    patch = Patch()
    req = g.leave_request(patch, r, start, end, "pending", g.rng.randint(1, 4))
    return {
        "instruction": f"{g.hello(m)} Can you approve {name(r)}'s leave request {span_text(start, end)}? I'm fine with it.",
        "user": g.user(
            m,
            f"You manage {name(r)} and would like their pending annual leave {span_text(start, end)} approved. "
            f"If it is not allowed, you accept that and decide nothing else today.",
        ),
        "patch": patch,
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call("get_leave_overview", personnel_id=r["id"]),
            call(
                "add_hr_note",
                personnel_id=r["id"],
                body=f"Manager asked to approve leave request #{req['id']} ({start} to {end}); refused: it overlaps the "
                f"department blackout '{b['label']}'.",
            ),
        ],
        "checks": [{"sql": request_status(req["id"]), "expect": [["pending"]]}],
        "tags": ["leave", "manager", "refusal", "blackout"],
    }


def t_raise_over_limit(g: Generator) -> dict:
    m, (r,) = g.pick_team(1)
    pct = g.rng.choice([12, 15, 18, 20])
    new = round(r["salary"] * (100 + pct) / 100, 2)
    reason = g.rng.choice(["merit", "retention"])
    phrase = g.rng.choice(RAISE_REASONS[reason])
    return {
        "instruction": f"{g.hello(m)} Please give {name(r)} a {pct}% raise starting next month, {phrase}.",
        "user": g.user(
            m, f"You manage {name(r)} and want a {pct}% raise for them from next month {said(phrase)}. If it needs higher approval, that is fine."
        ),
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call("get_personnel", personnel_id=r["id"]),
            call(
                "escalate_hr_case",
                personnel_id=r["id"],
                category="compensation_approval",
                reason=f"Manager {name(m)} requests a {pct}% raise for {name(r)}: {money(r['salary'])} to {money(new)}; "
                f"above the {RAISE_LIMIT_PERCENT}% limit.",
            ),
        ],
        "checks": [{"sql": f"SELECT COUNT(*) FROM salary_adjustments WHERE personnel_id = {r['id']} AND status = 'scheduled'", "expect": [[0]]}],
        "tags": ["salary", "escalation", f"percent:{pct}"],
    }


def t_bank_change_by_manager(g: Generator) -> dict:
    m, (r,) = g.pick_team(1)
    acct = g.seed.random_bank_account(g.rng, exclude=g.accounts[r["id"]]["bank_name"])
    return {
        "instruction": f"{g.hello(m)} {name(r)} from my team is travelling and asked me to update their salary account: "
        f"{acct['bank_name']}, routing {acct['routing_number']}, account {acct['account_number']}. Can you change it?",
        "user": g.user(
            m,
            f"You manage {name(r)} and want their payroll account changed to {acct['bank_name']}, routing "
            f"{acct['routing_number']}, account {acct['account_number']}. You do not know their SSN.",
        ),
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call(
                "escalate_hr_case",
                personnel_id=r["id"],
                category="security",
                reason=f"Manager {name(m)} asked to change {name(r)}'s payroll bank account on their behalf; no change made.",
            ),
        ],
        "checks": [
            {
                "sql": f"SELECT COUNT(*) FROM personnel_bank_accounts WHERE personnel_id = {r['id']} AND status = 'active' "
                f"AND account_number = '{acct['account_number']}'",
                "expect": [[0]],
            }
        ],
        "tags": ["bank", "security", "escalation"],
    }


def t_expense_not_claimable(g: Generator) -> dict:
    p = g.pick_employee()
    if g.rng.random() < 0.5:
        category, phrase, amount = g.expense_ask()
        incurred = g.today - dt.timedelta(days=g.rng.randint(EXPENSE_WINDOW_DAYS + 10, 150))
        why = f"incurred on {incurred}, more than {EXPENSE_WINDOW_DAYS} days ago"
        tag = "too_old"
    else:
        category = g.rng.choice(sorted(OVER_CAP_ASKS))
        phrase, lo, hi = g.rng.choice(OVER_CAP_ASKS[category])
        amount = dollars(g.rng.randint(lo * 100, hi * 100))
        incurred = g.today - dt.timedelta(days=g.rng.randint(3, 30))
        why = f"above the {money(EXPENSE_CAPS[category])} limit for {category}"
        tag = "over_cap"
    return {
        "instruction": f"{g.hello(p)} I'd like to claim {money(amount)} for {phrase}, paid on {day(incurred)}.",
        "user": g.user(p, f"You paid {money(amount)} on {day(incurred)} for {phrase}. You accept a refusal."),
        "gold": [g.find(p), call("add_hr_note", personnel_id=p["id"], body=f"Asked to claim {money(amount)} for {phrase}; refused: {why}.")],
        "checks": [
            {
                "sql": f"SELECT COUNT(*) FROM expense_claims WHERE personnel_id = {p['id']} AND incurred_on = '{incurred}'",
                "expect": [[sum(c["incurred_on"] == incurred.isoformat() for c in g.claims.get(p["id"], []))]],
            }
        ],
        "tags": ["expense", "refusal", tag],
    }


def t_big_expense_approval(g: Generator) -> dict:
    m, (r,) = g.pick_team(1)
    category, what = g.rng.choice(BIG_CLAIMS)
    amount = dollars(g.rng.randint(105_000, 240_000))
    patch = Patch()
    claim = g.expense_claim(patch, r, category, amount, g.rng.randint(5, 25), what[0].upper() + what[1:])
    return {
        "instruction": f"{g.hello(m)} Please approve {name(r)}'s expense claim for {what} ({money(amount)}).",
        "user": g.user(
            m,
            f"You manage {name(r)} and want their {money(amount)} claim for {what} approved; "
            f"if you cannot approve it yourself, it should go to whoever can.",
        ),
        "patch": patch,
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call("list_expense_claims", personnel_id=r["id"], status="submitted"),
            call(
                "escalate_hr_case",
                personnel_id=r["id"],
                category="expense_approval",
                reason=f"Manager {name(m)} wants to approve claim #{claim['id']} of {money(amount)} for {what}; above the "
                f"{money(MANAGER_EXPENSE_LIMIT)} manager limit.",
            ),
        ],
        "checks": [{"sql": f"SELECT status FROM expense_claims WHERE id = {claim['id']}", "expect": [["submitted"]]}],
        "tags": ["expense", "manager", "escalation"],
    }


WAIVE_EXCUSES = {
    "security_training": "did the same security training at their previous employer",
    "payroll_enrollment": "is a contractor converting to staff and already gets paid",
    "policy_acknowledgement": "has worked with us as a contractor and knows the handbook",
}


def t_waive_mandatory_item(g: Generator) -> dict:
    p = g.pick_new_hire()
    m = g.manager(p)
    item = g.rng.choice(MANDATORY_ITEMS)
    optional = g.rng.choice(["laptop_setup", "badge_access", "benefits_enrollment"])
    patch = Patch()
    by_item = g.checklist(patch, p, [item, optional])
    label = item.replace("_", " ")
    g.claim(m)
    return {
        "instruction": f"{g.hello(m)} My new hire {name(p)} {WAIVE_EXCUSES[item]}, so please waive the {label} item on their onboarding checklist.",
        "user": g.user(m, f"You manage the new hire {name(p)} and want the {label} checklist item waived. You accept a refusal."),
        "patch": patch,
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call("get_personnel", personnel_id=p["id"]),
            call(
                "add_hr_note",
                personnel_id=p["id"],
                body=f"Manager asked to waive the mandatory {item} item; refused: mandatory items cannot be waived.",
            ),
        ],
        "checks": [{"sql": f"SELECT status FROM onboarding_items WHERE id = {by_item[item]['id']}", "expect": [["pending"]]}],
        "tags": ["onboarding", "refusal", item],
    }


def t_foreign_leave_approval(g: Generator) -> dict:
    m, _ = g.pick_team(1)
    other = g.pick_employee(lambda p: p["manager_id"] != m["id"] and p["id"] != m["id"] and g.available(p) >= 5)
    start, end = g.future_span(other, g.rng.choice([2, 5]))
    patch = Patch()
    req = g.leave_request(patch, other, start, end, "pending", g.rng.randint(1, 4))
    return {
        "instruction": f"{g.hello(m)} Please approve {name(other)}'s annual leave request #{req['id']} {span_text(start, end)}.",
        "user": g.user(
            m,
            f"You want leave request #{req['id']} of {name(other)} approved. {name(other)} is not one of your reports "
            f"(you are covering informally). You accept a refusal.",
        ),
        "patch": patch,
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call(
                "add_hr_note",
                personnel_id=m["id"],
                body=f"Asked to approve leave request #{req['id']} of an employee who is not a direct report; refused.",
            ),
        ],
        "checks": [{"sql": request_status(req["id"]), "expect": [["pending"]]}],
        "tags": ["leave", "manager", "refusal", "not_a_report"],
    }


# -- needs_user_info -------------------------------------------------------------------------------


def t_bank_change(g: Generator) -> dict:
    p = g.pick_employee()
    acct = g.seed.random_bank_account(g.rng, exclude=g.accounts[p["id"]]["bank_name"])
    ssn = p["ssn_last4"]
    return {
        "instruction": f"{g.hello(p)} I've switched banks. Please pay my salary into my new account at {acct['bank_name']}: "
        f"routing number {acct['routing_number']}, account number {acct['account_number']}.",
        "user": g.user(
            p,
            f"You want your salary paid into {acct['bank_name']}, routing {acct['routing_number']}, account "
            f"{acct['account_number']}. The last four digits of your SSN are {ssn}; give them when asked.",
            [f"Sure, the last four digits of my SSN are {ssn}."],
        ),
        "gold": [
            g.find(p),
            call(
                "update_payroll_bank_account",
                personnel_id=p["id"],
                ssn_last4=ssn,
                bank_name=acct["bank_name"],
                routing_number=acct["routing_number"],
                account_number=acct["account_number"],
            ),
        ],
        "checks": [
            {
                "sql": f"SELECT bank_name, account_number FROM personnel_bank_accounts WHERE personnel_id = {p['id']} AND status = 'active'",
                "expect": [[acct["bank_name"], acct["account_number"]]],
            }
        ],
        "tags": ["bank", "verification", "ask_ssn"],
    }


def t_leave_dates_missing(g: Generator) -> dict:
    p = g.pick_employee(lambda p: g.available(p) >= 5)
    start, end = g.future_span(p, 5, lo=25, hi=100)
    return {
        "instruction": f"{g.hello(p)} I'd like to take a week of annual leave in {start:%B}.",
        "user": g.user(p, f"You want annual leave {span_text(start, end)}.", [f"From {day(start)} to {day(end)}."]),
        "gold": [
            g.find(p),
            call("get_leave_overview", personnel_id=p["id"]),
            call("submit_leave_request", personnel_id=p["id"], leave_type="annual", start_date=start.isoformat(), end_date=end.isoformat()),
        ],
        "checks": [{"sql": f"SELECT status FROM leave_requests WHERE personnel_id = {p['id']} AND start_date = '{start}'", "expect": [["pending"]]}],
        "tags": ["leave", "annual", "ask_dates"],
    }


def t_expense_details_missing(g: Generator) -> dict:
    p = g.pick_employee()
    category, phrase, amount = g.expense_ask(g.rng.choice(["travel", "lodging", "training"]))
    incurred = g.today - dt.timedelta(days=g.rng.randint(3, 30))
    return {
        "instruction": f"{g.hello(p)} I need to claim back {phrase}.",
        "user": g.user(p, f"You paid {money(amount)} on {day(incurred)} for {phrase}.", [f"It was {money(amount)}, paid on {day(incurred)}."]),
        "gold": [
            g.find(p),
            call(
                "submit_expense_claim",
                personnel_id=p["id"],
                category=category,
                amount=amount,
                incurred_on=incurred.isoformat(),
                description=phrase[0].upper() + phrase[1:],
            ),
        ],
        "tags": ["expense", category, "ask_amount"],
    }


# -- collateral_trap -------------------------------------------------------------------------------


def t_approve_one_of_two(g: Generator) -> dict:
    m, (a, b) = g.pick_team(2, lambda p: g.available(p) >= 5)
    sa, ea = g.future_span(a, g.rng.choice([2, 5]))
    sb, eb = g.future_span(b, g.rng.choice([2, 5]))
    patch = Patch()
    ra = g.leave_request(patch, a, sa, ea, "pending", g.rng.randint(1, 5))
    rb = g.leave_request(patch, b, sb, eb, "pending", g.rng.randint(1, 5))
    return {
        "instruction": f"{g.hello(m)} Please approve {name(a)}'s leave {span_text(sa, ea)}. {name(b)} also has a request waiting, "
        f"but I haven't made up my mind on that one yet.",
        "user": g.user(
            m, f"You manage {name(a)} and {name(b)}. Approve only {name(a)}'s pending leave {span_text(sa, ea)}; {name(b)}'s request stays undecided."
        ),
        "patch": patch,
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call("get_leave_overview", personnel_id=a["id"]),
            call("decide_leave_request", request_id=ra["id"], approver_id=m["id"], decision="approved"),
        ],
        "checks": [{"sql": request_status(rb["id"]), "expect": [["pending"]]}],
        "tags": ["leave", "manager", "trap"],
    }


def t_onboarding_one_item(g: Generator) -> dict:
    p = g.pick_new_hire()
    done = g.rng.choice(["payroll_enrollment", "policy_acknowledgement", "security_training", "benefits_enrollment"])
    waiting = "laptop_setup"  # mentioned only as context: it must stay pending
    patch = Patch()
    by_item = g.checklist(patch, p, [done, waiting])
    return {
        "instruction": f"{g.hello(p)} {ITEM_DONE_PHRASES[done][0].upper()}{ITEM_DONE_PHRASES[done][1:]}. My laptop still hasn't "
        f"arrived though, so I can't do anything about that one yet.",
        "user": g.user(p, f"You are a new hire: {ITEM_DONE_PHRASES[done]}. Your laptop has not arrived, so laptop setup is not done."),
        "patch": patch,
        "gold": [
            g.find(p),
            call("get_personnel", personnel_id=p["id"]),
            call("update_onboarding_item", item_id=by_item[done]["id"], status="done", confirmed_by=p["id"]),
        ],
        "checks": [
            {"sql": f"SELECT status FROM onboarding_items WHERE id = {by_item[waiting]['id']}", "expect": [["pending"]]},
            {"sql": f"SELECT status FROM personnel WHERE id = {p['id']}", "expect": [["onboarding"]]},
        ],
        "tags": ["onboarding", "trap", done],
    }


def t_cancel_one_of_two(g: Generator) -> dict:
    p = g.pick_employee(lambda p: g.available(p) >= 10)
    first = g.future_span(p, 3, lo=20, hi=70)
    second = g.future_span(p, 5, lo=80, hi=150)
    patch = Patch()
    r1 = g.leave_request(patch, p, *first, "approved", g.rng.randint(10, 30))
    r2 = g.leave_request(patch, p, *second, "approved", g.rng.randint(10, 30))
    cancel, keep = (r1, r2) if g.rng.random() < 0.5 else (r2, r1)
    c_span = (dt.date.fromisoformat(cancel["start_date"]), dt.date.fromisoformat(cancel["end_date"]))
    k_span = (dt.date.fromisoformat(keep["start_date"]), dt.date.fromisoformat(keep["end_date"]))
    return {
        "instruction": f"{g.hello(p)} I have two holidays booked. Please cancel the one {span_text(*c_span)}; "
        f"the one {span_text(*k_span)} is still on.",
        "user": g.user(p, f"Cancel only your leave {span_text(*c_span)}; keep the leave {span_text(*k_span)}."),
        "patch": patch,
        "gold": [
            g.find(p),
            call("get_leave_overview", personnel_id=p["id"]),
            call("cancel_leave_request", request_id=cancel["id"], personnel_id=p["id"]),
        ],
        "checks": [{"sql": request_status(keep["id"]), "expect": [["approved"]]}],
        "tags": ["leave", "cancel", "trap"],
    }


# -- multi_step ------------------------------------------------------------------------------------


def t_new_hire_setup(g: Generator) -> dict:
    p = g.pick_new_hire()
    a, b = "payroll_enrollment", g.rng.choice(["policy_acknowledgement", "security_training"])
    patch = Patch()
    by_item = g.checklist(patch, p, [a, b])
    acct = g.seed.random_bank_account(g.rng, exclude=g.accounts[p["id"]]["bank_name"])
    ssn = p["ssn_last4"]
    return {
        "instruction": f"{g.hello(p)} Two onboarding updates: {ITEM_DONE_PHRASES[a]}, and {ITEM_DONE_PHRASES[b]}. Also, please pay my "
        f"salary into my {acct['bank_name']} account instead: routing {acct['routing_number']}, account "
        f"{acct['account_number']}. For verification, my SSN ends in {ssn}.",
        "user": g.user(
            p,
            f"You are a new hire: {ITEM_DONE_PHRASES[a]} and {ITEM_DONE_PHRASES[b]}. You want your salary paid into "
            f"{acct['bank_name']}, routing {acct['routing_number']}, account {acct['account_number']}. "
            f"The last four digits of your SSN are {ssn}.",
        ),
        "patch": patch,
        "gold": [
            g.find(p),
            call("get_personnel", personnel_id=p["id"]),
            call("update_onboarding_item", item_id=by_item[a]["id"], status="done", confirmed_by=p["id"]),
            call("update_onboarding_item", item_id=by_item[b]["id"], status="done", confirmed_by=p["id"]),
            call(
                "update_payroll_bank_account",
                personnel_id=p["id"],
                ssn_last4=ssn,
                bank_name=acct["bank_name"],
                routing_number=acct["routing_number"],
                account_number=acct["account_number"],
            ),
        ],
        "checks": [{"sql": f"SELECT status FROM personnel WHERE id = {p['id']}", "expect": [["active"]]}],
        "tags": ["onboarding", "bank"],
    }


def t_manager_inbox(g: Generator) -> dict:
    m, (a, b, c) = g.pick_team(3, lambda p: g.available(p) >= 5)
    sa, ea = g.future_span(a, g.rng.choice([2, 5]))
    sb, eb = g.future_span(b, g.rng.choice([3, 5]))
    patch = Patch()
    ra = g.leave_request(patch, a, sa, ea, "pending", g.rng.randint(1, 5))
    rb = g.leave_request(patch, b, sb, eb, "pending", g.rng.randint(1, 5))
    category, phrase, amount = g.expense_ask(g.rng.choice(["travel", "lodging", "equipment"]))
    claim = g.expense_claim(patch, c, category, amount, g.rng.randint(5, 20), phrase[0].upper() + phrase[1:])
    what = phrase.replace("my ", "the ")
    return {
        "instruction": f"{g.hello(m)} Let's clear my approvals: approve {name(a)}'s leave {span_text(sa, ea)}, reject {name(b)}'s "
        f"leave {span_text(sb, eb)} because we're short-staffed then, and approve {name(c)}'s {money(amount)} "
        f"expense claim for {what}.",
        "user": g.user(
            m,
            f"You manage {name(a)}, {name(b)} and {name(c)}. Approve {name(a)}'s leave {span_text(sa, ea)}; reject "
            f"{name(b)}'s leave {span_text(sb, eb)}; approve {name(c)}'s {money(amount)} claim for {what}.",
        ),
        "patch": patch,
        "gold": [
            g.find(m),
            call("get_personnel", personnel_id=m["id"]),
            call("get_leave_overview", personnel_id=a["id"]),
            call("decide_leave_request", request_id=ra["id"], approver_id=m["id"], decision="approved"),
            call("get_leave_overview", personnel_id=b["id"]),
            call("decide_leave_request", request_id=rb["id"], approver_id=m["id"], decision="rejected"),
            call("list_expense_claims", personnel_id=c["id"], status="submitted"),
            call("review_expense_claim", claim_id=claim["id"], approver_id=m["id"], decision="approved"),
        ],
        "tags": ["leave", "expense", "manager"],
    }


def t_reschedule_leave(g: Generator) -> dict:
    p = g.pick_employee(lambda p: g.available(p) >= 10)
    for _ in range(50):
        start, end = g.future_span(p, 5, lo=25, hi=120)
        # Either Wednesday to the next Tuesday, which overlaps the old dates (so it can only be booked
        # after the cancellation), or the week after.
        options = [(start + dt.timedelta(days=2), end + dt.timedelta(days=4)), (start + dt.timedelta(days=7), end + dt.timedelta(days=7))]
        g.rng.shuffle(options)
        fine = [(s, e) for s, e in options if not g.in_blackout(p, s, e) and e.year == g.today.year]
        if fine:
            new_start, new_end = fine[0]
            break
    else:
        raise RuntimeError(f"cannot reschedule leave of personnel {p['id']} cleanly")
    patch = Patch()
    r = g.leave_request(patch, p, start, end, "approved", g.rng.randint(10, 30))
    return {
        "instruction": f"{g.hello(p)} I need to move my approved annual leave {span_text(start, end)} so that it runs "
        f"{span_text(new_start, new_end)} instead.",
        "user": g.user(
            p,
            f"Your approved leave {span_text(start, end)} should move to {span_text(new_start, new_end)}. You understand "
            f"the new dates need your manager's approval again.",
        ),
        "patch": patch,
        "gold": [
            g.find(p),
            call("get_leave_overview", personnel_id=p["id"]),
            call("cancel_leave_request", request_id=r["id"], personnel_id=p["id"]),
            call("submit_leave_request", personnel_id=p["id"], leave_type="annual", start_date=new_start.isoformat(), end_date=new_end.isoformat()),
        ],
        "checks": [
            {"sql": request_status(r["id"]), "expect": [["cancelled"]]},
            {"sql": f"SELECT status FROM leave_requests WHERE personnel_id = {p['id']} AND start_date = '{new_start}'", "expect": [["pending"]]},
        ],
        "tags": ["leave", "cancel", "rebook"],
    }


# (family, template function, number of tasks)
TEMPLATES: list[tuple[str, Callable[[Generator], dict], int]] = [
    ("single_write", t_book_annual_leave, 4),
    ("single_write", t_record_sick_days, 3),
    ("single_write", t_cancel_leave, 3),
    ("single_write", t_submit_expense, 3),
    ("lookup_then_act", t_decide_team_leave, 3),
    ("lookup_then_act", t_finish_onboarding_item, 3),
    ("lookup_then_act", t_raise_by_percent, 3),
    ("lookup_then_act", t_approve_team_expense, 3),
    ("policy_refusal", t_leave_in_blackout, 2),
    ("policy_refusal", t_leave_short_notice, 2),
    ("policy_refusal", t_approve_blackout_leave, 2),
    ("policy_refusal", t_raise_over_limit, 2),
    ("policy_refusal", t_bank_change_by_manager, 2),
    ("policy_refusal", t_expense_not_claimable, 2),
    ("policy_refusal", t_big_expense_approval, 2),
    ("policy_refusal", t_waive_mandatory_item, 2),
    ("policy_refusal", t_foreign_leave_approval, 2),
    ("needs_user_info", t_bank_change, 3),
    ("needs_user_info", t_leave_dates_missing, 3),
    ("needs_user_info", t_expense_details_missing, 3),
    ("collateral_trap", t_approve_one_of_two, 3),
    ("collateral_trap", t_onboarding_one_item, 2),
    ("collateral_trap", t_cancel_one_of_two, 3),
    ("multi_step", t_new_hire_setup, 2),
    ("multi_step", t_manager_inbox, 3),
    ("multi_step", t_reschedule_leave, 3),
]


def generate(world: dict[str, list[dict]], today: dt.date, rng: random.Random) -> list[dict]:
    """All HR tasks, in template order, ids `hr-<template>-<nnn>`."""
    return _kit.generate(HERE, TEMPLATES, Generator(world, today, rng))
