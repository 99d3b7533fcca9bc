"""Deterministic seed for the banking world.

`generate(rng, scale)` returns rows per table in foreign-key order. Every draw comes from `rng`, and
dates are computed from the fixed business date `TODAY`, so the same seed gives the same world on
every machine. `scale` multiplies the number of account holders and everything that hangs off them.

Each holder's last `HISTORY_DAYS` days are *simulated*: paydays, card purchases, ATM withdrawals,
bill payments, transfers, interest and fees are applied in date order, so every ledger entry's
`balance_after` is the true running balance, overdraft fees follow real overdrafts, and each
account's `balance` is the last of them. Ledger ids grow with the posting date (the ledger's order
is (posted_on, id), which lets task patches slot past entries in with higher ids).
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import random
from pathlib import Path
from typing import Any

from groundstate.domains._kit import (
    FIRST_NAMES,
    LAST_NAMES,
    People,
    Rows,
    business_date,
    digits,
    end_of_month,
    group_by,
    iso,
    phone,
    renumber,
    round_money,
    routing_number,
    scaled,
    unique,
)

TODAY = business_date(Path(__file__).parent)
HISTORY_DAYS = 90
BANK_NAME = "Ridgeline Bank"

EMPLOYERS = [
    "Alder Logistics",
    "Brightline Health",
    "Cobalt Software",
    "Delta Ridge Schools",
    "Evergreen Foods",
    "Foxglove Media",
    "Granite Construction Co",
    "Harborview Hospital",
    "Ironwood Manufacturing",
    "Juniper Retail Group",
]

# (merchant, lowest amount, highest amount)
MERCHANTS = [
    ("Greenleaf Grocers", 18.0, 165.0),
    ("Harbor Fuel", 25.0, 78.0),
    ("Corner Bean Cafe", 4.0, 15.0),
    ("Lumen Electronics", 40.0, 900.0),
    ("Pinewood Pharmacy", 8.0, 60.0),
    ("Bella Cucina", 25.0, 140.0),
    ("Quickride Taxi", 9.0, 46.0),
    ("Northside Hardware", 12.0, 220.0),
    ("Skyway Airlines", 120.0, 780.0),
    ("Maple Street Books", 10.0, 60.0),
    ("Urban Threads", 25.0, 185.0),
    ("Sunrise Bakery", 5.0, 30.0),
    ("PetPals Supply", 15.0, 110.0),
    ("Oakridge Cinema", 12.0, 48.0),
    ("HomeNest Furnishings", 60.0, 1200.0),
    ("Blue Harbor Seafood", 30.0, 160.0),
    ("QuickMart", 3.0, 40.0),
    ("Streamly", 15.99, 15.99),
    ("FitLife Gym", 49.99, 49.99),
    ("Cloudbox Storage", 9.99, 9.99),
]
# Companies people pay every month: (name, nickname, lowest, highest)
COMPANY_PAYEES = [
    ("Cedar Grove Apartments", "rent", 1150.0, 2600.0),
    ("Lakeside Property Management", "rent", 1300.0, 2900.0),
    ("Metro Power & Light", "electric", 55.0, 230.0),
    ("Clearwater Utilities", "water", 30.0, 95.0),
    ("Summit Auto Finance", "car loan", 240.0, 540.0),
    ("Brightwave Internet", "internet", 49.0, 110.0),
    ("Pioneer Mutual Insurance", "insurance", 90.0, 260.0),
    ("Westbrook Student Loans", "student loan", 150.0, 420.0),
]
PERSON_NICKNAMES = ["mom", "dad", "sister", "brother", "roommate", "babysitter", "landlord"]
# Routing-number prefixes of the other banks payees use; the check digit is computed (ABA checksum).
ROUTING_PREFIXES = [
    "02100002",
    "07100001",
    "12100035",
    "03100009",
    "06100015",
    "11100002",
    "04400001",
    "26107359",
    "09100002",
    "05300053",
    "08100001",
    "32227162",
]

FEES = {"overdraft": 35.00, "monthly_service": 12.00, "atm": 3.00, "wire": 25.00, "card_expedite": 25.00, "late_payment": 29.00}
FEE_LABELS = {
    "overdraft": "Overdraft fee",
    "monthly_service": "Monthly service fee",
    "atm": "Out-of-network ATM fee",
    "wire": "Outgoing wire fee",
    "card_expedite": "Expedited card delivery fee",
    "late_payment": "Late payment fee",
}
MONTHLY_FEE_WAIVED_FROM = 1500.00  # standard checking pays the monthly fee below this balance on the 1st
CHECK_HOLD_FREE = 225.00  # the first $225 of a deposited check is available at once
SAVINGS_APY, CARD_APR = 0.035, 0.2299

NOTE_BODIES = [
    "Customer asked how long a check deposit stays on hold; explained the release date.",
    "Customer asked about the daily transfer limit; explained it resets at midnight.",
    "Confirmed the mailing address on file; no change needed.",
    "Customer asked for a copy of last month's statement; pointed to online banking.",
    "Explained the monthly service fee and how to waive it with a $1,500 balance.",
    "Customer asked about travel notices; none are needed for card use abroad.",
]
REFERRAL_SUMMARIES = {
    "fraud": "Caller was told by a supposed bank employee to move savings to a 'safe account'; no transfer made.",
    "card_services": "Customer asked for a daily card limit above agent authority.",
    "supervisor": "Customer asked a supervisor to review a fee reversal outside policy.",
}


ROUTING_NUMBERS = [routing_number(p) for p in ROUTING_PREFIXES]


def random_payee_account(rng: random.Random) -> str:
    """An account number at another bank (8 to 12 digits); also used by the task generator."""
    return digits(rng, 8, 12)


def generate(rng: random.Random, scale: float = 1.0) -> Rows:
    """The world's rows per table, in foreign-key insertion order; every column present in every row."""
    holders = _holders(rng, scaled(160, scale))
    verifications = _verifications(rng, holders)
    last4 = _Last4(rng)
    accounts = _accounts(rng, holders, last4)
    payees = _payees(rng, holders)
    cards = _cards(rng, holders, accounts, last4)
    sim = _Simulation(rng, holders, accounts, payees, cards)
    sim.run()
    notes = _notes(rng, scaled(50, scale), holders, accounts)
    referrals = _referrals(rng, scaled(10, scale), holders, accounts)
    return {
        "account_holders": holders,
        "holder_verifications": verifications,
        "banking_accounts": accounts,
        "account_holds": sim.holds,
        "transfer_payees": payees,
        "fund_transfers": sim.transfers,
        "banking_cards": cards,
        "account_ledger": sim.ledger,
        "card_disputes": sim.disputes,
        "banking_notes": notes,
        "banking_referrals": referrals,
    }


