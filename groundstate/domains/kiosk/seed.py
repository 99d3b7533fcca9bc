"""Deterministic seed for the kiosk: 400 members, 1,600 orders."""

import random

FIRST = ["ana", "ben", "cai", "dee", "eli", "fay", "gus", "hal", "ida", "jon", "kim", "leo", "mia", "ned", "ola", "pia", "rex", "sue", "tom", "uma"]
ITEMS = ["lamp", "mug", "pen", "bag", "cap", "book", "fan", "kit"]


def generate(rng: random.Random, scale: float = 1.0) -> dict[str, list[dict]]:
    n_members = max(20, int(400 * scale))
    members = []
    for i in range(1, n_members + 1):
        name = f"{rng.choice(FIRST)}{i}"
        members.append(
            {
                "id": i,
                "name": name,
                "email": f"{name}@kiosk.test",
                "tier": rng.choice(["basic", "basic", "silver", "gold"]),
                "credit": float(rng.randrange(0, 50)),
            }
        )
    orders = [
        {
            "id": 100 + i,
            "member_id": rng.randint(1, n_members),
            "item": rng.choice(ITEMS),
            "total": float(rng.randrange(5, 90)),
            "status": rng.choice(["pending", "shipped"]),
        }
        for i in range(1, 4 * n_members + 1)
    ]
    return {"kiosk_members": members, "kiosk_orders": orders, "kiosk_notes": []}
