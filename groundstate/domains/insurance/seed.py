"""Deterministic seed for the Harborline Mutual motor insurance world.

`generate(rng, scale)` returns rows per table in foreign-key order. Every draw comes from `rng`, and
dates are computed from the fixed business date `TODAY`, so the same seed gives the same world on
every machine. `scale` multiplies the number of policyholders and everything that hangs off them.

Premiums are priced with the tools' own pricing functions (loaded from tools.py), so a policy's
`annual_premium` is always the sum of its covered vehicles' premiums and its active drivers'
loadings, as the tools maintain it, and the endorsement history replays to that total.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

from groundstate.domains import _kit
from groundstate.domains._kit import People, Rows, add_years, business_date, cents, day_between, group_by, iso, phone, round_money, scaled, unique

HERE = Path(__file__).parent
TODAY = business_date(HERE)
PRICING = _kit.sibling(HERE, "tools")

FIRST_NAMES = [*_kit.FIRST_NAMES, "Clara", "Felix", "Alma", "Rafael", "Iris", "Marcus", "Leah", "Victor", "Naomi", "Adrian"]
LAST_NAMES = [*_kit.LAST_NAMES, "Berg", "Dubois", "Moreau", "Larsen", "Costa", "Ibrahim", "Park", "Reyes", "Fischer", "Walsh"]
STATES = [
    "WA",
    "OR",
    "CA",
    "AZ",
    "CO",
    "TX",
    "IL",
    "MN",
    "WI",
    "MI",
    "OH",
    "TN",
    "GA",
    "FL",
    "NC",
    "VA",
    "MD",
    "PA",
    "NJ",
    "NY",
    "MA",
    "UT",
    "ID",
    "NM",
    "MO",
    "NE",
    "LA",
    "KY",
    "IN",
]

# (make, model, price new in dollars, relative frequency)
MODELS = [
    ("Toyota", "Corolla", 24000, 10),
    ("Toyota", "RAV4", 32000, 10),
    ("Toyota", "Camry", 28000, 8),
    ("Honda", "Civic", 25000, 9),
    ("Honda", "CR-V", 33000, 9),
    ("Ford", "F-150", 45000, 8),
    ("Ford", "Escape", 29000, 6),
    ("Chevrolet", "Malibu", 26000, 5),
    ("Chevrolet", "Silverado", 47000, 5),
    ("Nissan", "Altima", 27000, 6),
    ("Subaru", "Outback", 34000, 6),
    ("Hyundai", "Elantra", 22000, 6),
    ("Kia", "Sportage", 28000, 5),
    ("Mazda", "CX-5", 31000, 5),
    ("Volkswagen", "Jetta", 23000, 4),
    ("Tesla", "Model 3", 42000, 5),
    ("BMW", "3 Series", 46000, 4),
    ("Audi", "Q5", 50000, 3),
    ("Jeep", "Wrangler", 38000, 4),
    ("Ram", "1500", 46000, 4),
    ("Mercedes-Benz", "GLE", 65000, 2),
    ("Porsche", "911", 125000, 1),
]
LETTERS = "ABCDEFGHJKLMNPRSTUVWXYZ"

CLAIM_STORIES = {
    "collision": [
        "Rear-ended at a traffic light; bumper and tailgate damaged.",
        "Scraped a concrete pillar in a parking garage.",
        "Side impact at an intersection; driver door and wing damaged.",
        "Hit a deer on a rural road; front end damaged.",
    ],
    "theft": ["Vehicle stolen from the driveway overnight.", "Vehicle stolen from a shopping centre car park."],
    "part_theft": ["Catalytic converter stolen while parked.", "All four wheels stolen overnight."],
    "fire": ["Engine bay fire after an electrical fault.", "Vehicle damaged by a fire spreading from a neighbouring garage."],
    "vandalism": ["Paintwork keyed along both sides.", "Windows smashed and mirrors broken while parked on the street."],
    "weather": ["Hail damage to roof and bonnet.", "Tree branch fell on the roof during a storm.", "Flood water entered the cabin."],
    "windscreen": ["Windscreen cracked by a stone on the highway.", "Chip in the windscreen spread into a long crack."],
}
NOTE_BODIES = [
    "Policyholder asked when the policy renews; explained the renewal date and that a quote is sent 30 days before.",
    "Policyholder asked for a copy of the certificate of insurance; sent it to the email on file.",
    "Called to check that the new address is on file; no change needed.",
    "Asked how the no-claims years are counted; explained.",
    "Asked whether roadside assistance is included; explained it is not part of this policy.",
]
REFERRAL_REASONS = {
    "claims_adjuster": "Settlement above the $5,000 desk authority; needs an adjuster's approval.",
    "underwriting": "Driver under 21 to be added; underwriting must accept the risk.",
    "fraud": "Policyholder reports a claim on their policy that they did not make.",
    "customer_relations": "Policyholder disputes a claim decision and asks for a review.",
}


def generate(rng: random.Random, scale: float = 1.0) -> Rows:
    """The world's rows per table, in foreign-key insertion order; every column present in every row."""
    w = _World(rng)
    for holder in w.policyholders(scaled(340, scale)):
        w.policies_of(holder)
    w.claims()
    w.records(scaled(70, scale), scaled(18, scale))
    return {
        "policyholders": w.holders,
        "motor_policies": w.policies,
        "insured_vehicles": w.vehicles,
        "named_drivers": w.drivers,
        "policy_endorsements": w.endorsements,
        "motor_claims": w.claim_rows,
        "claim_payouts": w.payouts,
        "insurance_notes": w.notes,
        "specialist_referrals": w.referrals,
    }


