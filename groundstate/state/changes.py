"""Canonical rows and change sets.

A `ChangeSet` holds, for every row an episode touched, its state before (at the template) and after.
It is read from a change log that triggers fill (see `capture.py`), so computing it costs in
proportion to the rows changed, not to the size of the database. Values are canonicalised so that
SQLite and PostgreSQL give identical change sets for the same writes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import itertools
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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
    def from_config(cls, volatile: dict, free_text: dict, json_columns: dict) -> Normaliser:
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
                with contextlib.suppress(json.JSONDecodeError):
                    v = json.loads(v)
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
    def from_changes(cls, changes: Iterable[RowChange], rows_read: int = 0) -> ChangeSet:
        return cls({(c.table, c.key): c for c in changes if c.before != c.after}, rows_read)

    def __len__(self) -> int:
        return len(self.rows)

    def masked(self, norm: Normaliser) -> ChangeSet:
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


MAX_ALIGNMENTS = 5040  # renamings tried at most (7! for seven alike inserted rows of one table): beyond, rows compare as keyed


def align_inserted(
    expected: ChangeSet, actual: ChangeSet, primary_keys: dict[str, list[str]], references: dict[str, list[tuple[str, str]]]
) -> ChangeSet:
    """`actual` with the ids of the rows it inserted renamed onto the golden ones, where one renaming makes the two
    change sets equal; `actual` itself otherwise.

    Ids of inserted rows are generated (the next free id), so two independent inserts made in the other order trade
    ids: the same work, a different keying. A renaming maps a table's inserted ids onto the same set of golden inserted
    ids; it applies to tables keyed by one integer column that is not itself a foreign key (`renamable`), and renames
    the ids and every column whose declared foreign key refers to them (keys of other tables included) together. It
    counts only if every row then equals its golden row, and only if no new id stands where its meaning is not
    declared (`_undeclared_id`): there a renaming could pair a reference with the wrong row. Rows alike but for their
    ids are tried in every order up to `MAX_ALIGNMENTS` renamings; the search is deterministic, so is the verdict.
    """
    if expected.rows == actual.rows:
        return actual
    fk_of = {(child, col): parent for parent, refs in references.items() for child, col in refs}
    renamable = {t for t, pk in primary_keys.items() if len(pk) == 1 and (t, pk[0]) not in fk_of}
    inserted, golden = _new_ids(actual, renamable), _new_ids(expected, renamable)
    if not all(isinstance(k, int) and not isinstance(k, bool) for keys in (*inserted.values(), *golden.values()) for k in keys):
        return actual  # ids that are not generated integers: nothing to rename
    tables = sorted(t for t, keys in inserted.items() if len(keys) > 1 and sorted(keys) == sorted(golden.get(t, ())))
    if not tables:
        return actual
    renamed_cols = {t: {primary_keys[t][0]} for t in tables}
    for parent in tables:
        for child, col in references.get(parent, ()):
            renamed_cols.setdefault(child, set()).add(col)
    all_new = {k for keys in inserted.values() for k in keys} | {k for keys in golden.values() for k in keys}
    if _undeclared_id(all_new, inserted, golden, primary_keys, fk_of, (expected, actual)):
        return actual
    choices = _choices(tables, inserted, golden, renamed_cols, expected, actual)
    if choices is None or math.prod(len(c) for c in choices) > MAX_ALIGNMENTS:
        return actual
    for combo in itertools.product(*choices):
        renaming = dict(zip(tables, combo, strict=True))
        candidate = _rename(actual, renaming, primary_keys, references)
        if candidate.rows == expected.rows:
            return candidate
    return actual


def _new_ids(cs: ChangeSet, renamable: set[str]) -> dict[str, list[int]]:
    """The keys of the rows `cs` inserted into each renamable table."""
    out: dict[str, list[int]] = {}
    for (t, k), c in cs.rows.items():
        if c.before is None and t in renamable:
            out.setdefault(t, []).append(k[0])
    return out


def _choices(
    tables: list[str],
    inserted: dict[str, list[int]],
    golden: dict[str, list[int]],
    renamed_cols: dict[str, set[str]],
    expected: ChangeSet,
    actual: ChangeSet,
) -> list[list[dict[Any, Any]]] | None:
    """Per table, the renamings its rows allow (rows alike but for the renamed columns); None if a table's inserted
    rows are not the golden ones in some order."""

    def signature(table: str, row: Row | None) -> str:
        blank = renamed_cols.get(table, ())
        return json.dumps({k: v for k, v in (row or {}).items() if k not in blank}, sort_keys=True, default=str)

    choices: list[list[dict[Any, Any]]] = []
    for t in tables:
        mine = [(k, signature(t, actual.rows[(t, (k,))].after)) for k in sorted(inserted[t])]
        theirs = [(k, signature(t, expected.rows[(t, (k,))].after)) for k in sorted(golden[t])]
        if sorted(s for _, s in mine) != sorted(s for _, s in theirs):
            return None
        choices.append(_matchings(mine, theirs))
    return choices


def _undeclared_id(
    ids: set[int],
    inserted: dict[str, list[int]],
    golden: dict[str, list[int]],
    primary_keys: dict[str, list[str]],
    fk_of: dict[tuple[str, str], str],
    sets: tuple[ChangeSet, ...],
) -> bool:
    """Whether a new row's id stands where its meaning is not declared: anywhere but its own row's key (unless a new
    row of another table has the same id: a table keyed by another's id without a foreign key) or a column whose
    declared foreign key holds it as an integer. That is an integer column without a foreign key (a key column
    of another table too, any other column of its own row or table: `escalated_from` naming itself or another new
    row), an id stored as text, or a number in a compared text (`42`, `42.`, `42.0`; ISO dates are not numbers).
    Such change sets are compared keyed: a false negative at worst, never a false positive."""
    alternatives = "|".join(sorted((str(i) for i in ids), key=len, reverse=True))
    number = re.compile(r"(?<!\d)(?<!\d\.)(?:" + alternatives + r")(?:\.0+)?(?!\.?\d)")
    tables = set(inserted) | set(golden)
    elsewhere = {t: {i for u in tables if u != t for i in (*inserted.get(u, ()), *golden.get(u, ()))} for t in tables}
    for cs in sets:
        for (table, key), c in cs.rows.items():
            pk = primary_keys.get(table, [])
            for r in (c.before, c.after):
                for col, v in (r or {}).items():
                    if v is None or isinstance(v, bool):
                        continue
                    if isinstance(v, int):
                        if (table, col) in fk_of:
                            continue  # a declared reference: renamed with its parent
                        if col in pk and c.before is not None:
                            continue  # an old row's key: it cannot refer to a row that did not exist
                        if c.before is None and pk == [col] and key == (v,) and v not in elsewhere.get(table, ()):
                            continue  # a new row's own generated id, in its key column only, and no other table's new rows have it
                        if v in ids:
                            return True
                    elif isinstance(v, str) and number.search(v) and not _iso_date(v):
                        return True
    return False


def _iso_date(v: str) -> bool:
    try:
        dt.datetime.fromisoformat(v)
    except ValueError:
        return False
    return True


def _matchings(mine: list[tuple[Any, str]], theirs: list[tuple[Any, str]]) -> list[dict[Any, Any]]:
    """Every mapping of `mine`'s keys onto `theirs`' that pairs equal signatures (a product of permutations per signature)."""
    groups: dict[str, tuple[list, list]] = {}
    for k, s in mine:
        groups.setdefault(s, ([], []))[0].append(k)
    for k, s in theirs:
        groups[s][1].append(k)
    out: list[dict[Any, Any]] = [{}]
    for s in sorted(groups):
        src, dst = groups[s]
        out = [{**m, **dict(zip(src, perm, strict=True))} for m in out for perm in itertools.permutations(dst)]
        if len(out) > MAX_ALIGNMENTS:
            return out[: MAX_ALIGNMENTS + 1]
    return out


def _rename(
    cs: ChangeSet, renaming: dict[str, dict[Any, Any]], primary_keys: dict[str, list[str]], references: dict[str, list[tuple[str, str]]]
) -> ChangeSet:
    cols: dict[str, dict[str, dict[Any, Any]]] = {}  # table -> column -> renaming of its values
    for parent, mapping in renaming.items():
        cols.setdefault(parent, {})[primary_keys[parent][0]] = mapping
        for child, col in references.get(parent, ()):
            cols.setdefault(child, {})[col] = mapping

    def row(table: str, r: Row | None) -> Row | None:
        if r is None or table not in cols:
            return r
        return {k: cols[table][k].get(v, v) if k in cols[table] else v for k, v in r.items()}

    out = []
    for (table, key), c in cs.rows.items():
        if table in cols and c.before is None:  # a new row's key: its own id, or a key column that refers to a renamed id
            key = tuple(cols[table][k].get(v, v) if k in cols[table] else v for k, v in zip(primary_keys[table], key, strict=True))
        out.append(RowChange(table, key, row(table, c.before), row(table, c.after)))
    return ChangeSet.from_changes(out, cs.rows_read)
