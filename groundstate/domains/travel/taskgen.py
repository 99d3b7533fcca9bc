"""Task generator for the travel domain: templates × entities sampled from the seed world.

`generate(world, today, rng)` is deterministic: the same world, date and rng give the same tasks, in
the same order, with the same ids. `world` is the seed (`seed.generate(Random(<domain seed>))`) and
is never modified; each task sets up its situation with a `patch` (rows upserted on top of the seed:
partial rows update, full rows insert).

Each template picks "clean" bookings (confirmed, nothing flown, paid by one card charge; no credit,
mileage entry, note or escalation points at them) and *restates* them: their segments are moved to
fresh flights that the patch inserts on the same route, with exactly the dates, delays, status and
fares the situation needs. Nothing else in the world refers to those flights, so rewriting them
cannot contradict other rows. Templates prefer travellers no other task has used yet, so tasks
spread across the world.

The policy numbers come from seed.py (compensation table, limits) and the system rules from tools.py
(prices, miles, credit codes), so the gold solutions follow the same rules as the agent's tools.

The task file is written by `groundstate tasks generate --domain travel` (tasks/travel.yaml).
"""

from __future__ import annotations

import datetime as dt
import functools
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groundstate.domains import _kit
from groundstate.domains._kit import WorldIndex, call, cap, cents, dollars, group_by, long_date, money, rubric, said

HERE = Path(__file__).resolve().parent

ELITE = ("gold", "platinum")

CANCEL_PHRASES = {
    "change_of_plans": ["my plans have changed", "the trip has been called off", "the conference I was going to was cancelled"],
    "illness": ["I'm ill and my doctor says I shouldn't fly", "I broke my ankle and can't travel", "I have to have surgery that week"],
    "other": ["my passport won't be renewed in time", "my visa application was refused", "I've been called for jury duty that week"],
}
SETTLEMENT_PHRASES = {
    "refund": ["I'd like the money back on my card.", "Please refund it to my card.", "A refund to my card, please."],
    "travel_credit": ["A travel credit is fine for me.", "Just give me a travel credit, I'll fly with you again.", "I'll take a travel credit."],
}
# Why a traveller wants a seat, by the kind of seat it is (A and F are windows; C and D aisles; B and E middles).
SEAT_WISHES = {
    "window": ["I like a window seat", "I want to look out of the window", "I sleep better against the window"],
    "aisle": ["I need an aisle seat, I get up a lot", "I like the aisle for the legroom", "I prefer the aisle"],
    "middle": ["my partner has the seat next to it", "my colleague sits right next to it", "I'm travelling with a friend in the next seat"],
}
UPGRADE_STEPS = {"economy": ["premium", "business"], "premium": ["business"]}


def delay_text(minutes: int) -> str:
    h, m = divmod(minutes, 60)
    if h == 0:
        return f"{m} minutes"
    hours = f"{h} hour" + ("" if h == 1 else "s")
    return hours if m == 0 else f"{hours} and {m} minutes"


class Patch(_kit.Patch):
    """Rows to upsert for one task; the templates write them with `set`, so rows with the same id merge."""

    order = _kit.table_order(HERE)


class Leg:
    """One restated segment: the seed segment row and the fresh flight it now points at.

    A plain class rather than a dataclass: this file is loaded by path, outside `sys.modules`.
    """

    def __init__(self, segment: dict[str, Any], flight: dict[str, Any], cabin: str, fare_paid: float, seat: str | None, status: str):
        self.segment, self.flight, self.cabin, self.fare_paid, self.seat = segment, flight, cabin, fare_paid, seat
        self.status = status  # active | flown

    @property
    def id(self) -> int:
        return self.segment["id"]


