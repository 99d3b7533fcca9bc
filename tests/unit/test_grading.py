"""The grader: golden replay, masking, checks, readable diffs, system errors, and cost that follows the change."""

import pytest

from groundstate.grading.grader import grade, grader_for, replay
from groundstate.state.sqlite import SqliteBackend
from groundstate.tasks import Task


def attempt(backend, domain, task, calls):
    sandbox = backend.open(backend.prepare(domain, task.patch))
    replay(sandbox, calls)
    return sandbox


def test_gold_passes_and_wrong_state_fails_with_a_readable_diff(backend, shop):
    task = shop.task("shop-multi")
    gold = [c.model_dump() for c in task.gold]
    with attempt(backend, shop, task, gold) as sb:
        v = grade(task, sb)
        assert (v.reward, v.state_reward, v.system_error, v.diff) == (1, 1, None, [])
    wrong = [c if c["tool"] != "set_total" else {"tool": "set_total", "args": {"order_id": 3, "total": 41.0}} for c in gold]
    with attempt(backend, shop, task, wrong) as sb:
        v = grade(task, sb)
    assert v.reward == 0
    [row] = v.diff
    assert row["table"] == "orders" and row["key"] == [3] and row["problem"] == "wrong update"
    assert row["columns"] == {"total": {"expected": 42.5, "actual": 41}}


def test_volatile_columns_are_masked_and_free_text_compared_by_presence(backend, shop):
    task = shop.task("shop-refuse")
    # different wording of the note: same verdict
    with attempt(backend, shop, task, [{"tool": "add_note", "args": {"customer_id": 2, "body": "Declined; it had shipped."}}]) as sb:
        assert grade(task, sb).reward == 1
    # an empty note is not a note
    with attempt(backend, shop, task, [{"tool": "add_note", "args": {"customer_id": 2, "body": "  "}}]) as sb:
        assert grade(task, sb).reward == 0
    # updated_at is volatile: writing a different timestamp does not matter
    cancel = shop.task("shop-cancel")
    with attempt(backend, shop, cancel, [{"tool": "cancel_order", "args": {"order_id": 1}}]) as sb:
        sb.connection.execute("UPDATE orders SET updated_at = '1999-01-01' WHERE id = 1")
        assert grade(cancel, sb).reward == 1


def test_extra_checks_must_hold(backend, shop):
    task = shop.task("shop-multi")
    broken = task.model_copy(update={"checks": [type(task.checks[0])(sql="SELECT status FROM orders WHERE id = 3", expect=[["pending"]])]})
    with attempt(backend, shop, task, [c.model_dump() for c in task.gold]) as sb:
        v = grade(broken, sb)
    assert v.reward == 0 and any("check 0 failed" in r for r in v.reasons)


def test_broken_gold_is_a_system_error_not_a_zero(shop):
    backend = SqliteBackend()
    task = Task(id="bad-gold", domain="shop", instruction="x", gold=[{"tool": "cancel_order", "args": {"order_id": 99999}}])
    with backend.open(backend.prepare(shop, {})) as sb:
        v = grade(task, sb)
    assert v.reward is None and v.system_error and "gold call 0" in v.system_error


def test_rubric_tasks_without_a_judge_are_unjudged(shop):
    backend = SqliteBackend()
    base = shop.task("shop-cancel")
    task = base.model_copy(update={"rubrics": ["Does the reply tell the customer the order is cancelled?"]})
    with attempt(backend, shop, task, [c.model_dump() for c in task.gold]) as sb:
        v = grade(task, sb)
    assert v.reward is None and v.unjudged and v.state_reward == 1 and v.system_error is None


def test_the_same_trajectory_always_gets_the_same_verdict(shop):
    backend = SqliteBackend()
    task = shop.task("shop-multi")
    verdicts = set()
    for _ in range(50):
        with attempt(backend, shop, task, [c.model_dump() for c in task.gold][:3]) as sb:
            v = grade(task, sb)
            verdicts.add((v.reward, tuple(v.reasons), repr(v.diff)))
    assert len(verdicts) == 1


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
def test_grading_cost_does_not_grow_with_the_database(backend_name, shop, request):
    """Rows read by the grader depend on the rows changed, not on the size of the world (1x vs 20x)."""
    from groundstate.state.postgres import PostgresBackend

    task = shop.task("shop-multi")
    read = {}
    for scale in (1.0, 20.0):
        if backend_name == "sqlite":
            backend = SqliteBackend(scale=scale)
        else:
            request.getfixturevalue("pg_backend")
            backend = PostgresBackend(scale=scale)
        with attempt(backend, shop, task, [c.model_dump() for c in task.gold]) as sb:
            total_rows = sum(sb.connection.scalar(f"SELECT COUNT(*) AS n FROM {t}") for t in shop.tables)
            changes = sb.changes()
            assert grader_for(backend).grade(task, sb).reward == 1
        read[scale] = (changes.rows_read, len(changes), total_rows)
        backend.close()
    assert read[20.0][2] > 15 * read[1.0][2]  # the world really is bigger
    assert read[1.0][:2] == read[20.0][:2]  # ...and the grader read exactly the same number of rows
    writes = sum(shop.tools[c.tool].write for c in task.gold)
    assert read[1.0][0] <= 2 * writes  # at most one log row and one current row per written row


def test_a_check_that_never_ends_is_a_system_error_and_the_sandbox_stays_usable(backend, shop, monkeypatch):
    """A hostile or buggy task check (an unbounded recursive CTE) is cut off by a time limit: the grade is a system
    error naming the check, never a hang or a 0, and the same sandbox grades correctly afterwards."""
    from groundstate.grading import grader as grading
    from groundstate.tasks import SqlCheck

    monkeypatch.setattr(grading, "CHECK_TIME_LIMIT_S", 0.5)
    task = shop.task("shop-cancel")
    endless = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) AS c FROM r"
    hostile = task.model_copy(update={"checks": [SqlCheck(sql=endless, expect=[[1]])]})
    sandbox = backend.open(backend.prepare(shop, task.patch))
    try:
        replay(sandbox, [c.model_dump() for c in task.gold])
        grader = grader_for(backend)
        v = grader.grade(hostile, sandbox)
        assert v.reward is None and v.system_error is not None
        assert "interrupted" in v.system_error or "statement timeout" in v.system_error  # SQLite / PostgreSQL
        assert grader.grade(task, sandbox).reward == 1  # the sandbox (and on PostgreSQL its transaction) survived
    finally:
        sandbox.close()
