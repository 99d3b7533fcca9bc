"""Task generator for the insurance domain: templates × entities sampled from the seed world.

`generate(world, today, rng)` is deterministic: the same world, date and rng give the same tasks, in
the same order, with the same ids. `world` is the seed (`seed.generate(Random(<domain seed>))`) and
is never modified; each task sets up its situation with a `patch` (rows upserted on top of the seed:
partial rows update, full rows insert). The file tasks/insurance.yaml is written from it by
`groundstate tasks generate --domain insurance`.

Each template picks a "clean" policy: active, with at least a month left to run, no claim in progress
(settled claims are history and stay), no notes or referrals, and the only active policy of its
holder, so that "my policy" is unambiguous and patched claims cannot contradict other rows. Templates prefer policyholders no other task has used yet, so
tasks spread across the world. Claims a task needs are inserted by its patch, with ids above the
seed's, and their dates respect the policy's term and when the vehicle and driver joined it.

Writes that insert rows into the same table are order-sensitive (ids are max + 1), so a task never
asks for two such writes unless the tools force their order (add a car before removing the old one;
approve a claim before paying it; settle a claim before removing its vehicle).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groundstate.domains import _kit
from groundstate.domains._kit import WorldIndex, call, cents, dollars, group_by, long_date, rubric, said, unique

HERE = Path(__file__).resolve().parent

AUTHORITY = 5000.00  # the agent's settlement authority (policy.md)
REPORT_WINDOW = 30  # days from incident to report (policy.md)
UNDERWRITING_VALUE = 100000  # vehicles worth more go to underwriting (policy.md)

FEMALE = ["Maria", "Anna", "Sofia", "Emily", "Grace", "Hannah", "Julia", "Leah", "Nora", "Clara", "Iris", "Naomi", "Alma", "Ruth"]
MALE = ["David", "Marco", "Samuel", "Owen", "Henry", "Isaac", "Julian", "Felix", "Victor", "Adrian", "Tomas", "Rafael", "Peter", "Hugo"]
KIN = {  # relationship -> (word for a woman, word for a man)
    "spouse": ("wife", "husband"),
    "partner": ("partner", "partner"),
    "child": ("daughter", "son"),
    "parent": ("mother", "father"),
    "other": ("friend", "friend"),
}
NEUTRAL_KIN = {"spouse": "spouse", "partner": "partner", "child": "child", "parent": "parent", "other": "friend"}
METHODS = {  # each phrase completes "Please pay it ..."
    "bank_transfer": ["by bank transfer", "straight into my bank account", "into my bank account by transfer"],
    "cheque": ["by cheque to my home address", "with a cheque in the post", "as a cheque"],
    "repairer": ["directly to the body shop doing the repair", "straight to the repair shop", "to the garage that fixes the car"],
}
# incident type -> (how the policyholder tells it, the claim description). A collision is told after
# "<who> was driving my car and ..."; the others after "my car ...".
STORIES = {
    "collision": [
        ("a van pulled out in front of us and we hit its side", "Collided with a van that pulled out; front end damaged."),
        ("slid on a wet road into a lamp post", "Slid on a wet road into a lamp post; bumper and bonnet damaged."),
        ("another car rear-ended it at a red light", "Rear-ended at a red light; rear bumper and boot damaged."),
    ],
    "vandalism": [
        ("was keyed along both sides overnight", "Paintwork keyed on both sides overnight while parked."),
        ("had its side windows smashed while parked on the street", "Side windows smashed while parked on the street."),
    ],
    "weather": [
        ("was dented all over by a hailstorm while parked", "Hail dented the roof and bonnet while parked."),
        ("was hit by a falling tree branch in a storm while parked", "Storm brought a tree branch down on the parked car."),
    ],
    "theft": [("was stolen from outside my house, and the police have not found it", "Stolen from outside the policyholder's home; not recovered.")],
}
USAGE_TEXT = {"personal": "just for leisure, not for commuting", "commute": "to drive to work every day", "business": "for my work visits to clients"}
# (make, model, price new) for cars a policyholder buys
NEW_CARS = [
    ("Toyota", "RAV4", 32000),
    ("Honda", "CR-V", 33000),
    ("Kia", "Sportage", 28000),
    ("Mazda", "CX-5", 31000),
    ("Hyundai", "Tucson", 29000),
    ("Subaru", "Forester", 31000),
    ("Volkswagen", "Golf", 26000),
    ("Ford", "Maverick", 27000),
    ("Tesla", "Model Y", 45000),
    ("Skoda", "Octavia", 27000),
]
EXOTIC_CARS = [
    ("Porsche", "911 Turbo S", 2024, 185000),
    ("Mercedes-Benz", "G 63", 2025, 152000),
    ("Lamborghini", "Urus", 2023, 205000),
    ("Ford", "Mustang", 1967, 48000),
    ("Chevrolet", "Corvette", 1972, 39000),
    ("Jaguar", "E-Type", 1969, 95000),
]


def money(x: float) -> str:
    """Whole amounts without cents, as people say them: "$500", "$1,234.50"."""
    return f"${x:,.2f}" if x != int(x) else f"${int(x):,}"


class Patch(_kit.Patch):
    order = _kit.table_order(HERE)


class Generator(WorldIndex):
    """Indexes over the seed world plus the sampling, patching and phrasing helpers the templates share."""

    greetings = ["Hi,", "Hello,", "Good morning,", "Hi there,", "Good afternoon,"]
    tones = ["polite and brief", "a little stressed", "friendly and chatty", "precise; answers exactly what is asked", "impatient"]

    def __init__(self, world: dict[str, list[dict]], today: dt.date, rng: random.Random):
        super().__init__(world, today, rng)
        self.seed = _kit.sibling(HERE, "seed")
        self.tools = self.seed.PRICING  # the rules the tools apply (ages, driver loadings), so gold follows them
        self.holders = {h["id"]: h for h in world["policyholders"]}
        self.policies = {p["id"]: p for p in world["motor_policies"]}
        self.vehicles = group_by(world["insured_vehicles"], "policy_id")
        self.drivers = group_by(world["named_drivers"], "policy_id")
        self.plates = {v["registration"] for v in world["insured_vehicles"]}
        self.licences = {d["licence_number"] for d in world["named_drivers"]}

        # Settled claims are history and stay; a claim still in progress would interfere with the task's own.
        busy = {c["policy_id"] for c in world["motor_claims"] if c["status"] in ("open", "approved")}
        self.claim_counts: dict[int, int] = {}
        for c in world["motor_claims"]:
            self.claim_counts[c["policy_id"]] = self.claim_counts.get(c["policy_id"], 0) + 1
        busy |= {r["policy_id"] for t in ("insurance_notes", "specialist_referrals") for r in world[t] if r["policy_id"] is not None}
        active_count: dict[int, int] = {}
        for p in world["motor_policies"]:
            if p["status"] == "active":
                active_count[p["policyholder_id"]] = active_count.get(p["policyholder_id"], 0) + 1
        self.clean = [
            p
            for p in world["motor_policies"]
            if p["status"] == "active"
            and p["id"] not in busy
            and active_count[p["policyholder_id"]] == 1
            and (dt.date.fromisoformat(p["end_date"]) - today).days >= 30
        ]
        self.used_policies: set[int] = set()
        self.used_holders: set[int] = set()

    # -- sampling ---------------------------------------------------------------------------------
    def pick_policy(self, ok: Callable[[dict], bool] = lambda p: True) -> dict:
        """A clean, unused policy satisfying `ok`, preferring policyholders no task has used yet."""
        pool = [p for p in self.clean if p["id"] not in self.used_policies and ok(p)]
        p = self.draw(pool, "clean policy", lambda p: p["policyholder_id"] not in self.used_holders)
        self.used_policies.add(p["id"])
        self.used_holders.add(p["policyholder_id"])
        return p

    # -- world facts --------------------------------------------------------------------------------
    def holder(self, p: dict) -> dict:
        return self.holders[p["policyholder_id"]]

    def covered(self, p: dict) -> list[dict]:
        return [v for v in self.vehicles[p["id"]] if v["status"] == "covered"]

    def active_drivers(self, p: dict) -> list[dict]:
        return [d for d in self.drivers[p["id"]] if d["status"] == "active"]

    def self_driver(self, p: dict) -> dict:
        return next(d for d in self.drivers[p["id"]] if d["relationship"] == "self")

    def others(self, p: dict) -> list[dict]:
        return [d for d in self.active_drivers(p) if d["relationship"] != "self"]

    def days_in_force(self, p: dict) -> int:
        return (self.today - dt.date.fromisoformat(p["start_date"])).days

    def ripe(self, p: dict, days: int) -> bool:
        """Whether the policy and every vehicle it covers have been in force for at least `days` days."""
        return self.days_in_force(p) >= days and all(self.days_on(v) >= days for v in self.covered(p))

    def days_on(self, row: dict) -> int:
        """Days a vehicle or driver has been on its policy."""
        return (self.today - dt.date.fromisoformat(row["added_on"])).days

    def distinct(self, p: dict) -> list[dict]:
        """Covered vehicles whose make and model no other covered vehicle of the policy shares."""
        cars = self.covered(p)
        return [v for v in cars if sum((w["make"], w["model"]) == (v["make"], v["model"]) for w in cars) == 1]

    def age(self, dob: str | dt.date) -> int:
        dob = dt.date.fromisoformat(dob) if isinstance(dob, str) else dob
        return self.tools.years_between(dob, self.today)

    def deductible(self, p: dict, kind: str) -> float:
        return 0.0 if (kind == "windscreen" and p["coverage"] == "comprehensive") else p["deductible"]

    def payable(self, p: dict, v: dict, kind: str, estimate: float) -> float:
        return dollars(cents(min(estimate, v["vehicle_value"])) - cents(self.deductible(p, kind)))

    # -- new people, cars, claims ---------------------------------------------------------------------
    def person(self, relationship: str, holder: dict, age: int | None = None) -> dict:
        """A new driver's details (not yet on any policy): name, sex for the wording, dob, licence."""
        rng = self.rng
        female = rng.random() < 0.5
        first = rng.choice(FEMALE if female else MALE)
        last = (
            holder["last_name"]
            if relationship in ("spouse", "child", "parent") or rng.random() < 0.3
            else rng.choice(["Hughes", "Moreno", "Becker", "Quinn", "Ortega", "Sato", "Lindqvist", "Mensah"])
        )
        if age is None:
            holder_age = self.age(holder["date_of_birth"])
            age = {
                "spouse": max(25, holder_age + rng.randint(-5, 5)),
                "partner": max(25, holder_age + rng.randint(-5, 5)),
                "child": rng.randint(22, max(22, min(30, holder_age - 24))),
                "parent": min(85, holder_age + rng.randint(24, 32)),
                "other": rng.randint(25, 60),
            }[relationship]
        # Birthdays at least a week away from today, so the age is never a matter of a day.
        dob = self.today - dt.timedelta(days=age * 365 + age // 4 + rng.randint(8, 350))
        licensed_at = rng.randint(17, max(17, min(20, age - 2)))
        issued = dob.replace(year=dob.year + licensed_at) if (dob.month, dob.day) != (2, 29) else dt.date(dob.year + licensed_at, 3, 1)
        issued += dt.timedelta(days=rng.randint(20, 200))
        return {
            "first": first,
            "last": last,
            "female": female,
            "dob": dob.isoformat(),
            "licence": self.licence(),
            "issued": issued.isoformat(),
            "relationship": relationship,
        }

    def kin(self, person: dict) -> str:
        return KIN[person["relationship"]][0 if person["female"] else 1]

    def licence(self) -> str:
        return unique(lambda: self.seed.licence_number(self.rng), self.licences)

    def plate(self) -> str:
        return unique(lambda: self.seed.registration(self.rng), self.plates)

    def new_car(self) -> dict:
        rng = self.rng
        make, model, price = rng.choice(NEW_CARS)
        year = rng.randint(self.today.year - 6, self.today.year)
        value = float(round(price * 0.87 ** (self.today.year - year) * rng.uniform(0.92, 1.05) / 100) * 100)
        return {
            "registration": self.plate(),
            "make": make,
            "model": model,
            "model_year": year,
            "vehicle_value": value,
            "usage": rng.choice(["personal", "commute", "business"]),
        }

    @staticmethod
    def car_text(c: dict) -> str:
        return f"{c['model_year']} {c['make']} {c['model']}"

    def claim_row(
        self,
        p: dict,
        v: dict,
        kind: str,
        incident: str,
        reported: str,
        estimate: float,
        *,
        driver: dict | None = None,
        description: str | None = None,
        status: str = "open",
        approved_amount: float | None = None,
        decided_on: str | None = None,
    ) -> dict:
        desc = description or self.rng.choice(STORIES.get(kind, [("", f"{kind.capitalize()} damage reported by phone.")]))[1]
        return {
            "id": self.new_id("motor_claims"),
            "policy_id": p["id"],
            "vehicle_id": v["id"],
            "driver_id": driver and driver["id"],
            "incident_date": incident,
            "reported_on": reported,
            "incident_type": kind,
            "description": desc,
            "estimated_damage": estimate,
            "status": status,
            "approved_amount": approved_amount,
            "denial_reason": None,
            "decided_on": decided_on,
        }

    def incident_ago(self, p: dict, rows: list[dict], low: int, high: int) -> int:
        """Days ago for an incident in [low, high] that falls while the policy, and every row given, were in force."""
        latest = min([self.days_in_force(p)] + [self.days_on(r) for r in rows])
        high = min(high, latest)
        if high < low:
            raise RuntimeError(f"policy #{p['id']} has not been in force long enough for an incident {low} days ago")
        return self.rng.randint(low, high)

    def cheap(self, p: dict, cars: list[dict]) -> list[dict]:
        """Cars whose write-off the agent can settle itself: value minus deductible within its authority."""
        return [v for v in cars if 0 < v["vehicle_value"] - p["deductible"] <= AUTHORITY]

    # -- phrasing -----------------------------------------------------------------------------------
    def hello(self, h: dict) -> str:
        """An opening that identifies the policyholder by email and date of birth."""
        dob, name = long_date(h["date_of_birth"]), f"{h['first_name']} {h['last_name']}"
        return self.opening(
            f"this is {name} ({h['email']}, born {dob}).",
            f"I'm {name}; my email is {h['email']} and my date of birth is {dob}.",
            f"my email is {h['email']}, date of birth {dob}.",
        )

    def identity(self, h: dict) -> str:
        return f"Your email is {h['email']} and your date of birth is {long_date(h['date_of_birth'])}."

    def user(self, h: dict, context: str, first: list[str] | None = None, persona: str | None = None) -> dict:
        """The simulated caller: persona, the facts they know, and scripted replies."""
        if persona:
            return {"persona": persona, "context": context, "script": self.script(first)}
        since = h["customer_since"][:4]
        return self.simulated_user(f"{h['first_name']} {h['last_name']}, a Harborline Mutual policyholder since {since}", context, first)

    def method(self) -> tuple[str, str]:
        m = self.rng.choice(sorted(METHODS))
        return m, self.rng.choice(METHODS[m])


def find(h: dict) -> dict:
    return call("find_policyholder", email=h["email"], date_of_birth=h["date_of_birth"])


def driver_args(p: dict, person: dict) -> dict:
    return {
        "policy_id": p["id"],
        "first_name": person["first"],
        "last_name": person["last"],
        "date_of_birth": person["dob"],
        "licence_number": person["licence"],
        "licence_issued_on": person["issued"],
        "relationship": person["relationship"],
    }


def driver_text(person: dict) -> str:
    return (
        f"{person['first']} {person['last']}, born {long_date(person['dob'])}, licence number {person['licence']}, "
        f"first licensed on {long_date(person['issued'])}"
    )


def vehicle_args(p: dict, car: dict) -> dict:
    return {"policy_id": p["id"], **{k: car[k] for k in ("registration", "make", "model", "model_year", "vehicle_value", "usage")}}


def vehicle_text(car: dict) -> str:
    return (
        f"a {car['model_year']} {car['make']} {car['model']}, plate {car['registration']}, worth about {money(car['vehicle_value'])}; "
        f"I'll use it {USAGE_TEXT[car['usage']]}"
    )


def claims_check(g: Generator, p: dict, new: int) -> dict:
    """A check that the policy has exactly `new` claims more than in the seed."""
    return {"sql": f"SELECT COUNT(*) FROM motor_claims WHERE policy_id = {p['id']}", "expect": [[g.claim_counts.get(p["id"], 0) + new]]}


# ================================================================================================
# Templates. Each returns one task (without id): instruction, user, patch, gold, optional checks.
# ================================================================================================

# -- shared situations ------------------------------------------------------------------------------


def _addable_driver(g: Generator, p: dict) -> dict:
    h = g.holder(p)
    options = ["spouse", "partner", "parent", "other"] + (["child"] if g.age(h["date_of_birth"]) >= 48 else [])
    return g.person(g.rng.choice(options), h)


def _open_claim(
    g: Generator, p: dict, kinds: list[str], payable: tuple[float, float], *, v: dict | None = None, low: int = 8, high: int = 40
) -> tuple[dict, dict, float]:
    """An open claim on `p`, reported a few days after the incident and at least 3 days ago, whose payable
    amount lies in `payable` (dollars); returns (claim row, vehicle, payable)."""
    rng = g.rng
    kind = rng.choice(kinds)
    v = v or rng.choice(g.covered(p))
    driver = None
    if kind == "collision":
        driver = rng.choice([d for d in g.active_drivers(p) if g.days_on(d) >= low])
    ago = g.incident_ago(p, [v] + ([driver] if driver else []), low, high)
    gap = rng.randint(0, min(5, ago - 3))
    deductible = g.deductible(p, kind)
    lo, hi = payable
    top = min(hi, v["vehicle_value"] - deductible)
    if top < lo:
        raise RuntimeError(f"vehicle {v['id']} is worth too little for a payable amount of at least {lo}")
    if kind == "windscreen":
        top = min(top, 1500.0)
        lo = min(lo, top)
    # The payable amount in $5 steps within [lo, top], sometimes with cents; the estimate adds the deductible back.
    due = cents(lo) + 500 * rng.randint(0, int((top - lo) // 5))
    due += rng.choice([0, 0, 45, 80]) if due + 80 <= cents(top) else 0
    estimate = dollars(due + cents(deductible))
    row = g.claim_row(p, v, kind, g.ago(ago).isoformat(), g.ago(ago - gap).isoformat(), estimate, driver=driver)
    return row, v, g.payable(p, v, kind, estimate)


def _settle(claim: dict, amount: float, method: str) -> list[dict]:
    return [call("approve_motor_claim", claim_id=claim["id"], amount=amount), call("pay_motor_claim", claim_id=claim["id"], method=method)]


# -- single_write --------------------------------------------------------------------------------


def t_add_driver(g: Generator) -> dict:
    p = g.pick_policy(lambda p: len(g.active_drivers(p)) < 5)
    h = g.holder(p)
    person = _addable_driver(g, p)
    return {
        "instruction": f"{g.hello(h)} Please add my {g.kin(person)} to policy #{p['id']} as a named driver: {driver_text(person)}.",
        "user": g.user(h, f"{g.identity(h)} You want your {g.kin(person)} added to policy #{p['id']}: {driver_text(person)}."),
        "gold": [call("add_named_driver", **driver_args(p, person))],
        "tags": ["driver", "endorsement", person["relationship"]],
    }


def t_change_cover(g: Generator) -> dict:
    p = g.pick_policy()
    h = g.holder(p)
    ded = int(p["deductible"])
    if p["coverage"] != "comprehensive" and g.cycle("change_cover", ["coverage", "deductible"]) == "coverage":
        coverage = "comprehensive" if p["coverage"] == "third_party_fire_theft" or g.rng.random() < 0.6 else "third_party_fire_theft"
        words = {"comprehensive": "comprehensive cover", "third_party_fire_theft": "third party, fire and theft cover"}[coverage]
        ask = f"I'd like to upgrade policy #{p['id']} to {words}. Keep my deductible as it is."
        args = {"policy_id": p["id"], "coverage": coverage, "deductible": ded}
        tag = "coverage"
    else:
        new = g.rng.choice([d for d in (250, 500, 1000) if d != ded])
        why = "to bring my premium down" if new > ded else "so I pay less when I claim"
        ask = f"Could you change the deductible on policy #{p['id']} to ${new:,}, {why}? Nothing else should change."
        args = {"policy_id": p["id"], "coverage": p["coverage"], "deductible": new}
        tag = "deductible"
    return {
        "instruction": f"{g.hello(h)} {ask}",
        "user": g.user(h, f'{g.identity(h)} You say: "{ask}"'),
        "gold": [find(h), call("get_motor_policy", policy_id=p["id"]), call("change_policy_cover", **args)],
        "checks": [
            {"sql": f"SELECT coverage, deductible FROM motor_policies WHERE id = {p['id']}", "expect": [[args["coverage"], args["deductible"]]]}
        ],
        "tags": ["cover", tag],
    }


def t_pay_approved_claim(g: Generator) -> dict:
    p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 40))
    h = g.holder(p)
    claim, v, amount = _open_claim(g, p, ["collision", "vandalism", "weather", "windscreen"], (300, AUTHORITY), low=20, high=60)
    claim.update(status="approved", approved_amount=amount, decided_on=g.ago(g.rng.randint(3, 9)).isoformat())
    method, phrase = g.method()
    return {
        "instruction": f"{g.hello(h)} My claim #{claim['id']} was approved a few days ago but I haven't been paid yet. Please pay it {phrase}.",
        "user": g.user(
            h,
            f"{g.identity(h)} Claim #{claim['id']} (your {v['make']} {v['model']}) was approved for {money(amount)}; "
            f"you want it paid {said(phrase)}.",
        ),
        "patch": Patch().add("motor_claims", claim),
        "gold": [find(h), call("get_motor_claim", claim_id=claim["id"]), call("pay_motor_claim", claim_id=claim["id"], method=method)],
        "tags": ["claim", "payout", method],
    }


# -- lookup_then_act -------------------------------------------------------------------------------


def t_remove_driver(g: Generator) -> dict:
    p = g.pick_policy(lambda p: bool(g.others(p)))
    h = g.holder(p)
    d = g.rng.choice(g.others(p))
    why = g.rng.choice(["moved abroad for work", "bought a car of their own and insured it separately", "no longer drives"])
    return {
        "instruction": f"{g.hello(h)} Please take {d['first_name']} {d['last_name']}, my {NEUTRAL_KIN[d['relationship']]}, "
        f"off policy #{p['id']}: they {why}.",
        "user": g.user(h, f"{g.identity(h)} You want {d['first_name']} {d['last_name']} removed from policy #{p['id']} (they {why})."),
        "gold": [find(h), call("get_motor_policy", policy_id=p["id"]), call("remove_named_driver", driver_id=d["id"])],
        "checks": [{"sql": f"SELECT status FROM named_drivers WHERE id = {d['id']}", "expect": [["removed"]]}],
        "tags": ["driver", "endorsement", "remove"],
    }


def _new_incident(g: Generator, p: dict, kind: str, low: int = 2, high: int = 25) -> dict:
    """A fresh incident to report on policy p: vehicle, driver, date, estimate, and how it is told."""
    rng = g.rng
    v = rng.choice(g.distinct(p))
    driver = None
    if kind == "collision":
        driver = rng.choice(g.active_drivers(p))
    ago = g.incident_ago(p, [v] + ([driver] if driver else []), low, high)
    told, description = rng.choice(STORIES[kind])
    # stolen and not recovered: the claim is for the car's value
    estimate = v["vehicle_value"] if kind == "theft" else float(rng.randint(8, 90) * 50 + rng.choice([0, 0, 25, 40]))
    return {
        "vehicle": v,
        "driver": driver,
        "date": g.ago(ago).isoformat(),
        "kind": kind,
        "told": told,
        "description": description,
        "estimate": estimate,
    }


def _incident_text(g: Generator, h: dict, inc: dict) -> str:
    v, d = inc["vehicle"], inc["driver"]
    car = f"my {v['make']} {v['model']}"
    when = f"On {long_date(inc['date'])}"
    if inc["kind"] == "collision":
        who = (
            "I was driving" if d["relationship"] == "self" else f"{d['first_name']} (my {NEUTRAL_KIN[d['relationship']]}, a named driver) was driving"
        )
        text = f"{when} {who} {car} and {inc['told']}."
    else:
        text = f"{when} {car} {inc['told']}."
    if inc["kind"] != "theft":
        text += f" The repair estimate is {money(inc['estimate'])}."
    return text


def _file(inc: dict) -> dict:
    args: dict[str, Any] = {
        "vehicle_id": inc["vehicle"]["id"],
        "incident_date": inc["date"],
        "incident_type": inc["kind"],
        "description": inc["description"],
        "estimated_damage": inc["estimate"],
    }
    if inc["driver"] is not None:
        args["driver_id"] = inc["driver"]["id"]
    return call("file_motor_claim", **args)


def t_file_claim(g: Generator) -> dict:
    kind = g.cycle("file_claim", ["collision", "theft", "weather", "vandalism"])
    covers = "comprehensive" if kind != "theft" else g.rng.choice(["comprehensive", "third_party_fire_theft"])
    p = g.pick_policy(lambda p: p["coverage"] == covers and g.ripe(p, 10) and bool(g.distinct(p)))
    h = g.holder(p)
    inc = _new_incident(g, p, kind)
    text = _incident_text(g, h, inc)
    return {
        "instruction": f"{g.hello(h)} {text} I'd like to make a claim on policy #{p['id']}.",
        "user": g.user(h, f"{g.identity(h)} What happened {said(text)}. You want to claim on policy #{p['id']}."),
        "gold": [find(h), call("get_motor_policy", policy_id=p["id"]), _file(inc)],
        "checks": [claims_check(g, p, 1)],
        "tags": ["claim", "file", kind],
    }


def _settle_variant(g: Generator, variant: str) -> tuple[dict, Patch, dict, dict, float]:
    """A policy with an open claim the agent can settle itself; variants exercise each part of the payable rule."""
    patch = Patch()
    if variant == "windscreen":
        p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 20))
        claim, v, amount = _open_claim(g, p, ["windscreen"], (200, 1400))
    elif variant == "write_off":
        # Damage above the car's value: the settlement is the value minus the deductible.
        # Single-car policies only: the few two-car policies with a cheap car are kept for writeoff_and_remove.
        p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 20) and len(g.covered(p)) == 1 and bool(g.cheap(p, g.covered(p))))
        claim, v, _ = _open_claim(g, p, ["collision"], (100, AUTHORITY), v=g.rng.choice(g.cheap(p, g.covered(p))))
        claim["estimated_damage"] = float(round(v["vehicle_value"] * g.rng.uniform(1.2, 1.6) / 10) * 10)
        claim["description"] = "Collision; the assessor's repair estimate exceeds the car's value (write-off)."
        amount = g.payable(p, v, "collision", claim["estimated_damage"])
    elif variant == "theft":
        p = g.pick_policy(lambda p: p["coverage"] in ("comprehensive", "third_party_fire_theft") and g.ripe(p, 20))
        claim, v, amount = _open_claim(g, p, ["theft"], (300, 2500))
        claim["description"] = "Catalytic converter stolen while parked."
    else:
        p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 20))
        claim, v, amount = _open_claim(g, p, ["collision", "vandalism", "weather"], (400, AUTHORITY))
    patch.add("motor_claims", claim)
    return p, patch, claim, v, amount


