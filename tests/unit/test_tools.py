"""Tool specs from typed functions, and `Toolset.call`: validation, refusals, atomicity, inert arguments."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Literal

import pytest

from groundstate.state.sqlite import SqliteBackend
from groundstate.tools import ToolError, Toolset, ToolSpec, tool
from groundstate.worlds.domain import load_domain

FIXTURE = Path(__file__).parents[1] / "fixtures" / "shop"

# known start state for the calls below (the seed's statuses are random)
PATCH = {
    "customers": [{"id": 1, "name": "Ada", "email": "ada@example.com", "tier": "basic"}],
    "orders": [
        {"id": 1, "customer_id": 1, "status": "pending", "total": 10.0, "updated_at": None},
        {"id": 2, "customer_id": 1, "status": "shipped", "total": 20.0, "updated_at": None},
    ],
}
TABLES = ["customers", "orders", "notes", "tags"]


@pytest.fixture(scope="module")
def domain():
    return load_domain(str(FIXTURE))


@pytest.fixture(scope="module")
def template(domain):
    return SqliteBackend().prepare(domain, PATCH)


@pytest.fixture
def sandbox(template):
    sb = template.owner.open(template)
    yield sb
    sb.close()


@pytest.fixture
def db(sandbox):
    return sandbox.connection


def counts(db) -> dict[str, int]:
    return {t: db.scalar(f"SELECT COUNT(*) AS n FROM {t}") for t in TABLES}


# -- ToolSpec.from_function ----------------------------------------------------------------------------


@tool(write=True)
def book_trip(
    db,
    city: str,
    nights: int,
    cabin: Literal["economy", "business"] = "economy",
    budget: float | None = None,
    flexible: bool = False,
    guests: list[str] = [],  # noqa: B006 - the tool as a careless author writes it
) -> dict:
    """Book a trip for the customer.

    Args:
        city: Destination city,
            as the customer wrote it.
        nights (int): How many nights.
        cabin: Cabin class.
        budget: Upper bound in dollars.
    """
    return {}


@tool
def lookup(db, key: str) -> str:
    """Look something up."""
    return key


def test_schema_types_required_and_defaults():
    schema = ToolSpec.from_function(book_trip).json_schema()
    props = schema["properties"]
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert "title" not in schema and all("title" not in p for p in props.values())
    assert list(props) == ["city", "nights", "cabin", "budget", "flexible", "guests"]  # the Db is not a parameter
    assert schema["required"] == ["city", "nights"]
    assert props["city"]["type"] == "string"
    assert props["nights"]["type"] == "integer"
    assert props["cabin"]["enum"] == ["economy", "business"] and props["cabin"]["default"] == "economy"
    assert {"type": "number"} in props["budget"]["anyOf"] and {"type": "null"} in props["budget"]["anyOf"]
    assert props["budget"]["default"] is None
    assert props["flexible"] == {"type": "boolean", "default": False}
    assert props["guests"]["type"] == "array" and props["guests"]["items"] == {"type": "string"}


def test_descriptions_from_docstring():
    spec = ToolSpec.from_function(book_trip)
    assert spec.name == "book_trip"
    assert spec.description == "Book a trip for the customer."
    props = spec.json_schema()["properties"]
    assert props["city"]["description"] == "Destination city, as the customer wrote it."  # continuation joined
    assert props["nights"]["description"] == "How many nights."  # "(int)" type annotation stripped
    assert props["cabin"]["description"] == "Cabin class."
    assert "description" not in props["flexible"]  # undocumented argument


def test_write_flag():
    assert ToolSpec.from_function(book_trip).write is True
    assert ToolSpec.from_function(lookup).write is False

    def plain(db, x: int) -> int:
        """Not decorated."""
        return x

    assert ToolSpec.from_function(plain).write is False


def test_openai_schema_format():
    s = ToolSpec.from_function(lookup).openai_schema()
    assert s == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up.",
            "parameters": {"additionalProperties": False, "properties": {"key": {"type": "string"}}, "required": ["key"], "type": "object"},
        },
    }


def test_tool_without_docstring_is_rejected():
    @tool
    def silent(db, x: int) -> int:
        return x

    with pytest.raises(ValueError, match="tool silent has no docstring"):
        ToolSpec.from_function(silent)


def test_tool_whose_docstring_is_only_args_is_rejected():
    @tool
    def args_only(db, x: int) -> int:
        """
        Args:
            x: A number.
        """
        return x

    with pytest.raises(ValueError, match="args_only has no docstring"):
        ToolSpec.from_function(args_only)


def test_returns_section_is_not_part_of_the_description():
    @tool
    def with_returns(db, x: int) -> dict:
        """Make a booking.

        Args:
            x: A number.

        Returns:
            The booking.
        """
        return {}

    spec = ToolSpec.from_function(with_returns)
    assert spec.description == "Make a booking."
    assert spec.json_schema()["properties"]["x"]["description"] == "A number."


def test_toolset_from_module_takes_only_public_marked_functions():
    mod = types.ModuleType("fake_tools")
    mod.lookup = lookup
    mod.book_trip = book_trip

    @tool
    def _private(db) -> None:
        """Hidden."""

    def unmarked(db) -> None:
        """Not a tool."""

    mod._private = _private
    mod.unmarked = unmarked
    ts = Toolset.from_module(mod)
    assert ts.names() == ["lookup", "book_trip"]
    assert "lookup" in ts and "unmarked" not in ts
    assert [s["function"]["name"] for s in ts.openai_schemas(["book_trip"])] == ["book_trip"]


def test_fixture_toolset(domain):
    ts = domain.tools
    assert set(ts.names()) == {"get_order", "find_customer", "cancel_order", "set_total", "set_tier", "add_note", "tag_customer", "broken_tool"}
    assert {n for n in ts.names() if ts[n].write} == {"cancel_order", "set_total", "set_tier", "add_note", "tag_customer", "broken_tool"}


# -- Toolset.call ----------------------------------------------------------------------------------


def test_successful_read_returns_json_text(domain, db):
    r = domain.tools.call(db, "get_order", {"order_id": 1})
    assert r.ok is True and r.write is False
    assert json.loads(r.content) == {"id": 1, "customer_id": 1, "status": "pending", "total": 10.0, "updated_at": None}


def test_successful_write_is_kept_and_result_is_json(domain, db):
    r = domain.tools.call(db, "cancel_order", {"order_id": 1})
    assert r.ok is True and r.write is True
    assert json.loads(r.content) == {"order_id": 1, "status": "cancelled"}
    assert db.one("SELECT status, updated_at FROM orders WHERE id = 1") == {"status": "cancelled", "updated_at": "2026-03-01"}


def test_arguments_as_json_string(domain, db):
    r = domain.tools.call(db, "set_total", '{"order_id": 1, "total": 12.345}')
    assert r.ok, r.content
    assert json.loads(r.content) == {"order_id": 1, "total": 12.35}
    assert db.scalar("SELECT total FROM orders WHERE id = 1") == 12.35


def test_empty_argument_string_means_no_arguments(domain, db):
    r = domain.tools.call(db, "get_order", "")
    assert not r.ok
    assert "order_id: Field required" in r.content


def test_unknown_tool_lists_the_tools(domain, db):
    r = domain.tools.call(db, "refund_order", {"order_id": 1})
    assert r.ok is False
    assert r.content.startswith("error: unknown tool 'refund_order'")
    for name in domain.tools.names():
        assert name in r.content


@pytest.mark.parametrize(
    "args, fragments",
    [
        ({"order_id": "one"}, ["invalid arguments for cancel_order", "order_id", "valid integer"]),
        ({}, ["invalid arguments for cancel_order", "order_id: Field required"]),
        ({"order_id": 1, "reason": "x"}, ["invalid arguments for cancel_order", "reason: Extra inputs are not permitted"]),
        ('{"order_id": 1', ["arguments of cancel_order are not valid JSON"]),
        ("[1]", ["arguments of cancel_order must be a JSON object, got list"]),
        ([1], ["arguments of cancel_order must be a JSON object, got list"]),
    ],
    ids=["wrong-type", "missing", "extra", "not-json", "json-array", "list"],
)
def test_invalid_arguments_are_error_results(domain, db, args, fragments):
    before = counts(db)
    r = domain.tools.call(db, "cancel_order", args)
    assert r.ok is False
    assert r.content.startswith("error: ")
    for fragment in fragments:
        assert fragment in r.content, r.content
    assert db.scalar("SELECT status FROM orders WHERE id = 1") == "pending"
    assert counts(db) == before


def test_boolean_is_not_accepted_for_an_integer_id(domain, db):
    r = domain.tools.call(db, "cancel_order", {"order_id": True})
    assert r.ok is False
    assert db.scalar("SELECT status FROM orders WHERE id = 1") == "pending"


def test_business_refusal(domain, db):
    r = domain.tools.call(db, "cancel_order", {"order_id": 2})
    assert r.ok is False and r.write is True
    assert r.content == "error: order 2 is shipped and cannot be cancelled"
    r = domain.tools.call(db, "get_order", {"order_id": 99999})
    assert (r.ok, r.content) == (False, "error: no order 99999")


def test_tool_that_writes_then_crashes_is_rolled_back(domain, sandbox, db):
    before = db.scalar("SELECT total FROM orders WHERE id = 1")
    r = domain.tools.call(db, "broken_tool", {"order_id": 1})
    assert r.ok is False
    assert r.content == "error: broken_tool failed: RuntimeError: bug in tool"
    assert db.scalar("SELECT total FROM orders WHERE id = 1") == before == 10.0
    assert len(sandbox.changes()) == 0  # nothing reached the change log either
    # the connection is still usable and later writes are kept
    assert domain.tools.call(db, "cancel_order", {"order_id": 1}).ok
    assert db.scalar("SELECT status FROM orders WHERE id = 1") == "cancelled"


def test_refusal_after_a_write_is_rolled_back(db):
    @tool(write=True)
    def rename_then_refuse(db, customer_id: int) -> dict:
        """Renames, then refuses.

        Args:
            customer_id: The customer.
        """
        db.execute("UPDATE customers SET name = 'Mallory' WHERE id = ?", customer_id)
        db.insert("notes", customer_id=customer_id, body="half-done")
        raise ToolError("changed my mind")

    ts = Toolset([ToolSpec.from_function(rename_then_refuse)])
    before = counts(db)
    r = ts.call(db, "rename_then_refuse", {"customer_id": 1})
    assert (r.ok, r.content, r.write) == (False, "error: changed my mind", True)
    assert db.scalar("SELECT name FROM customers WHERE id = 1") == "Ada"
    assert counts(db) == before


def test_database_error_inside_a_tool_is_an_error_result(domain, db):
    domain.tools.call(db, "tag_customer", {"customer_id": 1, "tag": "vip"})
    r = domain.tools.call(db, "tag_customer", {"customer_id": 1, "tag": "vip"})
    assert (r.ok, r.content) == (False, "error: tag already present")
    r = domain.tools.call(db, "tag_customer", {"customer_id": 424242, "tag": "vip"})  # foreign key violation
    assert r.ok is False
    assert r.content.startswith("error: tag_customer failed: IntegrityError")
    assert db.scalar("SELECT COUNT(*) AS n FROM tags") == 1


# -- arguments that look like SQL are data ---------------------------------------------------------


def test_sql_in_a_read_argument_is_inert(domain, db):
    before = counts(db)
    r = domain.tools.call(db, "find_customer", {"email": "x' OR '1'='1"})
    assert r.ok is False
    assert r.content == "error: no customer with email x' OR '1'='1"
    r = domain.tools.call(db, "find_customer", {"email": "ada@example.com' --"})
    assert r.ok is False
    assert counts(db) == before


def test_sql_in_a_write_argument_is_stored_verbatim(domain, sandbox, db):
    body = "'); DROP TABLE customers; --"
    tables = sorted(r["name"] for r in db.query("SELECT name FROM sqlite_master WHERE type = 'table'"))
    before = counts(db)
    r = domain.tools.call(db, "add_note", {"customer_id": 1, "body": body})
    assert r.ok, r.content
    note_id = json.loads(r.content)["note_id"]
    assert db.one("SELECT customer_id, body FROM notes WHERE id = ?", note_id) == {"customer_id": 1, "body": body}
    assert sorted(r["name"] for r in db.query("SELECT name FROM sqlite_master WHERE type = 'table'")) == tables
    assert counts(db) == {**before, "notes": before["notes"] + 1}
    changes = sandbox.changes()
    assert list(changes.rows) == [("notes", (note_id,))]
    assert changes.counts() == {"insert": 1, "update": 0, "delete": 0}


def test_sql_in_a_literal_argument_is_refused(domain, db):
    r = domain.tools.call(db, "set_tier", {"customer_id": 1, "tier": "gold'; DELETE FROM customers; --"})
    assert r.ok is False
    assert "tier" in r.content and "'basic' or 'gold'" in r.content
    assert db.scalar("SELECT tier FROM customers WHERE id = 1") == "basic"
