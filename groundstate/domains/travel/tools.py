"""Tools of the Meridian Air customer-care agent.

Each tool is a typed function over the sandbox `Db`; its docstring is what the agent reads. Reads
return JSON-ready dicts. Writes check the rules the airline's systems enforce (fare-class rules,
days before departure, seat maps and inventory, miles balances, credit validity) and raise
`ToolError` to refuse; the engine then rolls back whatever the call wrote. Rules that depend on
judgement or authority (who gets compensation and how much, the agent's compensation limit, which
tiers may extend a credit, when to escalate) live in policy.md: following them is the agent's job.

Conventions: SQL is portable and every argument is bound as a parameter; money is handled in whole
cents and stored rounded to 2 decimals; dates are ISO strings derived from `db.today`; repeating a
write that has already taken effect (cancel a cancelled booking, assign the seat already held,
credit miles already credited) is refused rather than silently applied twice.

The pricing, seat-map and mileage rules below are also used by seed.py and taskgen.py, so the world
and the tasks follow exactly the rules the tools apply.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from groundstate.state.db import Db
from groundstate.tools import ToolError, tool

Cabin = Literal["economy", "premium", "business"]
CancelReason = Literal["change_of_plans", "illness", "flight_cancelled", "other"]
Settlement = Literal["refund", "travel_credit"]
UpgradePayment = Literal["card", "miles"]
CreditReason = Literal["delay_compensation", "goodwill"]
EscalationCategory = Literal["compensation_approval", "account_security", "policy_exception"]

CABINS = ("economy", "premium", "business")  # lowest to highest
# Fare-class price multipliers applied to a flight's standard fare in a cabin.
FARE_MULTIPLIER = {"basic": 0.8, "standard": 1.0, "flex": 1.3}
CANCEL_FEE = 100.00  # standard refunds and basic credits
CHANGE_FEE = 75.00  # standard-fare date/flight changes
REFUND_DEADLINE_DAYS = 14  # standard refunds and basic cancellations need this many days before departure
CREDIT_VALID_DAYS = 365
CREDIT_REVIVAL_DAYS = 30  # an expired credit can still be extended this many days after it expired
CREDIT_EXTENSION_MAX_DAYS = 180
MAX_CREDIT = 1000.00  # the system issues no single travel credit above this
MILES_CLAIM_DAYS = 180  # missing miles can be claimed this long after the flight
UPGRADE_MILES = {("economy", "premium"): 15000, ("premium", "business"): 20000, ("economy", "business"): 35000}
# cabin -> (seat rows, seat letters)
SEAT_MAP = {"business": (range(1, 5), "ACDF"), "premium": (range(10, 14), "ABCDEF"), "economy": (range(20, 46), "ABCDEF")}
EXIT_ROWS = frozenset({24, 25})
MIN_EXIT_ROW_AGE = 15
# Miles earned = distance x cabin % x fare %, plus the tier bonus % on top.
CABIN_EARN = {"economy": 100, "premium": 150, "business": 200}
FARE_EARN = {"basic": 50, "standard": 100, "flex": 150}
TIER_BONUS = {"blue": 0, "silver": 25, "gold": 50, "platinum": 100}

_SEAT = re.compile(r"^(\d{1,2})([A-Z])$")
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


# -- shared rules -----------------------------------------------------------------------------------

def _cents(amount: Any) -> int:
    """Money as whole cents: exact comparisons whatever float the database hands back."""
    return int(round(float(amount) * 100))


def _dollars(cents: int) -> float:
    return round(cents / 100, 2)


def fare_for(flight: dict[str, Any], cabin: str, fare_class: str) -> float:
    """Today's price of a seat on `flight` in `cabin` for `fare_class`."""
    return _dollars(int(round(_cents(flight[f"fare_{cabin}"]) * FARE_MULTIPLIER[fare_class])))


def accrual_miles(distance: int, cabin: str, fare_class: str, tier: str) -> int:
    """Meridian Miles earned by flying `distance` miles in `cabin` on `fare_class` at `tier` (integer arithmetic)."""
    base = distance * CABIN_EARN[cabin] * FARE_EARN[fare_class] // 10000
    return base + base * TIER_BONUS[tier] // 100


def credit_code(credit_id: int) -> str:
    """The voucher code of a travel credit: a bijection of its id, so codes are unique and identical on every backend."""
    n = (credit_id * 2654435761 + 97) % 32**6  # odd multiplier: a permutation of [0, 32^6)
    chars = []
    for _ in range(6):
        chars.append(_CODE_ALPHABET[n % 32])
        n //= 32
    return "MC-" + "".join(chars)


def _age_on(born: str, day: dt.date) -> int:
    b = dt.date.fromisoformat(born)
    return day.year - b.year - ((day.month, day.day) < (b.month, b.day))


