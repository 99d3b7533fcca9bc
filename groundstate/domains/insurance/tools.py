"""Tools of the Harborline Mutual motor insurance service agent.

Each tool is a typed function over the sandbox `Db`; its docstring is what the agent reads. Reads
return JSON-ready dicts. Writes check the rules the insurance system itself enforces (a policy must be
active, a vehicle or driver must be on the policy, what a coverage pays for, claim states, limits on
vehicles and drivers per policy) and raise `ToolError` to refuse; the engine then rolls back whatever
the call wrote. Rules that depend on judgement or authority (the 30-day reporting window, the agent's
$5,000 settlement authority, which drivers and vehicles underwriting must accept, who may ask for a
change, how a claim's payable amount is computed) live in policy.md: following them is the agent's job.

Pricing lives here, because both the tools and the seed must price the same way: a vehicle's premium
follows from the policy's coverage and deductible and the vehicle's value and usage; a driver adds a
loading by age and licence experience; a policy's annual premium is the sum of its covered vehicles'
premiums and its active drivers' loadings, and every endorsement re-prices the policy and records the
pro-rated difference for the rest of the term.

Conventions: SQL is portable and every argument is bound as a parameter; money is handled in whole
cents and stored rounded to 2 decimals; dates are ISO strings, and "today" is `db.today`; repeating a
write that has already taken effect (approving an approved claim, removing a removed driver) is
refused rather than silently applied twice.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from groundstate.state.db import Db
from groundstate.tools import ToolError, tool

Coverage = Literal["third_party", "third_party_fire_theft", "comprehensive"]
Deductible = Literal[250, 500, 1000]
Usage = Literal["personal", "commute", "business"]
Relationship = Literal["spouse", "partner", "child", "parent", "other"]
IncidentType = Literal["collision", "theft", "fire", "vandalism", "weather", "windscreen"]
DenialReason = Literal["late_report", "not_covered", "unlisted_driver", "below_deductible"]
PayoutMethod = Literal["bank_transfer", "cheque", "repairer"]
Team = Literal["claims_adjuster", "underwriting", "fraud", "customer_relations"]

MAX_VEHICLES = 3
MAX_DRIVERS = 5
MIN_DRIVING_AGE = 17

# -- pricing (shared with seed.py) -------------------------------------------------------------------

# Own-damage incidents each coverage pays for; third party cover pays only for damage done to others,
# which is not handled at this desk.
COVERED: dict[str, frozenset[str]] = {
    "third_party": frozenset(),
    "third_party_fire_theft": frozenset({"fire", "theft"}),
    "comprehensive": frozenset({"collision", "theft", "fire", "vandalism", "weather", "windscreen"}),
}
# Vehicle premium = (base + rate × vehicle value) × usage factor × deductible factor.
COVER_BASE = {"third_party": 420.0, "third_party_fire_theft": 360.0, "comprehensive": 310.0}
COVER_RATE = {"third_party": 0.0, "third_party_fire_theft": 0.012, "comprehensive": 0.028}
USAGE_FACTOR = {"personal": 1.0, "commute": 1.1, "business": 1.3}
DEDUCTIBLE_FACTOR = {250: 1.12, 500: 1.0, 1000: 0.88}
# Driver loading by age band (lower bound of age -> loading), plus a surcharge for new licences.
AGE_LOADING = [(17, 780.0), (21, 460.0), (25, 210.0), (30, 90.0), (70, 240.0)]
NEW_LICENCE_YEARS = 3
NEW_LICENCE_SURCHARGE = 150.0


def vehicle_premium(coverage: str, deductible: float, value: float, usage: str) -> float:
    """Annual premium of one vehicle, in dollars."""
    base = COVER_BASE[coverage] + COVER_RATE[coverage] * value
    return round(base * USAGE_FACTOR[usage] * DEDUCTIBLE_FACTOR[int(deductible)] + 1e-9, 2)


def years_between(start: dt.date, end: dt.date) -> int:
    """Whole years from `start` to `end` (an age, or how long a licence has been held)."""
    return end.year - start.year - ((end.month, end.day) < (start.month, start.day))


def driver_loading(date_of_birth: dt.date, licence_issued_on: dt.date, on: dt.date) -> float:
    """What a named driver (other than the policyholder) adds to the annual premium, priced on `on`."""
    age = years_between(date_of_birth, on)
    loading = next(amount for low, amount in reversed(AGE_LOADING) if age >= low)
    if years_between(licence_issued_on, on) < NEW_LICENCE_YEARS:
        loading += NEW_LICENCE_SURCHARGE
    return loading


# -- helpers ------------------------------------------------------------------------------------

_REGISTRATION = re.compile(r"^[A-Z0-9]{5,8}$")
_LICENCE = re.compile(r"^[A-Z][0-9]{7}$")


def _cents(amount: Any) -> int:
    """Money as whole cents: exact comparisons whatever float the database hands back."""
    return int(round(float(amount) * 100))


def _dollars(cents: int) -> float:
    return round(cents / 100, 2)


def _money(amount: Any) -> float:
    return _dollars(_cents(amount))


def _date(value: str, what: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(f"{what} must be an ISO date (YYYY-MM-DD), got {value!r}") from None


def _text(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise ToolError(f"{what} must not be empty")
    return value


def _positive_cents(amount: float, what: str) -> int:
    cents = _cents(amount)
    if cents <= 0:
        raise ToolError(f"{what} must be positive")
    if abs(amount * 100 - cents) > 1e-6:
        raise ToolError(f"{what} {amount} is not a whole number of cents")
    return cents


def _policyholder(db: Db, policyholder_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM policyholders WHERE id = ?", policyholder_id)
    if row is None:
        raise ToolError(f"no policyholder with id {policyholder_id}")
    return row


def _policy(db: Db, policy_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM motor_policies WHERE id = ?", policy_id)
    if row is None:
        raise ToolError(f"no policy #{policy_id}")
    return row


def _active_policy(db: Db, policy_id: int) -> dict[str, Any]:
    p = _policy(db, policy_id)
    if p["status"] != "active":
        raise ToolError(f"policy #{policy_id} is {p['status']}: only active policies can be changed")
    return p


def _claim(db: Db, claim_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM motor_claims WHERE id = ?", claim_id)
    if row is None:
        raise ToolError(f"no claim #{claim_id}")
    return row


def _covered_vehicles(db: Db, policy_id: int) -> list[dict[str, Any]]:
    return db.query("SELECT * FROM insured_vehicles WHERE policy_id = ? AND status = 'covered' ORDER BY id", policy_id)


def _active_drivers(db: Db, policy_id: int) -> list[dict[str, Any]]:
    return db.query("SELECT * FROM named_drivers WHERE policy_id = ? AND status = 'active' ORDER BY id", policy_id)


def _premium_cents(db: Db, policy_id: int) -> int:
    """The policy's annual premium from its parts: covered vehicles plus active drivers' loadings."""
    return (sum(_cents(v["annual_premium"]) for v in _covered_vehicles(db, policy_id))
            + sum(_cents(d["premium_loading"]) for d in _active_drivers(db, policy_id)))


def _endorse(db: Db, policy: dict[str, Any], kind: str, vehicle_id: int | None = None, driver_id: int | None = None) -> dict[str, Any]:
    """Re-price the policy after a change and record the endorsement with its pro-rated amount."""
    before = _cents(policy["annual_premium"])
    after = _premium_cents(db, policy["id"])
    start, end = dt.date.fromisoformat(policy["start_date"]), dt.date.fromisoformat(policy["end_date"])
    # The difference is charged (or credited) for the days left in the term, today included.
    remaining = max(0, (end - db.today).days)
    prorated = round((after - before) * remaining / max(1, (end - start).days))
    db.execute("UPDATE motor_policies SET annual_premium = ? WHERE id = ?", _dollars(after), policy["id"])
    endorsement_id = db.insert(
        "policy_endorsements", policy_id=policy["id"], kind=kind, vehicle_id=vehicle_id, driver_id=driver_id,
        effective_date=db.today.isoformat(), premium_before=_dollars(before), premium_after=_dollars(after),
        prorated_amount=_dollars(prorated),
    )
    return {"endorsement_id": endorsement_id, "annual_premium_before": _dollars(before), "annual_premium_after": _dollars(after),
            "prorated_amount": _dollars(prorated)}


def _policy_of_holder(db: Db, policy_id: int | None, policyholder_id: int) -> int | None:
    """Check that an optional policy belongs to the policyholder; records must not point at someone else's policy."""
    if policy_id is None:
        return None
    if _policy(db, policy_id)["policyholder_id"] != policyholder_id:
        raise ToolError(f"policy #{policy_id} does not belong to policyholder {policyholder_id}")
    return policy_id


