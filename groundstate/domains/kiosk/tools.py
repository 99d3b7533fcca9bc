"""Kiosk tools: small, compact results (a tiny model reads them), every write refuses what it cannot do."""

from typing import Literal

from groundstate.tools import ToolError, tool


def _member(db, member_id: int) -> dict:
    m = db.one("SELECT id, tier, credit FROM kiosk_members WHERE id = ?", member_id)
    if m is None:
        raise ToolError(f"no member {member_id}")
    return m


@tool
def find_member(db, email: str) -> dict:
    """Find a member by email.

    Args:
        email: The member's email address.
    """
    m = db.one("SELECT id, tier, credit FROM kiosk_members WHERE email = ?", email)
    if m is None:
        raise ToolError(f"no member with email {email}")
    return m


@tool
def get_kiosk_order(db, order_id: int) -> dict:
    """Look up an order: its member, total and status.

    Args:
        order_id: The order number.
    """
    o = db.one("SELECT id, member_id, total, status FROM kiosk_orders WHERE id = ?", order_id)
    if o is None:
        raise ToolError(f"no order {order_id}")
    return o


@tool(write=True)
def cancel_kiosk_order(db, order_id: int) -> dict:
    """Cancel a pending order. Shipped orders cannot be cancelled.

    Args:
        order_id: The order number.
    """
    o = get_kiosk_order(db, order_id)
    if o["status"] != "pending":
        raise ToolError(f"order {order_id} is {o['status']}")
    db.execute("UPDATE kiosk_orders SET status = 'cancelled' WHERE id = ?", order_id)
    return {"id": order_id, "status": "cancelled"}


@tool(write=True)
def set_member_tier(db, member_id: int, tier: Literal["basic", "silver", "gold"]) -> dict:
    """Change a member's tier.

    Args:
        member_id: The member.
        tier: The new tier.
    """
    if _member(db, member_id)["tier"] == tier:
        raise ToolError(f"member {member_id} is already {tier}")
    db.execute("UPDATE kiosk_members SET tier = ? WHERE id = ?", tier, member_id)
    return {"id": member_id, "tier": tier}


@tool(write=True)
def add_member_credit(db, member_id: int, amount: int) -> dict:
    """Add store credit to a member (whole units, 1 to 100).

    Args:
        member_id: The member.
        amount: Credit to add.
    """
    if not 1 <= amount <= 100:
        raise ToolError("amount must be between 1 and 100")
    credit = _member(db, member_id)["credit"] + amount
    db.execute("UPDATE kiosk_members SET credit = ? WHERE id = ?", credit, member_id)
    return {"id": member_id, "credit": credit}


@tool(write=True)
def add_member_note(db, member_id: int, body: str) -> dict:
    """Record a note on a member's file (for example a refused request).

    Args:
        member_id: The member.
        body: The note.
    """
    _member(db, member_id)
    return {"note": db.insert("kiosk_notes", member_id=member_id, body=body)}
