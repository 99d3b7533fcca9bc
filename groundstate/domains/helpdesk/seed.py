"""Deterministic seed for the helpdesk world (Brightline Systems' IT service desk).

`generate(rng, scale)` returns rows per table in foreign-key order. Every draw comes from `rng`, and
dates are computed from the fixed business date `TODAY`, so the same seed gives the same world on
every machine. `scale` multiplies the head count of every department and everything that hangs off
people (grants, requests, assets, handovers, tickets, notes); the software catalogue, the equipment
models and the on-call calendar are fixed.
"""

from __future__ import annotations

import datetime as dt
import random
import string
from pathlib import Path

from groundstate.domains import _kit
from groundstate.domains._kit import People, Rows, add_years, business_date, group_by, iso, renumber, scaled, unique

TODAY = business_date(Path(__file__).parent)  # a Tuesday

FIRST_NAMES = [*_kit.FIRST_NAMES, "Kwame", "Amara", "Lars", "Freya", "Nikhil", "Ananya", "Dmitri", "Elena", "Mateus", "Sana"]
LAST_NAMES = [*_kit.LAST_NAMES, "Mensah", "Lindqvist", "Ivanova", "Costa", "Reyes", "Sato", "Byrne", "Fischer", "Dubois", "Khan"]
EMAIL_DOMAIN = "brightline.example"

# Department -> (individual contributors at scale 1.0, share of them who are contractors).
DEPARTMENTS = {
    "engineering": (110, 0.12),
    "sales": (60, 0.0),
    "customer_support": (50, 0.10),
    "marketing": (36, 0.10),
    "finance": (30, 0.0),
    "operations": (40, 0.08),
    "hr": (18, 0.0),
    "legal": (14, 0.0),
    "it": (30, 0.10),
}
OFFICES = (["Boston", "Denver", "Austin", "Remote"], [40, 25, 20, 15])
TEAM_SIZE = 9  # individual contributors per manager

# (name, vendor, allowed departments or "all", monthly cost per seat, active). Seats are sized from the
# grants the seed hands out, so some licences run nearly full.
SOFTWARE = [
    ("Slack", "Slack Technologies", "all", 8.75, 1),
    ("Google Workspace", "Google", "all", 12.00, 1),
    ("Zoom", "Zoom Video Communications", "all", 13.33, 1),
    ("Confluence", "Atlassian", "all", 6.05, 1),
    ("1Password", "AgileBits", "all", 7.99, 1),
    ("Expensify", "Expensify", "all", 5.00, 1),
    ("Miro", "Miro", "all", 8.00, 1),
    ("Jira", "Atlassian", "engineering,it,operations", 8.15, 1),
    ("GitHub Enterprise", "GitHub", "engineering,it", 21.00, 1),
    ("AWS Console", "Amazon Web Services", "engineering,it", 0.00, 1),
    ("Datadog", "Datadog", "engineering,it", 23.00, 1),
    ("PagerDuty", "PagerDuty", "engineering,it", 21.00, 1),
    ("Figma", "Figma", "marketing,engineering", 15.00, 1),
    ("Adobe Creative Cloud", "Adobe", "marketing", 59.99, 1),
    ("HubSpot", "HubSpot", "marketing,sales", 45.00, 1),
    ("Salesforce", "Salesforce", "sales,customer_support", 150.00, 1),
    ("LinkedIn Sales Navigator", "LinkedIn", "sales", 99.99, 1),
    ("Gong", "Gong", "sales", 100.00, 1),
    ("Zendesk", "Zendesk", "customer_support", 55.00, 1),
    ("NetSuite", "Oracle", "finance", 129.00, 1),
    ("Tableau", "Salesforce", "finance,sales,operations", 70.00, 1),
    ("Coupa", "Coupa Software", "finance,operations", 35.00, 1),
    ("Asana", "Asana", "operations,marketing", 10.99, 1),
    ("Workday", "Workday", "hr", 42.00, 1),
    ("Greenhouse", "Greenhouse Software", "hr", 30.00, 1),
    ("Ironclad", "Ironclad", "legal", 85.00, 1),
    ("DocuSign", "DocuSign", "legal,sales,finance", 25.00, 1),
    ("Okta Admin Console", "Okta", "it", 0.00, 1),
    ("Jamf Pro", "Jamf", "it", 4.00, 1),
    ("HipChat", "Atlassian", "all", 0.00, 0),  # retired: kept for history, nobody holds it
]
DEFAULT_APPS = ["Slack", "Google Workspace", "Zoom", "Confluence"]  # every hire gets these
OPTIONAL_ALL_APPS = ["1Password", "Expensify", "Miro"]