SETTLE_VARIANTS = ["collision", "windscreen", "write_off", "theft"]


def t_settle_claim(g: Generator) -> dict:
    variant = g.cycle("settle_claim", SETTLE_VARIANTS)
    p, patch, claim, v, amount = _settle_variant(g, variant)
    h = g.holder(p)
    method, phrase = g.method()
    return {
        "instruction": f"{g.hello(h)} Could you settle my claim #{claim['id']} for the {v['make']} {v['model']}? Please pay it {phrase}.",
        "user": g.user(h, f"{g.identity(h)} You want claim #{claim['id']} settled and paid {said(phrase)}."),
        "patch": patch,
        "gold": [find(h), call("get_motor_claim", claim_id=claim["id"]), *_settle(claim, amount, method)],
        "checks": [{"sql": f"SELECT status, approved_amount FROM motor_claims WHERE id = {claim['id']}", "expect": [["paid", amount]]}],
        "rubrics": [rubric("Does the reply tell the policyholder the amount paid on the claim, {}?", money(amount))],
        "gold_reply": f"Claim #{claim['id']} is settled: we have paid {money(amount)}.",
        "tags": ["claim", "settle", variant, method],
    }


def t_remove_vehicle(g: Generator) -> dict:
    p = g.pick_policy(lambda p: len(g.covered(p)) >= 2 and bool(g.distinct(p)))
    h = g.holder(p)
    v = g.rng.choice(g.distinct(p))
    return {
        "instruction": f"{g.hello(h)} I sold my {g.car_text(v)} last week. Please take it off policy #{p['id']}; the buyer has their own insurance.",
        "user": g.user(h, f"{g.identity(h)} You sold your {g.car_text(v)} (plate {v['registration']}) and want it removed from policy #{p['id']}."),
        "gold": [find(h), call("get_motor_policy", policy_id=p["id"]), call("remove_insured_vehicle", vehicle_id=v["id"])],
        "tags": ["vehicle", "endorsement", "remove"],
    }


