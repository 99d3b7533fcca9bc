"""Kiosk task generator: five templates × entities sampled from the seed.

- `cancel` (single_write): cancel a named pending order.
- `cancel_if_pending` (lookup_then_act): look the order up; cancel it if pending, else note the refusal
  on the member's file (policy_refusal when it shipped).
- `upgrade` (lookup_then_act): find the member by email, then set the tier.
- `credit` (lookup_then_act): find the member by email, then add credit.
- `cancel_two` (multi_step): cancel two named pending orders.

`generate` makes the checked-in tasks; `instances(world, today, rng, n)` draws fresh instances from the
same templates (used for supervised warm-start demonstrations, never the checked-in tasks themselves).
"""

from __future__ import annotations

import datetime as dt
import random

from groundstate.domains._kit import call, task_id

TEMPLATES: list[str] = ["cancel", "cancel_if_pending", "upgrade", "credit", "cancel_two"]


def _make(world: dict, rng: random.Random, template: str) -> dict:
    members = world["kiosk_members"]
    orders = world["kiosk_orders"]
    pending = [o for o in orders if o["status"] == "pending"]
    if template == "cancel":
        o = rng.choice(pending)
        return {"family": "single_write", "instruction": f"Cancel order {o['id']}.", "gold": [call("cancel_kiosk_order", order_id=o["id"])]}
    if template == "cancel_if_pending":
        o = rng.choice(orders)
        gold = [call("get_kiosk_order", order_id=o["id"])]
        if o["status"] == "pending":
            gold.append(call("cancel_kiosk_order", order_id=o["id"]))
            family = "lookup_then_act"
        else:
            gold.append(call("add_member_note", member_id=o["member_id"], body=f"Refused to cancel order {o['id']}: shipped."))
            family = "policy_refusal"
        return {"family": family, "instruction": f"Cancel order {o['id']} if it has not shipped.", "gold": gold}
    if template == "upgrade":
        m = rng.choice(members)
        tier = rng.choice([t for t in ("basic", "silver", "gold") if t != m["tier"]])
        return {
            "family": "lookup_then_act",
            "instruction": f"I am {m['email']}. Set my tier to {tier}.",
            "gold": [call("find_member", email=m["email"]), call("set_member_tier", member_id=m["id"], tier=tier)],
        }
    if template == "credit":
        m = rng.choice(members)
        amount = rng.randrange(5, 60)
        return {
            "family": "lookup_then_act",
            "instruction": f"I am {m['email']}. Add {amount} credit.",
            "gold": [call("find_member", email=m["email"]), call("add_member_credit", member_id=m["id"], amount=amount)],
        }
    if template == "cancel_two":
        a, b = rng.sample(pending, 2)
        return {
            "family": "multi_step",
            "instruction": f"Cancel orders {a['id']} and {b['id']}.",
            "gold": [call("cancel_kiosk_order", order_id=a["id"]), call("cancel_kiosk_order", order_id=b["id"])],
        }
    raise ValueError(template)


def instances(world: dict, today: dt.date, rng: random.Random, n: int, templates: list[str] | None = None) -> list[dict]:
    """`n` fresh task dicts (instruction, gold, family, template), templates in rotation."""
    templates = templates or TEMPLATES
    out = []
    for i in range(n):
        t = templates[i % len(templates)]
        out.append({**_make(world, rng, t), "template": t})
    return out


def generate(world: dict, today: dt.date, rng: random.Random) -> list[dict]:
    """The checked-in kiosk tasks: 48 instances per template, no two alike.

    The templates take turns (`_kit.generate` draws each template's tasks in a row) and a task's family depends
    on what it drew (a shipped order makes a refusal), so the kiosk keeps this loop of its own.
    """
    tasks, seen = [], set()
    counts = {t: 0 for t in TEMPLATES}
    while min(counts.values()) < 48:
        for t in TEMPLATES:
            if counts[t] >= 48:
                continue
            inst = _make(world, rng, t)
            if inst["instruction"] in seen:
                continue
            seen.add(inst["instruction"])
            counts[t] += 1
            tasks.append(
                {
                    "id": task_id("kiosk", t, counts[t]),
                    "family": inst["family"],
                    "template": t,
                    "instruction": inst["instruction"],
                    "gold": inst["gold"],
                    "user": {"persona": "A kiosk member who states the request once.", "context": inst["instruction"], "script": []},
                }
            )
    return tasks