def _holders(rng: random.Random, n: int) -> list[dict]:
    rows, people = [], People(rng)
    for i in range(1, n + 1):
        first, last, email = people.draw()
        born = dt.date(1948, 1, 1) + dt.timedelta(days=rng.randint(0, 365 * 56))
        rows.append(
            {
                "id": i,
                "first_name": first,
                "last_name": last,
                "email": email,
                "phone": phone(rng),
                "date_of_birth": iso(born),
                "ssn_last4": f"{rng.randint(0, 9999):04d}",
                "segment": "premier" if rng.random() < 0.18 else "standard",
                "customer_since": iso(dt.date(2004, 1, 1) + dt.timedelta(days=rng.randint(0, 365 * 21))),
            }
        )
    return rows


def _verifications(rng: random.Random, holders: list[dict]) -> list[dict]:
    """Past identity checks (never today: a task's caller starts unverified)."""
    rows = []
    for h in holders:
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            passed = rng.random() < 0.93
            rows.append(
                {
                    "id": 0,
                    "holder_id": h["id"],
                    "checked_on": iso(TODAY - dt.timedelta(days=rng.randint(1, 420))),
                    "passed": int(passed),
                    "failed_fields": None if passed else rng.choice(["ssn_last4", "date_of_birth", "date_of_birth,ssn_last4"]),
                }
            )
    renumber(rows, key=lambda r: (r["checked_on"], r["holder_id"]))
    return rows


