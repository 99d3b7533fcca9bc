"""Tools of the retail support agent.

Each tool is a typed function over the sandbox `Db`; its docstring is what the agent reads. Reads
return JSON-ready dicts. Writes check the business rules that the system itself enforces (order
status, the return window, quantities, stock, refundable balance) and raise `ToolError` to refuse;
the engine then rolls back whatever the call wrote. Rules that depend on judgement or authority
(the $500 refund limit, which reason or priority applies, when to escalate) live in policy.md, so
following the policy is the agent's job, not the tools'.

Conventions: SQL is portable and every argument is bound as a parameter; money is handled in whole
cents and stored rounded to 2 decimals; dates are ISO strings derived from `db.today`; repeating a
write that has already taken effect (cancel a cancelled order, set a status it already has) is
refused rather than silently applied twice.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from groundstate.state.db import Db
from groundstate.tools import ToolError, tool

RETURN_WINDOW_DAYS = 30
OPEN_ORDER_STATUSES = ("pending", "processing")

CancelReason = Literal["no_longer_needed", "ordered_by_mistake", "found_better_price", "delivery_too_slow", "other"]
ReturnReason = Literal["changed_mind", "wrong_size", "not_as_described", "defective"]
RefundReason = Literal["damaged_item", "price_adjustment", "late_delivery"]
Category = Literal["any", "electronics", "home", "kitchen", "apparel", "footwear", "outdoors", "toys", "beauty"]
TicketCategory = Literal["delivery", "product_issue", "billing", "account", "other"]
TicketPriority = Literal["normal", "high", "urgent"]
TicketStatus = Literal["open", "pending", "resolved", "closed"]
EscalationCategory = Literal["refund_approval", "account_security", "policy_exception"]

US_STATES = frozenset(
    "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY "
    "NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY".split()
)
_ZIP = re.compile(r"^\d{5}$")


# -- helpers ------------------------------------------------------------------------------------

def _cents(amount: Any) -> int:
    """Money as whole cents: exact comparisons whatever float the database hands back."""
    return int(round(float(amount) * 100))


def _dollars(cents: int) -> float:
    return round(cents / 100, 2)


def _days_since(db: Db, iso: str | None) -> int | None:
    return None if iso is None else (db.today - dt.date.fromisoformat(iso)).days


def _customer(db: Db, customer_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM customers WHERE id = ?", customer_id)
    if row is None:
        raise ToolError(f"no customer with id {customer_id}")
    return row


def _order(db: Db, order_id: int) -> dict[str, Any]:
    row = db.one("SELECT * FROM orders WHERE id = ?", order_id)
    if row is None:
        raise ToolError(f"no order #{order_id}")
    return row


def _order_of_customer(db: Db, order_id: int | None, customer_id: int) -> int | None:
    """Check that an optional order belongs to the customer; records must not point at someone else's order."""
    if order_id is None:
        return None
    if _order(db, order_id)["customer_id"] != customer_id:
        raise ToolError(f"order #{order_id} does not belong to customer {customer_id}")
    return order_id


