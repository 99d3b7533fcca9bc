"""Task generator for the helpdesk domain: templates × entities sampled from the seed world.

`generate(world, today, rng)` is deterministic: the same world, date and rng give the same tasks, in
the same order, with the same ids. `world` is the seed (`seed.generate(Random(<domain seed>))`) and
is never modified; each task sets up its situation with a `patch` (rows upserted on top of the seed:
partial rows update, full rows insert).

Templates pick "clean" staff members (active, with no open access requests and no open loans) so that
what a task patches cannot contradict other rows, and prefer people no other task has used yet, so
tasks spread across the world. Every gold solution ends in at least one write, and its arguments are
chosen so that the lint's mutants (an id + 1, the next enum value, a date + 1 day) either write
something visibly different or are refused by the tool.

The task file is written by `groundstate tasks generate --domain helpdesk` (tasks/helpdesk.yaml).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groundstate.domains import _kit
from groundstate.domains._kit import WorldIndex, cap, group_by, long_date, rubric, said

HERE = Path(__file__).resolve().parent

SLA_DAYS = {"P1": 0, "P2": 1, "P3": 3, "P4": 7}
EXEC_BUMP = {"P4": "P3", "P3": "P2", "P2": "P2", "P1": "P1"}
REFRESH_AGE_DAYS = 1461
DEFAULT_APPS = {"Slack", "Google Workspace", "Zoom", "Confluence"}

# (category, priority by the matrix, subject, how the staff member puts it)
ISSUES = [
    (
        "software",
        "P3",
        "Excel crashes on large workbooks",
        "Excel crashes whenever I open our big forecast workbooks. Smaller files open fine, and I'm using the web version for now.",
    ),
    ("software", "P3", "Zoom audio drops in meetings", "my Zoom audio keeps dropping in meetings. Dialling in by phone works as a workaround."),
    (
        "software",
        "P2",
        "Every application crashes at launch",
        "since this morning every application on my laptop crashes as soon as it opens, so I can't do any work at all.",
    ),
    (
        "network",
        "P2",
        "VPN rejects my connection",
        "I'm working remotely and the VPN has rejected my connection since this morning. Without it I can't reach anything, I'm completely stuck.",
    ),
    ("network", "P3", "VPN disconnects every hour", "the VPN disconnects about once an hour. Reconnecting works, it's just annoying."),
    ("network", "P3", "Slow Wi-Fi at my desk", "the Wi-Fi at my desk is really slow. I can plug in a network cable for now."),
    (
        "software",
        "P4",
        "Install request: Python 3.12",
        "could someone install Python 3.12 on my laptop? Nothing is broken, I just need it for a new script.",
    ),
    ("other", "P4", "How to book the boardroom screen", "I have a question: how do I book the big screen in the boardroom for a presentation?"),
    ("access", "P4", "Access to the Q3 planning shared drive", "I'd like to be added to the 'Q3 planning' shared drive, please."),
    ("access", "P4", "Add me to the all-hands mailing list", "please add me to the all-hands mailing list; I don't get the invites."),
    ("hardware", "P3", "Printer on my floor keeps jamming", "the printer on my floor keeps jamming. I can use the one downstairs in the meantime."),
    (
        "software",
        "P3",
        "Calendar invites not syncing to phone",
        "calendar invites don't sync to my phone any more, though they show up fine on my laptop.",
    ),
]
# Faults of devices that still work: a hardware ticket for the device, not a replacement. (kind, priority, subject, phrase)
FAULTS = [
    ("monitor", "P3", "Monitor flickers", "my monitor flickers every few minutes. It still works, it's just distracting"),
    ("laptop", "P3", "Laptop battery drains fast", "my laptop battery only lasts about an hour now. It works fine plugged in"),
    ("headset", "P3", "Headset microphone crackles", "the microphone on my headset crackles on calls, though people can still hear me"),
    ("dock", "P3", "Dock drops the external display", "my dock keeps dropping the external display for a few seconds at a time"),
    ("phone", "P3", "Phone speaker crackles", "my work phone's speaker crackles. I use earphones in the meantime"),
]
BROKEN = {
    "laptop": [
        "the screen cracked when it fell off my desk",
        "it won't power on any more, not even on the charger",
        "I spilled coffee on it and now it's completely dead",
    ],
    "phone": ["the screen shattered and the touchscreen doesn't respond", "it won't turn on any more"],
    "monitor": ["it won't turn on at all any more", "the panel cracked when we moved desks"],
    "dock": ["it's completely dead, no lights at all"],
    "headset": ["it's dead: it won't charge or turn on"],
}
LOST = ["I left my {kind} in a taxi and it's gone", "I lost my {kind} on the train yesterday"]
STOLEN = [
    "my {kind} was stolen from my car last night",
    "someone took my {kind} out of my bag at the airport",
    "my {kind} was stolen at a coffee shop this morning",
]
# purpose -> phrases (filled with a city)
LOAN_PURPOSES = {
    "travel": ["for a business trip to {city}", "for the industry conference in {city}", "for a customer visit in {city}"],
    "project": ["for a customer demo project", "for a hackathon project"],
    "training": ["for a two-day training course", "to run an onboarding workshop"],
    "temporary_replacement": ["while my own {kind} is in repair"],
}
CITIES = ["Chicago", "Seattle", "London", "Toronto", "San Francisco", "Atlanta", "Berlin", "New York"]
LOAN_KINDS = ["laptop", "phone", "tablet", "headset"]
# Reasons are worded without pronouns: they appear both in the staff member's words and in their context.
APP_REASONS = ["for a cross-team project", "for day-to-day work", "to collaborate with another team", "for a new client project"]
ADMIN_REASONS = ["to manage the team workspace", "to set up integrations for the team", "to add and remove users for the team"]
TICKET_CHANGES = [  # (current status, wanted status, what the staff member says)
    ("in_progress", "resolved", "Good news: the problem from ticket #{t} is fixed now, you can mark it resolved."),
    ("waiting_on_staff", "resolved", "Ticket #{t} can be marked resolved; everything works again."),
    ("new", "closed", "I don't need help with ticket #{t} any more, please close it."),
    ("in_progress", "closed", "Please close ticket #{t}; we've decided to drop that request."),
    ("resolved", "in_progress", "The problem from ticket #{t} came back this morning. Can you reopen it?"),
    ("in_progress", "waiting_on_staff", "About ticket #{t}: I'll collect the logs you need next week, so please put it on hold until then."),
    ("waiting_on_staff", "in_progress", "For ticket #{t}: I've just emailed the screenshots you asked for, so you can carry on."),
]
OUTAGES = [  # (category, team, subject, phrase); {office} and {app} are filled in
    ("network", "infrastructure", "Office Wi-Fi down", "nobody in the {office} office can connect to the Wi-Fi since about an hour ago"),
    ("network", "infrastructure", "Office network outage", "the whole {office} office has lost its network connection; none of us can work"),
    ("software", "applications", "{app} down for the team", "{app} is down for our whole team: everyone gets an error page when they log in"),
    (
        "security",
        "security",
        "Credentials entered on a phishing page",
        "I clicked a link in an email that looked like it came from IT and typed my password into the page. I think it was phishing",
    ),
]


class Patch(_kit.Patch):
    order = _kit.table_order(HERE)


def call(tool: str, /, **args: Any) -> dict:
    """A gold call; arguments given as None are left out, so the tool's default applies."""
    return _kit.call(tool, **{k: v for k, v in args.items() if v is not None})


