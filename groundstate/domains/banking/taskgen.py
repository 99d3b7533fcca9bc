"""Task generator for the banking domain: templates × account holders sampled from the seed world.

`generate(world, today, rng)` is deterministic: the same world, date and rng give the same tasks, in
the same order, with the same ids. `world` is the seed (`seed.generate(Random(<domain seed>))`) and
is never modified; each task sets up its situation with a `patch` (rows upserted on top of the seed:
partial rows update, full rows insert). `groundstate tasks generate --domain banking` writes the
result to tasks/banking.yaml.

Every task starts with the caller's identity check (`verify_account_holder` is a logged write), so
a task's instruction carries the caller's email, date of birth and SSN digits unless the template
is about asking for them.

Ledger edits go through `Book`: a new entry is slotted into its account's history by date and every
running balance after it is recomputed, so a patched world stays as consistent as the seed (each
`balance_after` is the true running balance and the account's balance is the last of them).

Templates pick "clean" holders (all accounts open, no legal hold, no open referral) among those the
fewest tasks have used so far, so tasks spread across the world. Ids that a gold call creates
at run time (a new payee) are computed from the task's own patch: the engine inserts max(id) + 1.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groundstate.domains import _kit
from groundstate.domains._kit import WorldIndex, call, cents, dollars, group_by, long_date, money, rubric, said

HERE = Path(__file__).resolve().parent

CARD_LIMIT_AUTHORITY = {"standard": 3000, "premier": 6000}
DISPUTE_WINDOW = FEE_WINDOW = 60
COURTESY_CAP = {"standard": 1, "premier": 2}
CHECK_HOLD_FREE = 225.00
OVERDRAFT_FEE, ATM_FEE = 35.00, 3.00

MISPLACED = [
    "I think it's somewhere at home",
    "I probably left it in my car",
    "it's likely in one of my coat pockets",
    "I might have left it at my office",
]
DAMAGE = [
    "the chip stopped working",
    "it cracked in half",
    "the magnetic strip is worn out and terminals reject it",
    "it got bent and the card readers won't take it",
]
STOLEN = [
    "someone broke into my car and took it",
    "my bag was snatched at the train station",
    "someone took it from my gym locker",
    "I was pickpocketed on the bus",
]
SCAMS = [
    "Someone from Ridgeline's fraud department just called me and said my account was hacked. He told me to move ${amount} "
    "to a safe account right away",
    "An IRS agent called and said I owe back taxes and will be arrested today unless I pay ${amount}",
    "A tech support person who fixed my computer said my bank account is compromised and I must move ${amount} into a protected account he set up",
    "My grandson called from jail, he needs ${amount} for bail today and his lawyer asked me to wire it",
]
# (payee, nickname a customer might choose, what the customer calls it)
NEW_PAYEES = [
    ("Birchwood Property Group", "rent", "my new landlord"),
    ("Hammond Home Renovations", "contractor", "my contractor"),
    ("Northgate University", "tuition", "my daughter's college"),
    ("Little Acorns Daycare", "daycare", "the daycare"),
    ("Pemberton & Rowe CPAs", "accountant", "my accountant"),
    ("Silverline Dental", "dentist", "my dentist"),
    ("Ashford Music Lessons", "piano", "my son's piano teacher"),
    ("Greystone Storage", "storage", "my storage unit"),
]
DISPUTE_OLD = {
    "goods_not_received": ["the order never arrived", "they never delivered what I paid for"],
    "cancelled_recurring": ["I had already cancelled that subscription", "they charged me after I cancelled my membership"],
    "incorrect_amount": ["they charged me more than the agreed price", "the amount is higher than my receipt"],
}


def day_text(d: dt.date | str) -> str:
    d = dt.date.fromisoformat(d) if isinstance(d, str) else d
    return f"{d:%B} {d.day}"


def fee_text(code: str, amount: float) -> str:
    """How a customer names a fee: 'the $3.00 out-of-network ATM fee'."""
    label = {
        "overdraft": "overdraft fee",
        "monthly_service": "monthly service fee",
        "atm": "out-of-network ATM fee",
        "late_payment": "late payment fee",
    }[code]
    return f"the {money(amount)} {label}"


class Book:
    """Ledger entries a task adds, slotted into each account's history with every running balance recomputed."""

    def __init__(self, g: Generator):
        self.g = g
        self.new: dict[int, list[dict]] = {}

    def post(self, acct: dict, day: dt.date, kind: str, amount: float, description: str, **refs: Any) -> dict:
        e = {
            "id": self.g.new_id("account_ledger"),
            "account_id": acct["id"],
            "posted_on": day.isoformat(),
            "kind": kind,
            "amount": round(amount, 2),
            "balance_after": None,
            "description": description,
            "merchant": refs.get("merchant"),
            "card_id": refs.get("card_id"),
            "transfer_id": refs.get("transfer_id"),
            "fee_code": refs.get("fee_code"),
            "related_entry_id": refs.get("related_entry_id"),
            "reversal_reason": refs.get("reversal_reason"),
        }
        self.new.setdefault(acct["id"], []).append(e)
        return e

    def history(self, acct: dict) -> list[dict]:
        """The account's entries (seed and new, copies) in ledger order with recomputed running balances."""
        seed = self.g.entries.get(acct["id"], [])
        balance = cents(acct["balance"]) - sum(cents(e["amount"]) for e in seed)  # before the first seed entry
        rows = sorted([dict(e) for e in seed] + [dict(e) for e in self.new.get(acct["id"], [])], key=lambda e: (e["posted_on"], e["id"]))
        for e in rows:
            balance += cents(e["amount"])
            e["balance_after"] = dollars(balance)
        return rows

    def balance(self, acct: dict) -> float:
        rows = self.history(acct)
        return rows[-1]["balance_after"] if rows else acct["balance"]

    def lowest_since(self, acct: dict, day: dt.date) -> float:
        """The lowest running balance from `day` on: checks that an edit does not overdraw the account later."""
        return min((e["balance_after"] for e in self.history(acct) if e["posted_on"] >= day.isoformat()), default=self.balance(acct))

    def rows(self) -> list[tuple[str, dict]]:
        out = []
        for account_id in self.new:
            acct = self.g.accounts[account_id]
            new_ids = {e["id"] for e in self.new[account_id]}
            seed_after = {e["id"]: e["balance_after"] for e in self.g.entries.get(account_id, [])}
            for e in self.history(acct):
                if e["id"] in new_ids:
                    out.append(("account_ledger", e))
                elif cents(e["balance_after"]) != cents(seed_after[e["id"]]):
                    out.append(("account_ledger", {"id": e["id"], "balance_after": e["balance_after"]}))
            if cents(self.balance(acct)) != cents(acct["balance"]):
                out.append(("banking_accounts", {"id": account_id, "balance": self.balance(acct)}))
        return out


class Patch(_kit.Patch):
    """Rows to upsert for one task, plus the task's ledger edits (the rows they touch are added by `to_dict`)."""

    order = _kit.table_order(HERE)

    def __init__(self, g: Generator):
        super().__init__()
        self.g = g
        self.book = Book(g)

    def to_dict(self) -> dict[str, list[dict[str, Any]]]:
        edited = _kit.Patch(self.order).extend(self)
        for table, row in self.book.rows():
            edited.add(table, row)
        return edited.to_dict()

    def runtime_id(self, table: str) -> int:
        """The id the engine gives the next row a tool inserts into `table` in this task: max(id) + 1."""
        return max([self.g.max_ids[table], *(r["id"] for r in self.tables.get(table, []))]) + 1