def _text(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise ToolError(f"{what} must not be empty")
    return value


def _refunded_cents(db: Db, payment_id: int) -> int:
    return sum(_cents(r["amount"]) for r in db.query("SELECT amount FROM refunds WHERE payment_id = ? ORDER BY id", payment_id))


def _returned_quantities(db: Db, order_id: int) -> dict[int, int]:
    """Units of each order item already in a return that was not rejected."""
    rows = db.query(
        "SELECT ri.order_item_id, ri.quantity FROM return_items ri JOIN returns r ON r.id = ri.return_id "
        "WHERE r.order_id = ? AND r.status <> 'rejected' ORDER BY ri.id",
        order_id,
    )
    out: dict[int, int] = {}
    for r in rows:
        out[r["order_item_id"]] = out.get(r["order_item_id"], 0) + r["quantity"]
    return out


def _product_view(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "product_id": p["id"], "sku": p["sku"], "name": p["name"], "variant": p["variant"], "category": p["category"],
        "price": _dollars(_cents(p["price"])), "stock": p["stock"], "returnable": bool(p["returnable"]), "active": bool(p["active"]),
    }


# -- reads --------------------------------------------------------------------------------------

@tool
def find_customer_by_email(db: Db, email: str) -> dict[str, Any]:
    """Find a customer account by its email address. Use it to identify the customer before acting.

    Args:
        email: The email address the customer gives (case does not matter).
    """
    row = db.one("SELECT * FROM customers WHERE LOWER(email) = ?", email.strip().lower())
    if row is None:
        raise ToolError(f"no customer with email {email.strip()!r}")
    return {"customer_id": row["id"], "first_name": row["first_name"], "last_name": row["last_name"], "email": row["email"], "tier": row["tier"]}


@tool
def get_customer(db: Db, customer_id: int) -> dict[str, Any]:
    """Get a customer's profile: contact details, tier, saved addresses, orders (newest first) and support tickets.

    Args:
        customer_id: The customer's id (from find_customer_by_email).
    """
    c = _customer(db, customer_id)
    addresses = db.query("SELECT id, label, street, city, state, zip, is_default FROM addresses WHERE customer_id = ? ORDER BY id", customer_id)
    orders = db.query(
        "SELECT id, status, placed_on, delivered_on, total FROM orders WHERE customer_id = ? ORDER BY placed_on DESC, id DESC", customer_id
    )
    tickets = db.query(
        "SELECT id, order_id, category, status, subject, opened_on FROM support_tickets WHERE customer_id = ? ORDER BY id", customer_id
    )
    return {
        "customer_id": c["id"], "first_name": c["first_name"], "last_name": c["last_name"], "email": c["email"],
        "phone": c["phone"], "tier": c["tier"], "joined_on": c["joined_on"],
        "addresses": [
            {"address_id": a["id"], "label": a["label"], "street": a["street"], "city": a["city"], "state": a["state"],
             "zip": a["zip"], "is_default": bool(a["is_default"])}
            for a in addresses
        ],
        "orders": [{"order_id": o["id"], "status": o["status"], "placed_on": o["placed_on"], "delivered_on": o["delivered_on"],
                    "total": _dollars(_cents(o["total"]))} for o in orders],
        "tickets": [{"ticket_id": t["id"], "order_id": t["order_id"], "category": t["category"], "status": t["status"],
                     "subject": t["subject"], "opened_on": t["opened_on"]} for t in tickets],
    }


@tool
def get_order(db: Db, order_id: int) -> dict[str, Any]:
    """Get an order with its items, shipping address, payments (with what is still refundable), refunds and returns.

    Args:
        order_id: The order number, e.g. 1042 for "#1042".
    """
    o = _order(db, order_id)
    items = db.query(
        "SELECT oi.id, oi.product_id, oi.quantity, oi.unit_price, p.sku, p.name, p.variant, p.returnable "
        "FROM order_items oi JOIN products p ON p.id = oi.product_id WHERE oi.order_id = ? ORDER BY oi.id",
        order_id,
    )
    returned = _returned_quantities(db, order_id)
    payments = db.query("SELECT * FROM payments WHERE order_id = ? ORDER BY id", order_id)
    refunds = db.query(
        "SELECT r.* FROM refunds r JOIN payments p ON p.id = r.payment_id WHERE p.order_id = ? ORDER BY r.id", order_id
    )
    returns = db.query("SELECT * FROM returns WHERE order_id = ? ORDER BY id", order_id)
    return_items = db.query(
        "SELECT ri.return_id, ri.order_item_id, ri.quantity FROM return_items ri JOIN returns r ON r.id = ri.return_id "
        "WHERE r.order_id = ? ORDER BY ri.id",
        order_id,
    )
    delivered = o["delivered_on"]
    return {
        "order_id": o["id"], "customer_id": o["customer_id"], "status": o["status"],
        "placed_on": o["placed_on"], "shipped_on": o["shipped_on"], "delivered_on": delivered,
        # Derived so the agent does not have to do date arithmetic.
        "days_since_delivery": _days_since(db, delivered),
        "days_from_order_to_delivery": None if delivered is None else (dt.date.fromisoformat(delivered) - dt.date.fromisoformat(o["placed_on"])).days,
        "cancelled_on": o["cancelled_on"], "cancel_reason": o["cancel_reason"],
        "shipping_address": {"street": o["ship_street"], "city": o["ship_city"], "state": o["ship_state"], "zip": o["ship_zip"]},
        "subtotal": _dollars(_cents(o["subtotal"])), "shipping_fee": _dollars(_cents(o["shipping_fee"])), "total": _dollars(_cents(o["total"])),
        "items": [
            {"order_item_id": i["id"], "product_id": i["product_id"], "sku": i["sku"], "name": i["name"], "variant": i["variant"],
             "quantity": i["quantity"], "unit_price": _dollars(_cents(i["unit_price"])), "returnable": bool(i["returnable"]),
             "returned_quantity": returned.get(i["id"], 0)}
            for i in items
        ],
        "payments": [
            {"payment_id": p["id"], "method": p["method"], "card_last4": p["card_last4"], "amount": _dollars(_cents(p["amount"])),
             "refunded": _dollars(_refunded_cents(db, p["id"])), "refundable": _dollars(_cents(p["amount"]) - _refunded_cents(db, p["id"]))}
            for p in payments
        ],
        "refunds": [{"refund_id": r["id"], "payment_id": r["payment_id"], "amount": _dollars(_cents(r["amount"])), "reason": r["reason"],
                     "issued_on": r["issued_on"]} for r in refunds],
        "returns": [
            {"return_id": r["id"], "status": r["status"], "reason": r["reason"], "requested_on": r["requested_on"],
             "refund_amount": _dollars(_cents(r["refund_amount"])),
             "items": [{"order_item_id": ri["order_item_id"], "quantity": ri["quantity"]} for ri in return_items if ri["return_id"] == r["id"]]}
            for r in returns
        ],
    }


@tool
def search_products(db: Db, query: str, category: Category = "any", in_stock_only: bool = False) -> list[dict[str, Any]]:
    """Search the catalogue by words in the product name, variant (colour, size) or SKU. Shows current price and stock.

    Args:
        query: Words to look for, e.g. "trail running shoe" or "size 9"; every word must match. Empty lists everything.
        category: Restrict to one category, or "any".
        in_stock_only: Only list variants with stock left.
    """
    sql, params = "SELECT * FROM products WHERE active = 1", []
    for word in query.lower().split():
        sql += " AND LOWER(name || ' ' || variant || ' ' || sku) LIKE ?"
        params.append(f"%{word}%")
    if category != "any":
        sql += " AND category = ?"
        params.append(category)
    if in_stock_only:
        sql += " AND stock > 0"
    rows = db.query(sql + " ORDER BY id LIMIT 30", *params)
    return [_product_view(p) for p in rows]


@tool
def get_return(db: Db, return_id: int) -> dict[str, Any]:
    """Get a return: its order, status, reason, refund amount and the items (with units) being sent back.

    Args:
        return_id: The return number.
    """
    r = db.one("SELECT * FROM returns WHERE id = ?", return_id)
    if r is None:
        raise ToolError(f"no return #{return_id}")
    items = db.query(
        "SELECT ri.order_item_id, ri.quantity, p.name, p.variant FROM return_items ri "
        "JOIN order_items oi ON oi.id = ri.order_item_id JOIN products p ON p.id = oi.product_id WHERE ri.return_id = ? ORDER BY ri.id",
        return_id,
    )
    return {
        "return_id": r["id"], "order_id": r["order_id"], "status": r["status"], "reason": r["reason"],
        "requested_on": r["requested_on"], "refund_amount": _dollars(_cents(r["refund_amount"])), "items": items,
    }


@tool
def get_ticket(db: Db, ticket_id: int) -> dict[str, Any]:
    """Get a support ticket.

    Args:
        ticket_id: The ticket number.
    """
    t = db.one("SELECT * FROM support_tickets WHERE id = ?", ticket_id)
    if t is None:
        raise ToolError(f"no ticket #{ticket_id}")
    return {"ticket_id": t["id"], **{k: v for k, v in t.items() if k != "id"}}


# -- writes -------------------------------------------------------------------------------------

@tool(write=True)
def cancel_order(db: Db, order_id: int, reason: CancelReason) -> dict[str, Any]:
    """Cancel an order that has not shipped yet (status pending or processing).

    Cancelling puts the items back in stock and refunds every payment of the order in full, to the
    payment it came from: do not issue separate refunds for a cancelled order.

    Args:
        order_id: The order to cancel.
        reason: Why the customer cancels: no_longer_needed, ordered_by_mistake, found_better_price,
            delivery_too_slow, or other.
    """
    o = _order(db, order_id)
    if o["status"] == "cancelled":
        raise ToolError(f"order #{order_id} is already cancelled")
    if o["status"] not in OPEN_ORDER_STATUSES:
        raise ToolError(f"order #{order_id} is {o['status']}: only pending or processing orders can be cancelled")
    today = db.today.isoformat()
    db.execute("UPDATE orders SET status = 'cancelled', cancelled_on = ?, cancel_reason = ? WHERE id = ?", today, reason, order_id)
    for item in db.query("SELECT product_id, quantity FROM order_items WHERE order_id = ? ORDER BY id", order_id):
        db.execute("UPDATE products SET stock = stock + ? WHERE id = ?", item["quantity"], item["product_id"])
    refunds = []
    for p in db.query("SELECT id, amount FROM payments WHERE order_id = ? ORDER BY id", order_id):
        left = _cents(p["amount"]) - _refunded_cents(db, p["id"])
        if left > 0:
            rid = db.insert("refunds", payment_id=p["id"], return_id=None, amount=_dollars(left), reason="order_cancelled", issued_on=today)
            refunds.append({"refund_id": rid, "payment_id": p["id"], "amount": _dollars(left)})
    return {"order_id": order_id, "status": "cancelled", "reason": reason, "refunds": refunds}


@tool(write=True)
def update_shipping_address(db: Db, order_id: int, street: str, city: str, state: str, zip: str) -> dict[str, Any]:
    """Change where an order ships. Only possible before it ships (status pending or processing). US addresses only.

    Args:
        order_id: The order to re-address.
        street: Street line, e.g. "742 Maple Ave Apt 3".
        city: City name.
        state: Two-letter US state code in capitals, e.g. "CA".
        zip: Five-digit ZIP code, e.g. "94110".
    """
    o = _order(db, order_id)
    if o["status"] not in OPEN_ORDER_STATUSES:
        raise ToolError(f"order #{order_id} is {o['status']}: the address can only be changed before the order ships")
    street, city, state, zip = _text(street, "street"), _text(city, "city"), state.strip(), zip.strip()
    if state not in US_STATES:
        raise ToolError(f"{state!r} is not a two-letter US state code (e.g. 'CA')")
    if not _ZIP.match(zip):
        raise ToolError(f"{zip!r} is not a five-digit ZIP code")
    new = (street, city, state, zip)
    if new == (o["ship_street"], o["ship_city"], o["ship_state"], o["ship_zip"]):
        raise ToolError(f"order #{order_id} already ships to that address")
    db.execute("UPDATE orders SET ship_street = ?, ship_city = ?, ship_state = ?, ship_zip = ? WHERE id = ?", *new, order_id)
    return {"order_id": order_id, "shipping_address": {"street": street, "city": city, "state": state, "zip": zip}}


@tool(write=True)
def exchange_item(db: Db, order_item_id: int, new_product_id: int) -> dict[str, Any]:
    """Swap an item of an unshipped order (pending or processing) for another variant (size, colour) of the same product.

    The new variant must be in stock for the item's whole quantity; the price is unchanged.

    Args:
        order_item_id: The order item to change (see get_order).
        new_product_id: The product id of the variant the customer wants instead (see search_products).
    """
    item = db.one("SELECT * FROM order_items WHERE id = ?", order_item_id)
    if item is None:
        raise ToolError(f"no order item {order_item_id}")
    o = _order(db, item["order_id"])
    if o["status"] not in OPEN_ORDER_STATUSES:
        raise ToolError(f"order #{o['id']} is {o['status']}: items can only be exchanged before the order ships")
    if item["product_id"] == new_product_id:
        raise ToolError(f"order item {order_item_id} already is product {new_product_id}")
    old = db.one("SELECT * FROM products WHERE id = ?", item["product_id"])
    new = db.one("SELECT * FROM products WHERE id = ?", new_product_id)
    if new is None or not new["active"]:
        raise ToolError(f"no product with id {new_product_id}")
    if new["name"] != old["name"] or _cents(new["price"]) != _cents(old["price"]):
        raise ToolError(f"product {new_product_id} ({new['name']}) is not a variant of {old['name']}: only variants of the same product can be exchanged")
    if new["stock"] < item["quantity"]:
        raise ToolError(f"{new['name']} ({new['variant']}) is out of stock: {new['stock']} left, {item['quantity']} needed")
    db.execute("UPDATE products SET stock = stock + ? WHERE id = ?", item["quantity"], old["id"])
    db.execute("UPDATE products SET stock = stock - ? WHERE id = ?", item["quantity"], new["id"])
    db.execute("UPDATE order_items SET product_id = ? WHERE id = ?", new_product_id, order_item_id)
    return {"order_id": o["id"], "order_item_id": order_item_id, "old_variant": old["variant"], "new_variant": new["variant"], "quantity": item["quantity"]}


@tool(write=True)
def create_return(db: Db, order_id: int, order_item_ids: list[int], quantities: list[int], reason: ReturnReason) -> dict[str, Any]:
    """Open a return for items of a delivered order, within 30 days of delivery. Returnable items only.

    One call per order covers every item the customer sends back; quantities[i] is the number of
    units of order_item_ids[i]. The refund is paid automatically when the warehouse receives the
    items: do not issue it yourself.

    Args:
        order_id: The delivered order.
        order_item_ids: The order items being returned (see get_order).
        quantities: Units returned for each item, in the same order as order_item_ids.
        reason: changed_mind, wrong_size (does not fit), not_as_described, or defective (does not work).
    """
    o = _order(db, order_id)
    if o["status"] != "delivered":
        raise ToolError(f"order #{order_id} is {o['status']}: only delivered orders can be returned")
    age = _days_since(db, o["delivered_on"])
    if age > RETURN_WINDOW_DAYS:
        raise ToolError(f"order #{order_id} was delivered {age} days ago: the return window is {RETURN_WINDOW_DAYS} days")
    if not order_item_ids:
        raise ToolError("name at least one order item to return")
    if len(order_item_ids) != len(quantities):
        raise ToolError(f"give one quantity per item: {len(order_item_ids)} items but {len(quantities)} quantities")
    if len(set(order_item_ids)) != len(order_item_ids):
        raise ToolError("each order item may appear only once")
    returned = _returned_quantities(db, order_id)
    total = 0
    lines = []
    for item_id, qty in zip(order_item_ids, quantities):
        item = db.one(
            "SELECT oi.*, p.name, p.returnable FROM order_items oi JOIN products p ON p.id = oi.product_id WHERE oi.id = ?", item_id
        )
        if item is None or item["order_id"] != order_id:
            raise ToolError(f"order item {item_id} is not part of order #{order_id}")
        if not item["returnable"]:
            raise ToolError(f"{item['name']} is final sale and cannot be returned")
        left = item["quantity"] - returned.get(item_id, 0)
        if qty < 1 or qty > left:
            raise ToolError(f"order item {item_id} ({item['name']}): can return 1 to {left} units, not {qty}" if left else
                            f"order item {item_id} ({item['name']}) has already been returned")
        total += qty * _cents(item["unit_price"])
        lines.append((item_id, qty))
    today = db.today.isoformat()
    return_id = db.insert("returns", order_id=order_id, reason=reason, status="requested", requested_on=today, refund_amount=_dollars(total))
    for item_id, qty in lines:
        db.insert("return_items", return_id=return_id, order_item_id=item_id, quantity=qty)
    return {"return_id": return_id, "order_id": order_id, "status": "requested", "refund_amount": _dollars(total),
            "items": [{"order_item_id": i, "quantity": q} for i, q in lines]}


@tool(write=True)
def issue_refund(db: Db, payment_id: int, amount: float, reason: RefundReason) -> dict[str, Any]:
    """Refund money to a payment of an order (back to the card, PayPal account or gift card it came from).

    Not for cancellations or returns, which refund themselves. A payment can never be refunded
    more than its amount minus what was already refunded.

    Args:
        payment_id: The payment to refund (see the payments of get_order).
        amount: Dollars to refund, e.g. 24.99.
        reason: damaged_item (arrived damaged), price_adjustment (price dropped), or late_delivery (shipping fee).
    """
    p = db.one("SELECT * FROM payments WHERE id = ?", payment_id)
    if p is None:
        raise ToolError(f"no payment with id {payment_id}")
    cents = _cents(amount)
    if cents <= 0:
        raise ToolError("the refund amount must be positive")
    if abs(amount * 100 - cents) > 1e-6:
        raise ToolError(f"{amount} is not a whole number of cents")
    left = _cents(p["amount"]) - _refunded_cents(db, payment_id)
    if cents > left:
        raise ToolError(f"payment {payment_id} has only ${_dollars(left):.2f} left to refund")
    refund_id = db.insert("refunds", payment_id=payment_id, return_id=None, amount=_dollars(cents), reason=reason, issued_on=db.today.isoformat())
    return {"refund_id": refund_id, "payment_id": payment_id, "amount": _dollars(cents), "reason": reason,
            "refundable_left": _dollars(left - cents)}


@tool(write=True)
def create_ticket(
    db: Db,
    customer_id: int,
    category: TicketCategory,
    priority: TicketPriority,
    subject: str,
    description: str,
    order_id: int | None = None,
) -> dict[str, Any]:
    """Open a support ticket for a problem another team must follow up, e.g. a missing package or a safety hazard.

    Args:
        customer_id: The customer the ticket is for.
        category: delivery, product_issue, billing, account, or other.
        priority: normal, high, or urgent (see the policy).
        subject: A short title, in your words.
        description: What happened and what the customer wants, in your words.
        order_id: The order concerned, if any (it must be the customer's).
    """
    _customer(db, customer_id)
    order_id = _order_of_customer(db, order_id, customer_id)
    subject, description = _text(subject, "subject"), _text(description, "description")
    for t in db.query(
        "SELECT id, order_id FROM support_tickets WHERE customer_id = ? AND category = ? AND status IN ('open', 'pending') ORDER BY id",
        customer_id, category,
    ):
        if t["order_id"] == order_id:  # compared here: `=` never matches NULL and `IS` is not portable
            raise ToolError(f"ticket #{t['id']} is already open for this {'order' if order_id else 'customer'} and category; update it instead")
    today = db.today.isoformat()
    ticket_id = db.insert(
        "support_tickets", customer_id=customer_id, order_id=order_id, category=category, priority=priority, status="open",
        subject=subject, description=description, opened_on=today, updated_on=today,
    )
    return {"ticket_id": ticket_id, "status": "open", "category": category, "priority": priority, "order_id": order_id}


@tool(write=True)
def update_ticket_status(db: Db, ticket_id: int, status: TicketStatus) -> dict[str, Any]:
    """Set a support ticket's status. Closed tickets are final: open a new ticket instead of reopening one.

    Args:
        ticket_id: The ticket to update.
        status: open (reopen), pending (waiting on the customer), resolved (problem fixed), or closed (withdrawn).
    """
    t = db.one("SELECT * FROM support_tickets WHERE id = ?", ticket_id)
    if t is None:
        raise ToolError(f"no ticket #{ticket_id}")
    if t["status"] == "closed":
        raise ToolError(f"ticket #{ticket_id} is closed and cannot change; open a new ticket instead")
    if t["status"] == status:
        raise ToolError(f"ticket #{ticket_id} is already {status}")
    db.execute("UPDATE support_tickets SET status = ?, updated_on = ? WHERE id = ?", status, db.today.isoformat(), ticket_id)
    return {"ticket_id": ticket_id, "old_status": t["status"], "status": status}


@tool(write=True)
def add_note(db: Db, customer_id: int, body: str, order_id: int | None = None) -> dict[str, Any]:
    """Add a note to a customer's account, e.g. to record a request you refused and why.

    Args:
        customer_id: The customer the note is about.
        body: The note, in your words.
        order_id: The customer's order the note concerns, if any.
    """
    _customer(db, customer_id)
    order_id = _order_of_customer(db, order_id, customer_id)
    note_id = db.insert("notes", customer_id=customer_id, order_id=order_id, body=_text(body, "body"), created_on=db.today.isoformat())
    return {"note_id": note_id, "customer_id": customer_id, "order_id": order_id}


@tool(write=True)
def escalate(db: Db, customer_id: int, category: EscalationCategory, reason: str, order_id: int | None = None) -> dict[str, Any]:
    """Hand a case to a supervisor: refunds above your limit, security concerns, or a customer asking for an exception.

    Args:
        customer_id: The customer concerned.
        category: refund_approval, account_security, or policy_exception.
        reason: What the supervisor needs to know, in your words (include amounts).
        order_id: The customer's order concerned, if any.
    """
    _customer(db, customer_id)
    order_id = _order_of_customer(db, order_id, customer_id)
    for e in db.query(
        "SELECT id, order_id FROM escalations WHERE customer_id = ? AND category = ? AND status = 'open' ORDER BY id", customer_id, category
    ):
        if e["order_id"] == order_id:
            raise ToolError(f"escalation #{e['id']} is already open for this case")
    escalation_id = db.insert(
        "escalations", customer_id=customer_id, order_id=order_id, category=category, status="open",
        reason=_text(reason, "reason"), created_on=db.today.isoformat(),
    )
    return {"escalation_id": escalation_id, "category": category, "status": "open", "order_id": order_id}
