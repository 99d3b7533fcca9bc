"""The bundled `travel` benchmark domain: its seed's rules, its tools' rules and its tasks' shape.

Tools run through `Toolset.call` on SQLite sandboxes of the engine (`SqliteBackend`), each test on its
own copy of the seeded world plus a patch that sets up the situation it needs. The patches are built
with the task generator's own `restate` (a clean booking moved onto fresh flights), so the tests use
the same kind of worlds the tasks do. The checks every domain passes are in
tests/domains/test_every_domain.py.
"""

from __future__ import annotations

import collections
import copy
import datetime as dt
import random
from typing import Any

import pytest
from domain_testing import FAMILIES, open_sandbox
from domain_testing import Desk as SandboxDesk

INJECTION = "x'); DROP TABLE bookings; --"
WRITES = {
    "cancel_booking",
    "change_flight",
    "upgrade_cabin",
    "downgrade_cabin",
    "assign_seat",
    "credit_missing_miles",
    "issue_travel_credit",
    "extend_travel_credit",
    "add_travel_note",
    "escalate_travel_case",
}


@pytest.fixture(scope="module")
def taskgen(domain_module):
    return domain_module("taskgen")


@pytest.fixture(scope="module")
def rules(domain_module):
    return domain_module("tools")


class Desk(SandboxDesk):
    """A desk on its own sandbox of the seed plus `patch`."""

    def __init__(self, domain, engine, patch: dict | None = None):
        super().__init__(domain, open_sandbox(domain, engine, patch))


class Scene:
    """A situation built with the task generator's helpers: the patch, and the booking, traveller and legs it set up."""

    def __init__(self, taskgen, world, domain, seed: int = 7):
        self.taskgen = taskgen
        self.g = taskgen.Generator(copy.deepcopy(world), domain.config.today, random.Random(seed))
        self.patch = taskgen.Patch()

    def trip(
        self, *, fare: str = "standard", cabin: str = "economy", days=((20, 40), (45, 60)), trip: str | None = None, **kw: Any
    ) -> tuple[dict, dict, list]:
        b = self.g.pick_booking(trip=trip)
        legs = self.g.restate(b, self.patch, fare_class=fare, cabin=cabin, days=list(days), **kw)
        return b, self.g.traveller(b), legs

    def desk(self, domain, engine) -> Desk:
        return Desk(domain, engine, self.patch.to_dict())


@pytest.fixture
def scene(taskgen, world, domain) -> Scene:
    return Scene(taskgen, world, domain)


# -- schema and seed --------------------------------------------------------------------------------


def test_schema_size(domain):
    assert 6 <= len(domain.tables) <= 9


def test_seed_agrees_with_the_business_date_and_scales(domain, domain_module):
    seed = domain_module("seed")
    assert domain.config.today == seed.TODAY
    small, big = seed.generate(random.Random(1), scale=0.25), seed.generate(random.Random(1), scale=2.0)
    assert len(small["bookings"]) < len(big["bookings"]) and len(small["travellers"]) < len(big["travellers"])


def test_seed_follows_the_rules(domain, world, rules):
    flights = {f["id"]: f for f in world["flights"]}
    bookings = {b["id"]: b for b in world["bookings"]}
    travellers = {t["id"]: t for t in world["travellers"]}
    segments = {s["id"]: s for s in world["flight_segments"]}
    ledger: dict[int, int] = collections.Counter()
    for e in world["mileage_entries"]:
        ledger[e["traveller_id"]] += e["miles"]
        if e["kind"] == "flight_accrual":  # accruals are what credit_missing_miles would have computed
            s = segments[e["segment_id"]]
            b = bookings[s["booking_id"]]
            assert e["miles"] == rules.accrual_miles(
                flights[s["flight_id"]]["distance_miles"], s["cabin"], b["fare_class"], travellers[b["traveller_id"]]["tier"]
            )
    for t in world["travellers"]:
        assert t["miles_balance"] == ledger[t["id"]] >= 0, t["id"]
    for c in world["travel_credits"]:
        assert c["code"] == rules.credit_code(c["id"])
    seats = collections.Counter((s["flight_id"], s["seat"]) for s in world["flight_segments"] if s["seat"] and s["status"] == "active")
    assert max(seats.values()) == 1, "two active segments hold the same seat"
    today = domain.config.today.isoformat()
    for s in world["flight_segments"]:
        assert (s["status"] == "flown") == (flights[s["flight_id"]]["departs_on"] < today and bookings[s["booking_id"]]["status"] != "cancelled")
    assert len({rules.credit_code(i) for i in range(1, 5000)}) == 4999