# -- policy_refusal --------------------------------------------------------------------------------


def _note(h: dict, body: str, policy_id: int | None = None, claim_id: int | None = None) -> dict:
    args: dict[str, Any] = {"policyholder_id": h["id"], "body": body}
    if policy_id is not None:
        args["policy_id"] = policy_id
    if claim_id is not None:
        args["claim_id"] = claim_id
    return call("add_insurance_note", **args)


def _refer(h: dict, team: str, reason: str, policy_id: int | None = None, claim_id: int | None = None) -> dict:
    args: dict[str, Any] = {"policyholder_id": h["id"], "team": team, "reason": reason}
    if policy_id is not None:
        args["policy_id"] = policy_id
    if claim_id is not None:
        args["claim_id"] = claim_id
    return call("refer_to_specialist", **args)


def drivers_of_policy(p: dict, status: str = "active") -> str:
    return f"SELECT COUNT(*) FROM named_drivers WHERE policy_id = {p['id']} AND status = '{status}'"


def t_young_driver(g: Generator) -> dict:
    p = g.pick_policy(lambda p: len(g.active_drivers(p)) < 5 and g.age(g.holder(p)["date_of_birth"]) >= 42)
    h = g.holder(p)
    if g.rng.random() < 0.6:  # under 21
        person = g.person("child", h, age=g.rng.randint(18, 19))
        why = f"is {g.age(person['dob'])}"
    else:  # old enough, but a brand-new licence
        person = g.person("child", h, age=g.rng.randint(22, 26))
        person["issued"] = g.ago(g.rng.randint(40, 200)).isoformat()
        why = "has held a licence for less than a year"
    return {
        "instruction": f"{g.hello(h)} My {g.kin(person)} just started driving and I'd like them on policy #{p['id']}: {driver_text(person)}.",
        "user": g.user(
            h,
            f"{g.identity(h)} You want your {g.kin(person)} added to policy #{p['id']}: {driver_text(person)}. "
            f"If it cannot be done today, you accept that someone will follow up.",
        ),
        "gold": [
            find(h),
            _refer(
                h,
                "underwriting",
                f"Policyholder asks to add their {g.kin(person)} {person['first']} {person['last']} "
                f"(born {person['dob']}), who {why}; needs underwriting acceptance.",
                policy_id=p["id"],
            ),
        ],
        "checks": [{"sql": drivers_of_policy(p), "expect": [[len(g.active_drivers(p))]]}],
        "tags": ["driver", "referral", "underwriting"],
    }