class _World:
    """Builds the rows table by table; ids are dense, policies start at 1001 and claims at 5001."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.holders: list[dict] = []
        self.policies: list[dict] = []
        self.vehicles: list[dict] = []
        self.drivers: list[dict] = []
        self.endorsements: list[dict] = []
        self.claim_rows: list[dict] = []
        self.payouts: list[dict] = []
        self.notes: list[dict] = []
        self.referrals: list[dict] = []
        self.plates: set[str] = set()
        self.licences: set[str] = set()

    # -- people -------------------------------------------------------------------------------------
    def policyholders(self, n: int) -> list[dict]:
        rng, people = self.rng, People(self.rng, None, FIRST_NAMES, LAST_NAMES)
        for i in range(1, n + 1):
            first, last, email = people.draw()
            dob = TODAY - dt.timedelta(days=rng.randint(24 * 365, 78 * 365))
            self.holders.append(
                {
                    "id": i,
                    "first_name": first,
                    "last_name": last,
                    "email": email,
                    "phone": phone(rng),
                    "date_of_birth": iso(dob),
                    "state": rng.choice(STATES),
                    "customer_since": iso(TODAY - dt.timedelta(days=rng.randint(200, 4000))),
                }
            )
        return self.holders

    def plate(self) -> str:
        return unique(lambda: registration(self.rng), self.plates)

    def licence(self) -> str:
        return unique(lambda: licence_number(self.rng), self.licences)

    # -- policies, vehicles, drivers, endorsements ----------------------------------------------------
    def policies_of(self, holder: dict) -> None:
        rng = self.rng
        start = TODAY - dt.timedelta(days=rng.randint(0, 364))
        kind = rng.choices(["active", "lapsed", "cancelled"], weights=[88, 7, 5])[0]
        if kind == "lapsed":  # a policy that ended recently and was not renewed
            start = TODAY - dt.timedelta(days=rng.randint(380, 500))
        if rng.random() < 0.3:  # an earlier policy that ran its full term
            self.policy(holder, start - dt.timedelta(days=365 + rng.randint(0, 400)), "lapsed")
        self.policy(holder, start, kind)

    def policy(self, holder: dict, start: dt.date, status: str) -> None:  # noqa: C901 - one row's rules in the order they draw from the rng; a split would change no logic
        rng = self.rng
        end = start + dt.timedelta(days=365)
        if status == "active" and end < TODAY:
            status = "lapsed"
        cancelled_on = None
        last_day = min(end, TODAY)
        if status == "cancelled":
            cancelled_on = start + dt.timedelta(days=rng.randint(20, max(21, (last_day - start).days)))
            cancelled_on = min(cancelled_on, TODAY)
            last_day = cancelled_on
        coverage = rng.choices(["comprehensive", "third_party_fire_theft", "third_party"], weights=[60, 25, 15])[0]
        deductible = rng.choices([250, 500, 1000], weights=[20, 55, 25])[0]
        pid = 1001 + len(self.policies)
        policy = {
            "id": pid,
            "policyholder_id": holder["id"],
            "coverage": coverage,
            "deductible": float(deductible),
            "status": status,
            "start_date": iso(start),
            "end_date": iso(end),
            "annual_premium": 0.0,
            "no_claims_years": rng.choices(range(0, 10), weights=[14, 12, 12, 11, 10, 10, 9, 8, 7, 7])[0],
            "cancelled_on": cancelled_on and iso(cancelled_on),
        }
        self.policies.append(policy)
        mid_term = (last_day - start).days > 30
        events: list[tuple[str, str, dict]] = []  # (date, kind, row) of mid-term changes, priced in order

        def when() -> dt.date:
            return start + dt.timedelta(days=rng.randint(15, (last_day - start).days - 1))

        # Vehicles: most policies cover one car; some added or replaced one mid-term.
        for j in range(rng.choices([1, 2, 3], weights=[70, 25, 5])[0]):
            added = start
            if j > 0 and mid_term and rng.random() < 0.35:
                added = when()
            v = self.vehicle(policy, added)
            if added > start:
                events.append((v["added_on"], "add_vehicle", v))
        if mid_term and rng.random() < 0.08:  # replaced a car: the old one stays on record as removed
            old = next(v for v in self.vehicles if v["policy_id"] == pid)
            day = when()
            new = self.vehicle(policy, day)
            old.update(status="removed", removed_on=iso(day))
            events += [(new["added_on"], "add_vehicle", new), (old["removed_on"], "remove_vehicle", old)]

        # Drivers: the policyholder, and often a spouse, a child or a parent.
        self.driver(policy, holder["first_name"], holder["last_name"], dt.date.fromisoformat(holder["date_of_birth"]), "self", start)
        others = rng.choices([0, 1, 2], weights=[45, 40, 15])[0]
        for _ in range(others):
            relationship = rng.choices(["spouse", "partner", "child", "parent", "other"], weights=[40, 15, 30, 8, 7])[0]
            holder_age = PRICING.years_between(dt.date.fromisoformat(holder["date_of_birth"]), TODAY)
            if relationship == "child" and holder_age < 44:
                relationship = "spouse"
            if relationship in ("spouse", "partner"):
                age = max(21, holder_age + rng.randint(-6, 6))
                last = holder["last_name"] if rng.random() < 0.7 else rng.choice(LAST_NAMES)
            elif relationship == "child":
                age = rng.randint(18, min(30, holder_age - 22))
                last = holder["last_name"]
            elif relationship == "parent":
                age = min(90, holder_age + rng.randint(22, 35))
                last = holder["last_name"]
            else:
                age = rng.randint(21, 70)
                last = rng.choice(LAST_NAMES)
            added = when() if mid_term and rng.random() < 0.2 else start
            # Ages are drawn as of the day the driver joined the policy, so nobody joined under 18.
            dob = added - dt.timedelta(days=age * 365 + rng.randint(0, 364))
            d = self.driver(policy, rng.choice(FIRST_NAMES), last, dob, relationship, added)
            if added > start:
                events.append((d["added_on"], "add_driver", d))
            elif mid_term and rng.random() < 0.06:
                d.update(status="removed", removed_on=iso(when()))
                events.append((d["removed_on"], "remove_driver", d))

        # Price: start from what the policy covered on its first day, then replay the changes in order.
        def on_day_one(row: dict) -> bool:
            return row["added_on"] == iso(start)

        premium = sum(cents(v["annual_premium"]) for v in self.vehicles if v["policy_id"] == pid and on_day_one(v))
        premium += sum(cents(d["premium_loading"]) for d in self.drivers if d["policy_id"] == pid and on_day_one(d))
        for day, kind, row in sorted(events, key=lambda e: (e[0], e[1] != "add_vehicle")):
            part = cents(row["annual_premium"] if "vehicle" in kind else row["premium_loading"])
            after = premium + part if kind.startswith("add") else premium - part
            remaining = (end - dt.date.fromisoformat(day)).days
            self.endorsements.append(
                {
                    "id": len(self.endorsements) + 1,
                    "policy_id": pid,
                    "kind": kind,
                    "vehicle_id": row["id"] if "vehicle" in kind else None,
                    "driver_id": row["id"] if "driver" in kind else None,
                    "effective_date": day,
                    "premium_before": premium / 100,
                    "premium_after": after / 100,
                    "prorated_amount": round((after - premium) * remaining / 365) / 100,
                }
            )
            premium = after
        policy["annual_premium"] = premium / 100

    def vehicle(self, policy: dict, added: dt.date) -> dict:
        rng = self.rng
        make, model, price, _ = rng.choices(MODELS, weights=[m[3] for m in MODELS])[0]
        year = rng.randint(max(2006, TODAY.year - 18), TODAY.year)
        value = price * 0.86 ** (TODAY.year - year) * rng.uniform(0.9, 1.1)
        value = float(max(2500, round(value / 50) * 50))
        usage = rng.choices(["personal", "commute", "business"], weights=[45, 45, 10])[0]
        row = {
            "id": len(self.vehicles) + 1,
            "policy_id": policy["id"],
            "registration": self.plate(),
            "make": make,
            "model": model,
            "model_year": year,
            "vehicle_value": value,
            "usage": usage,
            "annual_premium": PRICING.vehicle_premium(policy["coverage"], policy["deductible"], value, usage),
            "status": "covered",
            "added_on": iso(added),
            "removed_on": None,
        }
        self.vehicles.append(row)
        return row

    def driver(self, policy: dict, first: str, last: str, dob: dt.date, relationship: str, added: dt.date) -> dict:
        rng = self.rng
        issued = add_years(dob, rng.randint(16, 23)) + dt.timedelta(days=rng.randint(0, 300))
        issued = min(issued, added - dt.timedelta(days=30))
        loading = 0.0 if relationship == "self" else PRICING.driver_loading(dob, issued, added)
        row = {
            "id": len(self.drivers) + 1,
            "policy_id": policy["id"],
            "first_name": first,
            "last_name": last,
            "date_of_birth": iso(dob),
            "licence_number": self.licence(),
            "licence_issued_on": iso(issued),
            "relationship": relationship,
            "premium_loading": loading,
            "status": "active",
            "added_on": iso(added),
            "removed_on": None,
        }
        self.drivers.append(row)
        return row

    # -- claims -------------------------------------------------------------------------------------
    def claims(self) -> None:
        """Own-damage claims on covering policies; old ones decided (mostly paid), recent ones open."""
        rng = self.rng
        vehicles_of = group_by(self.vehicles, "policy_id")
        drivers_of = group_by(self.drivers, "policy_id")
        for p in self.policies:
            covered = sorted(PRICING.COVERED[p["coverage"]])
            if not covered:
                continue
            start = dt.date.fromisoformat(p["start_date"])
            # The last day the policy was in force (a cancelled policy stops the day before it is cancelled).
            last = min(dt.date.fromisoformat(p["end_date"]), TODAY)
            if p["cancelled_on"]:
                last = dt.date.fromisoformat(p["cancelled_on"]) - dt.timedelta(days=1)
            for _ in range(rng.choices([0, 1, 2], weights=[50, 38, 12])[0]):
                incident = day_between(rng, start, last)
                kind = rng.choice(covered)
                on_day = [v for v in vehicles_of[p["id"]] if _was_on(v, incident)]
                if not on_day:
                    continue
                v = rng.choice(on_day)
                late = rng.random() < 0.06
                reported = incident + dt.timedelta(days=rng.randint(35, 70) if late else rng.randint(0, 10))
                if reported > TODAY:
                    reported, late = TODAY, (TODAY - incident).days > 30
                driver = None
                if kind == "collision":
                    on_duty = [d for d in drivers_of[p["id"]] if _was_on(d, incident)]
                    driver = rng.choice(on_duty)["id"]
                self.claim(p, v, driver, kind, incident, reported, late)

    def claim(self, p: dict, v: dict, driver: int | None, kind: str, incident: dt.date, reported: dt.date, late: bool) -> None:
        rng = self.rng
        story = rng.choice(CLAIM_STORIES[kind])
        if kind == "theft" and rng.random() < 0.6:
            estimate = v["vehicle_value"]  # the car is gone: the claim is for its value
        elif kind == "windscreen":
            estimate = float(rng.randint(180, 1400))
        else:
            estimate = float(min(v["vehicle_value"], rng.randint(3, 120) * 50 + rng.choice([0, 25, 75])))
            if kind == "theft":
                story = rng.choice(CLAIM_STORIES["part_theft"])
        deductible = 0.0 if (kind == "windscreen" and p["coverage"] == "comprehensive") else p["deductible"]
        payable = round_money(min(estimate, v["vehicle_value"]) - deductible)
        age = (TODAY - reported).days
        row = {
            "id": 5001 + len(self.claim_rows),
            "policy_id": p["id"],
            "vehicle_id": v["id"],
            "driver_id": driver,
            "incident_date": iso(incident),
            "reported_on": iso(reported),
            "incident_type": kind,
            "description": story,
            "estimated_damage": estimate,
            "status": "open",
            "approved_amount": None,
            "denial_reason": None,
            "decided_on": None,
        }
        self.claim_rows.append(row)
        if age < 5 or (age < 20 and rng.random() < 0.5):
            return  # still open: waiting for the assessor or the policyholder
        decided = reported + dt.timedelta(days=rng.randint(2, min(age, 15)))
        if late:
            row.update(status="denied", denial_reason="late_report", decided_on=iso(decided))
        elif payable <= 0:
            row.update(status="denied", denial_reason="below_deductible", decided_on=iso(decided))
        else:
            row.update(status="approved", approved_amount=payable, decided_on=iso(decided))
            if age > 25 or rng.random() < 0.7:
                paid = min(decided + dt.timedelta(days=rng.randint(1, 7)), TODAY)
                row["status"] = "paid"
                self.payouts.append(
                    {
                        "id": len(self.payouts) + 1,
                        "claim_id": row["id"],
                        "amount": payable,
                        "method": rng.choices(["bank_transfer", "cheque", "repairer"], weights=[60, 10, 30])[0],
                        "paid_on": iso(paid),
                    }
                )

    # -- notes and referrals --------------------------------------------------------------------------
    def records(self, n_notes: int, n_referrals: int) -> None:
        rng = self.rng
        for i in range(1, n_notes + 1):
            p = rng.choice(self.policies)
            created = dt.date.fromisoformat(p["start_date"]) + dt.timedelta(days=rng.randint(0, 200))
            self.notes.append(
                {
                    "id": i,
                    "policyholder_id": p["policyholder_id"],
                    "policy_id": p["id"] if rng.random() < 0.7 else None,
                    "claim_id": None,
                    "body": rng.choice(NOTE_BODIES),
                    "created_on": iso(min(created, TODAY)),
                }
            )
        decided = [c for c in self.claim_rows if c["status"] != "open"]
        holder_of = {p["id"]: p["policyholder_id"] for p in self.policies}
        for i in range(1, n_referrals + 1):
            c = rng.choice(decided)
            team = rng.choice(sorted(REFERRAL_REASONS))
            # Underwriting referrals are about the policy's risks, not about a claim.
            claim_id = None if team == "underwriting" else c["id"]
            created = dt.date.fromisoformat(c["reported_on"]) + dt.timedelta(days=rng.randint(0, 10))
            created = min(created, TODAY)
            self.referrals.append(
                {
                    "id": i,
                    "policyholder_id": holder_of[c["policy_id"]],
                    "policy_id": c["policy_id"],
                    "claim_id": claim_id,
                    "team": team,
                    "status": "closed" if (TODAY - created).days > 21 else "open",
                    "reason": REFERRAL_REASONS[team],
                    "created_on": iso(created),
                }
            )


def registration(rng: random.Random) -> str:
    """A licence plate: a digit, three letters, three digits (also drawn by the task generator)."""
    return f"{rng.randint(1, 9)}{''.join(rng.choice(LETTERS) for _ in range(3))}{rng.randint(0, 999):03d}"


def licence_number(rng: random.Random) -> str:
    """A driving licence number: a letter and seven digits (also drawn by the task generator)."""
    return f"{rng.choice(LETTERS)}{rng.randint(0, 9999999):07d}"


def _was_on(row: dict, day: dt.date) -> bool:
    """Whether a vehicle or driver was on its policy on `day`."""
    on = iso(day)
    return row["added_on"] <= on and (row["removed_on"] is None or row["removed_on"] > on)