class Generator(WorldIndex):
    """Indexes over the seed world plus the sampling, set-up and phrasing helpers the templates share."""

    tones = ["polite and brief", "a little anxious", "friendly and chatty", "precise; answers exactly what is asked", "in a hurry"]

    def __init__(self, world: dict[str, list[dict]], today: dt.date, rng: random.Random):
        super().__init__(world, today, rng)
        self.seed = _kit.sibling(HERE, "seed")
        self.holders = {h["id"]: h for h in world["account_holders"]}
        self.accounts = {a["id"]: a for a in world["banking_accounts"]}
        self.accounts_of: dict[int, dict[str, dict]] = {}
        for a in world["banking_accounts"]:
            self.accounts_of.setdefault(a["holder_id"], {})[a["kind"]] = a
        self.cards = {c["id"]: c for c in world["banking_cards"]}
        self.cards_of = group_by(world["banking_cards"], lambda c: self.accounts[c["account_id"]]["holder_id"])
        self.entries = group_by(sorted(world["account_ledger"], key=lambda e: (e["posted_on"], e["id"])), "account_id")
        self.holds = group_by(world["account_holds"], "account_id")
        self.payees_of = group_by(world["transfer_payees"], "holder_id")
        self.scheduled: dict[int, list[dict]] = {}
        for t in world["fund_transfers"]:
            if t["payee_id"] is not None:
                self.scheduled.setdefault(t["payee_id"], []).append(t)
        self.disputed = {d["entry_id"] for d in world["card_disputes"]}
        self.reversed = {e["related_entry_id"] for e in world["account_ledger"] if e["kind"] == "fee_reversal"}
        busy = {r["holder_id"] for r in world["banking_referrals"] if r["status"] == "open"}
        busy |= {
            self.accounts[h["account_id"]]["holder_id"] for h in world["account_holds"] if h["reason"] == "legal_order" and h["status"] == "active"
        }
        self.clean = [
            h for h in world["account_holders"] if h["id"] not in busy and all(a["status"] == "open" for a in self.accounts_of[h["id"]].values())
        ]
        self.used: dict[int, int] = {}  # holder id -> tasks that use them

    # -- sampling ---------------------------------------------------------------------------------
    def pick(self, ok: Callable[[dict], bool] = lambda h: True) -> dict:
        """A clean holder satisfying `ok`, among those the fewest tasks have used so far."""
        pool = [h for h in self.clean if ok(h)]
        if not pool:
            raise RuntimeError("no clean holder fits this template: widen its filter")
        least = min(self.used.get(h["id"], 0) for h in pool)
        h = self.rng.choice([h for h in pool if self.used.get(h["id"], 0) == least])
        self.used[h["id"]] = self.used.get(h["id"], 0) + 1
        return h

    # -- world facts --------------------------------------------------------------------------------
    def acct(self, h: dict, kind: str) -> dict | None:
        return self.accounts_of[h["id"]].get(kind)

    def card(self, h: dict, kind: str, status: tuple[str, ...] = ("active",)) -> dict | None:
        """The holder's current debit or credit card (the one not yet replaced)."""
        for c in self.cards_of.get(h["id"], []):
            if c["kind"] == kind and c["status"] in status:
                return c
        return None

    def held(self, acct: dict, patch: Patch | None = None) -> float:
        rows = [x for x in self.holds.get(acct["id"], []) if x["status"] == "active" and x["release_on"] > self.today.isoformat()]
        rows += [x for x in (patch.tables.get("account_holds", []) if patch else []) if x["account_id"] == acct["id"]]
        return dollars(sum(cents(x["amount"]) for x in rows))

    def available(self, acct: dict, patch: Patch) -> float:
        base = cents(patch.book.balance(acct)) + (cents(acct["credit_limit"]) if acct["kind"] == "credit_card" else 0)
        return dollars(base - cents(self.held(acct, patch)))

    def owed(self, acct: dict, patch: Patch) -> float:
        return dollars(max(0, -cents(patch.book.balance(acct))))

    def lowest(self, acct: dict, day: dt.date) -> float:
        """The seed's lowest running balance from `day` on (what an inserted charge must stay under)."""
        return min((e["balance_after"] for e in self.entries.get(acct["id"], []) if e["posted_on"] >= day.isoformat()), default=acct["balance"])

    def courtesy_used(self, acct: dict) -> int:
        since = (self.today - dt.timedelta(days=365)).isoformat()
        return sum(1 for e in self.entries.get(acct["id"], []) if e["reversal_reason"] == "courtesy" and e["posted_on"] > since)

    def fees(self, acct: dict, codes: tuple[str, ...], max_age: int = FEE_WINDOW) -> list[dict]:
        """Seed fees of the account that are unreversed, within `max_age` days and unambiguous by (date, code)."""
        rows = [
            e
            for e in self.entries.get(acct["id"], [])
            if e["kind"] == "fee"
            and e["fee_code"] in codes
            and e["id"] not in self.reversed
            and (self.today - dt.date.fromisoformat(e["posted_on"])).days <= max_age
        ]
        seen: dict[tuple, int] = {}
        for e in self.entries.get(acct["id"], []):
            if e["kind"] == "fee":
                seen[(e["posted_on"], e["fee_code"])] = seen.get((e["posted_on"], e["fee_code"]), 0) + 1
        return [e for e in rows if seen[(e["posted_on"], e["fee_code"])] == 1]

    # -- set-up -------------------------------------------------------------------------------------
    def purchase(self, patch: Patch, acct: dict, card: dict, day: dt.date, merchant: str, amount: float) -> dict:
        return patch.book.post(acct, day, "card_purchase", -amount, f"Card purchase - {merchant}", merchant=merchant, card_id=card["id"])

    def fee(self, patch: Patch, acct: dict, day: dt.date, code: str, amount: float) -> dict:
        return patch.book.post(acct, day, "fee", -amount, self.seed.FEE_LABELS[code], fee_code=code)

    def check_hold(self, patch: Patch, acct: dict, days_ago: int, amount: float) -> dict:
        """A mobile check deposit whose amount above $225 is still on hold."""
        day = self.ago(days_ago)
        patch.book.post(acct, day, "deposit", amount, "Mobile check deposit")
        hold = {
            "id": self.new_id("account_holds"),
            "account_id": acct["id"],
            "amount": dollars(cents(amount) - cents(CHECK_HOLD_FREE)),
            "reason": "check_deposit",
            "placed_on": day.isoformat(),
            "release_on": (day + dt.timedelta(days=5)).isoformat(),
            "status": "active",
        }
        patch.add("account_holds", hold)
        return hold

    def scheduled_payment(self, patch: Patch, acct: dict, payee: dict, amount: float, send_on: dt.date) -> dict:
        transfer = {
            "id": self.new_id("fund_transfers"),
            "from_account_id": acct["id"],
            "to_account_id": None,
            "payee_id": payee["id"],
            "amount": amount,
            "send_on": send_on.isoformat(),
            "status": "scheduled",
            "created_on": self.ago(self.rng.randint(1, 12)).isoformat(),
            "cancelled_on": None,
        }
        patch.add("fund_transfers", transfer)
        return transfer

    def free_send_day(self, payee: dict, lo: int, hi: int, taken: set[str] = frozenset()) -> dt.date:
        """A future day with no other payment to this payee scheduled, so the date identifies the payment."""
        busy = {t["send_on"] for t in self.scheduled.get(payee["id"], [])} | set(taken)
        return next(d for d in (self.ahead(k) for k in self.rng.sample(range(lo, hi + 1), hi - lo + 1)) if d.isoformat() not in busy)

    # -- phrasing -----------------------------------------------------------------------------------
    def dob_text(self, h: dict) -> str:
        d = dt.date.fromisoformat(h["date_of_birth"])
        return self.rng.choice([d.isoformat(), long_date(d), f"{d.month:02d}/{d.day:02d}/{d.year}"])

    def identity(self, h: dict, ssn: str | None = None) -> str:
        """The caller's verification details, in one of several phrasings."""
        ssn = ssn or h["ssn_last4"]
        dob = self.dob_text(h)
        return self.rng.choice(
            [
                f"My email is {h['email']}, I was born on {dob}, and the last four of my SSN are {ssn}.",
                f"For verification: email {h['email']}, date of birth {dob}, SSN ending in {ssn}.",
                f"You can verify me with {h['email']}, DOB {dob}, last four of my social {ssn}.",
            ]
        )

    def hello(self, h: dict, ssn: str | None = None) -> str:
        """An opening with the caller's name and verification details."""
        return f"{self.greeting()} this is {h['first_name']} {h['last_name']}. {self.identity(h, ssn)}"

    def facts(self, h: dict, ssn: str | None = None) -> str:
        return (
            f"You are {h['first_name']} {h['last_name']}. Your email is {h['email']}, your date of birth is {h['date_of_birth']} "
            f"and the last four digits of your SSN are {ssn or h['ssn_last4']}."
        )

    def user(self, h: dict, context: str, first: list[str] | None = None, ssn: str | None = None) -> dict:
        """The simulated customer: persona, the facts they know, and scripted replies."""
        who = f"{h['first_name']} {h['last_name']}, a {h['segment']} Ridgeline Bank customer"
        return self.simulated_user(who, f"{self.facts(h, ssn)} {context}", first)

    @staticmethod
    def acct_text(a: dict) -> str:
        return {"checking": "checking account", "savings": "savings account", "credit_card": "credit card account"}[
            a["kind"]
        ] + f" ending {a['number'][-4:]}"

    @staticmethod
    def card_text(c: dict) -> str:
        return f"{c['kind']} card ending {c['last4']}"

    def round_amount(
        self, most: float, choices: tuple[float, ...] = (100, 150, 200, 250, 300, 400, 500, 600, 750, 1000, 1200, 1500, 2000)
    ) -> float | None:
        fits = [float(x) for x in choices if x <= most]
        if not fits or most < 100:
            return None
        if self.rng.random() < 0.25:  # now and then an exact amount with cents
            return dollars(self.rng.randint(2000, int(min(most, 2000.0) * 100)))
        return self.rng.choice(fits)


# ================================================================================================
# Templates. Each returns one task (without id): instruction, user, patch, gold, optional checks.
# ================================================================================================


