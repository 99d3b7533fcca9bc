"""The bundled `retail` domain: its seed, its tools' rules and its tasks, on worlds built by hand.

Worlds are built with plain sqlite3 in memory (schema + seed, then a task's patch upserted), so these
tests exercise the domain files directly rather than the engine's backends. The checks every domain
passes through the engine (and that both backends agree) are in tests/domains/test_every_domain.py.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import random
import sqlite3
from typing import Any

import pytest
from domain_testing import FAMILIES

from groundstate.state.db import Db

INJECTION = "1; DROP TABLE orders"


@pytest.fixture(scope="module")
def base_image(domain, world) -> bytes:
    """The seeded world, serialized once; each test deserializes a private copy."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(domain.schema_sql)
    conn.execute("BEGIN")
    for table, rows in world.items():
        cols = list(rows[0])
        conn.executemany(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})", [tuple(r[c] for c in cols) for r in rows]
        )
    conn.execute("COMMIT")
    image = conn.serialize()
    conn.close()
    return image


def _open(image: bytes, today: dt.date) -> Db:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.deserialize(image)
    conn.execute("PRAGMA foreign_keys = ON")
    return Db(conn, today=today)


def _upsert(db: Db, domain, patch: dict[str, list[dict]]) -> None:
    """Apply a task patch: update the row with the given primary key, insert it if there is none."""
    for table, rows in patch.items():
        for row in rows:
            pk = domain.primary_keys[table]
            cols = [c for c in row if c not in pk]
            updated = 0
            if cols:
                updated = db.execute(
                    f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in cols)} WHERE " + " AND ".join(f"{k} = ?" for k in pk),
                    *[row[c] for c in cols],
                    *[row[k] for k in pk],
                )
            if not updated:
                db.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", *row.values())


def _snapshot(db: Db, tables: list[str]) -> dict[str, list[tuple]]:
    return {t: db.raw.execute(f"SELECT * FROM {t} ORDER BY id").fetchall() for t in tables}


@pytest.fixture
def db(domain, base_image) -> Db:
    return _open(base_image, domain.config.today)


def call(domain, db: Db, name: str, **args: Any):
    return domain.tools.call(db, name, args)


def ok(domain, db: Db, name: str, **args: Any) -> Any:
    r = call(domain, db, name, **args)
    assert r.ok, r.content
    return json.loads(r.content)


def refused(domain, db: Db, name: str, fragment: str = "", **args: Any) -> str:
    r = call(domain, db, name, **args)
    assert not r.ok, f"{name}{args} should have been refused, got {r.content}"
    assert r.content.startswith("error:") and fragment in r.content, r.content
    return r.content


# -- schema and seed --------------------------------------------------------------------------------


def test_schema_size(domain):
    assert len(domain.tables) >= 7


def test_seed_orders_are_in_the_past(domain, world):
    today = domain.config.today.isoformat()
    for o in world["orders"]:
        assert o["placed_on"] <= today and (o["delivered_on"] or "") <= today


def test_seed_scale_and_foreign_keys(domain, base_image, domain_module):
    seed = domain_module("seed")
    small = seed.generate(random.Random(1), scale=0.25)
    big = seed.generate(random.Random(1), scale=2.0)
    assert len(small["orders"]) < len(big["orders"]) and len(small["customers"]) < len(big["customers"])
    db = _open(base_image, domain.config.today)
    assert db.raw.execute("PRAGMA foreign_key_check").fetchall() == []


# -- tools: shape -----------------------------------------------------------------------------------


def test_toolset_shape(domain):
    tools = domain.tools
    assert 10 <= len(tools.names()) <= 15
    writes = {n for n in tools.names() if tools[n].write}
    assert writes == {
        "cancel_order",
        "update_shipping_address",
        "exchange_item",
        "create_return",
        "issue_refund",
        "create_ticket",
        "update_ticket_status",
        "add_note",
        "escalate",
    }