class Generator(WorldIndex):
    """Indexes over the seed world plus the sampling and phrasing helpers the templates share."""

    greetings = ["Hi,", "Hello,", "Hey,", "Good morning,", "Hi there,"]
    closings = ["That's all, thanks!", "No, that's everything. Thank you!", "That's it, thanks for the help.", "Nothing else, thanks."]
    tones = ["polite and brief", "a little stressed", "friendly and chatty", "precise; answers exactly what is asked"]

    def __init__(self, world: dict[str, list[dict]], today: dt.date, rng: random.Random):
        super().__init__(world, today, rng)
        self.staff = {s["id"]: s for s in world["staff_members"]}
        self.apps = {a["id"]: a for a in world["software_apps"]}
        self.app_by_name = {a["name"]: a for a in world["software_apps"]}
        self.grants: dict[int, list[dict]] = {}
        self.seats_used: dict[int, set[int]] = {}
        for gr in world["software_access_grants"]:
            if gr["revoked_on"] is None and (gr["expires_on"] is None or gr["expires_on"] >= today.isoformat()):
                self.grants.setdefault(gr["staff_id"], []).append(gr)
                self.seats_used.setdefault(gr["app_id"], set()).add(gr["staff_id"])
        self.open_requests = {r["staff_id"] for r in world["software_access_requests"] if r["status"] in ("awaiting_approval", "approved")}
        self.open_loans = {h["staff_id"] for h in world["hardware_handovers"] if h["kind"] == "loan" and h["returned_on"] is None}
        self.devices = group_by((a for a in world["hardware_assets"] if a["status"] == "assigned"), "assigned_to")
        self.spares = group_by((a for a in sorted(world["hardware_assets"], key=lambda a: a["asset_tag"]) if a["status"] == "in_stock"), "kind")
        self.reports = group_by((s for s in world["staff_members"] if s["manager_id"] is not None), "manager_id")
        self.max_ticket_id = max(t["id"] for t in world["it_tickets"])
        self.used: set[int] = set()

    # -- sampling ---------------------------------------------------------------------------------
    def clean(self, s: dict) -> bool:
        return s["employment_status"] == "active" and s["id"] not in self.open_requests and s["id"] not in self.open_loans

    def pick(self, ok: Callable[[dict], bool] = lambda s: True, *, role: str | None = "staff") -> dict:
        """A clean staff member satisfying `ok`, preferring people no task has used yet.

        role "staff": employees and managers; "contractor"; "executive"; None: anyone.
        """
        roles = {"staff": ("employee", "manager"), "contractor": ("contractor",), "executive": ("executive",)}.get(role or "")
        pool = [s for s in self.world["staff_members"] if self.clean(s) and (roles is None or s["role"] in roles) and ok(s)]
        s = self.draw(pool, "staff member", lambda s: s["id"] not in self.used)
        self.used.add(s["id"])
        return s

    # -- world facts --------------------------------------------------------------------------------
    def holds(self, s: dict) -> list[dict]:
        """Active grants of a staff member."""
        return self.grants.get(s["id"], [])

    def holds_app(self, s: dict, app: dict, level: str | None = None) -> bool:
        return any(g["app_id"] == app["id"] and (level is None or g["access_level"] == level) for g in self.holds(s))

    def is_privileged(self, s: dict) -> bool:
        return any(g["access_level"] == "admin" for g in self.holds(s))

    def allowed(self, app: dict, s: dict) -> bool:
        return app["allowed_departments"] == "all" or s["department"] in app["allowed_departments"].split(",")

    def seats_free(self, app: dict) -> int:
        return app["seats_total"] - len(self.seats_used.get(app["id"], ()))

    def grantable(self, s: dict, *, allowed: bool = True) -> list[dict]:
        """Active apps the person does not hold, with a free seat, (not) open to their department; no company-wide defaults."""
        return [
            a
            for a in self.world["software_apps"]
            if a["active"] and a["name"] not in DEFAULT_APPS and self.allowed(a, s) == allowed and not self.holds_app(s, a) and self.seats_free(a) > 0
        ]

    def licensed(self, s: dict) -> list[dict]:
        """The person's standard grants of non-default apps, with the app."""
        return [g for g in self.holds(s) if g["access_level"] == "standard" and self.apps[g["app_id"]]["name"] not in DEFAULT_APPS]

    def device(self, s: dict, kind: str) -> dict | None:
        """The person's only assigned device of a kind (None when they have none or several)."""
        mine = [a for a in self.devices.get(s["id"], []) if a["kind"] == kind]
        return mine[0] if len(mine) == 1 else None

    def age(self, asset: dict) -> int:
        return (self.today - dt.date.fromisoformat(asset["purchased_on"])).days

    def manager(self, s: dict) -> dict | None:
        return self.staff.get(s["manager_id"])

    def shift(self, team: str) -> dict:
        return next(x for x in self.world["oncall_shifts"] if x["team"] == team and x["starts_on"] <= self.today.isoformat() <= x["ends_on"])

    def priority(self, s: dict, base: str) -> str:
        return EXEC_BUMP[base] if s["role"] == "executive" else base

    # -- patches ------------------------------------------------------------------------------------
    def new_ticket(self, s: dict, category: str, priority: str, status: str, subject: str, opened_ago: int) -> dict:
        opened = self.today - dt.timedelta(days=opened_ago)
        updated = opened if status == "new" else min(opened + dt.timedelta(days=1), self.today)
        return {
            "id": self.new_id("it_tickets"),
            "staff_id": s["id"],
            "category": category,
            "priority": priority,
            "status": status,
            "subject": subject,
            "description": f"{subject}. Reported by {s['first_name']} {s['last_name']}.",
            "asset_id": None,
            "opened_on": opened.isoformat(),
            "due_on": (opened + dt.timedelta(days=SLA_DAYS[priority])).isoformat(),
            "updated_on": updated.isoformat(),
            "resolved_on": updated.isoformat() if status in ("resolved", "closed") else None,
        }

    def new_request(self, s: dict, app: dict, level: str, status: str) -> dict:
        requested = self.today - dt.timedelta(days=self.rng.randint(2, 6))
        return {
            "id": self.new_id("software_access_requests"),
            "staff_id": s["id"],
            "app_id": app["id"],
            "access_level": level,
            "status": status,
            "justification": f"Needs {level} access to {app['name']} for their work.",
            "requested_on": requested.isoformat(),
            "approver_id": s["manager_id"],
            "decided_on": None if status == "awaiting_approval" else (self.today - dt.timedelta(days=1)).isoformat(),
        }

    # -- phrasing -----------------------------------------------------------------------------------
    def hello(self, s: dict) -> str:
        """An opening that identifies the caller by name and work email."""
        name = f"{s['first_name']} {s['last_name']}"
        return self.opening(f"this is {name} ({s['email']}).", f"I'm {name}, my work email is {s['email']}.", f"my email is {s['email']}.")

    def user(self, s: dict, context: str, first: list[str] | None = None) -> dict:
        """The simulated staff member: persona, the facts they know, and scripted replies."""
        role = s["role"].replace("_", " ")
        who = f"{s['first_name']} {s['last_name']}, {'an' if role[0] in 'aeiou' else 'a'} {role} in {s['department'].replace('_', ' ')}"
        return self.simulated_user(f"{who} at Brightline Systems", f"Your work email is {s['email']}. {context}", first)

    def identity(self, s: dict) -> tuple[str, str, dict]:
        """A staff member's identity details as they say them, as their context says them, and as reset_credential arguments."""
        dob = dt.date.fromisoformat(s["date_of_birth"])
        when = self.rng.choice([long_date(dob), dob.isoformat()])
        facts = f"employee number is {s['employee_number']} and {{}} date of birth is {when}"
        return (
            f"my {facts.format('my')}",
            f"your {facts.format('your')}",
            {"employee_number": s["employee_number"], "date_of_birth": s["date_of_birth"]},
        )


