"""Tools of the Ridgeline Bank service agent.

Each tool is a typed function over the sandbox `Db`; its docstring is what the agent reads. Reads
return JSON-ready dicts. Writes check the rules the bank's systems enforce themselves (identity
verified today, ownership, account and card status, available funds, daily transfer limits, one
dispute per charge, one reversal per fee) and raise `ToolError` to refuse; the engine then rolls
back whatever the call wrote. Rules that need judgement or authority (dispute and fee windows,
courtesy caps, the agent's card-limit authority, scam red flags, when to refer a case) live in
policy.md, so following the policy is the agent's job, not the tools'.

Identity: every tool except `verify_account_holder` acts only for a holder who passed an identity
check today, and only on that holder's own accounts, cards and payees. The check is itself a write
(a row in holder_verifications), so a skipped or failed verification is visible in the final state.

Conventions: SQL is portable and every argument is bound as a parameter; money is handled in whole
cents and stored rounded to 2 decimals; a ledger entry always carries the account's new running
balance; dates are ISO strings derived from `db.today`; repeating a write that already took effect
(freeze a frozen card, reverse a reversed fee) is refused rather than silently applied twice.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from groundstate.state.db import Db
from groundstate.tools import ToolError, tool

MAX_SCHEDULE_DAYS = 90
CARD_LIMIT_RANGE = (100, 10_000)
EXPEDITE_FEE = 25.00
CARD_YEARS = 4
ACTIVITY_DAYS = 120

ReplaceReason = Literal["lost", "stolen", "compromised", "damaged", "expiring"]
Delivery = Literal["standard", "expedited"]
DisputeReason = Literal["unauthorized", "duplicate_charge", "incorrect_amount", "goods_not_received", "cancelled_recurring"]
ReversalReason = Literal["bank_error", "courtesy"]
Team = Literal["fraud", "card_services", "supervisor"]

FEE_LABELS = {"overdraft": "Overdraft fee", "monthly_service": "Monthly service fee", "atm": "Out-of-network ATM fee",
              "wire": "Outgoing wire fee", "card_expedite": "Expedited card delivery fee", "late_payment": "Late payment fee"}
# What happens to a card being replaced, by reason: lost/stolen/compromised cards are blocked for good.
OLD_CARD_STATUS = {"lost": "lost", "stolen": "stolen", "compromised": "compromised", "damaged": "replaced", "expiring": "replaced"}
USABLE_CARD = ("active", "frozen")

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_SSN4 = re.compile(r"^\d{4}$")
_ACCOUNT_NO = re.compile(r"^\d{4,17}$")


# -- helpers ------------------------------------------------------------------------------------

def _cents(amount: Any) -> int:
    """Money as whole cents: exact comparisons whatever float the database hands back."""
    return int(round(float(amount) * 100))


def _dollars(cents: int) -> float:
    return round(cents / 100, 2)


def _amount_cents(amount: float, what: str = "amount") -> int:
    cents = _cents(amount)
    if cents <= 0:
        raise ToolError(f"the {what} must be positive")
    if abs(amount * 100 - cents) > 1e-6:
        raise ToolError(f"{amount} is not a whole number of cents")
    return cents


def _date(value: str, what: str) -> dt.date:
    value = value.strip()
    try:
        if not _DATE.match(value):
            raise ValueError
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ToolError(f"{what} must be a date written YYYY-MM-DD, not {value!r}") from None


def _text(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise ToolError(f"{what} must not be empty")
    return value


def _routing_is_valid(number: str) -> bool:
    """The ABA checksum: 3·(d1+d4+d7) + 7·(d2+d5+d8) + (d3+d6+d9) ≡ 0 (mod 10)."""
    if len(number) != 9 or not number.isdigit():
        return False
    d = [int(c) for c in number]
    return (3 * (d[0] + d[3] + d[6]) + 7 * (d[1] + d[4] + d[7]) + (d[2] + d[5] + d[8])) % 10 == 0


def _holder(db: Db, holder_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM account_holders WHERE id = ?", holder_id)
    if row is None:
        raise ToolError(f"no account holder with id {holder_id}")
    return row


def _verified_holder(db: Db, holder_id: int) -> dict[str, Any]:
    """The holder, if they passed an identity check today; every tool but verify_account_holder needs one."""
    h = _holder(db, holder_id)
    if not db.scalar("SELECT COUNT(*) FROM holder_verifications WHERE holder_id = ? AND checked_on = ? AND passed = 1",
                     holder_id, db.today.isoformat()):
        raise ToolError(f"account holder {holder_id} has not passed identity verification today: call verify_account_holder first")
    return h


def _account(db: Db, account_id: int) -> dict[str, Any]:
    """An account of a verified holder (refused for anyone else's account)."""
    a = db.one("SELECT * FROM banking_accounts WHERE id = ?", account_id)
    if a is None:
        raise ToolError(f"no account with id {account_id}")
    _verified_holder(db, a["holder_id"])
    return a


def _card(db: Db, card_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A card of a verified holder and the account it draws on."""
    c = db.one("SELECT * FROM banking_cards WHERE id = ?", card_id)
    if c is None:
        raise ToolError(f"no card with id {card_id}")
    return c, _account(db, c["account_id"])


def _own_account(db: Db, account_id: int | None, holder_id: int) -> int | None:
    """Check that an optional account belongs to the holder; records must not point at someone else's account."""
    if account_id is None:
        return None
    a = db.one("SELECT holder_id FROM banking_accounts WHERE id = ?", account_id)
    if a is None:
        raise ToolError(f"no account with id {account_id}")
    if a["holder_id"] != holder_id:
        raise ToolError(f"account {account_id} does not belong to account holder {holder_id}")
    return account_id


def _held_cents(db: Db, account_id: int) -> int:
    rows = db.query("SELECT amount FROM account_holds WHERE account_id = ? AND status = 'active' AND release_on > ? ORDER BY id",
                    account_id, db.today.isoformat())
    return sum(_cents(r["amount"]) for r in rows)


def _available_cents(db: Db, a: dict[str, Any]) -> int:
    """Spendable money: the balance less active holds (for a credit card, the unused credit less holds)."""
    base = _cents(a["balance"]) + (_cents(a["credit_limit"]) if a["kind"] == "credit_card" else 0)
    return base - _held_cents(db, a["id"])


def _sent_today_cents(db: Db, account_id: int) -> int:
    rows = db.query("SELECT amount FROM fund_transfers WHERE from_account_id = ? AND status = 'completed' AND send_on = ? ORDER BY id",
                    account_id, db.today.isoformat())
    return sum(_cents(r["amount"]) for r in rows)


def _courtesy_reversals(db: Db, account_id: int) -> int:
    since = (db.today - dt.timedelta(days=365)).isoformat()
    return int(db.scalar("SELECT COUNT(*) FROM account_ledger WHERE account_id = ? AND kind = 'fee_reversal' "
                         "AND reversal_reason = 'courtesy' AND posted_on > ?", account_id, since))


def _post(db: Db, a: dict[str, Any], kind: str, cents: int, description: str, **refs: Any) -> int:
    """Post a signed ledger entry and move the account's balance with it; returns the entry id."""
    balance = _cents(db.scalar("SELECT balance FROM banking_accounts WHERE id = ?", a["id"])) + cents
    db.execute("UPDATE banking_accounts SET balance = ? WHERE id = ?", _dollars(balance), a["id"])
    return db.insert("account_ledger", account_id=a["id"], posted_on=db.today.isoformat(), kind=kind, amount=_dollars(cents),
                     balance_after=_dollars(balance), description=description, merchant=refs.get("merchant"),
                     card_id=refs.get("card_id"), transfer_id=refs.get("transfer_id"), fee_code=refs.get("fee_code"),
                     related_entry_id=refs.get("related_entry_id"), reversal_reason=refs.get("reversal_reason"))


def _check_outgoing(db: Db, a: dict[str, Any], cents: int) -> None:
    """Money leaving an account now: it must be open, hold the funds and stay within the daily limit."""
    if a["status"] != "open":
        raise ToolError(f"account ...{a['number'][-4:]} is {a['status']}: no money can leave it")
    available = _available_cents(db, a)
    if cents > available:
        raise ToolError(f"insufficient available funds in ...{a['number'][-4:]}: ${_dollars(available):,.2f} available "
                        f"(balance ${_dollars(_cents(a['balance'])):,.2f} less holds), ${_dollars(cents):,.2f} requested")
    left = _cents(a["daily_transfer_limit"]) - _sent_today_cents(db, a["id"])
    if cents > left:
        raise ToolError(f"over the daily transfer limit of ${a['daily_transfer_limit']:,.2f} for ...{a['number'][-4:]}: "
                        f"${_dollars(max(left, 0)):,.2f} left today")


def _label(a: dict[str, Any]) -> str:
    return f"{a['nickname']} ...{a['number'][-4:]}"


def _account_view(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    view: dict[str, Any] = {
        "account_id": a["id"], "number": a["number"], "kind": a["kind"], "nickname": a["nickname"], "status": a["status"],
        "balance": _dollars(_cents(a["balance"])), "available": _dollars(_available_cents(db, a)), "opened_on": a["opened_on"],
        "holds": [{"hold_id": h["id"], "amount": _dollars(_cents(h["amount"])), "reason": h["reason"], "placed_on": h["placed_on"],
                   "release_on": h["release_on"]}
                  for h in db.query("SELECT * FROM account_holds WHERE account_id = ? AND status = 'active' AND release_on > ? ORDER BY id",
                                    a["id"], db.today.isoformat())],
        "courtesy_fee_reversals_last_365_days": _courtesy_reversals(db, a["id"]),
    }
    if a["kind"] == "credit_card":
        view.update(credit_limit=_dollars(_cents(a["credit_limit"])), amount_owed=_dollars(max(0, -_cents(a["balance"]))))
    else:
        sent = _sent_today_cents(db, a["id"])
        view.update(daily_transfer_limit=_dollars(_cents(a["daily_transfer_limit"])), sent_today=_dollars(sent),
                    transfer_limit_left_today=_dollars(max(0, _cents(a["daily_transfer_limit"]) - sent)))
    return view


# -- identity (a write: every attempt is logged) -------------------------------------------------

@tool(write=True)
def verify_account_holder(db: Db, email: str, date_of_birth: str, ssn_last4: str) -> dict[str, Any]:
    """Verify the caller's identity against the profile with this email. Required before any other tool.

    Every attempt is logged. A failed attempt means you must not act on or disclose anything about
    the profile; trying again the same day only succeeds if the details now match.

    Args:
        email: The email address on the caller's profile (case does not matter).
        date_of_birth: The caller's date of birth as YYYY-MM-DD, e.g. "1984-03-09".
        ssn_last4: The last four digits of the caller's Social Security number, e.g. "0417".
    """
    h = db.one("SELECT * FROM account_holders WHERE LOWER(email) = ?", email.strip().lower())
    if h is None:
        raise ToolError(f"no account holder with email {email.strip()!r}")
    born = _date(date_of_birth, "date_of_birth").isoformat()
    ssn = ssn_last4.strip()
    if not _SSN4.match(ssn):
        raise ToolError(f"ssn_last4 must be exactly four digits, not {ssn_last4!r}")
    today = db.today.isoformat()
    checks = db.query("SELECT passed FROM holder_verifications WHERE holder_id = ? AND checked_on = ? ORDER BY id", h["id"], today)
    if any(c["passed"] for c in checks):
        raise ToolError(f"{h['first_name']} {h['last_name']} (holder {h['id']}) is already verified today")
    failed = [f for f, given in (("date_of_birth", born), ("ssn_last4", ssn)) if h[f] != given]
    if failed and checks:
        raise ToolError("the details do not match our records; the failed attempt is already logged today. Do not act on this profile")
    db.insert("holder_verifications", holder_id=h["id"], checked_on=today, passed=int(not failed),
              failed_fields=",".join(failed) if failed else None)
    if failed:
        return {"verified": False, "message": "The details do not match our records. The attempt is logged; do not act on or disclose "
                                              "anything about this profile."}
    return {"verified": True, "holder_id": h["id"], "first_name": h["first_name"], "last_name": h["last_name"], "segment": h["segment"]}


# -- reads --------------------------------------------------------------------------------------

@tool
def get_account_holder(db: Db, holder_id: int) -> dict[str, Any]:
    """Get a verified holder's profile: accounts (balances, available funds, holds, limits), cards, payees,
    scheduled payments and open disputes.

    Args:
        holder_id: The holder's id (from verify_account_holder).
    """
    h = _verified_holder(db, holder_id)
    accounts = db.query("SELECT * FROM banking_accounts WHERE holder_id = ? ORDER BY id", holder_id)
    ids = [a["id"] for a in accounts]
    marks = ", ".join("?" for _ in ids)
    cards = db.query(f"SELECT * FROM banking_cards WHERE account_id IN ({marks}) ORDER BY id", *ids)
    payees = db.query("SELECT * FROM transfer_payees WHERE holder_id = ? ORDER BY id", holder_id)
    scheduled = db.query(
        f"SELECT t.*, p.name AS payee_name FROM fund_transfers t JOIN transfer_payees p ON p.id = t.payee_id "
        f"WHERE t.from_account_id IN ({marks}) AND t.status = 'scheduled' ORDER BY t.send_on, t.id", *ids)
    disputes = db.query(f"SELECT * FROM card_disputes WHERE account_id IN ({marks}) AND status = 'open' ORDER BY id", *ids)
    return {
        "holder_id": h["id"], "first_name": h["first_name"], "last_name": h["last_name"], "email": h["email"], "phone": h["phone"],
        "segment": h["segment"], "customer_since": h["customer_since"],
        "accounts": [_account_view(db, a) for a in accounts],
        "cards": [{"card_id": c["id"], "kind": c["kind"], "last4": c["last4"], "account_id": c["account_id"], "status": c["status"],
                   "daily_limit": _dollars(_cents(c["daily_limit"])), "expires_on": c["expires_on"], "issued_on": c["issued_on"]}
                  for c in cards],
        "payees": [{"payee_id": p["id"], "name": p["name"], "nickname": p["nickname"], "routing_number": p["routing_number"],
                    "account_last4": p["account_number"][-4:], "status": p["status"], "added_on": p["added_on"]} for p in payees],
        "scheduled_payments": [{"transfer_id": t["id"], "from_account_id": t["from_account_id"], "payee_id": t["payee_id"],
                                "payee_name": t["payee_name"], "amount": _dollars(_cents(t["amount"])), "send_on": t["send_on"]}
                               for t in scheduled],
        "open_disputes": [{"dispute_id": d["id"], "entry_id": d["entry_id"], "reason": d["reason"], "amount": _dollars(_cents(d["amount"])),
                           "provisional_credit": _dollars(_cents(d["provisional_credit"])), "opened_on": d["opened_on"]} for d in disputes],
    }


@tool
def get_account_activity(db: Db, account_id: int, from_date: str | None = None, to_date: str | None = None) -> dict[str, Any]:
    """List an account's posted ledger entries, newest first (at most 200), each with the running balance after it.

    Shows card purchases (with merchant and card), payments, transfers, fees (with fee_code and whether
    already reversed), reversals, interest and dispute credits; `days_ago` is counted from today.

    Args:
        account_id: The account (see get_account_holder).
        from_date: First posting date to include, YYYY-MM-DD (default: 120 days ago).
        to_date: Last posting date to include, YYYY-MM-DD (default: today).
    """
    a = _account(db, account_id)
    start = _date(from_date, "from_date") if from_date else db.today - dt.timedelta(days=ACTIVITY_DAYS)
    end = _date(to_date, "to_date") if to_date else db.today
    rows = db.query(
        "SELECT e.*, c.last4 AS card_last4 FROM account_ledger e LEFT JOIN banking_cards c ON c.id = e.card_id "
        "WHERE e.account_id = ? AND e.posted_on >= ? AND e.posted_on <= ? ORDER BY e.posted_on DESC, e.id DESC LIMIT 200",
        account_id, start.isoformat(), end.isoformat())
    reversed_fees = {r["related_entry_id"] for r in db.query(
        "SELECT related_entry_id FROM account_ledger WHERE account_id = ? AND kind = 'fee_reversal' ORDER BY id", account_id)}
    disputed = {r["entry_id"]: r["id"] for r in db.query(
        "SELECT id, entry_id FROM card_disputes WHERE account_id = ? AND status <> 'withdrawn' ORDER BY id", account_id)}
    entries = []
    for e in rows:
        item = {"entry_id": e["id"], "posted_on": e["posted_on"], "days_ago": (db.today - dt.date.fromisoformat(e["posted_on"])).days,
                "kind": e["kind"], "amount": _dollars(_cents(e["amount"])), "balance_after": _dollars(_cents(e["balance_after"])),
                "description": e["description"]}
        if e["merchant"]:
            item["merchant"] = e["merchant"]
        if e["card_id"]:
            item.update(card_id=e["card_id"], card_last4=e["card_last4"])
        if e["fee_code"]:
            item["fee_code"] = e["fee_code"]
        if e["kind"] == "fee":
            item["reversed"] = e["id"] in reversed_fees
        if e["kind"] == "card_purchase":
            item["dispute_id"] = disputed.get(e["id"])
        if e["related_entry_id"]:
            item["related_entry_id"] = e["related_entry_id"]
        if e["reversal_reason"]:
            item["reversal_reason"] = e["reversal_reason"]
        entries.append(item)
    return {"account_id": a["id"], "number": a["number"], "kind": a["kind"], "balance": _dollars(_cents(a["balance"])),
            "from_date": start.isoformat(), "to_date": end.isoformat(), "entries": entries}


# -- writes: money movement ---------------------------------------------------------------------

@tool(write=True)
def transfer_between_accounts(db: Db, from_account_id: int, to_account_id: int, amount: float) -> dict[str, Any]:
    """Move money now between two accounts of the same holder: checking or savings to any of their open
    accounts. Paying a credit card this way cannot exceed the amount owed on it.

    Refused beyond the available balance (balance less holds) or the source account's daily transfer limit.

    Args:
        from_account_id: The checking or savings account the money leaves.
        to_account_id: The holder's account that receives it (checking, savings or credit_card).
        amount: Dollars to move, e.g. 250.00.
    """
    src = _account(db, from_account_id)
    dst = db.one("SELECT * FROM banking_accounts WHERE id = ?", to_account_id)
    if dst is None:
        raise ToolError(f"no account with id {to_account_id}")
    if dst["holder_id"] != src["holder_id"]:
        raise ToolError(f"account {to_account_id} belongs to another holder: send money to other people with pay_payee")
    if src["id"] == dst["id"]:
        raise ToolError("the source and destination accounts are the same")
    if src["kind"] == "credit_card":
        raise ToolError("money cannot be transferred out of a credit card account")
    if dst["status"] != "open":
        raise ToolError(f"account ...{dst['number'][-4:]} is {dst['status']} and cannot receive money")
    cents = _amount_cents(amount)
    if dst["kind"] == "credit_card" and cents > -_cents(dst["balance"]):
        raise ToolError(f"the payment exceeds the ${_dollars(max(0, -_cents(dst['balance']))):,.2f} owed on ...{dst['number'][-4:]}")
    _check_outgoing(db, src, cents)
    today = db.today.isoformat()
    tid = db.insert("fund_transfers", from_account_id=src["id"], to_account_id=dst["id"], payee_id=None, amount=_dollars(cents),
                    send_on=today, status="completed", created_on=today, cancelled_on=None)
    _post(db, src, "transfer_out", -cents, f"Transfer to {_label(dst)}", transfer_id=tid)
    _post(db, dst, "transfer_in", cents, f"Transfer from {_label(src)}", transfer_id=tid)
    return {"transfer_id": tid, "status": "completed", "amount": _dollars(cents),
            "from_balance": _dollars(_cents(db.scalar("SELECT balance FROM banking_accounts WHERE id = ?", src["id"]))),
            "to_balance": _dollars(_cents(db.scalar("SELECT balance FROM banking_accounts WHERE id = ?", dst["id"])))}


@tool(write=True)
def add_payee(db: Db, holder_id: int, name: str, routing_number: str, account_number: str, nickname: str | None = None) -> dict[str, Any]:
    """Save a new payee (a person or company at another bank) on a verified holder's profile.

    Args:
        holder_id: The verified holder.
        name: The payee's name exactly as the customer gives it, e.g. "Cedar Grove Apartments".
        routing_number: The payee bank's nine-digit ABA routing number (checked).
        account_number: The payee's account number, digits only.
        nickname: A short name the customer chose for the payee, e.g. "rent"; only if they gave one.
    """
    _verified_holder(db, holder_id)
    name, routing, number = _text(name, "name"), routing_number.strip(), account_number.strip()
    if not _routing_is_valid(routing):
        raise ToolError(f"{routing_number!r} is not a valid nine-digit ABA routing number")
    if not _ACCOUNT_NO.match(number):
        raise ToolError(f"{account_number!r} is not an account number (4 to 17 digits)")
    nick = nickname.strip() if nickname is not None and nickname.strip() else None
    for p in db.query("SELECT id, routing_number, account_number FROM transfer_payees WHERE holder_id = ? AND status = 'active' ORDER BY id",
                      holder_id):
        if (p["routing_number"], p["account_number"]) == (routing, number):
            raise ToolError(f"payee {p['id']} already has that routing and account number")
    pid = db.insert("transfer_payees", holder_id=holder_id, name=name, nickname=nick, routing_number=routing, account_number=number,
                    status="active", added_on=db.today.isoformat())
    return {"payee_id": pid, "name": name, "nickname": nick, "account_last4": number[-4:], "status": "active"}


@tool(write=True)
def pay_payee(db: Db, from_account_id: int, payee_id: int, amount: float, send_on: str) -> dict[str, Any]:
    """Pay one of the holder's saved payees from a checking account, today or on a later date.

    A payment sent today leaves the account at once (available funds and the daily transfer limit
    apply); a later date (up to 90 days ahead) schedules it, and it can be cancelled until then.

    Args:
        from_account_id: The holder's checking account.
        payee_id: The payee (see the payees of get_account_holder, or add_payee).
        amount: Dollars to pay, e.g. 1450.00.
        send_on: The day to send it, YYYY-MM-DD: today's date to send it now.
    """
    a = _account(db, from_account_id)
    if a["kind"] != "checking":
        raise ToolError("payments to payees are sent from a checking account")
    p = db.one("SELECT * FROM transfer_payees WHERE id = ?", payee_id)
    if p is None or p["holder_id"] != a["holder_id"]:
        raise ToolError(f"no payee {payee_id} on this holder's profile")
    if p["status"] != "active":
        raise ToolError(f"payee {payee_id} ({p['name']}) was removed")
    cents = _amount_cents(amount)
    day = _date(send_on, "send_on")
    if day < db.today:
        raise ToolError(f"send_on {day.isoformat()} is in the past; today is {db.today.isoformat()}")
    if (day - db.today).days > MAX_SCHEDULE_DAYS:
        raise ToolError(f"payments can be scheduled at most {MAX_SCHEDULE_DAYS} days ahead")
    today = db.today.isoformat()
    if day > db.today:
        for t in db.query("SELECT id, amount FROM fund_transfers WHERE payee_id = ? AND send_on = ? AND status = 'scheduled' ORDER BY id",
                          payee_id, day.isoformat()):
            if _cents(t["amount"]) == cents:
                raise ToolError(f"payment {t['id']} of ${_dollars(cents):,.2f} to {p['name']} is already scheduled for {day.isoformat()}")
        tid = db.insert("fund_transfers", from_account_id=a["id"], to_account_id=None, payee_id=payee_id, amount=_dollars(cents),
                        send_on=day.isoformat(), status="scheduled", created_on=today, cancelled_on=None)
        return {"transfer_id": tid, "status": "scheduled", "payee": p["name"], "amount": _dollars(cents), "send_on": day.isoformat()}
    _check_outgoing(db, a, cents)
    tid = db.insert("fund_transfers", from_account_id=a["id"], to_account_id=None, payee_id=payee_id, amount=_dollars(cents),
                    send_on=today, status="completed", created_on=today, cancelled_on=None)
    _post(db, a, "payment_sent", -cents, f"Payment to {p['name']}", transfer_id=tid)
    return {"transfer_id": tid, "status": "completed", "payee": p["name"], "amount": _dollars(cents), "send_on": today}


@tool(write=True)
def cancel_scheduled_payment(db: Db, transfer_id: int) -> dict[str, Any]:
    """Cancel a scheduled payment to a payee before its send date. Payments already sent cannot be recalled.

    Args:
        transfer_id: The scheduled payment (see scheduled_payments in get_account_holder).
    """
    t = db.one("SELECT * FROM fund_transfers WHERE id = ?", transfer_id)
    if t is None:
        raise ToolError(f"no payment with id {transfer_id}")
    _account(db, t["from_account_id"])
    if t["status"] == "cancelled":
        raise ToolError(f"payment {transfer_id} is already cancelled")
    if t["status"] != "scheduled":
        raise ToolError(f"payment {transfer_id} was already sent on {t['send_on']} and cannot be recalled")
    db.execute("UPDATE fund_transfers SET status = 'cancelled', cancelled_on = ? WHERE id = ?", db.today.isoformat(), transfer_id)
    return {"transfer_id": transfer_id, "status": "cancelled", "amount": _dollars(_cents(t["amount"])), "send_on": t["send_on"]}


# -- writes: cards ------------------------------------------------------------------------------

@tool(write=True)
def set_card_freeze(db: Db, card_id: int, frozen: bool) -> dict[str, Any]:
    """Temporarily freeze a card (no new purchases or withdrawals) or unfreeze it. Lost, stolen,
    compromised or replaced cards are blocked for good and cannot be unfrozen.

    Args:
        card_id: The card (see the cards of get_account_holder).
        frozen: true to freeze the card, false to unfreeze it.
    """
    c, _ = _card(db, card_id)
    if c["status"] not in USABLE_CARD:
        raise ToolError(f"card ...{c['last4']} is {c['status']}: it is blocked permanently and cannot be frozen or unfrozen")
    new = "frozen" if frozen else "active"
    if c["status"] == new:
        raise ToolError(f"card ...{c['last4']} is already {'frozen' if frozen else 'active (not frozen)'}")
    db.execute("UPDATE banking_cards SET status = ? WHERE id = ?", new, card_id)
    return {"card_id": card_id, "last4": c["last4"], "status": new}


def _new_last4(db: Db, c: dict[str, Any], holder_id: int) -> str:
    """Deterministic digits for a replacement card, unique among the holder's cards (identical on every backend)."""
    taken = {r["last4"] for r in db.query(
        "SELECT c.last4 FROM banking_cards c JOIN banking_accounts a ON a.id = c.account_id WHERE a.holder_id = ? ORDER BY c.id", holder_id)}
    n = (int(c["last4"]) * 7919 + c["id"] * 104729 + db.today.toordinal()) % 10000
    while f"{n:04d}" in taken:
        n = (n + 1) % 10000
    return f"{n:04d}"


def _end_of_month(d: dt.date) -> dt.date:
    return (d.replace(day=28) + dt.timedelta(days=4)).replace(day=1) - dt.timedelta(days=1)


@tool(write=True)
def replace_card(db: Db, card_id: int, reason: ReplaceReason, delivery: Delivery) -> dict[str, Any]:
    """Order a replacement card with a new number; the old card stops working at once.

    A lost, stolen or compromised card is blocked permanently under that status; a damaged or
    expiring one is marked replaced. The new card keeps the daily limit. Expedited delivery costs
    $25.00, charged to the card's account, except for premier holders.

    Args:
        card_id: The card being replaced (it must be active or frozen).
        reason: lost (cannot find it), stolen (taken), compromised (still has it, but its details were
            used without permission), damaged (broken, chip or strip not working), expiring (expires soon).
        delivery: standard (free, 7-10 business days) or expedited (2 business days).
    """
    c, a = _card(db, card_id)
    if c["status"] not in USABLE_CARD:
        raise ToolError(f"card ...{c['last4']} is already {c['status']}; look for its replacement in get_account_holder")
    holder = _holder(db, a["holder_id"])
    today = db.today
    new_last4 = _new_last4(db, c, holder["id"])
    db.execute("UPDATE banking_cards SET status = ? WHERE id = ?", OLD_CARD_STATUS[reason], card_id)
    new_id = db.insert("banking_cards", account_id=c["account_id"], kind=c["kind"], last4=new_last4, status="active",
                       daily_limit=c["daily_limit"], expires_on=_end_of_month(today.replace(day=1, year=today.year + CARD_YEARS)).isoformat(),
                       issued_on=today.isoformat(), replaces_card_id=card_id, replacement_reason=reason, delivery=delivery)
    fee = 0.0
    if delivery == "expedited" and holder["segment"] != "premier":
        fee = EXPEDITE_FEE
        _post(db, a, "fee", -_cents(fee), FEE_LABELS["card_expedite"], fee_code="card_expedite")
    return {"old_card_id": card_id, "old_status": OLD_CARD_STATUS[reason], "new_card_id": new_id, "new_last4": new_last4,
            "delivery": delivery, "fee_charged": fee}


@tool(write=True)
def set_card_daily_limit(db: Db, card_id: int, daily_limit: float) -> dict[str, Any]:
    """Change a card's daily spending limit (purchases and cash), in whole dollars from $100 to $10,000.

    Args:
        card_id: The card (active or frozen).
        daily_limit: The new limit in dollars, e.g. 2500.
    """
    c, _ = _card(db, card_id)
    if c["status"] not in USABLE_CARD:
        raise ToolError(f"card ...{c['last4']} is {c['status']}: its limit cannot change")
    lo, hi = CARD_LIMIT_RANGE
    if daily_limit != int(daily_limit) or not lo <= daily_limit <= hi:
        raise ToolError(f"the daily limit must be whole dollars from ${lo:,} to ${hi:,}, not {daily_limit}")
    if _cents(daily_limit) == _cents(c["daily_limit"]):
        raise ToolError(f"card ...{c['last4']} already has a daily limit of ${daily_limit:,.2f}")
    db.execute("UPDATE banking_cards SET daily_limit = ? WHERE id = ?", float(daily_limit), card_id)
    return {"card_id": card_id, "last4": c["last4"], "old_daily_limit": _dollars(_cents(c["daily_limit"])), "daily_limit": float(daily_limit)}


# -- writes: disputes and fees ------------------------------------------------------------------

@tool(write=True)
def open_card_dispute(db: Db, entry_id: int, reason: DisputeReason, amount: float, provisional_credit: bool) -> dict[str, Any]:
    """Dispute a card purchase with the merchant's bank. One dispute per charge.

    With provisional_credit the disputed amount is credited to the account at once while the case is
    investigated; that is only possible for debit-card purchases (checking accounts).

    Args:
        entry_id: The card_purchase ledger entry (see get_account_activity).
        reason: unauthorized (the customer did not make it), duplicate_charge (charged twice: dispute the
            second), incorrect_amount (charged more than agreed), goods_not_received, or cancelled_recurring
            (charged after cancelling a subscription).
        amount: Dollars disputed: the whole charge, or for incorrect_amount the overcharge (charged - agreed).
        provisional_credit: Whether to credit the amount now (see the policy).
    """
    e = db.one("SELECT * FROM account_ledger WHERE id = ?", entry_id)
    if e is None:
        raise ToolError(f"no ledger entry {entry_id}")
    a = _account(db, e["account_id"])
    if e["kind"] != "card_purchase":
        raise ToolError(f"entry {entry_id} is a {e['kind']}, not a card purchase: only card purchases can be disputed")
    for d in db.query("SELECT id, status FROM card_disputes WHERE entry_id = ? ORDER BY id", entry_id):
        if d["status"] != "withdrawn":
            raise ToolError(f"entry {entry_id} is already disputed (dispute {d['id']}, {d['status']})")
    cents = _amount_cents(amount)
    charged = -_cents(e["amount"])
    if cents > charged:
        raise ToolError(f"the disputed amount exceeds the ${_dollars(charged):,.2f} charged")
    if provisional_credit and a["kind"] != "checking":
        raise ToolError("provisional credit is only given on debit-card purchases; a credit-card dispute keeps the amount off the bill by itself")
    today = db.today.isoformat()
    did = db.insert("card_disputes", entry_id=entry_id, account_id=a["id"], card_id=e["card_id"], reason=reason, amount=_dollars(cents),
                    provisional_credit=_dollars(cents) if provisional_credit else 0.0, status="open", opened_on=today, closed_on=None)
    if provisional_credit:
        _post(db, a, "dispute_credit", cents, f"Provisional credit - dispute of {e['merchant']} charge", related_entry_id=entry_id)
    return {"dispute_id": did, "entry_id": entry_id, "reason": reason, "amount": _dollars(cents),
            "provisional_credit": _dollars(cents) if provisional_credit else 0.0, "status": "open"}


@tool(write=True)
def reverse_fee(db: Db, entry_id: int, reason: ReversalReason) -> dict[str, Any]:
    """Refund a fee to the account it was charged to. A fee can be reversed once.

    Args:
        entry_id: The fee's ledger entry (see get_account_activity).
        reason: bank_error (the fee should never have been charged) or courtesy (a goodwill exception; see the policy's caps).
    """
    e = db.one("SELECT * FROM account_ledger WHERE id = ?", entry_id)
    if e is None:
        raise ToolError(f"no ledger entry {entry_id}")
    a = _account(db, e["account_id"])
    if e["kind"] != "fee":
        raise ToolError(f"entry {entry_id} is a {e['kind']}, not a fee")
    done = db.scalar("SELECT id FROM account_ledger WHERE kind = 'fee_reversal' AND related_entry_id = ? ORDER BY id", entry_id)
    if done is not None:
        raise ToolError(f"fee {entry_id} was already reversed (entry {done})")
    cents = -_cents(e["amount"])
    label = FEE_LABELS.get(e["fee_code"], "Fee")
    rid = _post(db, a, "fee_reversal", cents, f"Fee reversal ({reason.replace('_', ' ')}) - {label}", fee_code=e["fee_code"],
                related_entry_id=entry_id, reversal_reason=reason)
    return {"reversal_entry_id": rid, "fee_entry_id": entry_id, "amount": _dollars(cents), "reason": reason,
            "balance": _dollars(_cents(db.scalar("SELECT balance FROM banking_accounts WHERE id = ?", a["id"])))}


# -- writes: records ----------------------------------------------------------------------------

@tool(write=True)
def add_banking_note(db: Db, holder_id: int, body: str, account_id: int | None = None) -> dict[str, Any]:
    """Add a note to a verified holder's profile, e.g. to record a request you refused and why.

    Args:
        holder_id: The verified holder the note is about.
        body: The note, in your words.
        account_id: The holder's account the request concerned, if any.
    """
    _verified_holder(db, holder_id)
    account_id = _own_account(db, account_id, holder_id)
    note_id = db.insert("banking_notes", holder_id=holder_id, account_id=account_id, body=_text(body, "body"), created_on=db.today.isoformat())
    return {"note_id": note_id, "holder_id": holder_id, "account_id": account_id}


@tool(write=True)
def refer_to_banking_team(db: Db, holder_id: int, team: Team, summary: str, account_id: int | None = None) -> dict[str, Any]:
    """Hand a case to a specialist team: fraud (scams, account takeover), card_services (card limits above
    your authority) or supervisor (a customer asking for an exception to policy).

    Args:
        holder_id: The verified holder concerned.
        team: fraud, card_services, or supervisor.
        summary: What the team needs to know, in your words (include amounts).
        account_id: The holder's account concerned, if any.
    """
    _verified_holder(db, holder_id)
    account_id = _own_account(db, account_id, holder_id)
    for r in db.query("SELECT id, account_id FROM banking_referrals WHERE holder_id = ? AND team = ? AND status = 'open' ORDER BY id",
                      holder_id, team):
        if r["account_id"] == account_id:  # compared here: `=` never matches NULL and `IS` is not portable
            raise ToolError(f"referral {r['id']} to {team} is already open for this case")
    rid = db.insert("banking_referrals", holder_id=holder_id, account_id=account_id, team=team, status="open",
                    summary=_text(summary, "summary"), created_on=db.today.isoformat())
    return {"referral_id": rid, "team": team, "status": "open", "account_id": account_id}