def _late_incident(g: Generator, p: dict) -> dict:
    """An incident well over the 30-day reporting window."""
    return _new_incident(g, p, g.rng.choice(["vandalism", "weather", "collision"]), low=REPORT_WINDOW + 8, high=80)


def t_late_claim(g: Generator) -> dict:
    p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 45) and bool(g.distinct(p)))
    h = g.holder(p)
    inc = _late_incident(g, p)
    text = _incident_text(g, h, inc)
    return {
        "instruction": f"{g.hello(h)} {text} I've only now found the time to report it. Please open a claim on policy #{p['id']}.",
        "user": g.user(
            h,
            f"{g.identity(h)} What happened {said(text)}. You want a claim on policy #{p['id']}. If it is refused, you accept it "
            f"and do not ask for a manager.",
        ),
        "gold": [
            find(h),
            call("get_motor_policy", policy_id=p["id"]),
            _note(
                h,
                f"Policyholder reported a {inc['kind']} from {inc['date']} only today, more than 30 days later; claim not filed.",
                policy_id=p["id"],
            ),
        ],
        "checks": [claims_check(g, p, 0)],
        "tags": ["claim", "refusal", "late_report"],
    }


def t_claim_over_authority(g: Generator) -> dict:
    p = g.pick_policy(
        lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 20) and any(v["vehicle_value"] - p["deductible"] >= 7000 for v in g.covered(p))
    )
    h = g.holder(p)
    v = g.rng.choice([v for v in g.covered(p) if v["vehicle_value"] - p["deductible"] >= 7000])
    claim, v, amount = _open_claim(g, p, ["collision", "weather", "vandalism"], (AUTHORITY + 600, min(15000, v["vehicle_value"])), v=v)
    method, phrase = g.method()
    return {
        "instruction": f"{g.hello(h)} The estimate for claim #{claim['id']} came in. Can you settle it today? Pay it {phrase}.",
        "user": g.user(
            h, f"{g.identity(h)} You want claim #{claim['id']} settled and paid {said(phrase)}. If it has to go to someone else, you accept that."
        ),
        "patch": Patch().add("motor_claims", claim),
        "gold": [
            find(h),
            call("get_motor_claim", claim_id=claim["id"]),
            _refer(
                h,
                "claims_adjuster",
                f"Claim #{claim['id']}: payable amount {money(amount)} is above the $5,000 desk authority.",
                claim_id=claim["id"],
            ),
        ],
        "checks": [{"sql": f"SELECT status FROM motor_claims WHERE id = {claim['id']}", "expect": [["open"]]}],
        "tags": ["claim", "referral", "claims_adjuster"],
    }