def _date(value: str, what: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(f"{what} must be an ISO date like 2026-05-01, not {value!r}") from None


def _text(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise ToolError(f"{what} must not be empty")
    return value


# -- record access ----------------------------------------------------------------------------------

def _traveller(db: Db, traveller_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM travellers WHERE id = ?", traveller_id)
    if row is None:
        raise ToolError(f"no traveller with id {traveller_id}")
    return row


def _booking(db: Db, locator: str) -> dict[str, Any]:
    row = db.one("SELECT * FROM bookings WHERE locator = ?", locator.strip().upper())
    if row is None:
        raise ToolError(f"no booking with locator {locator.strip()!r}")
    return row


def _booking_of_traveller(db: Db, locator: str | None, traveller_id: int) -> int | None:
    """The booking id of an optional locator, checked to be the traveller's: records never point at someone else's trip."""
    if locator is None:
        return None
    b = _booking(db, locator)
    if b["traveller_id"] != traveller_id:
        raise ToolError(f"booking {b['locator']} does not belong to traveller {traveller_id}")
    return b["id"]


_SEGMENT_SQL = (
    "SELECT s.id, s.booking_id, s.flight_id, s.seq, s.cabin, s.fare_paid, s.seat, s.status, "
    "f.flight_number, f.origin, f.destination, f.departs_on, f.departs_at, f.duration_minutes, f.distance_miles, "
    "f.status AS flight_status, f.delay_minutes "
    "FROM flight_segments s JOIN flights f ON f.id = s.flight_id"
)


def _segment(db: Db, segment_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A segment joined with its flight, and its booking."""
    s = db.one(_SEGMENT_SQL + " WHERE s.id = ?", segment_id)
    if s is None:
        raise ToolError(f"no flight segment with id {segment_id}")
    return s, db.one("SELECT * FROM bookings WHERE id = ?", s["booking_id"])


def _segments(db: Db, booking_id: int) -> list[dict[str, Any]]:
    return db.query(_SEGMENT_SQL + " WHERE s.booking_id = ? ORDER BY s.seq", booking_id)


def _flight(db: Db, flight_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM flights WHERE id = ?", flight_id)
    if row is None:
        raise ToolError(f"no flight with id {flight_id}")
    return row


def _credit(db: Db, code: str) -> dict[str, Any]:
    row = db.one("SELECT * FROM travel_credits WHERE code = ?", code.strip().upper())
    if row is None:
        raise ToolError(f"no travel credit with code {code.strip()!r}")
    return row


def _days_until(db: Db, iso: str) -> int:
    return (dt.date.fromisoformat(iso) - db.today).days


def _changeable_segment(db: Db, segment_id: int, what: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An active segment of a confirmed booking whose flight leaves tomorrow or later: what changes need."""
    s, b = _segment(db, segment_id)
    if b["status"] != "confirmed" or s["status"] != "active":
        raise ToolError(f"segment {segment_id} is {s['status']} on a {b['status']} booking: {what} is only possible on upcoming flights")
    if _days_until(db, s["departs_on"]) < 1:
        raise ToolError(f"flight {s['flight_number']} departs {s['departs_on']}: {what} closes the day before departure")
    if b["fare_class"] == "basic":
        raise ToolError(f"booking {b['locator']} is a basic fare: basic fares cannot be changed ({what})")
    return s, b


def _take_seat(db: Db, flight_id: int, cabin: str) -> None:
    if not db.one(f"SELECT id FROM flights WHERE id = ? AND seats_{_cabin(cabin)} > 0", flight_id):
        raise ToolError(f"no {cabin} seats left on that flight")
    db.execute(f"UPDATE flights SET seats_{_cabin(cabin)} = seats_{_cabin(cabin)} - 1 WHERE id = ?", flight_id)


def _release_seat(db: Db, flight_id: int, cabin: str) -> None:
    db.execute(f"UPDATE flights SET seats_{_cabin(cabin)} = seats_{_cabin(cabin)} + 1 WHERE id = ? AND status = 'scheduled'", flight_id)


def _cabin(cabin: str) -> str:
    if cabin not in CABINS:  # the column name is built from it: only the three known cabins pass
        raise ToolError(f"unknown cabin {cabin!r}")
    return cabin


def _card_of(db: Db, booking: dict[str, Any]) -> str:
    last4 = db.scalar("SELECT card_last4 FROM fare_payments WHERE booking_id = ? AND method = 'card' ORDER BY id LIMIT 1", booking["id"])
    if last4 is None:
        raise ToolError(f"booking {booking['locator']} has no card on file; pay with a travel credit")
    return last4


def _new_credit(db: Db, traveller_id: int, booking_id: int | None, reason: str, cents: int) -> dict[str, Any]:
    credit_id = int(db.scalar("SELECT COALESCE(MAX(id), 0) + 1 AS n FROM travel_credits"))
    expires = (db.today + dt.timedelta(days=CREDIT_VALID_DAYS)).isoformat()
    db.insert("travel_credits", id=credit_id, code=credit_code(credit_id), traveller_id=traveller_id, booking_id=booking_id,
              reason=reason, amount=_dollars(cents), balance=_dollars(cents), issued_on=db.today.isoformat(),
              expires_on=expires, status="active", extended=0)
    return {"credit_id": credit_id, "code": credit_code(credit_id), "amount": _dollars(cents), "expires_on": expires}


def _post_miles(db: Db, traveller_id: int, segment_id: int | None, kind: str, miles: int) -> int:
    db.insert("mileage_entries", traveller_id=traveller_id, segment_id=segment_id, kind=kind, miles=miles, posted_on=db.today.isoformat())
    db.execute("UPDATE travellers SET miles_balance = miles_balance + ? WHERE id = ?", miles, traveller_id)
    return int(db.scalar("SELECT miles_balance FROM travellers WHERE id = ?", traveller_id))


def _net_paid(db: Db, booking_id: int, method: str | None = None) -> int:
    """Cents charged minus cents refunded on a booking (one method, or all)."""
    total = 0
    for p in db.query("SELECT kind, method, amount FROM fare_payments WHERE booking_id = ? ORDER BY id", booking_id):
        if method is None or p["method"] == method:
            total += _cents(p["amount"]) * (1 if p["kind"] == "charge" else -1)
    return total


def _credit_view(db: Db, c: dict[str, Any]) -> dict[str, Any]:
    status = c["status"]
    if status == "active" and c["expires_on"] < db.today.isoformat():
        status = "expired"
    return {"code": c["code"], "reason": c["reason"], "amount": _dollars(_cents(c["amount"])), "balance": _dollars(_cents(c["balance"])),
            "issued_on": c["issued_on"], "expires_on": c["expires_on"], "status": status, "extended": bool(c["extended"])}


def _segment_view(db: Db, s: dict[str, Any]) -> dict[str, Any]:
    credited = db.scalar("SELECT COUNT(*) AS n FROM mileage_entries WHERE segment_id = ? AND kind = 'flight_accrual'", s["id"])
    return {
        "segment_id": s["id"], "seq": s["seq"], "status": s["status"], "flight_id": s["flight_id"], "flight_number": s["flight_number"],
        "origin": s["origin"], "destination": s["destination"], "departs_on": s["departs_on"], "departs_at": s["departs_at"],
        "days_to_departure": _days_until(db, s["departs_on"]), "flight_status": s["flight_status"], "delay_minutes": s["delay_minutes"],
        "cabin": s["cabin"], "seat": s["seat"], "fare_paid": _dollars(_cents(s["fare_paid"])), "distance_miles": s["distance_miles"],
        "miles_credited": bool(credited),
    }


# -- reads ------------------------------------------------------------------------------------------

@tool
def lookup_traveller(db: Db, email: str) -> dict[str, Any]:
    """Find a traveller (and Meridian Miles member) by the email address on their profile. Use it to identify the caller.

    Args:
        email: The email address the traveller gives (case does not matter).
    """
    row = db.one("SELECT * FROM travellers WHERE LOWER(email) = ?", email.strip().lower())
    if row is None:
        raise ToolError(f"no traveller with email {email.strip()!r}")
    return {"traveller_id": row["id"], "first_name": row["first_name"], "last_name": row["last_name"], "email": row["email"],
            "loyalty_number": row["loyalty_number"], "tier": row["tier"]}


@tool
def get_traveller_profile(db: Db, traveller_id: int) -> dict[str, Any]:
    """Get a traveller's profile: contact details, date of birth, Meridian Miles tier and balance, the last ledger entries,
    bookings (newest departure first) and travel credits.

    Args:
        traveller_id: The traveller's id (from lookup_traveller).
    """
    t = _traveller(db, traveller_id)
    bookings = db.query(
        "SELECT b.locator, b.status, b.fare_class, b.trip_type, b.booked_on, f.origin, f.destination, f.departs_on "
        "FROM bookings b JOIN flight_segments s ON s.booking_id = b.id AND s.seq = 1 JOIN flights f ON f.id = s.flight_id "
        "WHERE b.traveller_id = ? ORDER BY f.departs_on DESC, b.id DESC",
        traveller_id,
    )
    credits = db.query("SELECT * FROM travel_credits WHERE traveller_id = ? ORDER BY id", traveller_id)
    ledger = db.query(
        "SELECT id, segment_id, kind, miles, posted_on FROM mileage_entries WHERE traveller_id = ? ORDER BY posted_on DESC, id DESC LIMIT 10",
        traveller_id,
    )
    return {
        "traveller_id": t["id"], "first_name": t["first_name"], "last_name": t["last_name"], "email": t["email"], "phone": t["phone"],
        "date_of_birth": t["date_of_birth"], "loyalty_number": t["loyalty_number"], "tier": t["tier"], "miles_balance": t["miles_balance"],
        "member_since": t["member_since"],
        "recent_miles": [{"entry_id": e["id"], "segment_id": e["segment_id"], "kind": e["kind"], "miles": e["miles"], "posted_on": e["posted_on"]}
                         for e in ledger],
        "bookings": [{"locator": b["locator"], "status": b["status"], "fare_class": b["fare_class"], "trip_type": b["trip_type"],
                      "route": f"{b['origin']}-{b['destination']}", "departs_on": b["departs_on"], "booked_on": b["booked_on"]} for b in bookings],
        "travel_credits": [_credit_view(db, c) for c in credits],
    }


@tool
def get_booking(db: Db, locator: str) -> dict[str, Any]:
    """Get a booking by its record locator: traveller, fare class, status, each flight segment (flight, date, delay,
    cabin, seat, fare paid, whether miles were credited), payments and refunds, and travel credits issued for it.

    Args:
        locator: The six-character booking reference, e.g. "K7QX2M" (case does not matter).
    """
    b = _booking(db, locator)
    segments = _segments(db, b["id"])
    payments = db.query(
        "SELECT p.*, c.code FROM fare_payments p LEFT JOIN travel_credits c ON c.id = p.credit_id WHERE p.booking_id = ? ORDER BY p.id", b["id"]
    )
    credits = db.query("SELECT * FROM travel_credits WHERE booking_id = ? ORDER BY id", b["id"])
    upcoming = [s["departs_on"] for s in segments if s["status"] == "active"]
    return {
        "locator": b["locator"], "booking_id": b["id"], "traveller_id": b["traveller_id"], "fare_class": b["fare_class"],
        "trip_type": b["trip_type"], "status": b["status"], "booked_on": b["booked_on"],
        "cancelled_on": b["cancelled_on"], "cancel_reason": b["cancel_reason"],
        # Derived so the agent does not have to do date arithmetic.
        "days_to_first_departure": _days_until(db, min(upcoming)) if upcoming else None,
        "segments": [_segment_view(db, s) for s in segments],
        "payments": [{"kind": p["kind"], "method": p["method"], "card_last4": p["card_last4"], "credit_code": p["code"],
                      "purpose": p["purpose"], "amount": _dollars(_cents(p["amount"])), "posted_on": p["posted_on"]} for p in payments],
        "net_paid": _dollars(_net_paid(db, b["id"])),
        "travel_credits": [_credit_view(db, c) for c in credits],
    }


@tool
def search_flights(db: Db, origin: str, destination: str, departs_on: str) -> list[dict[str, Any]]:
    """List Meridian Air flights on a route and date, with seats left and today's standard-fare price in each cabin.

    Basic fares cost 0.8x and flex fares 1.3x the standard price shown.

    Args:
        origin: Three-letter airport code of departure, e.g. "DEN".
        destination: Three-letter airport code of arrival, e.g. "JFK".
        departs_on: Date of departure, ISO format, e.g. "2026-05-01".
    """
    day = _date(departs_on, "departs_on")
    rows = db.query(
        "SELECT * FROM flights WHERE origin = ? AND destination = ? AND departs_on = ? ORDER BY departs_at, id",
        origin.strip().upper(), destination.strip().upper(), day.isoformat(),
    )
    return [
        {"flight_id": f["id"], "flight_number": f["flight_number"], "origin": f["origin"], "destination": f["destination"],
         "departs_on": f["departs_on"], "departs_at": f["departs_at"], "duration_minutes": f["duration_minutes"], "status": f["status"],
         "standard_fares": {c: _dollars(_cents(f[f"fare_{c}"])) for c in CABINS},
         "seats_left": {c: f[f"seats_{c}"] for c in CABINS}}
        for f in rows
    ]


# -- writes -----------------------------------------------------------------------------------------

@tool(write=True)
def cancel_booking(db: Db, locator: str, reason: CancelReason, settlement: Settlement) -> dict[str, Any]:
    """Cancel a whole booking before its first flight and settle the money as a refund to the card or as a travel credit.

    What the system allows, counted from today to the first departure:
    - flex fares, or any fare when Meridian Air cancelled one of the booking's flights (reason flight_cancelled):
      everything paid, as a refund or a credit;
    - standard fares: a travel credit for everything paid, any time; a refund of everything paid minus the $100 fee
      only 14 or more days before departure;
    - basic fares: never a refund; a travel credit minus the $100 fee only 14 or more days before departure.
    Cancelling closes the day before departure, and partly flown trips cannot be cancelled. A refund goes back to
    the card; any part paid with a travel credit comes back as a new travel credit. Miles spent on upgrades are
    given back.

    Args:
        locator: The booking's six-character reference.
        reason: change_of_plans, illness, flight_cancelled (Meridian Air cancelled a flight of the booking), or other.
        settlement: refund (money back to the card) or travel_credit (a voucher in the traveller's name).
    """
    b = _booking(db, locator)
    if b["status"] == "cancelled":
        raise ToolError(f"booking {b['locator']} is already cancelled")
    segments = _segments(db, b["id"])
    if b["status"] == "completed" or any(s["status"] == "flown" for s in segments):
        raise ToolError(f"booking {b['locator']} has flights already flown: only unflown bookings can be cancelled")
    days = min(_days_until(db, s["departs_on"]) for s in segments)
    if days < 1:
        raise ToolError(f"booking {b['locator']} departs in {days} days: cancelling closes the day before departure")
    airline_cancelled = any(s["flight_status"] == "cancelled" for s in segments)
    if reason == "flight_cancelled" and not airline_cancelled:
        raise ToolError(f"no flight of booking {b['locator']} was cancelled by Meridian Air; choose another reason")

    paid, fee = _net_paid(db, b["id"]), _cents(CANCEL_FEE)
    fare = b["fare_class"]
    if reason == "flight_cancelled" or fare == "flex":
        due = paid
    elif fare == "standard":
        if settlement == "refund" and days < REFUND_DEADLINE_DAYS:
            raise ToolError(f"standard fares are refundable only {REFUND_DEADLINE_DAYS}+ days before departure ({days} left); "
                            "a travel credit is possible")
        due = paid - fee if settlement == "refund" else paid
    else:
        if settlement == "refund":
            raise ToolError("basic fares are non-refundable; a travel credit (less the $100 fee) is possible 14+ days before departure")
        if days < REFUND_DEADLINE_DAYS:
            raise ToolError(f"basic fares cannot be cancelled less than {REFUND_DEADLINE_DAYS} days before departure ({days} left)")
        due = paid - fee
    due = max(due, 0)

    today = db.today.isoformat()
    to_card = min(due, _net_paid(db, b["id"], "card")) if settlement == "refund" else 0
    out: dict[str, Any] = {"locator": b["locator"], "status": "cancelled", "reason": reason, "refunded_to_card": _dollars(to_card)}
    if to_card > 0:
        db.insert("fare_payments", booking_id=b["id"], kind="refund", method="card", card_last4=_card_of(db, b), credit_id=None,
                  purpose="cancellation", amount=_dollars(to_card), posted_on=today)
    out["travel_credit"] = _new_credit(db, b["traveller_id"], b["id"], "cancellation", due - to_card) if due - to_card > 0 else None
    reinstated = 0
    for e in db.query(
        "SELECT e.segment_id, e.miles FROM mileage_entries e JOIN flight_segments s ON s.id = e.segment_id "
        "WHERE s.booking_id = ? AND e.kind = 'upgrade_redemption' ORDER BY e.id", b["id"],
    ):
        _post_miles(db, b["traveller_id"], e["segment_id"], "redemption_reversal", -e["miles"])
        reinstated -= e["miles"]
    out["miles_reinstated"] = reinstated
    for s in segments:
        _release_seat(db, s["flight_id"], s["cabin"])
    db.execute("UPDATE flight_segments SET status = 'cancelled', seat = NULL WHERE booking_id = ?", b["id"])
    db.execute("UPDATE bookings SET status = 'cancelled', cancelled_on = ?, cancel_reason = ? WHERE id = ?", today, reason, b["id"])
    return out


@tool(write=True)
def change_flight(db: Db, segment_id: int, new_flight_id: int, waive_fee: bool = False, travel_credit_code: str | None = None) -> dict[str, Any]:
    """Move one flight segment to another Meridian Air flight on the same route (another date or time), same cabin.

    Basic fares cannot be changed. Standard fares pay the $75 change fee; flex fares pay none. If the new flight
    costs more than the fare paid for the segment, the difference is charged too; if it costs less, nothing is
    refunded. The amount due is charged to the booking's card, or first to a travel credit of the traveller when
    its code is given. Changes close the day before departure. The seat is released: assign a new one if wanted.

    Args:
        segment_id: The segment to move (see get_booking).
        new_flight_id: The flight to move it to (see search_flights).
        waive_fee: true to waive the $75 change fee (only where the policy allows it; flex fares have no fee to waive).
        travel_credit_code: Code of the traveller's travel credit to pay with, e.g. "MC-7KQ2XM"; omit to charge the card.
    """
    s, b = _changeable_segment(db, segment_id, "changing flights")
    new = _flight(db, new_flight_id)
    if new["id"] == s["flight_id"]:
        raise ToolError(f"segment {segment_id} is already on flight {new['flight_number']} of {new['departs_on']}")
    if (new["origin"], new["destination"]) != (s["origin"], s["destination"]):
        raise ToolError(f"flight {new['flight_number']} flies {new['origin']}-{new['destination']}, not {s['origin']}-{s['destination']}: "
                        "only the date or time can change")
    if new["status"] != "scheduled" or _days_until(db, new["departs_on"]) < 1:
        raise ToolError(f"flight {new['flight_number']} of {new['departs_on']} is {new['status']} and cannot be booked")
    for other in _segments(db, b["id"]):
        if other["id"] != s["id"] and other["status"] != "cancelled":
            if (other["seq"] > s["seq"] and other["departs_on"] < new["departs_on"]) or (other["seq"] < s["seq"] and other["departs_on"] > new["departs_on"]):
                raise ToolError(f"the new date {new['departs_on']} would put the outbound flight after the return flight")
    fee = 0 if b["fare_class"] == "flex" else _cents(CHANGE_FEE)
    if waive_fee:
        if fee == 0:
            raise ToolError("flex fares have no change fee to waive")
        fee = 0
    difference = max(0, _cents(fare_for(new, s["cabin"], b["fare_class"])) - _cents(s["fare_paid"]))
    due = fee + difference
    _take_seat(db, new["id"], s["cabin"])
    _release_seat(db, s["flight_id"], s["cabin"])

    today, from_credit = db.today.isoformat(), 0
    if travel_credit_code is not None:
        c = _credit(db, travel_credit_code)
        if c["traveller_id"] != b["traveller_id"]:
            raise ToolError(f"travel credit {c['code']} belongs to another traveller")
        if _cents(c["balance"]) <= 0 or c["expires_on"] < today:
            raise ToolError(f"travel credit {c['code']} has no balance left or has expired ({c['expires_on']})")
        if due == 0:
            raise ToolError("nothing is due for this change: keep the travel credit for later")
        from_credit = min(_cents(c["balance"]), due)
        left = _cents(c["balance"]) - from_credit
        db.execute("UPDATE travel_credits SET balance = ?, status = ? WHERE id = ?", _dollars(left), "active" if left else "used", c["id"])
        db.insert("fare_payments", booking_id=b["id"], kind="charge", method="travel_credit", card_last4=None, credit_id=c["id"],
                  purpose="flight_change", amount=_dollars(from_credit), posted_on=today)
    if due - from_credit > 0:
        db.insert("fare_payments", booking_id=b["id"], kind="charge", method="card", card_last4=_card_of(db, b), credit_id=None,
                  purpose="flight_change", amount=_dollars(due - from_credit), posted_on=today)
    db.execute("UPDATE flight_segments SET flight_id = ?, seat = NULL, fare_paid = ? WHERE id = ?",
               new["id"], _dollars(_cents(s["fare_paid"]) + difference), segment_id)
    return {"segment_id": segment_id, "flight_number": new["flight_number"], "departs_on": new["departs_on"], "departs_at": new["departs_at"],
            "change_fee": _dollars(fee), "fare_difference": _dollars(difference), "paid_with_credit": _dollars(from_credit),
            "charged_to_card": _dollars(due - from_credit), "seat": None}


@tool(write=True)
def upgrade_cabin(db: Db, segment_id: int, cabin: Cabin, pay_with: UpgradePayment) -> dict[str, Any]:
    """Move a segment to a higher cabin (economy < premium < business), paid by card or with Meridian Miles.

    By card, the traveller pays the difference between today's price of the new cabin for their fare class and the
    fare paid. With miles, the traveller's balance pays 15,000 miles economy to premium, 20,000 premium to business,
    35,000 economy to business. Basic fares cannot change cabin; changes close the day before departure. The seat is
    released: assign a new one in the new cabin if wanted.

    Args:
        segment_id: The segment to upgrade (see get_booking).
        cabin: The new, higher cabin: premium or business.
        pay_with: card (charge the fare difference to the booking's card) or miles (redeem the traveller's miles).
    """
    s, b = _changeable_segment(db, segment_id, "changing cabin")
    if CABINS.index(cabin) <= CABINS.index(s["cabin"]):
        raise ToolError(f"segment {segment_id} is in {s['cabin']}: {cabin} is not an upgrade"
                        + ("" if cabin == s["cabin"] else " (use downgrade_cabin)"))
    _take_seat(db, s["flight_id"], cabin)
    _release_seat(db, s["flight_id"], s["cabin"])
    out: dict[str, Any] = {"segment_id": segment_id, "old_cabin": s["cabin"], "cabin": cabin, "seat": None}
    fare_paid = _cents(s["fare_paid"])
    if pay_with == "card":
        price = _cents(fare_for(_flight(db, s["flight_id"]), cabin, b["fare_class"]))
        charge = max(0, price - fare_paid)
        if charge:
            db.insert("fare_payments", booking_id=b["id"], kind="charge", method="card", card_last4=_card_of(db, b), credit_id=None,
                      purpose="cabin_upgrade", amount=_dollars(charge), posted_on=db.today.isoformat())
        fare_paid += charge
        out["charged_to_card"] = _dollars(charge)
    else:
        cost = UPGRADE_MILES[(s["cabin"], cabin)]
        balance = db.scalar("SELECT miles_balance FROM travellers WHERE id = ?", b["traveller_id"])
        if balance < cost:
            raise ToolError(f"this upgrade costs {cost:,} miles but the traveller has {balance:,}")
        out["miles_redeemed"] = cost
        out["miles_balance"] = _post_miles(db, b["traveller_id"], segment_id, "upgrade_redemption", -cost)
    db.execute("UPDATE flight_segments SET cabin = ?, seat = NULL, fare_paid = ? WHERE id = ?", cabin, _dollars(fare_paid), segment_id)
    return out


@tool(write=True)
def downgrade_cabin(db: Db, segment_id: int, cabin: Cabin) -> dict[str, Any]:
    """Move a segment to a lower cabin. The difference between the fare paid and today's price of the lower cabin for
    the booking's fare class comes back as a travel credit (never to the card).

    Basic fares cannot change cabin; changes close the day before departure. The seat is released.

    Args:
        segment_id: The segment to downgrade (see get_booking).
        cabin: The new, lower cabin: economy or premium.
    """
    s, b = _changeable_segment(db, segment_id, "changing cabin")
    if CABINS.index(cabin) >= CABINS.index(s["cabin"]):
        raise ToolError(f"segment {segment_id} is in {s['cabin']}: {cabin} is not a downgrade"
                        + ("" if cabin == s["cabin"] else " (use upgrade_cabin)"))
    _take_seat(db, s["flight_id"], cabin)
    _release_seat(db, s["flight_id"], s["cabin"])
    price = _cents(fare_for(_flight(db, s["flight_id"]), cabin, b["fare_class"]))
    back = max(0, _cents(s["fare_paid"]) - price)
    credit = _new_credit(db, b["traveller_id"], b["id"], "downgrade", back) if back else None
    db.execute("UPDATE flight_segments SET cabin = ?, seat = NULL, fare_paid = ? WHERE id = ?",
               cabin, _dollars(min(price, _cents(s["fare_paid"]))), segment_id)
    return {"segment_id": segment_id, "old_cabin": s["cabin"], "cabin": cabin, "travel_credit": credit, "seat": None}


@tool(write=True)
def assign_seat(db: Db, segment_id: int, seat: str) -> dict[str, Any]:
    """Give a segment a specific seat, free of charge, up to the day of departure. Any fare class.

    Seat maps: business rows 1-4 (A, C, D, F); premium rows 10-13 (A-F); economy rows 20-45 (A-F). Rows 24 and 25
    are exit rows: only for travellers aged 15 or more on the day of the flight. The seat must be free.

    Args:
        segment_id: The segment (see get_booking).
        seat: Row number and letter, e.g. "22A".
    """
    s, b = _segment(db, segment_id)
    if b["status"] != "confirmed" or s["status"] != "active" or s["flight_status"] != "scheduled" or _days_until(db, s["departs_on"]) < 0:
        raise ToolError(f"segment {segment_id} ({s['flight_number']} on {s['departs_on']}) is not an upcoming flight: seats cannot be assigned")
    seat = seat.strip().upper()
    m = _SEAT.match(seat)
    rows, letters = SEAT_MAP[s["cabin"]]
    if not m or int(m.group(1)) not in rows or m.group(2) not in letters:
        raise ToolError(f"{seat!r} is not a {s['cabin']} seat: {s['cabin']} is rows {rows.start}-{rows.stop - 1}, seats {', '.join(letters)}")
    if s["seat"] == seat:
        raise ToolError(f"segment {segment_id} already has seat {seat}")
    taken = db.one("SELECT id FROM flight_segments WHERE flight_id = ? AND seat = ? AND status = 'active' AND id <> ?", s["flight_id"], seat, segment_id)
    if taken:
        raise ToolError(f"seat {seat} on {s['flight_number']} is taken")
    if int(m.group(1)) in EXIT_ROWS:
        born = db.scalar("SELECT date_of_birth FROM travellers WHERE id = ?", b["traveller_id"])
        if _age_on(born, dt.date.fromisoformat(s["departs_on"])) < MIN_EXIT_ROW_AGE:
            raise ToolError(f"row {m.group(1)} is an exit row: the traveller must be at least {MIN_EXIT_ROW_AGE} on the day of the flight")
    db.execute("UPDATE flight_segments SET seat = ? WHERE id = ?", seat, segment_id)
    return {"segment_id": segment_id, "flight_number": s["flight_number"], "departs_on": s["departs_on"], "old_seat": s["seat"], "seat": seat}


@tool(write=True)
def credit_missing_miles(db: Db, segment_id: int) -> dict[str, Any]:
    """Credit the Meridian Miles of a flown segment that never posted (claims up to 180 days after the flight).

    The miles are computed by the system: distance x cabin (economy 100%, premium 150%, business 200%) x fare
    (basic 50%, standard 100%, flex 150%), plus the tier bonus (silver 25%, gold 50%, platinum 100%).

    Args:
        segment_id: The flown segment whose miles are missing (see get_booking: miles_credited false).
    """
    s, b = _segment(db, segment_id)
    if s["status"] != "flown":
        raise ToolError(f"segment {segment_id} is {s['status']}: only flown flights earn miles")
    age = -_days_until(db, s["departs_on"])
    if age > MILES_CLAIM_DAYS:
        raise ToolError(f"flight {s['flight_number']} was {age} days ago: miles can be claimed up to {MILES_CLAIM_DAYS} days after the flight")
    if db.one("SELECT id FROM mileage_entries WHERE segment_id = ? AND kind = 'flight_accrual'", segment_id):
        raise ToolError(f"the miles of segment {segment_id} have already been credited")
    t = _traveller(db, b["traveller_id"])
    miles = accrual_miles(s["distance_miles"], s["cabin"], b["fare_class"], t["tier"])
    balance = _post_miles(db, t["id"], segment_id, "flight_accrual", miles)
    return {"segment_id": segment_id, "flight_number": s["flight_number"], "miles": miles, "miles_balance": balance}


@tool(write=True)
def issue_travel_credit(db: Db, traveller_id: int, locator: str, amount: float, reason: CreditReason) -> dict[str, Any]:
    """Issue a travel credit (voucher, valid 12 months) to a traveller for one of their bookings.

    At most one credit per booking and reason; no single credit above $1,000.00.

    Args:
        traveller_id: The traveller who receives the credit.
        locator: The traveller's booking the credit is for.
        amount: Dollars, e.g. 100.0.
        reason: delay_compensation (a late arrival, see the policy) or goodwill.
    """
    _traveller(db, traveller_id)
    booking_id = _booking_of_traveller(db, locator, traveller_id)
    cents = _cents(amount)
    if cents <= 0:
        raise ToolError("the credit amount must be positive")
    if abs(amount * 100 - cents) > 1e-6:
        raise ToolError(f"{amount} is not a whole number of cents")
    if cents > _cents(MAX_CREDIT):
        raise ToolError(f"no single travel credit can exceed ${MAX_CREDIT:,.2f}")
    existing = db.one("SELECT code FROM travel_credits WHERE booking_id = ? AND reason = ?", booking_id, reason)
    if existing:
        raise ToolError(f"booking {locator.strip().upper()} already has a {reason} credit ({existing['code']})")
    return {**_new_credit(db, traveller_id, booking_id, reason, cents), "reason": reason}


@tool(write=True)
def extend_travel_credit(db: Db, code: str, new_expires_on: str) -> dict[str, Any]:
    """Push back the expiry date of a travel credit. A credit can be extended once, by at most 180 days, while it has a
    balance and is active or expired no more than 30 days ago; an expired credit becomes active again.

    Args:
        code: The credit's code, e.g. "MC-7KQ2XM".
        new_expires_on: The new expiry date, ISO format, e.g. "2026-09-30".
    """
    c = _credit(db, code)
    new = _date(new_expires_on, "new_expires_on")
    old = dt.date.fromisoformat(c["expires_on"])
    if c["extended"]:
        raise ToolError(f"travel credit {c['code']} has already been extended once")
    if _cents(c["balance"]) <= 0:
        raise ToolError(f"travel credit {c['code']} has no balance left")
    if (db.today - old).days > CREDIT_REVIVAL_DAYS:
        raise ToolError(f"travel credit {c['code']} expired on {c['expires_on']}, more than {CREDIT_REVIVAL_DAYS} days ago")
    if not old < new <= old + dt.timedelta(days=CREDIT_EXTENSION_MAX_DAYS):
        raise ToolError(f"the new expiry date must be after {old} and at most {CREDIT_EXTENSION_MAX_DAYS} days later")
    db.execute("UPDATE travel_credits SET expires_on = ?, extended = 1, status = 'active' WHERE id = ?", new.isoformat(), c["id"])
    return {"code": c["code"], "old_expires_on": c["expires_on"], "expires_on": new.isoformat(), "balance": _dollars(_cents(c["balance"]))}


@tool(write=True)
def add_travel_note(db: Db, traveller_id: int, body: str, locator: str | None = None) -> dict[str, Any]:
    """Add a note to a traveller's profile, e.g. to record a request you refused and why.

    Args:
        traveller_id: The traveller the note is about.
        body: The note, in your words.
        locator: The traveller's booking the note concerns, if any.
    """
    _traveller(db, traveller_id)
    booking_id = _booking_of_traveller(db, locator, traveller_id)
    note_id = db.insert("travel_notes", traveller_id=traveller_id, booking_id=booking_id, body=_text(body, "body"),
                        created_on=db.today.isoformat())
    return {"note_id": note_id, "traveller_id": traveller_id, "booking_id": booking_id}


@tool(write=True)
def escalate_travel_case(db: Db, traveller_id: int, category: EscalationCategory, reason: str, locator: str | None = None) -> dict[str, Any]:
    """Hand a case to a supervisor: compensation above your limit, a security concern, or a traveller asking for an exception.

    Args:
        traveller_id: The traveller concerned.
        category: compensation_approval, account_security, or policy_exception.
        reason: What the supervisor needs to know, in your words (include amounts).
        locator: The traveller's booking concerned, if any.
    """
    _traveller(db, traveller_id)
    booking_id = _booking_of_traveller(db, locator, traveller_id)
    for e in db.query(
        "SELECT id, booking_id FROM travel_escalations WHERE traveller_id = ? AND category = ? AND status = 'open' ORDER BY id",
        traveller_id, category,
    ):
        if e["booking_id"] == booking_id:  # compared here: `=` never matches NULL and `IS` is not portable
            raise ToolError(f"escalation #{e['id']} is already open for this case")
    escalation_id = db.insert("travel_escalations", traveller_id=traveller_id, booking_id=booking_id, category=category, status="open",
                              reason=_text(reason, "reason"), created_on=db.today.isoformat())
    return {"escalation_id": escalation_id, "category": category, "status": "open", "booking_id": booking_id}