class Generator(WorldIndex):
    """Indexes over the seed world plus the sampling, patching and phrasing helpers the templates share."""

    def __init__(self, world: dict[str, list[dict]], today: dt.date, rng: random.Random):
        super().__init__(world, today, rng)
        self.seed = _kit.sibling(HERE, "seed")
        self.rules = self.seed.RULES  # tools.py, as loaded by the seed
        self.travellers = {t["id"]: t for t in world["travellers"]}
        self.flights = {f["id"]: f for f in world["flights"]}
        self.bookings = {b["id"]: b for b in world["bookings"]}
        self.segments = group_by(world["flight_segments"], "booking_id")
        self.payments = group_by(world["fare_payments"], "booking_id")
        self.flight_days = {(f["flight_number"], f["departs_on"]) for f in world["flights"]}

        referenced = {c["booking_id"] for c in world["travel_credits"] if c["booking_id"] is not None}
        referenced |= {n["booking_id"] for n in world["travel_notes"] if n["booking_id"] is not None}
        referenced |= {e["booking_id"] for e in world["travel_escalations"] if e["booking_id"] is not None}
        seg_booking = {s["id"]: s["booking_id"] for s in world["flight_segments"]}
        referenced |= {seg_booking[e["segment_id"]] for e in world["mileage_entries"] if e["segment_id"] is not None}
        self.clean = [
            b
            for b in world["bookings"]
            if b["status"] == "confirmed"
            and b["id"] not in referenced
            and all(s["status"] == "active" for s in self.segments[b["id"]])
            and [(p["kind"], p["method"]) for p in self.payments[b["id"]]] == [("charge", "card")]
        ]
        # Travellers whose credits cannot be confused with one a task adds (none active or expired with a balance).
        live = {c["traveller_id"] for c in world["travel_credits"] if c["balance"] > 0}
        self.no_credit = {t for t in self.travellers if t not in live}
        self.used_bookings: set[int] = set()
        self.used_travellers: set[int] = set()

    # -- sampling ---------------------------------------------------------------------------------
    def trip(self, b: dict) -> str:
        return "round_trip" if len(self.segments[b["id"]]) == 2 else "one_way"

    def pick_booking(self, ok: Callable[[dict], bool] = lambda b: True, trip: str | None = None) -> dict:
        """A clean, unused booking satisfying `ok` (and of trip type `trip`), preferring travellers no task has used yet."""
        pool = [b for b in self.clean if b["id"] not in self.used_bookings and (trip is None or self.trip(b) == trip) and ok(b)]
        b = self.draw(pool, "clean booking", lambda b: b["traveller_id"] not in self.used_travellers)
        self.claim(b)
        return b

    def pick_bookings_of_one_traveller(self, k: int, ok: Callable[[dict], bool] = lambda b: True) -> list[dict]:
        """k clean, unused bookings of one traveller, all satisfying `ok`."""
        pool = [b for b in self.clean if b["id"] not in self.used_bookings and ok(b)]
        chosen = self.draw_group(pool, "traveller_id", k, "traveller", lambda t: t not in self.used_travellers)
        for b in chosen:
            self.claim(b)
        return chosen

    def pick_traveller(self, ok: Callable[[dict], bool]) -> dict:
        t = self.draw([t for t in self.world["travellers"] if t["id"] not in self.used_travellers and ok(t)], "unused traveller")
        self.used_travellers.add(t["id"])
        return t

    def claim(self, b: dict) -> None:
        self.used_bookings.add(b["id"])
        self.used_travellers.add(b["traveller_id"])

    # -- world facts --------------------------------------------------------------------------------
    def traveller(self, b: dict) -> dict:
        return self.travellers[b["traveller_id"]]

    def route(self, b: dict) -> tuple[str, str]:
        f = self.flights[self.segments[b["id"]][0]["flight_id"]]
        return f["origin"], f["destination"]

    def distance(self, b: dict) -> int:
        return self.seed.distance(*self.route(b))

    @staticmethod
    def city(code: str) -> str:
        return _load_cities()[code]

    def current(self, patch: Patch, table: str, row: dict, col: str) -> Any:
        """A column's value once the patch is applied."""
        patched = patch.get(table, row["id"])
        return patched[col] if patched is not None and col in patched else row[col]

    # -- patches ------------------------------------------------------------------------------------
    def new_flight(self, patch: Patch, like: dict, lo: int, hi: int, *, status: str | None = None, delay: int | None = None) -> dict:
        """Insert a flight on `like`'s route (same number and time) on a free day `lo`..`hi` days from today."""
        days = list(range(lo, hi + 1))
        self.rng.shuffle(days)
        for off in days:
            day = (self.today + dt.timedelta(days=off)).isoformat()
            if (like["flight_number"], day) not in self.flight_days:
                break
        else:
            raise RuntimeError(f"no free day for {like['flight_number']} between {lo} and {hi}")
        self.flight_days.add((like["flight_number"], day))
        f = self.seed.flight_row(
            self.rng,
            self.new_id("flights"),
            like["flight_number"],
            like["origin"],
            like["destination"],
            dt.date.fromisoformat(day),
            like["departs_at"],
        )
        if off < 0:
            f.update(status=status or "landed", delay_minutes=self.rng.randint(0, 40) if delay is None else delay)
        else:
            f.update(
                status=status or "scheduled",
                delay_minutes=0,
                seats_economy=max(f["seats_economy"], 6),
                seats_premium=max(f["seats_premium"], 3),
                seats_business=max(f["seats_business"], 2),
            )
        return patch.set("flights", f)

    def restate(
        self,
        b: dict,
        patch: Patch,
        *,
        fare_class: str,
        cabin: str,
        days: list[tuple[int, int]],
        delays: list[int | None] | None = None,
        statuses: list[str | None] | None = None,
        drift: list[float] | None = None,
        seated: bool = False,
        accrue: bool = True,
    ) -> list[Leg]:
        """Move booking `b` onto fresh flights `days[i]` = (lo, hi) days from today (negative: flown), in `cabin` and `fare_class`.

        Returns the legs in order. Flown legs earn their miles (ledger entries in the patch) unless `accrue` is false;
        upcoming legs get a seat when `seated`. The booking's single card charge is set to the new total.
        """
        legs: list[Leg] = []
        prev = None
        for i, seg in enumerate(self.segments[b["id"]]):
            lo, hi = days[i]
            if prev is not None:  # the return leaves at least two days after the outbound
                lo = max(lo, (dt.date.fromisoformat(prev["departs_on"]) - self.today).days + 2)
                hi = max(hi, lo)
            like = self.flights[seg["flight_id"]]
            f = self.new_flight(patch, like, lo, hi, status=(statuses or [None, None])[i], delay=(delays or [None, None])[i])
            prev = f
            factor = (drift or [self.rng.choice([0.9, 1.0, 1.0, 1.1])] * 2)[i]
            paid = dollars(cents(self.rules.fare_for(f, cabin, fare_class) * factor))
            flown = f["departs_on"] < self.today.isoformat()
            seat = self.seat(cabin) if seated and not flown else None
            legs.append(Leg(seg, f, cabin, paid, seat, "flown" if flown else "active"))
            patch.set(
                "flight_segments",
                {"id": seg["id"], "flight_id": f["id"], "cabin": cabin, "fare_paid": paid, "seat": seat, "status": "flown" if flown else "active"},
            )
        first = dt.date.fromisoformat(legs[0].flight["departs_on"])
        booked = min(first - dt.timedelta(days=self.rng.randint(5, 60)), self.today - dt.timedelta(days=self.rng.randint(0, 10)))
        patch.set(
            "bookings",
            {
                "id": b["id"],
                "fare_class": fare_class,
                "booked_on": booked.isoformat(),
                "status": "completed" if all(leg.status == "flown" for leg in legs) else "confirmed",
            },
        )
        pay = self.payments[b["id"]][0]
        patch.set("fare_payments", {"id": pay["id"], "amount": dollars(sum(cents(leg.fare_paid) for leg in legs)), "posted_on": booked.isoformat()})
        if accrue:
            t = self.traveller(b)
            for leg in legs:
                if leg.status == "flown":
                    miles = self.rules.accrual_miles(leg.flight["distance_miles"], cabin, fare_class, self.current(patch, "travellers", t, "tier"))
                    self.add_miles(patch, t, miles, "flight_accrual", leg.id, leg.flight["departs_on"], days_after=2)
        return legs

    def reprice(self, flight: dict, like: dict, factor: float) -> None:
        """Set `flight`'s fares to `like`'s times `factor`, as airline prices (x.99)."""
        for c in self.rules.CABINS:
            flight[f"fare_{c}"] = self.seed.airline_price(like[f"fare_{c}"] * factor)

    def add_miles(self, patch: Patch, t: dict, miles: int, kind: str, segment_id: int | None, on: str, days_after: int = 0) -> None:
        """A ledger entry and the matching balance change, so the ledger keeps explaining the balance."""
        posted = min(dt.date.fromisoformat(on) + dt.timedelta(days=days_after), self.today).isoformat()
        patch.set(
            "mileage_entries",
            {
                "id": self.new_id("mileage_entries"),
                "traveller_id": t["id"],
                "segment_id": segment_id,
                "kind": kind,
                "miles": miles,
                "posted_on": posted,
            },
        )
        patch.set("travellers", {"id": t["id"], "miles_balance": self.current(patch, "travellers", t, "miles_balance") + miles})

    def set_miles(self, patch: Patch, t: dict, balance: int) -> None:
        """Bring a traveller's balance to exactly `balance` with a partner bonus or an award redemption some weeks ago."""
        delta = balance - self.current(patch, "travellers", t, "miles_balance")
        if delta:
            on = (self.today - dt.timedelta(days=self.rng.randint(20, 90))).isoformat()
            self.add_miles(patch, t, delta, "partner_bonus" if delta > 0 else "award_redemption", None, on)

    def new_credit(self, patch: Patch, t: dict, *, amount: float, expires_in: int, reason: str = "goodwill") -> dict:
        """Insert a travel credit of traveller `t` (not tied to a booking) expiring `expires_in` days from today."""
        cid = self.new_id("travel_credits")
        expires = self.today + dt.timedelta(days=expires_in)
        return patch.set(
            "travel_credits",
            {
                "id": cid,
                "code": self.rules.credit_code(cid),
                "traveller_id": t["id"],
                "booking_id": None,
                "reason": reason,
                "amount": amount,
                "balance": amount,
                "issued_on": (expires - dt.timedelta(days=self.rules.CREDIT_VALID_DAYS)).isoformat(),
                "expires_on": expires.isoformat(),
                "status": "active" if expires_in >= 0 else "expired",
                "extended": 0,
            },
        )

    def seat(self, cabin: str, taken: set[str] = frozenset()) -> str:
        """A seat of `cabin`, never in an exit row (those have their own template)."""
        rows, letters = self.rules.SEAT_MAP[cabin]
        while True:
            row = self.rng.choice([r for r in rows if r not in self.rules.EXIT_ROWS])
            seat = f"{row}{self.rng.choice(letters)}"
            if seat not in taken:
                return seat

    # -- phrasing -----------------------------------------------------------------------------------
    def hello(self, t: dict) -> str:
        """An opening that identifies the traveller by name and email."""
        name = f"{t['first_name']} {t['last_name']}"
        return self.opening(f"this is {name} ({t['email']}).", f"I'm {name}, my email is {t['email']}.", f"my email is {t['email']}.")

    def user(self, t: dict, context: str, first: list[str] | None = None) -> dict:
        """The simulated traveller: persona, the facts they know, and scripted replies."""
        who = f"{t['first_name']} {t['last_name']}, a {t['tier']}-tier Meridian Miles member"
        return self.simulated_user(who, f"Your email is {t['email']}. {context}", first)

    def flight_text(self, leg: Leg) -> str:
        f = leg.flight
        return f"flight {f['flight_number']} from {self.city(f['origin'])} to {self.city(f['destination'])} on {long_date(f['departs_on'])}"

    def cancel_reason(self) -> tuple[str, str]:
        reason = self.rng.choice(sorted(CANCEL_PHRASES))
        return reason, self.rng.choice(CANCEL_PHRASES[reason])

    def settlement(self, choices: tuple[str, ...] = ("refund", "travel_credit")) -> tuple[str, str]:
        s = self.rng.choice(choices)
        return s, self.rng.choice(SETTLEMENT_PHRASES[s])


