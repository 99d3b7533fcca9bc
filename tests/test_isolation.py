"""Every attempt has its own world: concurrent attempts writing the same rows never see each other."""

import asyncio

import pytest

from groundstate.agents.base import AgentTurn, ToolCallRequest
from groundstate.episode import run_episode


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
                await run_episode(task, shop, sandbox, agent, None)
                return sandbox.changes()
            finally:
                await asyncio.to_thread(sandbox.close)

    async def main():
        slots = asyncio.Semaphore(backend.max_open or n)
        return await asyncio.gather(*(attempt(a, slots) for a in agents))

    changes = asyncio.run(main())
    for agent, cs in zip(agents, changes):
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
    from groundstate.grading import replay

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