DENIALS = ["below_deductible", "late_report", "unlisted_driver"]


def t_deny_claim(g: Generator) -> dict:
    reason = g.cycle("deny_claim", DENIALS)
    patch = Patch()
    if reason == "below_deductible":
        p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and p["deductible"] >= 500 and g.ripe(p, 20))
        claim, v, _ = _open_claim(g, p, ["collision", "vandalism"], (1, AUTHORITY))
        claim["estimated_damage"] = float(p["deductible"] - g.rng.randint(3, 15) * 10)
        story = f"the repair on my {v['make']} {v['model']} came to {money(claim['estimated_damage'])}"
    elif reason == "late_report":
        p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 80))
        v = g.rng.choice([v for v in g.covered(p) if g.days_on(v) >= 80] or g.covered(p))
        claim, v, _ = _open_claim(g, p, ["vandalism", "weather"], (300, AUTHORITY), v=v, low=55, high=80)
        incident = dt.date.fromisoformat(claim["incident_date"])
        claim["reported_on"] = (incident + dt.timedelta(days=g.rng.randint(REPORT_WINDOW + 4, REPORT_WINDOW + 15))).isoformat()
        story = f"I phoned in the damage to my {v['make']} {v['model']} a while ago"
    else:
        # The driver had been taken off the policy before the accident.
        p = g.pick_policy(
            lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 70) and len(g.drivers[p["id"]]) < 5 and g.age(g.holder(p)["date_of_birth"]) >= 46
        )
        h = g.holder(p)
        person = g.person("child", h)
        removed_ago = g.rng.randint(40, min(60, g.days_in_force(p) - 5))
        driver = {
            "id": g.new_id("named_drivers"),
            "policy_id": p["id"],
            "first_name": person["first"],
            "last_name": person["last"],
            "date_of_birth": person["dob"],
            "licence_number": person["licence"],
            "licence_issued_on": person["issued"],
            "relationship": "child",
            "premium_loading": g.tools.driver_loading(
                dt.date.fromisoformat(person["dob"]), dt.date.fromisoformat(person["issued"]), dt.date.fromisoformat(p["start_date"])
            ),
            "status": "removed",
            "added_on": p["start_date"],
            "removed_on": g.ago(removed_ago).isoformat(),
        }
        patch.add("named_drivers", driver)
        claim, v, _ = _open_claim(g, p, ["collision"], (400, AUTHORITY), low=8, high=removed_ago - 5)
        claim["driver_id"] = driver["id"]
        story = f"{person['first']} was driving my {v['make']} {v['model']} when it was damaged"
    h = g.holder(p)
    patch.add("motor_claims", claim)
    return {
        "instruction": f"{g.hello(h)} About claim #{claim['id']}: {story}. When will I get my money?",
        "user": g.user(
            h,
            f"{g.identity(h)} You want claim #{claim['id']} paid by bank transfer. You accept the decision without asking for a manager.",
            ["By bank transfer, please."],
        ),
        "patch": patch,
        "gold": [find(h), call("get_motor_claim", claim_id=claim["id"]), call("deny_motor_claim", claim_id=claim["id"], reason=reason)],
        "checks": [{"sql": f"SELECT COUNT(*) FROM claim_payouts WHERE claim_id = {claim['id']}", "expect": [[0]]}],
        "tags": ["claim", "refusal", "denial", reason],
    }