# kind -> (tag code, [(model, cost)], warranty years)
HARDWARE = {
    "laptop": (
        "LT",
        [
            ("MacBook Pro 14 M3", 2199.00),
            ("MacBook Air 13 M2", 1299.00),
            ("Dell Latitude 7440", 1649.00),
            ("Lenovo ThinkPad X1 Carbon Gen 11", 1899.00),
        ],
        3,
    ),
    "monitor": ("MN", [("Dell U2723QE 27in", 579.00), ("LG 27UL850 27in", 449.00), ("Dell P2422H 24in", 229.00)], 2),
    "phone": ("PH", [("iPhone 15", 799.00), ("iPhone 13", 599.00), ("Pixel 8", 699.00)], 2),
    "headset": ("HS", [("Jabra Evolve2 65", 249.00), ("Poly Voyager Focus 2", 229.00)], 2),
    "dock": ("DK", [("CalDigit TS4", 399.00), ("Dell WD22TB4", 289.00)], 2),
    "tablet": ("TB", [("iPad Air 11", 599.00), ("iPad 10th generation", 449.00)], 2),
}
POOL_IN_STOCK = {"laptop": 14, "monitor": 12, "phone": 8, "headset": 10, "dock": 8, "tablet": 5}

SLA_DAYS = {"P1": 0, "P2": 1, "P3": 3, "P4": 7}
TICKET_SUBJECTS = {
    "hardware": [
        "Monitor flickers",
        "Laptop battery drains fast",
        "Dock does not charge laptop",
        "Headset microphone crackles",
        "Keyboard keys sticking",
    ],
    "software": [
        "Excel crashes on large files",
        "Zoom audio drops",
        "Cannot install printer driver",
        "Figma plugin fails to load",
        "Salesforce report times out",
    ],
    "network": ["VPN disconnects every hour", "Slow Wi-Fi on the third floor", "Cannot reach the build server", "Office Wi-Fi down"],
    "access": ["Need access to a shared drive", "Add me to the finance mailing list", "Licence seat needed"],
    "account": ["Locked out after password change", "MFA prompt never arrives", "Email alias request"],
    "security": ["Suspicious email received", "Clicked a phishing link", "Lost badge"],
    "other": ["Conference room screen not working", "Question about the equipment policy", "Desk phone setup"],
}
NOTE_BODIES = [
    "Walked the staff member through connecting to the VPN; no further action needed.",
    "Explained how to request software access through the desk.",
    "Staff member asked about the loaner policy; explained the 30-day limit.",
    "Reminded the staff member to return the loaner laptop by its due date.",
    "Confirmed the new monitor arrived and works.",
    "Staff member asked how to set up the authenticator app; sent the guide.",
]
JUSTIFICATIONS = [
    "Needed for a cross-team project.",
    "Covering for a colleague on leave.",
    "Required to manage production deployments.",
    "Needs to review reports shared by another department.",
    "Administers the team's workspace.",
]
PAGE_MESSAGES = {
    "infrastructure": "P1: network outage reported by staff; please investigate.",
    "security": "P1: possible account compromise reported; please investigate.",
    "applications": "P1: business application down for a whole team; please investigate.",
}


def _days(n: int) -> dt.timedelta:
    return dt.timedelta(days=n)


