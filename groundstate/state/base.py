"""Backends, templates and sandboxes: one isolated copy of the world per attempt.

`Backend.prepare(domain, patch)` builds a task's *template* (seed + data patch, change capture armed)
once; `Backend.open(template)` gives an attempt its own *sandbox*. A sandbox's `changes()` reads the
change log, so the grader's cost follows the rows changed, not the size of the database.
`Backend.fork(sandbox)` copies a live sandbox, change log included, into a new one of the same template.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from groundstate.state.capture import LOG_TABLE
from groundstate.state.changes import ChangeSet, Normaliser, RowChange, canon_value
from groundstate.state.db import Db, check_identifier


class WorldTools(Protocol):
    """A world's tools as a backend's grader replays them (`groundstate.tools.Toolset` is one)."""

    def call(self, db: Db, name: str, arguments: Any) -> Any: ...

    def openai_schemas(self) -> list[dict[str, Any]]: ...


class WorldConfig(Protocol):
    """The settings of a world that its state depends on."""

    description: str
    today: dt.date  # the date tools see as today (`Db.today`)
    volatile: Mapping[str, list[str]]  # columns masked before comparison (timestamps)
    free_text: Mapping[str, list[str]]  # columns compared by presence, not wording
    json_columns: Mapping[str, list[str]]  # columns canonicalised as JSON


class World(Protocol):
    """What a backend needs of a domain to build its worlds (a SQL domain folder, `groundstate.worlds.domain.Domain`, is one):
    the portable schema, the deterministic seed, the tables' columns and keys, the tools (to replay gold), and
    where its files are (errors name them)."""

    name: str
    path: Path
    schema_sql: str
    columns: dict[str, list[str]]
    primary_keys: dict[str, list[str]]
    references: dict[str, list[tuple[str, str]]]  # table -> (table, column) pairs whose foreign key refers to its key
    config: WorldConfig
    tools: WorldTools

    @property
    def content_hash(self) -> str: ...

    @property
    def tables(self) -> list[str]: ...

    def seed_rows(self, scale: float = 1.0) -> dict[str, list[dict[str, Any]]]: ...

    def system_prompt(self) -> str: ...


def patch_key(domain: World, patch: dict[str, list[dict[str, Any]]]) -> str:
    body = json.dumps(patch, sort_keys=True, default=str)
    return hashlib.sha256(f"{domain.name}:{domain.content_hash}:{body}".encode()).hexdigest()[:16]


def apply_patch(db: Db, domain: World, patch: dict[str, list[dict[str, Any]]]) -> None:
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
    domain: World
    key: str
    handle: Any = None  # backend-specific: serialized bytes (SQLite) or a database name (PostgreSQL)
    owner: Backend | None = field(default=None, repr=False)  # the backend that opens sandboxes from it


@dataclass
class Sandbox(ABC):
    """One attempt's private world.

    Blocking calls made on it from other threads (a tool, the grader) run inside `in_use()`. `close()` while such a
    call is in progress (an attempt cut off by a time limit, or cancelled) asks the database to abandon the
    statement (`interrupt`) and leaves the release to the last call as it returns: a connection is never closed,
    nor a clone pooled for the next attempt, under a statement that is still running.
    """

    template: Template
    connection: Db
    closed: bool = field(default=False, init=False)
    _users: int = field(default=0, init=False, repr=False)
    _close_pending: bool = field(default=False, init=False, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @contextlib.contextmanager
    def in_use(self) -> Iterator[Sandbox]:
        """Hold the sandbox open for one blocking call (raises `RuntimeError` once it is closed or closing)."""
        with self._guard:
            if self.closed or self._close_pending:
                raise RuntimeError("the sandbox was released: the attempt is over")
            self._users += 1
        try:
            yield self
        finally:
            with self._guard:
                self._users -= 1
                release = self._users == 0 and self._close_pending
                if release:
                    self.closed = True
            if release:
                self._release()

    def close(self) -> None:
        """Release the sandbox now, or, while a call is in progress, interrupt it and release when it returns."""
        with self._guard:
            if self.closed or self._close_pending:
                return
            busy = self._users > 0
            if busy:
                self._close_pending = True
            else:
                self.closed = True
        if busy:
            self.connection.revoke()  # the worker may start no further statement on a sandbox being released
            threading.Thread(target=self._interrupt_until_released, name="groundstate-release", daemon=True).start()
        else:
            self._release()

    def _interrupt_until_released(self) -> None:
        """Interrupt the worker's statement until it lets go: an interrupt that lands just before a statement starts
        is lost, so it is repeated. Under the guard, so that no interrupt ever reaches a connection being closed."""
        while True:
            with self._guard:
                if self.closed:
                    return
                self.interrupt()
            time.sleep(0.05)

    @abstractmethod
    def _release(self) -> None:
        """Give the sandbox back (close its connection or return its clone to the pool); called exactly once."""

    @abstractmethod
    def interrupt(self) -> None:
        """Ask the database to abandon the statement in progress, from any thread (best effort; never called once the
        sandbox is released)."""

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

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ForkUnsupported(NotImplementedError):
    """What cannot be forked (a backend or an environment without a copy of its live state) says so, naming itself."""


class Backend(ABC):
    """Turns (domain, patch) into templates and templates into sandboxes."""

    name: str
    max_open: int | None = None  # how many sandboxes may be open at once (None: no limit)

    @abstractmethod
    def prepare(self, domain: World, patch: dict[str, list[dict[str, Any]]] | None = None) -> Template: ...

    @abstractmethod
    def open(self, template: Template) -> Sandbox: ...

    def fork(self, sandbox: Sandbox) -> Sandbox:
        """A new sandbox of `sandbox`'s template in exactly `sandbox`'s current state: its rows, its change log (so the
        fork's `changes()` are still taken from the template, the attempt's start) and its sequences; independent of
        it from then on, and released, counted and reaped like any sandbox this backend opened.

        Contract: called between tool calls, while no statement runs on `sandbox` (the caller holds it `in_use`);
        `sandbox` stays usable and in the same state. `ForkUnsupported` where the backend cannot copy a live sandbox."""
        raise ForkUnsupported(f"the {self.name} backend cannot fork a sandbox")

    def spec(self) -> tuple[str, str | None]:
        """(name, DSN) from which `groundstate.state.make_backend` builds an equal backend in another process."""
        return (self.name, None)

    def cleanup_stale(self) -> list[str]:
        """Drop what dead processes left behind on a shared server (their sandboxes); the names dropped."""
        return []

    def close(self) -> None:  # noqa: B027 - optional: a backend that holds nothing keeps the no-op
        """Release what the backend holds (templates, admin connections)."""