# -- tools: shape and safety ------------------------------------------------------------------------


def test_toolset_shape(domain):
    tools = domain.tools
    assert 8 <= len(tools.names()) <= 15
    assert {n for n in tools.names() if tools[n].write} == WRITES


def test_bad_arguments_and_injection_are_inert(domain, engine, world):
    desk = Desk(domain, engine)
    t = world["travellers"][0]
    assert "unknown tool" in desk.call("drop_everything").content
    desk.refused("get_booking", "no booking", locator=INJECTION)
    desk.refused("lookup_traveller", "no traveller", email=INJECTION)
    desk.refused("cancel_booking", "invalid arguments", locator="ABCDEF", reason=INJECTION, settlement="refund")
    desk.refused("assign_seat", "invalid arguments", segment_id=INJECTION, seat="22A")
    desk.refused("get_traveller_profile", "invalid arguments", traveller_id=1, extra=1)
    desk.refused("upgrade_cabin", "invalid arguments", segment_id=1, cabin="first", pay_with="card")
    desk.refused("assign_seat", "not a", segment_id=next(s["id"] for s in world["flight_segments"] if s["status"] == "active"), seat=INJECTION)
    assert desk.ok("search_flights", origin=INJECTION, destination="JFK", departs_on="2026-05-01") == []
    desk.refused("extend_travel_credit", "no travel credit", code=INJECTION, new_expires_on="2026-09-01")
    # A note body is data: stored verbatim, the table it names is untouched.
    note = desk.ok("add_travel_note", traveller_id=t["id"], body=INJECTION)
    assert desk.db.scalar("SELECT body FROM travel_notes WHERE id = ?", note["note_id"]) == INJECTION
    assert desk.count("bookings") == len(world["bookings"])


# -- tools: reads -----------------------------------------------------------------------------------


def test_reads(domain, engine, world):
    desk = Desk(domain, engine)
    t = world["travellers"][0]
    found = desk.ok("lookup_traveller", email=f"  {t['email'].upper()} ")
    assert found["traveller_id"] == t["id"] and found["tier"] == t["tier"]
    profile = desk.ok("get_traveller_profile", traveller_id=t["id"])
    assert profile["miles_balance"] == t["miles_balance"] and len(profile["recent_miles"]) <= 10
    assert {b["locator"] for b in profile["bookings"]} == {b["locator"] for b in world["bookings"] if b["traveller_id"] == t["id"]}
    b = next(b for b in world["bookings"] if b["trip_type"] == "round_trip" and b["status"] == "completed")
    view = desk.ok("get_booking", locator=b["locator"].lower())
    assert view["traveller_id"] == b["traveller_id"] and [s["seq"] for s in view["segments"]] == [1, 2]
    assert view["days_to_first_departure"] is None and all(s["status"] == "flown" for s in view["segments"])
    f = next(f for f in world["flights"] if f["status"] == "scheduled")
    hits = desk.ok("search_flights", origin=f["origin"].lower(), destination=f["destination"], departs_on=f["departs_on"])
    assert [h["flight_id"] for h in hits] == [f["id"]] and hits[0]["standard_fares"]["business"] == f["fare_business"]
    desk.refused("search_flights", "ISO date", origin="DEN", destination="JFK", departs_on="May 1st")
    desk.refused("get_traveller_profile", "no traveller", traveller_id=999999)


# -- tools: writes ----------------------------------------------------------------------------------


