"""Determinism across backends: every bundled task's gold, no-op and mutant trajectories get the same verdict
on SQLite and PostgreSQL — the whole verdict (reward, reasons, diff, change counts), not only the reward.

The whole suite is ~8,800 trajectories. On SQLite each one runs the production path (a sandbox opened
from the task's template, graded by the grader). On PostgreSQL, cloning a database per task (and dropping
it, which forces a checkpoint) made the lint-based version of this test take 4-10 minutes on two cores, so
each worker holds one clone of the domain's base and every task runs inside it under savepoints:
`apply_patch` (the function that builds templates) applies the task's patch and the change log is cleared,
exactly as when a template is built; each trajectory runs under a savepoint that is rolled back after it
is graded; the golden change set is the gold calls replayed the same way. The domains use no sequences,
so a rollback restores the start state exactly. The template/clone path itself is compared by the full
`lint` on the kiosk and fixture domains below, by `tests/properties/test_determinism.py` and the backend-parametrised tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser
from groundstate.audits.lint import lint
from groundstate.grading.grader import Grader, replay
from groundstate.state.base import apply_patch
from groundstate.state.capture import LOG_TABLE
from groundstate.state.sqlite import SqliteBackend
from groundstate.tools.mutate import mutants
from groundstate.worlds.domain import bundled_domains, load_domain
from groundstate.worlds.environment import SqlEnvironment
from groundstate.worlds.episode import run_episode

PG_WORKERS = 8  # PostgreSQL connections this test holds at once


def _trajectories(task, domain) -> list[tuple[str, list[dict]]]:
    """What `tasks lint` plays: gold, no-op, and every mutant of gold."""
    gold = [c.model_dump() for c in task.gold]
    return [("gold", gold), ("noop", [])] + [(m.description, m.calls) for m in mutants(gold, domain.tools)]


def _digest(verdict) -> str:
    return hashlib.sha256(json.dumps(verdict.to_json(), sort_keys=True, default=str).encode()).hexdigest()


async def _play(task, domain, sandbox, calls):
    agent = ScriptedAgent(calls, final_text="I have looked into it; nothing needs to change." if not calls else "Done.")
    return await run_episode(SqlEnvironment(task, sandbox), agent, ScriptedUser(task.user.script))


def _on_templates(task, domain, backend) -> dict[str, tuple[int | None, str]]:
    """Verdicts through the production path: one sandbox per trajectory, opened from the task's template."""
    grader, template, out = Grader(backend), backend.prepare(domain, task.patch), {}
    for name, calls in _trajectories(task, domain):
        with backend.open(template) as sandbox:
            traj = asyncio.run(_play(task, domain, sandbox, calls))
            v = grader.grade(task, sandbox, traj)
        out[name] = (v.state_reward, _digest(v))
    return out


class _InPlaceGrader(Grader):
    """The grader, with the golden change set computed in the same sandbox (see the module docstring)."""

    def __init__(self, backend, golden):
        super().__init__(backend)
        self._in_place = golden

    def golden(self, task, template):
        return self._in_place


def _on_postgres(task, domain, sandbox) -> dict[str, tuple[int | None, str]]:
    """Verdicts of every trajectory of `task`, each under a savepoint of one long-lived base sandbox."""
    db, raw, out = sandbox.connection, sandbox.connection.raw, {}
    raw.execute("SAVEPOINT gs_parity_task")
    try:
        apply_patch(db, domain, task.patch)
        raw.execute(f"DELETE FROM {LOG_TABLE}")
        raw.execute("SAVEPOINT gs_parity_try")
        results = replay(sandbox, [c.model_dump() for c in task.gold])
        assert all(ok for ok, _ in results), f"{task.id}: gold fails on PostgreSQL: {results}"
        grader = _InPlaceGrader(sandbox.template.owner, sandbox.changes())
        raw.execute("ROLLBACK TO SAVEPOINT gs_parity_try")
        for name, calls in _trajectories(task, domain):
            traj = asyncio.run(_play(task, domain, sandbox, calls))
            v = grader.grade(task, sandbox, traj)
            out[name] = (v.state_reward, _digest(v))
            raw.execute("ROLLBACK TO SAVEPOINT gs_parity_try")
    finally:
        raw.execute("ROLLBACK TO SAVEPOINT gs_parity_task")
        raw.execute("RELEASE SAVEPOINT gs_parity_task")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("domain_name", bundled_domains())
