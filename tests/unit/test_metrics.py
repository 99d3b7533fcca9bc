"""Estimators against brute force, edge cases, and every JSON figure from a synthetic run with known counts."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundstate.records import AttemptRecord
from groundstate.stats.basis import coverage
from groundstate.stats.compare import compare
from groundstate.stats.estimators import jeffreys_interval, pass_at_k, pass_hat_k, pass_hat_k_plugin
from groundstate.stats.metrics import compute


def brute(n, c, k):
    """Over all k-subsets of n attempts (c of them successes): P(any passes), P(all pass)."""
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    anyp = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    allp = sum(all(outcomes[i] for i in s) for s in subsets) / len(subsets)
    return anyp, allp


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_unbiased_estimators_equal_brute_force_enumeration(nck):
    n, c, k = nck
    anyp, allp = brute(n, c, k)
    assert pass_at_k(n, c, k) == pytest.approx(anyp)
    assert pass_hat_k(n, c, k) == pytest.approx(allp)
    assert pass_hat_k_plugin(n, c, k) == pytest.approx((c / n) ** k)


def test_edge_cases():
    assert pass_at_k(5, 0, 3) == 0 and pass_hat_k(5, 0, 3) == 0
    assert pass_at_k(5, 5, 3) == 1 and pass_hat_k(5, 5, 3) == 1
    assert pass_at_k(4, 1, 4) == 1 and pass_hat_k(4, 3, 4) == 0 and pass_hat_k(4, 4, 4) == 1
    with pytest.raises(ValueError, match="outside 1..n"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        pass_hat_k(3, 4, 2)
    lo, hi = jeffreys_interval(10, 0)
    assert lo == 0 and 0 < hi < 0.25
    lo, hi = jeffreys_interval(10, 10)
    assert hi == 1 and 0.75 < lo < 1
    lo, hi = jeffreys_interval(20, 10)
    assert lo < 0.5 < hi and lo == pytest.approx(1 - hi)


def synthetic(counts, k, model="gpt-4o-mini", tokens=(1000, 200, 100), domains=None):
    """Records for tasks with known successes: counts = {task: c}; tokens = (input, cached, output) per attempt."""
    recs = []
    for task, c in counts.items():
        for a in range(k):
            recs.append(
                AttemptRecord.model_validate(
                    {
                        "task_id": task,
                        "attempt": a,
                        "reward": int(a < c),
                        "system_error": None,
                        "unjudged": False,
                        "domain": (domains or {}).get(task, "d"),
                        "family": "f",
                        "agent": f"openai:{model}",
                        "model": model,
                        "usage": {"input_tokens": tokens[0], "cached_input_tokens": tokens[1], "output_tokens": tokens[2]},
                    }
                )
            )
    return recs


def test_every_json_figure_from_known_counts():
    counts = {"t0": 0, "t1": 2, "t2": 4, "t3": 4, "t4": 1}
    k = 4
    prices = {"gpt-4o-mini": {"input": 1.0, "cached_input": 0.5, "output": 2.0}}
    m = compute(synthetic(counts, k, domains={"t0": "a", "t1": "a", "t2": "b", "t3": "b", "t4": "b"}), prices=prices)
    assert (m["tasks"], m["k"], m["attempts"], m["system_errors"]) == (5, 4, 20, 0)
    assert m["pass_at_1"] == pytest.approx(sum(c / k for c in counts.values()) / 5)
    assert m["pass_at_k"] == pytest.approx(sum(pass_at_k(k, c, k) for c in counts.values()) / 5) == pytest.approx(0.8)
    assert m["solved_at_least_once"] == 4
    assert m["pass_hat_k"] == pytest.approx(0.4) and m["pass_hat_k_plugin"] == pytest.approx(sum((c / k) ** k for c in counts.values()) / 5)
    assert (m["observed_k_of_k"], m["observed_k_of_k_rate"]) == (2, 0.4)
    per_attempt = (800 * 1.0 + 200 * 0.5 + 100 * 2.0) / 1e6
    assert m["cost_usd"] == pytest.approx(20 * per_attempt)
    assert m["cost_per_dependable_task"] == pytest.approx(20 * per_attempt / 2)
    assert m["by_domain"]["a"]["tasks"] == 2 and m["by_domain"]["b"]["observed_k_of_k"] == 2
    assert m["by_domain"]["a"]["pass_at_1"] == pytest.approx((0 + 0.5) / 2)
    lo, hi = m["intervals"]["pass_at_1"]
    assert lo <= m["pass_at_1"] <= hi
    t1 = next(t for t in m["per_task"] if t["task_id"] == "t1")
    assert (t1["n"], t1["c"]) == (4, 2) and t1["jeffreys_95"] == pytest.approx(list(jeffreys_interval(4, 2)))


def test_cost_per_dependable_task_is_undefined_without_kk():
    m = compute(synthetic({"t0": 1, "t1": 0}, 3), prices={"gpt-4o-mini": {"input": 1, "output": 1}})
    assert m["observed_k_of_k"] == 0 and m["cost_per_dependable_task"] is None
    assert "undefined" in m["cost_per_dependable_task_note"]


def test_incomplete_runs_are_refused_with_the_keys_named():
    recs = synthetic({"t0": 2, "t1": 1}, 3)
    failed = next(r for r in recs if r.key == ("t0", 1)).model_copy(update={"system_error": "boom", "reward": None})
    recs = [r for r in recs if r.key not in {("t1", 2), ("t0", 1)}]  # one key missing, one whose only record is a system error
    recs.append(recs[0])  # duplicated
    recs.append(failed)
    cov = coverage(recs)
    assert ("t1", 2) in cov.missing and ("t0", 0) in cov.duplicated and ("t0", 1) in cov.system_errors
    with pytest.raises(ValueError, match="missing keys"):
        compute(recs)
    m = compute(recs, allow_incomplete=True)
    assert m["system_errors"] == 1 and not m["complete"]


def test_unjudged_are_counted_apart_not_as_failures():
    recs = synthetic({"t0": 2}, 2) + [
        AttemptRecord.model_validate(
            {"task_id": "t1", "attempt": a, "reward": None, "system_error": None, "unjudged": True, "agent": "openai:gpt-4o-mini", "usage": {}}
        )
        for a in range(2)
    ]
    m = compute(recs, allow_incomplete=True, prices={})
    assert m["unjudged"] == 2 and m["pass_at_1"] == 1.0


def test_compare_lift_transitions_and_cost():
    k = 4
    base = synthetic({"t0": 0, "t1": 2, "t2": 4, "t3": 1}, k)
    cand = synthetic({"t0": 1, "t1": 4, "t2": 3, "t3": 4}, k)
    c = compare(base, cand, prices={"gpt-4o-mini": {"input": 1, "output": 1}})
    assert c["shared_tasks"] == 4
    assert c["metrics"]["pass_at_1"]["lift"] == pytest.approx((1 + 2 - 1 + 3) / 4 / 4)
    assert c["observed_k_of_k"] == {"k": 4, "base": 1, "candidate": 2, "moved_in": 2, "fell_out": 1}
    assert c["transitions"]["never"]["sometimes"] == 1 and c["transitions"]["sometimes"]["always"] == 2
    assert c["transitions"]["always"]["sometimes"] == 1
    assert 0 <= c["metrics"]["pass_at_1"]["p_lift_positive"] <= 1
    assert c["cost_usd"]["change"] == pytest.approx(0)


def test_the_same_records_in_another_order_give_the_same_figures_and_intervals():
    """A concurrent run writes its records in the order attempts finish: the bootstrap must not see that order (the
    README's walkthrough once printed [76.46%, 81.67%] and then [76.56%, 81.67%] for the same attempts)."""
    import random

    recs = synthetic({f"t{i:03d}": i % 5 for i in range(60)}, 4)
    shuffled = recs[:]
    random.Random(7).shuffle(shuffled)
    assert compute(shuffled) == compute(recs)
    base = synthetic({f"t{i:03d}": (i * 3) % 5 for i in range(60)}, 4)
    assert compare(base[::-1], shuffled) == compare(base, recs)
