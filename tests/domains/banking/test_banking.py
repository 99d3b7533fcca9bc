"""The bundled `banking` domain: its seed's ledger, its tools' rules and its tasks' shape.

Tools run through `Toolset.call` on SQLite sandboxes of the engine (`SqliteBackend`), each test on its
own copy of the seeded world (plus a patch where a test needs a particular situation). The checks
every domain passes (portable schema, deterministic seed, gold passes and doing nothing fails, the
generator reproduces the task file) are in tests/domains/test_every_domain.py.
"""

from __future__ import annotations

import collections
import json
import random
import re
from typing import Any

import pytest
from domain_testing import FAMILIES, open_sandbox

INJECTION = "x'); DROP TABLE banking_accounts; --"


@pytest.fixture(scope="module")
def facts(world) -> dict[str, Any]:
    """Seed entities the tool tests act on, found by what they need rather than by hard-coded ids."""
    accounts: dict[int, dict[str, dict]] = collections.defaultdict(dict)
    for a in world["banking_accounts"]:
        accounts[a["holder_id"]][a["kind"]] = a
    cards: dict[int, list[dict]] = collections.defaultdict(list)
    for c in world["banking_cards"]:
        cards[c["account_id"]].append(c)
    busy = {h["account_id"] for h in world["account_holds"] if h["status"] == "active"}

    def full(h: dict) -> bool:
        acc = accounts[h["id"]]
        return (
            len(acc) == 3
            and acc["checking"]["id"] not in busy
            and acc["checking"]["balance"] > 600
            and acc["credit_card"]["balance"] < -60
            and any(c["status"] == "active" for c in cards[acc["checking"]["id"]])
            and any(c["status"] == "active" for c in cards[acc["credit_card"]["id"]])
        )

    standard = next(h for h in world["account_holders"] if h["segment"] == "standard" and full(h))
    premier = next(h for h in world["account_holders"] if h["segment"] == "premier" and full(h))
    other = next(h for h in world["account_holders"] if h["id"] not in (standard["id"], premier["id"]))
    return {"standard": standard, "premier": premier, "other": other, "accounts": accounts, "cards": cards, "world": world}


def call(domain, sb, tool: str, **args: Any):
    return domain.tools.call(sb.connection, tool, args)


def ok(domain, sb, tool: str, **args: Any) -> Any:
    r = call(domain, sb, tool, **args)
    assert r.ok, f"{tool} failed: {r.content}"
    return json.loads(r.content)


def refused(domain, sb, tool: str, match: str, **args: Any) -> None:
    before = sb.changes().to_json()
    r = call(domain, sb, tool, **args)
    assert not r.ok and re.search(match, r.content), f"{tool} should be refused with {match!r}: {r.content}"
    assert sb.changes().to_json() == before, f"refused {tool} left a write behind"


def verify(domain, sb, h: dict) -> dict:
    return ok(domain, sb, "verify_account_holder", email=h["email"].upper(), date_of_birth=h["date_of_birth"], ssn_last4=h["ssn_last4"])


def active_card(facts, account: dict) -> dict:
    return next(c for c in facts["cards"][account["id"]] if c["status"] == "active")


def balance(sb, account_id: int) -> float:
    return sb.connection.scalar("SELECT balance FROM banking_accounts WHERE id = ?", account_id)


# -- seed and schema ---------------------------------------------------------------------------------


def test_seed_scales_and_its_ledger_is_consistent(domain, world, domain_module):
    seed = domain_module("seed")
    small = seed.generate(random.Random(domain.config.seed), scale=0.25)
    assert len(small["account_holders"]) == len(world["account_holders"]) // 4
    # The simulated ledger is a true running balance that ends at each account's balance.
    running: dict[int, float] = {}
    for e in sorted(world["account_ledger"], key=lambda e: (e["posted_on"], e["id"])):
        if e["account_id"] in running:
            assert round(running[e["account_id"]] + e["amount"], 2) == e["balance_after"], e
        running[e["account_id"]] = e["balance_after"]
    for a in world["banking_accounts"]:
        assert running.get(a["id"], a["balance"]) == a["balance"], a


def test_schema_uses_the_three_types_and_no_date_type(domain):
    sql = (domain.path / "schema.sql").read_text()
    types = set(re.findall(r"^[ \t]+\w+[ \t]+([A-Z]+)", sql, re.M))
    assert types == {"INTEGER", "TEXT", "REAL"}, types
    assert not re.search(r"AUTOINCREMENT|SERIAL|BOOLEAN|TIMESTAMP|DATE\b", sql)
    assert len(domain.tables) >= 5
    assert 8 <= len(domain.tools.names()) <= 15


