"""Canonical rows and change sets.

A `ChangeSet` holds, for every row an episode touched, its state before (at the template) and after.
It is read from a change log that triggers fill (see `capture.py`), so computing it costs in
proportion to the rows changed, not to the size of the database. Values are canonicalised so that
SQLite and PostgreSQL give identical change sets for the same writes.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

Key = tuple  # canonical primary-key values of a row
Row = dict[str, Any]

MASKED = "<masked>"
TEXT = "<text>"


def canon_value(v: Any) -> Any:
    """One canonical form per value: bools as ints, integral numbers as ints, others rounded to 6 places."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, (float, decimal.Decimal)):
        f = float(v)
        if f.is_integer() and abs(f) < 2**53:
            return int(f)
        return round(f, 6)
    if isinstance(v, (dt.date, dt.datetime)):
        return v.isoformat()
    if isinstance(v, (bytes, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    return str(v)


@dataclass(frozen=True)
class Normaliser:
    """What the grader treats as equal: volatile columns masked, free text compared by presence, JSON canonicalised."""

    volatile: dict[str, frozenset[str]] = field(default_factory=dict)
    free_text: dict[str, frozenset[str]] = field(default_factory=dict)
    json_columns: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_config(cls, volatile: dict, free_text: dict, json_columns: dict) -> "Normaliser":
        def fz(d):
            return {t: frozenset(c) for t, c in d.items()}

        return cls(fz(volatile), fz(free_text), fz(json_columns))

    def canon_row(self, table: str, row: Row | None) -> Row | None:
        if row is None:
            return None
        out = {}
        js = self.json_columns.get(table, ())
        for k, v in row.items():
            if k in js and isinstance(v, str):
                try:
                    v = json.loads(v)
                except json.JSONDecodeError:
                    pass
            out[k] = canon_value(v)
        return out

    def mask_row(self, table: str, row: Row | None) -> Row | None:
        if row is None:
            return None
        vol, txt = self.volatile.get(table, ()), self.free_text.get(table, ())
        out = {}
        for k, v in row.items():
            if k in vol:
                v = MASKED
            elif k in txt:
                v = TEXT if isinstance(v, str) and v.strip() else None
            out[k] = v
        return out


@dataclass(frozen=True)
class RowChange:
    table: str
    key: Key
    before: Row | None  # None: the row did not exist at the start
    after: Row | None  # None: the row no longer exists

    @property
    def kind(self) -> str:
        return "insert" if self.before is None else "delete" if self.after is None else "update"

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "key": list(self.key), "kind": self.kind, "before": self.before, "after": self.after}


@dataclass
class ChangeSet:
    """Rows that differ between the template and the current state, canonical (not yet masked)."""

    rows: dict[tuple[str, Key], RowChange] = field(default_factory=dict)
    rows_read: int = 0  # rows the computation read from the database: the grader's cost

    @classmethod
    def from_changes(cls, changes: Iterable[RowChange], rows_read: int = 0) -> "ChangeSet":
        return cls({(c.table, c.key): c for c in changes if c.before != c.after}, rows_read)

    def __len__(self) -> int:
        return len(self.rows)

    def masked(self, norm: Normaliser) -> "ChangeSet":
        """The view the grader compares: rows whose only differences are masked drop out."""
        out = (RowChange(c.table, c.key, norm.mask_row(c.table, c.before), norm.mask_row(c.table, c.after)) for c in self.rows.values())
        return ChangeSet.from_changes(out, self.rows_read)

    def counts(self) -> dict[str, int]:
        n = {"insert": 0, "update": 0, "delete": 0}
        for c in self.rows.values():
            n[c.kind] += 1
        return n

    def to_json(self) -> list[dict[str, Any]]:
        return [c.to_json() for _, c in sorted(self.rows.items(), key=lambda kv: (kv[0][0], _sort_key(kv[0][1])))]


def _sort_key(key: Key) -> tuple:
    return tuple((0, v) if isinstance(v, (int, float)) else (1, str(v)) for v in key)


def diff(expected: ChangeSet, actual: ChangeSet) -> list[dict[str, Any]]:
    """Row-by-row differences a person can read: what the golden state has vs what the attempt left."""
    out = []
    for tk in sorted(set(expected.rows) | set(actual.rows), key=lambda tk: (tk[0], _sort_key(tk[1]))):
        e, a = expected.rows.get(tk), actual.rows.get(tk)
        if e is not None and a is not None and e.after == a.after and e.before == a.before:
            continue
        table, key = tk
        entry: dict[str, Any] = {"table": table, "key": list(key)}
        if e is None:
            entry.update(problem=f"unexpected {a.kind}", expected=a.before, actual=a.after)
        elif a is None:
            entry.update(problem=f"missing {e.kind}", expected=e.after, actual=e.before)
        else:
            entry.update(problem=f"wrong {e.kind}" if e.kind == a.kind else f"expected {e.kind}, got {a.kind}", expected=e.after, actual=a.after)
            if e.after and a.after:
                entry["columns"] = {c: {"expected": e.after.get(c), "actual": a.after.get(c)} for c in e.after if e.after.get(c) != a.after.get(c)}
        out.append(entry)
    return out