def test_cancel_booking_follows_the_fare_rules(domain, engine, scene, rules):
    flex, ft, _ = scene.trip(fare="flex", days=((3, 10), (12, 20)))
    std_late, _, _ = scene.trip(fare="standard", days=((3, 10), (12, 20)))
    std_early, _, std_legs = scene.trip(fare="standard", days=((20, 40), (45, 60)))
    basic_late, _, _ = scene.trip(fare="basic", days=((3, 10), (12, 20)))
    airline, _, _ = scene.trip(fare="basic", days=((3, 10), (12, 20)), statuses=["cancelled", None])
    flown, _, _ = scene.trip(fare="flex", days=((-20, -10), (5, 20)), trip="round_trip")
    desk = scene.desk(domain, engine)

    out = desk.ok("cancel_booking", locator=flex["locator"], reason="illness", settlement="refund")
    paid = desk.db.scalar("SELECT amount FROM fare_payments WHERE booking_id = ? AND kind = 'charge'", flex["id"])
    assert out["refunded_to_card"] == pytest.approx(paid) and out["travel_credit"] is None
    assert desk.row("SELECT status, cancel_reason, cancelled_on FROM bookings WHERE id = ?", flex["id"]) == {
        "status": "cancelled",
        "cancel_reason": "illness",
        "cancelled_on": domain.config.today.isoformat(),
    }
    assert desk.count("flight_segments", "booking_id = ? AND status = 'cancelled' AND seat IS NULL", flex["id"]) == desk.count(
        "flight_segments", "booking_id = ?", flex["id"]
    )
    desk.refused("cancel_booking", "already cancelled", locator=flex["locator"], reason="illness", settlement="refund")

    desk.refused("cancel_booking", "refundable only 14+", locator=std_late["locator"], reason="other", settlement="refund")
    credit = desk.ok("cancel_booking", locator=std_late["locator"], reason="other", settlement="travel_credit")["travel_credit"]
    assert desk.row("SELECT reason, balance, status FROM travel_credits WHERE code = ?", credit["code"]) == {
        "reason": "cancellation",
        "balance": credit["amount"],
        "status": "active",
    }

    seat_flight = std_legs[0].flight["id"]
    seats_before = desk.db.scalar("SELECT seats_economy FROM flights WHERE id = ?", seat_flight)
    out = desk.ok("cancel_booking", locator=std_early["locator"], reason="change_of_plans", settlement="refund")
    total = desk.db.scalar("SELECT amount FROM fare_payments WHERE booking_id = ? AND kind = 'charge'", std_early["id"])
    assert out["refunded_to_card"] == pytest.approx(round(total - rules.CANCEL_FEE, 2))
    assert desk.db.scalar("SELECT seats_economy FROM flights WHERE id = ?", seat_flight) == seats_before + 1

    desk.refused("cancel_booking", "non-refundable", locator=basic_late["locator"], reason="other", settlement="refund")
    desk.refused("cancel_booking", "less than 14 days", locator=basic_late["locator"], reason="other", settlement="travel_credit")
    desk.refused("cancel_booking", "no flight", locator=basic_late["locator"], reason="flight_cancelled", settlement="refund")
    out = desk.ok("cancel_booking", locator=airline["locator"], reason="flight_cancelled", settlement="refund")
    assert out["refunded_to_card"] > 0  # basic fare, 3-10 days out: everything back because the airline cancelled
    desk.refused("cancel_booking", "already flown", locator=flown["locator"], reason="other", settlement="refund")


def test_change_flight(domain, engine, scene, rules):
    b, t, legs = scene.trip(fare="standard", days=((20, 30), (45, 60)), trip="round_trip", seated=True)
    leg = legs[0]
    new = scene.g.new_flight(scene.patch, leg.flight, 10, 19)
    scene.g.reprice(new, leg.flight, 1.3)
    late = scene.g.new_flight(scene.patch, leg.flight, 70, 90)  # after the return flight
    credit = scene.g.new_credit(scene.patch, t, amount=50.0, expires_in=100)
    basic, _, basic_legs = scene.trip(fare="basic")
    flex, _, flex_legs = scene.trip(fare="flex", trip="one_way")
    desk = scene.desk(domain, engine)

    desk.refused("change_flight", "already on", segment_id=leg.id, new_flight_id=leg.flight["id"])
    desk.refused("change_flight", "outbound flight after the return", segment_id=leg.id, new_flight_id=late["id"])
    desk.refused("change_flight", "only the date or time", segment_id=legs[1].id, new_flight_id=new["id"])
    desk.refused("change_flight", "basic fares cannot be changed", segment_id=basic_legs[0].id, new_flight_id=new["id"])
    desk.refused("change_flight", "no flight", segment_id=leg.id, new_flight_id=999999)
    out = desk.ok("change_flight", segment_id=leg.id, new_flight_id=new["id"], travel_credit_code=credit["code"].lower())
    difference = round(rules.fare_for(new, "economy", "standard") - leg.fare_paid, 2)
    assert out["change_fee"] == rules.CHANGE_FEE and out["fare_difference"] == pytest.approx(difference)
    assert out["paid_with_credit"] == 50.0 and out["charged_to_card"] == pytest.approx(round(rules.CHANGE_FEE + difference - 50, 2))
    assert desk.row("SELECT flight_id, seat FROM flight_segments WHERE id = ?", leg.id) == {"flight_id": new["id"], "seat": None}
    assert desk.row("SELECT balance, status FROM travel_credits WHERE id = ?", credit["id"]) == {"balance": 0.0, "status": "used"}
    desk.refused("change_flight", "already on", segment_id=leg.id, new_flight_id=new["id"])

    flex_new = scene.g.new_flight(scene.patch, flex_legs[0].flight, 50, 90)
    desk = scene.desk(domain, engine)
    desk.refused("change_flight", "no change fee to waive", segment_id=flex_legs[0].id, new_flight_id=flex_new["id"], waive_fee=True)
    desk.refused("change_flight", "another traveller", segment_id=flex_legs[0].id, new_flight_id=flex_new["id"], travel_credit_code=credit["code"])