# -- tools ----------------------------------------------------------------------------------------------


def test_identity_verification_gates_every_tool(domain, engine, facts):
    h, other = facts["standard"], facts["other"]
    chk = facts["accounts"][h["id"]]["checking"]
    with open_sandbox(domain, engine) as sb:
        refused(domain, sb, "get_account_holder", "not passed identity verification", holder_id=h["id"])
        refused(domain, sb, "verify_account_holder", "no account holder", email=INJECTION, date_of_birth=h["date_of_birth"], ssn_last4="1234")
        refused(domain, sb, "verify_account_holder", "YYYY-MM-DD", email=h["email"], date_of_birth="03/09/1984", ssn_last4=h["ssn_last4"])
        refused(domain, sb, "verify_account_holder", "four digits", email=h["email"], date_of_birth=h["date_of_birth"], ssn_last4="12a4")
        wrong = f"{(int(h['ssn_last4']) + 1) % 10000:04d}"
        out = ok(domain, sb, "verify_account_holder", email=h["email"], date_of_birth=h["date_of_birth"], ssn_last4=wrong)
        assert out == {"verified": False, "message": out["message"]} and "holder_id" not in out
        row = sb.connection.one("SELECT passed, failed_fields FROM holder_verifications ORDER BY id DESC LIMIT 1")
        assert row == {"passed": 0, "failed_fields": "ssn_last4"}
        refused(domain, sb, "verify_account_holder", "already logged", email=h["email"], date_of_birth=h["date_of_birth"], ssn_last4=wrong)
        refused(
            domain,
            sb,
            "transfer_between_accounts",
            "not passed identity verification",
            from_account_id=chk["id"],
            to_account_id=chk["id"] + 1,
            amount=10.0,
        )
        assert verify(domain, sb, h)["holder_id"] == h["id"]  # a correct retry (a typo fixed) passes
        refused(domain, sb, "verify_account_holder", "already verified", email=h["email"], date_of_birth=h["date_of_birth"], ssn_last4=h["ssn_last4"])
        profile = ok(domain, sb, "get_account_holder", holder_id=h["id"])
        assert {a["account_id"] for a in profile["accounts"]} == {a["id"] for a in facts["accounts"][h["id"]].values()}
        # Verified for one holder never opens another holder's data.
        refused(domain, sb, "get_account_holder", "not passed identity verification", holder_id=other["id"])
        refused(domain, sb, "get_account_activity", "not passed identity verification", account_id=facts["accounts"][other["id"]]["checking"]["id"])


def test_transfers_between_accounts(domain, engine, facts):
    h = facts["standard"]
    acc = facts["accounts"][h["id"]]
    chk, sav, cc = acc["checking"], acc["savings"], acc["credit_card"]
    patch = {
        "account_holds": [
            {
                "id": 9001,
                "account_id": sav["id"],
                "amount": 100.0,
                "reason": "check_deposit",
                "placed_on": "2026-05-19",
                "release_on": "2026-05-24",
                "status": "active",
            }
        ],
        "banking_accounts": [{"id": sav["id"], "balance": 600.0}],
    }
    with open_sandbox(domain, engine, patch) as sb:
        verify(domain, sb, h)
        out = ok(domain, sb, "transfer_between_accounts", from_account_id=sav["id"], to_account_id=chk["id"], amount=250.5)
        assert out["status"] == "completed" and balance(sb, sav["id"]) == 349.5 and balance(sb, chk["id"]) == round(chk["balance"] + 250.5, 2)
        legs = sb.connection.query(
            "SELECT account_id, kind, amount, balance_after FROM account_ledger WHERE transfer_id = ? ORDER BY id", out["transfer_id"]
        )
        assert legs == [
            {"account_id": sav["id"], "kind": "transfer_out", "amount": -250.5, "balance_after": 349.5},
            {"account_id": chk["id"], "kind": "transfer_in", "amount": 250.5, "balance_after": round(chk["balance"] + 250.5, 2)},
        ]
        ok(domain, sb, "transfer_between_accounts", from_account_id=sav["id"], to_account_id=chk["id"], amount=0.5)  # a second one is real
        refused(
            domain, sb, "transfer_between_accounts", "insufficient available funds", from_account_id=sav["id"], to_account_id=chk["id"], amount=250.0
        )  # 349 left, but 100 of it is held
        owed = -cc["balance"]
        refused(
            domain,
            sb,
            "transfer_between_accounts",
            "exceeds the .* owed",
            from_account_id=chk["id"],
            to_account_id=cc["id"],
            amount=round(owed + 1, 2),
        )
        ok(domain, sb, "transfer_between_accounts", from_account_id=chk["id"], to_account_id=cc["id"], amount=owed)
        assert balance(sb, cc["id"]) == 0
        refused(domain, sb, "transfer_between_accounts", "out of a credit card", from_account_id=cc["id"], to_account_id=chk["id"], amount=5.0)
        refused(
            domain,
            sb,
            "transfer_between_accounts",
            "daily transfer limit",
            from_account_id=chk["id"],
            to_account_id=sav["id"],
            amount=chk["daily_transfer_limit"],
        )
        refused(domain, sb, "transfer_between_accounts", "whole number of cents", from_account_id=chk["id"], to_account_id=sav["id"], amount=1.005)
        refused(
            domain,
            sb,
            "transfer_between_accounts",
            "belongs to another holder",
            from_account_id=chk["id"],
            to_account_id=facts["accounts"][facts["other"]["id"]]["checking"]["id"],
            amount=5.0,
        )
        refused(domain, sb, "transfer_between_accounts", "invalid arguments", from_account_id=chk["id"], to_account_id=sav["id"], amount=INJECTION)