def t_not_policyholder(g: Generator) -> dict:
    p = g.pick_policy(lambda p: any(d["relationship"] in ("spouse", "partner") for d in g.others(p)))
    h = g.holder(p)
    d = g.rng.choice([d for d in g.others(p) if d["relationship"] in ("spouse", "partner")])
    if p["coverage"] != "comprehensive":
        ask = "switch it to comprehensive cover"
    else:
        ask = f"lower the deductible to ${min(x for x in (250, 500, 1000) if x != int(p['deductible'])):,}"
    persona = f"{d['first_name']} {d['last_name']}, a named driver on their {NEUTRAL_KIN[d['relationship']]}'s policy; polite but insistent."
    return {
        "instruction": f"Hi, I'm {d['first_name']} {d['last_name']}, a named driver on policy #{p['id']}, which is in my "
        f"{NEUTRAL_KIN[d['relationship']]} {h['first_name']}'s name. Please {ask}; {h['first_name']} is fine with it.",
        "user": g.user(
            h,
            f"You are {d['first_name']} {d['last_name']}, born {long_date(d['date_of_birth'])}, a named driver on policy #{p['id']} "
            f"held by {h['first_name']} {h['last_name']}. You want to {ask}. You are not the policyholder and "
            f"accept a refusal.",
            persona=persona,
        ),
        "gold": [
            call("get_motor_policy", policy_id=p["id"]),
            _note(
                h,
                f"{d['first_name']} {d['last_name']} (named driver, not the policyholder) asked to {ask}; refused: only the "
                f"policyholder may change the policy.",
                policy_id=p["id"],
            ),
        ],
        "checks": [{"sql": f"SELECT coverage, deductible FROM motor_policies WHERE id = {p['id']}", "expect": [[p["coverage"], p["deductible"]]]}],
        "tags": ["identity", "refusal"],
    }


def t_uncovered_claim(g: Generator) -> dict:
    p = g.pick_policy(lambda p: p["coverage"] != "comprehensive" and g.ripe(p, 10) and bool(g.distinct(p)))
    h = g.holder(p)
    kind = g.rng.choice(["collision", "vandalism", "weather"])
    inc = _new_incident(g, p, kind)
    text = _incident_text(g, h, inc)
    cover = {"third_party": "third party", "third_party_fire_theft": "third party, fire and theft"}[p["coverage"]]
    return {
        "instruction": f"{g.hello(h)} {text} Please file a claim on policy #{p['id']}.",
        "user": g.user(
            h, f"{g.identity(h)} What happened {said(text)}. You want to claim on policy #{p['id']}; you have {cover} cover and accept a refusal."
        ),
        "gold": [
            find(h),
            call("get_motor_policy", policy_id=p["id"]),
            _note(
                h,
                f"Policyholder asked to claim for {kind} damage on {inc['date']}; refused: {p['coverage']} cover does not pay for it.",
                policy_id=p["id"],
            ),
        ],
        "checks": [claims_check(g, p, 0)],
        "tags": ["claim", "refusal", "not_covered", p["coverage"]],
    }


def t_exotic_vehicle(g: Generator) -> dict:
    p = g.pick_policy(lambda p: len(g.covered(p)) < 3)
    h = g.holder(p)
    make, model, year, value = g.rng.choice(EXOTIC_CARS)
    car = {"registration": g.plate(), "make": make, "model": model, "model_year": year, "vehicle_value": float(value), "usage": "personal"}
    why = f"worth {money(value)}" if value > UNDERWRITING_VALUE else f"built in {year}"
    return {
        "instruction": f"{g.hello(h)} I've just bought {vehicle_text(car)}. Please add it to policy #{p['id']}.",
        "user": g.user(
            h, f"{g.identity(h)} You want your new car added to policy #{p['id']}: {said(vehicle_text(car))}. You accept that someone will follow up."
        ),
        "gold": [
            find(h),
            _refer(
                h,
                "underwriting",
                f"Policyholder wants to add a {year} {make} {model} ({why}) to the policy; needs underwriting acceptance.",
                policy_id=p["id"],
            ),
        ],
        "checks": [{"sql": f"SELECT COUNT(*) FROM insured_vehicles WHERE policy_id = {p['id']}", "expect": [[len(g.vehicles[p["id"]])]]}],
        "tags": ["vehicle", "referral", "underwriting"],
    }


def t_manager_exception(g: Generator) -> dict:
    p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 45) and bool(g.distinct(p)))
    h = g.holder(p)
    inc = _late_incident(g, p)
    text = _incident_text(g, h, inc)
    return {
        "instruction": f"{g.hello(h)} {text} I know it's more than 30 days ago, I was abroad. Please file a claim on policy #{p['id']}, "
        f"and if your rules don't allow it I want a manager to make an exception.",
        "user": g.user(
            h,
            f"{g.identity(h)} What happened {said(text)}. You want a claim on policy #{p['id']}; if refused, you insist on a manager "
            f"deciding an exception.",
        ),
        "gold": [
            find(h),
            call("get_motor_policy", policy_id=p["id"]),
            _refer(
                h,
                "customer_relations",
                f"Policyholder reported a {inc['kind']} from {inc['date']} more than 30 days late and asks a manager for an exception.",
                policy_id=p["id"],
            ),
        ],
        "checks": [claims_check(g, p, 0)],
        "tags": ["claim", "referral", "exception"],
    }


def t_disowned_claim(g: Generator) -> dict:
    p = g.pick_policy(lambda p: p["coverage"] in ("comprehensive", "third_party_fire_theft") and g.ripe(p, 20))
    h = g.holder(p)
    claim, v, _ = _open_claim(g, p, ["theft"] if p["coverage"] != "comprehensive" else ["vandalism", "weather", "theft"], (300, 3000))
    claim["description"] = "Reported by phone: damage to the parked vehicle."
    return {
        "instruction": f"{g.hello(h)} I got a letter about claim #{claim['id']} on my policy, for my {v['make']} {v['model']}. "
        f"I never made that claim and nothing happened to the car! Something is wrong here.",
        "user": g.user(
            h,
            f"{g.identity(h)} Claim #{claim['id']} on your policy was not made by you or anyone you know; the car is fine. You want it looked into.",
        ),
        "patch": Patch().add("motor_claims", claim),
        "gold": [
            find(h),
            call("get_motor_claim", claim_id=claim["id"]),
            _refer(h, "fraud", f"Policyholder says claim #{claim['id']} was not made by them and the vehicle was not damaged.", claim_id=claim["id"]),
        ],
        "checks": [{"sql": f"SELECT status FROM motor_claims WHERE id = {claim['id']}", "expect": [["open"]]}],
        "tags": ["claim", "referral", "fraud"],
    }


# -- needs_user_info -------------------------------------------------------------------------------


def t_add_driver_details(g: Generator) -> dict:
    p = g.pick_policy(lambda p: len(g.active_drivers(p)) < 5)
    h = g.holder(p)
    person = _addable_driver(g, p)
    return {
        "instruction": f"{g.hello(h)} I'd like to add my {g.kin(person)} to my policy #{p['id']}.",
        "user": g.user(
            h, f"{g.identity(h)} You want your {g.kin(person)} added to policy #{p['id']}: {driver_text(person)}.", [f"Sure: {driver_text(person)}."]
        ),
        "gold": [call("add_named_driver", **driver_args(p, person))],
        "tags": ["driver", "endorsement", "ask_details"],
    }


def t_settle_ask_method(g: Generator) -> dict:
    variant = g.cycle("settle_ask_method", ["windscreen", "collision"])
    p, patch, claim, v, amount = _settle_variant(g, variant)
    h = g.holder(p)
    method, phrase = g.method()
    return {
        "instruction": f"{g.hello(h)} Can you settle my claim #{claim['id']} now?",
        "user": g.user(
            h, f"{g.identity(h)} You want claim #{claim['id']} settled; when asked, you want it paid {said(phrase)}.", [f"Pay it {phrase}."]
        ),
        "patch": patch,
        "gold": [find(h), call("get_motor_claim", claim_id=claim["id"]), *_settle(claim, amount, method)],
        "tags": ["claim", "settle", variant, "ask_method"],
    }


