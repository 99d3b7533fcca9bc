"""The connection a domain's tools receive: one small API over SQLite and PostgreSQL.

Tools write SQL once, with `?` placeholders; the backend adapts the dialect. Arguments are
always bound as parameters, never formatted into SQL.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time
from collections.abc import Iterator
from typing import Any

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_identifier(name: str) -> str:
    """Return `name` if it is a plain SQL identifier, else raise: identifiers cannot be bound as parameters."""
    if not _IDENT.match(name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return name


class Db:
    """A sandbox connection as tools see it: `query`, `one`, `execute`, `insert`, and the domain's fixed `today`."""

    dialect: str = "sqlite"

    def __init__(self, raw: Any, today: dt.date | None = None):
        self.raw = raw
        self.today = today or dt.date(2026, 1, 1)
        self.rows_read = 0  # rows fetched through this wrapper (tools and grader), for cost accounting
        self.revoked = False  # set when the attempt is over: a worker still running may start no new statement

    @property
    def broken(self) -> bool:
        """Whether the connection to the database is gone (a server restart); an in-process SQLite one never is."""
        return False

    def revoke(self) -> None:
        """Refuse every later statement (`RuntimeError`): the sandbox is being released under a running call."""
        self.revoked = True

    # -- dialect hooks -------------------------------------------------------------------------
    def _sql(self, sql: str) -> str:
        return sql

    def _cursor_execute(self, sql: str, params: tuple) -> Any:
        if self.revoked:
            raise RuntimeError("the sandbox was released: the attempt is over")
        return self._run(sql, params)

    def _run(self, sql: str, params: tuple) -> Any:
        return self.raw.execute(self._sql(sql), params)

    # -- public API ----------------------------------------------------------------------------
    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        """Run a SELECT and return its rows as dicts."""
        cur = self._cursor_execute(sql, params)
        cols = [d[0] for d in cur.description] if cur.description else []
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        self.rows_read += len(rows)
        return rows

    def query_bounded(self, sql: str, seconds: float) -> list[dict[str, Any]]:
        """`query` for a task check: read-only, and given up after `seconds` (a check that never ends, e.g. an
        unbounded recursive CTE). SQLite runs it under `query_only` (any write fails) and aborts it from a progress
        handler, raising `sqlite3.OperationalError`."""
        deadline = time.monotonic() + seconds
        self.raw.execute("PRAGMA query_only = ON")
        self.raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
        try:
            return self.query(sql)
        finally:
            self.raw.set_progress_handler(None, 0)
            self.raw.execute("PRAGMA query_only = OFF")

    def one(self, sql: str, *params: Any) -> dict[str, Any] | None:
        """Run a SELECT and return the first row, or None."""
        rows = self.query(sql, *params)
        return rows[0] if rows else None

    def scalar(self, sql: str, *params: Any) -> Any:
        """Run a SELECT and return the first column of the first row, or None."""
        row = self.one(sql, *params)
        return next(iter(row.values())) if row else None

    def execute(self, sql: str, *params: Any) -> int:
        """Run a write statement and return the number of rows it affected."""
        cur = self._cursor_execute(sql, params)
        return cur.rowcount

    def insert(self, table: str, **values: Any) -> int:
        """Insert one row; when `id` is not given it is max(id) + 1, so ids are identical on every backend."""
        check_identifier(table)
        if "id" not in values:
            values["id"] = int(self.scalar(f"SELECT COALESCE(MAX(id), 0) + 1 AS n FROM {table}"))
        cols = [check_identifier(c) for c in values]
        marks = ", ".join("?" for _ in cols)
        self.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", *values.values())
        return int(values["id"])

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """All-or-nothing block: a tool that fails part-way leaves no partial write."""
        self.raw.execute("SAVEPOINT gs_tool")
        try:
            yield
        except BaseException:
            self.raw.execute("ROLLBACK TO SAVEPOINT gs_tool")
            self.raw.execute("RELEASE SAVEPOINT gs_tool")
            raise
        else:
            self.raw.execute("RELEASE SAVEPOINT gs_tool")


class PgDb(Db):
    """PostgreSQL flavour: `?` placeholders become `%s` (and literal `%` is escaped).

    Every statement goes through the extended query protocol, which parses exactly one statement: SQL that one
    dialect reads as one statement and the other as several (they disagree on nested block comments) is
    refused as a whole instead of running in pieces, as the simple protocol would.
    """

    dialect = "postgres"

    @property
    def broken(self) -> bool:
        """Lost (a server restart), or closed under the attempt (a fork that could not commit or reconnect it)."""
        return bool(self.raw.broken or self.raw.closed)

    def _sql(self, sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    def _run(self, sql: str, params: tuple) -> Any:
        # psycopg sends a statement without parameters over the simple protocol, which runs every statement in
        # the string; asking for binary results is its public switch to the extended protocol in every case.
        # Without parameters (every task check) the SQL goes as written: a `?` or `%` in it is text, such as
        # `LIKE '%?%'`, not a placeholder to translate.
        if not params:
            return self.raw.execute(sql, None, prepare=False, binary=True)
        return self.raw.execute(self._sql(sql), params, prepare=False, binary=True)

    def query_bounded(self, sql: str, seconds: float) -> list[dict[str, Any]]:
        """`query` read-only (`SET TRANSACTION READ ONLY`: any write, `nextval` included, fails) under a server-side
        `statement_timeout`, inside a savepoint that is always rolled back: the attempt's transaction goes on
        read-write with its own settings, and a cancelled or refused statement does not abort it."""
        with self.raw.transaction(force_rollback=True):
            self.raw.execute("SET TRANSACTION READ ONLY")
            self.raw.execute(f"SET LOCAL statement_timeout = {max(1, int(seconds * 1000))}")
            return self.query(sql)

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        with self.raw.transaction():
            yield
