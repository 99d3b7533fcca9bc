"""SQLite backend: the embedded default.

The task template is a serialized in-memory database (seed + patch + change-capture triggers); each
attempt deserializes its own private copy, which costs a copy of the database pages. A fork copies the live
sandbox's pages instead (the backup API): rows, change log and `sqlite_sequence` as they are now.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from typing import Any

from groundstate.state.base import Backend, Sandbox, Template, World, apply_patch, patch_key
from groundstate.state.capture import LOG_DDL, LOG_TABLE, sqlite_triggers
from groundstate.state.db import Db
from groundstate.tasks import TaskFileError

LARGE_WORLD_ROWS = 20_000  # from this many seed rows on, a world's database uses LARGE_PAGE-byte pages
LARGE_PAGE = 65_536


def page_size(rows: int) -> int:
    """The page size of a world of `rows` seed rows: SQLite's default 4 KiB, and 64 KiB for a large world. An open
    copies the template's bytes whole (one memcpy), a fork copies the live database page by page (the backup API), so
    a fork of a 100k-row world cost 2.7× an open at 4 KiB pages and 1.3× at 64 KiB (benchmarks/RESULTS.md, "Fork of a
    live sandbox vs open"); a small world keeps small pages, as every table and index takes at least one."""
    return LARGE_PAGE if rows >= LARGE_WORLD_ROWS else 4096


def _connect() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


# What a sandbox connection may never do, whatever SQL reaches it (a tool's, a task check's): open or write
# other files (ATTACH, which VACUUM INTO also needs), change settings (pragma writes), change the schema, or
# call functions that load code or touch files. Tools only read and write rows; the template is built
# before the guard is installed.
_DDL = {
    sqlite3.SQLITE_CREATE_INDEX,
    sqlite3.SQLITE_CREATE_TABLE,
    sqlite3.SQLITE_CREATE_TEMP_INDEX,
    sqlite3.SQLITE_CREATE_TEMP_TABLE,
    sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
    sqlite3.SQLITE_CREATE_TEMP_VIEW,
    sqlite3.SQLITE_CREATE_TRIGGER,
    sqlite3.SQLITE_CREATE_VIEW,
    sqlite3.SQLITE_DROP_INDEX,
    sqlite3.SQLITE_DROP_TABLE,
    sqlite3.SQLITE_DROP_TEMP_INDEX,
    sqlite3.SQLITE_DROP_TEMP_TABLE,
    sqlite3.SQLITE_DROP_TEMP_TRIGGER,
    sqlite3.SQLITE_DROP_TEMP_VIEW,
    sqlite3.SQLITE_DROP_TRIGGER,
    sqlite3.SQLITE_DROP_VIEW,
    sqlite3.SQLITE_ALTER_TABLE,
    sqlite3.SQLITE_CREATE_VTABLE,
    sqlite3.SQLITE_DROP_VTABLE,
}
_READ_PRAGMAS = {  # pragmas whose argument names what to read, not a new setting
    "table_info",
    "table_xinfo",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "foreign_key_check",
    "integrity_check",
    "quick_check",
}
# `query_only` may be set: it only takes write access away, and it is how a task check runs read-only (a check is
# one statement, so it cannot both clear the flag and write).
_SETTABLE_PRAGMAS = _READ_PRAGMAS | {"query_only"}
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
_WRITES = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE, sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT}