@functools.cache
def _load_cities() -> dict[str, str]:
    return {code: city for code, (city, _, _) in _kit.sibling(HERE, "seed").AIRPORTS.items()}


def credits_of_booking(booking_id: int) -> str:
    return f"SELECT COUNT(*) FROM travel_credits WHERE booking_id = {booking_id}"


def booking_state(booking_id: int) -> str:
    return f"SELECT status, cancel_reason FROM bookings WHERE id = {booking_id}"


# ================================================================================================
# Templates. Each returns one task (without id): instruction, user, patch, gold, optional checks.
# ================================================================================================

# -- single_write --------------------------------------------------------------------------------

CANCEL_CASES = ["flex", "standard_refund", "standard_credit_late", "basic_credit", "airline"]


def t_cancel_trip(g: Generator) -> dict:
    case = CANCEL_CASES[g.nth("cancel_trip") % len(CANCEL_CASES)]
    # Basic fares lose the $100 fee: a long or round trip keeps something to credit.
    b = g.pick_booking(lambda b: case != "basic_credit" or g.trip(b) == "round_trip" and g.distance(b) >= 700)
    t = g.traveller(b)
    patch = Patch()
    fare = {"flex": "flex", "standard_refund": "standard", "standard_credit_late": "standard", "basic_credit": "basic"}.get(
        case, g.rng.choice(["basic", "standard", "flex"])
    )
    lo, hi = {"standard_refund": (15, 70), "standard_credit_late": (2, 13), "basic_credit": (15, 70)}.get(case, (3, 60))
    legs = g.restate(
        b,
        patch,
        fare_class=fare,
        cabin=g.rng.choice(["economy", "economy", "premium"]),
        days=[(lo, hi), (lo + 3, hi + 20)],
        statuses=["cancelled", None] if case == "airline" else None,
        seated=True,
    )
    if case == "airline":
        settlement, s_phrase = g.settlement()
        reason = "flight_cancelled"
        text = (
            f"I got a message that my {g.flight_text(legs[0])} was cancelled by you. I don't want to rebook: "
            f"please cancel booking {b['locator']}. {s_phrase}"
        )
    else:
        reason, phrase = g.cancel_reason()
        settlement, s_phrase = {
            "flex": g.settlement(),
            "standard_refund": ("refund", "I'd like my money back on my card; I know there's a fee."),
            "standard_credit_late": ("travel_credit", "A travel credit is fine."),
            "basic_credit": ("travel_credit", "I know it's a basic fare, so a travel credit minus the fee is fine."),
        }[case]
        text = f"Please cancel my booking {b['locator']}: {phrase}. {s_phrase}"
    return {
        "instruction": f"{g.hello(t)} {text}",
        "user": g.user(t, f"You want booking {b['locator']} cancelled {said(s_phrase)}."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("cancel_booking", locator=b["locator"], reason=reason, settlement=settlement),
        ],
        "checks": [{"sql": booking_state(b["id"]), "expect": [["cancelled", reason]]}],
        "tags": ["cancel", fare, case, settlement],
    }


