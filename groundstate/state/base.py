"""Backends, templates and sandboxes: one isolated copy of the world per attempt.

`Backend.prepare(domain, patch)` builds a task's *template* (seed + data patch, change capture armed)
once; `Backend.open(template)` gives an attempt its own *sandbox*. A sandbox's `changes()` reads the
change log, so the grader's cost follows the rows changed, not the size of the database.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from groundstate.state.capture import LOG_TABLE
from groundstate.state.changes import ChangeSet, Normaliser, RowChange, canon_value
from groundstate.state.db import Db, check_identifier

if TYPE_CHECKING:
    from groundstate.tasks import Domain


def patch_key(domain: "Domain", patch: dict[str, list[dict[str, Any]]]) -> str:
    body = json.dumps(patch, sort_keys=True, default=str)
    return hashlib.sha256(f"{domain.name}:{domain.content_hash}:{body}".encode()).hexdigest()[:16]


def apply_patch(db: Db, domain: "Domain", patch: dict[str, list[dict[str, Any]]]) -> None:
    """Upsert the patch rows (portable: UPDATE by primary key, INSERT when nothing matched)."""
    for table, rows in patch.items():
        check_identifier(table)
        pk = domain.primary_keys[table]
        for row in rows:
            cols = [check_identifier(c) for c in row if c not in pk]
            where = " AND ".join(f"{c} = ?" for c in pk)
            n = 0
            if cols:
                sets = ", ".join(f"{c} = ?" for c in cols)
                n = db.execute(f"UPDATE {table} SET {sets} WHERE {where}", *[row[c] for c in cols], *[row[c] for c in pk])
            elif db.scalar(f"SELECT COUNT(*) AS n FROM {table} WHERE {where}", *[row[c] for c in pk]):
                n = 1
            if n == 0:
                names = list(row)
                db.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})", *row.values())


@dataclass
class Template:
    """A task's start state, built once; sandboxes are opened from it."""

    backend: str
    domain: "Domain"
    key: str
    handle: Any = None  # backend-specific: serialized bytes (SQLite) or a database name (PostgreSQL)
    owner: "Backend | None" = field(default=None, repr=False)  # the backend that opens sandboxes from it


@dataclass
class Sandbox(ABC):
    """One attempt's private world."""

    template: Template
    connection: Db
    closed: bool = field(default=False, init=False)

    @property
    def normaliser(self) -> Normaliser:
        c = self.template.domain.config
        return Normaliser.from_config(c.volatile, c.free_text, c.json_columns)

    def changes(self) -> ChangeSet:
        """Canonical before/after images of every row written since the template."""
        db, domain, norm = self.connection, self.template.domain, self.normaliser
        start = db.rows_read
        log = db.query(f"SELECT tbl, pk, old FROM {LOG_TABLE}")
        by_table: dict[str, list[tuple[list, Any]]] = {}
        for entry in log:
            by_table.setdefault(entry["tbl"], []).append((json.loads(entry["pk"]), entry["old"]))
        out = []
        for table, entries in by_table.items():
            pk = domain.primary_keys[table]
            current = self._fetch(table, pk, [k for k, _ in entries])
            for key_values, old in entries:
                key = tuple(canon_value(v) for v in key_values)
                before = norm.canon_row(table, json.loads(old)) if old is not None else None
                after = norm.canon_row(table, current.get(key))
                out.append(RowChange(table, key, before, after))
        return ChangeSet.from_changes(out, rows_read=db.rows_read - start)

    def _fetch(self, table: str, pk: list[str], keys: list[list]) -> dict[tuple, dict]:
        """Current rows for the given keys, batched (one query per few hundred keys)."""
        db, found = self.connection, {}
        cols = self.template.domain.columns[table]
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            if len(pk) == 1:
                where = f"{pk[0]} IN ({', '.join('?' for _ in chunk)})"
                params = [k[0] for k in chunk]
            else:
                where = " OR ".join("(" + " AND ".join(f"{c} = ?" for c in pk) + ")" for _ in chunk)
                params = [v for k in chunk for v in k]
            for row in db.query(f"SELECT {', '.join(cols)} FROM {table} WHERE {where}", *params):
                found[tuple(canon_value(row[c]) for c in pk)] = row
        return found

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Backend(ABC):
    """Turns (domain, patch) into templates and templates into sandboxes."""

    name: str
    max_open: int | None = None  # how many sandboxes may be open at once (None: no limit)

    @abstractmethod
    def prepare(self, domain: "Domain", patch: dict[str, list[dict[str, Any]]] | None = None) -> Template: ...

    @abstractmethod
    def open(self, template: Template) -> Sandbox: ...

    def close(self) -> None:
        """Release what the backend holds (templates, admin connections)."""