def test_cabin_changes(domain, engine, scene, rules):
    b, t, legs = scene.trip(fare="flex", cabin="economy", trip="one_way", seated=True)
    scene.g.set_miles(scene.patch, t, 16000)
    rich, _, rich_legs = scene.trip(fare="standard", cabin="economy", trip="one_way")
    top, _, top_legs = scene.trip(fare="standard", cabin="business", trip="one_way", drift=[1.0, 1.0])
    basic, _, basic_legs = scene.trip(fare="basic", cabin="economy", trip="one_way")
    desk = scene.desk(domain, engine)
    seg = legs[0].id

    desk.refused("upgrade_cabin", "not an upgrade", segment_id=seg, cabin="economy", pay_with="card")
    desk.refused("upgrade_cabin", "costs 35,000 miles", segment_id=seg, cabin="business", pay_with="miles")
    desk.refused("upgrade_cabin", "basic fares cannot be changed", segment_id=basic_legs[0].id, cabin="premium", pay_with="card")
    out = desk.ok("upgrade_cabin", segment_id=seg, cabin="premium", pay_with="miles")
    assert out["miles_redeemed"] == 15000 and out["miles_balance"] == 1000
    assert desk.row("SELECT cabin, seat FROM flight_segments WHERE id = ?", seg) == {"cabin": "premium", "seat": None}
    assert desk.count("mileage_entries", "segment_id = ? AND kind = 'upgrade_redemption' AND miles = -15000", seg) == 1
    desk.refused("upgrade_cabin", "not an upgrade", segment_id=seg, cabin="premium", pay_with="miles")

    out = desk.ok("upgrade_cabin", segment_id=rich_legs[0].id, cabin="business", pay_with="card")
    price = rules.fare_for(rich_legs[0].flight, "business", "standard")
    assert out["charged_to_card"] == pytest.approx(round(price - rich_legs[0].fare_paid, 2))
    assert desk.db.scalar("SELECT fare_paid FROM flight_segments WHERE id = ?", rich_legs[0].id) == pytest.approx(price)

    desk.refused("downgrade_cabin", "not a downgrade", segment_id=top_legs[0].id, cabin="business")
    out = desk.ok("downgrade_cabin", segment_id=top_legs[0].id, cabin="economy")
    back = round(top_legs[0].fare_paid - rules.fare_for(top_legs[0].flight, "economy", "standard"), 2)
    assert out["travel_credit"]["amount"] == pytest.approx(back)
    assert desk.row("SELECT reason, booking_id FROM travel_credits WHERE code = ?", out["travel_credit"]["code"]) == {
        "reason": "downgrade",
        "booking_id": top["id"],
    }

    # Cancelling gives back the miles spent on the upgrade.
    desk.ok("cancel_booking", locator=b["locator"], reason="change_of_plans", settlement="travel_credit")
    assert desk.db.scalar("SELECT miles_balance FROM travellers WHERE id = ?", t["id"]) == 16000


