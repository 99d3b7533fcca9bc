"""PostgreSQL backend: the real server, for large worlds and many concurrent episodes.

Isolation scheme: *template databases, pooled clones, one transaction per attempt*.
- A task's start state is a database (`gs_tpl_<key>`) built once from a per-domain base (`gs_base_…`).
- A sandbox is a private clone (`CREATE DATABASE gs_sb_<host>_<pid>_o<owner>_<n> TEMPLATE gs_tpl_<key>`) with its
  own tables, triggers and sequences, used by one attempt at a time inside one transaction (`BEGIN` at open).
- At close the transaction is rolled back, which restores the clone exactly (rows and change log; any
  sequences are reset to their template values), and the clone goes back to a per-template pool for the
  next attempt of the same task. Concurrent attempts never share a database, a row lock or a sequence.
- A fork (`fork`) is a clone of a live sandbox's database (`CREATE DATABASE … TEMPLATE gs_sb_…`) after its
  transaction is committed; both are then dropped at close instead of pooled.
Cloning costs tens of milliseconds; reusing a pooled clone costs a ROLLBACK. PostgreSQL's
`max_connections` bounds how many clones can be open at once (`max_open`); when the pool is full, idle
clones of other templates are dropped to make room. Async callers should bound their own concurrency to
`max_open` too, so that threads blocked in `open` never starve the episodes holding the slots.

Privileges: sandbox connections *log in* as `groundstate_sandbox` (rows of the sandbox, nothing else), so no
session that SQL can reach ever held superuser rights and `RESET ROLE` has nothing to return to; the DSN's
user only runs the maintenance connections (CREATE DATABASE, templates, grants on a fresh clone). The role
reuses the DSN's host, port and password (a password in the DSN or `PGPASSWORD` is set on the role when it is
created or updated; trust and peer need nothing). Every statement on a sandbox goes through the extended protocol (`PgDb`), which runs
one statement or none. A clone goes back to the pool only if its session is exactly as handed out
(see `_pristine`).

Server restarts: every pooled connection (maintenance and clone) is checked before reuse and replaced
when the server dropped it, so a restart costs only the attempts whose sandboxes were open at the time
(their statements fail, and the runner records system errors). A pooled clone database survives the
restart clean (it was rolled back and verified before pooling) and is simply reconnected. A clone that
cannot be dropped while the server is down is remembered and dropped by the next `drain`/`close`.

Owners: a process killed while it holds clones (SIGKILL, out of memory, a time limit) cannot drop them. Each backend
holds a session-level advisory lock, (`OWNER_LOCK_CLASS`, its owner key), on a connection of its own for as long as
it has clones, and the key is in every clone's name (`o<owner>`). The server releases the lock when that session
ends, which a killed process's does at once; so a clone whose owner's lock is free and that nobody is connected to
belongs to no live process, whatever its pid or host (a pid can be reused, and machines sharing one server cannot
see each other's processes). `cleanup_stale` drops those (a plain DROP DATABASE, which fails rather than end a
session), and runs at start-up: when `make_backend` makes the backend (`check_reachable`) or before its first clone.
After a server restart the owner takes its lock again before it reconnects to or creates a clone.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import re
import secrets
import threading
import time
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus

from groundstate.state.base import Backend, Sandbox, Template, World, apply_patch, patch_key
from groundstate.state.capture import LOG_DDL, LOG_TABLE, postgres_triggers
from groundstate.state.db import PgDb
from groundstate.tasks import TaskFileError

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"

log = logging.getLogger(__name__)


def default_dsn() -> str:
    return os.environ.get("GROUNDSTATE_PG_DSN", DEFAULT_DSN)


class BackendUnreachable(ValueError):
    """The PostgreSQL server of a DSN cannot be reached or refuses the login: the message says which and how to fix it."""


class PoolExhausted(ValueError):
    """More sandboxes must be open at once than the server has connections for; `most` is how many it can hold now."""

    def __init__(self, message: str, most: int):
        super().__init__(message)
        self.most = most


def describe_dsn(dsn: str) -> str:
    """`user@host:port/dbname` of a DSN, without its password (a DSN psycopg cannot parse is named as unparseable)."""
    try:
        d = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparseable --pg-dsn / $GROUNDSTATE_PG_DSN"
    return f"{d.get('user') or os.environ.get('PGUSER') or 'the default user'}@{d.get('host') or 'localhost'}:{d.get('port') or 5432}/{d.get('dbname') or 'postgres'}"


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (
        text[0] if text else type(e).__name__
    ) + " (give the server with --pg-dsn or $GROUNDSTATE_PG_DSN, e.g. postgresql://postgres@127.0.0.1:5432/postgres)"


def portable_to_postgres(schema_sql: str) -> str:
    """Adapt portable schema SQL to PostgreSQL: the dialect differs, the domain does not."""
    # SQLite's REAL is 8 bytes; PostgreSQL's REAL is 4 bytes and would round money.
    return re.sub(r"\bREAL\b", "DOUBLE PRECISION", schema_sql, flags=re.IGNORECASE)


SANDBOX_PREFIX = "gs_sb_"  # sandbox (clone) databases are named gs_sb_<host>_<pid>_o<owner>_<n>
# The advisory lock class of sandbox owners: (OWNER_LOCK_CLASS, owner key) is held by a live backend with clones.
OWNER_LOCK_CLASS = zlib.crc32(b"groundstate sandbox owner") & 0x7FFFFFFF
_OWNED_NAME = re.compile(r"gs_sb_h[0-9a-f]{8}_\d+_o([0-9a-f]{8})_\d+")
# names from before owner keys, whose pid (of this machine, or of a name without host tag) is all that tells their owner
_PID_NAME = re.compile(r"gs_sb_(?:(h[0-9a-f]{8})_)?(\d+)_\d+_\d+")
SANDBOX_ROLE = "groundstate_sandbox"
# A LOGIN role: sandbox sessions start as it (a SET ROLE from a superuser session could be undone by RESET ROLE).
# The attributes are (re)asserted on every backend start, so a role left by an older version is brought in line.
# Serialised by an advisory lock: processes starting on a fresh server at once would otherwise race on the
# role's catalog row ("tuple concurrently updated"), which no exception handler in the block can catch cleanly.
_ROLE_ATTRIBUTES = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOBYPASSRLS NOREPLICATION"
_CREATE_SANDBOX_ROLE = f"""DO $$ BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('{SANDBOX_ROLE}'));
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{SANDBOX_ROLE}') THEN
    CREATE ROLE {SANDBOX_ROLE} {_ROLE_ATTRIBUTES};
  ELSE
    ALTER ROLE {SANDBOX_ROLE} {_ROLE_ATTRIBUTES};
  END IF;
