"""Loading domains and tasks: malformed files fail with a `TaskFileError` naming file, task and field."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from groundstate.tasks import Task, TaskFileError
from groundstate.worlds.domain import Domain, load_domain

FIXTURE = Path(__file__).parents[1] / "fixtures" / "shop"


@pytest.fixture
def domain_dir(tmp_path: Path) -> Path:
    """A private, writable copy of the shop fixture domain."""
    d = tmp_path / "shop"
    shutil.copytree(FIXTURE, d)
    return d


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def load_error(domain_dir: Path) -> TaskFileError:
    """Build the domain fresh (no lru_cache) and load its tasks; return the error raised."""
    with pytest.raises(TaskFileError) as info:
        _ = Domain(domain_dir).tasks
    return info.value


def assert_names(err: TaskFileError, path: Path, task_id: str | None, field: str | None, *fragments: str) -> None:
    """The error carries and prints the file, the task and the field, plus the specific problem."""
    msg = str(err)
    assert err.path == str(path)
    assert msg.startswith(str(path)), msg
    assert err.task_id == task_id
    assert err.field == field
    if task_id is not None:
        assert f"task {task_id!r}" in msg, msg
    if field is not None:
        assert f"field {field!r}" in msg, msg
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"


# -- the fixture itself ------------------------------------------------------------------------------


def test_fixture_domain_loads_with_its_tasks():
    d = load_domain(str(FIXTURE))
    assert d.name == "shop"
    assert [t.id for t in d.tasks] == ["shop-cancel", "shop-refuse", "shop-multi"]
    multi = d.task("shop-multi")
    assert multi.domain == "shop" and multi.split == "pool"
    assert [c.tool for c in multi.gold] == ["find_customer", "set_tier", "set_total", "cancel_order", "tag_customer"]
    assert multi.checks[0].expect == [["cancelled"]]
    assert multi.limits.max_turns == 30 and multi.limits.max_tool_calls == 40
    assert d.primary_keys["tags"] == ["customer_id", "tag"]
    with pytest.raises(KeyError, match="no task 'nope'"):
        d.task("nope")


# -- file-level problems -----------------------------------------------------------------------------


def test_invalid_yaml_names_the_file(domain_dir):
    f = write(
        domain_dir / "tasks" / "broken.yaml",
        """
        tasks:
          - id: a
            instruction: [unclosed
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, None, None, "not valid YAML")


@pytest.mark.parametrize("body", ["just a string\n", "tasks: {id: x, instruction: y}\n", "{other: []}\n", ""])
def test_file_that_is_not_a_list(domain_dir, body):
    f = write(domain_dir / "tasks" / "notalist.yaml", body)
    err = load_error(domain_dir)
    assert_names(err, f, None, "tasks", "must hold a list of tasks")


def test_task_entry_that_is_not_a_mapping(domain_dir):
    f = write(
        domain_dir / "tasks" / "scalar.yaml",
        """
        - id: ok-one
          instruction: Hi
          gold: []
        - just text
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, None, "tasks[1]", "task #1 must be a mapping")


# -- task fields (pydantic) -------------------------------------------------------------------------


def test_missing_instruction(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: fine
          instruction: Fine.
          gold: []
        - id: no-instruction
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "no-instruction", "instruction", "Field required")


def test_empty_instruction_is_rejected(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: empty-instruction
          instruction: ""
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "empty-instruction", "instruction", "at least 1 character")


def test_task_without_id_is_named_by_its_index(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - instruction: Hi
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "#0", "id", "Field required")


def test_wrong_type_gold(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: bad-gold
          instruction: Hi
          gold: 5
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "bad-gold", "gold", "valid list")


def test_wrong_type_nested_limit(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: bad-limit
          instruction: Hi
          gold: []
          limits: {max_turns: 0}
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "bad-limit", "limits.max_turns", "greater than or equal to 1")


def test_unknown_top_level_key(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: extra-key
          instruction: Hi
          gold: []
          colour: blue
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "extra-key", "colour", "Extra inputs are not permitted")


def test_bad_id_pattern(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: has space
          instruction: Hi
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "has space", "id", "should match pattern")


def test_task_of_another_domain(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: foreign
          domain: airline
          instruction: Hi
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "foreign", "domain", "belongs to domain 'airline'")


# -- gold ----------------------------------------------------------------------------------------------


def test_unknown_tool_in_gold(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: unknown-tool
          instruction: Hi
          gold:
            - {tool: refund_order, args: {order_id: 1}}
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "unknown-tool", "gold[0].tool", "unknown tool 'refund_order'")


def test_unknown_tool_index_is_reported(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: unknown-second
          instruction: Hi
          gold:
            - {tool: get_order, args: {order_id: 1}}
            - {tool: teleport, args: {}}
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "unknown-second", "gold[1].tool", "unknown tool 'teleport'")


@pytest.mark.parametrize(
    "args, fragments",
    [
        ("{order_id: 1, total: lots}", ["total", "valid number"]),  # wrong type
        ("{order_id: 1}", ["total", "Field required"]),  # missing required
        ("{order_id: 1, total: 2.5, currency: EUR}", ["currency", "Extra inputs are not permitted"]),  # extra arg
    ],
    ids=["wrong-type", "missing", "extra"],
)
def test_bad_gold_arguments(domain_dir, args, fragments):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        f"""
        - id: bad-args
          instruction: Hi
          gold:
            - {{tool: get_order, args: {{order_id: 1}}}}
            - {{tool: set_total, args: {args}}}
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "bad-args", "gold[1].args", "invalid arguments for set_total", *fragments)