def test_assign_seat(domain, engine, scene, world):
    b, t, legs = scene.trip(fare="basic", cabin="economy", trip="round_trip", days=((3, 20), (25, 40)))
    other, _, other_legs = scene.trip(fare="standard", cabin="premium", days=((3, 20), (25, 40)), trip="round_trip")
    past, _, past_legs = scene.trip(fare="standard", days=((-30, -10), (-8, -2)))
    child = next(x for x in world["travellers"] if scene.taskgen._age_on(x["date_of_birth"], scene.g.today) < 13)
    scene.patch.set("travellers", {"id": t["id"], "date_of_birth": child["date_of_birth"]})
    desk = scene.desk(domain, engine)
    seg = legs[0].id

    out = desk.ok("assign_seat", segment_id=seg, seat=" 22a ")
    assert out["seat"] == "22A" and desk.db.scalar("SELECT seat FROM flight_segments WHERE id = ?", seg) == "22A"
    desk.refused("assign_seat", "already has seat 22A", segment_id=seg, seat="22A")
    desk.refused("assign_seat", "not a economy seat", segment_id=seg, seat="2A")
    desk.refused("assign_seat", "not a economy seat", segment_id=seg, seat="22G")
    desk.refused("assign_seat", "exit row", segment_id=seg, seat="24C")
    desk.refused("assign_seat", "not a premium seat", segment_id=other_legs[0].id, seat="22A")
    desk.ok("assign_seat", segment_id=other_legs[0].id, seat="11B")
    desk.refused("assign_seat", "not an upcoming flight", segment_id=past_legs[0].id, seat="22A")
    # Another traveller on the same flight holds 30C: it is taken.
    desk.db.execute("UPDATE flight_segments SET flight_id = ?, seat = '30C' WHERE id = ?", legs[0].flight["id"], other_legs[1].id)
    desk.refused("assign_seat", "taken", segment_id=seg, seat="30C")


def test_credit_missing_miles(domain, engine, scene, rules):
    b, t, legs = scene.trip(fare="flex", cabin="business", days=((-100, -50), (-40, -5)), trip="round_trip", accrue=False)
    old, _, old_legs = scene.trip(fare="standard", days=((-230, -200), (-190, -185)), accrue=False)
    upcoming, _, up_legs = scene.trip(fare="standard")
    desk = scene.desk(domain, engine)
    before = desk.db.scalar("SELECT miles_balance FROM travellers WHERE id = ?", t["id"])

    out = desk.ok("credit_missing_miles", segment_id=legs[1].id)
    miles = rules.accrual_miles(legs[1].flight["distance_miles"], "business", "flex", t["tier"])
    assert out["miles"] == miles and out["miles_balance"] == before + miles
    assert desk.row("SELECT kind, miles, posted_on FROM mileage_entries WHERE segment_id = ?", legs[1].id) == {
        "kind": "flight_accrual",
        "miles": miles,
        "posted_on": domain.config.today.isoformat(),
    }
    desk.refused("credit_missing_miles", "already been credited", segment_id=legs[1].id)
    desk.refused("credit_missing_miles", "up to 180 days", segment_id=old_legs[0].id)
    desk.refused("credit_missing_miles", "only flown flights", segment_id=up_legs[0].id)
    assert rules.accrual_miles(1000, "economy", "basic", "blue") == 500
    assert rules.accrual_miles(1000, "business", "flex", "platinum") == 6000


def test_issue_travel_credit(domain, engine, scene, world):
    b, t, legs = scene.trip(fare="standard", days=((-30, -10), (-8, -2)), delays=[200, 0])
    stranger = next(x for x in world["travellers"] if x["id"] != t["id"])
    desk = scene.desk(domain, engine)

    desk.refused(
        "issue_travel_credit", "does not belong", traveller_id=stranger["id"], locator=b["locator"], amount=100.0, reason="delay_compensation"
    )
    desk.refused("issue_travel_credit", "can exceed", traveller_id=t["id"], locator=b["locator"], amount=1000.01, reason="goodwill")
    desk.refused("issue_travel_credit", "whole number of cents", traveller_id=t["id"], locator=b["locator"], amount=10.005, reason="goodwill")
    desk.refused("issue_travel_credit", "positive", traveller_id=t["id"], locator=b["locator"], amount=0, reason="goodwill")
    out = desk.ok("issue_travel_credit", traveller_id=t["id"], locator=b["locator"].lower(), amount=100, reason="delay_compensation")
    assert desk.row(
        "SELECT traveller_id, booking_id, amount, balance, reason, expires_on, extended FROM travel_credits WHERE code = ?", out["code"]
    ) == {
        "traveller_id": t["id"],
        "booking_id": b["id"],
        "amount": 100.0,
        "balance": 100.0,
        "reason": "delay_compensation",
        "expires_on": (domain.config.today + dt.timedelta(days=365)).isoformat(),
        "extended": 0,
    }
    desk.refused(
        "issue_travel_credit",
        "already has a delay_compensation credit",
        traveller_id=t["id"],
        locator=b["locator"],
        amount=100,
        reason="delay_compensation",
    )
    desk.ok("issue_travel_credit", traveller_id=t["id"], locator=b["locator"], amount=25, reason="goodwill")  # another reason is real