def test_payees_and_payments(domain, engine, facts):
    h = facts["standard"]
    chk, sav = facts["accounts"][h["id"]]["checking"], facts["accounts"][h["id"]]["savings"]
    today = domain.config.today
    with open_sandbox(domain, engine) as sb:
        verify(domain, sb, h)
        refused(
            domain,
            sb,
            "add_payee",
            "not a valid nine-digit ABA",
            holder_id=h["id"],
            name="Corner Dental",
            routing_number="021000022",
            account_number="12345678",
        )
        payee = ok(domain, sb, "add_payee", holder_id=h["id"], name=INJECTION, routing_number="021000021", account_number="12345678")
        assert sb.connection.one("SELECT name, nickname, status FROM transfer_payees WHERE id = ?", payee["payee_id"]) == {
            "name": INJECTION,
            "nickname": None,
            "status": "active",
        }
        assert sb.connection.scalar("SELECT COUNT(*) FROM banking_accounts") > 0  # the injection stayed a string
        refused(
            domain,
            sb,
            "add_payee",
            "already has that routing",
            holder_id=h["id"],
            name="Again",
            routing_number="021000021",
            account_number="12345678",
        )
        refused(domain, sb, "add_payee", "not an account number", holder_id=h["id"], name="X", routing_number="021000021", account_number="12-34")
        pid = payee["payee_id"]
        paid = ok(domain, sb, "pay_payee", from_account_id=chk["id"], payee_id=pid, amount=40.0, send_on=today.isoformat())
        assert paid["status"] == "completed" and balance(sb, chk["id"]) == round(chk["balance"] - 40, 2)
        assert sb.connection.scalar("SELECT kind FROM account_ledger WHERE transfer_id = ?", paid["transfer_id"]) == "payment_sent"
        later = (today.replace(day=28)).isoformat()
        sched = ok(domain, sb, "pay_payee", from_account_id=chk["id"], payee_id=pid, amount=75.0, send_on=later)
        assert sched["status"] == "scheduled" and balance(sb, chk["id"]) == round(chk["balance"] - 40, 2)
        refused(domain, sb, "pay_payee", "already scheduled", from_account_id=chk["id"], payee_id=pid, amount=75.0, send_on=later)
        refused(domain, sb, "pay_payee", "in the past", from_account_id=chk["id"], payee_id=pid, amount=5.0, send_on="2026-05-01")
        refused(domain, sb, "pay_payee", "at most 90 days", from_account_id=chk["id"], payee_id=pid, amount=5.0, send_on="2026-12-01")
        refused(domain, sb, "pay_payee", "from a checking account", from_account_id=sav["id"], payee_id=pid, amount=5.0, send_on=later)
        foreign = next(p for p in facts["world"]["transfer_payees"] if p["holder_id"] != h["id"])
        refused(domain, sb, "pay_payee", "no payee", from_account_id=chk["id"], payee_id=foreign["id"], amount=5.0, send_on=later)
        ok(domain, sb, "cancel_scheduled_payment", transfer_id=sched["transfer_id"])
        assert sb.connection.one("SELECT status, cancelled_on FROM fund_transfers WHERE id = ?", sched["transfer_id"]) == {
            "status": "cancelled",
            "cancelled_on": today.isoformat(),
        }
        refused(domain, sb, "cancel_scheduled_payment", "already cancelled", transfer_id=sched["transfer_id"])
        refused(domain, sb, "cancel_scheduled_payment", "cannot be recalled", transfer_id=paid["transfer_id"])
        refused(domain, sb, "cancel_scheduled_payment", "no payment", transfer_id=999999)


