"""`fork()`: a copy of a live sandbox, its change log and its sequences, on SQLite and PostgreSQL (issue #34).

A fork starts in exactly its original's state (rows inserted mid-attempt, the change log, autoincrement and sequence
positions), is independent of it from then on in both directions, survives the original's close, grades a
continuation exactly as the same calls played straight through, and is released and reaped like any sandbox."""

from __future__ import annotations

import asyncio
import secrets
import time
from types import SimpleNamespace

import psycopg
import pytest
from psycopg import sql

from groundstate.state.base import Backend, ForkUnsupported, Template
from groundstate.state.postgres import PostgresBackend
from groundstate.state.sqlite import SqliteBackend
from groundstate.types import Trajectory
from groundstate.worlds.environment import SqlEnvironment

CALLS = [  # shop-multi's gold with a note inserted mid-attempt (a generated id) and a second note after the branch
    ("find_customer", {"email": "c3@example.com"}),
    ("add_note", {"customer_id": 3, "body": "asked for gold"}),
    ("set_tier", {"customer_id": 3, "tier": "gold"}),
    ("set_total", {"order_id": 3, "total": 42.5}),
    ("cancel_order", {"order_id": 3}),
    ("add_note", {"customer_id": 3, "body": "done"}),
    ("tag_customer", {"customer_id": 3, "tag": "vip"}),
]


def multi(shop):
    """shop-multi with customer 3 patched to basic, so that its set_tier is a write (in the seed it is gold already)."""
    t = shop.task("shop-multi")
    return t.model_copy(update={"patch": {**t.patch, "customers": [{"id": 3, "tier": "basic"}]}})


def rows(sandbox, domain) -> dict[str, list]:
    """Every row of every table and of the change log, ordered: the whole state of a sandbox."""
    db = sandbox.connection
    out = {t: db.query(f"SELECT * FROM {t} ORDER BY {', '.join(domain.primary_keys[t])}") for t in domain.tables}
    out["_gs_log"] = db.query("SELECT tbl, pk, old FROM _gs_log ORDER BY tbl, pk")
    return out


async def _play(env: SqlEnvironment, calls) -> None:
    for name, args in calls:
        result = await env.call_tool(name, args)
        assert result.ok, result.content


def test_a_fork_starts_in_the_originals_state_and_is_independent_both_ways(backend, shop):
    task = multi(shop)

    async def main():
        env = await SqlEnvironment.open(task, shop, backend)
        try:
            await _play(env, CALLS[:3])  # a note inserted, a tier changed
            fork = await env.fork()
            try:
                assert fork.sandbox is not env.sandbox and fork.task is task
                assert rows(fork.sandbox, shop) == rows(env.sandbox, shop)
                assert (await fork.changes()).to_json() == (await env.changes()).to_json() and len(await env.changes()) == 2
                await _play(fork, [("cancel_order", {"order_id": 3})])
                await _play(env, [("set_total", {"order_id": 3, "total": 1.5})])
                # each sees its own write only
                assert env.sandbox.connection.one("SELECT status, total FROM orders WHERE id = 3") == {"status": "pending", "total": 1.5}
                assert fork.sandbox.connection.one("SELECT status, total FROM orders WHERE id = 3") == {"status": "cancelled", "total": 40.0}
                # a new row in each gets the same next id (what inserted-id alignment relies on), and stays its own
                a = (await env.call_tool("add_note", {"customer_id": 3, "body": "original"})).content
                b = (await fork.call_tool("add_note", {"customer_id": 3, "body": "fork"})).content
                assert env.sandbox.connection.scalar("SELECT MAX(id) FROM notes") == fork.sandbox.connection.scalar("SELECT MAX(id) FROM notes")
                assert a == b and "original" not in str(rows(fork.sandbox, shop)) and "'fork'" not in str(rows(env.sandbox, shop))
            finally:
                await fork.close()
            # the original goes on after its fork is closed
            assert (await env.call_tool("tag_customer", {"customer_id": 3, "tag": "vip"})).ok
        finally:
            await env.close()

    asyncio.run(main())