def test_extend_travel_credit(domain, engine, scene):
    t = scene.g.pick_traveller(lambda t: True)
    live = scene.g.new_credit(scene.patch, t, amount=100.0, expires_in=10)
    lapsed = scene.g.new_credit(scene.patch, t, amount=100.0, expires_in=-20)
    dead = scene.g.new_credit(scene.patch, t, amount=100.0, expires_in=-45)
    desk = scene.desk(domain, engine)
    expiry = dt.date.fromisoformat(live["expires_on"])

    desk.refused("extend_travel_credit", "at most 180 days", code=live["code"], new_expires_on=(expiry + dt.timedelta(days=181)).isoformat())
    desk.refused("extend_travel_credit", "must be after", code=live["code"], new_expires_on=live["expires_on"])
    desk.refused("extend_travel_credit", "ISO date", code=live["code"], new_expires_on="next year")
    new = (expiry + dt.timedelta(days=90)).isoformat()
    assert desk.ok("extend_travel_credit", code=live["code"], new_expires_on=new)["expires_on"] == new
    assert desk.row("SELECT expires_on, extended, status FROM travel_credits WHERE id = ?", live["id"]) == {
        "expires_on": new,
        "extended": 1,
        "status": "active",
    }
    desk.refused("extend_travel_credit", "already been extended", code=live["code"], new_expires_on=new)
    revived = (dt.date.fromisoformat(lapsed["expires_on"]) + dt.timedelta(days=90)).isoformat()
    desk.ok("extend_travel_credit", code=lapsed["code"], new_expires_on=revived)
    assert desk.db.scalar("SELECT status FROM travel_credits WHERE id = ?", lapsed["id"]) == "active"
    desk.refused("extend_travel_credit", "more than 30 days ago", code=dead["code"], new_expires_on=domain.config.today.isoformat())


def test_notes_and_escalations(domain, engine, scene, world):
    b, t, _ = scene.trip()
    other = next(x for x in world["bookings"] if x["traveller_id"] != t["id"])
    desk = scene.desk(domain, engine)

    n = desk.ok("add_travel_note", traveller_id=t["id"], body="Refused: basic fare.", locator=b["locator"])
    assert desk.row("SELECT traveller_id, booking_id FROM travel_notes WHERE id = ?", n["note_id"]) == {
        "traveller_id": t["id"],
        "booking_id": b["id"],
    }
    assert desk.ok("add_travel_note", traveller_id=t["id"], body="General remark.")["booking_id"] is None
    desk.refused("add_travel_note", "must not be empty", traveller_id=t["id"], body="  ")
    desk.refused("add_travel_note", "does not belong", traveller_id=t["id"], body="x", locator=other["locator"])
    e = desk.ok("escalate_travel_case", traveller_id=t["id"], category="account_security", reason="Did not book it.", locator=b["locator"])
    assert desk.db.scalar("SELECT status FROM travel_escalations WHERE id = ?", e["escalation_id"]) == "open"
    desk.refused("escalate_travel_case", "already open", traveller_id=t["id"], category="account_security", reason="again", locator=b["locator"])
    desk.ok("escalate_travel_case", traveller_id=t["id"], category="policy_exception", reason="Wants an exception.", locator=b["locator"])
    desk.ok("escalate_travel_case", traveller_id=t["id"], category="account_security", reason="Profile-wide concern.")


# -- tasks ------------------------------------------------------------------------------------------


def test_tasks_load_with_every_family(domain):
    tasks = domain.tasks
    assert len(tasks) >= 60
    families = collections.Counter(t.family for t in tasks)
    assert set(families) == set(FAMILIES) and min(families.values()) >= 6, families
    calls = [len(t.gold) for t in tasks]
    assert min(calls) <= 2 and max(calls) == 8, "difficulty must range from a call or two up to eight"
    for t in tasks:
        assert t.split == "bench"
        if t.family == "policy_refusal":
            assert t.gold[-1].tool in ("add_travel_note", "escalate_travel_case"), f"{t.id}: a refusal must leave a record"
