"""Determinism across backends: every gold, no-op and mutant trajectory gets the same verdict on SQLite and PostgreSQL."""

import pytest

from groundstate.lint import lint
from groundstate.state.sqlite import SqliteBackend
from groundstate.tasks import bundled_domains, load_domain


@pytest.mark.slow
@pytest.mark.parametrize("domain_name", bundled_domains())
def test_lint_verdicts_are_identical_on_sqlite_and_postgres(domain_name, pg_backend):
    domain = load_domain(domain_name)
    pairs = [(t, domain) for t in domain.tasks]
    on_sqlite = lint(pairs, SqliteBackend())
    on_postgres = lint(pairs, pg_backend, workers=8)
    for a, b in zip(on_sqlite.tasks, on_postgres.tasks):
        assert a.task_id == b.task_id
        assert a.rewards == b.rewards, f"{a.task_id}: verdicts differ between backends"
        assert [(m.description, m.outcome) for m in a.mutants] == [(m.description, m.outcome) for m in b.mutants]
    s, p = on_sqlite.summary(), on_postgres.summary()
    assert s["gold_pass"] == p["gold_pass"] == len(pairs)
    assert s["noop_fail"] == p["noop_fail"] == len(pairs)
    assert s["mutant_kill_rate"] >= 0.95 and p["mutant_kill_rate"] >= 0.95
    assert sum(len(t.rewards) for t in on_sqlite.tasks) > 3 * len(pairs)  # gold, no-op and mutants were all compared


def test_fixture_domain_parity(shop, pg_backend):
    pairs = [(t, shop) for t in shop.tasks]
    assert [t.rewards for t in lint(pairs, SqliteBackend()).tasks] == [t.rewards for t in lint(pairs, pg_backend).tasks]