@pytest.mark.parametrize("branch", [0, 2, 4, len(CALLS)])
def test_a_continuation_played_on_a_fork_is_graded_as_the_calls_played_straight_through(backend, shop, branch):
    """The prefix on the original, the rest on its fork after the original is closed: the same change set (taken from
    the attempt's start, not the fork's) and the same verdict as every call on one sandbox."""
    task = multi(shop)

    async def main():
        straight = await SqlEnvironment.open(task, shop, backend)
        try:
            await _play(straight, CALLS)
            want = ((await straight.changes()).to_json(), (await straight.grade(None)).to_json())
        finally:
            await straight.close()
        env = await SqlEnvironment.open(task, shop, backend)
        try:
            await _play(env, CALLS[:branch])
            fork = await env.fork()
        finally:
            await env.close()  # closing the original leaves the fork as it is
        try:
            await _play(fork, CALLS[branch:])
            got = ((await fork.changes()).to_json(), (await fork.grade(None)).to_json())
        finally:
            await fork.close()
        return want, got

    want, got = asyncio.run(main())
    assert got == want
    assert got[1]["changes"] == {"insert": 3, "update": 2, "delete": 0} and got[1]["reward"] == 0  # the notes are not gold's


def test_a_fork_of_a_fork_and_its_release(backend, shop):
    task = multi(shop)
    env = SqlEnvironment(task, backend.open(backend.prepare(shop, task.patch)))

    async def main():
        await _play(env, CALLS[:2])
        first = await env.fork()
        await _play(first, CALLS[2:4])
        second = await first.fork()
        await _play(second, CALLS[4:])
        assert len(await second.changes()) == 5 and len(await first.changes()) == 3 and len(await env.changes()) == 1
        for e in (env, first, second):
            await e.close()
            await e.close()  # idempotent

    asyncio.run(main())
    if isinstance(backend, SqliteBackend):
        assert backend.in_use == 0
    else:
        assert backend.in_use == 0 and backend.forked >= 2
        # a forked sandbox (and the one it was forked from) no longer equals its template: dropped, never pooled
        assert backend.sandbox_databases() == sorted(c.dbname for c in backend._idle.values())
        assert all(not c.committed for c in backend._idle.values())


def test_a_transcript_forks_with_its_environment():
    t = Trajectory(messages=[{"role": "user", "content": "hi"}], turns=1)
    f = t.fork()
    f.messages.append({"role": "assistant", "content": "hello"})
    f.turns += 1
    assert t.messages == [{"role": "user", "content": "hi"}] and t.turns == 1 and f.turns == 2


# -- sequences and autoincrement -----------------------------------------------------------------------------------


def _sqlite_template_with_autoincrement(backend: SqliteBackend, shop) -> Template:
    import sqlite3

    tpl = backend.prepare(shop)
    conn = sqlite3.connect(":memory:")
    conn.deserialize(tpl.handle)
    conn.execute("CREATE TABLE counters (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT)")
    handle = conn.serialize()
    conn.close()
    return Template("sqlite", shop, tpl.key + ":counters", handle, backend)


def _postgres_template_with_a_sequence(backend: PostgresBackend, shop) -> Template:
    tpl = backend.prepare(shop)
    name = f"gs_tpl_forktest_{secrets.token_hex(4)}"
    backend._admin_execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(tpl.handle)))
    with backend._connect(name) as conn:
        conn.execute("CREATE TABLE counters (id SERIAL PRIMARY KEY, body TEXT)")
    return Template("postgres", shop, name, name, backend)


