"""Deterministic seed for the travel world (Meridian Air customer care).

`generate(rng, scale)` returns rows per table in foreign-key order. Every draw comes from `rng`, and
dates are computed from the fixed business date `TODAY`, so the same seed gives the same world on
every machine. `scale` multiplies the number of travellers and of everything that hangs off them
(bookings, segments, payments, credits, miles, notes, escalations); the flight schedule is fixed.

The history obeys the rules the tools apply: fares come from `tools.fare_for`, accrued miles from
`tools.accrual_miles`, credit codes from `tools.credit_code`, seats from `tools.SEAT_MAP`, and each
traveller's `miles_balance` is the sum of their mileage ledger. The rules are loaded from tools.py
rather than copied, so the seed can never drift from them.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from pathlib import Path

from groundstate.domains import _kit
from groundstate.domains._kit import People, Rows, business_date, day_between, group_by, iso, phone, round_money, scaled, unique

HERE = Path(__file__).parent
TODAY = business_date(HERE)
WINDOW_DAYS = 120  # flights run from TODAY - 120 to TODAY + 120 days
RULES = _kit.sibling(HERE, "tools")

# IATA code -> (city, latitude, longitude)
AIRPORTS = {
    "DEN": ("Denver", 39.86, -104.67),
    "ORD": ("Chicago", 41.98, -87.90),
    "SEA": ("Seattle", 47.45, -122.31),
    "SFO": ("San Francisco", 37.62, -122.38),
    "LAX": ("Los Angeles", 33.94, -118.41),
    "PHX": ("Phoenix", 33.43, -112.01),
    "DFW": ("Dallas", 32.90, -97.04),
    "ATL": ("Atlanta", 33.64, -84.43),
    "MIA": ("Miami", 25.79, -80.29),
    "JFK": ("New York", 40.64, -73.78),
    "BOS": ("Boston", 42.36, -71.01),
    "MSP": ("Minneapolis", 44.88, -93.22),
    "AUS": ("Austin", 30.19, -97.67),
    "HNL": ("Honolulu", 21.32, -157.92),
    "CUN": ("Cancun", 21.04, -86.87),
    "LHR": ("London", 51.47, -0.45),
    "CDG": ("Paris", 49.01, 2.55),
}
# Meridian Air's network: Denver is the hub. Each route is flown in both directions.
ROUTES = [
    ("DEN", "ORD"),
    ("DEN", "SEA"),
    ("DEN", "SFO"),
    ("DEN", "LAX"),
    ("DEN", "PHX"),
    ("DEN", "DFW"),
    ("DEN", "ATL"),
    ("DEN", "JFK"),
    ("DEN", "BOS"),
    ("DEN", "MSP"),
    ("DEN", "AUS"),
    ("DEN", "MIA"),
    ("SEA", "SFO"),
    ("LAX", "JFK"),
    ("SFO", "JFK"),
    ("ORD", "BOS"),
    ("ATL", "MIA"),
    ("JFK", "MIA"),
    ("LAX", "HNL"),
    ("SFO", "HNL"),
    ("JFK", "LHR"),
    ("BOS", "LHR"),
    ("JFK", "CDG"),
    ("MIA", "CUN"),
    ("DFW", "CUN"),
    ("ORD", "LHR"),
]
DATES_PER_DIRECTION = 28
DEPARTURE_TIMES = ["06:05", "07:40", "08:15", "09:30", "10:55", "12:20", "13:45", "15:10", "16:35", "17:50", "19:15", "21:40"]

NOTE_BODIES = [
    "Traveller asked about baggage allowance; explained one checked bag is included on standard and flex fares.",
    "Traveller asked whether meals are served in premium; confirmed a hot meal on flights over 3 hours.",
    "Called to check the departure terminal; no change needed.",
    "Asked for a copy of the e-ticket receipt; sent it to the email on file.",
    "Asked how Meridian Miles tiers are earned; explained the qualifying miles thresholds.",
]
# Policy numbers (policy.md), used here so that the seeded history follows the policy, and by the task
# generator. The tools do not enforce them: following the policy is the agent's job.
AGENT_COMPENSATION_LIMIT = 250.00  # delay compensation above this goes to a supervisor
CREDIT_EXTENSION_DAYS = 90  # a credit extension moves the expiry date exactly this far


def delay_compensation(delay_minutes: int, cabin: str) -> float:
    """The travel credit policy.md grants for an arrival delay (0.0 below three hours)."""
    if delay_minutes < 180:
        return 0.0
    long = delay_minutes >= 360
    if cabin == "economy":
        return 200.0 if long else 100.0
    return 400.0 if long else 200.0


ESCALATION_REASONS = {
    "compensation_approval": "Flight delayed over 6 hours in business: compensation of $400.00 exceeds the agent limit.",
    "account_security": "Traveller reports a booking they did not make; possible account takeover.",
    "policy_exception": "Traveller asks for a refund on a basic fare and wants a supervisor to decide.",
}


def generate(rng: random.Random, scale: float = 1.0) -> Rows:
    """The world's rows per table, in foreign-key insertion order; every column present in every row."""
    flights = _flights(rng)
    travellers = _travellers(rng, scaled(300, scale))
    bookings, segments, credits, payments, entries = _bookings(rng, scaled(650, scale), travellers, flights)
    notes = _notes(rng, scaled(40, scale), travellers, bookings)
    escalations = _escalations(rng, scaled(8, scale), bookings)
    return {
        "travellers": travellers,
        "flights": flights,
        "bookings": bookings,
        "flight_segments": segments,
        "travel_credits": credits,
        "fare_payments": payments,
        "mileage_entries": entries,
        "travel_notes": notes,
        "travel_escalations": escalations,
    }


