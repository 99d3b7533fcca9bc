"""The task-generation kit: what every domain's `taskgen.py` shares, so that each one holds only its templates
and its world index.

A generator is a `WorldIndex` subclass (indexes over the seed world, pickers, phrasing) plus a list of
templates, `(family, t_<name>, count)`: each template draws one task body from the index —
`instruction`, `user`, `gold` (a list of `call(...)`), optionally `patch` (a `Patch`), `checks` and `tags`.
`generate(folder, templates, index)` turns the bodies into the task dicts the domain's task file holds.
Everything here is deterministic: the same world, date and rng give the same tasks, byte for byte.

The kit reads the domain itself (its tables, its write tools) through `domain_of`, the one place it
imports the domain loader. It depends on nothing above the loader (no runner, grading or CLI).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

# (family, template function named t_<template>, number of tasks)
Template = tuple[str, Callable[[Any], dict], int]

BODY_KEYS = {"instruction", "user", "gold", "patch", "checks", "rubrics", "gold_reply", "tags"}
MAX_DRAWS = 50  # draws of one task before a template is declared unable to yield another distinct instruction


# -- the domain -----------------------------------------------------------------------------------------


def domain_of(folder: Path | str) -> Any:
    """The loaded `Domain` of a domain folder: a bundled domain by its name (the loader's cache then serves
    the instance the caller loaded already), any other folder by its path.

    This is the kit's only import of the domain loader.
    """
    from groundstate.worlds.domain import DOMAINS_DIR, load_domain

    folder = Path(folder).resolve()
    if (DOMAINS_DIR / folder.name).resolve() == folder:
        domain = load_domain(folder.name)
        if domain.path.resolve() == folder:  # not a same-named folder in the working directory
            return domain
    return load_domain(str(folder))


def table_order(folder: Path | str) -> tuple[str, ...]:
    """The domain's tables in schema.sql's order, each after the tables it references: the order patch rows go in."""
    return tuple(domain_of(folder).tables)


def write_tools(folder: Path | str) -> frozenset[str]:
    """Names of the domain's write tools (`@tool(write=True)`), read from its loaded toolset."""
    return frozenset(name for name, spec in domain_of(folder).tools.specs.items() if spec.write)


def sibling(folder: Path | str, name: str) -> ModuleType:
    """A fresh import of the domain's `<name>.py` (its seed or tools) for the generator's own use.

    It stays out of `sys.modules`, so it never replaces the copy the domain loader imported.
    """
    folder = Path(folder)
    spec = importlib.util.spec_from_file_location(f"groundstate_domain_{folder.name}_{name}_for_taskgen", folder / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {folder / f'{name}.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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

    def add(self, table: str, row: dict[str, Any]) -> "Patch":
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

    def extend(self, other: "Patch") -> "Patch":
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
    rng, ids for the rows a patch inserts, and turn counters with which a template cycles through its cases.

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


# -- text ----------------------------------------------------------------------------------------------


def rubric(question: str, fact: str) -> str:
    """A yes/no question about the final reply that names the fact it must state, quoted: `rubric("Does the reply
    give the refund, {}?", "$42.50")` is `Does the reply give the refund, "$42.50"?`."""
    return question.format(f'"{fact}"')


def facts(rubric_text: str) -> list[str]:
    """The quoted facts of a rubric (`rubric`): what a reply must state for it to be judged yes."""
    return re.findall(r'"([^"]+)"', rubric_text)


def said(phrase: str) -> str:
    """A user's own words quoted inside their context (which speaks to them in the second person)."""
    return f'(in your words: "{phrase}")'


def cap(text: str) -> str:
    """`text` with its first letter upper-cased (the rest unchanged, unlike `str.capitalize`)."""
    return text[0].upper() + text[1:]


def long_date(d: dt.date | str) -> str:
    """A date (or ISO date text) as people write it: "June 5, 2026"."""
    d = dt.date.fromisoformat(d) if isinstance(d, str) else d
    return f"{d:%B} {d.day}, {d.year}"


# -- money: amounts are computed in whole cents, so sums and differences are exact ----------------------


def cents(x: float) -> int:
    return int(round(x * 100))


def dollars(c: int) -> float:
    return round(c / 100, 2)


def money(x: float) -> str:
    """An amount as people read it: "$1,234.50"."""
    return f"${x:,.2f}"
