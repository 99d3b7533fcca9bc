"""Every attempt has its own world: concurrent attempts writing the same rows never see each other."""

import asyncio

import pytest

from groundstate.types import AgentTurn, ToolCallRequest
from groundstate.worlds.environment import SqlEnvironment
from groundstate.worlds.episode import run_episode


class WriteThenReadAgent:
    """Sets order 1's total to a value unique to this attempt, yields to the others, then reads it back."""

    def __init__(self, value: float):
        self.value, self.step, self.seen = value, 0, None

    async def act(self, conversation, tools):
        self.step += 1
        if self.step == 1:
            return AgentTurn(tool_calls=[ToolCallRequest("a", "set_total", {"order_id": 1, "total": self.value})])
        if self.step == 2:
            await asyncio.sleep(0.01)  # let every other attempt write first
            return AgentTurn(tool_calls=[ToolCallRequest("b", "get_order", {"order_id": 1})])
        import json

        self.seen = json.loads(conversation[-1]["content"])["total"]
        return AgentTurn(text="done", done=True)


@pytest.mark.parametrize("n", [200])
def test_concurrent_attempts_never_see_each_others_writes(backend, shop, n):
    task = shop.task("shop-cancel")
    template = backend.prepare(shop, task.patch)
    agents = [WriteThenReadAgent(1000.0 + i) for i in range(n)]

    async def attempt(agent, slots):
        async with slots:  # PostgreSQL: at most max_open sandboxes (connections) at a time
            sandbox = await asyncio.to_thread(backend.open, template)
            try:
                await run_episode(SqlEnvironment(task, sandbox), agent, None)
                return sandbox.changes()
            finally:
                await asyncio.to_thread(sandbox.close)

    async def main():
        slots = asyncio.Semaphore(backend.max_open or n)
        return await asyncio.gather(*(attempt(a, slots) for a in agents))

    changes = asyncio.run(main())
    for agent, cs in zip(agents, changes, strict=True):
        assert agent.seen == agent.value  # read back its own write, not another attempt's
        [row] = cs.rows.values()
        assert row.after["total"] == agent.value and row.before["total"] == 10
    # the template itself is untouched
    with backend.open(template) as fresh:
        assert fresh.connection.scalar("SELECT total FROM orders WHERE id = 1") == 10
        assert len(fresh.changes()) == 0
    if backend.name == "postgres":
        assert backend.in_use == 0  # every sandbox was released...
        assert backend.reused > 0  # ...and clones were reset by rollback and reused
        backend.drain()
        assert backend.sandbox_databases() == []  # ...and dropped when the pool is drained


def test_inserted_ids_are_identical_across_backends_and_attempts(backend, shop):
    from groundstate.grading.grader import replay

    task = shop.task("shop-refuse")
    template = backend.prepare(shop, task.patch)
    ids = []
    for _ in range(3):
        with backend.open(template) as sb:
            [(ok, content)] = replay(sb, [{"tool": "add_note", "args": {"customer_id": 1, "body": "hi"}}])
            assert ok
            ids.append(content)
    assert len(set(ids)) == 1 and '"note_id": 1' in ids[0]


@pytest.mark.postgres
def test_cleanup_stale_drops_only_this_machines_dead_sandboxes(pg_backend):
    """Sandbox names carry a host tag, so nodes sharing one server never drop each other's sandboxes."""
    from psycopg import sql

    from groundstate.state.postgres import _host_tag, process_sandbox_prefix

    dead_pid = 2**22 + 12345  # above the default pid_max: no process can have it
    assert process_sandbox_prefix().startswith(f"gs_sb_{_host_tag()}_")
    ours = f"gs_sb_{_host_tag()}_{dead_pid}_0_0"
    legacy = f"gs_sb_{dead_pid}_0_0"  # a name from before host tags (single machine)
    other_host = f"gs_sb_h00000000_{dead_pid}_0_0" if _host_tag() != "h00000000" else f"gs_sb_h00000001_{dead_pid}_0_0"
    live = f"{process_sandbox_prefix()}999_0"  # this very process: alive
    names = [ours, legacy, other_host, live]
    for name in names:
        pg_backend._admin_execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        dropped = pg_backend.cleanup_stale()
        assert ours in dropped and legacy in dropped
        assert other_host not in dropped and live not in dropped
        assert pg_backend._exists(other_host) and pg_backend._exists(live)
    finally:
        for name in names:
            pg_backend._admin_execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


HANGING_QUERY = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) AS n FROM c",
    "postgres": "SELECT pg_sleep(600) AS n",
}


def test_a_sandbox_closed_under_a_running_statement_is_released_only_after_it(backend, shop):
    """An attempt cut off by a time limit closes its sandbox while a worker thread (a tool, the grader) still runs a
    statement on it. The close interrupts that statement and the sandbox is released only when the call returns:
    a connection is never closed, nor a clone pooled for the next attempt, under a running statement (closing a
    SQLite connection under a running query can crash the process; a pooled PostgreSQL clone would be shared)."""
    import threading

    template = backend.prepare(shop, shop.task("shop-cancel").patch)
    sandbox = backend.open(template)
    started, outcome = threading.Event(), {}

    def worker():
        with sandbox.in_use():
            started.set()
            try:
                sandbox.connection.query(HANGING_QUERY[backend.name])
            except Exception as e:  # noqa: BLE001 - the interrupted statement
                outcome["error"] = type(e).__name__
            outcome["closed_while_running"] = sandbox.closed

    thread = threading.Thread(target=worker)
    thread.start()
    assert started.wait(30)
    sandbox.close()  # the attempt is over: interrupt the statement (or refuse it, not yet started), release after it
    thread.join(60)
    assert not thread.is_alive(), "the statement was not interrupted"
    assert outcome == {"error": outcome.get("error"), "closed_while_running": False} and outcome["error"]
    assert sandbox.closed  # released by the worker as it returned
    with pytest.raises(RuntimeError, match="released"), sandbox.in_use():
        pass
    # the backend got its sandbox back exactly once, in a state the next attempt can use
    again = backend.open(template)
    try:
        assert again.connection.query("SELECT 1 AS one") == [{"one": 1}]
    finally:
        again.close()
    if backend.name == "postgres":
        assert backend.in_use == 0
