"""What every domain's `taskgen.py` shares, so that each one holds only its templates and its world index.

A generator is a `WorldIndex` subclass (indexes over the seed world, pickers, phrasing) plus a list of
templates, `(family, t_<name>, count)`: each template draws one task body from the index —
`instruction`, `user`, `gold` (a list of `call(...)`), optionally `patch` (a `Patch`), `checks` and `tags`.
`generate(folder, templates, index)` turns the bodies into the task dicts the domain's task file holds.
Everything here is deterministic: the same world, date and rng give the same tasks, byte for byte.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from groundstate.domains._kit.folder import domain_of, write_tools
from groundstate.domains._kit.seed import group_by
from groundstate.domains._kit.text import CLOSINGS, GREETINGS, TONES, facts

# (family, template function named t_<template>, number of tasks)
Template = tuple[str, Callable[[Any], dict], int]

BODY_KEYS = {"instruction", "user", "gold", "patch", "checks", "rubrics", "gold_reply", "tags"}
MAX_DRAWS = 50  # draws of one task before a template is declared unable to yield another distinct instruction

T = TypeVar("T")


# -- task parts ----------------------------------------------------------------------------------------


def call(tool: str, /, **args: Any) -> dict[str, Any]:
    """One step of a gold solution: a tool and its arguments."""
    return {"tool": tool, "args": args}


class Patch:
    """Rows to upsert on top of the seed for one task (a partial row updates, a full row inserts).

    `to_dict` lists the tables in `order`, so every row comes after the rows it references; a domain's
    subclass sets it, normally to `table_order(HERE)` (or pass it to the constructor).
    """

    order: tuple[str, ...] = ()

    def __init__(self, order: Sequence[str] | None = None) -> None:
        if order is not None:
            self.order = tuple(order)
        self.tables: dict[str, list[dict[str, Any]]] = {}

    def add(self, table: str, row: dict[str, Any]) -> Patch:
        """Append `row` (the object itself) to the table's rows; returns the patch, so adds chain."""
        self.tables.setdefault(table, []).append(row)
        return self

    def set(self, table: str, row: dict[str, Any]) -> dict[str, Any]:
        """Merge `row` into the table's row with the same `id`, or append a copy of it; returns the stored row."""
        rows = self.tables.setdefault(table, [])
        for stored in rows:
            if stored["id"] == row["id"]:
                stored.update(row)
                return stored
        rows.append(dict(row))
        return rows[-1]

    def get(self, table: str, row_id: Any) -> dict[str, Any] | None:
        """The table's row with this `id`, or None."""
        return next((r for r in self.tables.get(table, []) if r["id"] == row_id), None)

    def extend(self, other: Patch) -> Patch:
        """Append every row of `other`; returns this patch."""
        for table, rows in other.tables.items():
            for row in rows:
                self.add(table, row)
        return self

    def to_dict(self) -> dict[str, list[dict[str, Any]]]:
        """The task file's `patch`: table -> rows, tables in `order`."""
        unknown = sorted(set(self.tables) - set(self.order))
        if unknown:  # a table the order does not name would be left out of the task silently
            raise ValueError(f"the patch has rows for {unknown}, which are not in the table order {list(self.order)}")
        return {t: self.tables[t] for t in self.order if t in self.tables}