def verify(h: dict, ssn: str | None = None) -> dict:
    return call("verify_account_holder", email=h["email"], date_of_birth=h["date_of_birth"], ssn_last4=ssn or h["ssn_last4"])


def profile(h: dict) -> dict:
    return call("get_account_holder", holder_id=h["id"])


def activity(a: dict) -> dict:
    return call("get_account_activity", account_id=a["id"])


def note(h: dict, body: str, a: dict | None = None) -> dict:
    args: dict[str, Any] = {"holder_id": h["id"], "body": body}
    if a is not None:
        args["account_id"] = a["id"]
    return call("add_banking_note", **args)


def card_status(c: dict, status: str) -> dict:
    return {"sql": f"SELECT status FROM banking_cards WHERE id = {c['id']}", "expect": [[status]]}


def no_transfers_today(g: Generator, a: dict) -> dict:
    return {"sql": f"SELECT COUNT(*) FROM fund_transfers WHERE from_account_id = {a['id']} AND created_on = '{g.today.isoformat()}'", "expect": [[0]]}


# -- single_write --------------------------------------------------------------------------------


def t_freeze_card(g: Generator) -> dict:
    kind = g.rng.choice(["debit", "credit"])
    h = g.pick(lambda h: g.card(h, kind) is not None)
    c = g.card(h, kind)
    where = g.rng.choice(MISPLACED)
    return {
        "instruction": f"{g.hello(h)} I can't find my {g.card_text(c)}. {where[0].upper()}{where[1:]}, so please just freeze it for now.",
        "user": g.user(h, f"You misplaced your {g.card_text(c)} ({where}) and want it frozen until you find it; you do not want a new card."),
        "patch": Patch(g),
        "gold": [verify(h), profile(h), call("set_card_freeze", card_id=c["id"], frozen=True)],
        "checks": [card_status(c, "frozen")],
        "tags": ["card", "freeze", kind],
    }


def t_unfreeze_card(g: Generator) -> dict:
    kind = g.rng.choice(["debit", "credit"])
    h = g.pick(lambda h: g.card(h, kind) is not None)
    c = g.card(h, kind)
    patch = Patch(g)
    patch.add("banking_cards", {"id": c["id"], "status": "frozen"})
    return {
        "instruction": f"{g.hello(h)} Good news, I found my {g.card_text(c)}. Could you unfreeze it so I can use it again?",
        "user": g.user(h, f"You had frozen your {g.card_text(c)} while it was misplaced; you found it and want it unfrozen."),
        "patch": patch,
        "gold": [verify(h), profile(h), call("set_card_freeze", card_id=c["id"], frozen=False)],
        "checks": [card_status(c, "active")],
        "tags": ["card", "unfreeze", kind],
    }


def t_move_money(g: Generator) -> dict:
    h = g.pick(
        lambda h: (
            g.acct(h, "savings") is not None
            and g.acct(h, "savings")["balance"] >= 200
            and g.acct(h, "checking")["balance"] - g.held(g.acct(h, "checking")) >= 200
        )
    )
    chk, sav = g.acct(h, "checking"), g.acct(h, "savings")
    patch = Patch(g)
    src, dst = (chk, sav) if g.rng.random() < 0.5 else (sav, chk)
    amount = g.round_amount(min(g.available(src, patch), src["daily_transfer_limit"]))
    return {
        "instruction": f"{g.hello(h)} Please move {money(amount)} from my {g.acct_text(src)} to my {g.acct_text(dst)}.",
        "user": g.user(h, f"You want {money(amount)} moved from your {g.acct_text(src)} to your {g.acct_text(dst)} today."),
        "patch": patch,
        "gold": [verify(h), profile(h), call("transfer_between_accounts", from_account_id=src["id"], to_account_id=dst["id"], amount=amount)],
        "tags": ["transfer", f"{src['kind']}->{dst['kind']}"],
    }


def t_cancel_scheduled(g: Generator) -> dict:
    h = g.pick(lambda h: any(p["status"] == "active" for p in g.payees_of.get(h["id"], [])))
    chk = g.acct(h, "checking")
    p = g.rng.choice([p for p in g.payees_of[h["id"]] if p["status"] == "active"])
    patch = Patch(g)
    amount = dollars(g.rng.randint(4000, 250000))
    t = g.scheduled_payment(patch, chk, p, amount, g.free_send_day(p, 2, 40))
    who = p["name"] if g.rng.random() < 0.5 or not p["nickname"] else f"my {p['nickname']} payee ({p['name']})"
    return {
        "instruction": f"{g.hello(h)} Please cancel the {money(amount)} payment to {who} that's scheduled for {day_text(t['send_on'])}.",
        "user": g.user(h, f"You want the scheduled {money(amount)} payment to {p['name']} on {t['send_on']} cancelled."),
        "patch": patch,
        "gold": [verify(h), profile(h), call("cancel_scheduled_payment", transfer_id=t["id"])],
        "checks": [{"sql": f"SELECT status FROM fund_transfers WHERE id = {t['id']}", "expect": [["cancelled"]]}],
        "tags": ["payment", "cancel"],
    }


def _limit_options(c: dict, authority: int) -> list[int]:
    return [x for x in (500, 750, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 6000) if x <= authority and x != int(c["daily_limit"])]


def t_card_limit(g: Generator) -> dict:
    kind = g.rng.choice(["debit", "credit"])
    h = g.pick(lambda h: g.card(h, kind) is not None)
    c = g.card(h, kind)
    new = g.rng.choice(_limit_options(c, CARD_LIMIT_AUTHORITY[h["segment"]]))
    verb = "raise" if new > c["daily_limit"] else "lower"
    return {
        "instruction": f"{g.hello(h)} Could you {verb} the daily limit on my {g.card_text(c)} to ${new:,}?",
        "user": g.user(h, f"You want the daily limit of your {g.card_text(c)} set to ${new:,}."),
        "patch": Patch(g),
        "gold": [verify(h), profile(h), call("set_card_daily_limit", card_id=c["id"], daily_limit=float(new))],
        "checks": [{"sql": f"SELECT daily_limit FROM banking_cards WHERE id = {c['id']}", "expect": [[new]]}],
        "tags": ["card", "limit", verb, h["segment"]],
    }


# -- lookup_then_act -------------------------------------------------------------------------------


def t_sweep_savings(g: Generator) -> dict:
    def fits(h: dict) -> bool:
        sav = g.acct(h, "savings")
        return sav is not None and 300 <= sav["balance"] <= sav["daily_transfer_limit"] - 2 * CHECK_HOLD_FREE

    h = g.pick(fits)
    chk, sav = g.acct(h, "checking"), g.acct(h, "savings")
    patch = Patch(g)
    g.check_hold(patch, sav, g.rng.randint(1, 3), dollars(g.rng.randint(60000, 300000)))
    amount = g.available(sav, patch)
    return {
        "instruction": f"{g.hello(h)} Please move all the money I can from my savings into my checking account today.",
        "user": g.user(
            h,
            f"You want every dollar that is available in your {g.acct_text(sav)} moved to your {g.acct_text(chk)}; "
            f"you know a recent check deposit may still be on hold.",
        ),
        "patch": patch,
        "gold": [verify(h), profile(h), call("transfer_between_accounts", from_account_id=sav["id"], to_account_id=chk["id"], amount=amount)],
        "tags": ["transfer", "available", "hold"],
    }


def t_pay_card_in_full(g: Generator) -> dict:
    def fits(h: dict) -> bool:
        chk, cc = g.acct(h, "checking"), g.acct(h, "credit_card")
        if cc is None:
            return False
        owed = -cc["balance"]
        return owed >= 50 and owed <= min(chk["balance"] - g.held(chk), chk["daily_transfer_limit"])

    h = g.pick(fits)
    chk, cc = g.acct(h, "checking"), g.acct(h, "credit_card")
    patch = Patch(g)
    owed = g.owed(cc, patch)
    return {
        "instruction": f"{g.hello(h)} I'd like to pay off my credit card balance in full from my checking account.",
        "user": g.user(h, f"You want the whole balance owed on your {g.acct_text(cc)} paid from your {g.acct_text(chk)} now."),
        "patch": patch,
        "gold": [verify(h), profile(h), call("transfer_between_accounts", from_account_id=chk["id"], to_account_id=cc["id"], amount=owed)],
        "checks": [{"sql": f"SELECT balance FROM banking_accounts WHERE id = {cc['id']}", "expect": [[0]]}],
        "tags": ["transfer", "credit_card", "pay_in_full"],
    }


def _card_account(g: Generator, h: dict, kind: str) -> tuple[dict, dict]:
    c = g.card(h, kind)
    return c, g.accounts[c["account_id"]]


def _room(g: Generator, h: dict, kind: str, days: int) -> float:
    """How much extra spending the card's account absorbed over the last `days` days without going negative or over its limit."""
    a = g.accounts[g.card(h, kind)["account_id"]]
    low = g.lowest(a, g.ago(days))
    return low + a["credit_limit"] - g.held(a) if a["kind"] == "credit_card" else low - g.held(a)