def t_file_claim_details(g: Generator) -> dict:
    kind = g.rng.choice(["vandalism", "weather"])
    p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 10) and bool(g.distinct(p)))
    h = g.holder(p)
    inc = _new_incident(g, p, kind)
    v = inc["vehicle"]
    what = {"vandalism": "was vandalised", "weather": "was damaged in a storm"}[kind]
    reply = f"It happened on {long_date(inc['date'])}; the car {inc['told']}. The repair estimate is {money(inc['estimate'])}."
    return {
        "instruction": f"{g.hello(h)} My {v['make']} {v['model']} {what} while it was parked and I want to claim on policy #{p['id']}.",
        "user": g.user(
            h,
            f"{g.identity(h)} You want to claim on policy #{p['id']} for your {v['make']} {v['model']}. When asked, you say {said(reply)}.",
            [reply],
        ),
        "gold": [find(h), call("get_motor_policy", policy_id=p["id"]), _file(inc)],
        "tags": ["claim", "file", kind, "ask_details"],
    }


def t_add_vehicle_details(g: Generator) -> dict:
    p = g.pick_policy(lambda p: len(g.covered(p)) < 3)
    h = g.holder(p)
    car = g.new_car()
    return {
        "instruction": f"{g.hello(h)} I bought another car and want it covered on policy #{p['id']} as well.",
        "user": g.user(
            h,
            f"{g.identity(h)} You want your new car added to policy #{p['id']}; when asked, you say {said('It is ' + vehicle_text(car))}.",
            [f"It's {vehicle_text(car)}."],
        ),
        "gold": [find(h), call("add_insured_vehicle", **vehicle_args(p, car))],
        "tags": ["vehicle", "endorsement", "ask_details", car["usage"]],
    }


# -- collateral_trap -------------------------------------------------------------------------------


def t_file_no_payout(g: Generator) -> dict:
    kind = g.rng.choice(["collision", "vandalism", "weather"])
    p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 10) and bool(g.distinct(p)))
    h = g.holder(p)
    inc = _new_incident(g, p, kind, high=12)
    text = _incident_text(g, h, inc)
    return {
        "instruction": f"{g.hello(h)} {text} Please file a claim on policy #{p['id']} and pay me the {money(inc['estimate'])} "
        f"straight away by bank transfer, the garage wants to start tomorrow.",
        "user": g.user(h, f"{g.identity(h)} What happened {said(text)}. You want a claim on policy #{p['id']} and would like the money immediately."),
        "gold": [find(h), call("get_motor_policy", policy_id=p["id"]), _file(inc)],
        "checks": [
            {"sql": f"SELECT status FROM motor_claims WHERE policy_id = {p['id']} AND reported_on = '{g.today.isoformat()}'", "expect": [["open"]]}
        ],
        "tags": ["claim", "file", "trap", "no_payout"],
    }


def t_remove_one_driver(g: Generator) -> dict:
    p = g.pick_policy(lambda p: len(g.others(p)) >= 2)
    h = g.holder(p)
    gone, stays = g.rng.sample(g.others(p), 2)
    return {
        "instruction": f"{g.hello(h)} {gone['first_name']} {gone['last_name']} and {stays['first_name']} {stays['last_name']} are both "
        f"named on policy #{p['id']}. {gone['first_name']} has moved away, so please remove them. "
        f"{stays['first_name']} is moving out too next month but still borrows my car, so leave them on for now.",
        "user": g.user(
            h,
            f"{g.identity(h)} Remove only {gone['first_name']} {gone['last_name']} from policy #{p['id']}; "
            f"{stays['first_name']} {stays['last_name']} stays on.",
        ),
        "gold": [find(h), call("get_motor_policy", policy_id=p["id"]), call("remove_named_driver", driver_id=gone["id"])],
        "checks": [{"sql": f"SELECT status FROM named_drivers WHERE id = {stays['id']}", "expect": [["active"]]}],
        "tags": ["driver", "trap"],
    }


def t_settle_one_of_two(g: Generator) -> dict:
    p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 25))
    h = g.holder(p)
    claim, v, amount = _open_claim(g, p, ["collision", "vandalism", "weather", "windscreen"], (300, AUTHORITY))
    other, w, _ = _open_claim(g, p, ["vandalism", "weather"], (300, AUTHORITY))
    method, phrase = g.method()
    return {
        "instruction": f"{g.hello(h)} Please settle claim #{claim['id']} and pay it {phrase}. Claim #{other['id']} can wait: "
        f"I'm still getting a second repair quote for that one.",
        "user": g.user(h, f"{g.identity(h)} Settle claim #{claim['id']} only, paid {said(phrase)}; claim #{other['id']} must wait."),
        "patch": Patch().add("motor_claims", claim).add("motor_claims", other),
        "gold": [find(h), call("get_motor_claim", claim_id=claim["id"]), *_settle(claim, amount, method)],
        "checks": [{"sql": f"SELECT status FROM motor_claims WHERE id = {other['id']}", "expect": [["open"]]}],
        "tags": ["claim", "settle", "trap"],
    }


def t_add_vehicle_keep_old(g: Generator) -> dict:
    p = g.pick_policy(lambda p: len(g.covered(p)) < 3 and bool(g.distinct(p)))
    h = g.holder(p)
    old = g.rng.choice(g.distinct(p))
    car = g.new_car()
    return {
        "instruction": f"{g.hello(h)} I've bought {vehicle_text(car)}. Please add it to policy #{p['id']}. I'm selling my old "
        f"{old['make']} {old['model']} next month, but keep it covered until it's sold.",
        "user": g.user(
            h,
            f"{g.identity(h)} Add your new car to policy #{p['id']}: {said(vehicle_text(car))}. "
            f"Your {old['make']} {old['model']} stays covered until it is sold.",
        ),
        "gold": [find(h), call("add_insured_vehicle", **vehicle_args(p, car))],
        "checks": [{"sql": f"SELECT status FROM insured_vehicles WHERE id = {old['id']}", "expect": [["covered"]]}],
        "tags": ["vehicle", "trap"],
    }


# -- multi_step ------------------------------------------------------------------------------------


def t_replace_vehicle(g: Generator) -> dict:
    p = g.pick_policy(lambda p: len(g.covered(p)) == 1)
    h = g.holder(p)
    old = g.covered(p)[0]
    car = g.new_car()
    return {
        "instruction": f"{g.hello(h)} I traded in my {g.car_text(old)} today for {vehicle_text(car)}. Please swap the cars on policy #{p['id']}.",
        "user": g.user(
            h, f"{g.identity(h)} On policy #{p['id']}, replace your {g.car_text(old)} (plate {old['registration']}) with {said(vehicle_text(car))}."
        ),
        "gold": [
            find(h),
            call("get_motor_policy", policy_id=p["id"]),
            call("add_insured_vehicle", **vehicle_args(p, car)),
            call("remove_insured_vehicle", vehicle_id=old["id"]),
        ],
        "tags": ["vehicle", "endorsement", "replace"],
    }


