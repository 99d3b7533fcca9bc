"""Isolation under load: 500 concurrent attempts per backend, all writing the same rows with their own values.

Ten tasks (`tests/fixtures/load`) each set the totals of two of the same four orders to task-specific
values, cancel a third, read back what they wrote and add a note (an inserted id); a noisy scripted
agent corrupts calls per attempt, so attempts of one task differ too. Every attempt goes through
`attempt.play` (open, play, grade, close), yielding to the others between turns.

Cross-talk check: each attempt's executed calls are replayed alone, one attempt at a time, on a fresh
sandbox of the same backend; every tool result (reads included) and the verdict must equal what the
attempt saw under load. Afterwards every sandbox and connection is counted as released.

On SQLite all 500 attempts are in flight at once. On PostgreSQL each sandbox is a connection, so at most
`max_open - 1` attempts hold one at a time (one slot stays free for the grader's golden replays, as in
the runner); all 500 are submitted at once and queue for a slot.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from groundstate.agents import make_agent
from groundstate.grading.grader import Grader
from groundstate.state.postgres import PostgresBackend
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.attempt import play
from groundstate.worlds.domain import Domain

N = 500
K = N // 10  # attempts per task
PG_MAX_OPEN = 12  # the shared server's connection budget for this test (max_connections is shared)


@pytest.fixture(scope="module")
def load_domain() -> Domain:
    return Domain(Path(__file__).parents[1] / "fixtures" / "load")


class Yielding:
    """A scripted noisy agent that yields to the other attempts before every turn and counts attempts in flight."""

    def __init__(self, inner, gauge: dict[str, int]):
        self.inner, self.gauge, self.started = inner, gauge, False

    async def act(self, conversation, tools):
        if not self.started:
            self.started = True
            self.gauge["now"] += 1
            self.gauge["peak"] = max(self.gauge["peak"], self.gauge["now"])
        await asyncio.sleep(0)
        turn = await self.inner.act(conversation, tools)
        if turn.done:
            self.gauge["now"] -= 1
        return turn


def run_load(backend, domain: Domain, slots: int):
    gauge = {"now": 0, "peak": 0}
    jobs = [(task, a) for task in domain.tasks for a in range(K)]

    async def main():
        gate = asyncio.Semaphore(slots)

        async def one(task, a):
            async with gate:
                agent = Yielding(make_agent("scripted:noisy:0.3", task, domain, a, seed=11), gauge)
                return await play(task, domain, agent, None, backend=backend)

        return await asyncio.gather(*(one(t, a) for t, a in jobs))

    outcomes = asyncio.run(main())
    return jobs, outcomes, gauge


def assert_no_cross_talk(domain: Domain, jobs, outcomes, backend):
    """Replay every attempt alone on a fresh sandbox of the same backend: same tool results, same verdict."""
    grader = Grader(backend)  # its own golden cache: nothing carried over from the load
    rewards = set()
    for (task, a), out in zip(jobs, outcomes, strict=True):
        assert out.verdict.system_error is None, out.verdict.system_error
        calls = out.trajectory.tool_calls
        with backend.open(backend.prepare(domain, task.patch)) as sandbox:
            for c in calls:
                r = domain.tools.call(sandbox.connection, c.name, c.arguments)
                assert (r.ok, r.content) == (c.ok, c.result), f"{task.id}#{a}: {c.name} saw another attempt's state"
            verdict = grader.grade(task, sandbox, out.trajectory)
        assert (verdict.reward, verdict.diff, verdict.changes) == (out.verdict.reward, out.verdict.diff, out.verdict.changes), f"{task.id}#{a}"
        rewards.add(out.verdict.reward)
    assert rewards == {0, 1}  # the load mixes passing and failing attempts


@pytest.mark.slow
def test_500_concurrent_sqlite_attempts_on_overlapping_rows(load_domain):
    backend = SqliteBackend()
    jobs, outcomes, gauge = run_load(backend, load_domain, slots=N)
    assert len(outcomes) == N and gauge["peak"] == N  # all 500 episodes were in flight together
    assert_no_cross_talk(load_domain, jobs, outcomes, backend)
    assert backend.in_use == 0  # every sandbox (attempts', replays' and the grader's) was closed


@pytest.mark.slow
def test_500_concurrent_postgres_attempts_on_overlapping_rows(load_domain, pg_backend):
    backend = PostgresBackend(pg_backend.dsn, max_open=PG_MAX_OPEN)
    ours = backend.sandbox_prefix.replace("_", "\\_") + "%"

    def connections() -> int:
        return backend._admin_execute("SELECT COUNT(*) FROM pg_stat_activity WHERE datname LIKE %s", (ours,))[0][0]

    try:
        jobs, outcomes, gauge = run_load(backend, load_domain, slots=PG_MAX_OPEN - 1)
        assert len(outcomes) == N and 1 < gauge["peak"] <= PG_MAX_OPEN - 1  # concurrent, within the pool
        assert backend.reused > backend.cloned  # clones were rolled back and reused, not rebuilt
        assert_no_cross_talk(load_domain, jobs, outcomes, backend)
        assert backend.in_use == 0  # every sandbox released to the pool...
        assert 0 < connections() <= PG_MAX_OPEN  # ...holding at most max_open connections
        backend.drain()
        assert backend.sandbox_databases() == [] and connections() == 0  # ...and all dropped when drained
        print(f"postgres load: {N} attempts, {backend.cloned} clones created, {backend.reused} reused, peak {gauge['peak']} in flight")
    finally:
        backend.drop_templates(load_domain)  # the test's template database: leave the shared server as we found it
        backend.close()
    assert backend._admins == []  # maintenance connections closed too


def test_runner_at_full_pool_concurrency_does_not_deadlock_on_golden_replays(tmp_path, shop, pg_backend):
    """Concurrency above the pool size, cold golden cache: every slot is held by an attempt and each task's golden
    state needs one more sandbox. Attempts compute it before taking theirs; grading while holding one used to hang
    the run forever (the bound below only turns a regression into a failure instead of a hung suite)."""
    import threading

    from groundstate.pipeline.runner import RunConfig, run
    from groundstate.records import read_records

    backend = PostgresBackend(pg_backend.dsn, max_open=3)
    pairs = [(t, shop) for t in shop.tasks]
    done: dict[str, object] = {}
    worker = threading.Thread(
        target=lambda: done.setdefault("summary", run(pairs, RunConfig(agent="scripted:gold", k=2, concurrency=16), backend, tmp_path / "r.jsonl")),
        daemon=True,
    )
    worker.start()
    worker.join(300)
    assert not worker.is_alive(), "the run deadlocked"
    assert done["summary"].passed == 6
    assert len(read_records(tmp_path / "r.jsonl")) == 6
    backend.close()
    assert backend.sandbox_databases() == []