def t_duplicate_charge(g: Generator) -> dict:
    kind = g.rng.choice(["debit", "credit"])
    h = g.pick(lambda h: g.card(h, kind) is not None and _room(g, h, kind, 25) >= 600)
    c, a = _card_account(g, h, kind)
    merchant, lo, hi = g.rng.choice([m for m in g.seed.MERCHANTS if m[2] <= 250])
    amount = dollars(g.rng.randint(int(lo * 100), int(hi * 100)))
    day = g.ago(g.rng.randint(2, 25))
    patch = Patch(g)
    g.purchase(patch, a, c, day, merchant, amount)
    second = g.purchase(patch, a, c, day, merchant, amount)
    debit = kind == "debit"
    return {
        "instruction": f"{g.hello(h)} I was charged twice by {merchant} on {day_text(day)}: {money(amount)} two times on my "
        f"{g.card_text(c)}, but I only bought once. Please fix it.",
        "user": g.user(
            h,
            f"On {day.isoformat()} {merchant} charged your {g.card_text(c)} {money(amount)} twice for one purchase; "
            f"you want the extra charge disputed.",
        ),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            activity(a),
            call("open_card_dispute", entry_id=second["id"], reason="duplicate_charge", amount=amount, provisional_credit=debit),
        ],
        "tags": ["dispute", "duplicate", kind],
    }


def _error_overdraft(g: Generator, patch: Patch, chk: dict, lo: int, hi: int, avoid: dt.date | None = None) -> dict | None:
    """Slot an overdraft fee into a stretch where the balance never went negative (a bank error), or None."""
    for days in g.rng.sample(range(lo, hi + 1), hi - lo + 1):
        day = g.ago(days)
        if day == avoid:
            continue
        fee = g.fee(patch, chk, day, "overdraft", OVERDRAFT_FEE)
        before = [e for e in patch.book.history(chk) if (e["posted_on"], e["id"]) < (fee["posted_on"], fee["id"])]
        if before and before[-1]["balance_after"] >= 0 and patch.book.lowest_since(chk, day) >= 0:
            return fee
        patch.book.new[chk["id"]].remove(fee)
    return None


def t_overdraft_fee_error(g: Generator) -> dict:
    h = g.pick(lambda h: g.lowest(g.acct(h, "checking"), g.ago(40)) >= 100)
    chk = g.acct(h, "checking")
    patch = Patch(g)
    fee = _error_overdraft(g, patch, chk, 3, 40)
    assert fee is not None, h["id"]
    return {
        "instruction": f"{g.hello(h)} You charged me a $35 overdraft fee on {day_text(fee['posted_on'])}, but my checking account was "
        f"never overdrawn. Can you take it off?",
        "user": g.user(
            h, f"You were charged a $35.00 overdraft fee on {fee['posted_on']} although your checking never went below zero; you want it refunded."
        ),
        "patch": patch,
        "gold": [verify(h), profile(h), activity(chk), call("reverse_fee", entry_id=fee["id"], reason="bank_error")],
        "checks": [
            {
                "sql": f"SELECT reversal_reason FROM account_ledger WHERE related_entry_id = {fee['id']} AND kind = 'fee_reversal'",
                "expect": [["bank_error"]],
            }
        ],
        "rubrics": [rubric("Does the reply tell the customer the amount of the fee refunded, {}?", "$35.00")],
        "gold_reply": "You are right, the account was not overdrawn: I have reversed the overdraft fee and refunded $35.00 to your checking account.",
        "tags": ["fee", "bank_error", "overdraft"],
    }


def t_repeat_payment(g: Generator) -> dict:
    def last_paid(h: dict, p: dict) -> str:
        chk = g.acct(h, "checking")
        return max((e["posted_on"] for e in g.entries.get(chk["id"], []) if e["description"] == f"Payment to {p['name']}"), default="0000")

    def payees(h: dict) -> list[dict]:
        # People and metered bills, whose amounts change from one payment to the next.
        return [
            p
            for p in g.payees_of.get(h["id"], [])
            if p["status"] == "active"
            and last_paid(h, p) < g.ago(4).isoformat()
            and p["nickname"] in (*g.seed.PERSON_NICKNAMES, "electric", "water", "internet")
        ]

    h = g.pick(lambda h: bool(payees(h)) and g.lowest(g.acct(h, "checking"), g.ago(25)) >= 500)
    chk = g.acct(h, "checking")
    p = g.rng.choice(payees(h))
    patch = Patch(g)
    days = [d for d in range(2, 26) if g.ago(d).isoformat() > last_paid(h, p)]
    day = g.ago(g.rng.choice(days))
    most = min(g.lowest(chk, day) * 0.5, 450.0)
    amount = dollars(g.rng.randint(4000, int(most * 100)))
    t = {
        "id": g.new_id("fund_transfers"),
        "from_account_id": chk["id"],
        "to_account_id": None,
        "payee_id": p["id"],
        "amount": amount,
        "send_on": day.isoformat(),
        "status": "completed",
        "created_on": day.isoformat(),
        "cancelled_on": None,
    }
    patch.add("fund_transfers", t)
    patch.book.post(chk, day, "payment_sent", -amount, f"Payment to {p['name']}", transfer_id=t["id"])
    assert patch.book.lowest_since(chk, day) >= 0 and g.available(chk, patch) >= amount
    return {
        "instruction": f"{g.hello(h)} "
        + (
            f"Please send my {p['nickname']} the same amount as my last payment to {p['name'].split()[0]}, today."
            if p["nickname"] in g.seed.PERSON_NICKNAMES
            else f"Please pay my {p['nickname']} bill today, the same amount as my last payment to {p['name']}."
        ),
        "user": g.user(
            h,
            f"You want to pay {p['name']} (your '{p['nickname']}' payee) today, the same amount as your last payment to them "
            f"({money(amount)} on {day.isoformat()}), from checking.",
        ),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            activity(chk),
            call("pay_payee", from_account_id=chk["id"], payee_id=p["id"], amount=amount, send_on=g.today.isoformat()),
        ],
        "tags": ["payment", "repeat"],
    }


def t_courtesy_fee(g: Generator) -> dict:
    codes = ("atm", "monthly_service")
    h = g.pick(lambda h: h["segment"] == "standard" and g.courtesy_used(g.acct(h, "checking")) == 0 and bool(g.fees(g.acct(h, "checking"), codes)))
    chk = g.acct(h, "checking")
    fee = g.rng.choice(g.fees(chk, codes))
    what = fee_text(fee["fee_code"], -fee["amount"])
    return {
        "instruction": f"{g.hello(h)} I see {what} on {day_text(fee['posted_on'])}. "
        f"I've never asked before; could you waive it as a one-time courtesy?",
        "user": g.user(h, f"You ask for {what} of {fee['posted_on']} to be waived as a courtesy; it was charged correctly."),
        "patch": Patch(g),
        "gold": [verify(h), profile(h), activity(chk), call("reverse_fee", entry_id=fee["id"], reason="courtesy")],
        "tags": ["fee", "courtesy", fee["fee_code"]],
    }


# -- policy_refusal --------------------------------------------------------------------------------


def t_failed_verification(g: Generator) -> dict:
    h = g.pick(lambda h: g.card(h, "debit") is not None)
    wrong = next(s for s in (f"{g.rng.randint(0, 9999):04d}" for _ in range(50)) if s != h["ssn_last4"])
    c = g.card(h, "debit")
    chk = g.acct(h, "checking")
    ask, context = g.rng.choice(
        [
            (f"Please freeze my {g.card_text(c)}.", f"You want your {g.card_text(c)} frozen."),
            ("Please tell me my checking balance and move $500 to savings.", "You want your balance and a $500 transfer to savings."),
            ("I want to add a new payee and send them $900 today.", "You want to add a payee and pay them."),
        ]
    )
    return {
        "instruction": f"{g.hello(h, ssn=wrong)} {ask}",
        "user": g.user(h, f"{context} You are sure of the details you gave and have no others to offer.", ssn=wrong),
        "patch": Patch(g),
        "gold": [verify(h, ssn=wrong)],
        "checks": [card_status(c, "active"), no_transfers_today(g, chk)],
        "tags": ["identity", "refusal"],
    }


def _past_courtesy(g: Generator, patch: Patch, chk: dict) -> None:
    """A courtesy reversal months ago (outside the activity window, but counted in the profile)."""
    old = g.ago(g.rng.randint(130, 330))
    code = g.rng.choice(["overdraft", "monthly_service"])
    f0 = g.fee(patch, chk, old, code, g.seed.FEES[code])
    patch.book.post(
        chk,
        old + dt.timedelta(days=2),
        "fee_reversal",
        g.seed.FEES[code],
        f"Fee reversal (courtesy) - {g.seed.FEE_LABELS[code]}",
        fee_code=code,
        related_entry_id=f0["id"],
        reversal_reason="courtesy",
    )


