"""Backends (SQLite, PostgreSQL), sandboxes, canonical state and change sets."""

from groundstate.state.base import Backend, Sandbox, Template
from groundstate.state.changes import ChangeSet, Normaliser, RowChange
from groundstate.state.db import Db
from groundstate.state.postgres import PostgresBackend, make_backend
from groundstate.state.sqlite import SqliteBackend

__all__ = ["Backend", "Sandbox", "Template", "ChangeSet", "Normaliser", "RowChange", "Db", "SqliteBackend", "PostgresBackend", "make_backend"]