def test_every_trajectory_of_the_suite_gets_the_same_verdict_on_both_backends(domain_name, pg_backend):
    domain = load_domain(domain_name)
    tasks = domain.tasks
    lite = SqliteBackend()
    base = pg_backend.prepare(domain, {})
    chunks = [tasks[i::PG_WORKERS] for i in range(PG_WORKERS)]

    def run_chunk(chunk):
        with pg_backend.open(base) as sandbox:
            return {t.id: _on_postgres(t, domain, sandbox) for t in chunk}

    with ThreadPoolExecutor(PG_WORKERS) as pool:  # PostgreSQL waits on the server; SQLite runs meanwhile
        futures = [pool.submit(run_chunk, c) for c in chunks if c]
        on_sqlite = {t.id: _on_templates(t, domain, lite) for t in tasks}
        on_postgres = {k: v for f in futures for k, v in f.result().items()}

    compared = 0
    for t in tasks:
        a, b = on_sqlite[t.id], on_postgres[t.id]
        assert a.keys() == b.keys()
        assert a["gold"][0] == 1 and a["noop"][0] == 0, f"{t.id}: gold must pass and no-op fail"
        for name in a:
            assert a[name] == b[name], f"{t.id} / {name}: SQLite {a[name][0]} vs PostgreSQL {b[name][0]} (or a different diff)"
            compared += 1
    assert compared >= 3 * len(tasks)  # gold, no-op and at least one mutant per task, on average


@pytest.mark.slow
@pytest.mark.parametrize("domain_name", ["kiosk"])
def test_lint_on_templates_and_clones_agrees_across_backends(domain_name, pg_backend):
    """The production path on PostgreSQL (a template database per task, pooled clones) through `tasks lint`."""
    domain = load_domain(domain_name)
    pairs = [(t, domain) for t in domain.tasks]
    on_sqlite, on_postgres = lint(pairs, SqliteBackend()), lint(pairs, pg_backend, workers=PG_WORKERS)
    assert [(t.task_id, t.rewards) for t in on_sqlite.tasks] == [(t.task_id, t.rewards) for t in on_postgres.tasks]
    assert [[(m.description, m.outcome) for m in t.mutants] for t in on_sqlite.tasks] == [
        [(m.description, m.outcome) for m in t.mutants] for t in on_postgres.tasks
    ]
    assert on_sqlite.summary()["gold_pass"] == on_postgres.summary()["gold_pass"] == len(pairs)


def test_fixture_domain_parity(shop, pg_backend):
    pairs = [(t, shop) for t in shop.tasks]
    assert [t.rewards for t in lint(pairs, SqliteBackend()).tasks] == [t.rewards for t in lint(pairs, pg_backend).tasks]


def test_in_place_path_equals_the_template_path(shop, pg_backend):
    """The savepoint path used for the whole suite gives the very verdicts of the template/clone path."""
    lite = SqliteBackend()
    base = pg_backend.prepare(shop, {})
    for task in shop.tasks:
        with pg_backend.open(base) as sandbox:
            in_place = _on_postgres(task, shop, sandbox)
        assert in_place == _on_templates(task, shop, pg_backend) == _on_templates(task, shop, lite)


def test_a_check_with_question_marks_and_percents_in_its_literals_grades_alike(shop, backend):
    """A check has no parameters, so its `?` and `%` are text: PostgreSQL gets the SQL as written. Before: `?` became
    a `%s` placeholder there, and `body LIKE '%?%'` was a system error ("the query has 1 placeholders but 0
    parameters") on PostgreSQL while the task loaded and linted green on SQLite."""
    from groundstate.grading.grader import grader_for, replay
    from groundstate.tasks import Task

    refuse = shop.task("shop-refuse")
    task = Task.model_validate(
        {
            **refuse.model_dump(),
            "id": "asks",
            "checks": [
                {"sql": "SELECT count(*) FROM notes WHERE body LIKE '%?%' OR body = 'a%b?'", "expect": [[0]]},
                {"sql": "SELECT '?' AS q, '%' AS p, '%%s' AS s", "expect": [["?", "%", "%%s"]]},
            ],
        }
    )
    template = backend.prepare(shop, task.patch)
    with backend.open(template) as sandbox:
        replay(sandbox, [c.model_dump() for c in task.gold])
        verdict = grader_for(backend).grade(task, sandbox)
        assert verdict.reward == 1 and verdict.system_error is None, verdict.reasons
        # a tool's statement with parameters still uses `?` placeholders
        assert sandbox.connection.query("SELECT count(*) AS n FROM notes WHERE body LIKE ? AND customer_id = ?", "%shipped%", 2) == [{"n": 1}]