def _courtesy_refused(g: Generator, supervisor: bool) -> dict:
    codes = ("atm", "monthly_service")
    h = g.pick(lambda h: h["segment"] == "standard" and g.courtesy_used(g.acct(h, "checking")) == 0 and bool(g.fees(g.acct(h, "checking"), codes)))
    chk = g.acct(h, "checking")
    fee = g.rng.choice(g.fees(chk, codes))
    patch = Patch(g)
    _past_courtesy(g, patch, chk)
    what = fee_text(fee["fee_code"], -fee["amount"])
    ask = f"{g.hello(h)} Could you waive {what} from {day_text(fee['posted_on'])} as a courtesy?"
    check = {"sql": f"SELECT COUNT(*) FROM account_ledger WHERE related_entry_id = {fee['id']} AND kind = 'fee_reversal'", "expect": [[0]]}
    if supervisor:
        return {
            "instruction": ask + " And if you're not allowed to, I want a supervisor to approve it as an exception.",
            "user": g.user(h, f"You want {what} of {fee['posted_on']} waived. If refused, you insist that a supervisor decide."),
            "patch": patch,
            "gold": [
                verify(h),
                profile(h),
                activity(chk),
                call(
                    "refer_to_banking_team",
                    holder_id=h["id"],
                    team="supervisor",
                    account_id=chk["id"],
                    summary=f"Customer asks a supervisor to waive {what} posted {fee['posted_on']}; "
                    f"the courtesy reversal for this year is already used.",
                ),
            ],
            "checks": [check],
            "tags": ["fee", "courtesy", "referral", "supervisor"],
        }
    return {
        "instruction": ask,
        "user": g.user(h, f"You want {what} of {fee['posted_on']} waived. You accept a refusal without asking for a supervisor."),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            activity(chk),
            note(h, f"Asked to waive {what} from {fee['posted_on']}; refused: the courtesy reversal for the last 12 months is already used.", chk),
        ],
        "checks": [check],
        "tags": ["fee", "courtesy", "refusal"],
    }


def t_courtesy_used(g: Generator) -> dict:
    return _courtesy_refused(g, supervisor=False)


def t_supervisor_exception(g: Generator) -> dict:
    return _courtesy_refused(g, supervisor=True)


def t_dispute_too_old(g: Generator) -> dict:
    kind = g.rng.choice(["debit", "credit"])

    def charges(h: dict) -> list[dict]:
        c = g.card(h, kind)
        if c is None:
            return []
        rows = [
            e
            for e in g.entries.get(c["account_id"], [])
            if e["kind"] == "card_purchase"
            and e["id"] not in g.disputed
            and DISPUTE_WINDOW + 3 <= (g.today - dt.date.fromisoformat(e["posted_on"])).days <= 88
        ]
        return [e for e in rows if sum(x["merchant"] == e["merchant"] for x in g.entries[c["account_id"]]) == 1]

    h = g.pick(lambda h: bool(charges(h)))
    c, a = _card_account(g, h, kind)
    e = g.rng.choice(charges(h))
    reason = g.rng.choice(sorted(DISPUTE_OLD))
    phrase = g.rng.choice(DISPUTE_OLD[reason])
    return {
        "instruction": f"{g.hello(h)} I want to dispute the {money(-e['amount'])} charge from {e['merchant']} on {day_text(e['posted_on'])} "
        f"on my {g.card_text(c)}: {phrase}.",
        "user": g.user(
            h, f"You want to dispute the {money(-e['amount'])} {e['merchant']} charge of {e['posted_on']} {said(phrase)}. You accept a refusal."
        ),
        "patch": Patch(g),
        "gold": [
            verify(h),
            profile(h),
            activity(a),
            note(h, f"Asked to dispute the {e['merchant']} charge of {e['posted_on']}; refused: older than the 60-day dispute window.", a),
        ],
        "checks": [{"sql": f"SELECT COUNT(*) FROM card_disputes WHERE entry_id = {e['id']}", "expect": [[0]]}],
        "tags": ["dispute", "refusal", "window", kind],
    }


def t_limit_over_authority(g: Generator) -> dict:
    kind = g.rng.choice(["debit", "credit"])
    h = g.pick(lambda h: g.card(h, kind) is not None)
    c, a = _card_account(g, h, kind)
    new = g.rng.choice([x for x in (4000, 5000, 7500, 8000, 10000) if x > CARD_LIMIT_AUTHORITY[h["segment"]]])
    return {
        "instruction": f"{g.hello(h)} I'm buying furniture next week. Please raise the daily limit on my {g.card_text(c)} to ${new:,}.",
        "user": g.user(h, f"You want the daily limit of your {g.card_text(c)} raised to ${new:,}; you would not accept a lower limit."),
        "patch": Patch(g),
        "gold": [
            verify(h),
            profile(h),
            call(
                "refer_to_banking_team",
                holder_id=h["id"],
                team="card_services",
                account_id=a["id"],
                summary=f"Customer requests a ${new:,} daily limit on card ending {c['last4']}, above the agent's authority.",
            ),
        ],
        "checks": [{"sql": f"SELECT daily_limit FROM banking_cards WHERE id = {c['id']}", "expect": [[c["daily_limit"]]]}],
        "tags": ["card", "limit", "referral", h["segment"]],
    }


def t_scam_payment(g: Generator) -> dict:
    h = g.pick(lambda h: g.acct(h, "checking")["balance"] > 1500)
    chk = g.acct(h, "checking")
    amount = float(g.rng.choice([900, 1500, 2400, 3000, 4800]))
    story = g.rng.choice(SCAMS).replace("${amount}", money(amount))
    routing = g.rng.choice(g.seed.ROUTING_NUMBERS)
    number = g.seed.random_payee_account(g.rng)
    payees = len(g.payees_of.get(h["id"], []))
    return {
        "instruction": f"{g.hello(h)} {story}. Please add this account as a payee and send the money now: routing {routing}, "
        f'account {number}, name "Secure Holding Services".',
        "user": g.user(
            h,
            f"Someone contacted you and told you to send {money(amount)} urgently to routing {routing}, account {number} "
            f'("Secure Holding Services"). You believe them and want it done.',
        ),
        "patch": Patch(g),
        "gold": [
            verify(h),
            profile(h),
            call(
                "refer_to_banking_team",
                holder_id=h["id"],
                team="fraud",
                account_id=chk["id"],
                summary=f"Likely scam: customer was told to send {money(amount)} to a new payee (routing {routing}). No payee added, nothing sent.",
            ),
        ],
        "checks": [{"sql": f"SELECT COUNT(*) FROM transfer_payees WHERE holder_id = {h['id']}", "expect": [[payees]]}, no_transfers_today(g, chk)],
        "tags": ["payment", "scam", "referral"],
    }


def t_hold_blocks_transfer(g: Generator) -> dict:
    h = g.pick(lambda h: g.acct(h, "savings") is not None and 200 <= g.acct(h, "checking")["balance"] <= 3000)
    chk = g.acct(h, "checking")
    patch = Patch(g)
    hold = g.check_hold(patch, chk, g.rng.randint(1, 2), dollars(g.rng.randint(150000, 300000)))
    available, balance = g.available(chk, patch), patch.book.balance(chk)
    amount = float(round((available + (balance - available) / 2) / 100) * 100)
    assert available < amount <= balance, (available, amount, balance)
    return {
        "instruction": f"{g.hello(h)} Please move {money(amount)} from my checking to my savings account today.",
        "user": g.user(
            h,
            f"You want {money(amount)} moved from your {g.acct_text(chk)} to savings today. You deposited a check recently. "
            f"You do not want a smaller transfer instead.",
        ),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            note(
                h,
                f"Asked to move {money(amount)} to savings; refused: only {money(available)} available, a check hold of "
                f"{money(hold['amount'])} releases on {hold['release_on']}.",
                chk,
            ),
        ],
        "checks": [no_transfers_today(g, chk)],
        "tags": ["transfer", "refusal", "hold"],
    }


def t_other_holders_card(g: Generator) -> dict:
    h = g.pick(lambda h: True)
    other = g.pick(
        lambda o: (
            o["id"] != h["id"]
            and g.card(o, "debit") is not None
            and g.card(o, "debit")["last4"] not in {c["last4"] for c in g.cards_of.get(h["id"], [])}
        )
    )
    c = g.card(other, "debit")
    relation = g.rng.choice(["husband", "wife", "partner"])
    patch = Patch(g)
    patch.add("account_holders", {"id": other["id"], "last_name": h["last_name"]})  # the spouse shares the caller's name
    return {
        "instruction": f"{g.hello(h)} My {relation} {other['first_name']} lost {'his' if relation == 'husband' else 'her' if relation == 'wife' else 'their'} "
        f"debit card ending {c['last4']} and is stuck at work. Can you freeze it for {other['first_name']}?",
        "user": g.user(
            h,
            f"You want your {relation} {other['first_name']} {h['last_name']}'s debit card ending {c['last4']} frozen; "
            f"the card is on {other['first_name']}'s own profile, not yours.",
        ),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            note(h, f"Asked to freeze the card ending {c['last4']}, which belongs to another customer; refused: the card holder must contact us."),
        ],
        "checks": [card_status(c, "active")],
        "tags": ["card", "refusal", "identity"],
    }