def _record_target(db: Db, policyholder_id: int, policy_id: int | None, claim_id: int | None) -> tuple[int | None, int | None]:
    """The (policy_id, claim_id) a note or referral points at, checked against the policyholder.

    A record about a claim always carries the claim's policy, whether or not the caller passed it, so
    the same case is recorded the same way.
    """
    _policyholder(db, policyholder_id)
    policy_id = _policy_of_holder(db, policy_id, policyholder_id)
    if claim_id is None:
        return policy_id, None
    c = _claim(db, claim_id)
    if _policy(db, c["policy_id"])["policyholder_id"] != policyholder_id:
        raise ToolError(f"claim #{claim_id} does not belong to policyholder {policyholder_id}")
    if policy_id is not None and c["policy_id"] != policy_id:
        raise ToolError(f"claim #{claim_id} is on policy #{c['policy_id']}, not #{policy_id}")
    return c["policy_id"], claim_id


def _on_policy_on(row: dict[str, Any], day: str) -> bool:
    """Whether a vehicle or driver row was on its policy on `day` (added by then, not yet removed)."""
    return row["added_on"] <= day and (row["removed_on"] is None or row["removed_on"] > day)


def _vehicle_view(v: dict[str, Any]) -> dict[str, Any]:
    return {"vehicle_id": v["id"], "registration": v["registration"], "make": v["make"], "model": v["model"],
            "model_year": v["model_year"], "vehicle_value": _money(v["vehicle_value"]), "usage": v["usage"],
            "annual_premium": _money(v["annual_premium"]), "status": v["status"], "added_on": v["added_on"],
            "removed_on": v["removed_on"]}