# -- schedule -----------------------------------------------------------------------------------------


def distance(a: str, b: str) -> int:
    """Great-circle distance between two airports, in statute miles."""
    _, lat1, lon1 = AIRPORTS[a]
    _, lat2, lon2 = AIRPORTS[b]
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return int(round(2 * 3958.8 * math.asin(math.sqrt(h))))


def directions() -> list[tuple[str, str, str]]:
    """(flight number, origin, destination) of every scheduled direction; numbers are fixed, odd outbound, even back."""
    out = []
    for i, (a, b) in enumerate(ROUTES):
        out.append((f"MA{101 + 2 * i}", a, b))
        out.append((f"MA{102 + 2 * i}", b, a))
    return out


def airline_price(x: float) -> float:
    """Airline-style price: whole dollars minus a cent (e.g. 188.99)."""
    return round_money(max(round(x), 20) - 0.01)


def flight_row(rng: random.Random, fid: int, number: str, origin: str, destination: str, day: dt.date, departs_at: str) -> dict:
    """A flight on `day` with fares from its distance and a status consistent with TODAY (also used by the task generator)."""
    miles = distance(origin, destination)
    economy = (59 + 0.115 * miles) * rng.uniform(0.85, 1.25)
    row = {
        "id": fid,
        "flight_number": number,
        "origin": origin,
        "destination": destination,
        "departs_on": iso(day),
        "departs_at": departs_at,
        "duration_minutes": 5 * round((35 + miles / 480 * 60) / 5),
        "distance_miles": miles,
        "status": "scheduled",
        "delay_minutes": 0,
        "fare_economy": airline_price(economy),
        "fare_premium": airline_price(economy * 1.7),
        "fare_business": airline_price(economy * 3.4),
        "seats_economy": rng.randint(0, 140),
        "seats_premium": rng.randint(0, 20),
        "seats_business": rng.randint(0, 12),
    }
    if day < TODAY:
        row["status"] = "cancelled" if rng.random() < 0.03 else "landed"
        if row["status"] == "landed":
            r = rng.random()
            row["delay_minutes"] = 0 if r < 0.55 else rng.randint(5, 55) if r < 0.85 else rng.randint(60, 175) if r < 0.95 else rng.randint(180, 520)
        row.update(seats_economy=0, seats_premium=0, seats_business=0)
    elif rng.random() < 0.015:
        row["status"] = "cancelled"
    return row


def _flights(rng: random.Random) -> list[dict]:
    rows = []
    for number, origin, destination in directions():
        departs_at = rng.choice(DEPARTURE_TIMES)
        offsets = sorted(rng.sample(range(-WINDOW_DAYS, WINDOW_DAYS + 1), DATES_PER_DIRECTION))
        for off in offsets:
            rows.append(flight_row(rng, len(rows) + 1, number, origin, destination, TODAY + dt.timedelta(days=off), departs_at))
    return rows


# -- travellers ---------------------------------------------------------------------------------------


