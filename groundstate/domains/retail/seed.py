"""Deterministic seed for the retail world.

`generate(rng, scale)` returns rows per table in foreign-key order. Every draw comes from `rng`, and
dates are computed from the fixed business date `TODAY`, so the same seed gives the same world on
every machine. `scale` multiplies the number of customers and of everything that hangs off them
(orders, items, payments, returns, tickets); the product catalogue is fixed.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

from groundstate.domains._kit import People, Rows, business_date, group_by, iso, phone, round_money, scaled

TODAY = business_date(Path(__file__).parent)

# (city, state, first three digits of its zip codes)
CITIES = [
    ("Seattle", "WA", "981"),
    ("Portland", "OR", "972"),
    ("San Francisco", "CA", "941"),
    ("Los Angeles", "CA", "900"),
    ("San Diego", "CA", "921"),
    ("Phoenix", "AZ", "850"),
    ("Denver", "CO", "802"),
    ("Austin", "TX", "787"),
    ("Dallas", "TX", "752"),
    ("Houston", "TX", "770"),
    ("Chicago", "IL", "606"),
    ("Minneapolis", "MN", "554"),
    ("Madison", "WI", "537"),
    ("Detroit", "MI", "482"),
    ("Columbus", "OH", "432"),
    ("Nashville", "TN", "372"),
    ("Atlanta", "GA", "303"),
    ("Miami", "FL", "331"),
    ("Orlando", "FL", "328"),
    ("Charlotte", "NC", "282"),
    ("Raleigh", "NC", "276"),
    ("Richmond", "VA", "232"),
    ("Baltimore", "MD", "212"),
    ("Philadelphia", "PA", "191"),
    ("Pittsburgh", "PA", "152"),
    ("Newark", "NJ", "071"),
    ("Brooklyn", "NY", "112"),
    ("Buffalo", "NY", "142"),
    ("Boston", "MA", "021"),
    ("Providence", "RI", "029"),
    ("Burlington", "VT", "054"),
    ("Salt Lake City", "UT", "841"),
    ("Boise", "ID", "837"),
    ("Albuquerque", "NM", "871"),
    ("Kansas City", "MO", "641"),
    ("Omaha", "NE", "681"),
    ("New Orleans", "LA", "701"),
    ("Louisville", "KY", "402"),
    ("Indianapolis", "IN", "462"),
    ("Anchorage", "AK", "995"),
]
STREET_NAMES = [
    "Maple",
    "Oak",
    "Cedar",
    "Pine",
    "Elm",
    "Willow",
    "Birch",
    "Lake",
    "Hill",
    "River",
    "Sunset",
    "Park",
    "Washington",
    "Lincoln",
    "Jefferson",
    "Madison",
    "Franklin",
    "Highland",
    "Meadow",
    "Harbor",
]
STREET_TYPES = ["St", "Ave", "Rd", "Blvd", "Ln", "Dr", "Ct", "Way"]

# (name, category, price, variants). Variants of one product share its price, so a variant swap is
# money-neutral. Beauty products are final sale (not returnable).
CATALOGUE = [
    ("Wireless Earbuds", "electronics", 79.99, ["Black", "White", "Blue"]),
    ("Noise-Cancelling Headphones", "electronics", 249.00, ["Black", "Silver", "Midnight Blue"]),
    ("Smartwatch Series 5", "electronics", 329.00, ["40mm Black", "44mm Black", "44mm Silver"]),
    ("Laptop Pro 14", "electronics", 1299.00, ["Space Gray", "Silver", "Graphite"]),
    ("4K Monitor 27in", "electronics", 389.99, ["Black", "White", "Silver"]),
    ("Bluetooth Speaker", "electronics", 59.99, ["Red", "Black", "Teal"]),
    ("Tablet 11", "electronics", 549.00, ["Gray", "Silver", "Rose"]),
    ("Mirrorless Camera", "electronics", 899.00, ["Black", "Silver", "Olive"]),
    ("Linen Sheet Set", "home", 119.00, ["White", "Sand", "Slate"]),
    ("Ceramic Table Lamp", "home", 74.50, ["Ivory", "Sage", "Charcoal"]),
    ("Wool Throw Blanket", "home", 89.00, ["Oatmeal", "Forest", "Rust"]),
    ("Robot Vacuum", "home", 429.00, ["Black", "White", "Gray"]),
    ("Air Purifier", "home", 199.99, ["White", "Black", "Gray"]),
    ("Space Heater", "home", 64.99, ["White", "Black", "Gray"]),
    ("Down Comforter", "home", 159.00, ["Light", "All-Season", "Extra Warm"]),
    ("Chef's Knife 8in", "kitchen", 89.95, ["Walnut Handle", "Black Handle", "Olive Handle"]),
    ("Cast Iron Skillet 12in", "kitchen", 44.99, ["Black", "Red Enamel", "Blue Enamel"]),
    ("Espresso Machine", "kitchen", 649.00, ["Stainless", "Black", "Cream"]),
    ("Stoneware Mug Set", "kitchen", 34.00, ["Speckled White", "Navy", "Terracotta"]),
    ("Blender Pro", "kitchen", 159.00, ["Black", "Red", "Silver"]),
    ("Glass Food Containers", "kitchen", 39.99, ["Blue Lids", "Gray Lids", "Green Lids"]),
    ("Merino Crew Sweater", "apparel", 98.00, ["Size S", "Size M", "Size L"]),
    ("Rain Shell Jacket", "apparel", 165.00, ["Size S", "Size M", "Size L"]),
    ("Organic Cotton Tee", "apparel", 24.00, ["Size S", "Size M", "Size L"]),
    ("Slim Chino Pants", "apparel", 68.00, ["30x30", "32x32", "34x32"]),
    ("Down Parka", "apparel", 289.00, ["Size S", "Size M", "Size L"]),
    ("Trail Running Shoe", "footwear", 129.95, ["Size 8", "Size 9", "Size 10"]),
    ("Leather Chelsea Boot", "footwear", 210.00, ["Size 8", "Size 9", "Size 10"]),
    ("Canvas Sneaker", "footwear", 55.00, ["Size 7", "Size 8", "Size 9"]),
    ("Wool Slipper", "footwear", 49.00, ["Size S", "Size M", "Size L"]),
    ("2-Person Tent", "outdoors", 239.00, ["Green", "Orange", "Gray"]),
    ("Down Sleeping Bag", "outdoors", 189.00, ["Regular", "Long", "Wide"]),
    ("Trekking Poles", "outdoors", 79.00, ["Black", "Blue", "Red"]),
    ("Insulated Water Bottle 32oz", "outdoors", 32.00, ["Black", "Sage", "Coral"]),
    ("Hiking Daypack 24L", "outdoors", 84.99, ["Black", "Olive", "Navy"]),
    ("Wooden Train Set", "toys", 58.00, ["Natural", "Painted", "Starter"]),
    ("Building Blocks 500pc", "toys", 42.00, ["Classic", "Space", "City"]),
    ("Plush Bear", "toys", 22.50, ["Brown", "White", "Pink"]),
    ("Vitamin C Serum", "beauty", 36.00, ["Original", "Fragrance-Free", "Sensitive"]),
    ("Hair Dryer Pro", "beauty", 179.00, ["Black", "Rose Gold", "White"]),
    ("Electric Toothbrush", "beauty", 89.00, ["White", "Black", "Pink"]),
]

FREE_SHIPPING_FROM = 50.00
SHIPPING_FEE = 5.99

TICKET_SUBJECTS = {
    "delivery": ["Package not received", "Delivery is late", "Box arrived open"],
    "product_issue": ["Item stopped working", "Missing part in the box", "Question about warranty"],
    "billing": ["Charged twice", "Gift card balance looks wrong", "Receipt request"],
    "account": ["Cannot log in", "Update my phone number", "Close my account"],
    "other": ["Feedback on the website", "Question about a product", "Bulk order question"],
}
NOTE_BODIES = [
    "Customer asked about delivery times; explained standard shipping takes 3-6 business days.",
    "Customer asked whether the item comes in other colours; pointed to the variants in the catalogue.",
    "Called to confirm the shipping address; no change needed.",
    "Asked for an invoice copy; sent it to the email on file.",
    "Asked about the return policy; explained the 30-day window.",
]
ESCALATION_REASONS = {
    "refund_approval": "Damaged item worth more than the $500 agent limit; needs supervisor approval for the refund.",
    "account_security": "Customer reports an order they did not place; possible account takeover.",
    "policy_exception": "Customer asks for a return after the 30-day window and wants a supervisor to decide.",
}


def generate(rng: random.Random, scale: float = 1.0) -> Rows:
    """The world's rows per table, in foreign-key insertion order; every column present in every row."""
    customers = _customers(rng, scaled(300, scale))
    addresses = _addresses(rng, customers)
    products = _products(rng)
    orders, items, payments = _orders(rng, scaled(700, scale), customers, addresses, products)
    returns, return_items, refunds = _returns_and_refunds(rng, orders, items, payments, products)
    tickets = _tickets(rng, scaled(60, scale), customers, orders)
    notes = _notes(rng, scaled(40, scale), customers, orders)
    escalations = _escalations(rng, scaled(8, scale), customers, orders)
    return {
        "customers": customers,
        "addresses": addresses,
        "products": products,
        "orders": orders,
        "order_items": items,
        "payments": payments,
        "returns": returns,
        "return_items": return_items,
        "refunds": refunds,
        "support_tickets": tickets,
        "notes": notes,
        "escalations": escalations,
    }