def _driver_view(db: Db, d: dict[str, Any]) -> dict[str, Any]:
    dob, issued = dt.date.fromisoformat(d["date_of_birth"]), dt.date.fromisoformat(d["licence_issued_on"])
    return {"driver_id": d["id"], "first_name": d["first_name"], "last_name": d["last_name"], "relationship": d["relationship"],
            "date_of_birth": d["date_of_birth"], "age": years_between(dob, db.today), "licence_number": d["licence_number"],
            "licence_issued_on": d["licence_issued_on"], "years_licensed": years_between(issued, db.today),
            "premium_loading": _money(d["premium_loading"]), "status": d["status"], "added_on": d["added_on"],
            "removed_on": d["removed_on"]}


# -- reads --------------------------------------------------------------------------------------

@tool
def find_policyholder(db: Db, email: str, date_of_birth: str) -> dict[str, Any]:
    """Identify a policyholder by the email on file and their date of birth; both must match. Do this before acting.

    Args:
        email: The email address the caller gives (case does not matter).
        date_of_birth: The caller's date of birth, YYYY-MM-DD.
    """
    dob = _date(date_of_birth, "date_of_birth").isoformat()
    row = db.one("SELECT * FROM policyholders WHERE LOWER(email) = ?", email.strip().lower())
    # One message for both mismatches, so the tool never confirms that an email is on file.
    if row is None or row["date_of_birth"] != dob:
        raise ToolError("no policyholder matches that email and date of birth")
    return {"policyholder_id": row["id"], "first_name": row["first_name"], "last_name": row["last_name"], "email": row["email"]}


@tool
def get_policyholder(db: Db, policyholder_id: int) -> dict[str, Any]:
    """Get a policyholder's profile: contact details and their motor policies (newest first) with the vehicles each covers.

    Args:
        policyholder_id: The policyholder's id (from find_policyholder).
    """
    h = _policyholder(db, policyholder_id)
    policies = db.query("SELECT * FROM motor_policies WHERE policyholder_id = ? ORDER BY start_date DESC, id DESC", policyholder_id)
    return {
        "policyholder_id": h["id"], "first_name": h["first_name"], "last_name": h["last_name"], "email": h["email"],
        "phone": h["phone"], "date_of_birth": h["date_of_birth"], "state": h["state"], "customer_since": h["customer_since"],
        "policies": [
            {"policy_id": p["id"], "coverage": p["coverage"], "status": p["status"], "start_date": p["start_date"],
             "end_date": p["end_date"], "annual_premium": _money(p["annual_premium"]),
             "vehicles": [f"{v['model_year']} {v['make']} {v['model']} ({v['registration']})" for v in _covered_vehicles(db, p["id"])]}
            for p in policies
        ],
    }