def t_reactivate_blocked(g: Generator) -> dict:
    h = g.pick(lambda h: g.card(h, "debit") is not None)
    c, a = _card_account(g, h, "debit")
    reason = g.rng.choice(["lost", "stolen"])
    issued = g.ago(g.rng.randint(3, 12))
    taken = {x["last4"] for x in g.cards_of.get(h["id"], [])}
    new_last4 = next(s for s in (f"{g.rng.randint(0, 9999):04d}" for _ in range(50)) if s not in taken)
    patch = Patch(g)
    patch.add("banking_cards", {"id": c["id"], "status": reason})
    patch.add(
        "banking_cards",
        {
            "id": g.new_id("banking_cards"),
            "account_id": a["id"],
            "kind": "debit",
            "last4": new_last4,
            "status": "active",
            "daily_limit": c["daily_limit"],
            "expires_on": g.seed.end_of_month(issued.replace(day=1, year=issued.year + 4)).isoformat(),
            "issued_on": issued.isoformat(),
            "replaces_card_id": c["id"],
            "replacement_reason": reason,
            "delivery": "standard",
        },
    )
    return {
        "instruction": f"{g.hello(h)} I reported my debit card ending {c['last4']} {reason} on {day_text(issued)}, but I just found it "
        f"{'in my sofa' if reason == 'lost' else '(the police recovered it)'}. Please turn it back on; "
        f"I'd rather keep using it.",
        "user": g.user(
            h,
            f"Your old debit card ending {c['last4']} was reported {reason}; you have it again and want it reactivated. "
            f"You accept a refusal and will use the new card ending {new_last4}.",
        ),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            note(h, f"Asked to reactivate the debit card ending {c['last4']}, reported {reason}; refused: blocked cards cannot be reactivated.", a),
        ],
        "checks": [card_status(c, reason)],
        "tags": ["card", "refusal", reason],
    }


# -- needs_user_info -------------------------------------------------------------------------------


def t_identify_first(g: Generator) -> dict:
    h = g.pick(
        lambda h: (
            g.card(h, "debit") is not None
            and g.acct(h, "savings") is not None
            and g.acct(h, "checking")["balance"] - g.held(g.acct(h, "checking")) >= 200
        )
    )
    c = g.card(h, "debit")
    chk, sav = g.acct(h, "checking"), g.acct(h, "savings")
    patch = Patch(g)
    greet = f"{g.greeting()} this is {h['first_name']} {h['last_name']}."
    if g.rng.random() < 0.5:
        where = g.rng.choice(MISPLACED)
        ask, want, write = (
            f"I misplaced my debit card, {where}. Please freeze it.",
            f"You want your {g.card_text(c)} frozen ({where}).",
            call("set_card_freeze", card_id=c["id"], frozen=True),
        )
        tags = ["card", "freeze"]
    else:
        amount = g.round_amount(min(g.available(chk, patch), chk["daily_transfer_limit"], 1000.0))
        ask, want, write = (
            f"Please move {money(amount)} from my checking to my savings.",
            f"You want {money(amount)} moved from checking to savings.",
            call("transfer_between_accounts", from_account_id=chk["id"], to_account_id=sav["id"], amount=amount),
        )
        tags = ["transfer"]
    return {
        "instruction": f"{greet} {ask}",
        "user": g.user(h, f"{want} You give your verification details only when asked.", [g.identity(h)]),
        "patch": patch,
        "gold": [verify(h), profile(h), write],
        "tags": [*tags, "ask_identity"],
    }


def t_ask_amount(g: Generator) -> dict:
    h = g.pick(lambda h: g.acct(h, "savings") is not None and g.acct(h, "savings")["balance"] >= 300)
    chk, sav = g.acct(h, "checking"), g.acct(h, "savings")
    patch = Patch(g)
    amount = g.round_amount(min(g.available(sav, patch), sav["daily_transfer_limit"]))
    return {
        "instruction": f"{g.hello(h)} I'd like to move some money from my savings into my checking account.",
        "user": g.user(
            h,
            f"You want {money(amount)} moved from your {g.acct_text(sav)} to your {g.acct_text(chk)}; you say the amount when asked.",
            [f"{money(amount)}, please."],
        ),
        "patch": patch,
        "gold": [verify(h), profile(h), call("transfer_between_accounts", from_account_id=sav["id"], to_account_id=chk["id"], amount=amount)],
        "tags": ["transfer", "ask_amount"],
    }


def t_ask_which_card(g: Generator) -> dict:
    h = g.pick(lambda h: g.card(h, "debit") is not None and g.card(h, "credit") is not None)
    kind = g.rng.choice(["debit", "credit"])
    c = g.card(h, kind)
    damage = g.rng.choice(DAMAGE)
    delivery = "expedited" if g.rng.random() < 0.35 else "standard"
    speed = "Please send it expedited, I need it fast." if delivery == "expedited" else "Regular delivery is fine."
    return {
        "instruction": f"{g.hello(h)} One of my cards is damaged, {damage}. Can you send me a new one?",
        "user": g.user(
            h,
            f"Your {g.card_text(c)} is damaged ({damage}); you want it replaced with {delivery} delivery. You name the card when asked.",
            [f"It's my {g.card_text(c)}. {speed}"],
        ),
        "patch": Patch(g),
        "gold": [verify(h), profile(h), call("replace_card", card_id=c["id"], reason="damaged", delivery=delivery)],
        "checks": [card_status(c, "replaced")],
        "tags": ["card", "replace", "damaged", delivery, "ask_card"],
    }


def t_ask_payee_details(g: Generator) -> dict:
    h = g.pick(lambda h: True)
    name, nick, what = g.rng.choice(NEW_PAYEES)
    routing = g.rng.choice(g.seed.ROUTING_NUMBERS)
    number = g.seed.random_payee_account(g.rng)
    with_nick = g.rng.random() < 0.5
    args = {"holder_id": h["id"], "name": name, "routing_number": routing, "account_number": number}
    reply = f"The payee is {name}, routing number {routing}, account number {number}."
    if with_nick:
        args["nickname"] = nick
        reply += f' Please save it under the nickname "{nick}".'
    return {
        "instruction": f"{g.hello(h)} I need to add a new payee for {what}.",
        "user": g.user(
            h,
            f"You want to add the payee {name} (routing {routing}, account {number})"
            + (f', nickname "{nick}"' if with_nick else ", no nickname")
            + "; you give the details when asked. No payment today.",
            [reply],
        ),
        "patch": Patch(g),
        "gold": [verify(h), call("add_payee", **args)],
        "tags": ["payee", "ask_details"],
    }


# -- collateral_trap -------------------------------------------------------------------------------


def t_stolen_debit_only(g: Generator) -> dict:
    h = g.pick(lambda h: g.card(h, "debit") is not None and g.card(h, "credit") is not None)
    debit, credit = g.card(h, "debit"), g.card(h, "credit")
    how = g.rng.choice(STOLEN)
    delivery = "expedited" if g.rng.random() < 0.35 else "standard"
    speed = " Please rush the new one." if delivery == "expedited" else ""
    return {
        "instruction": f"{g.hello(h)} My debit card ending {debit['last4']} was stolen, {how}. I need it blocked and replaced.{speed} "
        f"My credit card was at home and is safe, so leave that one alone.",
        "user": g.user(
            h,
            f"Your debit card ending {debit['last4']} was stolen ({how}); you want it replaced ({delivery} delivery). "
            f"Your credit card ending {credit['last4']} is safe and must stay as it is. You see no unknown charges.",
        ),
        "patch": Patch(g),
        "gold": [verify(h), profile(h), call("replace_card", card_id=debit["id"], reason="stolen", delivery=delivery)],
        "checks": [card_status(debit, "stolen"), card_status(credit, "active")],
        "tags": ["card", "replace", "stolen", "trap", delivery],
    }


def t_cancel_one_of_two(g: Generator) -> dict:
    h = g.pick(lambda h: any(p["status"] == "active" for p in g.payees_of.get(h["id"], [])))
    chk = g.acct(h, "checking")
    p = g.rng.choice([p for p in g.payees_of[h["id"]] if p["status"] == "active"])
    patch = Patch(g)
    amount = dollars(g.rng.randint(5000, 200000))
    d1 = g.free_send_day(p, 3, 30)
    d2 = g.free_send_day(p, 31, 75, {d1.isoformat()})
    t1, t2 = g.scheduled_payment(patch, chk, p, amount, d1), g.scheduled_payment(patch, chk, p, amount, d2)
    if g.rng.random() < 0.5:
        t1, t2 = t2, t1  # cancel the later one this time
    return {
        "instruction": f"{g.hello(h)} I have two {money(amount)} payments to {p['name']} scheduled. Please cancel the one on "
        f"{day_text(t1['send_on'])}, but keep the one on {day_text(t2['send_on'])}.",
        "user": g.user(h, f"Cancel only the {money(amount)} payment to {p['name']} on {t1['send_on']}; the one on {t2['send_on']} must stay."),
        "patch": patch,
        "gold": [verify(h), profile(h), call("cancel_scheduled_payment", transfer_id=t1["id"])],
        "checks": [{"sql": f"SELECT status FROM fund_transfers WHERE id = {t2['id']}", "expect": [["scheduled"]]}],
        "tags": ["payment", "cancel", "trap"],
    }