def _customers(rng: random.Random, n: int) -> list[dict]:
    rows, people = [], People(rng)
    for i in range(1, n + 1):
        first, last, email = people.draw()
        rows.append(
            {
                "id": i,
                "first_name": first,
                "last_name": last,
                "email": email,
                "phone": phone(rng),
                "tier": rng.choices(["standard", "silver", "gold"], weights=[70, 20, 10])[0],
                "joined_on": iso(dt.date(2021, 1, 1) + dt.timedelta(days=rng.randint(0, 1200))),
            }
        )
    return rows


def random_address(rng: random.Random) -> dict:
    """A plausible US street address (also used by the task generator for new addresses)."""
    city, state, zip3 = rng.choice(CITIES)
    street = f"{rng.randint(10, 9899)} {rng.choice(STREET_NAMES)} {rng.choice(STREET_TYPES)}"
    if rng.random() < 0.2:
        street += f" Apt {rng.randint(1, 40)}"
    return {"street": street, "city": city, "state": state, "zip": f"{zip3}{rng.randint(0, 99):02d}"}


def _addresses(rng: random.Random, customers: list[dict]) -> list[dict]:
    rows = []
    for c in customers:
        labels = ["home"] + (["work"] if rng.random() < 0.35 else [])
        for j, label in enumerate(labels):
            rows.append({"id": len(rows) + 1, "customer_id": c["id"], "label": label, **random_address(rng), "is_default": int(j == 0)})
    return rows


