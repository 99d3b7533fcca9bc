"""PostgreSQL backend: the real server, for large worlds and many concurrent episodes.

Isolation by template databases: a task's start state is a database (`gs_tpl_<key>`) built once from a
per-domain base; each attempt gets `CREATE DATABASE gs_sb_<pid>_<n> TEMPLATE gs_tpl_<key>`, its own copy
of every table *and sequence*, and drops it on close. Concurrent attempts therefore never share a row, a
lock or a sequence. PostgreSQL's `max_connections` bounds how many sandboxes can be open at once, so
`open` waits for a free slot (`max_open`); async callers should bound their own concurrency to
`max_open` too, so that threads blocked in `open` never starve the episodes holding the slots.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import zlib
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from groundstate.state.base import Backend, Sandbox, Template, apply_patch, patch_key
from groundstate.state.capture import LOG_DDL, LOG_TABLE, postgres_triggers
from groundstate.state.db import PgDb

if TYPE_CHECKING:
    from groundstate.tasks import Domain

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def default_dsn() -> str:
    return os.environ.get("GROUNDSTATE_PG_DSN", DEFAULT_DSN)


def portable_to_postgres(schema_sql: str) -> str:
    """Adapt portable schema SQL to PostgreSQL: the dialect differs, the domain does not."""
    # SQLite's REAL is 8 bytes; PostgreSQL's REAL is 4 bytes and would round money.
    return re.sub(r"\bREAL\b", "DOUBLE PRECISION", schema_sql, flags=re.IGNORECASE)


class PostgresSandbox(Sandbox):
    backend: "PostgresBackend | None" = None
    dbname: str = ""

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.connection.raw.close()
        finally:
            assert self.backend is not None
            self.backend._drop(self.dbname)


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, dsn: str | None = None, scale: float = 1.0, max_open: int = 40):
        self.dsn = dsn or default_dsn()
        self.scale = scale
        self._templates: dict[str, Template] = {}
        self._lock = threading.Lock()
        self._admin_lock = threading.Lock()
        self._admin: psycopg.Connection | None = None
        self.max_open = max_open
        self._slots = threading.BoundedSemaphore(max_open)
        self._counter = itertools.count()
        self.opened = 0
        self.dropped = 0

    # -- connections ---------------------------------------------------------------------------
    def connect(self, dbname: str) -> psycopg.Connection:
        return psycopg.connect(make_conninfo(self.dsn, dbname=dbname), autocommit=True)

    def _admin_execute(self, query: sql.Composable | str, params: tuple = ()) -> list[tuple]:
        with self._admin_lock:
            if self._admin is None or self._admin.closed:
                self._admin = psycopg.connect(self.dsn, autocommit=True)
            cur = self._admin.execute(query, params)
            return cur.fetchall() if cur.description else []

    def _exists(self, dbname: str) -> bool:
        return bool(self._admin_execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)))

    def _ready(self, dbname: str) -> bool:
        """A template is usable once it was built to the end (marked by its database comment)."""
        rows = self._admin_execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", (dbname,)
        )
        return bool(rows) and rows[0][0] == "groundstate:ready"

    def _build(self, dbname: str, template: str | None, fill) -> None:
        """Create `dbname` (from `template`), fill it, mark it ready; safe across processes via an advisory lock."""
        lock_id = zlib.crc32(dbname.encode()) & 0x7FFFFFFF  # stable across processes
        self._admin_execute("SELECT pg_advisory_lock(%s)", (lock_id,))
        try:
            if self._ready(dbname):
                return
            if self._exists(dbname):  # a half-built leftover of a crashed process
                self._admin_execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))
            create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname))
            if template:
                create = sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(sql.Identifier(dbname), sql.Identifier(template))
            self._admin_execute(create)
            with self.connect(dbname) as conn:
                fill(conn)
            self._admin_execute(sql.SQL("COMMENT ON DATABASE {} IS 'groundstate:ready'").format(sql.Identifier(dbname)))
        finally:
            self._admin_execute("SELECT pg_advisory_unlock(%s)", (lock_id,))

    # -- templates -----------------------------------------------------------------------------
    def _base(self, domain: "Domain") -> str:
        name = f"gs_base_{domain.name}_{domain.content_hash}_{str(self.scale).replace('.', '_')}"

        def fill(conn: psycopg.Connection) -> None:
            with conn.transaction():
                conn.execute(portable_to_postgres(domain.schema_sql))
                for table, rows in domain.seed_rows(self.scale).items():
                    if not rows:
                        continue
                    cols = list(rows[0])
                    with conn.cursor().copy(
                        sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, cols)))
                    ) as copy:
                        for r in rows:
                            copy.write_row([r[c] for c in cols])
                conn.execute(LOG_DDL)
                for table in domain.tables:
                    for ddl in postgres_triggers(table, domain.columns[table], domain.primary_keys[table]):
                        conn.execute(ddl)
            conn.execute("ANALYZE")

        if not self._ready(name):
            self._build(name, None, fill)
        return name

    def prepare(self, domain: "Domain", patch: dict[str, list[dict[str, Any]]] | None = None) -> Template:
        patch = patch or {}
        key = patch_key(domain, patch)
        with self._lock:
            if key in self._templates:
                return self._templates[key]
            base = self._base(domain)
            name = base
            if patch:
                name = f"gs_tpl_{key}_{str(self.scale).replace('.', '_')}"

                def fill(conn: psycopg.Connection) -> None:
                    with conn.transaction():
                        apply_patch(PgDb(conn, domain.config.today), domain, patch)
                        conn.execute(f"DELETE FROM {LOG_TABLE}")

                if not self._ready(name):
                    self._build(name, base, fill)
            self._templates[key] = Template(self.name, domain, key, name, self)
            return self._templates[key]

    # -- sandboxes -----------------------------------------------------------------------------
    def open(self, template: Template) -> PostgresSandbox:
        self._slots.acquire()
        dbname = f"gs_sb_{os.getpid()}_{next(self._counter)}"
        try:
            self._admin_execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(sql.Identifier(dbname), sql.Identifier(template.handle))
            )
            conn = self.connect(dbname)
        except BaseException:
            self._slots.release()
            raise
        self.opened += 1
        sandbox = PostgresSandbox(template, PgDb(conn, template.domain.config.today))
        sandbox.backend, sandbox.dbname = self, dbname
        return sandbox

    def _drop(self, dbname: str) -> None:
        try:
            self._admin_execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
            self.dropped += 1
        finally:
            self._slots.release()

    def sandbox_databases(self) -> list[str]:
        """Sandbox databases of this process that still exist (0 after every sandbox is closed)."""
        rows = self._admin_execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (f"gs_sb_{os.getpid()}_%",))
        return [r[0] for r in rows]

    def cleanup_stale(self) -> list[str]:
        """Drop sandbox databases left by processes that no longer run (a crash skips `close`)."""
        dropped = []
        for (name,) in self._admin_execute("SELECT datname FROM pg_database WHERE datname LIKE %s", ("gs\\_sb\\_%",)):
            pid = int(name.split("_")[2])
            try:
                os.kill(pid, 0)
                continue
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            self._admin_execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            dropped.append(name)
        return dropped

    def drop_templates(self, domain: "Domain | None" = None) -> None:
        """Remove cached template databases (all of groundstate's, or one domain's bases)."""
        pattern = f"gs_base_{domain.name}_%" if domain else "gs\\_%"
        for (name,) in self._admin_execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (pattern,)):
            self._admin_execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        self._templates.clear()

    def close(self) -> None:
        with self._admin_lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None


def make_backend(name: str, dsn: str | None = None, **kw: Any) -> Backend:
    """A backend by name: `sqlite` (default) or `postgres`."""
    from groundstate.state.sqlite import SqliteBackend

    if name == "sqlite":
        return SqliteBackend(**kw)
    if name in ("postgres", "postgresql", "pg"):
        return PostgresBackend(dsn, **kw)
    raise ValueError(f"unknown backend {name!r}: use sqlite or postgres")