def test_bad_arguments_and_injection_are_inert(domain, db):
    assert "unknown tool" in call(domain, db, "drop_everything").content
    refused(domain, db, "get_order", "invalid arguments", order_id=INJECTION)
    refused(domain, db, "cancel_order", "invalid arguments", order_id=INJECTION, reason="other")
    refused(domain, db, "cancel_order", "invalid arguments", order_id=1, reason=INJECTION)
    refused(domain, db, "get_customer", "invalid arguments", customer_id=1, extra=1)
    refused(domain, db, "find_customer_by_email", "no customer", email=INJECTION)
    assert ok(domain, db, "search_products", query=INJECTION) == []
    refused(domain, db, "add_note", "no customer", customer_id=10**6, body=INJECTION)
    assert db.scalar("SELECT COUNT(*) FROM orders") > 0  # the table is still there


# -- tools: reads -----------------------------------------------------------------------------------


def test_find_and_get_customer(domain, db, world):
    c = world["customers"][0]
    found = ok(domain, db, "find_customer_by_email", email=f"  {c['email'].upper()} ")
    assert found["customer_id"] == c["id"]
    profile = ok(domain, db, "get_customer", customer_id=c["id"])
    assert profile["email"] == c["email"] and profile["addresses"]
    assert [o["order_id"] for o in profile["orders"]] == [
        o["id"] for o in sorted((o for o in world["orders"] if o["customer_id"] == c["id"]), key=lambda o: (o["placed_on"], o["id"]), reverse=True)
    ]
    refused(domain, db, "find_customer_by_email", "no customer", email="nobody@example.com")
    refused(domain, db, "get_customer", "no customer", customer_id=999999)


def test_get_order(domain, db, world):
    o = next(o for o in world["orders"] if o["status"] == "delivered")
    view = ok(domain, db, "get_order", order_id=o["id"])
    items = [i for i in world["order_items"] if i["order_id"] == o["id"]]
    assert [i["order_item_id"] for i in view["items"]] == [i["id"] for i in items]
    assert view["days_since_delivery"] == (domain.config.today - dt.date.fromisoformat(o["delivered_on"])).days
    assert sum(p["amount"] for p in view["payments"]) == pytest.approx(o["total"])
    refused(domain, db, "get_order", "no order", order_id=999999)


def test_search_products(domain, db):
    shoes = ok(domain, db, "search_products", query="trail running shoe")
    assert [p["variant"] for p in shoes] == ["Size 8", "Size 9", "Size 10"]
    assert ok(domain, db, "search_products", query="SIZE 9 trail") == [shoes[1]]
    beauty = ok(domain, db, "search_products", query="", category="beauty")
    assert beauty and all(p["category"] == "beauty" and not p["returnable"] for p in beauty)
    assert all(p["stock"] > 0 for p in ok(domain, db, "search_products", query="", in_stock_only=True))
    refused(domain, db, "search_products", "invalid arguments", query="x", category="garden")


def test_get_return_and_ticket(domain, db, world):
    r = world["returns"][0]
    view = ok(domain, db, "get_return", return_id=r["id"])
    assert view["order_id"] == r["order_id"] and view["items"]
    refused(domain, db, "get_return", "no return", return_id=999999)
    t = world["support_tickets"][0]
    assert ok(domain, db, "get_ticket", ticket_id=t["id"])["status"] == t["status"]
    refused(domain, db, "get_ticket", "no ticket", ticket_id=999999)


# -- tools: writes ----------------------------------------------------------------------------------


def _single_payment_order(db: Db, status: str, **dates: str | None) -> dict:
    """A seed order with one payment and no refunds or returns, moved into `status` with the given dates."""
    oid = db.scalar(
        "SELECT o.id FROM orders o WHERE o.status = 'delivered' "
        "AND (SELECT COUNT(*) FROM payments p WHERE p.order_id = o.id) = 1 "
        "AND NOT EXISTS (SELECT 1 FROM returns r WHERE r.order_id = o.id) ORDER BY o.id LIMIT 1"
    )
    sets = {"status": status, "shipped_on": None, "delivered_on": None, **dates}
    db.execute(f"UPDATE orders SET {', '.join(f'{k} = ?' for k in sets)} WHERE id = ?", *sets.values(), oid)
    return db.one("SELECT * FROM orders WHERE id = ?", oid)


def _days_ago(db: Db, n: int) -> str:
    return (db.today - dt.timedelta(days=n)).isoformat()