def _travellers(rng: random.Random, n: int) -> list[dict]:
    rows, people = [], People(rng)
    for i in range(1, n + 1):
        first, last, email = people.draw()
        # Mostly adults; about one traveller in twelve is a teenager or a child (exit-row rules apply).
        age = rng.randint(8, 15) if rng.random() < 0.08 else rng.randint(19, 78)
        born = TODAY - dt.timedelta(days=age * 365 + rng.randint(0, 364))
        rows.append(
            {
                "id": i,
                "first_name": first,
                "last_name": last,
                "email": email,
                "phone": phone(rng),
                "date_of_birth": iso(born),
                "loyalty_number": f"MM{100000000 + i * 7919 % 900000000:09d}",
                "tier": rng.choices(["blue", "silver", "gold", "platinum"], weights=[55, 25, 14, 6])[0],
                "miles_balance": 0,  # set from the ledger below
                "member_since": iso(_member_since(rng, born, adult=age >= 19)),
            }
        )
    return rows


def _member_since(rng: random.Random, born: dt.date, adult: bool) -> dt.date:
    """Adults joined after turning 18 (and after the programme started in 2012); children were enrolled by family."""
    start = max(born + dt.timedelta(days=18 * 365), dt.date(2012, 1, 1)) if adult else born + dt.timedelta(days=30)
    return day_between(rng, start, TODAY - dt.timedelta(days=30))


# -- bookings and everything that hangs off them ------------------------------------------------------

LOCATOR_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I, as on real tickets


def _locator(rng: random.Random, taken: set[str]) -> str:
    return unique(lambda: "".join(rng.choice(LOCATOR_ALPHABET) for _ in range(6)), taken)


def _free_seat(rng: random.Random, cabin: str, taken: set[str]) -> str | None:
    rows, letters = RULES.SEAT_MAP[cabin]
    for _ in range(30):
        seat = f"{rng.choice(rows)}{rng.choice(letters)}"
        if seat not in taken:
            taken.add(seat)
            return seat
    return None


