"""Helpers shared by the per-domain tests (tests/domains/<name>/test_<name>.py); fixtures are in conftest.py."""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType
from typing import Any

from groundstate.state.sqlite import SqliteBackend

FAMILIES = ("single_write", "multi_step", "lookup_then_act", "policy_refusal", "needs_user_info", "collateral_trap")
SUITE = ("retail", "helpdesk", "banking", "travel", "insurance", "hr")  # the pool and benchmark domains of the suite card


def import_domain_file(domain, name: str) -> ModuleType:
    """A fresh import of the domain's `<name>.py` (seed, tools, taskgen), so a test sees the file as it is."""
    spec = importlib.util.spec_from_file_location(f"test_domain_{domain.name}_{name}", domain.path / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def open_sandbox(domain, engine: SqliteBackend, patch: dict | None = None):
    """A sandbox of the seeded world plus `patch`, as an attempt gets it (a context manager that closes it)."""
    return engine.open(engine.prepare(domain, patch or {}))


class Desk:
    """Calls tools on one sandbox the way the engine does, with assertions on the outcome."""

    def __init__(self, domain, sandbox):
        self.domain, self.sandbox, self.db = domain, sandbox, sandbox.connection

    def call(self, name: str, **args: Any):
        return self.domain.tools.call(self.db, name, args)

    def ok(self, name: str, **args: Any) -> Any:
        r = self.call(name, **args)
        assert r.ok, f"{name}{args}: {r.content}"
        return json.loads(r.content)

    def refused(self, name: str, fragment: str = "", **args: Any) -> str:
        r = self.call(name, **args)
        assert not r.ok, f"{name}{args} should have been refused, got {r.content}"
        assert r.content.startswith("error:") and fragment in r.content, r.content
        return r.content

    def row(self, sql: str, *params: Any) -> dict | None:
        return self.db.one(sql, *params)

    def count(self, table: str, where: str = "1 = 1", *params: Any) -> int:
        return int(self.db.scalar(f"SELECT COUNT(*) AS n FROM {table} WHERE {where}", *params))