def test_cancel_order(domain, db):
    o = _single_payment_order(db, "pending")
    items = db.query("SELECT product_id, quantity FROM order_items WHERE order_id = ?", o["id"])
    stock = {i["product_id"]: db.scalar("SELECT stock FROM products WHERE id = ?", i["product_id"]) for i in items}
    out = ok(domain, db, "cancel_order", order_id=o["id"], reason="ordered_by_mistake")
    assert out["refunds"][0]["amount"] == pytest.approx(o["total"])
    row = db.one("SELECT status, cancel_reason, cancelled_on FROM orders WHERE id = ?", o["id"])
    assert row == {"status": "cancelled", "cancel_reason": "ordered_by_mistake", "cancelled_on": db.today.isoformat()}
    for i in items:
        assert db.scalar("SELECT stock FROM products WHERE id = ?", i["product_id"]) == stock[i["product_id"]] + i["quantity"]
    refused(domain, db, "cancel_order", "already cancelled", order_id=o["id"], reason="ordered_by_mistake")
    shipped = db.scalar("SELECT id FROM orders WHERE status = 'shipped' ORDER BY id LIMIT 1")
    refused(domain, db, "cancel_order", "only pending or processing", order_id=shipped, reason="other")
    refused(domain, db, "cancel_order", "invalid arguments", order_id=o["id"], reason="because")


def test_update_shipping_address(domain, db):
    o = _single_payment_order(db, "processing")
    new = {"street": "12 Harbor Way", "city": "Boston", "state": "MA", "zip": "02110"}
    ok(domain, db, "update_shipping_address", order_id=o["id"], **new)
    assert db.one("SELECT ship_street, ship_city, ship_state, ship_zip FROM orders WHERE id = ?", o["id"]) == {
        "ship_street": "12 Harbor Way",
        "ship_city": "Boston",
        "ship_state": "MA",
        "ship_zip": "02110",
    }
    refused(domain, db, "update_shipping_address", "already ships", order_id=o["id"], **new)
    refused(domain, db, "update_shipping_address", "state code", order_id=o["id"], **{**new, "state": "Mass"})
    refused(domain, db, "update_shipping_address", "ZIP", order_id=o["id"], **{**new, "zip": "2110"})
    refused(domain, db, "update_shipping_address", "must not be empty", order_id=o["id"], **{**new, "street": "  "})
    db.execute("UPDATE orders SET status = 'shipped' WHERE id = ?", o["id"])
    refused(domain, db, "update_shipping_address", "before the order ships", order_id=o["id"], **{**new, "zip": "02111"})


def test_exchange_item(domain, db):
    o = _single_payment_order(db, "pending")
    item = db.one("SELECT * FROM order_items WHERE order_id = ? ORDER BY id LIMIT 1", o["id"])
    product = db.one("SELECT * FROM products WHERE id = ?", item["product_id"])
    other = db.one("SELECT * FROM products WHERE name = ? AND id <> ? ORDER BY id LIMIT 1", product["name"], product["id"])
    db.execute("UPDATE products SET stock = ? WHERE id = ?", item["quantity"] + 5, other["id"])
    ok(domain, db, "exchange_item", order_item_id=item["id"], new_product_id=other["id"])
    assert db.scalar("SELECT product_id FROM order_items WHERE id = ?", item["id"]) == other["id"]
    assert db.scalar("SELECT stock FROM products WHERE id = ?", other["id"]) == 5
    assert db.scalar("SELECT stock FROM products WHERE id = ?", product["id"]) == product["stock"] + item["quantity"]
    refused(domain, db, "exchange_item", "already", order_item_id=item["id"], new_product_id=other["id"])
    unrelated = db.scalar("SELECT id FROM products WHERE name <> ? ORDER BY id LIMIT 1", product["name"])
    refused(domain, db, "exchange_item", "not a variant", order_item_id=item["id"], new_product_id=unrelated)
    db.execute("UPDATE products SET stock = 0 WHERE id = ?", product["id"])
    refused(domain, db, "exchange_item", "out of stock", order_item_id=item["id"], new_product_id=product["id"])