END $$"""

# What a session must look like when its clone goes back to the pool (after the attempt was rolled back): logged
# in as it was and acting as itself, no row change left (a committed write would show in the change log), and
# nothing that outlives a transaction: session settings, advisory locks, PREPAREd statements, WITH HOLD cursors,
# LISTEN channels, temporary tables. (Statements the driver itself prepares are not the SQL's doing.)
_PRISTINE = f"""SELECT session_user = %s AND current_user = session_user
  AND NOT EXISTS (SELECT FROM {LOG_TABLE})
  AND NOT EXISTS (SELECT FROM pg_settings WHERE source = 'session')
  AND NOT EXISTS (SELECT FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory')
  AND NOT EXISTS (SELECT FROM pg_prepared_statements WHERE from_sql)
  AND NOT EXISTS (SELECT FROM pg_cursors WHERE is_holdable)
  AND NOT EXISTS (SELECT FROM pg_listening_channels())
  AND NOT EXISTS (SELECT FROM pg_class WHERE relnamespace = pg_my_temp_schema())"""


def grant_rows(conn: psycopg.Connection, role: str) -> None:
    """Let `role` read and write the rows of the database `conn` is connected to, and nothing else.

    Connected as a superuser, any SQL reaching the sandbox could read server files (`pg_read_file`,
    `COPY ... FROM`), run programs (`COPY ... TO PROGRAM`), load extensions such as dblink to reach other
    databases, or change the schema. `groundstate_sandbox` has no such rights: tools and checks only need
    rows. Run by the owner on a fresh clone (its grants then belong to the clone).
    """
    ident = sql.Identifier(role)
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(ident))
    conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}").format(ident))
    conn.execute(sql.SQL("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {}").format(ident))


def _close_at_exit(ref: weakref.ref[PostgresBackend]) -> None:
    backend = ref()
    if backend is not None:
        try:
            backend.close()
            if backend.cloned:
                # sandboxes still in use (an episode abandoned without close): nothing will release them now, since at
                # exit an adapter's finaliser can no longer hand the release to a thread
                for name in backend.sandbox_databases():
                    backend._drop_database(name)
        except Exception:  # noqa: BLE001 - best effort at interpreter exit; cleanup_stale catches the rest
            pass


class _Clone:
    """A pooled sandbox database and its connection."""

    def __init__(self, dbname: str, conn: psycopg.Connection, template_key: str, sequences: dict[str, int]):
        self.dbname, self.conn, self.template_key, self.sequences = dbname, conn, template_key, sequences
        self.committed = False  # an attempt's writes were committed (a fork): a ROLLBACK no longer restores the template
        self.forking = threading.Lock()  # one fork of this database at a time (each closes and reopens its connection)


class PostgresSandbox(Sandbox):
    backend: PostgresBackend | None = None
    clone: _Clone | None = None

    @property
    def dbname(self) -> str:
        return self.clone.dbname if self.clone else ""

    def _release(self) -> None:
        assert self.backend is not None and self.clone is not None
        self.backend._release(self.clone)

    def interrupt(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self.connection.raw.cancel_safe(timeout=5)


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, dsn: str | None = None, scale: float = 1.0, max_open: int = 32):
        self.dsn = dsn or default_dsn()
        self.scale = scale
        self.max_open = max_open
        self._templates: dict[str, Template] = {}
        self._lock = threading.Lock()
        self._admins: list[psycopg.Connection] = []
        self._admin_pool_lock = threading.Lock()
        self._pool = threading.Condition()
        self._idle: OrderedDict[str, _Clone] = OrderedDict()  # dbname -> idle clone, least recently used first
        self._clones = 0  # clones in existence (idle or in use)
        self._counter = itertools.count()
        # in every clone's name and locked while clones exist: several backends in one process never share names, and
        # `cleanup_stale` anywhere tells a live owner's clones from a dead one's (see the module docstring)
        self._owner_key = secrets.randbits(31)
        self._owner_conn: psycopg.Connection | None = None
        self._owner_lock = threading.Lock()
        self._started = False  # cleanup_stale ran at start-up
        self.reaped: list[str] = []  # sandbox databases of gone owners dropped at start-up
        atexit.register(_close_at_exit, weakref.ref(self))  # pooled clones must not outlive the process
        self.cloned = 0  # CREATE DATABASE count
        self.reused = 0  # sandboxes served from the pool
        self.forked = 0  # sandboxes cloned from a live sandbox (`fork`)
        self.in_use = 0
        self.reconnected = 0  # pooled connections found dead (a server restart) and replaced
        self._orphans: set[str] = set()  # clone databases whose DROP failed (server down): retried by drain()
        self._is_superuser: bool | None = None  # decided on the first clone
        self._role_lock = threading.Lock()

    # -- connections ---------------------------------------------------------------------------
    def check_reachable(self) -> None:
        """Connect once to the DSN's database: `BackendUnreachable` naming the server (never the password) and the fix
        when that fails, so a command stops in one line before any work instead of failing every attempt. Then the
        start-up reaping (`_start`): sandboxes of processes that are gone are dropped, and how many is logged."""
        try:
            self._admin_execute("SELECT 1")
        except psycopg.Error as e:
            raise BackendUnreachable(f"cannot reach PostgreSQL at {describe_dsn(self.dsn)}: {first_line(e)}") from None
        self._start()

    def _start(self) -> None:
        """Once per backend, before its first clone: drop the sandboxes whose owner is gone (`reaped`), and say how many
        (a warning on this module's logger, which a command without logging set up prints to stderr)."""
        with self._owner_lock:
            if self._started:
                return
            self._started = True
        try:
            self.reaped = self.cleanup_stale()
        except psycopg.Error as e:  # best effort: a leftover database must not stop the command
            log.warning("could not drop the sandbox databases of processes that are gone on %s: %s", describe_dsn(self.dsn), _first_line(e))
        if self.reaped:
            log.warning(
                "dropped %d sandbox database(s) on %s left by processes that were killed or crashed", len(self.reaped), describe_dsn(self.dsn)
            )

    def _hold_owner_lock(self) -> None:
        """Make sure this backend's owner lock is held (taken on its first clone, again after a server restart ended
        the session that held it) before a clone is created or reconnected to."""
        self._start()
        with self._owner_lock:
            conn = self._owner_conn
            if conn is not None and self._alive(conn):
                return
            self._owner_conn = None
            conn = self._connect(conninfo_to_dict(self.dsn).get("dbname") or "postgres")
            try:
                # the session must last as long as the process: a server-side idle timeout would free the lock
                with contextlib.suppress(psycopg.errors.UndefinedObject, psycopg.errors.InsufficientPrivilege):
                    conn.execute("SET idle_session_timeout = 0")  # PostgreSQL 14+
                while not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (OWNER_LOCK_CLASS, self._owner_key)).fetchone()[0]:
                    with self._pool:
                        if self._clones == 0 and not self._orphans and self.cloned == 0:
                            # another live backend drew the same key (or a reaper is checking it): draw another
                            self._owner_key = secrets.randbits(31)
                            continue
                    # our own key, held by a reaper deciding about our clones after a restart: wait for its decision
                    conn.execute("SET lock_timeout = '60s'")
                    conn.execute("SELECT pg_advisory_lock(%s, %s)", (OWNER_LOCK_CLASS, self._owner_key))
                    conn.execute("RESET lock_timeout")
                    break
            except BaseException:
                conn.close()
                raise
            self._owner_conn = conn

    def connect(self, dbname: str) -> psycopg.Connection:
        """An autocommit connection to `dbname`: sandbox databases as the sandbox login (`sandbox_user`),
        any other database as the DSN's user."""
        return self._connect(dbname, self.sandbox_user() if dbname.startswith(SANDBOX_PREFIX) else None)

    def _connect(self, dbname: str, user: str | None = None) -> psycopg.Connection:
        """An autocommit connection as `user` (default: the DSN's; host, port and password are the DSN's either
        way); when the server is out of connection slots, idle clones are released and it retries."""
        override = {"dbname": dbname} | ({"user": user} if user else {})
        for attempt in range(5):
            try:
                return psycopg.connect(make_conninfo(self.dsn, **override), autocommit=True)
            except psycopg.OperationalError as e:
                if "too many clients" not in str(e) or attempt == 4:
                    raise
                self.drain()
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def reserve(self, n: int) -> None:
        """Let `n` sandboxes be open at once: `max_open` is raised to `n` (never lowered) when the server has a free
        connection for each new clone, else `PoolExhausted` naming `max_connections` and how many it can hold.

        For callers that open sandboxes one after another and release none until all are open (TRL resets a whole
        generation batch before grading any): past `max_open`, their next `open` would wait forever."""
        with self._pool:
            if n <= self.max_open:
                return
            clones = self._clones
        limit, used = self._admin_execute(
            """SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
                      - coalesce(nullif(current_setting('reserved_connections', true), ''), '0')::int,
                      (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"""
        )[0]
        free = limit - used
        most = clones + free - 1  # creating a clone briefly needs one more connection (its grants)
        if n > most:
            raise PoolExhausted(
                f"{n} sandboxes must be open at once, but the PostgreSQL server at {describe_dsn(self.dsn)} can hold {max(most, 0)} "
                f"(max_connections leaves {limit} for non-superusers, {used} in use): raise max_connections in postgresql.conf "
                "(a restart), or hold fewer sandboxes at once",
                max(most, 0),
            )
        with self._pool:
            self.max_open = max(self.max_open, n)

    def sandbox_user(self) -> str | None:
        """The user sandbox connections log in as: `SANDBOX_ROLE` when the DSN's user is a superuser (the role is
        created here once), else None: the DSN's user, which already lacks a superuser's rights."""
        with self._role_lock:  # concurrent first clones: none may log in before the role exists
            if self._is_superuser is None:
                superuser = bool(self._admin_execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")[0][0])
                if superuser:
                    self._admin_execute(_CREATE_SANDBOX_ROLE)
                    password = conninfo_to_dict(self.dsn).get("password") or os.environ.get("PGPASSWORD")
                    if password:  # under password authentication the role logs in with the DSN's password
                        self._admin_execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(SANDBOX_ROLE), sql.Literal(password)))
                self._is_superuser = superuser
        return SANDBOX_ROLE if self._is_superuser else None

    def _alive(self, conn: psycopg.Connection) -> bool:
        """Whether a pooled idle connection still reaches the server (a restart kills them silently)."""
        if conn.closed:
            return False
        try:
            conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            conn.close()
            with self._pool:
                self.reconnected += 1
            return False

    @contextlib.contextmanager
    def _admin(self) -> Iterator[psycopg.Connection]:
        """An autocommit connection to the maintenance database, from a small pool (CREATE DATABASE runs in parallel)."""
        with self._admin_pool_lock:
            conn = self._admins.pop() if self._admins else None
        if conn is None or not self._alive(conn):
            conn = self._connect(conninfo_to_dict(self.dsn).get("dbname") or "postgres")
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        else:
            with self._admin_pool_lock:
                self._admins.append(conn)

    def _admin_execute(self, query: sql.Composable | str, params: tuple = ()) -> list[tuple]:
        with self._admin() as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def _exists(self, dbname: str) -> bool:
        return bool(self._admin_execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)))

    def _ready(self, dbname: str) -> bool:
        """A template is usable once it was built to the end (marked by its database comment)."""
        rows = self._admin_execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", (dbname,))
        return bool(rows) and rows[0][0] == "groundstate:ready"

    def _build(self, dbname: str, template: str | None, fill) -> None:
        """Create `dbname` (from `template`), fill it, mark it ready; safe across processes via an advisory lock."""
        lock_id = zlib.crc32(dbname.encode()) & 0x7FFFFFFF  # stable across processes
        with self._admin() as lock_conn:  # held for the whole build: the lock belongs to this session
            lock_conn.execute("SELECT pg_advisory_lock(%s)", (lock_id,))
            try:
                if self._ready(dbname):
                    return
                if self._exists(dbname):  # a half-built leftover of a crashed process
                    self._admin_execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))
                create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname))
                if template:
                    create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(dbname), sql.Identifier(template))
                self._admin_execute(create)
                try:
                    with self._connect(dbname) as conn:
                        fill(conn)
                    self._admin_execute(sql.SQL("COMMENT ON DATABASE {} IS 'groundstate:ready'").format(sql.Identifier(dbname)))
                except BaseException:  # a schema or seed the server rejects: leave no half-built database behind
                    with contextlib.suppress(psycopg.Error):
                        self._admin_execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
                    raise
            finally:
                lock_conn.execute("SELECT pg_advisory_unlock(%s)", (lock_id,))

    # -- templates -----------------------------------------------------------------------------
    def _base(self, domain: World) -> str:
        name = f"gs_base_{domain.name}_{domain.content_hash}_{str(self.scale).replace('.', '_')}"

        def fill(conn: psycopg.Connection) -> None:
            # errors of the domain's own files name the file: they are the domain's fault, found before any attempt
            seed = domain.seed_rows(self.scale)
            with conn.transaction():
                try:
                    conn.execute(portable_to_postgres(domain.schema_sql))
                except psycopg.Error as e:
                    raise TaskFileError(domain.path / "schema.sql", f"PostgreSQL rejects the schema: {_first_line(e)}") from None
                for table, rows in seed.items():
                    if not rows:
                        continue
                    cols = list(rows[0])
                    try:
                        with conn.cursor().copy(
                            sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, cols)))
                        ) as copy:
                            for r in rows:
                                copy.write_row([r[c] for c in cols])
                    except psycopg.Error as e:
                        raise TaskFileError(domain.path / "seed.py", f"PostgreSQL rejects the seed rows of table {table}: {_first_line(e)}") from None
                conn.execute(LOG_DDL)
                for table in domain.tables:
                    for ddl in postgres_triggers(table, domain.columns[table], domain.primary_keys[table]):
                        conn.execute(ddl)
            conn.execute("ANALYZE")

        if not self._ready(name):
            self._build(name, None, fill)
        return name

    def prepare(self, domain: World, patch: dict[str, list[dict[str, Any]]] | None = None) -> Template:
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
        """A private clone of the template inside a fresh transaction: pooled if one is idle, else cloned."""
        clone, evict = self._slot(template.key)
        try:
            if evict is not None:
                self._drop(evict)
            if clone is None:
                clone = self._clone(template)
            else:
                self.reused += 1
                if not self._alive(clone.conn):  # the server restarted while it was pooled: the database is still clean
                    self._hold_owner_lock()  # the restart ended the lock's session too: no reaper may take the clone now
                    clone.conn = self.connect(clone.dbname)
            clone.conn.execute("BEGIN")
        except BaseException:
            if clone is not None:
                with contextlib.suppress(psycopg.Error):  # remembered as an orphan by _drop
                    self._drop(clone)
            self._free_slot()
            raise
        return self._sandbox(template, clone)

    def _sandbox(self, template: Template, clone: _Clone) -> PostgresSandbox:
        sandbox = PostgresSandbox(template, PgDb(clone.conn, template.domain.config.today))
        sandbox.backend, sandbox.clone = self, clone
        return sandbox

    def _slot(self, template_key: str | None, wait: bool = True) -> tuple[_Clone | None, _Clone | None]:
        """Room for one more sandbox in use, waiting while every slot is held: (an idle clone of `template_key` to reuse,
        None), or (None, an idle clone of another template to drop first, or None when a slot was free). Without `wait`,
        `PoolExhausted` instead of waiting (a fork: its caller holds a slot, and callers that each wait for a second
        one while holding their first would wait for each other forever)."""
        with self._pool:
            while True:
                clone = next((c for c in self._idle.values() if c.template_key == template_key), None)
                evict = None
                if clone is not None:
                    del self._idle[clone.dbname]
                elif self._clones < self.max_open:
                    self._clones += 1
                elif self._idle:  # make room: drop the least recently used idle clone of another template
                    evict = self._idle.popitem(last=False)[1]
                elif not wait:
                    raise PoolExhausted(
                        f"every one of the {self.max_open} sandbox slots is in use, so a sandbox cannot be forked: open fewer "
                        "attempts at once, or let more sandboxes be open (`reserve`, or max_open)",
                        self.max_open,
                    )
                else:
                    self._pool.wait()
                    continue
                self.in_use += 1
                return clone, evict

    def _free_slot(self) -> None:
        """Give back a slot `_slot` handed out whose sandbox never came to be (its clone dropped)."""
        with self._pool:
            self.in_use -= 1
            self._clones -= 1
            self._pool.notify_all()

    def fork(self, sandbox: Sandbox) -> PostgresSandbox:
        """A new clone database made from `sandbox`'s own (`CREATE DATABASE fork TEMPLATE sandbox`), in its state now:
        rows, change log and sequences (see `Backend.fork`).

        An attempt's writes are its open transaction's (rolled back at close), and PostgreSQL clones only a database
        that nobody is connected to, from its committed state. So, between tool calls (the transaction open and not
        aborted, else `RuntimeError`), the sandbox's transaction is committed and its connection closed; the database
        is cloned on the maintenance connection; the sandbox is reconnected (as the sandbox login, as before) in a new
        transaction, in the same state, its `Db` kept. Session state (settings, temporary tables) does not survive,
        rows do. While unconnected the database stays this backend's: the owner lock is held (`_hold_owner_lock`), so
        no reaper drops it. The fork logs in as the sandbox login too (the grants are the source's, copied), takes a
        slot like an opened sandbox (`max_open`), and is named and reaped like one. Neither database equals the
        template once the writes were committed, so both are dropped at close, never pooled."""
        if not isinstance(sandbox, PostgresSandbox) or sandbox.backend is not self or sandbox.clone is None:
            raise ValueError("a sandbox is forked by the backend that opened it")
        source = sandbox.clone
        with source.forking:
            if source.conn.info.transaction_status != TransactionStatus.INTRANS:
                raise RuntimeError("the sandbox's transaction is not open and clean: fork it between tool calls")
            _, evict = self._slot(None, wait=False)
            try:
                clone = self._fork(sandbox, source, evict)
            except BaseException:
                self._free_slot()
                raise
        self.forked += 1
        return self._sandbox(sandbox.template, clone)

    def _fork(self, sandbox: PostgresSandbox, source: _Clone, evict: _Clone | None) -> _Clone:
        """`fork`'s copy, in a slot it holds. A source whose writes could not be committed, or that could not be
        reconnected, is closed (its tool calls then raise `SandboxLost`: a system error, never a state the agent did
        not leave); a clone made is dropped again on any failure."""
        dbname = f"{self.sandbox_prefix}{next(self._counter)}"
        conn: psycopg.Connection | None = None
        created = False
        if evict is not None:
            self._drop(evict)
        self._hold_owner_lock()
        source.committed = True
        try:
            source.conn.execute("COMMIT")
        except BaseException:
            source.conn.close()  # the writes are gone with the aborted transaction: the sandbox is lost, not reverted
            raise
        source.conn.close()
        try:
            try:
                self._admin_execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(dbname), sql.Identifier(source.dbname)))
                created = True
                self.cloned += 1
            finally:  # the source goes on as it was, whether or not the clone was made
                source.conn = self.connect(source.dbname)
                source.conn.execute("BEGIN")
                sandbox.connection.raw = source.conn
            conn = self.connect(dbname)
            conn.execute("BEGIN")
        except BaseException:
            if conn is not None:
                conn.close()
            if created:
                with contextlib.suppress(psycopg.Error):  # remembered as an orphan while the server is unreachable
                    self._drop_database(dbname)
            raise
        clone = _Clone(dbname, conn, source.template_key, dict(source.sequences))
        clone.committed = True
        return clone

    def _clone(self, template: Template) -> _Clone:
        self._hold_owner_lock()
        dbname = f"{self.sandbox_prefix}{next(self._counter)}"
        self._admin_execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(dbname), sql.Identifier(template.handle)))
        self.cloned += 1
        conn: psycopg.Connection | None = None
        try:
            login = self.sandbox_user()
            if login is not None:
                with self._connect(dbname) as owner:
                    grant_rows(owner, login)
            conn = self.connect(dbname)
            seqs = {
                name: value
                for name, value in conn.execute(
                    "SELECT schemaname || '.' || sequencename, last_value FROM pg_sequences WHERE schemaname = 'public'"
                ).fetchall()
            }
        except BaseException:  # e.g. the server restarted between CREATE DATABASE and here: no clone may leak
            if conn is not None:
                conn.close()
            with contextlib.suppress(psycopg.Error):
                self._drop_database(dbname)  # remembered as an orphan while the server is unreachable
            raise
        return _Clone(dbname, conn, template.key, seqs)

    def _release(self, clone: _Clone) -> None:
        """Roll the attempt back and return the clone to the pool; discard it unless it is provably as handed out."""
        reusable = False
        try:
            # The attempt's own transaction (BEGIN at open) must still be open: if SQL ended it, what ran after
            # was committed, and the clone or its session may have changed for good.
            intact = clone.conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)
            clone.conn.execute("ROLLBACK")
            for name, value in clone.sequences.items():  # sequences are not transactional
                clone.conn.execute("SELECT setval(%s, %s, %s)", (name, value or 1, value is not None), prepare=False)
            reusable = intact and not clone.committed and self._pristine(clone.conn)
        except psycopg.Error:
            reusable = False
        with self._pool:
            self.in_use -= 1
            if reusable:
                self._idle[clone.dbname] = clone
                self._pool.notify_all()
                return
        try:
            self._drop(clone)
        finally:
            with self._pool:
                self._clones -= 1
                self._pool.notify_all()

    @staticmethod
    def _pristine(conn: psycopg.Connection) -> bool:
        """Whether an idle clone's session is exactly as a fresh one (see `_PRISTINE`)."""
        return bool(conn.execute(_PRISTINE, (conn.info.user,), prepare=False).fetchone()[0])

    def _drop(self, clone: _Clone) -> None:
        """Close the clone's connection and drop its database; if the server is unreachable, remember it for `drain`."""
        clone.conn.close()
        self._drop_database(clone.dbname)

    def _drop_database(self, dbname: str) -> None:
        try:
            self._admin_execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
        except psycopg.OperationalError:
            with self._pool:
                self._orphans.add(dbname)
            raise
        with self._pool:
            self._orphans.discard(dbname)

    def drain(self) -> int:
        """Drop every idle pooled clone and every orphaned one (sandboxes in use are untouched); returns how many were dropped.

        Databases that cannot be dropped now (the server is down) stay in `orphans` for the next call.
        """
        with self._pool:
            idle = list(self._idle.values())
            self._idle.clear()
            self._clones -= len(idle)
            orphans = sorted(self._orphans)
            self._pool.notify_all()
        dropped = 0
        for clone in idle:
            try:
                self._drop(clone)
                dropped += 1
            except psycopg.OperationalError:  # server unreachable: kept as an orphan for the next drain
                pass
        for dbname in orphans:
            try:
                self._drop_database(dbname)
                dropped += 1
            except psycopg.OperationalError:
                pass
        return dropped

    @property
    def orphans(self) -> list[str]:
        """Clone databases released while the server was unreachable, not dropped yet."""
        with self._pool:
            return sorted(self._orphans)

    @property
    def sandbox_prefix(self) -> str:
        """The name prefix of this backend's sandbox databases: `gs_sb_<host tag>_<pid>_o<owner key>_`."""
        return f"{process_sandbox_prefix()}o{self._owner_key:08x}_"

    def sandbox_databases(self) -> list[str]:
        """This backend's sandbox databases that still exist, sorted by name (none once every sandbox is closed and the
        pool drained)."""
        pattern = self.sandbox_prefix.replace("_", "\\_") + "%"
        rows = self._admin_execute("SELECT datname FROM pg_database WHERE datname LIKE %s ORDER BY datname", (pattern,))
        return [r[0] for r in rows]

    def spec(self) -> tuple[str, str | None]:
        return (self.name, self.dsn)

    def cleanup_stale(self) -> list[str]:
        """Drop the sandbox databases whose owning process is gone (a kill or crash skips `close`); the names dropped.

        A sandbox named with an owner key is its owner's while the owner's advisory lock is held anywhere on the server
        (see the module docstring), so this holds for sandboxes of every machine sharing the server, and a reused pid
        changes nothing. Each dead owner's key is locked here while its sandboxes are dropped (an owner re-taking its
        lock after a restart waits), and a sandbox anyone is connected to is never dropped: DROP DATABASE without
        FORCE fails instead. Names from before owner keys are judged by their pid, on this machine only."""
        rows = self._admin_execute(
            """SELECT d.datname, EXISTS (SELECT FROM pg_stat_activity a WHERE a.datname = d.datname)
               FROM pg_database d WHERE d.datname LIKE %s ORDER BY d.datname""",
            ("gs\\_sb\\_%",),
        )
        by_owner: dict[int, list[str]] = {}
        dropped = []
        for name, connected in rows:
            if connected:
                continue
            owned = _OWNED_NAME.fullmatch(name)
            if owned:
                by_owner.setdefault(int(owned.group(1), 16), []).append(name)
            elif _pid_owner_gone(name) and self._drop_unused(name):
                dropped.append(name)
        if not by_owner:
            return dropped
        with self._admin() as conn:
            for key, names in by_owner.items():
                if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (OWNER_LOCK_CLASS, key)).fetchone()[0]:
                    continue  # its owner holds it (here, or is re-taking it), or another process is reaping it
                try:
                    # held in another database of the server (lock spaces are per database): alive
                    held = conn.execute(
                        """SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()
                           AND classid::int8 = %s AND objid::int8 = %s AND objsubid = 2)""",
                        (OWNER_LOCK_CLASS, key),
                    ).fetchone()[0]
                    if not held:
                        dropped += [name for name in names if self._drop_unused(name, conn)]
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", (OWNER_LOCK_CLASS, key))
        return dropped

    def _drop_unused(self, dbname: str, conn: psycopg.Connection | None = None) -> bool:
        """DROP DATABASE without FORCE: False, and nothing dropped, if someone is connected to it or it is another user's."""
        query = sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(dbname))
        try:
            if conn is None:
                self._admin_execute(query)
            else:
                conn.execute(query)
        except (psycopg.errors.ObjectInUse, psycopg.errors.InsufficientPrivilege):
            return False
        return True

    def drop_templates(self, domain: World | None = None) -> None:
        """Remove cached template databases (all of groundstate's, or one domain's bases)."""
        pattern = f"gs_base_{domain.name}_%" if domain else "gs\\_%"
        for (name,) in self._admin_execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (pattern,)):
            self._admin_execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        self._templates.clear()

    def close(self) -> None:
        """Drop the pooled clones and close the maintenance connections (templates stay cached on the server); the owner
        lock goes with its connection once no clone is left (a sandbox still open keeps it)."""
        self.drain()
        with self._admin_pool_lock:
            for conn in self._admins:
                conn.close()
            self._admins.clear()
        with self._owner_lock, self._pool:
            if self._owner_conn is not None and self._clones == 0:
                self._owner_conn.close()
                self._owner_conn = None


def _first_line(error: psycopg.Error) -> str:
    """The server's message without psycopg's multi-line context (LINE 3: ... ^)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _pid_owner_gone(name: str) -> bool:
    """Whether a sandbox named before owner keys (`gs_sb_[<host>_]<pid>_<n>_<n>`) was this machine's process's that no longer runs."""
    match = _PID_NAME.fullmatch(name)
    if match is None or match.group(1) not in (None, _host_tag()):
        return False
    try:
        os.kill(int(match.group(2)), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _host_tag() -> str:
    """A short tag of this machine's name: sandbox names carry it, so machines sharing one server never collide."""
    return f"h{zlib.crc32(os.uname().nodename.encode()):08x}"


def process_sandbox_prefix() -> str:
    """The name prefix of this process's sandbox databases: `gs_sb_<host>_<pid>_`."""
    return f"gs_sb_{_host_tag()}_{os.getpid()}_"