def active_on(shift_start: dt.date, day: dt.date) -> bool:
    return shift_start <= day <= shift_start + _days(6)


def generate(rng: random.Random, scale: float = 1.0) -> Rows:
    """The world's rows per table, in foreign-key insertion order; every column present in every row."""
    staff = _staff(rng, scale)
    apps = _apps()
    requests, grants = _access(rng, staff, apps)
    assets, handovers = _hardware(rng, staff, scale)
    tickets = _tickets(rng, scaled(450, scale), staff, assets)
    shifts = _shifts(rng, staff)
    pages = _pages(tickets, shifts)
    notes = _notes(rng, scaled(150, scale), staff, tickets)
    return {
        "staff_members": staff,
        "software_apps": apps,
        "software_access_requests": requests,
        "software_access_grants": grants,
        "hardware_assets": assets,
        "hardware_handovers": handovers,
        "it_tickets": tickets,
        "oncall_shifts": shifts,
        "oncall_pages": pages,
        "service_desk_notes": notes,
    }


# -- people ---------------------------------------------------------------------------------------


def _staff(rng: random.Random, scale: float) -> list[dict]:
    """Executives first, then managers, then individual contributors, so every manager_id points backwards."""
    rows: list[dict] = []
    people = People(rng, EMAIL_DOMAIN, FIRST_NAMES, LAST_NAMES)
    numbers: set[str] = set()

    def person(department: str, role: str, manager_id: int | None) -> dict:
        first, last, email = people.draw()
        prefix = "C" if role == "contractor" else "E"
        number = unique(lambda: f"{prefix}{rng.randint(10000, 99999)}", numbers)
        senior = role in ("executive", "manager")
        hired = TODAY - _days(rng.randint(400, 4000) if senior else rng.randint(30, 3600))
        status, contract_end = "active", None
        if role == "contractor":
            hired = TODAY - _days(rng.randint(30, 360))
            contract_end = TODAY + _days(rng.randint(20, 300))
        if not senior and rng.random() < 0.07:
            status = "terminated" if rng.random() < 0.6 else "on_leave"
            if status == "terminated" and contract_end is not None:
                contract_end = TODAY - _days(rng.randint(5, 25))
        mfa = (
            rng.choices(["hardware_key", "authenticator_app"], weights=[60, 40])[0]
            if department == "it"
            else rng.choices(["authenticator_app", "sms", "none"], weights=[72, 24, 4])[0]
        )
        row = {
            "id": len(rows) + 1,
            "employee_number": number,
            "first_name": first,
            "last_name": last,
            "email": email,
            "phone": f"617-555-{rng.randint(1000, 9999)}",
            "date_of_birth": iso(dt.date(1962, 1, 1) + _days(rng.randint(0, 15000))),
            "department": department,
            "role": role,
            "manager_id": manager_id,
            "office": rng.choices(*OFFICES)[0],
            "employment_status": status,
            "hired_on": iso(hired),
            "contract_end": iso(contract_end),
            "mfa_method": mfa,
            "account_locked": int(status == "active" and rng.random() < 0.03),
            "password_reset_on": iso(TODAY - _days(rng.randint(3, 300))) if rng.random() < 0.3 else None,
            "mfa_reset_on": iso(TODAY - _days(rng.randint(3, 300))) if rng.random() < 0.08 else None,
        }
        rows.append(row)
        return row

    heads = {d: person(d, "executive", None) for d in DEPARTMENTS}
    sizes = {d: max(2, round(n * scale)) for d, (n, _) in DEPARTMENTS.items()}
    managers = {d: [person(d, "manager", heads[d]["id"]) for _ in range(max(1, -(-sizes[d] // TEAM_SIZE)))] for d in DEPARTMENTS}
    for d, (_, contractor_share) in DEPARTMENTS.items():
        for i in range(sizes[d]):
            role = "contractor" if rng.random() < contractor_share else "employee"
            person(d, role, managers[d][i % len(managers[d])]["id"])
    return rows


def _apps() -> list[dict]:
    # seats_total is filled in by _access once the grants are known.
    return [
        {"id": i, "name": name, "vendor": vendor, "allowed_departments": allowed, "seats_total": 0, "monthly_cost": cost, "active": active}
        for i, (name, vendor, allowed, cost, active) in enumerate(SOFTWARE, start=1)
    ]


def allowed(app: dict, department: str) -> bool:
    """Whether a department's staff may hold standard access to an app without an approval."""
    return app["allowed_departments"] == "all" or department in app["allowed_departments"].split(",")


# -- software access --------------------------------------------------------------------------------


def _access(rng: random.Random, staff: list[dict], apps: list[dict]) -> tuple[list[dict], list[dict]]:  # noqa: C901 - one row's rules in the order they draw from the rng; a split would change no logic
    by_name = {a["name"]: a for a in apps}
    requests: list[dict] = []
    grants: list[dict] = []

    def request(s: dict, app: dict, level: str, status: str, requested: dt.date) -> dict:
        decided = None if status == "awaiting_approval" else min(requested + _days(rng.randint(0, 3)), TODAY)
        row = {
            "id": len(requests) + 1,
            "staff_id": s["id"],
            "app_id": app["id"],
            "access_level": level,
            "status": status,
            "justification": rng.choice(JUSTIFICATIONS),
            "requested_on": iso(requested),
            "approver_id": s["manager_id"],
            "decided_on": iso(decided),
        }
        requests.append(row)
        return row

    def grant(s: dict, app: dict, level: str, granted: dt.date, request_id: int | None = None) -> dict:
        row = {
            "id": len(grants) + 1,
            "staff_id": s["id"],
            "app_id": app["id"],
            "access_level": level,
            "request_id": request_id,
            "granted_on": iso(min(granted, TODAY)),
            "expires_on": s["contract_end"],
            "revoked_on": None,
            "revoke_reason": None,
        }
        grants.append(row)
        return row

    for s in staff:
        hired = dt.date.fromisoformat(s["hired_on"])
        start = max(hired, dt.date(2019, 1, 1))
        held = [grant(s, by_name[name], "standard", start) for name in DEFAULT_APPS]
        held += [grant(s, by_name[name], "standard", start + _days(rng.randint(0, 60))) for name in OPTIONAL_ALL_APPS if rng.random() < 0.5]
        for app in apps:
            if app["active"] and app["allowed_departments"] != "all" and allowed(app, s["department"]) and rng.random() < 0.7:
                held.append(grant(s, app, "standard", start + _days(rng.randint(0, 30))))
        # Some staff got approved access outside their department, or admin rights (always through a request).
        if s["manager_id"] is not None and s["role"] != "contractor":
            outside = [a for a in apps if a["active"] and not allowed(a, s["department"])]
            if rng.random() < 0.05:
                app = rng.choice(outside)
                req = request(s, app, "standard", "fulfilled", max(start, TODAY - _days(rng.randint(10, 400))))
                held.append(grant(s, app, "standard", dt.date.fromisoformat(req["decided_on"]), req["id"]))
            admin_odds = 0.5 if s["department"] == "it" else 0.08 if s["department"] == "engineering" else 0.0
            if rng.random() < admin_odds:
                mine = [g for g in held if g["app_id"] not in (by_name[n]["id"] for n in DEFAULT_APPS)]
                for g in rng.sample(mine, min(len(mine), rng.randint(1, 2))):
                    req = request(s, apps[g["app_id"] - 1], "admin", "fulfilled", max(start, TODAY - _days(rng.randint(10, 500))))
                    held.append(grant(s, apps[g["app_id"] - 1], "admin", dt.date.fromisoformat(req["decided_on"]), req["id"]))
        if s["employment_status"] == "terminated":
            left = TODAY - _days(rng.randint(3, 120))
            for g in held:
                g["revoked_on"], g["revoke_reason"] = iso(max(left, dt.date.fromisoformat(g["granted_on"]))), "offboarding"
        else:
            for g in held:
                if rng.random() < 0.03 and g["access_level"] == "standard":
                    g["revoked_on"] = iso(min(dt.date.fromisoformat(g["granted_on"]) + _days(rng.randint(30, 400)), TODAY))
                    g["revoke_reason"] = rng.choice(["no_longer_needed", "role_change"])

    # Open and decided requests that led to no grant (yet).
    candidates = [s for s in staff if s["employment_status"] == "active" and s["manager_id"] is not None and s["role"] != "contractor"]
    held_pairs = {(g["staff_id"], g["app_id"], g["access_level"]) for g in grants if g["revoked_on"] is None}
    for status, count, max_age in (("awaiting_approval", 40, 10), ("rejected", 30, 200), ("approved", 8, 3)):
        for _ in range(max(1, round(count * len(candidates) / 380))):
            s = rng.choice(candidates)
            app = rng.choice([a for a in apps if a["active"]])
            level = "standard" if not allowed(app, s["department"]) else "admin"
            if (s["id"], app["id"], level) in held_pairs:
                continue
            held_pairs.add((s["id"], app["id"], level))
            request(s, app, level, status, TODAY - _days(rng.randint(0, max_age)))
    new_ids = renumber(requests, key=lambda r: (r["requested_on"], r["id"]))
    for g in grants:
        if g["request_id"] is not None:
            g["request_id"] = new_ids[g["request_id"]]
    renumber(grants, key=lambda g: (g["granted_on"], g["id"]))

    # Licences: what is in use plus some headroom (a few seats for most apps, many for company-wide ones).
    used: dict[int, int] = {}
    for g in grants:
        if g["revoked_on"] is None:
            used[g["app_id"]] = used.get(g["app_id"], 0) + 1
    for a in apps:
        if a["active"]:
            a["seats_total"] = used.get(a["id"], 0) + (rng.randint(40, 80) if a["allowed_departments"] == "all" else rng.randint(2, 12))
    return requests, grants


# -- hardware ---------------------------------------------------------------------------------------


def _hardware(rng: random.Random, staff: list[dict], scale: float) -> tuple[list[dict], list[dict]]:
    assets: list[dict] = []
    handovers: list[dict] = []
    counters = {k: 0 for k in HARDWARE}
    serials: set[str] = set()

    def asset(kind: str, status: str, owner: int | None, age_days: int) -> dict:
        code, models, years = HARDWARE[kind]
        model, cost = rng.choice(models)
        counters[kind] += 1
        serial = unique(lambda: "".join(rng.choices(string.ascii_uppercase + string.digits, k=10)), serials)
        bought = TODAY - _days(age_days)
        row = {
            "id": len(assets) + 1,
            "asset_tag": f"BL-{code}-{counters[kind]:05d}",
            "kind": kind,
            "model": model,
            "serial_number": serial,
            "status": status,
            "assigned_to": owner,
            "purchased_on": iso(bought),
            "warranty_until": iso(add_years(bought, years)),
            "cost": cost,
        }
        assets.append(row)
        return row

    def handover(
        a: dict,
        s: dict,
        kind: str,
        reason: str,
        on: dt.date,
        due: dt.date | None = None,
        returned: dt.date | None = None,
        replaces: int | None = None,
    ) -> None:
        handovers.append(
            {
                "id": len(handovers) + 1,
                "asset_id": a["id"],
                "staff_id": s["id"],
                "kind": kind,
                "reason": reason,
                "replaces_asset_id": replaces,
                "handed_on": iso(on),
                "due_on": iso(due),
                "returned_on": iso(returned),
            }
        )

    current = [s for s in staff if s["employment_status"] != "terminated"]
    for s in current:
        tenure = (TODAY - dt.date.fromisoformat(s["hired_on"])).days
        senior = s["role"] in ("executive", "manager")
        phone_odds = 0.8 if senior or s["department"] in ("sales", "customer_support", "it") else 0.1
        kinds = ["laptop"]
        kinds += ["monitor"] * (2 if s["department"] == "engineering" and rng.random() < 0.4 else int(rng.random() < 0.7))
        kinds += ["headset"] * int(rng.random() < 0.6) + ["dock"] * int(rng.random() < 0.5)
        kinds += ["phone"] * int(rng.random() < phone_odds)
        kinds += ["tablet"] * int((s["role"] == "executive" or s["department"] == "sales") and rng.random() < 0.25)
        for kind in kinds:
            age = rng.randint(20, min(max(tenure, 21), 2000 if kind == "laptop" else 1500))
            a = asset(kind, "assigned", s["id"], age)
            # About one device in twelve replaced an earlier one through the desk.
            if rng.random() < 0.08 and age < 900:
                reason = rng.choices(["broken", "lost", "stolen", "end_of_life"], weights=[50, 15, 10, 25])[0]
                old_status = {"broken": "in_repair", "lost": "lost", "stolen": "lost", "end_of_life": "retired"}[reason]
                old = asset(kind, old_status, None, age + rng.randint(300, 1400))
                handover(a, s, "replacement", reason, TODAY - _days(rng.randint(0, age - 1)), replaces=old["id"])

    # The spare pool: new stock, a few devices in repair or retired, and devices out on loan.
    for kind, n in POOL_IN_STOCK.items():
        for _ in range(scaled(n, scale)):
            asset(kind, "in_stock", None, rng.randint(5, 400))
    for _ in range(scaled(8, scale)):
        asset(rng.choice(["laptop", "monitor", "phone"]), "in_repair", None, rng.randint(200, 1200))
    for _ in range(scaled(25, scale)):
        asset(rng.choice(list(HARDWARE)), "retired", None, rng.randint(1500, 2600))
    spare = [a for a in assets if a["status"] == "in_stock" and a["kind"] in ("laptop", "phone", "tablet", "headset")]
    for a in rng.sample(spare, min(len(spare), scaled(10, scale))):
        s = rng.choice([x for x in current if x["employment_status"] == "active"])
        handed = TODAY - _days(rng.randint(1, 25))
        a["status"] = "on_loan"
        handover(a, s, "loan", rng.choice(["travel", "temporary_replacement", "project", "training"]), handed, due=handed + _days(rng.randint(7, 30)))
    # Past loans, all returned; at most one per spare device, so loans of one device never overlap.
    pool = [a for a in assets if a["status"] in ("in_stock", "in_repair") and (TODAY - dt.date.fromisoformat(a["purchased_on"])).days >= 40]
    for a in rng.sample(pool, min(len(pool), scaled(60, scale))):
        s = rng.choice(current)
        bought = max(dt.date.fromisoformat(a["purchased_on"]), dt.date.fromisoformat(s["hired_on"]))
        if (TODAY - bought).days < 40:
            continue
        handed = bought + _days(rng.randint(1, (TODAY - bought).days - 35))
        due = handed + _days(rng.randint(5, 30))
        handover(
            a,
            s,
            "loan",
            rng.choice(["travel", "temporary_replacement", "project", "training"]),
            handed,
            due=due,
            returned=due - _days(rng.randint(0, 4)),
        )
    renumber(handovers, key=lambda h: (h["handed_on"], h["id"]))
    return assets, handovers


# -- tickets, on-call, notes --------------------------------------------------------------------------


def _tickets(rng: random.Random, n: int, staff: list[dict], assets: list[dict]) -> list[dict]:
    current = [s for s in staff if s["employment_status"] != "terminated"]
    owned = group_by((a for a in assets if a["assigned_to"] is not None), "assigned_to")
    rows = []
    for i in range(1, n + 1):
        s = rng.choice(current)
        category = rng.choices(list(TICKET_SUBJECTS), weights=[22, 25, 14, 14, 12, 5, 8])[0]
        subject = rng.choice(TICKET_SUBJECTS[category])
        priority = rng.choices(["P1", "P2", "P3", "P4"], weights=[3, 15, 45, 37])[0]
        if category in ("network", "security", "software") and subject in ("Office Wi-Fi down", "Clicked a phishing link"):
            priority = "P1"
        opened = TODAY - _days(min(int(rng.expovariate(1 / 35)), 150))
        age = (TODAY - opened).days
        if age > 14:
            status = rng.choices(["resolved", "closed", "waiting_on_staff"], weights=[70, 25, 5])[0]
        else:
            status = rng.choices(["new", "in_progress", "waiting_on_staff", "resolved", "closed"], weights=[25, 30, 10, 30, 5])[0]
        updated = opened if status == "new" else min(opened + _days(rng.randint(0, max(0, min(age, 10)))), TODAY)
        asset = rng.choice(owned[s["id"]]) if category == "hardware" and owned.get(s["id"]) else None
        rows.append(
            {
                "id": i,
                "staff_id": s["id"],
                "category": category,
                "priority": priority,
                "status": status,
                "subject": subject,
                "description": f"{subject}. Reported by {s['first_name']} {s['last_name']}.",
                "asset_id": asset["id"] if asset else None,
                "opened_on": iso(opened),
                "due_on": iso(opened + _days(SLA_DAYS[priority])),
                "updated_on": iso(updated),
                "resolved_on": iso(updated) if status in ("resolved", "closed") else None,
            }
        )
    renumber(rows, key=lambda t: (t["opened_on"], t["id"]))
    return rows


ROTA_START = TODAY - _days(TODAY.weekday()) - _days(7 * 22)  # Mondays from 22 weeks back ...
ROTA_WEEKS = 27  # ... to 4 weeks ahead


def _shifts(rng: random.Random, staff: list[dict]) -> list[dict]:
    def pool(department: str) -> list[dict]:
        return [s for s in staff if s["department"] == department and s["employment_status"] == "active" and s["role"] in ("employee", "manager")]

    it_staff = pool("it")
    teams = {"infrastructure": it_staff[0::2], "security": it_staff[1::2], "applications": rng.sample(pool("engineering"), 12)}
    rows = []
    for week in range(ROTA_WEEKS):
        start = ROTA_START + _days(7 * week)
        for team, engineers in teams.items():  # a plain rotation through the team
            rows.append(
                {
                    "id": len(rows) + 1,
                    "team": team,
                    "engineer_id": engineers[week % len(engineers)]["id"],
                    "starts_on": iso(start),
                    "ends_on": iso(start + _days(6)),
                }
            )
    return rows


def team_for(category: str) -> str:
    return {"security": "security", "software": "applications"}.get(category, "infrastructure")


def _pages(tickets: list[dict], shifts: list[dict]) -> list[dict]:
    rows = []
    for t in tickets:
        if t["priority"] != "P1":
            continue
        team, day = team_for(t["category"]), dt.date.fromisoformat(t["opened_on"])
        shift = next((s for s in shifts if s["team"] == team and active_on(dt.date.fromisoformat(s["starts_on"]), day)), None)
        if shift is not None:
            rows.append(
                {"id": len(rows) + 1, "ticket_id": t["id"], "shift_id": shift["id"], "message": PAGE_MESSAGES[team], "paged_on": t["opened_on"]}
            )
    return rows


def _notes(rng: random.Random, n: int, staff: list[dict], tickets: list[dict]) -> list[dict]:
    rows = []
    for i in range(1, n + 1):
        t = rng.choice(tickets) if rng.random() < 0.4 else None
        staff_id = t["staff_id"] if t else rng.choice(staff)["id"]
        created = dt.date.fromisoformat(t["opened_on"]) if t else TODAY - _days(rng.randint(0, 300))
        rows.append({"id": i, "staff_id": staff_id, "ticket_id": t["id"] if t else None, "body": rng.choice(NOTE_BODIES), "created_on": iso(created)})
    renumber(rows, key=lambda r: (r["created_on"], r["id"]))
    return rows