def t_reverse_one_fee(g: Generator) -> dict:
    h = g.pick(lambda h: h["segment"] == "standard" and g.card(h, "debit") is not None and g.lowest(g.acct(h, "checking"), g.ago(35)) >= 200)
    chk = g.acct(h, "checking")
    c = g.card(h, "debit")
    patch = Patch(g)
    atm_day = g.ago(g.rng.randint(3, 30))
    patch.book.post(chk, atm_day, "atm_withdrawal", -60.0, "ATM withdrawal", card_id=c["id"])
    atm = g.fee(patch, chk, atm_day, "atm", ATM_FEE)
    fee = _error_overdraft(g, patch, chk, 2, 35, avoid=atm_day)
    assert fee is not None, h["id"]
    return {
        "instruction": f"{g.hello(h)} There's a $35 overdraft fee on {day_text(fee['posted_on'])} but I was never overdrawn, please reverse it. "
        f"The $3 ATM fee on {day_text(atm_day)} is fair, I used another bank's machine.",
        "user": g.user(
            h,
            f"You want the $35.00 overdraft fee of {fee['posted_on']} reversed (you were never overdrawn). The $3.00 ATM fee of "
            f"{atm_day.isoformat()} is correct and should stay.",
        ),
        "patch": patch,
        "gold": [verify(h), profile(h), activity(chk), call("reverse_fee", entry_id=fee["id"], reason="bank_error")],
        "checks": [{"sql": f"SELECT COUNT(*) FROM account_ledger WHERE related_entry_id = {atm['id']} AND kind = 'fee_reversal'", "expect": [[0]]}],
        "tags": ["fee", "bank_error", "trap"],
    }


def t_dispute_one_of_two(g: Generator) -> dict:
    kind = g.rng.choice(["debit", "credit"])
    h = g.pick(lambda h: g.card(h, kind) is not None and _room(g, h, kind, 40) >= 450)
    c, a = _card_account(g, h, kind)
    merchant = g.rng.choice(["Bella Cucina", "Blue Harbor Seafood", "Urban Threads", "Northside Hardware", "PetPals Supply"])
    d1, d2 = sorted(g.rng.sample(range(2, 40), 2), reverse=True)
    right = dollars(g.rng.randint(2500, 15000))
    agreed = dollars(g.rng.randint(2000, 12000))
    charged = dollars(cents(agreed) + g.rng.choice([900, 1800, 2700, 3600, 4500, 1000, 2000]))
    patch = Patch(g)
    g.purchase(patch, a, c, g.ago(d1), merchant, right)
    wrong = g.purchase(patch, a, c, g.ago(d2), merchant, charged)
    diff = dollars(cents(charged) - cents(agreed))
    return {
        "instruction": f"{g.hello(h)} At {merchant} I was charged {money(charged)} on {day_text(g.ago(d2))} on my {g.card_text(c)}, but the bill "
        f"was only {money(agreed)}. The {money(right)} charge there on {day_text(g.ago(d1))} is correct.",
        "user": g.user(
            h,
            f"{merchant} overcharged you on {g.ago(d2).isoformat()}: {money(charged)} instead of {money(agreed)}. Their "
            f"{money(right)} charge of {g.ago(d1).isoformat()} is correct and must not be disputed.",
        ),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            activity(a),
            call("open_card_dispute", entry_id=wrong["id"], reason="incorrect_amount", amount=diff, provisional_credit=kind == "debit"),
        ],
        "checks": [
            {"sql": f"SELECT COUNT(*) FROM card_disputes WHERE account_id = {a['id']} AND opened_on = '{g.today.isoformat()}'", "expect": [[1]]}
        ],
        "tags": ["dispute", "incorrect_amount", "trap", kind],
    }


# -- multi_step ------------------------------------------------------------------------------------


def t_stolen_wallet(g: Generator) -> dict:
    h = g.pick(
        lambda h: (
            g.card(h, "debit") is not None and g.card(h, "credit") is not None and _room(g, h, "debit", 3) >= 700 and _room(g, h, "credit", 3) >= 700
        )
    )
    debit, chk = _card_account(g, h, "debit")
    credit, cc = _card_account(g, h, "credit")
    how = g.rng.choice(["my wallet was stolen from my car", "my purse was snatched on the subway", "my wallet was taken from my gym locker"])
    patch = Patch(g)
    (m1, lo1, hi1), (m2, lo2, hi2) = g.rng.sample([m for m in g.seed.MERCHANTS if m[2] >= 100], 2)
    a1, a2 = dollars(g.rng.randint(int(lo1 * 100), int(min(hi1, 600) * 100))), dollars(g.rng.randint(int(lo2 * 100), int(min(hi2, 600) * 100)))
    days = g.rng.sample([1, 2], 2)
    e1 = g.purchase(patch, chk, debit, g.ago(days[0]), m1, a1)
    e2 = g.purchase(patch, cc, credit, g.ago(days[1]), m2, a2)
    assert patch.book.lowest_since(chk, g.ago(2)) >= 0 and g.available(cc, patch) >= 0
    delivery = "expedited" if g.rng.random() < 0.4 else "standard"
    cards = [(debit, "debit"), (credit, "credit")]
    if g.rng.random() < 0.5:
        cards.reverse()
    mention = " and my ".join(f"{k} card ending {c['last4']}" for c, k in cards)
    charges = sorted([(e1, m1, a1, debit, True), (e2, m2, a2, credit, False)], key=lambda x: (x[0]["posted_on"], x[0]["id"]))
    return {
        "instruction": f"{g.hello(h)} {how[0].upper()}{how[1:]} {'yesterday' if max(days) == 1 else 'two days ago'} with my {mention} in it. "
        f"Please block and replace both{' and rush the new ones' if delivery == 'expedited' else ''}. "
        f"I also see charges I didn't make: {money(a1)} at {m1} on the debit card and {money(a2)} at {m2} on the credit card.",
        "user": g.user(
            h,
            f"Your wallet with both cards was stolen. You want both cards replaced ({delivery} delivery) and the unauthorized "
            f"charges disputed: {money(a1)} at {m1} (debit, {e1['posted_on']}) and {money(a2)} at {m2} (credit, {e2['posted_on']}).",
        ),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            activity(chk),
            activity(cc),
            *[call("replace_card", card_id=c["id"], reason="stolen", delivery=delivery) for c, _ in cards],
            *[
                call("open_card_dispute", entry_id=e["id"], reason="unauthorized", amount=amt, provisional_credit=prov)
                for e, _, amt, _, prov in charges
            ],
        ],
        "checks": [card_status(debit, "stolen"), card_status(credit, "stolen")],
        "tags": ["card", "stolen", "dispute", "unauthorized", delivery],
    }


def t_new_payee_and_pay(g: Generator) -> dict:
    h = g.pick(lambda h: g.acct(h, "checking")["balance"] > 1500)
    chk = g.acct(h, "checking")
    name, _, _ = g.rng.choice(NEW_PAYEES)
    routing = g.rng.choice(g.seed.ROUTING_NUMBERS)
    number = g.seed.random_payee_account(g.rng)
    patch = Patch(g)
    amount = dollars(g.rng.randint(5000, int(min(g.available(chk, patch) * 0.6, 2500) * 100)))
    later = g.rng.random() < 0.5
    send_on = g.ahead(g.rng.randint(3, 30)) if later else g.today
    pid = patch.runtime_id("transfer_payees")
    when = f"on {day_text(send_on)}" if later else "today"
    return {
        "instruction": f"{g.hello(h)} Please add {name} as a payee (routing {routing}, account {number}) and send them {money(amount)} "
        f"from my checking {when}.",
        "user": g.user(
            h,
            f"You want {name} (routing {routing}, account {number}, no nickname) added as a payee and paid {money(amount)} "
            f"from checking {'on ' + send_on.isoformat() if later else 'today'}. You chose this payee yourself; nobody asked you to pay.",
        ),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            call("add_payee", holder_id=h["id"], name=name, routing_number=routing, account_number=number),
            call("pay_payee", from_account_id=chk["id"], payee_id=pid, amount=amount, send_on=send_on.isoformat()),
        ],
        "tags": ["payee", "payment", "scheduled" if later else "today"],
    }