@tool
def get_motor_policy(db: Db, policy_id: int) -> dict[str, Any]:
    """Get a motor policy: coverage, deductible, status, term, premium, vehicles, named drivers (with ages), endorsements and claims.

    Args:
        policy_id: The policy number, e.g. 1042 for "policy #1042".
    """
    p = _policy(db, policy_id)
    vehicles = db.query("SELECT * FROM insured_vehicles WHERE policy_id = ? ORDER BY id", policy_id)
    drivers = db.query("SELECT * FROM named_drivers WHERE policy_id = ? ORDER BY id", policy_id)
    endorsements = db.query("SELECT * FROM policy_endorsements WHERE policy_id = ? ORDER BY id", policy_id)
    claims = db.query("SELECT * FROM motor_claims WHERE policy_id = ? ORDER BY id", policy_id)
    return {
        "policy_id": p["id"], "policyholder_id": p["policyholder_id"], "coverage": p["coverage"],
        "covers_own_damage_from": sorted(COVERED[p["coverage"]]), "deductible": _money(p["deductible"]), "status": p["status"],
        "start_date": p["start_date"], "end_date": p["end_date"], "cancelled_on": p["cancelled_on"],
        "annual_premium": _money(p["annual_premium"]), "no_claims_years": p["no_claims_years"],
        "vehicles": [_vehicle_view(v) for v in vehicles],
        "drivers": [_driver_view(db, d) for d in drivers],
        "endorsements": [
            {"endorsement_id": e["id"], "kind": e["kind"], "vehicle_id": e["vehicle_id"], "driver_id": e["driver_id"],
             "effective_date": e["effective_date"], "premium_before": _money(e["premium_before"]),
             "premium_after": _money(e["premium_after"]), "prorated_amount": _money(e["prorated_amount"])}
            for e in endorsements
        ],
        "claims": [{"claim_id": c["id"], "vehicle_id": c["vehicle_id"], "incident_date": c["incident_date"],
                    "incident_type": c["incident_type"], "status": c["status"]} for c in claims],
    }


@tool
def get_motor_claim(db: Db, claim_id: int) -> dict[str, Any]:
    """Get a claim with what is needed to decide it: the incident, the vehicle and its value, the driver, the policy's coverage and deductible, and payouts.

    Args:
        claim_id: The claim number, e.g. 5012 for "claim #5012".
    """
    c = _claim(db, claim_id)
    p = _policy(db, c["policy_id"])
    v = db.one("SELECT * FROM insured_vehicles WHERE id = ?", c["vehicle_id"])
    d = db.one("SELECT * FROM named_drivers WHERE id = ?", c["driver_id"]) if c["driver_id"] is not None else None
    payouts = db.query("SELECT * FROM claim_payouts WHERE claim_id = ? ORDER BY id", claim_id)
    incident, reported = dt.date.fromisoformat(c["incident_date"]), dt.date.fromisoformat(c["reported_on"])
    return {
        "claim_id": c["id"], "policy_id": p["id"], "policyholder_id": p["policyholder_id"], "status": c["status"],
        "incident_type": c["incident_type"], "incident_date": c["incident_date"], "reported_on": c["reported_on"],
        # Derived so the agent does not have to do date arithmetic.
        "days_from_incident_to_report": (reported - incident).days,
        "days_since_reported": (db.today - reported).days,
        "description": c["description"], "estimated_damage": _money(c["estimated_damage"]),
        "approved_amount": None if c["approved_amount"] is None else _money(c["approved_amount"]),
        "denial_reason": c["denial_reason"], "decided_on": c["decided_on"],
        "policy": {"coverage": p["coverage"], "covers_own_damage_from": sorted(COVERED[p["coverage"]]),
                   "deductible": _money(p["deductible"]), "status": p["status"], "start_date": p["start_date"], "end_date": p["end_date"]},
        "vehicle": _vehicle_view(v),
        "driver": None if d is None else {**_driver_view(db, d), "on_policy_on_incident_date": _on_policy_on(d, c["incident_date"])},
        "payouts": [{"payout_id": x["id"], "amount": _money(x["amount"]), "method": x["method"], "paid_on": x["paid_on"]} for x in payouts],
    }


# -- writes: policy changes (endorsements) --------------------------------------------------------

