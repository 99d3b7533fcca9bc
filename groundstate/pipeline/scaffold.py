"""`groundstate new domain NAME`: a small, working domain folder to grow into a real one.

The folder holds customers and their orders (two tables), four tools (two reads, two writes), a policy,
a seed and a seeded task generator built on the domain kit (`groundstate/domains/_kit/`), as the bundled domains' are,
and the task file it generates: two tasks that `groundstate tasks lint --domain FOLDER` passes (gold passes, doing nothing
fails, every counted mutant is killed). docs/DOMAINS.md walks from here to a domain of one's own.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from string import Template

# The pattern of `DomainConfig.name` in groundstate/tasks.py (tests/domains/test_new_domain.py keeps them equal).
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")

DOMAIN_YAML = """\
name: $name
description: >-
  Customers of $name and their orders: a starting point made by `groundstate new domain $name`.
  Grow it into your own world: tables in schema.sql, rows in seed.py, tools in tools.py,
  rules in policy.md, task templates in taskgen.py.
split: pool
today: "2026-03-02"
seed: 7
volatile: {}
free_text: {}
"""

SCHEMA_SQL = """\
CREATE TABLE ${name}_customers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  email TEXT NOT NULL UNIQUE,
  tier TEXT NOT NULL CHECK (tier IN ('basic', 'silver', 'gold'))
);
CREATE TABLE ${name}_orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES ${name}_customers(id),
  item TEXT NOT NULL,
  total REAL NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'shipped', 'cancelled'))
);
"""

SEED_PY = '''\
"""The deterministic seed of $name: 400 customers and 1,600 orders at scale 1.

`generate(rng, scale)` must give the same rows for the same rng on every machine: draw every random
choice from `rng`, never from the clock or the `random` module's global state. The domain kit
(`groundstate.domains._kit`) holds what seeds share: names and unique emails, scaled counts, dates, ids.
"""

import random

from groundstate.domains._kit import People, Rows, scaled

ITEMS = ["lamp", "mug", "pen", "bag", "cap", "book", "fan", "kit"]


def generate(rng: random.Random, scale: float = 1.0) -> Rows:
    """Rows per table, tables in schema.sql's order, every row with every column."""
    n = scaled(400, scale)
    people = People(rng, email_domain="$name.test")
    customers = []
    for i in range(1, n + 1):
        first, last, email = people.draw()
        customers.append({"id": i, "name": f"{first} {last}", "email": email, "tier": rng.choice(["basic", "basic", "silver", "gold"])})
    orders = [
        {
            "id": 1000 + i,
            "customer_id": rng.randint(1, n),
            "item": rng.choice(ITEMS),
            "total": float(rng.randrange(5, 200)),
            "status": rng.choice(["pending", "shipped"]),
        }
        for i in range(1, 4 * n + 1)
    ]
    return {"${name}_customers": customers, "${name}_orders": orders}
'''

TOOLS_PY = '''\
"""The tools of $name. A tool's first parameter receives the sandbox database; the rest of its signature is
the tool's JSON schema and its docstring the description. A write says so (`@tool(write=True)`) and refuses
what it cannot do with `ToolError`, which the agent reads as the call's result."""

from typing import Literal

from groundstate.tools import ToolError, tool


@tool
def find_${name}_customer(db, email: str) -> dict:
    """Find a customer by email.

    Args:
        email: The customer's email address.
    """
    customer = db.one("SELECT id, name, tier FROM ${name}_customers WHERE email = ?", email.strip().lower())
    if customer is None:
        raise ToolError(f"no customer with email {email}")
    return customer


@tool
def get_${name}_order(db, order_id: int) -> dict:
    """Look up an order: its customer, item, total and status.

    Args:
        order_id: The order number.
    """
    order = db.one("SELECT id, customer_id, item, total, status FROM ${name}_orders WHERE id = ?", order_id)
    if order is None:
        raise ToolError(f"no order {order_id}")
    return order


@tool(write=True)
def cancel_${name}_order(db, order_id: int) -> dict:
    """Cancel a pending order. Shipped orders cannot be cancelled.

    Args:
        order_id: The order number.
    """
    order = get_${name}_order(db, order_id)
    if order["status"] != "pending":
        raise ToolError(f"order {order_id} is {order['status']}; only pending orders can be cancelled")
    db.execute("UPDATE ${name}_orders SET status = 'cancelled' WHERE id = ?", order_id)
    return {"id": order_id, "status": "cancelled"}


@tool(write=True)
def set_${name}_customer_tier(db, customer_id: int, tier: Literal["basic", "silver", "gold"]) -> dict:
    """Move a customer to another tier.

    Args:
        customer_id: The customer.
        tier: The new tier.
    """
    customer = db.one("SELECT id, tier FROM ${name}_customers WHERE id = ?", customer_id)
    if customer is None:
        raise ToolError(f"no customer {customer_id}")
    if customer["tier"] == tier:
        raise ToolError(f"customer {customer_id} is already {tier}")
    db.execute("UPDATE ${name}_customers SET tier = ? WHERE id = ?", tier, customer_id)
    return {"id": customer_id, "tier": tier}