class _Last4:
    """Hands out last-four digits that are unique within one holder, so "the card ending 1234" is unambiguous."""

    def __init__(self, rng: random.Random):
        self.rng, self.taken = rng, {}

    def __call__(self, holder_id: int) -> str:
        return unique(lambda: f"{self.rng.randint(0, 9999):04d}", self.taken.setdefault(holder_id, set()))


def _accounts(rng: random.Random, holders: list[dict], last4: _Last4) -> list[dict]:
    rows, numbers = [], set()
    for h in holders:
        premier = h["segment"] == "premier"
        kinds = ["checking"] + (["savings"] if rng.random() < 0.68 else []) + (["credit_card"] if rng.random() < 0.5 else [])
        since = dt.date.fromisoformat(h["customer_since"])
        for kind in kinds:
            while True:
                tail = last4(h["id"])
                number = f"{rng.choice(['40', '41', '47'])}{rng.randint(0, 9999):04d}{tail}"
                if number not in numbers:
                    numbers.add(number)
                    break
                last4.taken[h["id"]].discard(tail)
            credit = kind == "credit_card"
            rows.append(
                {
                    "id": len(rows) + 1,
                    "holder_id": h["id"],
                    "number": number,
                    "kind": kind,
                    "nickname": {
                        "checking": "Premier Checking" if premier else "Everyday Checking",
                        "savings": "High-Yield Savings",
                        "credit_card": "Ridgeline Rewards Visa",
                    }[kind],
                    "status": "open",
                    "balance": 0.0,  # set by the simulation
                    "credit_limit": float(rng.choice([2000, 3500, 5000, 7500, 10000, 15000])) if credit else None,
                    "daily_transfer_limit": 0.0 if credit else (10000.0 if premier else 5000.0),
                    "opened_on": iso(since + dt.timedelta(days=rng.randint(0, max(0, (TODAY - since).days - HISTORY_DAYS - 30)))),
                }
            )
    return rows


def _payees(rng: random.Random, holders: list[dict]) -> list[dict]:
    rows = []
    for h in holders:
        k = rng.choices([0, 1, 2, 3, 4], weights=[20, 30, 25, 17, 8])[0]
        companies = rng.sample(COMPANY_PAYEES, k)
        rent_taken = False
        for name, nickname, _, _ in companies:
            if nickname == "rent":
                if rent_taken:
                    continue
                rent_taken = True
            rows.append(_payee_row(rng, len(rows) + 1, h, name, nickname))
        if rng.random() < 0.3:
            nick = rng.choice([n for n in PERSON_NICKNAMES if not (n == "landlord" and rent_taken)])
            person = f"{rng.choice(FIRST_NAMES)} {h['last_name'] if nick in ('mom', 'dad', 'sister', 'brother') else rng.choice(LAST_NAMES)}"
            rows.append(_payee_row(rng, len(rows) + 1, h, person, nick))
    return rows


def _payee_row(rng: random.Random, pid: int, h: dict, name: str, nickname: str) -> dict:
    return {
        "id": pid,
        "holder_id": h["id"],
        "name": name,
        "nickname": nickname,
        "routing_number": rng.choice(ROUTING_NUMBERS),
        "account_number": random_payee_account(rng),
        "status": "removed" if rng.random() < 0.05 else "active",
        "added_on": iso(TODAY - dt.timedelta(days=rng.randint(HISTORY_DAYS + 5, 900))),
    }