@tool(write=True)
def add_named_driver(
    db: Db,
    policy_id: int,
    first_name: str,
    last_name: str,
    date_of_birth: str,
    licence_number: str,
    licence_issued_on: str,
    relationship: Relationship,
) -> dict[str, Any]:
    """Add a named driver to an active policy. Re-prices the policy and records an endorsement with the pro-rated charge.

    Args:
        policy_id: The policy to add the driver to.
        first_name: The driver's first name.
        last_name: The driver's last name.
        date_of_birth: The driver's date of birth, YYYY-MM-DD.
        licence_number: Driving licence number: one letter and seven digits, e.g. "D4821937".
        licence_issued_on: The date the driver's licence was first issued, YYYY-MM-DD.
        relationship: The driver's relationship to the policyholder: spouse, partner, child, parent, or other.
    """
    policy = _active_policy(db, policy_id)
    first, last = _text(first_name, "first_name"), _text(last_name, "last_name")
    dob, issued = _date(date_of_birth, "date_of_birth"), _date(licence_issued_on, "licence_issued_on")
    licence = licence_number.strip().upper()
    if not _LICENCE.match(licence):
        raise ToolError(f"licence_number {licence_number!r} is not a licence number (one letter and seven digits)")
    age = years_between(dob, db.today)
    if age < MIN_DRIVING_AGE or age > 110:
        raise ToolError(f"a driver born on {dob.isoformat()} is {age}: named drivers must be at least {MIN_DRIVING_AGE}")
    if issued > db.today:
        raise ToolError("licence_issued_on is in the future")
    if years_between(dob, issued) < 16:
        raise ToolError("a licence cannot have been issued before the driver's 16th birthday")
    drivers = _active_drivers(db, policy_id)
    if any(d["licence_number"] == licence for d in drivers):
        raise ToolError(f"a driver with licence {licence} is already named on policy #{policy_id}")
    if len(drivers) >= MAX_DRIVERS:
        raise ToolError(f"policy #{policy_id} already has {MAX_DRIVERS} named drivers, the most a policy can have")
    loading = driver_loading(dob, issued, db.today)
    driver_id = db.insert(
        "named_drivers", policy_id=policy_id, first_name=first, last_name=last, date_of_birth=dob.isoformat(),
        licence_number=licence, licence_issued_on=issued.isoformat(), relationship=relationship, premium_loading=loading,
        status="active", added_on=db.today.isoformat(), removed_on=None,
    )
    return {"driver_id": driver_id, "policy_id": policy_id, "premium_loading": loading,
            **_endorse(db, policy, "add_driver", driver_id=driver_id)}


@tool(write=True)
def remove_named_driver(db: Db, driver_id: int) -> dict[str, Any]:
    """Take a named driver off their policy from today. The policyholder cannot be removed. Re-prices the policy (a credit).

    Args:
        driver_id: The named driver to remove (see the drivers of get_motor_policy).
    """
    d = db.one("SELECT * FROM named_drivers WHERE id = ?", driver_id)
    if d is None:
        raise ToolError(f"no named driver with id {driver_id}")
    if d["status"] == "removed":
        raise ToolError(f"driver {driver_id} ({d['first_name']} {d['last_name']}) was already removed on {d['removed_on']}")
    if d["relationship"] == "self":
        raise ToolError("the policyholder cannot be removed from their own policy")
    policy = _active_policy(db, d["policy_id"])
    db.execute("UPDATE named_drivers SET status = 'removed', removed_on = ? WHERE id = ?", db.today.isoformat(), driver_id)
    return {"driver_id": driver_id, "policy_id": policy["id"], "status": "removed", **_endorse(db, policy, "remove_driver", driver_id=driver_id)}