def _find(s: dict) -> dict:
    return call("find_staff_member", email=s["email"])


def _profile(s: dict) -> dict:
    return call("get_staff_profile", staff_id=s["id"])


def _note(s: dict, body: str) -> dict:
    return call("add_desk_note", staff_id=s["id"], body=body)


def _app_phrase(app: dict, level: str) -> str:
    return f"admin rights on {app['name']}" if level == "admin" else f"access to {app['name']}"


# ================================================================================================
# Templates. Each returns one task (without id): instruction, user, patch, gold, optional checks.
# ================================================================================================

# -- single_write ---------------------------------------------------------------------------------


def t_grant_standard_access(g: Generator) -> dict:
    s = g.pick(lambda s: bool(g.grantable(s)))
    app = g.rng.choice(g.grantable(s))
    why = g.rng.choice(APP_REASONS)
    until = None
    if g.rng.random() < 0.35:  # temporary access until a given day
        until = g.today + dt.timedelta(days=g.rng.randint(10, 60))
    ask = f"Could you give me access to {app['name']}? I need it {why}." + (f" I only need it until {long_date(until)}." if until else "")
    return {
        "instruction": f"{g.hello(s)} {ask}",
        "user": g.user(s, f"You need standard access to {app['name']} {why}" + (f", only until {long_date(until)}." if until else ".")),
        "gold": [
            _find(s),
            call("search_software", query=app["name"]),
            call("grant_software_access", staff_id=s["id"], app_id=app["id"], access_level="standard", expires_on=until and until.isoformat()),
        ],
        "tags": ["access", "grant"] + (["temporary"] if until else []),
    }


def t_ticket_status(g: Generator) -> dict:
    s = g.pick()
    current, wanted, says = g.rng.choice(TICKET_CHANGES)
    category, base, subject, _ = g.rng.choice(ISSUES)
    ticket = g.new_ticket(s, category, base, current, subject, g.rng.randint(1, 12))
    text = says.format(t=ticket["id"])
    return {
        "instruction": f"{g.hello(s)} {text}",
        "user": g.user(s, f'About your ticket #{ticket["id"]} ("{subject}") you say: "{text}"'),
        "patch": Patch().add("it_tickets", ticket),
        "gold": [call("update_it_ticket", ticket_id=ticket["id"], status=wanted)],
        "checks": [{"sql": f"SELECT status FROM it_tickets WHERE id = {ticket['id']}", "expect": [[wanted]]}],
        "tags": ["ticket", f"{current}->{wanted}"],
    }


def t_reset_credential(g: Generator) -> dict:
    credential = g.rng.choice(["password", "password", "mfa"])
    s = g.pick(lambda s: credential == "password" or not g.is_privileged(s), role=None)
    words, yours, args = g.identity(s)
    patch = Patch()
    if credential == "password":
        patch.add("staff_members", {"id": s["id"], "account_locked": 1})
        ask = "I typed my password wrong too many times and now my account is locked. Can you reset my password?"
    else:
        ask = "I got a new phone and my authenticator app didn't come with it, so I can't pass the MFA prompt. Can you reset my MFA?"
    return {
        "instruction": f"{g.hello(s)} {ask} For the check, {words}.",
        "user": g.user(s, f"You need your {credential.replace('mfa', 'MFA')} reset; {yours}."),
        "patch": patch,
        "gold": [_find(s), call("reset_credential", staff_id=s["id"], credential=credential, **args)],
        "tags": ["credential", credential],
    }


def t_open_ticket(g: Generator) -> dict:
    s = g.pick()
    category, base, subject, phrase = g.rng.choice(ISSUES)
    return {
        "instruction": f"{g.hello(s)} {cap(phrase)}",
        "user": g.user(s, f"You report this problem {said(phrase)}."),
        "gold": [_find(s), call("open_it_ticket", staff_id=s["id"], category=category, priority=base, subject=subject, description=f"{cap(phrase)}")],
        "tags": ["ticket", category, base],
    }


# -- lookup_then_act ------------------------------------------------------------------------------


def t_contractor_access(g: Generator) -> dict:
    s = g.pick(lambda s: bool(g.grantable(s)), role="contractor")
    app = g.rng.choice(g.grantable(s))
    why = g.rng.choice(APP_REASONS)
    return {
        "instruction": f"{g.hello(s)} I'm a contractor on the {s['department'].replace('_', ' ')} team. Could I get access to {app['name']} {why}?",
        "user": g.user(
            s,
            f"You are a contractor (your contract ends {long_date(dt.date.fromisoformat(s['contract_end']))}) "
            f"and need access to {app['name']} {why}.",
        ),
        "gold": [
            _find(s),
            _profile(s),
            call("search_software", query=app["name"]),
            call("grant_software_access", staff_id=s["id"], app_id=app["id"], access_level="standard", expires_on=s["contract_end"]),
        ],
        "tags": ["access", "grant", "contractor"],
    }


def t_approved_request(g: Generator) -> dict:
    admin = g.rng.random() < 0.5
    if admin:
        s = g.pick(
            lambda s: s["department"] in ("engineering", "it") and any(not g.holds_app(s, g.apps[x["app_id"]], "admin") for x in g.licensed(s))
        )
        app = g.apps[g.rng.choice([x for x in g.licensed(s) if not g.holds_app(s, g.apps[x["app_id"]], "admin")])["app_id"]]
        level = "admin"
    else:
        s = g.pick(lambda s: bool(g.grantable(s, allowed=False)))
        app, level = g.rng.choice(g.grantable(s, allowed=False)), "standard"
    req = g.new_request(s, app, level, "approved")
    mgr = g.manager(s)
    return {
        "instruction": f"{g.hello(s)} My manager {mgr['first_name']} approved my request for {_app_phrase(app, level)}. Can you set it up?",
        "user": g.user(s, f"{mgr['first_name']} {mgr['last_name']} approved your request for {_app_phrase(app, level)} yesterday."),
        "patch": Patch().add("software_access_requests", req),
        "gold": [_find(s), _profile(s), call("grant_software_access", staff_id=s["id"], app_id=app["id"], access_level=level, request_id=req["id"])],
        "checks": [{"sql": f"SELECT status FROM software_access_requests WHERE id = {req['id']}", "expect": [["fulfilled"]]}],
        "tags": ["access", "grant", "approved", level],
    }