def _cards(rng: random.Random, holders: list[dict], accounts: list[dict], last4: _Last4) -> list[dict]:
    """One card per checking (debit) and credit-card account; some holders replaced a card recently."""
    premier = {h["id"]: h["segment"] == "premier" for h in holders}
    rows: list[dict] = []

    def card(account: dict, issued: dt.date, status: str, **extra: Any) -> dict:
        debit = account["kind"] == "checking"
        expires = end_of_month(issued + dt.timedelta(days=365 * 4))
        limits = ([2500, 3000, 4000, 5000] if premier[account["holder_id"]] else [1000, 1500, 2000, 2500]) if debit else [1500, 2000, 3000, 5000]
        row = {
            "id": len(rows) + 1,
            "account_id": account["id"],
            "kind": "debit" if debit else "credit",
            "last4": last4(account["holder_id"]),
            "status": status,
            "daily_limit": float(rng.choice(limits)),
            "expires_on": iso(expires),
            "issued_on": iso(issued),
            "replaces_card_id": None,
            "replacement_reason": None,
            "delivery": None,
        }
        row.update(extra)
        rows.append(row)
        return row

    for a in accounts:
        if a["kind"] == "savings":
            continue
        if rng.random() < 0.1:
            # Replaced during the simulated window: purchases before `issued` used the old card.
            issued = TODAY - dt.timedelta(days=rng.randint(10, HISTORY_DAYS - 10))
            reason = rng.choice(["lost", "stolen", "damaged", "expiring", "compromised"])
            old = card(a, issued - dt.timedelta(days=rng.randint(400, 1400)), reason if reason in ("lost", "stolen", "compromised") else "replaced")
            if reason == "expiring":
                old["expires_on"] = iso(end_of_month(issued + dt.timedelta(days=20)))
            card(
                a, issued, "active", replaces_card_id=old["id"], replacement_reason=reason, delivery="expedited" if rng.random() < 0.3 else "standard"
            )
        else:
            # Issue dates spread so that a few cards expire within the next two months.
            issued = TODAY - dt.timedelta(days=rng.randint(HISTORY_DAYS + 10, 365 * 4 - 5))
            card(a, issued, "frozen" if rng.random() < 0.04 else "active")
    return rows