@tool(write=True)
def add_insured_vehicle(
    db: Db,
    policy_id: int,
    registration: str,
    make: str,
    model: str,
    model_year: int,
    vehicle_value: float,
    usage: Usage,
) -> dict[str, Any]:
    """Add a vehicle to an active policy, priced with the policy's coverage and deductible. Records an endorsement with the pro-rated charge.

    Args:
        policy_id: The policy to add the vehicle to.
        registration: The licence plate: 5 to 8 letters or digits, no spaces, e.g. "8KTR214".
        make: Manufacturer, e.g. "Toyota".
        model: Model, e.g. "RAV4".
        model_year: Model year, e.g. 2021.
        vehicle_value: Current market value in dollars, e.g. 24500.
        usage: personal (leisure only), commute (includes driving to work), or business (used for work).
    """
    policy = _active_policy(db, policy_id)
    plate = registration.strip().upper().replace(" ", "")
    if not _REGISTRATION.match(plate):
        raise ToolError(f"registration {registration!r} is not a licence plate (5 to 8 letters or digits)")
    make, model = _text(make, "make"), _text(model, "model")
    if not 1950 <= model_year <= db.today.year + 1:
        raise ToolError(f"model_year {model_year} is not plausible")
    value = _dollars(_positive_cents(vehicle_value, "vehicle_value"))
    taken = db.one("SELECT policy_id FROM insured_vehicles WHERE registration = ? AND status = 'covered'", plate)
    if taken is not None:
        where = "this policy" if taken["policy_id"] == policy_id else "another policy"
        raise ToolError(f"a vehicle registered {plate} is already covered by {where}")
    if len(_covered_vehicles(db, policy_id)) >= MAX_VEHICLES:
        raise ToolError(f"policy #{policy_id} already covers {MAX_VEHICLES} vehicles, the most a policy can cover")
    premium = vehicle_premium(policy["coverage"], policy["deductible"], value, usage)
    vehicle_id = db.insert(
        "insured_vehicles", policy_id=policy_id, registration=plate, make=make, model=model, model_year=model_year,
        vehicle_value=value, usage=usage, annual_premium=premium, status="covered", added_on=db.today.isoformat(), removed_on=None,
    )
    return {"vehicle_id": vehicle_id, "policy_id": policy_id, "vehicle_premium": premium,
            **_endorse(db, policy, "add_vehicle", vehicle_id=vehicle_id)}


@tool(write=True)
def remove_insured_vehicle(db: Db, vehicle_id: int) -> dict[str, Any]:
    """Stop covering a vehicle from today. A policy must keep at least one vehicle, and a vehicle with an open claim stays covered. Re-prices the policy (a credit).

    Args:
        vehicle_id: The vehicle to remove (see the vehicles of get_motor_policy).
    """
    v = db.one("SELECT * FROM insured_vehicles WHERE id = ?", vehicle_id)
    if v is None:
        raise ToolError(f"no insured vehicle with id {vehicle_id}")
    if v["status"] == "removed":
        raise ToolError(f"vehicle {vehicle_id} ({v['registration']}) was already removed on {v['removed_on']}")
    policy = _active_policy(db, v["policy_id"])
    if len(_covered_vehicles(db, policy["id"])) == 1:
        raise ToolError(f"vehicle {vehicle_id} is the only vehicle on policy #{policy['id']}: add the replacement vehicle first")
    if db.scalar("SELECT COUNT(*) AS n FROM motor_claims WHERE vehicle_id = ? AND status IN ('open', 'approved')", vehicle_id):
        raise ToolError(f"vehicle {vehicle_id} has a claim that is not settled yet: it stays covered until the claim is closed")
    db.execute("UPDATE insured_vehicles SET status = 'removed', removed_on = ? WHERE id = ?", db.today.isoformat(), vehicle_id)
    return {"vehicle_id": vehicle_id, "policy_id": policy["id"], "status": "removed",
            **_endorse(db, policy, "remove_vehicle", vehicle_id=vehicle_id)}


@tool(write=True)
def change_policy_cover(db: Db, policy_id: int, coverage: Coverage, deductible: Deductible) -> dict[str, Any]:
    """Change an active policy's coverage and/or deductible from today. Re-prices every covered vehicle and records an endorsement.

    Args:
        policy_id: The policy to change.
        coverage: The new coverage: third_party (damage to others only), third_party_fire_theft (adds fire and theft
            of the insured vehicle), or comprehensive (adds all own damage: collision, vandalism, weather, windscreen).
        deductible: The new deductible in dollars per claim: 250, 500 or 1000 (pass the current one to keep it).
    """
    policy = _active_policy(db, policy_id)
    if policy["coverage"] == coverage and int(policy["deductible"]) == deductible:
        raise ToolError(f"policy #{policy_id} already has {coverage} cover with a ${deductible} deductible")
    for v in _covered_vehicles(db, policy_id):
        premium = vehicle_premium(coverage, deductible, v["vehicle_value"], v["usage"])
        db.execute("UPDATE insured_vehicles SET annual_premium = ? WHERE id = ?", premium, v["id"])
    db.execute("UPDATE motor_policies SET coverage = ?, deductible = ? WHERE id = ?", coverage, deductible, policy_id)
    return {"policy_id": policy_id, "coverage": coverage, "deductible": deductible, **_endorse(db, policy, "change_cover")}


# -- writes: claims ---------------------------------------------------------------------------------