def sandbox_authorizer(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
    """SQLite authorizer of sandbox connections: rows yes; files, settings, schema and extensions no."""
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH) or action in _DDL:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA and arg2 is not None and (arg1 or "").lower() not in _SETTABLE_PRAGMAS:
        return sqlite3.SQLITE_DENY  # reading a pragma is harmless; setting one is not
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def check_authorizer(action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
    """SQLite authorizer under which task checks compile at load: the sandbox's, and no write of any kind (rows,
    transactions, savepoints, settings). SQLite consults it for every action a statement can take, DML inside a
    CTE included, so a check that compiles under it is read-only by construction."""
    if action in _WRITES or (action == sqlite3.SQLITE_PRAGMA and arg2 is not None and (arg1 or "").lower() not in _READ_PRAGMAS):
        return sqlite3.SQLITE_DENY
    return sandbox_authorizer(action, arg1, arg2, db, trigger)


def load_rows(conn: sqlite3.Connection, rows: dict[str, list[dict[str, Any]]]) -> None:
    for table, table_rows in rows.items():
        if not table_rows:
            continue
        cols = list(table_rows[0])
        conn.executemany(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
            [tuple(r[c] for c in cols) for r in table_rows],
        )


class SqliteSandbox(Sandbox):
    backend: SqliteBackend | None = None

    def _release(self) -> None:
        self.connection.raw.close()
        if self.backend is not None:
            self.backend._released()

    def interrupt(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.connection.raw.interrupt()


class SqliteBackend(Backend):
    name = "sqlite"

    def __init__(self, scale: float = 1.0):
        self.scale = scale
        self._bases: dict[str, bytes] = {}
        self._templates: dict[str, Template] = {}
        self._lock = threading.Lock()
        self.in_use = 0  # sandboxes open now: 0 once every attempt has closed its own (leaks show up here)

    def _base(self, domain: World) -> bytes:
        key = f"{domain.name}:{domain.content_hash}"
        if key not in self._bases:
            seed = domain.seed_rows(self.scale)
            conn = _connect()
            conn.execute(f"PRAGMA page_size = {page_size(sum(len(r) for r in seed.values()))}")
            conn.executescript(domain.schema_sql)
            conn.execute("BEGIN")
            try:
                load_rows(conn, seed)
            except sqlite3.Error as e:  # rows that break the schema's constraints: the seed's fault, named before any attempt
                conn.close()
                raise TaskFileError(domain.path / "seed.py", f"the seed rows do not load: {e}") from None
            conn.execute("COMMIT")
            conn.execute(LOG_DDL)
            for table in domain.tables:
                for ddl in sqlite_triggers(table, domain.columns[table], domain.primary_keys[table]):
                    conn.execute(ddl)
            self._bases[key] = conn.serialize()
            conn.close()
        return self._bases[key]

    def prepare(self, domain: World, patch: dict[str, list[dict[str, Any]]] | None = None) -> Template:
        patch = patch or {}
        key = patch_key(domain, patch) + f":{self.scale}"
        with self._lock:
            if key not in self._templates:
                base = self._base(domain)
                if patch:
                    conn = _connect()
                    conn.deserialize(base)
                    db = Db(conn, domain.config.today)
                    conn.execute("BEGIN")
                    apply_patch(db, domain, patch)
                    conn.execute(f"DELETE FROM {LOG_TABLE}")
                    conn.execute("COMMIT")
                    base = conn.serialize()
                    conn.close()
                self._templates[key] = Template(self.name, domain, key, base, self)
            return self._templates[key]

    def open(self, template: Template) -> SqliteSandbox:
        return self._sandbox(template, template.handle)

    def fork(self, sandbox: Sandbox) -> SqliteSandbox:
        """A new in-memory sandbox, a page-by-page copy of `sandbox`'s live database (see `Backend.fork`). In autocommit
        mode every tool call's writes are committed when it returns; a transaction still open (a call in progress)
        is refused rather than copied half done."""
        if not isinstance(sandbox, SqliteSandbox) or sandbox.backend is not self:
            raise ValueError("a sandbox is forked by the backend that opened it")
        raw = sandbox.connection.raw
        if raw.in_transaction:
            raise RuntimeError("the sandbox has a transaction in progress: fork it between tool calls")
        conn = _connect()
        try:
            raw.backup(conn)  # page by page into the new in-memory database: cheaper than serialize + deserialize
        except BaseException:
            conn.close()
            raise
        return self._sandbox(sandbox.template, conn)

    def _sandbox(self, template: Template, source: bytes | sqlite3.Connection) -> SqliteSandbox:
        """A sandbox of `template` on `source`: a serialized database to deserialize, or a connection already filled."""
        if isinstance(source, sqlite3.Connection):
            conn = source
        else:
            conn = _connect()
            conn.deserialize(source)
        conn.execute("PRAGMA foreign_keys = ON")
        conn.set_authorizer(sandbox_authorizer)
        sandbox = SqliteSandbox(template, Db(conn, template.domain.config.today))
        sandbox.backend = self
        with self._lock:
            self.in_use += 1
        return sandbox

    def _released(self) -> None:
        with self._lock:
            self.in_use -= 1
