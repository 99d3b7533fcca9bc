"""Fixtures of the per-domain tests.

A domain's own tests live in tests/domains/<name>/test_<name>.py and get that domain from their folder's name;
the checks every domain must pass are written once, in test_every_domain.py. pytest puts this folder on
`sys.path` (rootdir conftest, no `__init__.py`), so the test files import `domain_testing` by name.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
from domain_testing import Desk, import_domain_file, open_sandbox

from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.domain import Domain, bundled_domains, load_domain


@pytest.fixture(scope="module")
def domain_name(request) -> str:
    """tests/domains/<name>/test_<name>.py is about the bundled domain <name>."""
    name = request.path.parent.name
    if name not in bundled_domains():
        raise pytest.UsageError(f"{request.path}: its folder names no bundled domain (tests/domains/<name>/test_<name>.py)")
    return name


@pytest.fixture(scope="module")
def domain(domain_name) -> Domain:
    return load_domain(domain_name)


@pytest.fixture(scope="module")
def engine() -> SqliteBackend:
    return SqliteBackend()


@pytest.fixture(scope="module")
def world(domain) -> dict[str, list[dict]]:
    """The seed rows (shared by the module's tests: read them, never change them)."""
    return domain.seed_rows()


@pytest.fixture(scope="module")
def domain_module(domain) -> Callable[[str], ModuleType]:
    """`domain_module("seed")`: a fresh import of one of the domain's Python files."""
    return lambda name: import_domain_file(domain, name)


@pytest.fixture
def sb(domain, engine):
    """A sandbox of the seeded world, closed after the test."""
    with open_sandbox(domain, engine) as sandbox:
        yield sandbox


@pytest.fixture
def desk(domain, sb) -> Desk:
    return Desk(domain, sb)