class WorldIndex:
    """The base of a domain's generator: the seed world (read, never modified), the business date, the seeded
    rng, ids for the rows a patch inserts, turn counters with which a template cycles through its cases, pickers
    that spread tasks across the world, and the simulated user's greeting, persona and closing.

    A subclass adds the domain's indexes, pickers and phrasing; it must draw all randomness from `self.rng`.
    """

    def __init__(self, world: dict[str, list[dict]], today: dt.date, rng: random.Random):
        self.world, self.today, self.rng = world, today, rng
        # Tables keyed by an integer `id`; the seed gives every row of a table the same columns.
        self.max_ids = {t: max((r["id"] for r in rows), default=0) for t, rows in world.items() if not rows or "id" in rows[0]}
        self.next_ids = {t: m + 1 for t, m in self.max_ids.items()}
        self.turns: dict[str, int] = {}

    def new_id(self, table: str) -> int:
        """The id for a row a patch inserts (above the seed's ids, so it never collides with a seed row)."""
        i = self.next_ids.get(table, 1)
        self.next_ids[table] = i + 1
        return i

    def nth(self, key: str) -> int:
        """How many times `key` was asked for before."""
        n = self.turns.get(key, 0)
        self.turns[key] = n + 1
        return n

    def cycle(self, key: str, options: Sequence[Any]) -> Any:
        """The next of `options` for `key`, in turn, so that a template's few tasks cover its variants."""
        return options[self.nth(key) % len(options)]

    def ago(self, days: int) -> dt.date:
        return self.today - dt.timedelta(days=days)

    def ahead(self, days: int) -> dt.date:
        return self.today + dt.timedelta(days=days)

    # -- picking: tasks spread across the world ------------------------------------------------------------

    def draw(self, pool: Sequence[T], what: str, fresh: Callable[[T], bool] | None = None) -> T:
        """One of `pool`; with `fresh` (whom no task has used yet), one of those it accepts while there are any.

        `RuntimeError` naming `what` when the pool is empty: the template asks for more than the world holds.
        """
        if not pool:
            raise RuntimeError(f"no {what} left for this template: lower its count or widen its filter")
        return self.rng.choice(pool if fresh is None else [x for x in pool if fresh(x)] or pool)

    def draw_group(self, rows: Sequence[dict], owner: str, k: int, what: str, fresh: Callable[[Hashable], bool]) -> list[dict]:
        """`k` of `rows` with the same `owner` (a column): the owner is drawn (`draw`) among those with at least k rows,
        then k of its rows."""
        groups = group_by(rows, owner)
        chosen = self.draw(sorted(o for o, group in groups.items() if len(group) >= k), f"{what} with {k} suitable rows", fresh)
        return self.rng.sample(groups[chosen], k)

    # -- the simulated user --------------------------------------------------------------------------------

    greetings: Sequence[str] = GREETINGS
    closings: Sequence[str] = CLOSINGS
    tones: Sequence[str] = TONES

    def greeting(self) -> str:
        return self.rng.choice(self.greetings)

    def opening(self, *introductions: str) -> str:
        """A first message's opening: one of `introductions` after a greeting (a greeting is drawn for each, in turn,
        then one of them)."""
        return self.rng.choice([f"{self.greeting()} {intro}" for intro in introductions])

    def script(self, first: Sequence[str] | None = None) -> list[str]:
        """A user's scripted replies: `first`, then a closing."""
        return [*(first or []), self.rng.choice(self.closings)]

    def simulated_user(self, persona: str, context: str, first: Sequence[str] | None = None) -> dict:
        """A task's `user`: who they are (`persona`, with a tone drawn from `tones`), the facts they reveal when asked
        (`context`, in the second person) and their scripted replies (`script(first)`)."""
        return {"persona": f"{persona}; {self.rng.choice(self.tones)}.", "context": context, "script": self.script(first)}


# -- the driver ----------------------------------------------------------------------------------------


def task_id(domain: str, template: str, n: int) -> str:
    """`<domain>-<template with dashes>-<nnn>`: the id of a template's n-th task (n from 1)."""
    return f"{domain}-{template.replace('_', '-')}-{n:03d}"


def generate(folder: Path | str, templates: Sequence[Template], index: WorldIndex) -> list[dict]:
    """The domain's tasks: for each `(family, t_<name>, count)` in order, `count` tasks drawn from `t_<name>(index)`.

    Ids are `task_id(domain, name, n)`; tags get `calls:<gold length>` and `writes:<write calls>` appended. A draw
    whose instruction an earlier task already has is drawn again (at most `MAX_DRAWS` times), so no two tasks read
    alike. A body with a key outside `BODY_KEYS`, or a gold call of a tool the domain does not have, is an error.
    """
    domain = domain_of(folder)
    writes = write_tools(folder)
    seen: set[str] = set()
    tasks = []
    for family, template, count in templates:
        name = template.__name__.removeprefix("t_")
        for n in range(1, count + 1):
            body = _draw(template, index, seen)
            extra = set(body) - BODY_KEYS
            if extra:
                raise ValueError(f"template {name} returned unknown keys {sorted(extra)}; a body has {sorted(BODY_KEYS)}")
            gold = body["gold"]
            unknown = [c["tool"] for c in gold if c["tool"] not in domain.tools]
            if unknown:  # caught here, naming the template, rather than when the task file is loaded
                raise ValueError(f"template {name} calls unknown tools {unknown}")
            task = {
                "id": task_id(domain.name, name, n),
                "family": family,
                "template": name,
                "tags": [*body.get("tags", []), f"calls:{len(gold)}", f"writes:{sum(c['tool'] in writes for c in gold)}"],
                "instruction": body["instruction"],
                "user": body["user"],
            }
            patch = body["patch"].to_dict() if body.get("patch") is not None else {}
            if patch:
                task["patch"] = patch
            task["gold"] = gold
            if body.get("checks"):
                task["checks"] = body["checks"]
            if body.get("rubrics"):
                if not all(facts(r) for r in body["rubrics"]):  # a generator bug: a rubric names the fact it asks for
                    raise ValueError(f"template {name}: a rubric quotes no fact (build it with rubric(question, fact))")
                missing = [f for r in body["rubrics"] for f in facts(r) if f not in (body.get("gold_reply") or "")]
                if not body.get("gold_reply") or missing:  # the gold's reply must say what its rubrics ask
                    raise ValueError(f"template {name}: its gold_reply does not say {missing or 'anything'}")
                task["rubrics"] = body["rubrics"]
                task["gold_reply"] = body["gold_reply"]
            tasks.append(task)
    return tasks


def _draw(template: Callable[[Any], dict], index: WorldIndex, seen: set[str]) -> dict:
    for _ in range(MAX_DRAWS):
        body = template(index)
        if body["instruction"] not in seen:
            seen.add(body["instruction"])
            return body
    raise RuntimeError(
        f"template {template.__name__} drew {MAX_DRAWS} instructions that earlier tasks already have: lower its count or give it more to vary"
    )