def test_autoincrement_and_sequence_positions_are_forked(backend, shop):
    """An id that a sequence (PostgreSQL) or AUTOINCREMENT (SQLite) hands out is not max(id) + 1: after 3 rows and the
    last one deleted, the next is 4 in the original and in its fork alike."""
    pg = isinstance(backend, PostgresBackend)
    template = _postgres_template_with_a_sequence(backend, shop) if pg else _sqlite_template_with_autoincrement(backend, shop)
    try:
        with backend.open(template) as sandbox:
            db = sandbox.connection
            for body in ("a", "b", "c"):
                db.execute("INSERT INTO counters (body) VALUES (?)", body)
            db.execute("DELETE FROM counters WHERE id = 3")
            with backend.fork(sandbox) as fork:
                for d in (db, fork.connection):
                    d.execute("INSERT INTO counters (body) VALUES (?)", "next")
                    assert d.scalar("SELECT MAX(id) FROM counters") == 4
                    if pg:
                        assert d.scalar("SELECT session_user") == "groundstate_sandbox"
    finally:
        if pg:
            backend.drain()
            backend._admin_execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(template.handle)))


# -- refusals ------------------------------------------------------------------------------------------------------


def test_a_fork_in_the_middle_of_a_transaction_is_refused(backend, shop):
    task = multi(shop)
    with backend.open(backend.prepare(shop, task.patch)) as sandbox:
        raw = sandbox.connection.raw
        if isinstance(backend, SqliteBackend):
            raw.execute("BEGIN")
            with pytest.raises(RuntimeError, match="between tool calls"):
                backend.fork(sandbox)
            raw.execute("ROLLBACK")
        else:
            with pytest.raises(psycopg.Error):
                raw.execute("SELECT 1/0")  # the attempt's transaction is aborted
            with pytest.raises(RuntimeError, match="between tool calls"):
                backend.fork(sandbox)
    stranger = SqliteBackend()
    with stranger.open(stranger.prepare(shop)) as other, pytest.raises(ValueError, match="the backend that opened it"):
        backend.fork(other)
    assert backend.in_use == 0


def test_a_fork_with_every_slot_held_is_refused_instead_of_waiting_forever(pg_backend, shop):
    """A fork takes a second slot while its caller holds one: waiting for it could deadlock a full pool (every holder
    waiting for another's slot), so a full pool refuses the fork and the source goes on."""
    from groundstate.state.postgres import PoolExhausted

    backend = PostgresBackend(pg_backend.dsn, max_open=1)
    try:
        with backend.open(backend.prepare(shop, multi(shop).patch)) as sandbox:
            sandbox.connection.execute("UPDATE customers SET tier = 'gold' WHERE id = 3")
            with pytest.raises(PoolExhausted, match="cannot be forked"):
                backend.fork(sandbox)
            assert sandbox.connection.scalar("SELECT tier FROM customers WHERE id = 3") == "gold" and backend.in_use == 1
        assert backend.in_use == 0
    finally:
        backend.close()


def test_two_forks_of_one_sandbox_at_once_are_both_whole(pg_backend, shop):
    """Each fork closes and reopens its source's connection: two at once take turns, and both copy its state."""
    task = multi(shop)

    async def main():
        env = await SqlEnvironment.open(task, shop, pg_backend)
        forks = []
        try:
            await _play(env, CALLS[:3])
            forks = list(await asyncio.gather(env.fork(), env.fork()))
            want = rows(env.sandbox, shop)
            assert [rows(f.sandbox, shop) for f in forks] == [want, want]
            await _play(env, CALLS[3:4])  # the source goes on
        finally:
            for e in (env, *forks):
                await e.close()

    asyncio.run(main())
    assert pg_backend.in_use == 0


def test_a_source_whose_writes_cannot_be_committed_is_lost_not_reverted(pg_backend, shop):
    """A fork commits its source's writes first; where that fails (a deferred constraint of the attempt's own
    transaction), the writes are gone with it, so the source is closed: its next tool call is `SandboxLost`, a system
    error, never a tool result from a state the agent did not leave."""
    from groundstate.types import SandboxLost

    task = multi(shop)

    async def main():
        env = await SqlEnvironment.open(task, shop, pg_backend)
        try:
            await _play(env, CALLS[:3])
            raw = env.sandbox.connection.raw
            raw.execute("CREATE TEMP TABLE p (id int PRIMARY KEY)")
            raw.execute("CREATE TEMP TABLE c (pid int REFERENCES p DEFERRABLE INITIALLY DEFERRED)")
            raw.execute("INSERT INTO c VALUES (1)")  # violates its reference, checked at COMMIT
            with pytest.raises(psycopg.Error):
                await env.fork()
            with pytest.raises(SandboxLost):
                await env.call_tool("find_customer", {"email": "c3@example.com"})
        finally:
            await env.close()

    asyncio.run(main())
    assert pg_backend.in_use == 0 and pg_backend.sandbox_databases() == sorted(c.dbname for c in pg_backend._idle.values())