def _products(rng: random.Random) -> list[dict]:
    rows = []
    for f, (name, category, price, variants) in enumerate(CATALOGUE, start=1):
        for v, variant in enumerate(variants, start=1):
            rows.append(
                {
                    "id": len(rows) + 1,
                    "sku": f"{category[:3].upper()}-{f:03d}-{v}",
                    "name": name,
                    "variant": variant,
                    "category": category,
                    "price": price,
                    "stock": 0 if rng.random() < 0.1 else rng.randint(3, 80),
                    "returnable": int(category != "beauty"),
                    "active": 1,
                }
            )
    return rows


def _orders(rng, n, customers, addresses, products):
    """Orders spread over the year before TODAY; each order's status follows from its dates."""
    by_customer = group_by(addresses, "customer_id")
    # A few customers order often, most rarely: weights drawn once per customer.
    weights = [rng.choice([1, 1, 1, 2, 2, 4]) for _ in customers]
    orders, items, payments = [], [], []
    for oid in range(1, n + 1):
        customer = rng.choices(customers, weights=weights)[0]
        saved = by_customer[customer["id"]]
        address = saved[0] if len(saved) == 1 or rng.random() < 0.8 else saved[1]
        age = min(int(rng.expovariate(1 / 90)), 364)  # recent orders are more frequent
        placed = TODAY - dt.timedelta(days=age)
        shipped = placed + dt.timedelta(days=rng.randint(1, 3))
        delivered = shipped + dt.timedelta(days=rng.randint(2, 6))
        row = {
            "id": oid,
            "customer_id": customer["id"],
            "status": "",
            "placed_on": iso(placed),
            "shipped_on": None,
            "delivered_on": None,
            "cancelled_on": None,
            "cancel_reason": None,
            "ship_street": address["street"],
            "ship_city": address["city"],
            "ship_state": address["state"],
            "ship_zip": address["zip"],
            "subtotal": 0.0,
            "shipping_fee": 0.0,
            "total": 0.0,
        }
        if rng.random() < 0.06 and age >= 1:
            row.update(
                status="cancelled",
                cancelled_on=iso(placed + dt.timedelta(days=rng.randint(0, 1))),
                cancel_reason=rng.choice(["no_longer_needed", "ordered_by_mistake", "found_better_price", "delivery_too_slow", "other"]),
            )
        elif delivered <= TODAY:
            row.update(status="delivered", shipped_on=iso(shipped), delivered_on=iso(delivered))
        elif shipped <= TODAY:
            row.update(status="shipped", shipped_on=iso(shipped))
        else:
            row["status"] = "pending" if age == 0 or rng.random() < 0.4 else "processing"
        if row["cancelled_on"] and row["cancelled_on"] > iso(TODAY):
            row["cancelled_on"] = iso(TODAY)

        subtotal = 0.0
        for product in rng.sample(products, rng.choices([1, 2, 3, 4], weights=[45, 30, 17, 8])[0]):
            qty = rng.choices([1, 2, 3], weights=[75, 18, 7])[0]
            # Prices move: about one item in eight was bought at a different price than today's.
            price = product["price"]
            if rng.random() < 0.12:
                price = round_money(price * rng.choice([0.85, 0.9, 1.1]))
            items.append({"id": len(items) + 1, "order_id": oid, "product_id": product["id"], "quantity": qty, "unit_price": price})
            subtotal += qty * price
        row["subtotal"] = round_money(subtotal)
        row["shipping_fee"] = 0.0 if subtotal >= FREE_SHIPPING_FROM else SHIPPING_FEE
        row["total"] = round_money(row["subtotal"] + row["shipping_fee"])
        orders.append(row)

        method = rng.choices(["card", "paypal", "gift_card"], weights=[70, 22, 8])[0]
        split = method == "card" and row["total"] > 100 and rng.random() < 0.1  # part paid with a gift card
        if split:
            gift = round_money(min(row["total"] - 1, rng.choice([25.0, 50.0])))
            payments.append(_payment(len(payments) + 1, oid, "gift_card", gift, placed, rng))
            payments.append(_payment(len(payments) + 1, oid, "card", round_money(row["total"] - gift), placed, rng))
        else:
            payments.append(_payment(len(payments) + 1, oid, method, row["total"], placed, rng))
    return orders, items, payments