def _loan_phrase(g: Generator, kind: str, purpose: str) -> str:
    return g.rng.choice(LOAN_PURPOSES[purpose]).format(city=g.rng.choice(CITIES), kind=kind)


def _loan_setup(g: Generator, s: dict, kind: str, purpose: str) -> Patch:
    """A loan to cover a device in repair needs the person's own device to be in repair."""
    patch = Patch()
    if purpose == "temporary_replacement":
        own = g.device(s, kind)
        patch.add("hardware_assets", {"id": own["id"], "status": "in_repair", "assigned_to": None})
    return patch


def t_loaner(g: Generator) -> dict:
    kind = g.rng.choice(LOAN_KINDS)
    purpose = g.rng.choice(sorted(LOAN_PURPOSES))
    s = g.pick(lambda s: purpose != "temporary_replacement" or g.device(s, kind) is not None)
    due = g.today + dt.timedelta(days=g.rng.randint(3, 29))
    why = _loan_phrase(g, kind, purpose)
    spare = g.spares[kind][0]
    return {
        "instruction": f"{g.hello(s)} Could I borrow a {kind} {why}? I'd bring it back on {long_date(due)}.",
        "user": g.user(s, f"You want to borrow a {kind} {why.replace('my own', 'your own')} and return it on {long_date(due)}."),
        "patch": _loan_setup(g, s, kind, purpose),
        "gold": [
            _find(s),
            call("search_hardware", kind=kind),
            call("lend_hardware", asset_id=spare["id"], staff_id=s["id"], due_on=due.isoformat(), purpose=purpose),
        ],
        "rubrics": [rubric(f"Does the reply tell the staff member the date the {kind} is due back, {{}}?", long_date(due))],
        "gold_reply": f"I have lent you a {kind}; please bring it back by {long_date(due)}.",
        "tags": ["hardware", "loan", kind, purpose],
    }


def t_replace_device(g: Generator) -> dict:
    reason = g.rng.choice(["broken", "broken", "lost"])
    kinds = sorted(BROKEN) if reason == "broken" else ["laptop", "phone", "headset"]
    kind = g.rng.choice([k for k in kinds if g.spares.get(k)])
    s = g.pick(lambda s: g.device(s, kind) is not None)
    old = g.device(s, kind)
    what = f"my {kind} is broken: {g.rng.choice(BROKEN[kind])}" if reason == "broken" else g.rng.choice(LOST).format(kind=kind)
    return {
        "instruction": f"{g.hello(s)} {cap(what)}. Can I get a replacement?",
        "user": g.user(s, f"You need a replacement {kind} {said(what)}."),
        "gold": [
            _find(s),
            _profile(s),
            call("search_hardware", kind=kind),
            call("replace_hardware", asset_id=old["id"], replacement_asset_id=g.spares[kind][0]["id"], reason=reason),
        ],
        "tags": ["hardware", "replacement", kind, reason],
    }


def t_refresh_old_device(g: Generator) -> dict:
    kind = g.rng.choice(["laptop", "laptop", "phone"])
    s = g.pick(lambda s: (d := g.device(s, kind)) is not None and g.age(d) >= REFRESH_AGE_DAYS)
    old = g.device(s, kind)
    return {
        "instruction": f"{g.hello(s)} My {kind} is getting really old and slow. Am I due for a refresh? If so I'd like a new one.",
        "user": g.user(s, f"Your {kind} ({old['model']}) was bought on {long_date(dt.date.fromisoformat(old['purchased_on']))}; you want a new one."),
        "gold": [
            _find(s),
            _profile(s),
            call("search_hardware", kind=kind),
            call("replace_hardware", asset_id=old["id"], replacement_asset_id=g.spares[kind][0]["id"], reason="end_of_life"),
        ],
        "tags": ["hardware", "replacement", "end_of_life", kind],
    }


def t_manager_for_report(g: Generator) -> dict:
    """A manager asks for a direct report: allowed, once the report's profile shows the caller as manager."""

    def fits(r: dict) -> bool:
        return r["role"] == "employee" and g.clean(r) and r["id"] not in g.used and (bool(g.licensed(r)) or bool(g.grantable(r)))

    m = g.pick(lambda m: m["role"] == "manager" and any(fits(r) for r in g.reports.get(m["id"], [])))
    r = g.rng.choice([r for r in g.reports[m["id"]] if fits(r)])
    g.used.add(r["id"])
    who = f"{r['first_name']} {r['last_name']} ({r['email']})"
    if g.licensed(r) and (not g.grantable(r) or g.rng.random() < 0.5):
        grant = g.rng.choice(g.licensed(r))
        app = g.apps[grant["app_id"]]
        ask, write = (
            f"{who} on my team doesn't need {app['name']} any more. Please remove it from their account.",
            call("revoke_software_access", grant_id=grant["id"], reason="no_longer_needed"),
        )
    else:
        app = g.rng.choice(g.grantable(r))
        ask, write = (
            f"Please give {who}, who reports to me, access to {app['name']}.",
            call("grant_software_access", staff_id=r["id"], app_id=app["id"], access_level="standard"),
        )
    return {
        "instruction": f"{g.hello(m)} {ask}",
        "user": g.user(m, f"You manage {who} and ask {said(ask)}"),
        "gold": [_find(m), _find(r), _profile(r), write],
        "tags": ["access", "manager", write["tool"].split("_")[0]],
    }


def t_executive_ticket(g: Generator) -> dict:
    s = g.pick(role="executive")
    category, base, subject, phrase = g.rng.choice([i for i in ISSUES if i[1] != "P2"])
    return {
        "instruction": f"{g.hello(s)} {cap(phrase)}",
        "user": g.user(s, f"You report this problem {said(phrase)}."),
        "gold": [
            _find(s),
            call("open_it_ticket", staff_id=s["id"], category=category, priority=g.priority(s, base), subject=subject, description=cap(phrase)),
        ],
        "tags": ["ticket", "executive", category, f"{base}->{g.priority(s, base)}"],
    }


def t_device_fault_ticket(g: Generator) -> dict:
    kind, base, subject, phrase = g.rng.choice(FAULTS)
    s = g.pick(lambda s: g.device(s, kind) is not None)
    dev = g.device(s, kind)
    return {
        "instruction": f"{g.hello(s)} {cap(phrase)}. Can someone take a look?",
        "user": g.user(s, f"You report a fault of your {kind} {said(phrase)}. You don't want it replaced, just fixed."),
        "gold": [
            _find(s),
            _profile(s),
            call(
                "open_it_ticket",
                staff_id=s["id"],
                category="hardware",
                priority=g.priority(s, base),
                subject=subject,
                description=f"{cap(phrase)}.",
                asset_id=dev["id"],
            ),
        ],
        "tags": ["ticket", "hardware", kind],
    }