def _returnable_item(db: Db, order_id: int) -> dict:
    return db.one(
        "SELECT oi.* FROM order_items oi JOIN products p ON p.id = oi.product_id WHERE oi.order_id = ? AND p.returnable = 1 ORDER BY oi.id LIMIT 1",
        order_id,
    )


def test_create_return(domain, db):
    o = _single_payment_order(db, "delivered", shipped_on=_days_ago(db, 33), delivered_on=_days_ago(db, 30))
    item = _returnable_item(db, o["id"])
    db.execute("UPDATE order_items SET quantity = 3 WHERE id = ?", item["id"])
    refused(
        domain, db, "create_return", "one quantity per item", order_id=o["id"], order_item_ids=[item["id"]], quantities=[1, 1], reason="changed_mind"
    )
    refused(domain, db, "create_return", "can return 1 to 3", order_id=o["id"], order_item_ids=[item["id"]], quantities=[4], reason="changed_mind")
    foreign = db.scalar("SELECT id FROM order_items WHERE order_id <> ? ORDER BY id LIMIT 1", o["id"])
    refused(domain, db, "create_return", "not part of order", order_id=o["id"], order_item_ids=[foreign], quantities=[1], reason="changed_mind")
    out = ok(domain, db, "create_return", order_id=o["id"], order_item_ids=[item["id"]], quantities=[2], reason="wrong_size")
    assert out["refund_amount"] == pytest.approx(round(2 * item["unit_price"], 2))
    assert db.one("SELECT reason, status FROM returns WHERE id = ?", out["return_id"]) == {"reason": "wrong_size", "status": "requested"}
    assert db.query("SELECT order_item_id, quantity FROM return_items WHERE return_id = ?", out["return_id"]) == [
        {"order_item_id": item["id"], "quantity": 2}
    ]
    refused(domain, db, "create_return", "can return 1 to 1", order_id=o["id"], order_item_ids=[item["id"]], quantities=[2], reason="wrong_size")
    db.execute("UPDATE orders SET delivered_on = ? WHERE id = ?", _days_ago(db, 31), o["id"])
    refused(domain, db, "create_return", "return window", order_id=o["id"], order_item_ids=[item["id"]], quantities=[1], reason="wrong_size")


def test_create_return_is_atomic_and_refuses_final_sale(domain, db):
    o = _single_payment_order(db, "delivered", delivered_on=_days_ago(db, 3))
    item = _returnable_item(db, o["id"])
    serum = db.scalar("SELECT id FROM products WHERE category = 'beauty' ORDER BY id LIMIT 1")
    final_sale = db.insert("order_items", order_id=o["id"], product_id=serum, quantity=1, unit_price=36.0)
    before = db.scalar("SELECT COUNT(*) FROM returns")
    refused(
        domain, db, "create_return", "final sale", order_id=o["id"], order_item_ids=[item["id"], final_sale], quantities=[1, 1], reason="changed_mind"
    )
    assert db.scalar("SELECT COUNT(*) FROM returns") == before  # the refused call left nothing behind
    pending = _single_payment_order(db, "pending")
    refused(domain, db, "create_return", "only delivered", order_id=pending["id"], order_item_ids=[1], quantities=[1], reason="defective")


def test_issue_refund(domain, db):
    o = _single_payment_order(db, "delivered", delivered_on=_days_ago(db, 3))
    pay = db.one("SELECT * FROM payments WHERE order_id = ?", o["id"])
    out = ok(domain, db, "issue_refund", payment_id=pay["id"], amount=1.25, reason="damaged_item")
    assert db.one("SELECT amount, reason, return_id FROM refunds WHERE id = ?", out["refund_id"]) == {
        "amount": 1.25,
        "reason": "damaged_item",
        "return_id": None,
    }
    left = round(pay["amount"] - 1.25, 2)
    refused(domain, db, "issue_refund", "left to refund", payment_id=pay["id"], amount=round(left + 0.01, 2), reason="price_adjustment")
    refused(domain, db, "issue_refund", "whole number of cents", payment_id=pay["id"], amount=0.125, reason="late_delivery")
    refused(domain, db, "issue_refund", "positive", payment_id=pay["id"], amount=-5, reason="late_delivery")
    refused(domain, db, "issue_refund", "no payment", payment_id=999999, amount=1, reason="late_delivery")
    ok(domain, db, "issue_refund", payment_id=pay["id"], amount=left, reason="price_adjustment")  # a second refund is real
    refused(domain, db, "issue_refund", "only $0.00 left", payment_id=pay["id"], amount=0.01, reason="price_adjustment")


