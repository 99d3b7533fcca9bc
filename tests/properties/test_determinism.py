"""Determinism: one trajectory graded 1,000 times gives one verdict, the same on SQLite and PostgreSQL.

The task is the bundled one with the largest golden change set (12 rows over several tables, two SQL
checks), so the ordering of change sets, diffs and reasons is exercised; the trajectories are its gold
solution and a noisy one that fails with a many-row diff. The whole verdict is compared (reward,
reasons, diff, change counts), not just the reward: the grader recomputes the golden state with a
fresh cache every 100 gradings, and the trajectory is also replayed on fresh sandboxes.
(`tests/properties/test_parity.py` extends this to every bundled task's gold, no-op and mutant trajectories.)
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser, make_scripted_agent
from groundstate.grading.grader import Grader
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.domain import load_domain
from groundstate.worlds.environment import SqlEnvironment
from groundstate.worlds.episode import run_episode

TASK_ID = "banking-stolen-wallet-001"
GRADINGS = 1_000
REPLAYS = 25


def _digest(verdict) -> str:
    return hashlib.sha256(json.dumps(verdict.to_json(), sort_keys=True, default=str).encode()).hexdigest()


def _calls(traj) -> list[dict]:
    """The tool calls a trajectory made, as a replayable script."""
    return [{"tool": c.name, "args": c.arguments} for c in traj.tool_calls]


async def _play(task, domain, backend, agent):
    sandbox = backend.open(backend.prepare(domain, task.patch))
    traj = await run_episode(SqlEnvironment(task, sandbox), agent, ScriptedUser(task.user.script))
    return sandbox, traj


def _noisy_trajectory(task, domain):
    """A seeded noisy attempt that fails with a diff of several rows (found once, on SQLite)."""
    backend = SqliteBackend()
    for attempt in range(50):
        sandbox, traj = asyncio.run(_play(task, domain, backend, make_scripted_agent("scripted:noisy:0.5", task, domain, attempt)))
        with sandbox:
            verdict = Grader(backend).grade(task, sandbox, traj)
        if verdict.reward == 0 and len(verdict.diff) >= 3:
            return traj
    raise AssertionError("no noisy attempt with a many-row diff in 50 seeds")


@pytest.fixture(scope="module")
def scripts():
    domain = load_domain("banking")
    task = domain.task(TASK_ID)
    noisy = _noisy_trajectory(task, domain)
    return task, domain, {"gold": [c.model_dump() for c in task.gold], "noisy": _calls(noisy)}


def test_the_task_exercises_ordering(scripts, backend):
    task, domain, _ = scripts
    golden = Grader(backend).golden(task, backend.prepare(domain, task.patch))
    assert len(golden) >= 12 and len({c.table for c in golden.rows.values()}) >= 4 and len(task.checks) >= 2


def _one_verdict(task, domain, backend, calls) -> tuple[str, set]:
    """Play `calls` once and grade the final state 1,000 times, then replay it on fresh sandboxes: one digest."""
    sandbox, traj = asyncio.run(_play(task, domain, backend, ScriptedAgent(calls)))
    digests, rewards = set(), set()
    with sandbox:
        grader = Grader(backend)
        for i in range(GRADINGS):
            if i % 100 == 0:
                grader = Grader(backend)  # recompute the golden state now and then, not only read the cache
            verdict = grader.grade(task, sandbox, traj)
            digests.add(_digest(verdict))
            rewards.add(verdict.reward)
    assert len(digests) == 1, f"{backend.name}: {len(digests)} different verdicts in {GRADINGS} gradings"
    for _ in range(REPLAYS):
        fresh, _ = asyncio.run(_play(task, domain, backend, ScriptedAgent(calls)))
        with fresh:
            digests.add(_digest(Grader(backend).grade(task, fresh, traj)))
    assert len(digests) == 1, f"{backend.name}: replays on fresh sandboxes gave {len(digests)} different verdicts"
    return digests.pop(), rewards


@pytest.mark.parametrize("which", ["gold", "noisy"])
def test_one_trajectory_graded_a_thousand_times_gives_one_verdict(scripts, pg_backend, which):
    task, domain, calls = scripts
    on_sqlite, rewards = _one_verdict(task, domain, SqliteBackend(), calls[which])
    assert rewards == ({1} if which == "gold" else {0})
    on_postgres, _ = _one_verdict(task, domain, pg_backend, calls[which])
    assert on_sqlite == on_postgres, f"{which}: the SQLite and PostgreSQL verdicts differ (reasons or diff)"