@tool(write=True)
def file_motor_claim(
    db: Db,
    vehicle_id: int,
    incident_date: str,
    incident_type: IncidentType,
    description: str,
    estimated_damage: float,
    driver_id: int | None = None,
) -> dict[str, Any]:
    """Register a new claim for damage to or loss of an insured vehicle. The claim opens with status open.

    The policy must have been active, and the vehicle (and the driver, if any) on it, on the incident
    date, and the policy's coverage must pay for that kind of incident.

    Args:
        vehicle_id: The insured vehicle that was damaged or lost.
        incident_date: The day it happened, YYYY-MM-DD.
        incident_type: collision, theft, fire, vandalism, weather (hail, flood, fallen tree), or windscreen (glass only).
        description: What happened, in your words.
        estimated_damage: The repair estimate (or, for a theft or write-off, the vehicle's value) in dollars.
        driver_id: The named driver who was driving, if anyone was (omit for a parked or stolen vehicle).
    """
    v = db.one("SELECT * FROM insured_vehicles WHERE id = ?", vehicle_id)
    if v is None:
        raise ToolError(f"no insured vehicle with id {vehicle_id}")
    policy = _policy(db, v["policy_id"])
    day = _date(incident_date, "incident_date")
    if day > db.today:
        raise ToolError("incident_date is in the future")
    iso = day.isoformat()
    if policy["status"] == "cancelled" and policy["cancelled_on"] is not None and policy["cancelled_on"] <= iso:
        raise ToolError(f"policy #{policy['id']} was cancelled on {policy['cancelled_on']}, before the incident")
    if not policy["start_date"] <= iso <= policy["end_date"]:
        raise ToolError(f"policy #{policy['id']} did not cover {iso} (term {policy['start_date']} to {policy['end_date']})")
    if not _on_policy_on(v, iso):
        raise ToolError(f"vehicle {vehicle_id} ({v['registration']}) was not on policy #{policy['id']} on {iso}")
    if incident_type not in COVERED[policy["coverage"]]:
        raise ToolError(f"policy #{policy['id']} has {policy['coverage']} cover, which does not pay for {incident_type} damage to the insured vehicle")
    if driver_id is not None:
        d = db.one("SELECT * FROM named_drivers WHERE id = ?", driver_id)
        if d is None or d["policy_id"] != policy["id"]:
            raise ToolError(f"driver {driver_id} is not a named driver on policy #{policy['id']}")
        if not _on_policy_on(d, iso):
            raise ToolError(f"driver {driver_id} ({d['first_name']} {d['last_name']}) was not named on policy #{policy['id']} on {iso}")
    text = _text(description, "description")
    damage = _dollars(_positive_cents(estimated_damage, "estimated_damage"))
    dup = db.one("SELECT id FROM motor_claims WHERE vehicle_id = ? AND incident_date = ? AND incident_type = ?", vehicle_id, iso, incident_type)
    if dup is not None:
        raise ToolError(f"claim #{dup['id']} already covers this {incident_type} on {iso} for vehicle {vehicle_id}")
    claim_id = db.insert(
        "motor_claims", policy_id=policy["id"], vehicle_id=vehicle_id, driver_id=driver_id, incident_date=iso,
        reported_on=db.today.isoformat(), incident_type=incident_type, description=text, estimated_damage=damage,
        status="open", approved_amount=None, denial_reason=None, decided_on=None,
    )
    return {"claim_id": claim_id, "policy_id": policy["id"], "status": "open", "incident_type": incident_type, "estimated_damage": damage}


@tool(write=True)
def approve_motor_claim(db: Db, claim_id: int, amount: float) -> dict[str, Any]:
    """Approve an open claim for a settlement amount (see the policy for how to compute it). Pay it with pay_motor_claim.

    Args:
        claim_id: The claim to approve.
        amount: The settlement in dollars, e.g. 1840.50; never more than the claim's estimated damage.
    """
    c = _claim(db, claim_id)
    if c["status"] != "open":
        raise ToolError(f"claim #{claim_id} is {c['status']}: only open claims can be approved")
    cents = _positive_cents(amount, "amount")
    if cents > _cents(c["estimated_damage"]):
        raise ToolError(f"${_dollars(cents):,.2f} is more than the claim's estimated damage of ${_money(c['estimated_damage']):,.2f}")
    db.execute("UPDATE motor_claims SET status = 'approved', approved_amount = ?, decided_on = ? WHERE id = ?",
               _dollars(cents), db.today.isoformat(), claim_id)
    return {"claim_id": claim_id, "status": "approved", "approved_amount": _dollars(cents)}