def _payment(pid: int, oid: int, method: str, amount: float, placed: dt.date, rng: random.Random) -> dict:
    last4 = f"{rng.randint(0, 9999):04d}" if method == "card" else None
    return {"id": pid, "order_id": oid, "method": method, "card_last4": last4, "amount": amount, "paid_on": iso(placed)}


def _returns_and_refunds(rng, orders, items, payments, products):
    """Cancelled orders are refunded in full; some delivered orders have a return (refunded once received)."""
    items_by_order = group_by(items, "order_id")
    pays_by_order = group_by(payments, "order_id")
    returnable = {p["id"] for p in products if p["returnable"]}

    returns, return_items, refunds = [], [], []

    def refund(payment_id, amount, reason, on, return_id=None):
        refunds.append(
            {"id": len(refunds) + 1, "payment_id": payment_id, "return_id": return_id, "amount": amount, "reason": reason, "issued_on": on}
        )

    for o in orders:
        if o["status"] == "cancelled":
            for p in pays_by_order[o["id"]]:
                refund(p["id"], p["amount"], "order_cancelled", o["cancelled_on"])
            continue
        if o["status"] != "delivered" or rng.random() >= 0.07:
            continue
        candidates = [it for it in items_by_order[o["id"]] if it["product_id"] in returnable]
        if not candidates:
            continue
        delivered = dt.date.fromisoformat(o["delivered_on"])
        requested = min(delivered + dt.timedelta(days=rng.randint(1, 25)), TODAY)
        it = rng.choice(candidates)
        qty = rng.randint(1, it["quantity"])
        amount = round_money(qty * it["unit_price"])
        age = (TODAY - requested).days
        status = "refunded" if age > 10 else rng.choice(["requested", "received"]) if age > 3 else "requested"
        if rng.random() < 0.08:
            status = "rejected"
        rid = len(returns) + 1
        returns.append(
            {
                "id": rid,
                "order_id": o["id"],
                "reason": rng.choice(["changed_mind", "wrong_size", "not_as_described", "defective"]),
                "status": status,
                "requested_on": iso(requested),
                "refund_amount": amount,
            }
        )
        return_items.append({"id": len(return_items) + 1, "return_id": rid, "order_item_id": it["id"], "quantity": qty})
        if status == "refunded":
            # Return refunds go to the last payment (the card when a gift card covered part of it).
            pay = pays_by_order[o["id"]][-1]
            refund(pay["id"], min(amount, pay["amount"]), "return", iso(requested + dt.timedelta(days=7)), rid)
    return returns, return_items, refunds