# -- policy_refusal -------------------------------------------------------------------------------


def t_contractor_admin(g: Generator) -> dict:
    s = g.pick(lambda s: bool(g.licensed(s)), role="contractor")
    app = g.apps[g.rng.choice(g.licensed(s))["app_id"]]
    why = g.rng.choice(ADMIN_REASONS)
    return {
        "instruction": f"{g.hello(s)} I need admin rights on {app['name']} {why}. Can you give me that?",
        "user": g.user(s, f"You are a contractor and want admin rights on {app['name']} {why}. You accept a refusal."),
        "gold": [
            _find(s),
            _profile(s),
            _note(s, f"Contractor asked for admin rights on {app['name']}; refused: contractors never get admin access."),
        ],
        "tags": ["access", "refusal", "contractor", "admin"],
    }


def t_admin_needs_approval(g: Generator) -> dict:
    s = g.pick(lambda s: any(not g.holds_app(s, g.apps[x["app_id"]], "admin") for x in g.licensed(s)))
    app = g.apps[g.rng.choice([x for x in g.licensed(s) if not g.holds_app(s, g.apps[x["app_id"]], "admin")])["app_id"]]
    why = g.rng.choice(ADMIN_REASONS)
    return {
        "instruction": f"{g.hello(s)} Please make me an admin on {app['name']}; I need it {why}.",
        "user": g.user(s, f"You want admin rights on {app['name']} {why}. Nobody has approved it yet; you accept waiting for your manager."),
        "gold": [
            _find(s),
            _profile(s),
            call("search_software", query=app["name"]),
            call(
                "request_software_access",
                staff_id=s["id"],
                app_id=app["id"],
                access_level="admin",
                justification=f"Needs admin rights on {app['name']} {why}.",
            ),
        ],
        "checks": [
            {
                "sql": f"SELECT COUNT(*) FROM software_access_grants WHERE staff_id = {s['id']} AND app_id = {app['id']} AND access_level = 'admin'",
                "expect": [[0]],
            }
        ],
        "tags": ["access", "request", "admin"],
    }


def t_admin_request_pending(g: Generator) -> dict:
    s = g.pick(lambda s: any(not g.holds_app(s, g.apps[x["app_id"]], "admin") for x in g.licensed(s)))
    app = g.apps[g.rng.choice([x for x in g.licensed(s) if not g.holds_app(s, g.apps[x["app_id"]], "admin")])["app_id"]]
    req = g.new_request(s, app, "admin", "awaiting_approval")
    return {
        "instruction": f"{g.hello(s)} I asked for admin rights on {app['name']} a few days ago and nothing has happened. "
        f"Can you just switch them on for me now?",
        "user": g.user(
            s,
            f"You requested admin rights on {app['name']} on {long_date(dt.date.fromisoformat(req['requested_on']))}; "
            f"your manager has not decided yet. You accept a refusal.",
        ),
        "patch": Patch().add("software_access_requests", req),
        "gold": [
            _find(s),
            _profile(s),
            _note(s, f"Asked for admin rights on {app['name']} while request #{req['id']} awaits the manager's approval; refused."),
        ],
        "tags": ["access", "refusal", "admin", "awaiting_approval"],
    }


def t_cross_department(g: Generator) -> dict:
    s = g.pick(lambda s: bool(g.grantable(s, allowed=False)))
    app = g.rng.choice(g.grantable(s, allowed=False))
    why = g.rng.choice(APP_REASONS)
    return {
        "instruction": f"{g.hello(s)} Can you give me access to {app['name']}? I need it {why}.",
        "user": g.user(s, f"You ({s['department'].replace('_', ' ')}) want access to {app['name']} {why}; you accept waiting for an approval."),
        "gold": [
            _find(s),
            call("search_software", query=app["name"]),
            call("request_software_access", staff_id=s["id"], app_id=app["id"], access_level="standard", justification=f"Needs {app['name']} {why}."),
        ],
        "tags": ["access", "request", "cross_department"],
    }


def t_identity_mismatch(g: Generator) -> dict:
    credential = g.rng.choice(["password", "mfa"])
    # A privileged account's MFA goes to the security team whatever the check says: keep the cases apart.
    s = g.pick(lambda s: credential == "password" or not g.is_privileged(s), role=None)
    dob = dt.date.fromisoformat(s["date_of_birth"])
    wrong = dob.replace(year=dob.year + g.rng.choice([-2, -1, 1])) if not (dob.month == 2 and dob.day == 29) else dob + dt.timedelta(days=3)
    return {
        "instruction": f"{g.hello(s)} Please reset my {'password' if credential == 'password' else 'MFA, I replaced my phone'}. "
        f"My employee number is {s['employee_number']} and I was born on {long_date(wrong)}.",
        "user": g.user(
            s,
            f"You want your {credential.replace('mfa', 'MFA')} reset. You give employee number {s['employee_number']} and date of birth "
            f"{long_date(wrong)} (you are sure of it). You accept a refusal.",
        ),
        "gold": [_find(s), _note(s, f"{credential} reset refused: the identity check failed (date of birth did not match).")],
        "tags": ["credential", "refusal", "identity"],
    }


def t_refresh_too_new(g: Generator) -> dict:
    kind = g.rng.choice(["laptop", "laptop", "phone"])
    s = g.pick(lambda s: (d := g.device(s, kind)) is not None and 200 <= g.age(d) < REFRESH_AGE_DAYS)
    old = g.device(s, kind)
    return {
        "instruction": f"{g.hello(s)} My {kind} feels slow these days. Could I get a new one?",
        "user": g.user(s, f"Your {kind} works, it just feels slow; you would like a new one. You accept a refusal."),
        "gold": [
            _find(s),
            _profile(s),
            _note(s, f"Asked for a new {kind}; refused: {old['asset_tag']} is {g.age(old)} days old, under the 4-year refresh age."),
        ],
        "tags": ["hardware", "refusal", "end_of_life", kind],
    }


def t_no_free_seat(g: Generator) -> dict:
    s = g.pick(lambda s: bool(g.grantable(s)))
    app = g.rng.choice(g.grantable(s))
    used = len(g.seats_used.get(app["id"], ()))
    return {
        "instruction": f"{g.hello(s)} I'd like access to {app['name']}, please.",
        "user": g.user(s, f"You need access to {app['name']} for your work; if no licence is free you accept waiting for one."),
        "patch": Patch().add("software_apps", {"id": app["id"], "seats_total": used}),
        "gold": [
            _find(s),
            call("search_software", query=app["name"]),
            call(
                "open_it_ticket",
                staff_id=s["id"],
                category="access",
                priority="P4",
                subject=f"Licence seat needed for {app['name']}",
                description=f"No free {app['name']} seat for {s['first_name']} {s['last_name']}; please buy one.",
            ),
        ],
        "tags": ["access", "refusal", "licence"],
    }


