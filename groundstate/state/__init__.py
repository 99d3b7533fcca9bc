"""Backends (SQLite, PostgreSQL), sandboxes, canonical state and change sets.

`make_backend(name, dsn)` is the one place a backend is built from its name; each backend lives in its own
module (`state.sqlite`, `state.postgres`), imported only when it is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from groundstate.state.base import Backend

BACKENDS = ("sqlite", "postgres")


def make_backend(name: str, dsn: str | None = None, **kw: Any) -> Backend:
    """A backend by name: `sqlite` (default) or `postgres` (`dsn`, default `$GROUNDSTATE_PG_DSN`, connected to once
    here); `ValueError` for an unknown name or an unreachable server."""
    if name == "sqlite":
        from groundstate.state.sqlite import SqliteBackend

        return SqliteBackend(**kw)
    if name in ("postgres", "postgresql", "pg"):
        from groundstate.state.postgres import PostgresBackend

        backend = PostgresBackend(dsn, **kw)
        backend.check_reachable()  # one clear line now (`BackendUnreachable`, a ValueError), not a failure per attempt
        return backend
    raise ValueError(f"unknown backend {name!r}: use sqlite or postgres")