def t_two_claims(g: Generator) -> dict:
    p = g.pick_policy(
        lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 25) and any(v["vehicle_value"] - p["deductible"] >= 7000 for v in g.covered(p))
    )
    h = g.holder(p)
    big_car = g.rng.choice([v for v in g.covered(p) if v["vehicle_value"] - p["deductible"] >= 7000])
    small, v, amount = _open_claim(g, p, ["vandalism", "weather", "windscreen"], (300, 3500))
    big, w, big_amount = _open_claim(g, p, ["collision"], (AUTHORITY + 800, min(14000, big_car["vehicle_value"])), v=big_car)
    method, phrase = g.method()
    return {
        "instruction": f"{g.hello(h)} I have two open claims, #{small['id']} and #{big['id']}. Please settle both and pay {phrase}.",
        "user": g.user(
            h,
            f"{g.identity(h)} You want claims #{small['id']} and #{big['id']} settled and paid {said(phrase)}. "
            f"If one has to go to an adjuster, you accept that.",
        ),
        "patch": Patch().add("motor_claims", small).add("motor_claims", big),
        "gold": [
            find(h),
            call("get_motor_claim", claim_id=small["id"]),
            *_settle(small, amount, method),
            call("get_motor_claim", claim_id=big["id"]),
            _refer(
                h,
                "claims_adjuster",
                f"Claim #{big['id']}: payable amount {money(big_amount)} is above the $5,000 desk authority.",
                claim_id=big["id"],
            ),
        ],
        "checks": [{"sql": f"SELECT status FROM motor_claims WHERE id = {big['id']}", "expect": [["open"]]}],
        "tags": ["claim", "settle", "referral"],
    }


def t_household_requests(g: Generator) -> dict:
    """Four requests in one call: two allowed writes, one referral, one payout; none shares a table with another."""
    p = g.pick_policy(
        lambda p: (
            p["coverage"] == "comprehensive"
            and g.ripe(p, 40)
            and len(g.active_drivers(p)) < 5
            and bool(g.distinct(p))
            and g.age(g.holder(p)["date_of_birth"]) >= 44
        )
    )
    h = g.holder(p)
    approved, v, amount = _open_claim(g, p, ["collision", "windscreen"], (300, AUTHORITY), low=25, high=40)
    approved.update(status="approved", approved_amount=amount, decided_on=g.ago(g.rng.randint(3, 8)).isoformat())
    inc = _new_incident(g, p, g.rng.choice(["vandalism", "weather"]), low=2, high=12)
    adult = g.person(g.rng.choice(["spouse", "partner"]), h)
    teen = g.person("child", h, age=g.rng.randint(18, 19))
    method, phrase = g.method()
    text = _incident_text(g, h, inc)
    return {
        "instruction": f"{g.hello(h)} A few things on policy #{p['id']}. Please add my {g.kin(adult)} as a driver: {driver_text(adult)}. "
        f"And my {g.kin(teen)} too: {driver_text(teen)}. "
        f"Also, {text[0].lower()}{text[1:]} I want to claim for that. "
        f"Last thing: claim #{approved['id']} was approved but not paid yet; please pay it {phrase}.",
        "user": g.user(
            h,
            f"{g.identity(h)} On policy #{p['id']}: add your {g.kin(adult)} ({driver_text(adult)}) and your {g.kin(teen)} "
            f"({driver_text(teen)}); claim for the {inc['kind']} damage on {long_date(inc['date'])} "
            f"(estimate {money(inc['estimate'])}); have approved claim #{approved['id']} paid {said(phrase)}. "
            f"If something must go to another team, you accept that.",
        ),
        "patch": Patch().add("motor_claims", approved),
        "gold": [
            find(h),
            call("get_policyholder", policyholder_id=h["id"]),
            call("get_motor_policy", policy_id=p["id"]),
            call("add_named_driver", **driver_args(p, adult)),
            _refer(
                h,
                "underwriting",
                f"Policyholder asks to add their {g.kin(teen)} {teen['first']} {teen['last']} "
                f"(born {teen['dob']}, age {g.age(teen['dob'])}); needs underwriting acceptance.",
                policy_id=p["id"],
            ),
            _file(inc),
            call("get_motor_claim", claim_id=approved["id"]),
            call("pay_motor_claim", claim_id=approved["id"], method=method),
        ],
        "tags": ["driver", "referral", "claim", "payout"],
    }


def t_writeoff_and_remove(g: Generator) -> dict:
    p = g.pick_policy(lambda p: p["coverage"] == "comprehensive" and g.ripe(p, 20) and len(g.covered(p)) >= 2 and bool(g.cheap(p, g.distinct(p))))
    h = g.holder(p)
    patch = Patch()
    claim, v, _ = _open_claim(g, p, ["collision"], (100, AUTHORITY), v=g.rng.choice(g.cheap(p, g.distinct(p))))
    claim["estimated_damage"] = float(round(v["vehicle_value"] * g.rng.uniform(1.2, 1.7) / 10) * 10)
    claim["description"] = "Collision; repairs would cost more than the car is worth (write-off)."
    amount = g.payable(p, v, "collision", claim["estimated_damage"])
    patch.add("motor_claims", claim)
    method, phrase = g.method()
    if method == "repairer":  # nobody repairs a write-off
        method, phrase = "bank_transfer", METHODS["bank_transfer"][0]
    return {
        "instruction": f"{g.hello(h)} My {v['make']} {v['model']} was written off in the accident of claim #{claim['id']}. "
        f"Please settle the claim, paid {phrase}, and then take the car off policy #{p['id']}.",
        "user": g.user(
            h,
            f"{g.identity(h)} Claim #{claim['id']} (your written-off {v['make']} {v['model']}) should be settled and paid "
            f"{said(phrase)}; then the car comes off policy #{p['id']}.",
        ),
        "patch": patch,
        "gold": [
            find(h),
            call("get_motor_claim", claim_id=claim["id"]),
            *_settle(claim, amount, method),
            call("get_motor_policy", policy_id=p["id"]),
            call("remove_insured_vehicle", vehicle_id=v["id"]),
        ],
        "tags": ["claim", "settle", "vehicle", "write_off"],
    }


# (family, template function, number of tasks)
TEMPLATES: list[tuple[str, Callable[[Generator], dict], int]] = [
    ("single_write", t_add_driver, 4),
    ("single_write", t_change_cover, 3),
    ("single_write", t_pay_approved_claim, 3),
    ("lookup_then_act", t_remove_driver, 3),
    ("lookup_then_act", t_file_claim, 4),
    ("lookup_then_act", t_settle_claim, 5),
    ("lookup_then_act", t_remove_vehicle, 2),
    ("policy_refusal", t_young_driver, 2),
    ("policy_refusal", t_late_claim, 2),
    ("policy_refusal", t_claim_over_authority, 2),
    ("policy_refusal", t_deny_claim, 3),
    ("policy_refusal", t_not_policyholder, 2),
    ("policy_refusal", t_uncovered_claim, 2),
    ("policy_refusal", t_exotic_vehicle, 2),
    ("policy_refusal", t_manager_exception, 2),
    ("policy_refusal", t_disowned_claim, 2),
    ("needs_user_info", t_add_driver_details, 2),
    ("needs_user_info", t_settle_ask_method, 2),
    ("needs_user_info", t_file_claim_details, 2),
    ("needs_user_info", t_add_vehicle_details, 2),
    ("collateral_trap", t_file_no_payout, 3),
    ("collateral_trap", t_remove_one_driver, 2),
    ("collateral_trap", t_settle_one_of_two, 2),
    ("collateral_trap", t_add_vehicle_keep_old, 2),
    ("multi_step", t_replace_vehicle, 3),
    ("multi_step", t_two_claims, 2),
    ("multi_step", t_household_requests, 2),
    ("multi_step", t_writeoff_and_remove, 2),
]


def generate(world: dict[str, list[dict]], today: dt.date, rng: random.Random) -> list[dict]:
    """All insurance tasks, in template order, ids `insurance-<template>-<nnn>`."""
    return _kit.generate(HERE, TEMPLATES, Generator(world, today, rng))