def t_privileged_mfa(g: Generator) -> dict:
    s = g.pick(g.is_privileged)
    words, yours, _ = g.identity(s)
    return {
        "instruction": f"{g.hello(s)} I replaced my phone and lost my authenticator, so please reset my MFA. {cap(words)}.",
        "user": g.user(s, f"You want your MFA reset because you replaced your phone; {yours}."),
        "gold": [
            _find(s),
            _profile(s),
            call(
                "open_it_ticket",
                staff_id=s["id"],
                category="security",
                priority="P2",
                subject="MFA reset for a privileged account",
                description="Staff member with admin access asks for an MFA reset; needs in-person verification by security.",
            ),
        ],
        "checks": [
            {"sql": f"SELECT mfa_reset_on, mfa_method FROM staff_members WHERE id = {s['id']}", "expect": [[s["mfa_reset_on"], s["mfa_method"]]]}
        ],
        "tags": ["credential", "refusal", "privileged", "mfa"],
    }


def t_foreign_request(g: Generator) -> dict:
    caller = g.pick()
    target = g.pick(lambda t: t["manager_id"] != caller["id"] and t["id"] != caller["id"] and bool(g.licensed(t)))
    app = g.apps[g.rng.choice(g.licensed(target))["app_id"]]
    kind = g.rng.choice(["revoke", "reset"])
    tname = f"{target['first_name']} {target['last_name']} ({target['email']})"
    ask = (
        f"Please remove {app['name']} from my colleague {tname}; they don't use it."
        if kind == "revoke"
        else f"My colleague {tname} is locked out. Can you reset their password for them?"
    )
    return {
        "instruction": f"{g.hello(caller)} {ask}",
        "user": g.user(caller, f"You ask on behalf of {tname}, who is not one of your direct reports. You accept a refusal."),
        "gold": [
            _find(caller),
            _find(target),
            _profile(target),
            _note(
                caller,
                f"Asked to {'revoke ' + app['name'] + ' from' if kind == 'revoke' else 'reset the password of'} "
                f"a colleague who is not their report; refused.",
            ),
        ],
        "tags": ["refusal", "authority", kind],
    }


def t_loan_too_long(g: Generator) -> dict:
    contractor = g.rng.random() < 0.5
    s = g.pick(role="contractor" if contractor else "staff")
    days = g.rng.randint(16, 30) if contractor else g.rng.randint(35, 60)
    kind = g.rng.choice(LOAN_KINDS)
    due = g.today + dt.timedelta(days=days)
    why = _loan_phrase(g, kind, g.rng.choice(["travel", "project", "training"]))
    return {
        "instruction": f"{g.hello(s)} Can I borrow a {kind} {why}? I'd keep it until {long_date(due)}.",
        "user": g.user(s, f"You want a {kind} {why} until {long_date(due)}; you can't shorten that. You accept a refusal."),
        "gold": [
            _find(s),
            _profile(s),
            _note(s, f"Asked to borrow a {kind} until {due.isoformat()}; refused: longer than the {14 if contractor else 30}-day loan limit."),
        ],
        "tags": ["hardware", "loan", "refusal"] + (["contractor"] if contractor else []),
    }


# -- needs_user_info ------------------------------------------------------------------------------


def t_reset_needs_identity(g: Generator) -> dict:
    credential = g.rng.choice(["password", "password", "mfa"])
    s = g.pick(lambda s: credential == "password" or not g.is_privileged(s), role=None)
    words, yours, args = g.identity(s)
    patch = Patch()
    if credential == "password":
        patch.add("staff_members", {"id": s["id"], "account_locked": 1})
        ask = "I'm locked out of my account. Can you reset my password?"
    else:
        ask = "My authenticator app was on my old phone, which I wiped. Can you reset my MFA?"
    return {
        "instruction": f"{g.hello(s)} {ask}",
        "user": g.user(s, f"You need your {credential.replace('mfa', 'MFA')} reset. When asked to prove who you are: {yours}.", [f"Sure: {words}."]),
        "patch": patch,
        "gold": [_find(s), call("reset_credential", staff_id=s["id"], credential=credential, **args)],
        "tags": ["credential", credential, "ask_identity"],
    }


def t_loaner_needs_details(g: Generator) -> dict:
    kind = g.rng.choice(LOAN_KINDS)
    purpose = g.rng.choice(["travel", "project", "training"])
    s = g.pick()
    due = g.today + dt.timedelta(days=g.rng.randint(3, 29))
    why = _loan_phrase(g, kind, purpose)
    return {
        "instruction": f"{g.hello(s)} I need to borrow a {kind} for a while.",
        "user": g.user(s, f"You want a {kind} {why}, to return on {long_date(due)}.", [f"It's {why}, and I'll bring it back on {long_date(due)}."]),
        "gold": [
            _find(s),
            call("search_hardware", kind=kind),
            call("lend_hardware", asset_id=g.spares[kind][0]["id"], staff_id=s["id"], due_on=due.isoformat(), purpose=purpose),
        ],
        "tags": ["hardware", "loan", "ask_details"],
    }


def t_close_which_ticket(g: Generator) -> dict:
    s = g.pick()
    (c1, p1, sub1, _), (c2, p2, sub2, _) = g.rng.sample(ISSUES, 2)
    t1 = g.new_ticket(s, c1, p1, g.rng.choice(["new", "in_progress"]), sub1, g.rng.randint(1, 10))
    t2 = g.new_ticket(s, c2, p2, g.rng.choice(["new", "in_progress"]), sub2, g.rng.randint(1, 10))
    patch = Patch().add("it_tickets", t1).add("it_tickets", t2)
    return {
        "instruction": f"{g.hello(s)} You can close my ticket, I don't need help with it any more.",
        "user": g.user(
            s,
            f'You have two open tickets: #{t1["id"]} ("{sub1}") and #{t2["id"]} ("{sub2}"). Only #{t1["id"]} should be '
            f"closed; #{t2['id']} is still a problem.",
            [f'The one about "{sub1}", ticket #{t1["id"]}. The other one is still a problem.'],
        ),
        "patch": patch,
        "gold": [_find(s), _profile(s), call("update_it_ticket", ticket_id=t1["id"], status="closed")],
        "checks": [{"sql": f"SELECT status FROM it_tickets WHERE id = {t2['id']}", "expect": [[t2["status"]]]}],
        "tags": ["ticket", "ask_which"],
    }


def t_revoke_which_app(g: Generator) -> dict:
    s = g.pick(lambda s: len(g.licensed(s)) >= 2)
    grant = g.rng.choice(g.licensed(s))
    app = g.apps[grant["app_id"]]
    return {
        "instruction": f"{g.hello(s)} I have a software licence I don't use any more, so you can take it back.",
        "user": g.user(s, f"You no longer use {app['name']} and want that access removed; nothing else.", [f"It's {app['name']}."]),
        "gold": [_find(s), _profile(s), call("revoke_software_access", grant_id=grant["id"], reason="no_longer_needed")],
        "tags": ["access", "revoke", "ask_which"],
    }