def test_tickets(domain, db):
    o = _single_payment_order(db, "delivered", delivered_on=_days_ago(db, 3))
    args = dict(
        customer_id=o["customer_id"],
        category="delivery",
        priority="normal",
        subject="Package missing",
        description="Marked delivered, never arrived.",
        order_id=o["id"],
    )
    t = ok(domain, db, "create_ticket", **args)
    assert db.one("SELECT status, priority, opened_on FROM support_tickets WHERE id = ?", t["ticket_id"]) == {
        "status": "open",
        "priority": "normal",
        "opened_on": db.today.isoformat(),
    }
    refused(domain, db, "create_ticket", "already open", **args)
    refused(domain, db, "create_ticket", "does not belong", **{**args, "customer_id": o["customer_id"] % 300 + 1})
    refused(domain, db, "create_ticket", "must not be empty", **{**args, "category": "billing", "subject": ""})
    ok(domain, db, "update_ticket_status", ticket_id=t["ticket_id"], status="resolved")
    refused(domain, db, "update_ticket_status", "already resolved", ticket_id=t["ticket_id"], status="resolved")
    ok(domain, db, "update_ticket_status", ticket_id=t["ticket_id"], status="closed")
    refused(domain, db, "update_ticket_status", "closed and cannot change", ticket_id=t["ticket_id"], status="open")
    refused(domain, db, "update_ticket_status", "no ticket", ticket_id=999999, status="open")


def test_notes_and_escalations(domain, db):
    o = _single_payment_order(db, "shipped")
    n = ok(domain, db, "add_note", customer_id=o["customer_id"], body="Refused: already shipped.", order_id=o["id"])
    assert db.one("SELECT customer_id, order_id FROM notes WHERE id = ?", n["note_id"]) == {"customer_id": o["customer_id"], "order_id": o["id"]}
    assert ok(domain, db, "add_note", customer_id=o["customer_id"], body="General remark.")["order_id"] is None
    refused(domain, db, "add_note", "must not be empty", customer_id=o["customer_id"], body=" ")
    refused(domain, db, "add_note", "does not belong", customer_id=o["customer_id"] % 300 + 1, body="x", order_id=o["id"])
    e = ok(domain, db, "escalate", customer_id=o["customer_id"], category="refund_approval", reason="Refund of $899.00.", order_id=o["id"])
    assert db.scalar("SELECT status FROM escalations WHERE id = ?", e["escalation_id"]) == "open"
    refused(domain, db, "escalate", "already open", customer_id=o["customer_id"], category="refund_approval", reason="again", order_id=o["id"])
    ok(domain, db, "escalate", customer_id=o["customer_id"], category="account_security", reason="Did not place it.", order_id=o["id"])


# -- tasks ------------------------------------------------------------------------------------------


def test_tasks_load_with_every_family(domain):
    tasks = domain.tasks
    assert len(tasks) >= 160
    families = collections.Counter(t.family for t in tasks)
    for family in FAMILIES:
        assert families[family] >= 15, families


def test_every_gold_replays_and_changes_the_world(domain, base_image):
    for task in domain.tasks:
        db = _open(base_image, domain.config.today)
        _upsert(db, domain, task.patch)
        assert db.raw.execute("PRAGMA foreign_key_check").fetchall() == [], f"{task.id}: patch breaks a foreign key"
        before = _snapshot(db, domain.tables)
        for i, c in enumerate(task.gold):
            r = domain.tools.call(db, c.tool, c.args)
            assert r.ok, f"{task.id}: gold[{i}] {c.tool} failed: {r.content}"
        assert _snapshot(db, domain.tables) != before, f"{task.id}: gold changes nothing, so doing nothing would pass"
        for check in task.checks:
            got = [list(r) for r in db.raw.execute(check.sql).fetchall()]
            assert got == check.expect, f"{task.id}: check {check.sql!r} gave {got}"
        db.raw.close()