def test_cards(domain, engine, facts):
    h, p = facts["standard"], facts["premier"]
    debit = active_card(facts, facts["accounts"][h["id"]]["checking"])
    credit = active_card(facts, facts["accounts"][h["id"]]["credit_card"])
    chk = facts["accounts"][h["id"]]["checking"]
    with open_sandbox(domain, engine) as sb:
        verify(domain, sb, h)
        assert ok(domain, sb, "set_card_freeze", card_id=debit["id"], frozen=True)["status"] == "frozen"
        refused(domain, sb, "set_card_freeze", "already frozen", card_id=debit["id"], frozen=True)
        assert ok(domain, sb, "set_card_freeze", card_id=debit["id"], frozen=False)["status"] == "active"
        ok(domain, sb, "set_card_daily_limit", card_id=credit["id"], daily_limit=2800)
        refused(domain, sb, "set_card_daily_limit", "already has", card_id=credit["id"], daily_limit=2800)
        refused(domain, sb, "set_card_daily_limit", "whole dollars", card_id=credit["id"], daily_limit=20000)
        out = ok(domain, sb, "replace_card", card_id=debit["id"], reason="stolen", delivery="expedited")
        assert out["fee_charged"] == 25.0 and balance(sb, chk["id"]) == round(chk["balance"] - 25, 2)
        new = sb.connection.one("SELECT * FROM banking_cards WHERE id = ?", out["new_card_id"])
        assert (new["status"], new["replaces_card_id"], new["replacement_reason"], new["delivery"], new["daily_limit"]) == (
            "active",
            debit["id"],
            "stolen",
            "expedited",
            debit["daily_limit"],
        )
        assert new["last4"] not in {c["last4"] for c in facts["world"]["banking_cards"] if c["id"] in {debit["id"], credit["id"]}}
        assert sb.connection.scalar("SELECT status FROM banking_cards WHERE id = ?", debit["id"]) == "stolen"
        refused(domain, sb, "replace_card", "already stolen", card_id=debit["id"], reason="stolen", delivery="standard")
        refused(domain, sb, "set_card_freeze", "blocked permanently", card_id=debit["id"], frozen=False)
        refused(
            domain,
            sb,
            "set_card_freeze",
            "not passed identity verification",
            card_id=active_card(facts, facts["accounts"][p["id"]]["checking"])["id"],
            frozen=True,
        )
    with open_sandbox(domain, engine) as sb:  # premier holders get expedited delivery free
        verify(domain, sb, p)
        card = active_card(facts, facts["accounts"][p["id"]]["credit_card"])
        out = ok(domain, sb, "replace_card", card_id=card["id"], reason="damaged", delivery="expedited")
        assert out["fee_charged"] == 0 and out["old_status"] == "replaced"