class _Simulation:
    """Replays every holder's last HISTORY_DAYS days of banking in date order."""

    def __init__(self, rng, holders, accounts, payees, cards):
        self.rng = rng
        self.holders = holders
        self.by_holder: dict[int, dict[str, dict]] = {}
        for a in accounts:
            self.by_holder.setdefault(a["holder_id"], {})[a["kind"]] = a
        self.payees = group_by(payees, "holder_id")
        self.cards = group_by(cards, "account_id")
        self.entries: list[dict] = []
        self.transfer_list: list[dict] = []
        self.dispute_list: list[dict] = []
        self.holds: list[dict] = []
        self.ledger: list[dict] = []
        self.transfers: list[dict] = []
        self.disputes: list[dict] = []
        self.seq = itertools.count()

    # -- the run ------------------------------------------------------------------------------------
    def run(self) -> None:
        for h in self.holders:
            self._holder(h)
        self._number()

    def _number(self) -> None:
        """Assign ids in date order and resolve the references between rows."""
        renumber(self.entries, key=lambda e: (e["posted_on"], e["_holder"], e["_seq"]))
        renumber(self.transfer_list, key=lambda t: (t["send_on"], t["_holder"], t["_seq"]))
        renumber(self.dispute_list, key=lambda d: (d["opened_on"], d["_entry"]["id"]))
        self.ledger = [
            {
                "id": e["id"],
                "account_id": e["account_id"],
                "posted_on": e["posted_on"],
                "kind": e["kind"],
                "amount": e["amount"],
                "balance_after": e["balance_after"],
                "description": e["description"],
                "merchant": e["merchant"],
                "card_id": e["card_id"],
                "transfer_id": e["_transfer"]["id"] if e["_transfer"] else None,
                "fee_code": e["fee_code"],
                "related_entry_id": e["_related"]["id"] if e["_related"] else None,
                "reversal_reason": e["reversal_reason"],
            }
            for e in self.entries
        ]
        self.transfers = [{k: v for k, v in t.items() if not k.startswith("_")} for t in self.transfer_list]
        self.disputes = [
            {"id": d["id"], "entry_id": d["_entry"]["id"], **{k: v for k, v in d.items() if not k.startswith("_") and k != "id"}}
            for d in self.dispute_list
        ]
        renumber(self.holds, key=lambda x: (x["placed_on"], x["account_id"]))

    def _holder(self, h: dict) -> None:  # noqa: C901 - one row's rules in the order they draw from the rng; a split would change no logic
        rng = self.rng
        accts = self.by_holder[h["id"]]
        chk, sav, cc = accts.get("checking"), accts.get("savings"), accts.get("credit_card")
        premier = h["segment"] == "premier"
        start = TODAY - dt.timedelta(days=HISTORY_DAYS)
        bal = {chk["id"]: round_money(rng.uniform(3000, 20000) if premier else rng.uniform(250, 5000))}
        if sav:
            bal[sav["id"]] = round_money(rng.uniform(10000, 80000) if premier else rng.uniform(300, 25000))
        if cc:
            bal[cc["id"]] = -round_money(rng.uniform(0, 0.3) * cc["credit_limit"])
        self.balance = bal
        self.holder_id = h["id"]
        heap: list[tuple] = []
        tick = itertools.count()

        def at(day: dt.date, prio: int, event: tuple) -> None:
            if start < day < TODAY:  # history ends yesterday; today starts clean
                heapq.heappush(heap, (day, prio, next(tick), event))

        pay = round_money(rng.uniform(3500, 9000) if premier else rng.uniform(1100, 3800))
        employer = rng.choice(EMPLOYERS)
        first_payday = start + dt.timedelta(days=rng.randint(1, 14))
        d = first_payday
        while d < TODAY:
            at(d, 0, ("deposit", chk, pay, f"Payroll deposit - {employer}"))
            d += dt.timedelta(days=14)
        for _ in range(rng.randint(9, 16)):
            m = rng.choice(MERCHANTS)
            at(start + dt.timedelta(days=rng.randint(1, HISTORY_DAYS - 1)), 2, ("purchase", chk, m))
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            at(
                start + dt.timedelta(days=rng.randint(1, HISTORY_DAYS - 1)),
                2,
                ("atm", chk, float(rng.choice([40, 60, 80, 100, 200])), rng.random() < 0.35),
            )
        months = sorted({(start + dt.timedelta(days=k)).replace(day=1) for k in range(HISTORY_DAYS + 1)})
        for p in self.payees.get(h["id"], []):
            if p["status"] != "active":
                continue
            lo, hi = next(((lo, hi) for n, _, lo, hi in COMPANY_PAYEES if n == p["name"]), (50.0, 400.0))
            amount = round_money(rng.uniform(lo, hi))
            dom = 1 if p["nickname"] in ("rent", "landlord") else rng.randint(3, 27)
            varies = p["nickname"] in ("electric", "water")  # metered bills change every month
            for month in months:
                at(month.replace(day=dom), 1, ("payee", chk, p, round_money(rng.uniform(lo, hi)) if varies else amount))
            if rng.random() < 0.4:  # the next one is already scheduled
                nxt = TODAY.replace(day=dom) if TODAY.day < dom else (TODAY.replace(day=28) + dt.timedelta(days=4)).replace(day=dom)
                self._transfer(chk, None, p, amount, nxt, "scheduled", created=TODAY - dt.timedelta(days=rng.randint(1, 20)))
        for month in months:
            if not premier:
                at(month, 3, ("monthly_fee", chk))
            if sav:
                at(month.replace(day=rng.randint(2, 6)), 1, ("internal", chk, sav, float(rng.choice([100, 150, 200, 250, 300, 500, 750]))))
                at(end_of_month(month), 4, ("savings_interest", sav))
                if rng.random() < 0.15:
                    at(month.replace(day=rng.randint(8, 26)), 1, ("internal", sav, chk, float(rng.choice([200, 400, 500, 1000]))))
            if cc:
                at(month.replace(day=rng.randint(18, 24)), 1, ("card_payment", chk, cc))
                at(month.replace(day=26), 4, ("card_interest", cc))
                if rng.random() < 0.05:
                    at(month.replace(day=27), 4, ("late_fee", cc))
        if cc:
            for _ in range(rng.randint(5, 11)):
                at(start + dt.timedelta(days=rng.randint(1, HISTORY_DAYS - 1)), 2, ("purchase", cc, rng.choice(MERCHANTS)))
        if rng.random() < 0.12:  # a mobile check deposit still on hold
            at(TODAY - dt.timedelta(days=rng.randint(1, 3)), 0, ("check_deposit", chk, round_money(rng.uniform(400, 2500))))
        if rng.random() < 0.25:
            at(start + dt.timedelta(days=rng.randint(5, HISTORY_DAYS - 20)), 0, ("check_deposit", chk, round_money(rng.uniform(150, 1800))))
        if rng.random() < 0.01:
            self.holds.append(
                {
                    "id": 0,
                    "account_id": chk["id"],
                    "amount": float(rng.choice([500, 750, 1200])),
                    "reason": "legal_order",
                    "placed_on": iso(TODAY - dt.timedelta(days=rng.randint(5, 40))),
                    "release_on": iso(TODAY + dt.timedelta(days=120)),
                    "status": "active",
                }
            )
        if rng.random() < 0.1:
            self.holds.append(
                {
                    "id": 0,
                    "account_id": chk["id"],
                    "amount": round_money(rng.uniform(40, 300)),
                    "reason": "pending_authorization",
                    "placed_on": iso(TODAY - dt.timedelta(days=1)),
                    "release_on": iso(TODAY + dt.timedelta(days=rng.randint(2, 6))),
                    "status": "active",
                }
            )

        while heap:
            day, _, _, event = heapq.heappop(heap)
            self._apply(day, event, at, premier)
        for _kind, a in accts.items():
            a["balance"] = self.balance[a["id"]]

    # -- events -------------------------------------------------------------------------------------
    def _apply(self, day: dt.date, event: tuple, at, premier: bool) -> None:  # noqa: C901 - one row's rules in the order they draw from the rng; a split would change no logic
        rng, kind = self.rng, event[0]
        if kind == "deposit":
            _, acct, amount, text = event
            self._post(acct, day, "deposit", amount, text)
        elif kind == "check_deposit":
            _, acct, amount = event
            self._post(acct, day, "deposit", amount, "Mobile check deposit")
            if amount > CHECK_HOLD_FREE:
                release = day + dt.timedelta(days=5)
                self.holds.append(
                    {
                        "id": 0,
                        "account_id": acct["id"],
                        "amount": round_money(amount - CHECK_HOLD_FREE),
                        "reason": "check_deposit",
                        "placed_on": iso(day),
                        "release_on": iso(release),
                        "status": "active" if release > TODAY else "released",
                    }
                )
        elif kind == "purchase":
            _, acct, (merchant, lo, hi) = event
            card = self._card_on(acct, day)
            if card is None:
                return
            amount = round_money(rng.uniform(lo, hi)) if lo != hi else lo
            if acct["kind"] == "credit_card" and self._available(acct) < amount:
                return  # declined: over the credit limit
            e = self._post(acct, day, "card_purchase", -amount, f"Card purchase - {merchant}", merchant=merchant, card_id=card["id"])
            if rng.random() < 0.025:
                self._dispute(acct, card, e, day, at)
            self._overdraft(acct, day)
        elif kind == "atm":
            _, acct, amount, foreign = event
            card = self._card_on(acct, day)
            if card is None or self._available(acct) < amount:
                return
            self._post(acct, day, "atm_withdrawal", -amount, "ATM withdrawal", card_id=card["id"])
            if foreign:
                self._fee(acct, day, "atm", at)
        elif kind == "payee":
            _, acct, payee, amount = event
            if self._available(acct) < amount:
                return
            t = self._transfer(acct, None, payee, amount, day, "completed", created=day - dt.timedelta(days=rng.randint(0, 10)))
            self._post(acct, day, "payment_sent", -amount, f"Payment to {payee['name']}", transfer=t)
        elif kind in ("internal", "card_payment"):
            _, src, dst = event[:3]
            if kind == "card_payment":
                owed = -self.balance[dst["id"]]
                amount = round_money(owed if rng.random() < 0.6 else min(owed, max(25.0, owed * rng.uniform(0.1, 0.5))))
            else:
                amount = event[3]
            if amount <= 0 or self._available(src) < amount + (500 if src["kind"] == "checking" else 0):
                return  # people keep a cushion in checking
            t = self._transfer(src, dst, None, amount, day, "completed", created=day)
            self._post(src, day, "transfer_out", -amount, f"Transfer to {dst['nickname']} ...{dst['number'][-4:]}", transfer=t)
            self._post(dst, day, "transfer_in", amount, f"Transfer from {src['nickname']} ...{src['number'][-4:]}", transfer=t)
        elif kind == "monthly_fee":
            _, acct = event
            if self.balance[acct["id"]] < MONTHLY_FEE_WAIVED_FROM:
                self._fee(acct, day, "monthly_service", at)
                self._overdraft(acct, day)
        elif kind == "savings_interest":
            _, acct = event
            amount = round_money(max(0.0, self.balance[acct["id"]]) * SAVINGS_APY / 12)
            if amount > 0:
                self._post(acct, day, "interest", amount, "Interest paid")
        elif kind == "card_interest":
            _, acct = event
            owed = -self.balance[acct["id"]]
            if owed > 0 and rng.random() < 0.5:
                self._post(acct, day, "interest", -round_money(owed * CARD_APR / 12), "Interest charge on purchases")
        elif kind == "late_fee":
            _, acct = event
            if -self.balance[acct["id"]] > 0:
                self._fee(acct, day, "late_payment", at)
        elif kind == "dispute_credit":
            _, acct, amount, charge = event
            self._post(acct, day, "dispute_credit", amount, f"Provisional credit - dispute of {charge['merchant']} charge", related=charge)
        elif kind == "reversal":
            _, acct, fee, reason = event
            self._post(
                acct,
                day,
                "fee_reversal",
                -fee["amount"],
                f"Fee reversal ({reason.replace('_', ' ')}) - {FEE_LABELS[fee['fee_code']]}",
                fee_code=fee["fee_code"],
                related=fee,
                reversal_reason=reason,
            )

    def _overdraft(self, acct: dict, day: dt.date) -> None:
        if acct["kind"] == "checking" and self.balance[acct["id"]] < 0:
            # One overdraft fee per account and day; the day's entries are the last few posted.
            already = any(e["account_id"] == acct["id"] and e["posted_on"] == iso(day) and e["fee_code"] == "overdraft" for e in self.entries[-6:])
            if not already:
                self._fee(acct, day, "overdraft", None)

    def _fee(self, acct: dict, day: dt.date, code: str, at) -> None:
        fee = self._post(acct, day, "fee", -FEES[code], FEE_LABELS[code], fee_code=code)
        if at is not None and self.rng.random() < 0.12:  # some fees were reversed a few days later
            at(day + dt.timedelta(days=self.rng.randint(1, 6)), 3, ("reversal", acct, fee, self.rng.choice(["courtesy", "courtesy", "bank_error"])))

    def _dispute(self, acct: dict, card: dict, entry: dict, day: dt.date, at) -> None:
        rng = self.rng
        opened = day + dt.timedelta(days=rng.randint(2, 20))
        if opened >= TODAY:
            return
        reason = rng.choice(["unauthorized", "duplicate_charge", "incorrect_amount", "goods_not_received", "cancelled_recurring"])
        charged = -entry["amount"]
        amount = round_money(charged * rng.choice([0.2, 0.25, 0.5])) if reason == "incorrect_amount" else charged
        provisional = amount if card["kind"] == "debit" and reason in ("unauthorized", "duplicate_charge", "incorrect_amount") else 0.0
        age = (TODAY - opened).days
        status = ("won" if provisional or rng.random() < 0.6 else "lost") if age > 40 else "open"
        self.dispute_list.append(
            {
                "_entry": entry,
                "account_id": acct["id"],
                "card_id": card["id"],
                "reason": reason,
                "amount": amount,
                "provisional_credit": provisional,
                "status": status,
                "opened_on": iso(opened),
                "closed_on": iso(opened + dt.timedelta(days=rng.randint(20, 40))) if status != "open" else None,
            }
        )
        if provisional:
            at(opened, 3, ("dispute_credit", acct, provisional, entry))

    # -- primitives ---------------------------------------------------------------------------------
    def _post(
        self,
        acct: dict,
        day: dt.date,
        kind: str,
        amount: float,
        description: str,
        *,
        merchant: str | None = None,
        card_id: int | None = None,
        transfer: dict | None = None,
        fee_code: str | None = None,
        related: dict | None = None,
        reversal_reason: str | None = None,
    ) -> dict:
        self.balance[acct["id"]] = round_money(self.balance[acct["id"]] + amount)
        e = {
            "id": 0,
            "_holder": self.holder_id,
            "_seq": next(self.seq),
            "account_id": acct["id"],
            "posted_on": iso(day),
            "kind": kind,
            "amount": round_money(amount),
            "balance_after": self.balance[acct["id"]],
            "description": description,
            "merchant": merchant,
            "card_id": card_id,
            "_transfer": transfer,
            "fee_code": fee_code,
            "_related": related,
            "reversal_reason": reversal_reason,
        }
        self.entries.append(e)
        return e

    def _transfer(self, src: dict, dst: dict | None, payee: dict | None, amount: float, send_on: dt.date, status: str, created: dt.date) -> dict:
        t = {
            "id": 0,
            "_holder": self.holder_id,
            "_seq": next(self.seq),
            "from_account_id": src["id"],
            "to_account_id": dst["id"] if dst else None,
            "payee_id": payee["id"] if payee else None,
            "amount": round_money(amount),
            "send_on": iso(send_on),
            "status": status,
            "created_on": iso(min(created, TODAY)),
            "cancelled_on": None,
        }
        self.transfer_list.append(t)
        return t

    def _available(self, acct: dict) -> float:
        held = sum(h["amount"] for h in self.holds if h["account_id"] == acct["id"] and h["status"] == "active")
        if acct["kind"] == "credit_card":
            return acct["credit_limit"] + self.balance[acct["id"]]
        return self.balance[acct["id"]] - held

    def _card_on(self, acct: dict, day: dt.date) -> dict | None:
        """The card that was in use on `day` (a replacement takes over from its issue date)."""
        cards = [c for c in self.cards.get(acct["id"], []) if c["issued_on"] <= iso(day)]
        return max(cards, key=lambda c: c["issued_on"]) if cards else None