def _bookings(rng, n, travellers, flights):  # noqa: C901 - one row's rules in the order they draw from the rng; a split would change no logic
    """Bookings in the order they were made, with segments, payments, credits and the mileage ledger."""
    by_direction = group_by(flights, lambda f: (f["origin"], f["destination"]))
    bookable = [f for f in flights if f["status"] != "cancelled"]
    weights = [rng.choice([1, 1, 1, 2, 2, 4]) for _ in travellers]  # some travellers fly often
    seats_taken: dict[int, set[str]] = {}

    # Draw the trips first, then replay them in booking-date order so that credits are spent after they exist.
    trips = []
    for _ in range(n):
        t = rng.choices(travellers, weights=weights)[0]
        out = rng.choice(bookable)
        back = None
        if rng.random() < 0.6:
            d0 = dt.date.fromisoformat(out["departs_on"])
            options = [
                f
                for f in by_direction[(out["destination"], out["origin"])]
                if f["status"] != "cancelled" and d0 + dt.timedelta(days=2) <= dt.date.fromisoformat(f["departs_on"]) <= d0 + dt.timedelta(days=30)
            ]
            back = rng.choice(options) if options else None
        booked = dt.date.fromisoformat(out["departs_on"]) - dt.timedelta(days=rng.randint(3, 120))
        trips.append((min(booked, TODAY), t, out, back))
    trips.sort(key=lambda x: (x[0], x[1]["id"], x[2]["id"]))

    bookings, segments, credits, payments, entries = [], [], [], [], []
    locators: set[str] = set()
    open_credits: dict[int, list[dict]] = {}  # traveller -> credits with a balance

    def add_credit(traveller_id, booking_id, reason, amount, issued):
        cid = len(credits) + 1
        c = {
            "id": cid,
            "code": RULES.credit_code(cid),
            "traveller_id": traveller_id,
            "booking_id": booking_id,
            "reason": reason,
            "amount": amount,
            "balance": amount,
            "issued_on": iso(issued),
            "expires_on": iso(issued + dt.timedelta(days=365)),
            "status": "active",
            "extended": 0,
        }
        credits.append(c)
        open_credits.setdefault(traveller_id, []).append(c)
        return c

    def pay(booking_id, kind, method, amount, purpose, on, card=None, credit_id=None):
        payments.append(
            {
                "id": len(payments) + 1,
                "booking_id": booking_id,
                "kind": kind,
                "method": method,
                "card_last4": card,
                "credit_id": credit_id,
                "purpose": purpose,
                "amount": amount,
                "posted_on": iso(on),
            }
        )

    for booked, t, out, back in trips:
        bid = len(bookings) + 1
        fare_class = rng.choices(["basic", "standard", "flex"], weights=[30, 50, 20])[0]
        cabin = rng.choices(["economy", "premium", "business"], weights=[75, 15, 10])[0]
        legs = [out] + ([back] if back else [])
        b = {
            "id": bid,
            "locator": _locator(rng, locators),
            "traveller_id": t["id"],
            "fare_class": fare_class,
            "trip_type": "round_trip" if back else "one_way",
            "status": "confirmed",
            "booked_on": iso(booked),
            "cancelled_on": None,
            "cancel_reason": None,
        }
        first_day = dt.date.fromisoformat(out["departs_on"])
        # Prices move between booking and today: what was paid is today's price give or take.
        legs_rows = []
        for seq, f in enumerate(legs, start=1):
            paid = round_money(RULES.fare_for(f, cabin, fare_class) * rng.choice([0.85, 0.9, 1.0, 1.0, 1.0, 1.1, 1.2]))
            legs_rows.append(
                {
                    "id": len(segments) + seq,
                    "booking_id": bid,
                    "flight_id": f["id"],
                    "seq": seq,
                    "cabin": cabin,
                    "fare_paid": paid,
                    "seat": None,
                    "status": "active",
                }
            )
        total = round_money(sum(s["fare_paid"] for s in legs_rows))
        card = f"{rng.randint(0, 9999):04d}"

        # A traveller with a live credit often spends it on the next trip.
        usable = [c for c in open_credits.get(t["id"], []) if c["balance"] > 0 and c["issued_on"] < iso(booked) <= c["expires_on"]]
        if usable and rng.random() < 0.6:
            c = usable[0]
            used = round_money(min(c["balance"], total))
            c["balance"] = round_money(c["balance"] - used)
            pay(bid, "charge", "travel_credit", used, "ticket", booked, credit_id=c["id"])
            if total - used > 0.004:
                pay(bid, "charge", "card", round_money(total - used), "ticket", booked, card=card)
        else:
            pay(bid, "charge", "card", total, "ticket", booked, card=card)

        cancelled = first_day > booked + dt.timedelta(days=1) and rng.random() < 0.07
        if cancelled:
            on = min(booked + dt.timedelta(days=rng.randint(1, (first_day - booked).days - 1)), TODAY)
            b.update(status="cancelled", cancelled_on=iso(on), cancel_reason=rng.choice(["change_of_plans", "illness", "other"]))
            for s in legs_rows:
                s["status"] = "cancelled"
            # Settled as the tools would: flex fares back to the card (the part paid by credit as a new credit),
            # standard fares as a credit, basic fares as a credit less the fee when cancelled 14+ days out.
            card_paid = round_money(sum(p["amount"] for p in payments if p["booking_id"] == bid and p["method"] == "card"))
            if fare_class == "flex":
                if card_paid > 0:
                    pay(bid, "refund", "card", card_paid, "cancellation", on, card=card)
                if total - card_paid > 0.004:
                    add_credit(t["id"], bid, "cancellation", round_money(total - card_paid), on)
            elif fare_class == "standard" or (first_day - on).days >= RULES.REFUND_DEADLINE_DAYS:
                fee = RULES.CANCEL_FEE if fare_class == "basic" else 0
                if total - fee > 0:
                    add_credit(t["id"], bid, "cancellation", round_money(total - fee), on)
        else:
            for s, f in zip(legs_rows, legs, strict=True):
                if f["departs_on"] < iso(TODAY):
                    s["status"] = "flown"
                elif rng.random() < 0.7:
                    s["seat"] = _free_seat(rng, cabin, seats_taken.setdefault(f["id"], set()))
            if all(s["status"] == "flown" for s in legs_rows):
                b["status"] = "completed"
            for s, f in zip(legs_rows, legs, strict=True):
                if s["status"] != "flown":
                    continue
                flown_on = dt.date.fromisoformat(f["departs_on"])
                if rng.random() < 0.95:  # a few flights never posted their miles: travellers claim them later
                    miles = RULES.accrual_miles(f["distance_miles"], cabin, fare_class, t["tier"])
                    entries.append(
                        {
                            "traveller_id": t["id"],
                            "segment_id": s["id"],
                            "kind": "flight_accrual",
                            "miles": miles,
                            "posted_on": iso(min(flown_on + dt.timedelta(days=rng.randint(1, 3)), TODAY)),
                        }
                    )
                comp = delay_compensation(f["delay_minutes"], cabin)
                if (
                    comp
                    and comp <= AGENT_COMPENSATION_LIMIT
                    and rng.random() < 0.5
                    and not any(c["booking_id"] == bid and c["reason"] == "delay_compensation" for c in credits)
                ):
                    add_credit(t["id"], bid, "delay_compensation", comp, min(flown_on + dt.timedelta(days=rng.randint(1, 6)), TODAY))
        bookings.append(b)
        segments.extend(legs_rows)

    # A little goodwill from supervisors over the years (not tied to a booking); the oldest have expired.
    for _ in range(max(1, len(bookings) // 25)):
        add_credit(
            rng.choice(travellers)["id"], None, "goodwill", rng.choice([50.0, 75.0, 100.0, 150.0]), TODAY - dt.timedelta(days=rng.randint(20, 520))
        )
    for c in credits:
        if c["issued_on"] > iso(TODAY):
            c["issued_on"] = iso(TODAY)
            c["expires_on"] = iso(TODAY + dt.timedelta(days=365))
        if rng.random() < 0.08 and c["balance"] > 0:
            c["extended"] = 1
            c["expires_on"] = iso(dt.date.fromisoformat(c["expires_on"]) + dt.timedelta(days=CREDIT_EXTENSION_DAYS))
        c["status"] = "used" if c["balance"] == 0 else "expired" if c["expires_on"] < iso(TODAY) else "active"

    entries = _ledger(rng, travellers, entries)
    return bookings, segments, credits, payments, entries


def _ledger(rng, travellers, accruals):
    """Partner bonuses and award redemptions around the flight accruals; balances are the ledger's sums."""
    entries = list(accruals)
    by_traveller: dict[int, int] = {}
    for e in accruals:
        by_traveller[e["traveller_id"]] = by_traveller.get(e["traveller_id"], 0) + e["miles"]
    tier_bonus = {"blue": 4000, "silver": 15000, "gold": 35000, "platinum": 70000}
    for t in travellers:
        since = dt.date.fromisoformat(t["member_since"])
        span = max((TODAY - since).days, 1)
        total = by_traveller.get(t["id"], 0)
        for _ in range(rng.randint(1, 4)):
            miles = rng.randint(500, tier_bonus[t["tier"]] // 2) // 50 * 50
            entries.append(
                {
                    "traveller_id": t["id"],
                    "segment_id": None,
                    "kind": "partner_bonus",
                    "miles": miles,
                    "posted_on": iso(since + dt.timedelta(days=rng.randint(0, span))),
                }
            )
            total += miles
        if total > 30000 and rng.random() < 0.4:
            spend = rng.choice([12500, 25000]) if total > 40000 else 12500
            entries.append(
                {
                    "traveller_id": t["id"],
                    "segment_id": None,
                    "kind": "award_redemption",
                    "miles": -spend,
                    "posted_on": iso(since + dt.timedelta(days=rng.randint(span // 2, span))),
                }
            )
            total -= spend
        t["miles_balance"] = total
    entries.sort(key=lambda e: (e["posted_on"], e["traveller_id"], e["segment_id"] or 0, e["kind"]))
    return [{"id": i, **e} for i, e in enumerate(entries, start=1)]


# -- notes and escalations ----------------------------------------------------------------------------


def _notes(rng, n, travellers, bookings):
    rows = []
    for i in range(1, n + 1):
        b = rng.choice(bookings) if rng.random() < 0.5 else None
        traveller_id = b["traveller_id"] if b else rng.choice(travellers)["id"]
        created = (
            dt.date.fromisoformat(b["booked_on"]) + dt.timedelta(days=rng.randint(0, 5)) if b else TODAY - dt.timedelta(days=rng.randint(0, 300))
        )
        rows.append(
            {
                "id": i,
                "traveller_id": traveller_id,
                "booking_id": b["id"] if b else None,
                "body": rng.choice(NOTE_BODIES),
                "created_on": iso(min(created, TODAY)),
            }
        )
    return rows


def _escalations(rng, n, bookings):
    rows = []
    for i in range(1, n + 1):
        b = rng.choice(bookings)
        category = rng.choice(list(ESCALATION_REASONS))
        created = min(dt.date.fromisoformat(b["booked_on"]) + dt.timedelta(days=rng.randint(1, 20)), TODAY)
        rows.append(
            {
                "id": i,
                "traveller_id": b["traveller_id"],
                "booking_id": b["id"],
                "category": category,
                "status": "closed" if (TODAY - created).days > 14 else "open",
                "reason": ESCALATION_REASONS[category],
                "created_on": iso(created),
            }
        )
    return rows