# -- collateral_trap ------------------------------------------------------------------------------


def t_revoke_one_keep_other(g: Generator) -> dict:
    s = g.pick(lambda s: len(g.licensed(s)) >= 2)
    drop, keep = g.rng.sample(g.licensed(s), 2)
    a, b = g.apps[drop["app_id"]], g.apps[keep["app_id"]]
    return {
        "instruction": f"{g.hello(s)} Please remove my {a['name']} access, I haven't used it in months. "
        f"I still use {b['name']} every day though, so keep that one.",
        "user": g.user(s, f"Remove only your {a['name']} access (unused); keep {b['name']}."),
        "gold": [_find(s), _profile(s), call("revoke_software_access", grant_id=drop["id"], reason="no_longer_needed")],
        "checks": [{"sql": f"SELECT revoked_on FROM software_access_grants WHERE id = {keep['id']}", "expect": [[None]]}],
        "tags": ["access", "revoke", "trap"],
    }


def t_resolve_one_of_two(g: Generator) -> dict:
    s = g.pick()
    (c1, p1, sub1, _), (c2, p2, sub2, _) = g.rng.sample(ISSUES, 2)
    t1 = g.new_ticket(s, c1, p1, "in_progress", sub1, g.rng.randint(2, 10))
    t2 = g.new_ticket(s, c2, p2, "in_progress", sub2, g.rng.randint(2, 10))
    return {
        "instruction": f"{g.hello(s)} Ticket #{t1['id']} is sorted now, thanks, you can mark it resolved. Ticket #{t2['id']} is still a problem though.",
        "user": g.user(s, f"Ticket #{t1['id']} is fixed; ticket #{t2['id']} is not and must stay open."),
        "patch": Patch().add("it_tickets", t1).add("it_tickets", t2),
        "gold": [call("update_it_ticket", ticket_id=t1["id"], status="resolved")],
        "checks": [{"sql": f"SELECT status FROM it_tickets WHERE id = {t2['id']}", "expect": [["in_progress"]]}],
        "tags": ["ticket", "trap"],
    }


def t_replace_one_device(g: Generator) -> dict:
    kind = g.rng.choice(["laptop", "phone", "monitor"])
    s = g.pick(lambda s: g.device(s, kind) is not None and any(d["kind"] != kind for d in g.devices.get(s["id"], [])))
    old = g.device(s, kind)
    other = g.rng.choice([d for d in g.devices[s["id"]] if d["kind"] != kind])
    what = g.rng.choice(BROKEN[kind])
    return {
        "instruction": f"{g.hello(s)} My {kind} is broken: {what}. Please replace it. My {other['kind']} is pretty old too, "
        f"but it still works fine, so leave that alone.",
        "user": g.user(s, f"Your {kind} is broken {said(what)}; you want only it replaced, your {other['kind']} works fine."),
        "gold": [
            _find(s),
            _profile(s),
            call("search_hardware", kind=kind),
            call("replace_hardware", asset_id=old["id"], replacement_asset_id=g.spares[kind][0]["id"], reason="broken"),
        ],
        "checks": [{"sql": f"SELECT status, assigned_to FROM hardware_assets WHERE id = {other['id']}", "expect": [["assigned", s["id"]]]}],
        "tags": ["hardware", "replacement", "trap"],
    }


def t_grant_only_requester(g: Generator) -> dict:
    def fits(s: dict) -> bool:
        mates = [m for m in g.reports.get(s["manager_id"], []) if m["id"] != s["id"] and m["employment_status"] == "active"]
        return any(all(not g.holds_app(m, a) for m in mates[:2]) for a in g.grantable(s)) and len(mates) >= 2

    s = g.pick(fits)
    mates = [m for m in g.reports[s["manager_id"]] if m["id"] != s["id"] and m["employment_status"] == "active"][:2]
    app = g.rng.choice([a for a in g.grantable(s) if all(not g.holds_app(m, a) for m in mates)])
    names = " and ".join(m["first_name"] for m in mates)
    ids = ", ".join(str(m["id"]) for m in mates)
    return {
        "instruction": f"{g.hello(s)} Please give me access to {app['name']}. {names} on my team will probably want it too "
        f"at some point, but they'll ask you themselves.",
        "user": g.user(s, f"You want access to {app['name']} for yourself only; your teammates {names} will ask on their own."),
        "gold": [
            _find(s),
            call("search_software", query=app["name"]),
            call("grant_software_access", staff_id=s["id"], app_id=app["id"], access_level="standard"),
        ],
        "checks": [
            {
                "sql": f"SELECT COUNT(*) FROM software_access_grants WHERE app_id = {app['id']} AND staff_id IN ({ids}) AND revoked_on IS NULL",
                "expect": [[0]],
            }
        ],
        "tags": ["access", "grant", "trap"],
    }


def t_mfa_not_password(g: Generator) -> dict:
    s = g.pick(lambda s: not g.is_privileged(s), role=None)
    words, yours, args = g.identity(s)
    return {
        "instruction": f"{g.hello(s)} I moved to a new phone and my authenticator codes didn't transfer, so please reset my MFA. "
        f"My password is fine, I know it. {cap(words)}.",
        "user": g.user(s, f"Only your MFA needs a reset (new phone); your password is fine. {cap(yours)}."),
        "gold": [_find(s), call("reset_credential", staff_id=s["id"], credential="mfa", **args)],
        "checks": [{"sql": f"SELECT password_reset_on FROM staff_members WHERE id = {s['id']}", "expect": [[s["password_reset_on"]]]}],
        "tags": ["credential", "mfa", "trap"],
    }


# -- multi_step -----------------------------------------------------------------------------------


def t_stolen_device(g: Generator) -> dict:
    kind = g.rng.choice(["laptop", "laptop", "phone"])
    s = g.pick(lambda s: g.device(s, kind) is not None, role=None)
    old = g.device(s, kind)
    what = g.rng.choice(STOLEN).format(kind=kind)
    ticket_id = g.max_ticket_id + 1  # the ticket the gold solution opens (no task patch adds tickets here)
    return {
        "instruction": f"{g.hello(s)} {cap(what)}. I need a replacement as soon as possible.",
        "user": g.user(s, f"Your {kind} ({old['asset_tag']}) was stolen {said(what)}; you need a replacement."),
        "gold": [
            _find(s),
            _profile(s),
            call(
                "open_it_ticket",
                staff_id=s["id"],
                category="security",
                priority="P1",
                subject=f"Stolen {kind} {old['asset_tag']}",
                description=f"{cap(what)}.",
                asset_id=old["id"],
            ),
            call("page_oncall", ticket_id=ticket_id, team="security", message=f"Stolen {kind} {old['asset_tag']}; please lock it remotely."),
            call("search_hardware", kind=kind),
            call("replace_hardware", asset_id=old["id"], replacement_asset_id=g.spares[kind][0]["id"], reason="stolen"),
        ],
        "tags": ["hardware", "security", "stolen", "page"],
    }