def test_disputes_and_fee_reversals(domain, engine, facts):
    h = facts["standard"]
    chk, cc = facts["accounts"][h["id"]]["checking"], facts["accounts"][h["id"]]["credit_card"]
    debit, credit = active_card(facts, chk), active_card(facts, cc)

    def entry(i: int, account: dict, kind: str, amount: float, card: dict | None = None, fee_code: str | None = None) -> dict:
        return {
            "id": i,
            "account_id": account["id"],
            "posted_on": "2026-05-18",
            "kind": kind,
            "amount": amount,
            "balance_after": 0.0,
            "description": "test",
            "merchant": "Greenleaf Grocers" if card else None,
            "card_id": card["id"] if card else None,
            "transfer_id": None,
            "fee_code": fee_code,
            "related_entry_id": None,
            "reversal_reason": None,
        }

    patch = {
        "account_ledger": [
            entry(90001, chk, "card_purchase", -80.0, debit),
            entry(90002, cc, "card_purchase", -40.0, credit),
            entry(90003, chk, "fee", -35.0, fee_code="overdraft"),
            entry(90004, chk, "deposit", 100.0),
        ]
    }
    with open_sandbox(domain, engine, patch) as sb:
        verify(domain, sb, h)
        before = balance(sb, chk["id"])
        d = ok(domain, sb, "open_card_dispute", entry_id=90001, reason="duplicate_charge", amount=80.0, provisional_credit=True)
        assert d["provisional_credit"] == 80.0 and balance(sb, chk["id"]) == round(before + 80, 2)
        assert sb.connection.one("SELECT kind, related_entry_id FROM account_ledger WHERE account_id = ? ORDER BY id DESC LIMIT 1", chk["id"]) == {
            "kind": "dispute_credit",
            "related_entry_id": 90001,
        }
        refused(domain, sb, "open_card_dispute", "already disputed", entry_id=90001, reason="unauthorized", amount=80.0, provisional_credit=False)
        refused(domain, sb, "open_card_dispute", "only given on debit", entry_id=90002, reason="unauthorized", amount=40.0, provisional_credit=True)
        refused(domain, sb, "open_card_dispute", "exceeds", entry_id=90002, reason="incorrect_amount", amount=40.01, provisional_credit=False)
        refused(domain, sb, "open_card_dispute", "not a card purchase", entry_id=90004, reason="unauthorized", amount=1.0, provisional_credit=False)
        ok(domain, sb, "open_card_dispute", entry_id=90002, reason="incorrect_amount", amount=12.5, provisional_credit=False)
        assert sb.connection.scalar("SELECT balance FROM banking_accounts WHERE id = ?", cc["id"]) == cc["balance"]
        r = ok(domain, sb, "reverse_fee", entry_id=90003, reason="bank_error")
        assert r["amount"] == 35.0 and sb.connection.one(
            "SELECT reversal_reason, fee_code FROM account_ledger WHERE id = ?", r["reversal_entry_id"]
        ) == {"reversal_reason": "bank_error", "fee_code": "overdraft"}
        refused(domain, sb, "reverse_fee", "already reversed", entry_id=90003, reason="courtesy")
        refused(domain, sb, "reverse_fee", "not a fee", entry_id=90004, reason="courtesy")
        refused(domain, sb, "reverse_fee", "no ledger entry", entry_id=999999, reason="courtesy")


def test_notes_and_referrals(domain, engine, facts):
    h, other = facts["standard"], facts["other"]
    chk = facts["accounts"][h["id"]]["checking"]
    with open_sandbox(domain, engine) as sb:
        verify(domain, sb, h)
        n = ok(domain, sb, "add_banking_note", holder_id=h["id"], body=INJECTION, account_id=chk["id"])
        assert sb.connection.one("SELECT body, account_id FROM banking_notes WHERE id = ?", n["note_id"]) == {
            "body": INJECTION,
            "account_id": chk["id"],
        }
        assert ok(domain, sb, "add_banking_note", holder_id=h["id"], body="General remark.")["account_id"] is None
        refused(domain, sb, "add_banking_note", "must not be empty", holder_id=h["id"], body="  ")
        refused(
            domain,
            sb,
            "add_banking_note",
            "does not belong",
            holder_id=h["id"],
            body="x",
            account_id=facts["accounts"][other["id"]]["checking"]["id"],
        )
        refused(domain, sb, "add_banking_note", "not passed identity verification", holder_id=other["id"], body="x")
        r = ok(domain, sb, "refer_to_banking_team", holder_id=h["id"], team="fraud", summary="Scam call.", account_id=chk["id"])
        assert sb.connection.scalar("SELECT status FROM banking_referrals WHERE id = ?", r["referral_id"]) == "open"
        refused(domain, sb, "refer_to_banking_team", "already open", holder_id=h["id"], team="fraud", summary="again", account_id=chk["id"])
        ok(domain, sb, "refer_to_banking_team", holder_id=h["id"], team="fraud", summary="Without an account.")
        refused(domain, sb, "refer_to_banking_team", "invalid arguments", holder_id=h["id"], team="legal", summary="x")


# -- tasks -------------------------------------------------------------------------------------------------


def test_tasks_load_with_every_family(domain):
    tasks = domain.tasks
    assert len(tasks) >= 150
    families = collections.Counter(t.family for t in tasks)
    assert all(families[f] >= 15 for f in FAMILIES), families
    calls = {len(t.gold) for t in tasks}
    assert min(calls) == 1 and max(calls) == 8
    for t in tasks:
        assert t.gold[0].tool == "verify_account_holder", t.id