def _tickets(rng, n, customers, orders):
    rows = []
    for i in range(1, n + 1):
        category = rng.choice(list(TICKET_SUBJECTS))
        order = rng.choice(orders) if category in ("delivery", "product_issue", "billing") else None
        customer_id = order["customer_id"] if order else rng.choice(customers)["id"]
        opened = dt.date.fromisoformat(order["placed_on"]) if order else TODAY - dt.timedelta(days=rng.randint(0, 200))
        opened += dt.timedelta(days=rng.randint(0, 10))
        opened = min(opened, TODAY)
        status = rng.choices(["open", "pending", "resolved", "closed"], weights=[25, 10, 40, 25])[0]
        updated = opened if status == "open" else min(opened + dt.timedelta(days=rng.randint(0, 14)), TODAY)
        subject = rng.choice(TICKET_SUBJECTS[category])
        rows.append(
            {
                "id": i,
                "customer_id": customer_id,
                "order_id": order["id"] if order else None,
                "category": category,
                "priority": rng.choices(["normal", "high", "urgent"], weights=[80, 17, 3])[0],
                "status": status,
                "subject": subject,
                "description": f"{subject}. Customer contacted support about this.",
                "opened_on": iso(opened),
                "updated_on": iso(updated),
            }
        )
    return rows


def _notes(rng, n, customers, orders):
    rows = []
    for i in range(1, n + 1):
        order = rng.choice(orders) if rng.random() < 0.5 else None
        customer_id = order["customer_id"] if order else rng.choice(customers)["id"]
        created = (
            dt.date.fromisoformat(order["placed_on"]) + dt.timedelta(days=rng.randint(0, 5))
            if order
            else TODAY - dt.timedelta(days=rng.randint(0, 300))
        )
        rows.append(
            {
                "id": i,
                "customer_id": customer_id,
                "order_id": order["id"] if order else None,
                "body": rng.choice(NOTE_BODIES),
                "created_on": iso(min(created, TODAY)),
            }
        )
    return rows


def _escalations(rng, n, customers, orders):
    rows = []
    for i in range(1, n + 1):
        order = rng.choice(orders)
        category = rng.choice(list(ESCALATION_REASONS))
        created = min(dt.date.fromisoformat(order["placed_on"]) + dt.timedelta(days=rng.randint(1, 20)), TODAY)
        rows.append(
            {
                "id": i,
                "customer_id": order["customer_id"],
                "order_id": order["id"],
                "category": category,
                "status": "closed" if (TODAY - created).days > 14 else "open",
                "reason": ESCALATION_REASONS[category],
                "created_on": iso(created),
            }
        )
    return rows