def _notes(rng: random.Random, n: int, holders: list[dict], accounts: list[dict]) -> list[dict]:
    by_holder = group_by(accounts, "holder_id")
    rows = []
    for i in range(1, n + 1):
        h = rng.choice(holders)
        acct = rng.choice(by_holder[h["id"]]) if rng.random() < 0.5 else None
        rows.append(
            {
                "id": i,
                "holder_id": h["id"],
                "account_id": acct["id"] if acct else None,
                "body": rng.choice(NOTE_BODIES),
                "created_on": iso(TODAY - dt.timedelta(days=rng.randint(1, 300))),
            }
        )
    renumber(rows, key=lambda r: r["created_on"])
    return rows


def _referrals(rng: random.Random, n: int, holders: list[dict], accounts: list[dict]) -> list[dict]:
    checking = {a["holder_id"]: a for a in accounts if a["kind"] == "checking"}
    rows = []
    for i in range(1, n + 1):
        h = rng.choice(holders)
        team = rng.choice(sorted(REFERRAL_SUMMARIES))
        created = TODAY - dt.timedelta(days=rng.randint(1, 200))
        rows.append(
            {
                "id": i,
                "holder_id": h["id"],
                "account_id": checking[h["id"]]["id"],
                "team": team,
                "status": "closed" if (TODAY - created).days > 10 else "open",
                "summary": REFERRAL_SUMMARIES[team],
                "created_on": iso(created),
            }
        )
    renumber(rows, key=lambda r: r["created_on"])
    return rows