@tool(write=True)
def deny_motor_claim(db: Db, claim_id: int, reason: DenialReason) -> dict[str, Any]:
    """Deny an open claim. The denial is the record of the decision: explain it to the policyholder.

    Args:
        claim_id: The claim to deny.
        reason: late_report (reported more than 30 days after the incident), not_covered (the coverage does not pay for
            it), unlisted_driver (the driver was not named on the policy on the incident date), or below_deductible
            (nothing is payable once the deductible is taken off).
    """
    c = _claim(db, claim_id)
    if c["status"] != "open":
        raise ToolError(f"claim #{claim_id} is {c['status']}: only open claims can be denied")
    db.execute("UPDATE motor_claims SET status = 'denied', denial_reason = ?, decided_on = ? WHERE id = ?",
               reason, db.today.isoformat(), claim_id)
    return {"claim_id": claim_id, "status": "denied", "denial_reason": reason}


@tool(write=True)
def pay_motor_claim(db: Db, claim_id: int, method: PayoutMethod) -> dict[str, Any]:
    """Pay an approved claim's approved amount, once. The claim becomes paid.

    Args:
        claim_id: The approved claim to pay.
        method: bank_transfer (to the policyholder's bank account), cheque (posted to the policyholder), or repairer
            (paid directly to the repair shop).
    """
    c = _claim(db, claim_id)
    if c["status"] == "paid":
        raise ToolError(f"claim #{claim_id} has already been paid")
    if c["status"] != "approved":
        raise ToolError(f"claim #{claim_id} is {c['status']}: only approved claims can be paid")
    amount = _money(c["approved_amount"])
    payout_id = db.insert("claim_payouts", claim_id=claim_id, amount=amount, method=method, paid_on=db.today.isoformat())
    db.execute("UPDATE motor_claims SET status = 'paid' WHERE id = ?", claim_id)
    return {"payout_id": payout_id, "claim_id": claim_id, "amount": amount, "method": method, "status": "paid"}


# -- writes: records --------------------------------------------------------------------------------

@tool(write=True)
def add_insurance_note(db: Db, policyholder_id: int, body: str, policy_id: int | None = None, claim_id: int | None = None) -> dict[str, Any]:
    """Add a note to a policyholder's file, e.g. to record a request you refused and why.

    Args:
        policyholder_id: The policyholder whose file the note goes on.
        body: The note, in your words.
        policy_id: The policyholder's policy the note concerns, if any (defaults to the claim's policy).
        claim_id: The policyholder's claim the note concerns, if any.
    """
    policy_id, claim_id = _record_target(db, policyholder_id, policy_id, claim_id)
    note_id = db.insert("insurance_notes", policyholder_id=policyholder_id, policy_id=policy_id, claim_id=claim_id,
                        body=_text(body, "body"), created_on=db.today.isoformat())
    return {"note_id": note_id, "policyholder_id": policyholder_id, "policy_id": policy_id, "claim_id": claim_id}


@tool(write=True)
def refer_to_specialist(
    db: Db,
    policyholder_id: int,
    team: Team,
    reason: str,
    policy_id: int | None = None,
    claim_id: int | None = None,
) -> dict[str, Any]:
    """Hand a case to a specialist team instead of deciding it yourself (see the policy for when).

    Args:
        policyholder_id: The policyholder concerned.
        team: claims_adjuster (claims above your authority), underwriting (drivers or vehicles underwriting must
            accept), fraud (suspected fraud or misuse of the policy), or customer_relations (a complaint, or an
            exception the policyholder asks for).
        reason: What the team needs to know, in your words (include amounts and dates).
        policy_id: The policyholder's policy concerned, if any (defaults to the claim's policy).
        claim_id: The policyholder's claim concerned, if any.
    """
    policy_id, claim_id = _record_target(db, policyholder_id, policy_id, claim_id)
    for r in db.query("SELECT id, policy_id, claim_id FROM specialist_referrals WHERE policyholder_id = ? AND team = ? AND status = 'open' ORDER BY id",
                      policyholder_id, team):
        if (r["policy_id"], r["claim_id"]) == (policy_id, claim_id):  # compared here: `=` never matches NULL
            raise ToolError(f"referral #{r['id']} to {team} is already open for this case")
    referral_id = db.insert("specialist_referrals", policyholder_id=policyholder_id, policy_id=policy_id, claim_id=claim_id,
                            team=team, status="open", reason=_text(reason, "reason"), created_on=db.today.isoformat())
    return {"referral_id": referral_id, "team": team, "status": "open", "policy_id": policy_id, "claim_id": claim_id}