def t_assign_seat(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    cabin = g.rng.choice(["economy", "economy", "premium", "business"])
    legs = g.restate(
        b, patch, fare_class=g.rng.choice(["basic", "standard", "flex"]), cabin=cabin, days=[(2, 50), (5, 70)], seated=g.rng.random() < 0.5
    )
    leg = g.rng.choice(legs)
    seat = g.seat(cabin, {leg.seat} if leg.seat else set())
    kind = "window" if seat[-1] in "AF" else "aisle" if seat[-1] in "CD" else "middle"
    why = g.rng.choice(SEAT_WISHES[kind])
    return {
        "instruction": f"{g.hello(t)} On booking {b['locator']}, could I have seat {seat} on my {g.flight_text(leg)}? {cap(why)}.",
        "user": g.user(t, f"On booking {b['locator']} you want seat {seat} on your {g.flight_text(leg)}; nothing else."),
        "patch": patch,
        "gold": [call("get_booking", locator=b["locator"]), call("assign_seat", segment_id=leg.id, seat=seat)],
        "checks": [{"sql": f"SELECT seat FROM flight_segments WHERE id = {leg.id}", "expect": [[seat]]}],
        "tags": ["seat", cabin],
    }


def t_missing_miles(g: Generator) -> dict:
    b = g.pick_booking(lambda b: g.distance(b) >= 500)
    t = g.traveller(b)
    patch = Patch()
    fare, cabin = g.rng.choice(["basic", "standard", "flex"]), g.rng.choice(["economy", "economy", "premium", "business"])
    legs = g.restate(b, patch, fare_class=fare, cabin=cabin, days=[(-150, -20), (-140, -3)], accrue=False)
    leg = g.rng.choice(legs)
    for other in legs:  # the other flight of the trip did earn its miles
        if other is not leg:
            g.add_miles(
                patch,
                t,
                g.rules.accrual_miles(other.flight["distance_miles"], cabin, fare, t["tier"]),
                "flight_accrual",
                other.id,
                other.flight["departs_on"],
                days_after=2,
            )
    miles = g.rules.accrual_miles(leg.flight["distance_miles"], cabin, fare, t["tier"])
    before = g.current(patch, "travellers", t, "miles_balance")
    return {
        "instruction": f"{g.hello(t)} The miles for my {g.flight_text(leg)} (booking {b['locator']}) never showed up in my Meridian Miles account.",
        "user": g.user(t, f"Your {g.flight_text(leg)} on booking {b['locator']} did not earn its miles; you want them credited."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("credit_missing_miles", segment_id=leg.id),
        ],
        "checks": [{"sql": f"SELECT miles_balance FROM travellers WHERE id = {t['id']}", "expect": [[before + miles]]}],
        "tags": ["miles", "missing_miles", cabin],
    }


def t_downgrade(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    cabin = g.rng.choice(["premium", "business"])
    new = g.rng.choice([c for c in ("economy", "premium") if g.rules.CABINS.index(c) < g.rules.CABINS.index(cabin)])
    legs = g.restate(b, patch, fare_class=g.rng.choice(["standard", "flex"]), cabin=cabin, days=[(4, 60), (8, 75)], drift=[1.0, 1.0])
    leg = g.rng.choice(legs)
    return {
        "instruction": f"{g.hello(t)} On booking {b['locator']}, please move me from {cabin} to {new} on my {g.flight_text(leg)}. "
        f"I don't need the extra space on that one.",
        "user": g.user(
            t, f"On booking {b['locator']} you want your {g.flight_text(leg)} moved from {cabin} to {new}; the other flight stays as it is."
        ),
        "patch": patch,
        "gold": [call("get_booking", locator=b["locator"]), call("downgrade_cabin", segment_id=leg.id, cabin=new)],
        "checks": [{"sql": f"SELECT cabin FROM flight_segments WHERE id = {leg.id}", "expect": [[new]]}],
        "tags": ["cabin", "downgrade", f"{cabin}->{new}"],
    }


# -- lookup_then_act -------------------------------------------------------------------------------


def _change_setup(g: Generator, b: dict, patch: Patch, fare: str, *, cheaper: bool = False) -> tuple[list[Leg], Leg, dict]:
    """Restate `b` in the future and insert the flight the traveller wants instead: (legs, the leg to move, the new flight).

    With `cheaper`, the new flight clearly costs less than what was paid (the difference is never given back).
    """
    cabin = g.rng.choice(["economy", "economy", "premium"])
    legs = g.restate(b, patch, fare_class=fare, cabin=cabin, days=[(12, 45), (25, 60)], drift=[1.25, 1.25] if cheaper else None, seated=True)
    leg = g.rng.choice(legs)
    if len(legs) == 1:
        lo, hi = 3, 90
    elif leg.segment["seq"] == 1:  # stay before the return
        lo, hi = 3, (dt.date.fromisoformat(legs[1].flight["departs_on"]) - g.today).days - 1
    else:  # stay after the outbound
        lo, hi = (dt.date.fromisoformat(legs[0].flight["departs_on"]) - g.today).days + 1, 100
    new = g.new_flight(patch, leg.flight, lo, hi)  # never the leg's own day: new_flight skips days the number already flies
    if cheaper:  # unambiguous whatever the random fares: 0.8x today's price against 1.25x paid
        g.reprice(new, leg.flight, 0.8)
    return legs, leg, new


def _change_call(g: Generator, t: dict, fare: str, leg: Leg, new: dict, **extra: Any) -> dict:
    # The fee is waived exactly for gold and platinum members on standard fares (flex has none to waive).
    return call("change_flight", segment_id=leg.id, new_flight_id=new["id"], waive_fee=fare == "standard" and t["tier"] in ELITE, **extra)


def t_change_date(g: Generator) -> dict:
    elite = g.nth("change_date") % 2 == 0
    b = g.pick_booking(lambda b: (g.traveller(b)["tier"] in ELITE) == elite)
    t = g.traveller(b)
    patch = Patch()
    fare = g.rng.choice(["standard", "standard", "flex"])
    legs, leg, new = _change_setup(g, b, patch, fare)
    return {
        "instruction": f"{g.hello(t)} On booking {b['locator']} I need to move my {g.flight_text(leg)} to {long_date(new['departs_on'])}. "
        f"Same flight number is fine.",
        "user": g.user(
            t,
            f"You want your {g.flight_text(leg)} (booking {b['locator']}) moved to {long_date(new['departs_on'])}; "
            f"you accept the change fee and any fare difference.",
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("search_flights", origin=leg.flight["origin"], destination=leg.flight["destination"], departs_on=new["departs_on"]),
            _change_call(g, t, fare, leg, new),
        ],
        "checks": [{"sql": f"SELECT flight_id FROM flight_segments WHERE id = {leg.id}", "expect": [[new["id"]]]}],
        "tags": ["change", fare, f"tier:{t['tier']}"],
    }


def t_delay_compensation(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    cabin = g.rng.choice(["economy", "economy", "premium", "business"])
    # Within the agent's limit: economy 3-6h ($100) or 6h+ ($200); premium/business 3-6h ($200).
    delay = g.rng.randint(180, 359) if cabin != "economy" or g.rng.random() < 0.5 else g.rng.randint(360, 540)
    late = g.rng.randrange(len(g.segments[b["id"]]))
    delays = [g.rng.randint(0, 45), g.rng.randint(0, 45)]
    delays[late] = delay
    legs = g.restate(b, patch, fare_class=g.rng.choice(["basic", "standard", "flex"]), cabin=cabin, days=[(-60, -10), (-55, -2)], delays=delays)
    amount = g.seed.delay_compensation(delay, cabin)
    assert 0 < amount <= g.seed.AGENT_COMPENSATION_LIMIT
    leg = legs[late]
    return {
        "instruction": f"{g.hello(t)} My {g.flight_text(leg)} (booking {b['locator']}) arrived {delay_text(delay)} late. "
        f"Is there any compensation for that?",
        "user": g.user(
            t, f"Your {g.flight_text(leg)} on booking {b['locator']} arrived {delay_text(delay)} late; you ask what compensation you get."
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("issue_travel_credit", traveller_id=t["id"], locator=b["locator"], amount=amount, reason="delay_compensation"),
        ],
        "checks": [{"sql": f"SELECT amount, reason FROM travel_credits WHERE booking_id = {b['id']}", "expect": [[amount, "delay_compensation"]]}],
        "rubrics": [rubric("Does the reply tell the traveller the amount of the travel credit, {}?", money(amount))],
        "gold_reply": f"For a delay of {delay_text(delay)} you are entitled to compensation: I have issued you a travel credit of {money(amount)}.",
        "tags": ["compensation", "delay", cabin],
    }


def t_extend_credit(g: Generator) -> dict:
    t = g.pick_traveller(lambda t: t["tier"] in ELITE and t["id"] in g.no_credit)
    patch = Patch()
    expired = g.nth("extend_credit") % 2 == 1
    c = g.new_credit(
        patch, t, amount=float(g.rng.choice([75, 100, 150, 200, 250])), expires_in=-g.rng.randint(1, 25) if expired else g.rng.randint(3, 40)
    )
    new = (dt.date.fromisoformat(c["expires_on"]) + dt.timedelta(days=g.seed.CREDIT_EXTENSION_DAYS)).isoformat()
    when = f"expired on {long_date(c['expires_on'])}" if expired else f"expires on {long_date(c['expires_on'])}"
    return {
        "instruction": f"{g.hello(t)} My Meridian travel credit {when} and I haven't had a chance to use it. Could you extend it?",
        "user": g.user(t, f"Your {money(c['amount'])} travel credit {when}; you would like it extended. You don't know its code by heart."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_traveller_profile", traveller_id=t["id"]),
            call("extend_travel_credit", code=c["code"], new_expires_on=new),
        ],
        "checks": [{"sql": f"SELECT expires_on, extended, status FROM travel_credits WHERE id = {c['id']}", "expect": [[new, 1, "active"]]}],
        "tags": ["credit", "extension", "expired" if expired else "active", f"tier:{t['tier']}"],
    }


def _upgrade_setup(g: Generator, b: dict, patch: Patch, pay_with: str, cabin: str | None = None) -> tuple[list[Leg], Leg, str]:
    cabin = cabin or g.rng.choice(["economy", "economy", "premium"])
    legs = g.restate(b, patch, fare_class=g.rng.choice(["standard", "flex"]), cabin=cabin, days=[(3, 50), (6, 70)], seated=True)
    leg = g.rng.choice(legs)
    new = g.rng.choice(UPGRADE_STEPS[cabin])
    if pay_with == "miles":  # enough miles for this upgrade, whatever the traveller had
        t = g.traveller(b)
        cost = g.rules.UPGRADE_MILES[(cabin, new)]
        if g.current(patch, "travellers", t, "miles_balance") < cost:
            g.set_miles(patch, t, cost + g.rng.randint(1, 60) * 500)
    return legs, leg, new


def t_upgrade(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    pay_with = ("card", "miles")[g.nth("upgrade") % 2]
    legs, leg, new = _upgrade_setup(g, b, patch, pay_with)
    how = "I'll pay the difference by card" if pay_with == "card" else "using my Meridian Miles"
    return {
        "instruction": f"{g.hello(t)} I'd like to upgrade to {new} on my {g.flight_text(leg)} (booking {b['locator']}), {how}.",
        "user": g.user(t, f"You want your {g.flight_text(leg)} on booking {b['locator']} upgraded to {new}, {how}."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("upgrade_cabin", segment_id=leg.id, cabin=new, pay_with=pay_with),
        ],
        "checks": [{"sql": f"SELECT cabin FROM flight_segments WHERE id = {leg.id}", "expect": [[new]]}],
        "tags": ["cabin", "upgrade", pay_with],
    }


def t_change_with_credit(g: Generator) -> dict:
    # Standard fare, non-elite traveller: the $75 fee is always due, so the credit is always used.
    b = g.pick_booking(lambda b: g.traveller(b)["tier"] not in ELITE and g.traveller(b)["id"] in g.no_credit)
    t = g.traveller(b)
    patch = Patch()
    legs, leg, new = _change_setup(g, b, patch, "standard")
    c = g.new_credit(
        patch,
        t,
        amount=float(g.rng.choice([50, 100, 150, 300])),
        expires_in=g.rng.randint(60, 300),
        reason=g.rng.choice(["goodwill", "delay_compensation"]),
    )
    return {
        "instruction": f"{g.hello(t)} Please move my {g.flight_text(leg)} on booking {b['locator']} to {long_date(new['departs_on'])}, "
        f"and use my travel credit to pay for the change.",
        "user": g.user(
            t,
            f"You want your {g.flight_text(leg)} (booking {b['locator']}) moved to {long_date(new['departs_on'])}, "
            f"paid with your {money(c['amount'])} travel credit as far as it goes (the card for the rest).",
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_traveller_profile", traveller_id=t["id"]),
            call("get_booking", locator=b["locator"]),
            call("search_flights", origin=leg.flight["origin"], destination=leg.flight["destination"], departs_on=new["departs_on"]),
            _change_call(g, t, "standard", leg, new, travel_credit_code=c["code"]),
        ],
        "checks": [{"sql": f"SELECT COUNT(*) FROM fare_payments WHERE credit_id = {c['id']}", "expect": [[1]]}],
        "tags": ["change", "credit"],
    }


# -- policy_refusal --------------------------------------------------------------------------------


def _note(t: dict, body: str, locator: str | None = None) -> dict:
    args: dict[str, Any] = {"traveller_id": t["id"], "body": body}
    if locator is not None:
        args["locator"] = locator
    return call("add_travel_note", **args)


def t_cancel_refused(g: Generator) -> dict:
    basic = g.nth("cancel_refused") % 2 == 1
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    fare = "basic" if basic else "standard"
    g.restate(b, patch, fare_class=fare, cabin="economy", days=[(2, 12), (5, 30)], seated=True)
    reason, phrase = g.cancel_reason()
    if basic:
        text, first = f"Please cancel booking {b['locator']}, {phrase}.", []
        why = "basic fares cannot be cancelled less than 14 days before departure"
    else:
        text = f"Please cancel booking {b['locator']} and refund my card: {phrase}. I don't want a voucher."
        first = ["No, a travel credit is no use to me. Leave the booking as it is then."]
        why = "standard fares are refundable only 14+ days before departure; the traveller declined a travel credit"
    return {
        "instruction": f"{g.hello(t)} {text}",
        "user": g.user(
            t,
            f"You want booking {b['locator']} cancelled {said(phrase)}"
            + ("." if basic else " with a refund to your card; you refuse a travel credit.")
            + " You accept a refusal.",
            first,
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            _note(t, f"Traveller asked to cancel booking {b['locator']}; refused: {why}.", b["locator"]),
        ],
        "checks": [{"sql": booking_state(b["id"]), "expect": [["confirmed", None]]}],
        "tags": ["cancel", "refusal", fare],
    }


def t_change_basic(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    legs = g.restate(b, patch, fare_class="basic", cabin="economy", days=[(10, 45), (20, 60)])
    leg = legs[0]
    wanted = (dt.date.fromisoformat(leg.flight["departs_on"]) - dt.timedelta(days=g.rng.randint(2, 5))).isoformat()
    return {
        "instruction": f"{g.hello(t)} Can you move my {g.flight_text(leg)} (booking {b['locator']}) to {long_date(wanted)}? I'll pay the fee.",
        "user": g.user(t, f"You want your {g.flight_text(leg)} on booking {b['locator']} moved to {long_date(wanted)}. You accept a refusal."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            _note(
                t,
                f"Traveller asked to move flight {leg.flight['flight_number']} on booking {b['locator']} to {wanted}; "
                f"refused: basic fares cannot be changed.",
                b["locator"],
            ),
        ],
        "checks": [{"sql": f"SELECT flight_id FROM flight_segments WHERE id = {leg.id}", "expect": [[leg.flight["id"]]]}],
        "tags": ["change", "refusal", "basic"],
    }


def t_short_delay(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    delay = g.rng.randint(75, 175)
    legs = g.restate(
        b,
        patch,
        fare_class=g.rng.choice(["standard", "flex"]),
        cabin=g.rng.choice(["economy", "business"]),
        days=[(-50, -8), (-45, -2)],
        delays=[delay, g.rng.randint(0, 30)],
    )
    leg = legs[0]
    return {
        "instruction": f"{g.hello(t)} My {g.flight_text(leg)} (booking {b['locator']}) was {delay_text(delay)} late. "
        f"I'd like compensation for the wasted time.",
        "user": g.user(
            t, f"Your {g.flight_text(leg)} on booking {b['locator']} was {delay_text(delay)} late; you want compensation. You accept a refusal."
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            _note(
                t,
                f"Traveller asked for delay compensation on booking {b['locator']}; refused: the delay was "
                f"{delay} minutes, under the 3-hour threshold.",
                b["locator"],
            ),
        ],
        "checks": [{"sql": credits_of_booking(b["id"]), "expect": [[0]]}],
        "tags": ["compensation", "refusal"],
    }


def t_compensation_over_limit(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    cabin = g.rng.choice(["premium", "business"])
    delay = g.rng.randint(360, 600)
    legs = g.restate(
        b,
        patch,
        fare_class=g.rng.choice(["basic", "standard", "flex"]),
        cabin=cabin,
        days=[(-40, -5), (-35, -2)],
        delays=[delay, g.rng.randint(0, 30)],
    )
    amount = g.seed.delay_compensation(delay, cabin)
    assert amount > g.seed.AGENT_COMPENSATION_LIMIT
    return {
        "instruction": f"{g.hello(t)} My {g.flight_text(legs[0])} in {cabin} (booking {b['locator']}) landed {delay_text(delay)} late. "
        f"What compensation do I get?",
        "user": g.user(t, f"Your {cabin} {g.flight_text(legs[0])} on booking {b['locator']} landed {delay_text(delay)} late; you want compensation."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call(
                "escalate_travel_case",
                traveller_id=t["id"],
                category="compensation_approval",
                locator=b["locator"],
                reason=f"Flight {legs[0].flight['flight_number']} delayed {delay} minutes in {cabin}: compensation of "
                f"{money(amount)} exceeds the $250.00 agent limit.",
            ),
        ],
        "checks": [{"sql": credits_of_booking(b["id"]), "expect": [[0]]}],
        "tags": ["compensation", "escalation", "over_limit"],
    }


def t_extend_low_tier(g: Generator) -> dict:
    t = g.pick_traveller(lambda t: t["tier"] in ("blue", "silver") and t["id"] in g.no_credit)
    patch = Patch()
    c = g.new_credit(patch, t, amount=float(g.rng.choice([75, 100, 150])), expires_in=g.rng.randint(2, 30))
    return {
        "instruction": f"{g.hello(t)} My travel credit expires on {long_date(c['expires_on'])}. Can you push the expiry date back a few months?",
        "user": g.user(
            t, f"Your {money(c['amount'])} travel credit expires on {long_date(c['expires_on'])}; you want it extended. You accept a refusal."
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_traveller_profile", traveller_id=t["id"]),
            _note(t, f"Traveller asked to extend travel credit {c['code']}; refused: extensions are for gold and platinum members only."),
        ],
        "checks": [{"sql": f"SELECT expires_on, extended FROM travel_credits WHERE id = {c['id']}", "expect": [[c["expires_on"], 0]]}],
        "tags": ["credit", "extension", "refusal", f"tier:{t['tier']}"],
    }


def t_foreign_booking(g: Generator) -> dict:
    mine, other = g.pick_booking(), g.pick_booking()
    while other["traveller_id"] == mine["traveller_id"]:
        other = g.pick_booking()
    t = g.traveller(mine)
    patch = Patch()
    g.restate(other, patch, fare_class="flex", cabin="economy", days=[(5, 40), (10, 60)])
    return {
        "instruction": f"{g.hello(t)} Please cancel booking {other['locator']} and refund it to the card.",
        "user": g.user(t, f"You want booking {other['locator']} cancelled with a refund (you mistyped the locator: it is not yours)."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=other["locator"]),
            _note(t, f"Caller asked to cancel booking {other['locator']}, which belongs to another traveller; refused."),
        ],
        "checks": [{"sql": booking_state(other["id"]), "expect": [["confirmed", None]]}],
        "tags": ["cancel", "refusal", "identity"],
    }


def t_account_security(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    legs = g.restate(b, patch, fare_class=g.rng.choice(["standard", "flex"]), cabin="economy", days=[(4, 40), (8, 60)])
    dest = g.city(legs[0].flight["destination"])
    return {
        "instruction": f"{g.hello(t)} There's a booking {b['locator']} to {dest} on my profile that I never made! Someone must be using my "
        f"account. Cancel it right now.",
        "user": g.user(t, f"Booking {b['locator']} to {dest} on your profile was not made by you; you suspect someone uses your account."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call(
                "escalate_travel_case",
                traveller_id=t["id"],
                category="account_security",
                locator=b["locator"],
                reason=f"Traveller says they did not make booking {b['locator']}; possible account takeover.",
            ),
        ],
        "checks": [{"sql": booking_state(b["id"]), "expect": [["confirmed", None]]}],
        "tags": ["security", "escalation"],
    }


def _age_on(born: str, day: dt.date) -> int:
    b = dt.date.fromisoformat(born)
    return day.year - b.year - ((day.month, day.day) < (b.month, b.day))


def t_exit_row_minor(g: Generator) -> dict:
    # A child traveller of the seed, still under 15 on any flight of the next 60 days.
    b = g.pick_booking(lambda b: _age_on(g.traveller(b)["date_of_birth"], g.today + dt.timedelta(days=60)) < g.rules.MIN_EXIT_ROW_AGE)
    t = g.traveller(b)
    patch = Patch()
    legs = g.restate(b, patch, fare_class=g.rng.choice(["standard", "flex"]), cabin="economy", days=[(3, 40), (6, 60)])
    leg = legs[0]
    age = _age_on(t["date_of_birth"], dt.date.fromisoformat(leg.flight["departs_on"]))
    seat = f"{g.rng.choice(sorted(g.rules.EXIT_ROWS))}{g.rng.choice('ABCDEF')}"
    return {
        "instruction": f"Hello, I'm calling for my child {t['first_name']} {t['last_name']} ({t['email']}), who is {age}. "
        f"On booking {b['locator']}, please give them seat {seat} on {g.flight_text(leg)}; it has more legroom.",
        "user": {
            "persona": f"The parent of {t['first_name']} {t['last_name']}, a {age}-year-old Meridian Miles member; polite.",
            "context": f"You call for your child {t['first_name']} ({age}), whose profile email is {t['email']}. You want seat {seat} "
            f"(an exit row) on booking {b['locator']}; if it is not allowed, the current seat stays. You accept a refusal.",
            "script": g.script(),
        },
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_traveller_profile", traveller_id=t["id"]),
            call("get_booking", locator=b["locator"]),
            _note(
                t,
                f"Parent asked for exit-row seat {seat} on booking {b['locator']}; refused: the traveller is {age}, exit rows need 15 or older.",
                b["locator"],
            ),
        ],
        "checks": [{"sql": f"SELECT seat FROM flight_segments WHERE id = {leg.id}", "expect": [[None]]}],
        "tags": ["seat", "refusal", "exit_row"],
    }


def t_supervisor_request(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    g.restate(b, patch, fare_class="basic", cabin="economy", days=[(2, 12), (5, 30)])
    _, phrase = g.cancel_reason()
    return {
        "instruction": f"{g.hello(t)} I need to cancel booking {b['locator']}: {phrase}. I know it's a basic fare and the flight is soon, "
        f"but if you can't do it, I want a supervisor to approve an exception.",
        "user": g.user(t, f"You want booking {b['locator']} cancelled {said(phrase)}. If refused, you insist on a supervisor deciding."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call(
                "escalate_travel_case",
                traveller_id=t["id"],
                category="policy_exception",
                locator=b["locator"],
                reason=f"Traveller asks for an exception to cancel basic-fare booking {b['locator']} less than 14 days before departure.",
            ),
        ],
        "checks": [{"sql": booking_state(b["id"]), "expect": [["confirmed", None]]}],
        "tags": ["cancel", "escalation", "exception"],
    }


# -- needs_user_info -------------------------------------------------------------------------------


def t_cancel_which_booking(g: Generator) -> dict:
    a, other = g.pick_bookings_of_one_traveller(2)
    t = g.traveller(a)
    patch = Patch()
    fare = g.rng.choice(["standard", "flex"])
    legs = g.restate(a, patch, fare_class=fare, cabin="economy", days=[(15, 50), (20, 70)])
    g.restate(other, patch, fare_class=g.rng.choice(["basic", "standard", "flex"]), cabin="economy", days=[(15, 60), (20, 80)])
    reason, phrase = g.cancel_reason()
    settlement, s_phrase = g.settlement() if fare == "flex" else ("travel_credit", "A travel credit is fine.")
    dest = g.city(legs[0].flight["destination"])
    return {
        "instruction": f"{g.hello(t)} I need to cancel one of my trips.",
        "user": g.user(
            t,
            f"You have two upcoming bookings; you want only {a['locator']} (to {dest} on {long_date(legs[0].flight['departs_on'])}) "
            f"cancelled {said(phrase)}, settled as {settlement.replace('_', ' ')}. Booking {other['locator']} stays.",
            [f"It's booking {a['locator']}, the trip to {dest} on {long_date(legs[0].flight['departs_on'])}. {cap(phrase)}. {s_phrase}"],
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_traveller_profile", traveller_id=t["id"]),
            call("cancel_booking", locator=a["locator"], reason=reason, settlement=settlement),
        ],
        "checks": [
            {"sql": booking_state(a["id"]), "expect": [["cancelled", reason]]},
            {"sql": booking_state(other["id"]), "expect": [["confirmed", None]]},
        ],
        "tags": ["cancel", "ask_booking", fare],
    }


def t_seat_which(g: Generator) -> dict:
    b = g.pick_booking(trip="round_trip")
    t = g.traveller(b)
    patch = Patch()
    cabin = g.rng.choice(["economy", "premium"])
    legs = g.restate(b, patch, fare_class=g.rng.choice(["basic", "standard", "flex"]), cabin=cabin, days=[(3, 40), (6, 60)])
    leg = g.rng.choice(legs)
    seat = g.seat(cabin)
    which = "outbound" if leg.segment["seq"] == 1 else "return"
    return {
        "instruction": f"{g.hello(t)} I'd like to choose a seat on booking {b['locator']}.",
        "user": g.user(
            t,
            f"On booking {b['locator']} you want seat {seat} on the {which} flight only.",
            [
                f"Seat {seat} on the {which} flight ({leg.flight['flight_number']} on {long_date(leg.flight['departs_on'])}), please. "
                f"The other flight can stay as it is."
            ],
        ),
        "patch": patch,
        "gold": [call("get_booking", locator=b["locator"]), call("assign_seat", segment_id=leg.id, seat=seat)],
        "checks": [
            {
                "sql": f"SELECT seq, seat FROM flight_segments WHERE booking_id = {b['id']} ORDER BY seq",
                "expect": [[x.segment["seq"], seat if x is leg else None] for x in legs],
            }
        ],
        "tags": ["seat", "ask_seat"],
    }


def t_change_which_date(g: Generator) -> dict:
    b = g.pick_booking(trip="one_way")
    t = g.traveller(b)
    patch = Patch()
    fare = g.rng.choice(["standard", "flex"])
    legs, leg, new = _change_setup(g, b, patch, fare)
    return {
        "instruction": f"{g.hello(t)} I need to move my flight on booking {b['locator']} to another day.",
        "user": g.user(
            t,
            f"You want the flight of booking {b['locator']} moved to {long_date(new['departs_on'])}; you accept any fee.",
            [f"To {long_date(new['departs_on'])}, please, same route."],
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("search_flights", origin=leg.flight["origin"], destination=leg.flight["destination"], departs_on=new["departs_on"]),
            _change_call(g, t, fare, leg, new),
        ],
        "checks": [{"sql": f"SELECT flight_id FROM flight_segments WHERE id = {leg.id}", "expect": [[new["id"]]]}],
        "tags": ["change", "ask_date", fare],
    }


def t_upgrade_how_to_pay(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    pay_with = ("miles", "card")[g.nth("upgrade_how_to_pay") % 2]
    legs, leg, new = _upgrade_setup(g, b, patch, pay_with)
    answer = "With my miles, please." if pay_with == "miles" else "By card, please; keep my miles."
    return {
        "instruction": f"{g.hello(t)} I'd like an upgrade to {new} on my {g.flight_text(leg)}, booking {b['locator']}.",
        "user": g.user(
            t,
            f"You want {new} on your {g.flight_text(leg)} (booking {b['locator']}), paid {'with miles' if pay_with == 'miles' else 'by card'}.",
            [answer],
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("upgrade_cabin", segment_id=leg.id, cabin=new, pay_with=pay_with),
        ],
        "checks": [{"sql": f"SELECT cabin FROM flight_segments WHERE id = {leg.id}", "expect": [[new]]}],
        "tags": ["cabin", "upgrade", "ask_payment", pay_with],
    }


# -- collateral_trap -------------------------------------------------------------------------------


def t_cancel_one_of_two(g: Generator) -> dict:
    a, other = g.pick_bookings_of_one_traveller(2)
    t = g.traveller(a)
    patch = Patch()
    g.restate(a, patch, fare_class="flex", cabin=g.rng.choice(["economy", "premium"]), days=[(4, 50), (8, 70)])
    g.restate(other, patch, fare_class=g.rng.choice(["standard", "flex"]), cabin="economy", days=[(4, 60), (8, 80)])
    reason, phrase = g.cancel_reason()
    settlement, s_phrase = g.settlement()
    return {
        "instruction": f"{g.hello(t)} I have two trips booked, {a['locator']} and {other['locator']}. Please cancel {a['locator']}: {phrase}. "
        f"{s_phrase} I'm still taking the other trip.",
        "user": g.user(t, f"Cancel only booking {a['locator']} {said(phrase)}, settled as {settlement.replace('_', ' ')}; keep {other['locator']}."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=a["locator"]),
            call("cancel_booking", locator=a["locator"], reason=reason, settlement=settlement),
        ],
        "checks": [{"sql": booking_state(other["id"]), "expect": [["confirmed", None]]}],
        "tags": ["cancel", "trap"],
    }


def t_seat_outbound_only(g: Generator) -> dict:
    b = g.pick_booking(trip="round_trip")
    t = g.traveller(b)
    patch = Patch()
    cabin = g.rng.choice(["economy", "premium", "business"])
    legs = g.restate(b, patch, fare_class=g.rng.choice(["basic", "standard", "flex"]), cabin=cabin, days=[(3, 40), (6, 60)])
    seat = g.seat(cabin)
    return {
        "instruction": f"{g.hello(t)} Please put me in seat {seat} on my outbound {g.flight_text(legs[0])} (booking {b['locator']}). "
        f"I'll pick my seat for the way back at the airport.",
        "user": g.user(t, f"You want seat {seat} on the outbound flight of booking {b['locator']} only; the return flight has no seat and stays so."),
        "patch": patch,
        "gold": [call("get_booking", locator=b["locator"]), call("assign_seat", segment_id=legs[0].id, seat=seat)],
        "checks": [{"sql": f"SELECT seat FROM flight_segments WHERE id = {legs[1].id}", "expect": [[None]]}],
        "tags": ["seat", "trap"],
    }


def t_compensate_one_booking(g: Generator) -> dict:
    a, other = g.pick_bookings_of_one_traveller(2)
    t = g.traveller(a)
    patch = Patch()
    delay, small = g.rng.randint(185, 340), g.rng.randint(40, 150)
    legs = g.restate(
        a, patch, fare_class=g.rng.choice(["standard", "flex"]), cabin="economy", days=[(-60, -10), (-55, -2)], delays=[delay, g.rng.randint(0, 20)]
    )
    other_legs = g.restate(
        other,
        patch,
        fare_class=g.rng.choice(["standard", "flex"]),
        cabin="economy",
        days=[(-90, -15), (-80, -2)],
        delays=[small, g.rng.randint(0, 20)],
    )
    amount = g.seed.delay_compensation(delay, "economy")
    return {
        "instruction": f"{g.hello(t)} My {g.flight_text(legs[0])} (booking {a['locator']}) arrived {delay_text(delay)} late; what do I get for that? "
        f"My trip on booking {other['locator']} was a bit late too, {delay_text(small)}, but that's no big deal.",
        "user": g.user(
            t,
            f"You ask for compensation for the {delay_text(delay)} delay on booking {a['locator']}. The {delay_text(small)} "
            f"delay on booking {other['locator']} you only mention; you do not ask anything for it.",
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=a["locator"]),
            call("issue_travel_credit", traveller_id=t["id"], locator=a["locator"], amount=amount, reason="delay_compensation"),
        ],
        "checks": [
            {"sql": credits_of_booking(other["id"]), "expect": [[0]]},
            {"sql": f"SELECT delay_minutes FROM flights WHERE id = {other_legs[0].flight['id']}", "expect": [[small]]},
        ],
        "tags": ["compensation", "trap"],
    }


def t_change_cheaper(g: Generator) -> dict:
    b = g.pick_booking(trip="one_way")
    t = g.traveller(b)
    patch = Patch()
    fare = g.rng.choice(["standard", "flex"])
    legs, leg, new = _change_setup(g, b, patch, fare, cheaper=True)
    return {
        "instruction": f"{g.hello(t)} Please move my {g.flight_text(leg)} (booking {b['locator']}) to {long_date(new['departs_on'])}. "
        f"I noticed that day is even cheaper than what I paid, nice!",
        "user": g.user(
            t,
            f"You want the flight of booking {b['locator']} moved to {long_date(new['departs_on'])}. You noticed the new day is "
            f"cheaper but you do not ask for money back.",
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("search_flights", origin=leg.flight["origin"], destination=leg.flight["destination"], departs_on=new["departs_on"]),
            _change_call(g, t, fare, leg, new),
        ],
        "checks": [
            {"sql": credits_of_booking(b["id"]), "expect": [[0]]},
            {"sql": f"SELECT COUNT(*) FROM fare_payments WHERE booking_id = {b['id']} AND kind = 'refund'", "expect": [[0]]},
        ],
        "tags": ["change", "trap", "cheaper"],
    }


# -- multi_step ------------------------------------------------------------------------------------


def t_change_and_seat(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    fare = g.rng.choice(["standard", "flex"])
    legs, leg, new = _change_setup(g, b, patch, fare)
    seat = g.seat(leg.cabin, {leg.seat} if leg.seat else set())
    return {
        "instruction": f"{g.hello(t)} Two things on booking {b['locator']}: move my {g.flight_text(leg)} to {long_date(new['departs_on'])}, "
        f"and on that new flight I'd like seat {seat}.",
        "user": g.user(t, f"On booking {b['locator']}: move the {g.flight_text(leg)} to {long_date(new['departs_on'])} and get seat {seat} on it."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("search_flights", origin=leg.flight["origin"], destination=leg.flight["destination"], departs_on=new["departs_on"]),
            _change_call(g, t, fare, leg, new),
            call("assign_seat", segment_id=leg.id, seat=seat),
        ],
        "checks": [{"sql": f"SELECT flight_id, seat FROM flight_segments WHERE id = {leg.id}", "expect": [[new["id"], seat]]}],
        "tags": ["change", "seat"],
    }


def t_miles_then_upgrade(g: Generator) -> dict:
    b = g.pick_booking(lambda b: g.distance(b) >= 800, trip="round_trip")
    t = g.traveller(b)
    patch = Patch()
    fare = g.rng.choice(["standard", "flex"])
    legs = g.restate(b, patch, fare_class=fare, cabin="economy", days=[(-40, -5), (3, 30)], accrue=False)
    out, back = legs
    earned = g.rules.accrual_miles(out.flight["distance_miles"], "economy", fare, t["tier"])
    cost = g.rules.UPGRADE_MILES[("economy", "premium")]
    # Short of the upgrade before the missing miles are credited, enough after: the order of the calls matters.
    g.set_miles(patch, t, cost - earned + g.rng.randint(0, earned - 1))
    return {
        "instruction": f"{g.hello(t)} The miles for my {g.flight_text(out)} (booking {b['locator']}) never posted. Once they're in, "
        f"I'd like to use miles to upgrade my return {g.flight_text(back)} to premium.",
        "user": g.user(
            t,
            f"On booking {b['locator']}: the outbound flight's miles are missing; once credited, you want the return flight "
            f"upgraded to premium with miles.",
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("credit_missing_miles", segment_id=out.id),
            call("upgrade_cabin", segment_id=back.id, cabin="premium", pay_with="miles"),
        ],
        "checks": [{"sql": f"SELECT cabin FROM flight_segments WHERE id = {back.id}", "expect": [["premium"]]}],
        "tags": ["miles", "upgrade", "order_matters"],
    }


def t_upgrade_and_seat(g: Generator) -> dict:
    b = g.pick_booking()
    t = g.traveller(b)
    patch = Patch()
    legs, leg, new = _upgrade_setup(g, b, patch, "card")
    seat = g.seat(new)
    return {
        "instruction": f"{g.hello(t)} Please upgrade my {g.flight_text(leg)} (booking {b['locator']}) to {new}; I'll pay the difference by card. "
        f"And I'd like seat {seat} in {new}.",
        "user": g.user(t, f"Upgrade the {g.flight_text(leg)} of booking {b['locator']} to {new}, paid by card, then seat {seat}."),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_booking", locator=b["locator"]),
            call("upgrade_cabin", segment_id=leg.id, cabin=new, pay_with="card"),
            call("assign_seat", segment_id=leg.id, seat=seat),
        ],
        "checks": [{"sql": f"SELECT cabin, seat FROM flight_segments WHERE id = {leg.id}", "expect": [[new, seat]]}],
        "tags": ["cabin", "upgrade", "seat"],
    }


def t_cancel_and_compensate(g: Generator) -> dict:
    a, past = g.pick_bookings_of_one_traveller(2)
    t = g.traveller(a)
    patch = Patch()
    fare = g.rng.choice(["standard", "flex"])
    g.restate(a, patch, fare_class=fare, cabin="economy", days=[(5, 50), (10, 70)])
    delay = g.rng.randint(185, 500)
    cabin = g.rng.choice(["economy", "premium"])
    if cabin == "premium":
        delay = min(delay, 355)  # keep the compensation within the agent's limit
    past_legs = g.restate(
        past, patch, fare_class=g.rng.choice(["standard", "flex"]), cabin=cabin, days=[(-60, -10), (-55, -2)], delays=[delay, g.rng.randint(0, 20)]
    )
    amount = g.seed.delay_compensation(delay, cabin)
    reason, phrase = g.cancel_reason()
    settlement, s_phrase = g.settlement() if fare == "flex" else ("travel_credit", "A travel credit is fine.")
    return {
        "instruction": f"{g.hello(t)} Please cancel booking {a['locator']}, {phrase}. {s_phrase} Also, my {g.flight_text(past_legs[0])} "
        f"(booking {past['locator']}) was {delay_text(delay)} late: is there compensation for that?",
        "user": g.user(
            t,
            f"Cancel booking {a['locator']} {said(phrase)} as {settlement.replace('_', ' ')}; ask about compensation for the "
            f"{delay_text(delay)} delay on booking {past['locator']}.",
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_traveller_profile", traveller_id=t["id"]),
            call("get_booking", locator=a["locator"]),
            call("cancel_booking", locator=a["locator"], reason=reason, settlement=settlement),
            call("get_booking", locator=past["locator"]),
            call("issue_travel_credit", traveller_id=t["id"], locator=past["locator"], amount=amount, reason="delay_compensation"),
        ],
        "checks": [{"sql": booking_state(a["id"]), "expect": [["cancelled", reason]]}],
        "tags": ["cancel", "compensation"],
    }


def t_trip_overhaul(g: Generator) -> dict:
    b = g.pick_booking(lambda b: g.traveller(b)["id"] in g.no_credit, trip="round_trip")
    t = g.traveller(b)
    patch = Patch()
    fare = "standard"
    legs = g.restate(b, patch, fare_class=fare, cabin="economy", days=[(15, 35), (30, 50)])
    out, back = legs
    new = g.new_flight(patch, out.flight, 3, (dt.date.fromisoformat(back.flight["departs_on"]) - g.today).days - 1)
    g.reprice(new, out.flight, 1.15)  # dearer than what was paid, so something is always due for the credit to pay
    c = g.new_credit(patch, t, amount=float(g.rng.choice([100, 150, 200])), expires_in=g.rng.randint(60, 300))
    cost = g.rules.UPGRADE_MILES[("economy", "premium")]
    if g.current(patch, "travellers", t, "miles_balance") < cost:
        g.set_miles(patch, t, cost + g.rng.randint(1, 40) * 500)
    seat_out, seat_back = g.seat("economy"), g.seat("premium")
    return {
        "instruction": f"{g.hello(t)} A few changes to booking {b['locator']}, please. Move my outbound {g.flight_text(out)} to "
        f"{long_date(new['departs_on'])} and pay for it with my travel credit, and give me seat {seat_out} on it. "
        f"Then upgrade my return flight to premium with my miles, seat {seat_back} there.",
        "user": g.user(
            t,
            f"On booking {b['locator']}: outbound to {long_date(new['departs_on'])} paid with your travel credit, seat {seat_out}; "
            f"return upgraded to premium with miles, seat {seat_back}.",
        ),
        "patch": patch,
        "gold": [
            call("lookup_traveller", email=t["email"]),
            call("get_traveller_profile", traveller_id=t["id"]),
            call("get_booking", locator=b["locator"]),
            call("search_flights", origin=out.flight["origin"], destination=out.flight["destination"], departs_on=new["departs_on"]),
            _change_call(g, t, fare, out, new, travel_credit_code=c["code"]),
            call("assign_seat", segment_id=out.id, seat=seat_out),
            call("upgrade_cabin", segment_id=back.id, cabin="premium", pay_with="miles"),
            call("assign_seat", segment_id=back.id, seat=seat_back),
        ],
        "checks": [
            {
                "sql": f"SELECT flight_id, cabin, seat FROM flight_segments WHERE booking_id = {b['id']} ORDER BY seq",
                "expect": [[new["id"], "economy", seat_out], [back.flight["id"], "premium", seat_back]],
            }
        ],
        "tags": ["change", "credit", "seat", "upgrade", "miles"],
    }


# (family, template function, number of tasks)
TEMPLATES: list[tuple[str, Callable[[Generator], dict], int]] = [
    ("single_write", t_cancel_trip, 5),
    ("single_write", t_assign_seat, 3),
    ("single_write", t_missing_miles, 3),
    ("single_write", t_downgrade, 2),
    ("lookup_then_act", t_change_date, 4),
    ("lookup_then_act", t_delay_compensation, 3),
    ("lookup_then_act", t_extend_credit, 3),
    ("lookup_then_act", t_upgrade, 2),
    ("lookup_then_act", t_change_with_credit, 2),
    ("policy_refusal", t_cancel_refused, 2),
    ("policy_refusal", t_change_basic, 2),
    ("policy_refusal", t_short_delay, 2),
    ("policy_refusal", t_compensation_over_limit, 2),
    ("policy_refusal", t_extend_low_tier, 2),
    ("policy_refusal", t_foreign_booking, 1),
    ("policy_refusal", t_account_security, 2),
    ("policy_refusal", t_exit_row_minor, 2),
    ("policy_refusal", t_supervisor_request, 1),
    ("needs_user_info", t_cancel_which_booking, 2),
    ("needs_user_info", t_seat_which, 2),
    ("needs_user_info", t_change_which_date, 2),
    ("needs_user_info", t_upgrade_how_to_pay, 2),
    ("collateral_trap", t_cancel_one_of_two, 2),
    ("collateral_trap", t_seat_outbound_only, 2),
    ("collateral_trap", t_compensate_one_booking, 2),
    ("collateral_trap", t_change_cheaper, 2),
    ("multi_step", t_change_and_seat, 2),
    ("multi_step", t_miles_then_upgrade, 2),
    ("multi_step", t_upgrade_and_seat, 2),
    ("multi_step", t_cancel_and_compensate, 2),
    ("multi_step", t_trip_overhaul, 2),
]


def generate(world: dict[str, list[dict]], today: dt.date, rng: random.Random) -> list[dict]:
    """All travel tasks, in template order, ids `travel-<template>-<nnn>`."""
    return _kit.generate(HERE, TEMPLATES, Generator(world, today, rng))