def test_gold_literal_argument_outside_its_values(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: bad-tier
          instruction: Hi
          gold:
            - {tool: set_tier, args: {customer_id: 1, tier: platinum}}
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "bad-tier", "gold[0].args", "tier", "'basic' or 'gold'")


# -- patch ---------------------------------------------------------------------------------------------


def test_unknown_table_in_patch(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: bad-table
          instruction: Hi
          patch:
            invoices: [{id: 1}]
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "bad-table", "patch.invoices", "unknown table 'invoices'")


def test_unknown_column_in_patch(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: bad-column
          instruction: Hi
          patch:
            orders:
              - {id: 1, status: pending}
              - {id: 2, colour: red}
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "bad-column", "patch.orders[1].colour", "unknown column orders.colour")


def test_patch_row_without_primary_key(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: no-pk
          instruction: Hi
          patch:
            orders: [{status: pending, total: 3.0}]
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "no-pk", "patch.orders[0]", "lacks primary key ['id']")


def test_patch_row_missing_part_of_a_composite_key(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: half-pk
          instruction: Hi
          patch:
            tags: [{customer_id: 1}]
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "half-pk", "patch.tags[0]", "lacks primary key ['tag']")


# -- checks --------------------------------------------------------------------------------------------


def test_check_sql_that_does_not_compile(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: bad-check
          instruction: Hi
          gold: []
          checks:
            - {sql: "SELECT colour FROM orders WHERE id = 1", expect: [[red]]}
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "bad-check", "checks[0].sql", "does not compile against the schema", "no such column: colour")


def test_check_sql_index_and_unknown_table(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: bad-second-check
          instruction: Hi
          gold: []
          checks:
            - {sql: "SELECT status FROM orders WHERE id = 1", expect: [[pending]]}
            - {sql: "SELECT * FROM invoices", expect: []}
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "bad-second-check", "checks[1].sql", "no such table: invoices")


def test_check_sql_with_two_statements_is_rejected(domain_dir):
    f = write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: two-statements
          instruction: Hi
          gold: []
          checks:
            - {sql: "SELECT 1; DROP TABLE orders", expect: [[1]]}
        """,
    )
    err = load_error(domain_dir)
    assert_names(err, f, "two-statements", "checks[0].sql", "does not compile against the schema")


def test_check_sql_must_be_read_only(domain_dir):
    write(
        domain_dir / "tasks" / "t.yaml",
        """
        - id: destructive-check
          instruction: Hi
          gold: []
          checks:
            - {sql: "DROP TABLE orders", expect: []}
        """,
    )
    with pytest.raises(TaskFileError) as e:
        _ = Domain(domain_dir).tasks
    assert e.value.task_id == "destructive-check" and e.value.field == "checks[0].sql"
    assert "read-only" in str(e.value)
    again = Domain(domain_dir)  # nothing was executed: the schema still has its tables
    assert "orders" in again.columns


# -- duplicates ------------------------------------------------------------------------------------------


def test_duplicate_task_id_across_files_is_an_error(domain_dir):
    write(
        domain_dir / "tasks" / "zz_more.yaml",
        """
        - id: shop-cancel
          instruction: Another task with a taken id.
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert err.task_id == "shop-cancel"
    assert err.field == "id"
    assert "duplicate task id" in str(err)


def test_duplicate_task_id_within_one_file_is_an_error(domain_dir):
    write(
        domain_dir / "tasks" / "dup.yaml",
        """
        - {id: twice, instruction: One, gold: []}
        - {id: twice, instruction: Two, gold: []}
        """,
    )
    err = load_error(domain_dir)
    assert err.task_id == "twice" and err.field == "id"
    assert "duplicate task id" in str(err)


def test_duplicate_task_id_error_names_both_files(domain_dir):
    dup = write(
        domain_dir / "tasks" / "zz_more.yaml",
        """
        - id: shop-cancel
          instruction: Another task with a taken id.
          gold: []
        """,
    )
    err = load_error(domain_dir)
    assert str(dup) in str(err)
    assert str(domain_dir / "tasks" / "basic.yaml") in str(err)


# -- domain.yaml -----------------------------------------------------------------------------------------


def test_domain_yaml_unknown_free_text_column(domain_dir):
    cfg = domain_dir / "domain.yaml"
    cfg.write_text(cfg.read_text().replace("notes: [body]", "notes: [body, mood]"))
    with pytest.raises(TaskFileError) as info:
        Domain(domain_dir)
    assert_names(info.value, cfg, None, "free_text.notes", "unknown column notes.mood")