def test_what_cannot_fork_says_so_naming_itself():
    from groundstate.worlds.thinkingbox.env import TbEnvironment

    tb = TbEnvironment.__new__(TbEnvironment)
    tb.case = SimpleNamespace(scenario="calendar")
    with pytest.raises(ForkUnsupported, match="TbEnvironment .*calendar.* cannot fork") as e:
        asyncio.run(tb.fork())
    assert isinstance(e.value, NotImplementedError)

    class Plain(Backend):
        name = "plain"

        def prepare(self, domain, patch=None): ...

        def open(self, template): ...

    with pytest.raises(ForkUnsupported, match="the plain backend cannot fork"):
        Plain().fork(None)


# -- reaping -------------------------------------------------------------------------------------------------------


def test_a_dead_owners_forks_are_reaped_like_its_sandboxes(pg_backend, shop):
    """A process that dies holding an original and its fork leaves two databases named with its owner key; once its
    lock is gone and nobody is connected, `cleanup_stale` of another backend drops both."""
    dead = PostgresBackend(pg_backend.dsn)
    task = multi(shop)
    sandbox = dead.open(dead.prepare(shop, task.patch))
    sandbox.connection.execute("UPDATE customers SET tier = 'gold' WHERE id = 3")
    fork = dead.fork(sandbox)
    names = sorted(dead.sandbox_databases())
    assert len(names) == 2 and sorted([sandbox.clone.dbname, fork.clone.dbname]) == names
    assert all(n.startswith(dead.sandbox_prefix) for n in names)
    assert not set(names) & set(pg_backend.cleanup_stale())  # alive: its owner lock is held
    # the process dies: its sessions end without a close
    for s in (sandbox, fork):
        s.clone.conn.close()
        s.closed = True
    dead._owner_conn.close()
    dead.close()
    for _ in range(100):  # a closed session leaves pg_stat_activity a moment later
        if not pg_backend._admin_execute("SELECT 1 FROM pg_stat_activity WHERE datname = ANY(%s)", (names,)):
            break
        time.sleep(0.05)
    assert sorted(set(names) & set(pg_backend.cleanup_stale())) == names
    assert dead.sandbox_databases() == []


def test_a_large_worlds_pages_are_large_and_its_forks_are_whole():
    """A world of 20,000 seed rows or more gets 64 KiB pages (`sqlite.page_size`), so that a fork's page-by-page copy
    costs about what an open's one copy does; its forks keep them, and a fork's state is the original's."""
    from pathlib import Path

    from groundstate.state.sqlite import LARGE_PAGE, LARGE_WORLD_ROWS, page_size
    from groundstate.worlds.domain import Domain

    assert page_size(LARGE_WORLD_ROWS - 1) == 4096 and page_size(LARGE_WORLD_ROWS) == LARGE_PAGE
    shop = Domain(Path(__file__).parents[1] / "fixtures" / "shop")
    for scale, expect in ((1, 4096), (100, LARGE_PAGE)):  # 400 and 40,000 seed rows
        backend = SqliteBackend(scale=scale)
        sb = backend.open(backend.prepare(shop, multi(shop).patch))
        shop.tools.call(sb.connection, "set_tier", {"customer_id": 3, "tier": "gold"})
        fork = backend.fork(sb)
        assert [s.connection.raw.execute("PRAGMA page_size").fetchone()[0] for s in (sb, fork)] == [expect, expect]
        assert rows(fork, shop) == rows(sb, shop) and len(sb.changes()) == 1
        fork.close()
        sb.close()