'''

POLICY_MD = """\
# $name policy
- Identify the customer by the email they give before acting on their account.
- Only pending orders can be cancelled; a shipped order cannot be.
- Change a customer's tier only when they ask for it.
"""

TASKGEN_PY = '''\
"""The task generator of $name: templates × entities sampled from the seed world.

`generate(world, today, rng)` must be deterministic: the same world, date and rng give the same tasks, in the
same order. `groundstate tasks generate --domain FOLDER` writes them to tasks/$name.yaml, and
`groundstate tasks generate --domain FOLDER --check` verifies the file is reproduced byte for byte.

A template takes the generator and returns one task body: `instruction` (the user's first message),
`user` (persona, context, script of the simulated user), `gold` (the tool calls that solve it), and
optionally `patch` (rows upserted on the seed to set the situation up), `checks` and `tags`. The domain kit
(`groundstate.domains._kit`) holds what generators share: `WorldIndex` (ids for new rows, pickers that spread tasks
across the world, the simulated user's greeting, tone and closing), `Patch`, `call` and the driver `generate`.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

from groundstate.domains import _kit
from groundstate.domains._kit import Template, WorldIndex, call

HERE = Path(__file__).resolve().parent


class Patch(_kit.Patch):
    order = _kit.table_order(HERE)


class Generator(WorldIndex):
    """Indexes over the seed world and the pickers and phrasing the templates share."""

    def __init__(self, world: dict[str, list[dict]], today: dt.date, rng: random.Random):
        super().__init__(world, today, rng)
        self.customers = {c["id"]: c for c in world["${name}_customers"]}
        self.used: set[int] = set()  # customers a task already has, so that tasks spread across the world

    def pick_customer(self) -> dict:
        """A customer no task has used yet."""
        customer = self.draw([c for c in self.world["${name}_customers"] if c["id"] not in self.used], "unused customer")
        self.used.add(customer["id"])
        return customer

    def pick_order(self) -> dict:
        """An order of a customer no task has used yet."""
        order = self.draw([o for o in self.world["${name}_orders"] if o["customer_id"] not in self.used], "order of an unused customer")
        self.used.add(order["customer_id"])
        return order

    def hello(self, customer: dict) -> str:
        """A first message's opening: a greeting, and who is writing."""
        return self.opening(f"this is {customer['email']}.", f"my email is {customer['email']}.")

    def user(self, customer: dict, context: str) -> dict:
        """The simulated customer: who they are (and a tone), the facts they know, and their scripted replies."""
        return self.simulated_user(f"{customer['name']}, a {customer['tier']}-tier customer", context)


def t_cancel_order(g: Generator) -> dict:
    """Cancel an order the patch makes pending."""
    order = g.pick_order()
    customer = g.customers[order["customer_id"]]
    return {
        "instruction": f"{g.hello(customer)} Please cancel my order #{order['id']}.",
        "user": g.user(customer, f"Your email is {customer['email']}. You want order #{order['id']} cancelled."),
        "patch": Patch().add("${name}_orders", {"id": order["id"], "status": "pending"}),
        "gold": [call("cancel_${name}_order", order_id=order["id"])],
        "checks": [{"sql": f"SELECT status FROM ${name}_orders WHERE id = {order['id']}", "expect": [["cancelled"]]}],
    }


# (family, template, number of tasks)
TEMPLATES: list[Template] = [
    ("single_write", t_cancel_order, 2),
]


def generate(world: dict[str, list[dict]], today: dt.date, rng: random.Random) -> list[dict]:
    """Every task of $name, in template order, ids `$name-<template>-<nnn>`."""
    return _kit.generate(HERE, TEMPLATES, Generator(world, today, rng))
'''

FILES = {
    "domain.yaml": DOMAIN_YAML,
    "schema.sql": SCHEMA_SQL,
    "seed.py": SEED_PY,
    "tools.py": TOOLS_PY,
    "policy.md": POLICY_MD,
    "taskgen.py": TASKGEN_PY,
}


def new_domain(parent_dir: Path, name: str) -> Path:
    """Write the domain folder `parent_dir/name` and its generated task file; return the folder.

    `ValueError` for a name that `domain.yaml` would refuse, `FileExistsError` when the folder exists and is not
    empty (nothing is overwritten). The folder is left as it was found if writing it fails.
    """
    if not NAME_PATTERN.match(name):
        raise ValueError(
            f"domain name {name!r}: use lower-case letters, digits and underscores, starting with a letter (it prefixes the table and tool names)"
        )
    folder = Path(parent_dir) / name
    existed = folder.exists()
    if existed and (not folder.is_dir() or any(folder.iterdir())):
        raise FileExistsError(f"{folder} already exists and is not an empty folder; choose another name or --dir")
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for filename, text in FILES.items():
            (folder / filename).write_text(Template(text).substitute(name=name), encoding="utf-8")
        _write_tasks(folder)
    except BaseException:
        shutil.rmtree(folder)  # it was absent or empty: nothing of anyone else's is lost
        if existed:
            folder.mkdir()
        raise
    return folder


def _write_tasks(folder: Path) -> None:
    """Render the task file from the new taskgen.py, as `groundstate tasks generate` does."""
    from groundstate.worlds.domain import Domain, render_generated_tasks

    path, text = render_generated_tasks(Domain(folder))
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