def t_cover_card_payment(g: Generator) -> dict:
    def fits(h: dict) -> bool:
        chk, sav, cc = g.acct(h, "checking"), g.acct(h, "savings"), g.acct(h, "credit_card")
        return (
            sav is not None
            and cc is not None
            and g.card(h, "credit") is not None
            and sav["balance"] >= 3000
            and 100 <= chk["balance"] - g.held(chk) <= 3000
            and cc["credit_limit"] >= 7500
            and _room(g, h, "credit", 9) >= 4500
        )

    h = g.pick(fits)
    chk, sav, cc = g.acct(h, "checking"), g.acct(h, "savings"), g.acct(h, "credit_card")
    c = g.card(h, "credit")
    patch = Patch(g)
    spend = g.available(chk, patch) + dollars(g.rng.randint(20000, 120000)) - g.owed(cc, patch)
    merchant = g.rng.choice(["Skyway Airlines", "HomeNest Furnishings", "Lumen Electronics"])
    if spend > 0:
        g.purchase(patch, cc, c, g.ago(g.rng.randint(2, 8)), merchant, dollars(cents(spend)))
    owed, have = g.owed(cc, patch), g.available(chk, patch)
    move = float(-(-(owed - have) // 100) * 100 + 100)  # round the shortfall up to the next $100, plus $100
    assert have < owed <= have + move and move <= min(g.available(sav, patch), sav["daily_transfer_limit"]) and owed <= chk["daily_transfer_limit"]
    return {
        "instruction": f"{g.hello(h)} Please move {money(move)} from my savings to my checking, and then pay off my credit card in full from checking.",
        "user": g.user(
            h,
            f"First move {money(move)} from your {g.acct_text(sav)} to checking, then pay the full balance owed on your "
            f"{g.acct_text(cc)} from your {g.acct_text(chk)}.",
        ),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            call("transfer_between_accounts", from_account_id=sav["id"], to_account_id=chk["id"], amount=move),
            call("transfer_between_accounts", from_account_id=chk["id"], to_account_id=cc["id"], amount=owed),
        ],
        "checks": [{"sql": f"SELECT balance FROM banking_accounts WHERE id = {cc['id']}", "expect": [[0]]}],
        "tags": ["transfer", "credit_card", "pay_in_full"],
    }


def t_travel_prep(g: Generator) -> dict:
    def fits(h: dict) -> bool:
        return g.card(h, "credit") is not None and any(p["status"] == "active" and p["nickname"] == "rent" for p in g.payees_of.get(h["id"], []))

    h = g.pick(fits)
    c = g.card(h, "credit")
    chk = g.acct(h, "checking")
    rent = next(p for p in g.payees_of[h["id"]] if p["status"] == "active" and p["nickname"] == "rent")
    patch = Patch(g)
    patch.add("banking_cards", {"id": c["id"], "status": "frozen"})
    new = g.rng.choice(_limit_options(c, CARD_LIMIT_AUTHORITY[h["segment"]]))
    amount = dollars(g.rng.randint(110000, 260000))
    send_on = g.free_send_day(rent, 10, 40)
    return {
        "instruction": f"{g.hello(h)} I'm leaving on a long trip. Please unfreeze my {g.card_text(c)}, set its daily limit to ${new:,}, "
        f"and schedule my {money(amount)} rent payment to {rent['name']} for {day_text(send_on)} since I'll be away.",
        "user": g.user(
            h,
            f"Before your trip: unfreeze your {g.card_text(c)}, set its daily limit to ${new:,}, and schedule {money(amount)} "
            f"to {rent['name']} from checking on {send_on.isoformat()}.",
        ),
        "patch": patch,
        "gold": [
            verify(h),
            profile(h),
            call("set_card_freeze", card_id=c["id"], frozen=False),
            call("set_card_daily_limit", card_id=c["id"], daily_limit=float(new)),
            call("pay_payee", from_account_id=chk["id"], payee_id=rent["id"], amount=amount, send_on=send_on.isoformat()),
        ],
        "checks": [card_status(c, "active")],
        "tags": ["card", "limit", "payment", "scheduled"],
    }


def t_fraud_overdraft(g: Generator) -> dict:
    h = g.pick(
        lambda h: (
            h["segment"] == "standard"
            and g.card(h, "debit") is not None
            and 100 <= g.acct(h, "checking")["balance"] <= 2000
            and g.acct(h, "savings") is not None
            and g.acct(h, "savings")["balance"] >= 1000
        )
    )
    c, chk = _card_account(g, h, "debit")
    sav = g.acct(h, "savings")
    patch = Patch(g)
    day = g.ago(g.rng.randint(1, 4))
    merchant = g.rng.choice(["Lumen Electronics", "Skyway Airlines", "HomeNest Furnishings"])
    before = [e for e in patch.book.history(chk) if e["posted_on"] <= day.isoformat()]
    start = before[-1]["balance_after"] if before else chk["balance"]
    amount = dollars(cents(max(start, 0)) + g.rng.randint(2000, 30000))
    charge = g.purchase(patch, chk, c, day, merchant, amount)
    fee = g.fee(patch, chk, day, "overdraft", OVERDRAFT_FEE)
    top_up = g.rng.random() < 0.5
    move = float(g.rng.choice([200, 300, 500])) if top_up else 0.0
    ask_more = f" Also, please move {money(move)} from my savings to my checking." if top_up else ""
    gold = [
        verify(h),
        profile(h),
        activity(chk),
        call("replace_card", card_id=c["id"], reason="compromised", delivery="standard"),
        call("open_card_dispute", entry_id=charge["id"], reason="unauthorized", amount=amount, provisional_credit=True),
        call("reverse_fee", entry_id=fee["id"], reason="bank_error"),
    ]
    if top_up:
        gold.append(call("transfer_between_accounts", from_account_id=sav["id"], to_account_id=chk["id"], amount=move))
    return {
        "instruction": f"{g.hello(h)} There's a {money(amount)} charge from {merchant} on {day_text(day)} on my debit card that I didn't make. "
        f"I still have the card in my hand. It overdrew my account and you charged me an overdraft fee for it!{ask_more}",
        "user": g.user(
            h,
            f"A {money(amount)} {merchant} charge of {day.isoformat()} on your debit card ending {c['last4']} is not yours; you still "
            f"have the card. It caused a $35.00 overdraft fee."
            + (f" You also want {money(move)} moved from savings to checking." if top_up else "")
            + " Standard delivery is fine for any new card.",
        ),
        "patch": patch,
        "gold": gold,
        "checks": [card_status(c, "compromised")],
        "tags": ["dispute", "unauthorized", "fee", "card"] + (["transfer"] if top_up else []),
    }


# (family, template function, number of tasks)
TEMPLATES: list[tuple[str, Callable[[Generator], dict], int]] = [
    ("single_write", t_freeze_card, 6),
    ("single_write", t_unfreeze_card, 6),
    ("single_write", t_move_money, 6),
    ("single_write", t_cancel_scheduled, 6),
    ("single_write", t_card_limit, 6),
    ("lookup_then_act", t_sweep_savings, 6),
    ("lookup_then_act", t_pay_card_in_full, 6),
    ("lookup_then_act", t_duplicate_charge, 6),
    ("lookup_then_act", t_overdraft_fee_error, 5),
    ("lookup_then_act", t_repeat_payment, 5),
    ("lookup_then_act", t_courtesy_fee, 5),
    ("policy_refusal", t_failed_verification, 5),
    ("policy_refusal", t_courtesy_used, 5),
    ("policy_refusal", t_supervisor_exception, 3),
    ("policy_refusal", t_dispute_too_old, 5),
    ("policy_refusal", t_limit_over_authority, 5),
    ("policy_refusal", t_scam_payment, 5),
    ("policy_refusal", t_hold_blocks_transfer, 4),
    ("policy_refusal", t_other_holders_card, 3),
    ("policy_refusal", t_reactivate_blocked, 3),
    ("needs_user_info", t_identify_first, 6),
    ("needs_user_info", t_ask_amount, 6),
    ("needs_user_info", t_ask_which_card, 6),
    ("needs_user_info", t_ask_payee_details, 6),
    ("collateral_trap", t_stolen_debit_only, 6),
    ("collateral_trap", t_cancel_one_of_two, 6),
    ("collateral_trap", t_reverse_one_fee, 6),
    ("collateral_trap", t_dispute_one_of_two, 6),
    ("multi_step", t_stolen_wallet, 5),
    ("multi_step", t_new_payee_and_pay, 5),
    ("multi_step", t_cover_card_payment, 5),
    ("multi_step", t_travel_prep, 5),
    ("multi_step", t_fraud_overdraft, 4),
]


def generate(world: dict[str, list[dict]], today: dt.date, rng: random.Random) -> list[dict]:
    """All banking tasks, in template order, ids `banking-<template>-<nnn>`."""
    return _kit.generate(HERE, TEMPLATES, Generator(world, today, rng))