def t_role_change(g: Generator) -> dict:
    """Someone moved department: remove apps only their old department may use, add apps of the new one."""

    def options(s: dict, dept: str) -> tuple[list[dict], list[dict]]:
        moved = {**s, "department": dept}
        drop = [x for x in g.licensed(s) if not g.allowed(g.apps[x["app_id"]], moved)]
        add = [a for a in g.grantable(moved) if a["allowed_departments"] != "all"]
        return drop, add

    depts = ["engineering", "sales", "customer_support", "marketing", "finance", "operations"]
    s = g.pick(lambda s: s["department"] in depts and any(all(options(s, d)) for d in depts if d != s["department"]))
    dept = g.rng.choice([d for d in depts if d != s["department"] and all(options(s, d))])
    drop, add = options(s, dept)
    drop = g.rng.sample(drop, min(len(drop), 2))
    add = g.rng.sample(add, min(len(add), g.rng.choice([1, 2])))
    old_names = " and ".join(g.apps[x["app_id"]]["name"] for x in drop)
    new_names = " and ".join(a["name"] for a in add)
    gold = [_find(s), _profile(s)]
    gold += [call("revoke_software_access", grant_id=x["id"], reason="role_change") for x in drop]
    for a in add:
        gold += [call("search_software", query=a["name"]), call("grant_software_access", staff_id=s["id"], app_id=a["id"], access_level="standard")]
    return {
        "instruction": f"{g.hello(s)} I've just moved from {s['department'].replace('_', ' ')} to {dept.replace('_', ' ')} "
        f"(HR has updated my record). Please remove my {old_names} access, which I won't need any more, "
        f"and give me {new_names}.",
        "user": g.user(s, f"You moved to {dept.replace('_', ' ')}. Remove {old_names}; add {new_names}."),
        "patch": Patch().add("staff_members", {"id": s["id"], "department": dept}),
        "gold": gold,
        "tags": ["access", "revoke", "grant", "role_change"],
    }


def t_outage_page(g: Generator) -> dict:
    category, team, subject, phrase = g.rng.choice(OUTAGES)
    s = g.pick(lambda s: s["office"] != "Remote" and (category != "software" or bool(g.licensed(s))), role=None)
    app = g.apps[g.rng.choice(g.licensed(s))["app_id"]] if category == "software" else None
    text = phrase.format(office=s["office"], app=app and app["name"])
    subject = subject.format(app=app and app["name"])
    ticket_id = g.max_ticket_id + 1
    return {
        "instruction": f"{g.hello(s)} {cap(text)}.",
        "user": g.user(s, f"You report {said(text)}."),
        "gold": [
            _find(s),
            call("open_it_ticket", staff_id=s["id"], category=category, priority="P1", subject=subject, description=f"{cap(text)}."),
            call("page_oncall", ticket_id=ticket_id, team=team, message=f"P1: {cap(text)}."),
        ],
        "tags": ["ticket", "P1", "page", team],
    }


def t_escalate_existing(g: Generator) -> dict:
    s = g.pick(lambda s: s["office"] != "Remote")
    kind = g.rng.choice(["network", "software"])
    if kind == "network":
        ticket = g.new_ticket(s, "network", "P3", "in_progress", "Slow Wi-Fi at my desk", g.rng.randint(1, 3))
        news, team = f"it has got much worse. Now nobody in the whole {s['office']} office can get on the Wi-Fi", "infrastructure"
    else:
        ticket = g.new_ticket(s, "software", "P3", "in_progress", "Shared reports load slowly", g.rng.randint(1, 3))
        news, team = "it has got much worse. The reporting app is now completely down for the whole team, nobody can open anything", "applications"
    return {
        "instruction": f"{g.hello(s)} An update on my ticket #{ticket['id']}: {news}.",
        "user": g.user(s, f"Your ticket #{ticket['id']} ({ticket['subject']}) got worse {said(news)}."),
        "patch": Patch().add("it_tickets", ticket),
        "gold": [
            _find(s),
            call("get_it_ticket", ticket_id=ticket["id"]),
            call("update_it_ticket", ticket_id=ticket["id"], priority="P1"),
            call("page_oncall", ticket_id=ticket["id"], team=team, message=f"Ticket #{ticket['id']} is now P1: {news}."),
        ],
        "checks": [{"sql": f"SELECT priority, due_on FROM it_tickets WHERE id = {ticket['id']}", "expect": [["P1", ticket["opened_on"]]]}],
        "tags": ["ticket", "P1", "page", "escalation"],
    }


# (family, template function, number of tasks)
TEMPLATES: list[tuple[str, Callable[[Generator], dict], int]] = [
    ("single_write", t_grant_standard_access, 8),
    ("single_write", t_ticket_status, 8),
    ("single_write", t_reset_credential, 8),
    ("single_write", t_open_ticket, 8),
    ("lookup_then_act", t_contractor_access, 5),
    ("lookup_then_act", t_approved_request, 6),
    ("lookup_then_act", t_loaner, 6),
    ("lookup_then_act", t_replace_device, 6),
    ("lookup_then_act", t_refresh_old_device, 4),
    ("lookup_then_act", t_manager_for_report, 4),
    ("lookup_then_act", t_executive_ticket, 5),
    ("lookup_then_act", t_device_fault_ticket, 5),
    ("policy_refusal", t_contractor_admin, 4),
    ("policy_refusal", t_admin_needs_approval, 5),
    ("policy_refusal", t_admin_request_pending, 3),
    ("policy_refusal", t_cross_department, 5),
    ("policy_refusal", t_identity_mismatch, 4),
    ("policy_refusal", t_refresh_too_new, 4),
    ("policy_refusal", t_no_free_seat, 4),
    ("policy_refusal", t_privileged_mfa, 4),
    ("policy_refusal", t_foreign_request, 4),
    ("policy_refusal", t_loan_too_long, 4),
    ("needs_user_info", t_reset_needs_identity, 6),
    ("needs_user_info", t_loaner_needs_details, 5),
    ("needs_user_info", t_close_which_ticket, 5),
    ("needs_user_info", t_revoke_which_app, 5),
    ("collateral_trap", t_revoke_one_keep_other, 5),
    ("collateral_trap", t_resolve_one_of_two, 4),
    ("collateral_trap", t_replace_one_device, 4),
    ("collateral_trap", t_grant_only_requester, 4),
    ("collateral_trap", t_mfa_not_password, 4),
    ("multi_step", t_stolen_device, 5),
    ("multi_step", t_role_change, 5),
    ("multi_step", t_outage_page, 5),
    ("multi_step", t_escalate_existing, 5),
]


def generate(world: dict[str, list[dict]], today: dt.date, rng: random.Random) -> list[dict]:
    """All helpdesk tasks, in template order, ids `helpdesk-<template>-<nnn>`."""
    return _kit.generate(HERE, TEMPLATES, Generator(world, today, rng))
