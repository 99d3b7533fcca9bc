"""Task generator for the retail domain: templates × entities sampled from the seed world.

`generate(world, today, rng)` is deterministic: the same world, date and rng give the same tasks, in
the same order, with the same ids. `world` is the seed (`seed.generate(Random(<domain seed>))`) and
is never modified; each task sets up its situation with a `patch` (rows upserted on top of the seed:
partial rows update, full rows insert).

Each template picks "clean" orders (one payment; no returns, refunds, tickets, notes or escalations
point at them) so that rewriting their status and dates cannot contradict other rows, and prefers
customers no other task has used yet, so tasks spread across the world.

Rewrite tasks/retail.yaml with:  groundstate tasks generate --domain retail
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groundstate.domains import _kit
from groundstate.domains._kit import WorldIndex, call, cents, dollars, group_by, money, rubric, said

HERE = Path(__file__).resolve().parent

REFUND_LIMIT = 500.00
RETURN_WINDOW = 30
# Products that can plausibly become a safety hazard (spark, smoke, overheat).
HAZARDOUS = {
    "Space Heater",
    "Hair Dryer Pro",
    "Blender Pro",
    "Espresso Machine",
    "Laptop Pro 14",
    "Robot Vacuum",
    "Bluetooth Speaker",
    "Electric Toothbrush",
    "Tablet 11",
    "Air Purifier",
}

CANCEL_PHRASES = {
    "no_longer_needed": ["I don't need it anymore", "I no longer need it", "turns out I won't need it after all"],
    "ordered_by_mistake": ["I ordered it by mistake", "I placed it by accident", "it was a mistake, I clicked buy twice"],
    "found_better_price": ["I found it cheaper elsewhere", "another shop has it for less", "I found a better price somewhere else"],
    "delivery_too_slow": ["it's taking too long to arrive", "the delivery estimate is far too slow for me", "I can't wait that long for it"],
}
RETURN_PHRASES = {
    "changed_mind": ["I changed my mind", "I don't want it after all", "it's just not for me"],
    "wrong_size": ["it doesn't fit", "the size is wrong for me", "it's too small"],
    "not_as_described": [
        "it looks nothing like the photos",
        "it isn't what the listing described",
        "the colour and material are different from the description",
    ],
    "defective": ["it stopped working after two days", "it doesn't turn on", "it's faulty, it doesn't work at all"],
}
DAMAGE_WORDS = ["smashed", "cracked", "crushed", "dented", "broken"]
HAZARD_WORDS = [
    "started sparking when I plugged it in",
    "began to smoke after a few minutes",
    "overheated and the casing melted",
    "gave off a burning smell and a spark",
]
TICKET_SUBJECTS = {
    "delivery": "Delivery is running late",
    "product_issue": "Question about my product",
    "billing": "Question about a charge",
    "account": "Trouble logging in",
}


class Patch(_kit.Patch):
    order = _kit.table_order(HERE)


class Generator(WorldIndex):
    """Indexes over the seed world plus the sampling and phrasing helpers the templates share."""

    def __init__(self, world: dict[str, list[dict]], today: dt.date, rng: random.Random):
        super().__init__(world, today, rng)
        self.seed = _kit.sibling(HERE, "seed")
        self.customers = {c["id"]: c for c in world["customers"]}
        self.products = {p["id"]: p for p in world["products"]}
        self.orders = {o["id"]: o for o in world["orders"]}
        self.items = group_by(world["order_items"], "order_id")
        self.payments = group_by(world["payments"], "order_id")
        self.addresses = group_by(world["addresses"], "customer_id")
        self.variants = group_by(world["products"], "name")

        referenced = {r["order_id"] for r in world["returns"]}
        referenced |= {t["order_id"] for t in world["support_tickets"] if t["order_id"] is not None}
        referenced |= {n["order_id"] for n in world["notes"] if n["order_id"] is not None}
        referenced |= {e["order_id"] for e in world["escalations"] if e["order_id"] is not None}
        pay_order = {p["id"]: p["order_id"] for p in world["payments"]}
        referenced |= {pay_order[r["payment_id"]] for r in world["refunds"]}
        self.clean = [o for o in world["orders"] if o["status"] == "delivered" and o["id"] not in referenced and len(self.payments[o["id"]]) == 1]
        self.used_orders: set[int] = set()
        self.used_customers: set[int] = set()

    # -- sampling ---------------------------------------------------------------------------------
    def pick_order(self, ok: Callable[[dict], bool] = lambda o: True) -> dict:
        """A clean, unused order satisfying `ok`, preferring customers no task has used yet."""
        pool = [o for o in self.clean if o["id"] not in self.used_orders and ok(o)]
        order = self.draw(pool, "clean order", lambda o: o["customer_id"] not in self.used_customers)
        self.claim(order)
        return order

    def pick_orders_of_one_customer(self, k: int, ok: Callable[[dict], bool] = lambda o: True) -> list[dict]:
        """k clean, unused orders of one customer, all satisfying `ok`."""
        pool = [o for o in self.clean if o["id"] not in self.used_orders and ok(o)]
        orders = self.draw_group(pool, "customer_id", k, "customer", lambda c: c not in self.used_customers)
        for o in orders:
            self.claim(o)
        return orders

    def claim(self, order: dict) -> None:
        self.used_orders.add(order["id"])
        self.used_customers.add(order["customer_id"])

    # -- world facts --------------------------------------------------------------------------------
    def customer(self, order: dict) -> dict:
        return self.customers[order["customer_id"]]

    def payment(self, order: dict) -> dict:
        return self.payments[order["id"]][0]

    def product(self, item: dict) -> dict:
        return self.products[item["product_id"]]

    def label(self, item: dict) -> str:
        p = self.product(item)
        return f"{p['name']} ({p['variant']})"

    def returnable_items(self, order: dict) -> list[dict]:
        return [it for it in self.items[order["id"]] if self.product(it)["returnable"]]

    def other_variants_in_stock(self, item: dict) -> list[dict]:
        p = self.product(item)
        return [v for v in self.variants[p["name"]] if v["id"] != p["id"] and v["stock"] >= item["quantity"]]

    # -- patches ------------------------------------------------------------------------------------
    def restate(self, order: dict, status: str, delivered_ago: int | None = None, transit: int | None = None) -> Patch:
        """Patch an order (and its payment date) into `status`, with dates consistent with today."""
        rng, today = self.rng, self.today
        shipped = delivered = None
        if status == "pending":
            placed = today - dt.timedelta(days=rng.randint(0, 1))
        elif status == "processing":
            placed = today - dt.timedelta(days=rng.randint(1, 2))
        elif status == "shipped":
            placed = today - dt.timedelta(days=rng.randint(3, 5))
            shipped = placed + dt.timedelta(days=rng.randint(1, 2))
        elif status == "delivered":
            transit = transit or rng.randint(3, 6)
            delivered = today - dt.timedelta(days=delivered_ago if delivered_ago is not None else rng.randint(1, 20))
            placed = delivered - dt.timedelta(days=transit)
            shipped = placed + dt.timedelta(days=rng.randint(1, 2))
        else:
            raise ValueError(f"cannot restate an order as {status}")
        patch = Patch()
        patch.add(
            "orders",
            {
                "id": order["id"],
                "status": status,
                "placed_on": placed.isoformat(),
                "shipped_on": shipped and shipped.isoformat(),
                "delivered_on": delivered and delivered.isoformat(),
            },
        )
        patch.add("payments", {"id": self.payment(order)["id"], "paid_on": placed.isoformat()})
        return patch

    def delivered_on(self, patch: Patch, order: dict) -> str:
        return next(r["delivered_on"] for r in patch.tables["orders"] if r["id"] == order["id"])

    def new_ticket(self, order: dict, category: str, status: str, opened_ago: int) -> dict:
        opened = (self.today - dt.timedelta(days=opened_ago)).isoformat()
        c = self.customer(order)
        subject = TICKET_SUBJECTS[category]
        return {
            "id": self.new_id("support_tickets"),
            "customer_id": c["id"],
            "order_id": order["id"],
            "category": category,
            "priority": "high" if c["tier"] == "gold" else "normal",
            "status": status,
            "subject": subject,
            "description": f"{subject} (order #{order['id']}).",
            "opened_on": opened,
            "updated_on": opened,
        }

    # -- phrasing -----------------------------------------------------------------------------------
    def hello(self, c: dict) -> str:
        """An opening that identifies the customer by name and email."""
        name = f"{c['first_name']} {c['last_name']}"
        return self.opening(f"this is {name} ({c['email']}).", f"I'm {name}, my account email is {c['email']}.", f"my email is {c['email']}.")

    def user(self, c: dict, context: str, first: list[str] | None = None) -> dict:
        """The simulated customer: persona, the facts they know, and scripted replies."""
        return self.simulated_user(f"{c['first_name']} {c['last_name']}, a {c['tier']}-tier Northwind Goods customer", context, first)

    def address(self) -> dict:
        return self.seed.random_address(self.rng)

    @staticmethod
    def address_text(a: dict) -> str:
        return f"{a['street']}, {a['city']}, {a['state']} {a['zip']}"

    @staticmethod
    def address_args(order_id: int, a: dict) -> dict:
        return {"order_id": order_id, "street": a["street"], "city": a["city"], "state": a["state"], "zip": a["zip"]}

    def cancel_reason(self) -> tuple[str, str]:
        reason = self.rng.choice(sorted(CANCEL_PHRASES))
        return reason, self.rng.choice(CANCEL_PHRASES[reason])

    def return_reason(self, allowed: list[str] | None = None) -> tuple[str, str]:
        reason = self.rng.choice(allowed or sorted(RETURN_PHRASES))
        return reason, self.rng.choice(RETURN_PHRASES[reason])


def units(n: int, noun: str = "unit") -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def refunds_of_order(order_id: int) -> str:
    return f"SELECT COUNT(*) FROM refunds r JOIN payments p ON p.id = r.payment_id WHERE p.order_id = {order_id}"


# ================================================================================================
# Templates. Each returns one task (without id): instruction, user, patch, gold, optional checks.
# ================================================================================================

# -- single_write --------------------------------------------------------------------------------


def t_cancel_open_order(g: Generator) -> dict:
    o = g.pick_order()
    c = g.customer(o)
    status = g.rng.choice(["pending", "processing"])
    reason, phrase = g.cancel_reason()
    return {
        "instruction": f"{g.hello(c)} Please cancel order #{o['id']}: {phrase}.",
        "user": g.user(c, f"Your email is {c['email']}. You want order #{o['id']} cancelled {said(phrase)}."),
        "patch": g.restate(o, status),
        "gold": [call("cancel_order", order_id=o["id"], reason=reason)],
        "checks": [{"sql": f"SELECT status, cancel_reason FROM orders WHERE id = {o['id']}", "expect": [["cancelled", reason]]}],
        "tags": ["cancel", status],
    }


def t_change_address(g: Generator) -> dict:
    o = g.pick_order()
    c = g.customer(o)
    a = g.address()
    return {
        "instruction": f"{g.hello(c)} I'm moving. Could you ship order #{o['id']} to {g.address_text(a)} instead?",
        "user": g.user(c, f"Your email is {c['email']}. Order #{o['id']} should go to your new address: {g.address_text(a)}."),
        "patch": g.restate(o, g.rng.choice(["pending", "processing"])),
        "gold": [call("update_shipping_address", **g.address_args(o["id"], a))],
        "tags": ["address"],
    }


TICKET_CHANGES = [  # (current status, wanted status, what the customer says)
    ("open", "resolved", "Good news: the problem is fixed now, so you can mark ticket #{t} as resolved."),
    ("pending", "resolved", "Ticket #{t} can be marked resolved; everything works now."),
    ("open", "closed", "I don't need help with ticket #{t} anymore; please close it."),
    ("pending", "closed", "Please close ticket #{t}, I've decided to drop the matter."),
    ("resolved", "open", "The problem from ticket #{t} came back. Please reopen it."),
    ("open", "pending", "About ticket #{t}: I'll send you photos in a few days, so please put it on hold until then."),
]


def t_ticket_status(g: Generator) -> dict:
    o = g.pick_order()
    c = g.customer(o)
    current, wanted, says = g.rng.choice(TICKET_CHANGES)
    ticket = g.new_ticket(o, g.rng.choice(sorted(TICKET_SUBJECTS)), current, g.rng.randint(2, 20))
    text = says.format(t=ticket["id"])
    patch = Patch()
    patch.add("support_tickets", ticket)
    return {
        "instruction": f"{g.hello(c)} {text}",
        "user": g.user(c, f'Your email is {c["email"]}. About your ticket you say: "{text}"'),
        "patch": patch,
        "gold": [call("update_ticket_status", ticket_id=ticket["id"], status=wanted)],
        "checks": [{"sql": f"SELECT status FROM support_tickets WHERE id = {ticket['id']}", "expect": [[wanted]]}],
        "tags": ["ticket", f"{current}->{wanted}"],
    }


def _missing_package(g: Generator, c: dict, o: dict, delivered_on: str) -> dict:
    return call(
        "create_ticket",
        customer_id=c["id"],
        category="delivery",
        priority="high" if c["tier"] == "gold" else "normal",
        subject="Package marked delivered but not received",
        description=f"Order #{o['id']} shows delivered on {delivered_on}, but the customer never received it.",
        order_id=o["id"],
    )


def t_missing_package(g: Generator) -> dict:
    # Every other task uses a gold-tier customer, so both priorities are exercised.
    gold_tier = g.rng.random() < 0.5
    o = g.pick_order(lambda o: (g.customer(o)["tier"] == "gold") == gold_tier)
    c = g.customer(o)
    patch = g.restate(o, "delivered", delivered_ago=g.rng.randint(2, 12))
    day = g.delivered_on(patch, o)
    return {
        "instruction": f"{g.hello(c)} Order #{o['id']} says it was delivered on {day}, but nothing ever arrived. Can you look into it?",
        "user": g.user(c, f"Your email is {c['email']}. Order #{o['id']} is shown as delivered on {day} but you never got the package."),
        "patch": patch,
        "gold": [call("find_customer_by_email", email=c["email"]), _missing_package(g, c, o, day)],
        "tags": ["ticket", "delivery", f"tier:{c['tier']}"],
    }


def t_safety_ticket(g: Generator) -> dict:
    o = g.pick_order(lambda o: any(g.product(it)["name"] in HAZARDOUS for it in g.items[o["id"]]))
    c = g.customer(o)
    it = next(it for it in g.items[o["id"]] if g.product(it)["name"] in HAZARDOUS)
    what = g.rng.choice(HAZARD_WORDS)
    name = g.product(it)["name"]
    return {
        "instruction": f"{g.hello(c)} The {name} from order #{o['id']} {what}. Nobody was hurt, but please report it; "
        f"I'm not asking for anything else right now.",
        "user": g.user(c, f"Your email is {c['email']}. The {name} from order #{o['id']} {what}. You want it reported, nothing else."),
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call(
                "create_ticket",
                customer_id=c["id"],
                category="product_issue",
                priority="urgent",
                subject=f"Safety hazard: {name}",
                description=f"The customer's {name} from order #{o['id']} {what}.",
                order_id=o["id"],
            ),
        ],
        "tags": ["ticket", "safety"],
    }


# -- lookup_then_act -------------------------------------------------------------------------------


def t_exchange_variant(g: Generator) -> dict:
    o = g.pick_order(lambda o: any(g.other_variants_in_stock(it) for it in g.items[o["id"]]))
    c = g.customer(o)
    it = g.rng.choice([it for it in g.items[o["id"]] if g.other_variants_in_stock(it)])
    old, new = g.product(it), g.rng.choice(g.other_variants_in_stock(it))
    return {
        "instruction": f"{g.hello(c)} In order #{o['id']} I picked the {old['name']} in {old['variant']}, "
        f"but I need it in {new['variant']}. Can you switch it before it ships?",
        "user": g.user(
            c, f"Your email is {c['email']}. In order #{o['id']} you want the {old['name']} changed from {old['variant']} to {new['variant']}."
        ),
        "patch": g.restate(o, g.rng.choice(["pending", "processing"])),
        "gold": [
            call("get_order", order_id=o["id"]),
            call("search_products", query=old["name"]),
            call("exchange_item", order_item_id=it["id"], new_product_id=new["id"]),
        ],
        "tags": ["exchange"],
    }


def _ships_to(o: dict, a: dict) -> bool:
    return (o["ship_street"], o["ship_city"], o["ship_state"], o["ship_zip"]) == (a["street"], a["city"], a["state"], a["zip"])


def t_saved_address(g: Generator) -> dict:
    def has_other_saved(o: dict) -> bool:
        return any(not a["is_default"] and not _ships_to(o, a) for a in g.addresses[o["customer_id"]])

    o = g.pick_order(has_other_saved)
    c = g.customer(o)
    a = next(a for a in g.addresses[c["id"]] if not a["is_default"] and not _ships_to(o, a))
    return {
        "instruction": f"{g.hello(c)} Could you send order #{o['id']} to my {a['label']} address instead? It's saved on my account.",
        "user": g.user(c, f"Your email is {c['email']}. Order #{o['id']} should go to your saved {a['label']} address ({g.address_text(a)})."),
        "patch": g.restate(o, g.rng.choice(["pending", "processing"])),
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call("get_customer", customer_id=c["id"]),
            call("update_shipping_address", **g.address_args(o["id"], a)),
        ],
        "tags": ["address", "saved_address"],
    }


def _damage(g: Generator, it: dict) -> tuple[int, float]:
    """How many units arrived damaged and what they cost."""
    n = g.rng.randint(1, it["quantity"])
    return n, dollars(n * cents(it["unit_price"]))


def _damage_text(g: Generator, it: dict, n: int) -> str:
    word = g.rng.choice(DAMAGE_WORDS)
    if it["quantity"] == 1:
        return f"the {g.label(it)} arrived {word}"
    if n == it["quantity"]:
        return f"{'both' if n == 2 else f'all {n}'} of the {g.label(it)} arrived {word}"
    return f"{n} of the {it['quantity']} {g.label(it)} arrived {word}"


def t_damaged_refund(g: Generator) -> dict:
    o = g.pick_order(lambda o: any(cents(it["unit_price"]) <= REFUND_LIMIT * 100 for it in g.items[o["id"]]))
    c = g.customer(o)
    it = g.rng.choice([it for it in g.items[o["id"]] if cents(it["unit_price"]) <= REFUND_LIMIT * 100])
    n, amount = _damage(g, it)
    while amount > REFUND_LIMIT:  # keep the refund within the agent's limit
        n -= 1
        amount = dollars(n * cents(it["unit_price"]))
    text = _damage_text(g, it, n)
    return {
        "instruction": f"{g.hello(c)} Order #{o['id']} came and {text}. I'd like a refund for the damaged "
        f"{'one' if n == 1 else 'ones'}; I don't need to send anything back, right?",
        "user": g.user(c, f"Your email is {c['email']}. In order #{o['id']}, {text}. You want a refund for {units(n)}."),
        "patch": g.restate(o, "delivered", delivered_ago=g.rng.randint(1, 28)),
        "gold": [call("get_order", order_id=o["id"]), call("issue_refund", payment_id=g.payment(o)["id"], amount=amount, reason="damaged_item")],
        "rubrics": [rubric("Does the reply tell the customer the amount refunded, {}?", money(amount))],
        "gold_reply": f"I have refunded {money(amount)} for the damaged {'item' if n == 1 else 'items'}; you do not need to send anything back.",
        "tags": ["refund", "damaged"],
    }


def t_price_adjustment(g: Generator) -> dict:
    o = g.pick_order()
    c = g.customer(o)
    it = g.rng.choice(g.items[o["id"]])
    p = g.product(it)
    paid = cents(it["unit_price"])
    now = cents(paid * g.rng.choice([0.7, 0.8, 0.85, 0.9]) / 100)
    diff = (paid - now) * it["quantity"]
    if diff > REFUND_LIMIT * 100:  # keep within the agent's limit: a smaller drop
        now = paid - (REFUND_LIMIT * 100 // it["quantity"]) // 2
        diff = (paid - now) * it["quantity"]
    status = g.rng.choice(["shipped", "delivered"])
    patch = g.restate(o, status, delivered_ago=g.rng.randint(1, 14) if status == "delivered" else None)
    for v in g.variants[p["name"]]:  # a price drop applies to every variant of the product
        patch.add("products", {"id": v["id"], "price": dollars(now)})
    when = "just arrived" if status == "delivered" else "is still on its way"
    return {
        "instruction": f"{g.hello(c)} My order #{o['id']} {when}, and I see the {p['name']} is now cheaper on your site than what I paid. "
        f"Can I get the difference back?",
        "user": g.user(
            c,
            f"Your email is {c['email']}. You paid {money(dollars(paid))} each for the {p['name']} in order #{o['id']}; "
            f"it now sells for {money(dollars(now))}. You want the difference refunded.",
        ),
        "patch": patch,
        "gold": [
            call("get_order", order_id=o["id"]),
            call("search_products", query=p["name"]),
            call("issue_refund", payment_id=g.payment(o)["id"], amount=dollars(diff), reason="price_adjustment"),
        ],
        "rubrics": [rubric("Does the reply tell the customer the amount refunded, {}?", money(dollars(diff)))],
        "gold_reply": f"The price of the {p['name']} is now {money(dollars(now))}, so I have refunded the difference: {money(dollars(diff))}.",
        "tags": ["refund", "price_adjustment", status],
    }


def t_late_delivery_fee(g: Generator) -> dict:
    o = g.pick_order(lambda o: o["shipping_fee"] > 0)
    c = g.customer(o)
    transit = g.rng.randint(8, 13)
    return {
        "instruction": f"{g.hello(c)} Order #{o['id']} took {transit} days to reach me. Since it was so late, could I have the shipping fee back?",
        "user": g.user(
            c, f"Your email is {c['email']}. Order #{o['id']} arrived {transit} days after you ordered it; you want the shipping fee refunded."
        ),
        "patch": g.restate(o, "delivered", delivered_ago=g.rng.randint(1, 25), transit=transit),
        "gold": [
            call("get_order", order_id=o["id"]),
            call("issue_refund", payment_id=g.payment(o)["id"], amount=o["shipping_fee"], reason="late_delivery"),
        ],
        "tags": ["refund", "late_delivery"],
    }


def t_return_by_date(g: Generator) -> dict:
    o = g.pick_order(lambda o: bool(g.returnable_items(o)))
    c = g.customer(o)
    it = g.rng.choice(g.returnable_items(o))
    reason, phrase = g.return_reason()
    # Delivered on a day no other order of this customer was delivered, so the date identifies it.
    taken = {x["delivered_on"] for x in g.world["orders"] if x["customer_id"] == c["id"] and x["id"] != o["id"]}
    ago = next(d for d in g.rng.sample(range(2, 27), 25) if (g.today - dt.timedelta(days=d)).isoformat() not in taken)
    patch = g.restate(o, "delivered", delivered_ago=ago)
    day = g.delivered_on(patch, o)
    qty = it["quantity"]
    what = f"the {g.label(it)}" if qty == 1 else f"all {qty} of the {g.label(it)}"
    return {
        "instruction": f"{g.hello(c)} I want to return {what} from the order that was delivered on {day}: {phrase}. "
        f"I don't have the order number at hand.",
        "user": g.user(
            c,
            f"Your email is {c['email']}. You want to return {what} from the order delivered on {day} "
            f"(you don't know the order number) {said(phrase)}.",
        ),
        "patch": patch,
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call("get_customer", customer_id=c["id"]),
            call("get_order", order_id=o["id"]),
            call("create_return", order_id=o["id"], order_item_ids=[it["id"]], quantities=[qty], reason=reason),
        ],
        "tags": ["return", reason],
    }


# -- policy_refusal --------------------------------------------------------------------------------


def _refusal(g: Generator, c: dict, o: dict | None, body: str) -> list[dict]:
    args: dict[str, Any] = {"customer_id": c["id"], "body": body}
    if o is not None:
        args["order_id"] = o["id"]
    return [call("find_customer_by_email", email=c["email"]), call("add_note", **args)]


def t_cancel_shipped(g: Generator) -> dict:
    o = g.pick_order()
    c = g.customer(o)
    status = g.rng.choice(["shipped", "delivered"])
    _, phrase = g.cancel_reason()
    return {
        "instruction": f"{g.hello(c)} Please cancel order #{o['id']}, {phrase}.",
        "user": g.user(
            c,
            f"Your email is {c['email']}. You want order #{o['id']} cancelled {said(phrase)}. "
            f"You don't know it has already {'shipped' if status == 'shipped' else 'been delivered'}.",
        ),
        "patch": g.restate(o, status, delivered_ago=g.rng.randint(1, 5) if status == "delivered" else None),
        "gold": _refusal(g, c, o, f"Customer asked to cancel order #{o['id']}; refused because it is already {status}."),
        "checks": [
            {"sql": f"SELECT status FROM orders WHERE id = {o['id']}", "expect": [[status]]},
            {"sql": refunds_of_order(o["id"]), "expect": [[0]]},
        ],
        "tags": ["cancel", "refusal", status],
    }


def t_return_expired(g: Generator) -> dict:
    o = g.pick_order(lambda o: bool(g.returnable_items(o)))
    c = g.customer(o)
    it = g.rng.choice(g.returnable_items(o))
    _, phrase = g.return_reason(["changed_mind", "wrong_size", "not_as_described"])
    ago = g.rng.randint(RETURN_WINDOW + 1, 75)
    return {
        "instruction": f"{g.hello(c)} I'd like to return the {g.label(it)} from order #{o['id']}: {phrase}.",
        "user": g.user(
            c,
            f"Your email is {c['email']}. You want to return the {g.label(it)} from order #{o['id']} {said(phrase)}. "
            f"It was delivered about {ago} days ago; you accept a refusal without asking for a manager.",
        ),
        "patch": g.restate(o, "delivered", delivered_ago=ago),
        "gold": _refusal(
            g, c, o, f"Customer asked to return the {g.label(it)} from order #{o['id']}; refused: delivered {ago} days ago, past the 30-day window."
        ),
        "rubrics": [rubric("Does the reply give the reason for the refusal: the return window of {} has passed?", "30 days")],
        "gold_reply": f"I am sorry, I cannot accept this return: the order was delivered {ago} days ago, and returns are accepted within 30 days.",
        "tags": ["return", "refusal", "window"],
    }


def t_return_final_sale(g: Generator) -> dict:
    o = g.pick_order(lambda o: any(not g.product(it)["returnable"] for it in g.items[o["id"]]))
    c = g.customer(o)
    it = next(it for it in g.items[o["id"]] if not g.product(it)["returnable"])
    _, phrase = g.return_reason(["changed_mind", "not_as_described"])
    return {
        "instruction": f"{g.hello(c)} I want to send back the {g.label(it)} from order #{o['id']}: {phrase}.",
        "user": g.user(
            c, f"Your email is {c['email']}. You want to return the {g.label(it)} from order #{o['id']} {said(phrase)}. You accept a refusal."
        ),
        "patch": g.restate(o, "delivered", delivered_ago=g.rng.randint(2, 20)),
        "gold": _refusal(g, c, o, f"Customer asked to return the {g.label(it)} from order #{o['id']}; refused: beauty products are final sale."),
        "tags": ["return", "refusal", "final_sale"],
    }


def t_refund_over_limit(g: Generator) -> dict:
    def big(it: dict) -> bool:
        return cents(it["unit_price"]) * it["quantity"] > REFUND_LIMIT * 100

    o = g.pick_order(lambda o: any(big(it) for it in g.items[o["id"]]))
    c = g.customer(o)
    it = g.rng.choice([it for it in g.items[o["id"]] if big(it)])
    n = it["quantity"] if cents(it["unit_price"]) <= REFUND_LIMIT * 100 else g.rng.randint(1, it["quantity"])
    amount = dollars(n * cents(it["unit_price"]))
    text = _damage_text(g, it, n)
    return {
        "instruction": f"{g.hello(c)} Order #{o['id']} arrived and {text}. Please refund me for the damage.",
        "user": g.user(c, f"Your email is {c['email']}. In order #{o['id']}, {text}. You want a refund of {money(amount)}."),
        "patch": g.restate(o, "delivered", delivered_ago=g.rng.randint(1, 20)),
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call("get_order", order_id=o["id"]),
            call(
                "escalate",
                customer_id=c["id"],
                category="refund_approval",
                reason=f"Damaged {g.label(it)} in order #{o['id']}: refund of {money(amount)} exceeds the $500 agent limit.",
                order_id=o["id"],
            ),
        ],
        "checks": [{"sql": refunds_of_order(o["id"]), "expect": [[0]]}],
        "tags": ["refund", "escalation", "over_limit"],
    }


def t_account_security(g: Generator) -> dict:
    o = g.pick_order()
    c = g.customer(o)
    status = g.rng.choice(["pending", "processing"])
    return {
        "instruction": f"{g.hello(c)} There's an order #{o['id']} on my account that I never placed! Someone must be using my account. "
        f"Cancel it right now, please.",
        "user": g.user(
            c, f"Your email is {c['email']}. Order #{o['id']} on your account was not placed by you; you suspect someone uses your account."
        ),
        "patch": g.restate(o, status),
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call(
                "escalate",
                customer_id=c["id"],
                category="account_security",
                reason=f"Customer says they did not place order #{o['id']}; possible account takeover.",
                order_id=o["id"],
            ),
        ],
        "checks": [{"sql": f"SELECT status FROM orders WHERE id = {o['id']}", "expect": [[status]]}],
        "tags": ["security", "escalation"],
    }


def t_supervisor_request(g: Generator) -> dict:
    o = g.pick_order(lambda o: bool(g.returnable_items(o)))
    c = g.customer(o)
    it = g.rng.choice(g.returnable_items(o))
    ago = g.rng.randint(RETURN_WINDOW + 3, 60)
    return {
        "instruction": f"{g.hello(c)} I know it's been more than 30 days, but I want to return the {g.label(it)} from order #{o['id']}. "
        f"I've been a loyal customer. If you can't do it, I want a manager to approve an exception.",
        "user": g.user(
            c,
            f"Your email is {c['email']}. You want to return the {g.label(it)} from order #{o['id']}, delivered {ago} days ago. "
            f"If refused, you insist on a supervisor deciding.",
        ),
        "patch": g.restate(o, "delivered", delivered_ago=ago),
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call(
                "escalate",
                customer_id=c["id"],
                category="policy_exception",
                reason=f"Customer asks for an exception to return the {g.label(it)} from order #{o['id']}, delivered {ago} days ago.",
                order_id=o["id"],
            ),
        ],
        "tags": ["return", "escalation", "exception"],
    }


def t_address_after_shipment(g: Generator) -> dict:
    o = g.pick_order()
    c = g.customer(o)
    a = g.address()
    return {
        "instruction": f"{g.hello(c)} Please change the delivery address of order #{o['id']} to {g.address_text(a)}.",
        "user": g.user(c, f"Your email is {c['email']}. You want order #{o['id']} delivered to {g.address_text(a)}. You accept a refusal."),
        "patch": g.restate(o, "shipped"),
        "gold": _refusal(g, c, o, f"Customer asked to re-address order #{o['id']}; refused because it has already shipped."),
        "tags": ["address", "refusal"],
    }


def t_exchange_out_of_stock(g: Generator) -> dict:
    o = g.pick_order(lambda o: any(len(g.variants[g.product(it)["name"]]) > 1 for it in g.items[o["id"]]))
    c = g.customer(o)
    it = g.rng.choice(g.items[o["id"]])
    old = g.product(it)
    new = g.rng.choice([v for v in g.variants[old["name"]] if v["id"] != old["id"]])
    patch = g.restate(o, g.rng.choice(["pending", "processing"]))
    patch.add("products", {"id": new["id"], "stock": 0})
    return {
        "instruction": f"{g.hello(c)} Can you change the {old['name']} in order #{o['id']} from {old['variant']} to {new['variant']}?",
        "user": g.user(
            c,
            f"Your email is {c['email']}. You want the {old['name']} in order #{o['id']} in {new['variant']} instead of "
            f"{old['variant']}. If it is unavailable you keep the original.",
        ),
        "patch": patch,
        "gold": _refusal(g, c, o, f"Customer asked to exchange the {old['name']} in order #{o['id']} for {new['variant']}; refused: out of stock."),
        "tags": ["exchange", "refusal", "out_of_stock"],
    }


def t_foreign_order(g: Generator) -> dict:
    caller_order, other = g.pick_order(), g.pick_order()
    while other["customer_id"] == caller_order["customer_id"]:
        other = g.pick_order()
    c = g.customer(caller_order)
    return {
        "instruction": f"{g.hello(c)} Please cancel order #{other['id']}.",
        "user": g.user(c, f"Your email is {c['email']}. You want order #{other['id']} cancelled (you mistyped: it is not yours)."),
        "patch": g.restate(other, "pending"),
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call("get_order", order_id=other["id"]),
            call("add_note", customer_id=c["id"], body=f"Customer asked to cancel order #{other['id']}, which is not on their account; refused."),
        ],
        "checks": [{"sql": f"SELECT status FROM orders WHERE id = {other['id']}", "expect": [["pending"]]}],
        "tags": ["cancel", "refusal", "identity"],
    }


# -- needs_user_info -------------------------------------------------------------------------------


def t_cancel_which_order(g: Generator) -> dict:
    a, b = g.pick_orders_of_one_customer(2)
    c = g.customer(a)
    reason, phrase = g.cancel_reason()
    patch = g.restate(a, g.rng.choice(["pending", "processing"])).extend(g.restate(b, g.rng.choice(["pending", "processing"])))
    first = g.label(g.items[a["id"]][0])
    return {
        "instruction": f"{g.hello(c)} I need to cancel one of my orders.",
        "user": g.user(
            c,
            f"Your email is {c['email']}. You have two open orders; you want only order #{a['id']} (the one with the {first}) "
            f"cancelled {said(phrase)}. Order #{b['id']} stays.",
            [f"It's order #{a['id']}, the one with the {first}. {phrase[0].upper()}{phrase[1:]}."],
        ),
        "patch": patch,
        "gold": [call("cancel_order", order_id=a["id"], reason=reason)],
        "tags": ["cancel", "ask_order"],
    }


def t_address_missing(g: Generator) -> dict:
    o = g.pick_order()
    c = g.customer(o)
    a = g.address()
    return {
        "instruction": f"{g.hello(c)} I need to change the shipping address on order #{o['id']}.",
        "user": g.user(
            c, f"Your email is {c['email']}. Order #{o['id']} should go to {g.address_text(a)}.", [f"Please send it to {g.address_text(a)}."]
        ),
        "patch": g.restate(o, g.rng.choice(["pending", "processing"])),
        "gold": [call("update_shipping_address", **g.address_args(o["id"], a))],
        "tags": ["address", "ask_address"],
    }


def t_return_which_items(g: Generator) -> dict:
    o = g.pick_order(lambda o: len(g.returnable_items(o)) >= 2)
    c = g.customer(o)
    it = g.rng.choice(g.returnable_items(o))
    n = g.rng.randint(1, it["quantity"])
    reason, phrase = g.return_reason()
    reply = f"The {g.label(it)}" + (f", {n} of the {it['quantity']}" if it["quantity"] > 1 else "") + f". {phrase[0].upper()}{phrase[1:]}."
    return {
        "instruction": f"{g.hello(c)} I'd like to return something from order #{o['id']}.",
        "user": g.user(
            c,
            f"Your email is {c['email']}. From order #{o['id']} you want to return {units(n)} of the {g.label(it)} {said(phrase)}; nothing else.",
            [reply],
        ),
        "patch": g.restate(o, "delivered", delivered_ago=g.rng.randint(1, 25)),
        "gold": [
            call("get_order", order_id=o["id"]),
            call("create_return", order_id=o["id"], order_item_ids=[it["id"]], quantities=[n], reason=reason),
        ],
        "tags": ["return", "ask_items"],
    }


def t_missing_package_which_order(g: Generator) -> dict:
    a, b = g.pick_orders_of_one_customer(2)
    c = g.customer(a)
    days = g.rng.sample(range(2, 12), 2)
    patch = g.restate(a, "delivered", delivered_ago=days[0]).extend(g.restate(b, "delivered", delivered_ago=days[1]))
    day = g.delivered_on(patch, a)
    return {
        "instruction": f"{g.hello(c)} One of my packages was marked as delivered but never showed up.",
        "user": g.user(
            c,
            f"Your email is {c['email']}. Order #{a['id']} (marked delivered on {day}) never arrived; order #{b['id']} arrived fine.",
            [f"It's order #{a['id']}, marked delivered on {day}."],
        ),
        "patch": patch,
        "gold": [call("find_customer_by_email", email=c["email"]), _missing_package(g, c, a, day)],
        "tags": ["ticket", "delivery", "ask_order"],
    }


# -- collateral_trap -------------------------------------------------------------------------------


def t_cancel_one_of_two(g: Generator) -> dict:
    a, b = g.pick_orders_of_one_customer(2)
    c = g.customer(a)
    reason, phrase = g.cancel_reason()
    patch = g.restate(a, g.rng.choice(["pending", "processing"])).extend(g.restate(b, g.rng.choice(["pending", "processing"])))
    return {
        "instruction": f"{g.hello(c)} I have two orders on the way, #{a['id']} and #{b['id']}. Please cancel #{a['id']}: {phrase}. "
        f"I still want #{b['id']}.",
        "user": g.user(c, f"Your email is {c['email']}. Cancel only order #{a['id']} {said(phrase)}; keep order #{b['id']}."),
        "patch": patch,
        "gold": [call("cancel_order", order_id=a["id"], reason=reason)],
        "checks": [
            {
                "sql": f"SELECT status FROM orders WHERE id = {b['id']}",
                "expect": [[r["status"] for r in patch.tables["orders"] if r["id"] == b["id"]]],
            }
        ],
        "tags": ["cancel", "trap"],
    }


def t_partial_return(g: Generator) -> dict:
    o = g.pick_order(lambda o: any(it["quantity"] >= 2 for it in g.returnable_items(o)))
    c = g.customer(o)
    it = g.rng.choice([it for it in g.returnable_items(o) if it["quantity"] >= 2])
    n = g.rng.randint(1, it["quantity"] - 1)
    reason, phrase = g.return_reason(["changed_mind", "wrong_size", "not_as_described"])
    keep = it["quantity"] - n
    return {
        "instruction": f"{g.hello(c)} From order #{o['id']} I'd like to return {n} of the {it['quantity']} {g.label(it)}: {phrase}. "
        f"I'm keeping the other {keep} and everything else in the order.",
        "user": g.user(
            c, f"Your email is {c['email']}. Return exactly {units(n)} of the {g.label(it)} from order #{o['id']} {said(phrase)}; keep the rest."
        ),
        "patch": g.restate(o, "delivered", delivered_ago=g.rng.randint(1, 28)),
        "gold": [
            call("get_order", order_id=o["id"]),
            call("create_return", order_id=o["id"], order_item_ids=[it["id"]], quantities=[n], reason=reason),
        ],
        "tags": ["return", "trap", "partial"],
    }


def t_return_without_refund(g: Generator) -> dict:
    o = g.pick_order(lambda o: bool(g.returnable_items(o)))
    c = g.customer(o)
    its = g.returnable_items(o)
    chosen = sorted(g.rng.sample(its, min(len(its), g.rng.randint(1, 2))), key=lambda it: it["id"])
    reason, phrase = g.return_reason()
    names = " and the ".join(g.label(it) for it in chosen)
    return {
        "instruction": f"{g.hello(c)} I'm returning the {names} from order #{o['id']} ({phrase}). "
        f"Please refund my money right away, I don't want to wait for the parcel to reach you.",
        "user": g.user(
            c,
            f"Your email is {c['email']}. You return the {names} (all units) from order #{o['id']} {said(phrase)}, "
            f"and would like the refund immediately.",
        ),
        "patch": g.restate(o, "delivered", delivered_ago=g.rng.randint(1, 28)),
        "gold": [
            call("get_order", order_id=o["id"]),
            call(
                "create_return",
                order_id=o["id"],
                order_item_ids=[it["id"] for it in chosen],
                quantities=[it["quantity"] for it in chosen],
                reason=reason,
            ),
        ],
        "checks": [{"sql": refunds_of_order(o["id"]), "expect": [[0]]}],
        "tags": ["return", "trap", "no_refund"],
    }


def t_missing_package_no_refund(g: Generator) -> dict:
    o = g.pick_order()
    c = g.customer(o)
    patch = g.restate(o, "delivered", delivered_ago=g.rng.randint(2, 10))
    day = g.delivered_on(patch, o)
    return {
        "instruction": f"{g.hello(c)} Order #{o['id']} was marked delivered on {day} but I never got it. Just refund me the full amount, please.",
        "user": g.user(c, f"Your email is {c['email']}. Order #{o['id']} never arrived (marked delivered {day}); you would like a refund."),
        "patch": patch,
        "gold": [call("find_customer_by_email", email=c["email"]), _missing_package(g, c, o, day)],
        "checks": [{"sql": refunds_of_order(o["id"]), "expect": [[0]]}],
        "tags": ["ticket", "delivery", "trap", "no_refund"],
    }


def t_resolve_one_of_two_tickets(g: Generator) -> dict:
    a, b = g.pick_orders_of_one_customer(2)
    c = g.customer(a)
    t1 = g.new_ticket(a, g.rng.choice(["delivery", "product_issue"]), "open", g.rng.randint(3, 15))
    t2 = g.new_ticket(b, g.rng.choice(["billing", "delivery"]), "open", g.rng.randint(3, 15))
    patch = Patch()
    patch.add("support_tickets", t1)
    patch.add("support_tickets", t2)
    return {
        "instruction": f"{g.hello(c)} Ticket #{t1['id']} is sorted now, thanks, you can mark it resolved. "
        f"Ticket #{t2['id']} is still a problem though.",
        "user": g.user(c, f"Your email is {c['email']}. Ticket #{t1['id']} is fixed; ticket #{t2['id']} is not and must stay open."),
        "patch": patch,
        "gold": [call("update_ticket_status", ticket_id=t1["id"], status="resolved")],
        "checks": [{"sql": f"SELECT status FROM support_tickets WHERE id = {t2['id']}", "expect": [["open"]]}],
        "tags": ["ticket", "trap"],
    }


# -- multi_step ------------------------------------------------------------------------------------


def t_cancel_and_readdress(g: Generator) -> dict:
    a, b = g.pick_orders_of_one_customer(2)
    c = g.customer(a)
    reason, phrase = g.cancel_reason()
    new = g.address()
    patch = g.restate(a, g.rng.choice(["pending", "processing"])).extend(g.restate(b, g.rng.choice(["pending", "processing"])))
    return {
        "instruction": f"{g.hello(c)} Two things: please cancel order #{a['id']} ({phrase}), and send order #{b['id']} to "
        f"{g.address_text(new)} instead.",
        "user": g.user(
            c, f"Your email is {c['email']}. Cancel order #{a['id']} {said(phrase)}; re-address order #{b['id']} to {g.address_text(new)}."
        ),
        "patch": patch,
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call("get_customer", customer_id=c["id"]),
            call("get_order", order_id=a["id"]),
            call("cancel_order", order_id=a["id"], reason=reason),
            call("get_order", order_id=b["id"]),
            call("update_shipping_address", **g.address_args(b["id"], new)),
        ],
        "tags": ["cancel", "address"],
    }


def t_exchange_and_readdress(g: Generator) -> dict:
    o = g.pick_order(lambda o: any(g.other_variants_in_stock(it) for it in g.items[o["id"]]))
    c = g.customer(o)
    it = g.rng.choice([it for it in g.items[o["id"]] if g.other_variants_in_stock(it)])
    old, new = g.product(it), g.rng.choice(g.other_variants_in_stock(it))
    addr = g.address()
    return {
        "instruction": f"{g.hello(c)} For order #{o['id']}: please switch the {old['name']} from {old['variant']} to {new['variant']}, "
        f"and ship the order to {g.address_text(addr)}.",
        "user": g.user(
            c, f"Your email is {c['email']}. In order #{o['id']}, change the {old['name']} to {new['variant']} and ship to {g.address_text(addr)}."
        ),
        "patch": g.restate(o, g.rng.choice(["pending", "processing"])),
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call("get_order", order_id=o["id"]),
            call("search_products", query=old["name"]),
            call("exchange_item", order_item_id=it["id"], new_product_id=new["id"]),
            call("update_shipping_address", **g.address_args(o["id"], addr)),
        ],
        "tags": ["exchange", "address"],
    }


def t_return_and_damage(g: Generator) -> dict:
    def fits(o: dict) -> bool:
        its = g.returnable_items(o)
        return len(its) >= 2 and any(cents(it["unit_price"]) <= REFUND_LIMIT * 100 for it in its)

    o = g.pick_order(fits)
    c = g.customer(o)
    damaged = g.rng.choice([it for it in g.returnable_items(o) if cents(it["unit_price"]) <= REFUND_LIMIT * 100])
    back = g.rng.choice([it for it in g.returnable_items(o) if it["id"] != damaged["id"]])
    n = 1
    amount = dollars(cents(damaged["unit_price"]))
    reason, phrase = g.return_reason(["changed_mind", "wrong_size", "not_as_described"])
    text = _damage_text(g, damaged, n)
    qty = back["quantity"]
    return {
        "instruction": f"{g.hello(c)} About order #{o['id']}: {text}, so I'd like a refund for it. Also I want to return "
        f"{'the' if qty == 1 else f'all {qty} of the'} {g.label(back)}: {phrase}.",
        "user": g.user(
            c,
            f"Your email is {c['email']}. In order #{o['id']}, {text} (refund for one unit); you also return all of the {g.label(back)} {said(phrase)}.",
        ),
        "patch": g.restate(o, "delivered", delivered_ago=g.rng.randint(1, 25)),
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call("get_order", order_id=o["id"]),
            call("issue_refund", payment_id=g.payment(o)["id"], amount=amount, reason="damaged_item"),
            call("create_return", order_id=o["id"], order_item_ids=[back["id"]], quantities=[qty], reason=reason),
        ],
        "tags": ["refund", "return"],
    }


def t_cancel_two_one_shipped(g: Generator) -> dict:
    a, b = g.pick_orders_of_one_customer(2)
    c = g.customer(a)
    reason, phrase = g.cancel_reason()
    patch = g.restate(a, g.rng.choice(["pending", "processing"])).extend(g.restate(b, "shipped"))
    return {
        "instruction": f"{g.hello(c)} Please cancel both of my orders, #{a['id']} and #{b['id']}: {phrase}.",
        "user": g.user(c, f"Your email is {c['email']}. You want orders #{a['id']} and #{b['id']} cancelled {said(phrase)}."),
        "patch": patch,
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call("get_order", order_id=a["id"]),
            call("cancel_order", order_id=a["id"], reason=reason),
            call("get_order", order_id=b["id"]),
            call(
                "add_note",
                customer_id=c["id"],
                order_id=b["id"],
                body=f"Customer asked to cancel order #{b['id']}; refused because it has already shipped.",
            ),
        ],
        "checks": [{"sql": f"SELECT status FROM orders WHERE id = {b['id']}", "expect": [["shipped"]]}],
        "tags": ["cancel", "refusal"],
    }


def t_account_overhaul(g: Generator) -> dict:
    a, b, r = g.pick_orders_of_one_customer(3, lambda o: bool(g.returnable_items(o)))
    c = g.customer(a)
    reason, phrase = g.cancel_reason()
    new = g.address()
    it = g.rng.choice(g.returnable_items(r))
    ret_reason, ret_phrase = g.return_reason()
    ticket = g.new_ticket(r, "delivery", "open", g.rng.randint(3, 10))
    patch = g.restate(a, "pending").extend(g.restate(b, "processing")).extend(g.restate(r, "delivered", delivered_ago=g.rng.randint(3, 20)))
    patch.add("support_tickets", ticket)
    qty = it["quantity"]
    return {
        "instruction": f"{g.hello(c)} I have a few things. Cancel order #{a['id']} ({phrase}). Ship order #{b['id']} to "
        f"{g.address_text(new)}. I'm returning {'the' if qty == 1 else f'all {qty} of the'} {g.label(it)} from order #{r['id']} "
        f"({ret_phrase}). And ticket #{ticket['id']} about that delivery is resolved now.",
        "user": g.user(
            c,
            f"Your email is {c['email']}. Cancel #{a['id']} {said(phrase)}; re-address #{b['id']} to {g.address_text(new)}; "
            f"return all of the {g.label(it)} from #{r['id']} {said(ret_phrase)}; ticket #{ticket['id']} is resolved.",
        ),
        "patch": patch,
        "gold": [
            call("find_customer_by_email", email=c["email"]),
            call("get_customer", customer_id=c["id"]),
            call("cancel_order", order_id=a["id"], reason=reason),
            call("update_shipping_address", **g.address_args(b["id"], new)),
            call("get_order", order_id=r["id"]),
            call("create_return", order_id=r["id"], order_item_ids=[it["id"]], quantities=[qty], reason=ret_reason),
            call("get_ticket", ticket_id=ticket["id"]),
            call("update_ticket_status", ticket_id=ticket["id"], status="resolved"),
        ],
        "tags": ["cancel", "address", "return", "ticket"],
    }


# (family, template function, number of tasks)
TEMPLATES: list[tuple[str, Callable[[Generator], dict], int]] = [
    ("single_write", t_cancel_open_order, 14),
    ("single_write", t_change_address, 12),
    ("single_write", t_ticket_status, 12),
    ("single_write", t_missing_package, 10),
    ("single_write", t_safety_ticket, 6),
    ("lookup_then_act", t_exchange_variant, 10),
    ("lookup_then_act", t_saved_address, 8),
    ("lookup_then_act", t_damaged_refund, 10),
    ("lookup_then_act", t_price_adjustment, 8),
    ("lookup_then_act", t_late_delivery_fee, 6),
    ("lookup_then_act", t_return_by_date, 8),
    ("policy_refusal", t_cancel_shipped, 7),
    ("policy_refusal", t_return_expired, 7),
    ("policy_refusal", t_return_final_sale, 5),
    ("policy_refusal", t_refund_over_limit, 6),
    ("policy_refusal", t_account_security, 5),
    ("policy_refusal", t_supervisor_request, 4),
    ("policy_refusal", t_address_after_shipment, 5),
    ("policy_refusal", t_exchange_out_of_stock, 4),
    ("policy_refusal", t_foreign_order, 4),
    ("needs_user_info", t_cancel_which_order, 6),
    ("needs_user_info", t_address_missing, 6),
    ("needs_user_info", t_return_which_items, 6),
    ("needs_user_info", t_missing_package_which_order, 5),
    ("collateral_trap", t_cancel_one_of_two, 6),
    ("collateral_trap", t_partial_return, 6),
    ("collateral_trap", t_return_without_refund, 5),
    ("collateral_trap", t_missing_package_no_refund, 4),
    ("collateral_trap", t_resolve_one_of_two_tickets, 4),
    ("multi_step", t_cancel_and_readdress, 5),
    ("multi_step", t_exchange_and_readdress, 5),
    ("multi_step", t_return_and_damage, 5),
    ("multi_step", t_cancel_two_one_shipped, 5),
    ("multi_step", t_account_overhaul, 5),
]


def generate(world: dict[str, list[dict]], today: dt.date, rng: random.Random) -> list[dict]:
    """All retail tasks, in template order, ids `retail-<template>-<nnn>`."""
    return _kit.generate(HERE, TEMPLATES, Generator(world, today, rng))