def test_domain_yaml_unknown_table_in_volatile(domain_dir):
    cfg = domain_dir / "domain.yaml"
    cfg.write_text(cfg.read_text().replace("orders: [updated_at]", "invoices: [updated_at]"))
    with pytest.raises(TaskFileError) as info:
        Domain(domain_dir)
    assert_names(info.value, cfg, None, "volatile.invoices", "unknown column invoices.updated_at")


def test_domain_yaml_unknown_key(domain_dir):
    cfg = domain_dir / "domain.yaml"
    cfg.write_text(cfg.read_text() + "colour: blue\n")
    with pytest.raises(TaskFileError) as info:
        Domain(domain_dir)
    assert_names(info.value, cfg, None, "colour", "Extra inputs are not permitted")


def test_domain_yaml_not_a_mapping(domain_dir):
    cfg = domain_dir / "domain.yaml"
    cfg.write_text("- shop\n")
    with pytest.raises(TaskFileError) as info:
        Domain(domain_dir)
    assert_names(info.value, cfg, None, None, "must be a mapping")


# -- JSON task files ---------------------------------------------------------------------------------


def test_valid_json_task_file_loads(domain_dir):
    f = domain_dir / "tasks" / "extra.json"
    f.write_text(
        json.dumps(
            {
                "tasks": [
                    {
                        "id": "json-task",
                        "instruction": "Make customer 4 gold.",
                        "patch": {"customers": [{"id": 4, "tier": "basic"}]},
                        "gold": [{"tool": "set_tier", "args": {"customer_id": 4, "tier": "gold"}}],
                        "checks": [{"sql": "SELECT tier FROM customers WHERE id = 4", "expect": [["gold"]]}],
                        "tags": ["json"],
                    }
                ]
            }
        )
    )
    [task] = Domain(domain_dir).load_task_file(f)
    assert task.id == "json-task"
    assert task.domain == "shop" and task.split == "pool"
    assert task.gold[0].tool == "set_tier" and task.gold[0].args == {"customer_id": 4, "tier": "gold"}
    assert task.patch == {"customers": [{"id": 4, "tier": "basic"}]}
    assert task.tags == ["json"]


def test_json_task_file_is_validated_like_yaml(domain_dir):
    f = domain_dir / "tasks" / "bad.json"
    f.write_text(json.dumps([{"id": "j", "instruction": "x", "gold": [{"tool": "get_order", "args": {"order_id": "one"}}]}]))
    with pytest.raises(TaskFileError) as info:
        Domain(domain_dir).load_task_file(f)
    assert_names(info.value, f, "j", "gold[0].args", "order_id")


def test_invalid_json_task_file_names_the_file(domain_dir):
    f = domain_dir / "tasks" / "broken.json"
    f.write_text('{"tasks": [ {"id": "x", ')
    try:
        Domain(domain_dir).load_task_file(f)
    except TaskFileError as e:
        assert str(f) in str(e)
    except Exception as e:  # noqa: BLE001 - the bug: some other exception, not naming the file
        raise AssertionError(f"expected TaskFileError, got {type(e).__name__}: {e}") from e
    else:
        raise AssertionError("invalid JSON loaded without error")


# -- fingerprint -------------------------------------------------------------------------------------


def _task(**over) -> Task:
    base = {
        "id": "fp-1",
        "domain": "shop",
        "instruction": "Cancel order 1.",
        "patch": {"orders": [{"id": 1, "status": "pending"}]},
        "gold": [{"tool": "cancel_order", "args": {"order_id": 1}}],
    }
    return Task.model_validate({**base, **over})


def test_fingerprint_ignores_id_and_wording():
    a = _task()
    b = _task(id="fp-2", instruction="Please, could you cancel my order number 1?", tags=["x"], family="other")
    assert a.fingerprint() == b.fingerprint()
    assert len(a.fingerprint()) == 16


def test_fingerprint_changes_with_gold_args_patch_and_domain():
    a = _task()
    assert _task(gold=[{"tool": "cancel_order", "args": {"order_id": 2}}]).fingerprint() != a.fingerprint()
    assert _task(gold=[{"tool": "get_order", "args": {"order_id": 1}}]).fingerprint() != a.fingerprint()
    assert _task(gold=[]).fingerprint() != a.fingerprint()
    assert _task(patch={"orders": [{"id": 1, "status": "shipped"}]}).fingerprint() != a.fingerprint()
    assert _task(domain="other").fingerprint() != a.fingerprint()


def test_fingerprint_is_independent_of_argument_order():
    a = _task(gold=[{"tool": "set_total", "args": {"order_id": 1, "total": 2.5}}])
    b = _task(gold=[{"tool": "set_total", "args": {"total": 2.5, "order_id": 1}}])
    assert a.fingerprint() == b.fingerprint()
