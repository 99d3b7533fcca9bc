"""Reliability metrics from results records alone.

Per task: clean attempts n and successes c (system errors and unjudged attempts excluded and counted
apart; `stats.basis`). Every figure is computed over one task set, `basis`: the tasks whose verdicts need no judge nobody gave, with
a clean attempt, and (an incomplete run) at least k clean ones; the others are set apart, counted and named, never
dropped in silence and never scored 0. So on one file pass^k ≤ pass@1 ≤ pass@k for every k. A run is *complete* when every task has the same n clean attempts, keyed 0..n−1 once each (no
missing or duplicated key, no system error); figures are refused otherwise (`allow_incomplete` computes
them anyway), and always for records of more than one run (`records.check_one_run`). The estimators (`stats.estimators`) are
defined for every k ≤ n: one or more k (`ks`, e.g. 1, 5, 20 of n = 20) choose them; k > n is refused.
Aggregates over tasks:
- pass@1 = mean c/n;
- pass@k (unbiased) = mean 1 − C(n−c, k)/C(n, k): the chance that at least one of k attempts passes;
- pass^k (unbiased) = mean C(c, k)/C(n, k): the chance that all k attempts pass; and the plug-in
  (c/n)^k that some published harnesses report, labelled as such;
- Observed k/k = tasks solved in every one of their n attempts (an observation, so only for k = n);
with per-task Jeffreys intervals and bootstrap-over-tasks intervals for each aggregate; and cost:
total inference cost and cost per dependable task (total cost / tasks solved k/k), of every try (`AttemptRecord.spent`:
a repaired system error's tokens included), priced by `price_key` from
the bundled `prices.yaml` and `--prices FILE` (`stats.cost`); a model without a price is named (`cost_note`), never
costed at 0. Two runs are compared in `stats.compare`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from groundstate.records import AttemptRecord, check_one_run, latest_per_key
from groundstate.stats.basis import TaskCounts, basis, coverage, require_complete, solved_every_time, task_counts, user_simulator_faults
from groundstate.stats.cost import cost_note, load_prices, record_cost, unpriced_models
from groundstate.stats.estimators import check_ks, jeffreys_interval, pass_at_k, pass_hat_k, pass_hat_k_plugin
from groundstate.types import FINISH_REASONS


def _aggregates(tasks: list[TaskCounts], k: int) -> dict[str, float | None]:
    """Each aggregate over `tasks` (a `Basis`'s covered tasks: all have k clean attempts or more); None for no task."""
    if not tasks:
        return {"pass_at_1": None, "pass_at_k": None, "pass_hat_k": None, "pass_hat_k_plugin": None}
    return {
        "pass_at_1": float(np.mean([t.c / t.n for t in tasks])),
        "pass_at_k": float(np.mean([pass_at_k(t.n, t.c, k) for t in tasks])),
        "pass_hat_k": float(np.mean([pass_hat_k(t.n, t.c, k) for t in tasks])),
        "pass_hat_k_plugin": float(np.mean([pass_hat_k_plugin(t.n, t.c, k) for t in tasks])),
    }


def bootstrap(
    tasks: list[TaskCounts], k: int, reps: int = 2000, seed: int = 0, level: float = 0.95, n_run: int | None = None
) -> dict[str, list[float]]:
    """Percentile intervals of each aggregate, resampling `tasks` (a `Basis`'s covered tasks: each has k clean attempts
    or more) with replacement (Observed: solved in all `n_run` attempts, default k)."""
    if not tasks:
        return {}
    rng = np.random.default_rng(seed)
    n = np.array([t.n for t in tasks])
    c = np.array([t.c for t in tasks])
    p1 = c / n
    pk = np.array([pass_at_k(t.n, t.c, k) for t in tasks])
    hk = np.array([pass_hat_k(t.n, t.c, k) for t in tasks])
    kk = (n == (n_run or k)) & (c == n)
    idx = rng.integers(0, len(tasks), size=(reps, len(tasks)))
    a = (1 - level) / 2
    out = {}
    for name, values in (("pass_at_1", p1), ("pass_at_k", pk), ("pass_hat_k", hk), ("observed_k_of_k_rate", kk.astype(float))):
        samples = values[idx].mean(axis=1)
        out[name] = [float(np.quantile(samples, a)), float(np.quantile(samples, 1 - a))]
    return out


def finish_reasons(records: list[AttemptRecord]) -> dict[str, int]:
    """Attempts per finish reason (limits hit show up here), in `FINISH_REASONS` order; `none` when no episode ran."""
    seen = Counter(r.finish_reason or "none" for r in records)
    order = {name: i for i, name in enumerate(FINISH_REASONS)}
    return dict(sorted(seen.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def compute(
    records: list[AttemptRecord],
    k: Iterable[int] | int | None = None,
    prices: dict[str, dict[str, float]] | None = None,
    allow_incomplete: bool = False,
    by: str | None = "domain",
    bootstrap_reps: int = 2000,
) -> dict[str, Any]:
    """All figures of `groundstate metrics --json`, each over the one task set `basis` gives (`basis` says which; the
    tasks set apart are in `set_apart` with their reasons). `k`: one or more k <= n (default n); the top-level pass@k
    figures are for the largest, `at_k` holds each. Raises ValueError on records of several runs, on a k outside 1..n,
    and on incomplete coverage unless allowed. A figure with no task to cover is None, never NaN."""
    if not records:
        raise ValueError("no results records")
    check_one_run(records)
    cov = coverage(records)
    n_run = cov.n
    require_complete(records, "compute", allow_incomplete)
    ks = check_ks(k, n_run)
    k = ks[-1]
    counts = task_counts(records)
    b = basis(counts, n_run, k)
    judged = list(b.covered.values())
    prices = prices if prices is not None else load_prices()
    spent = [r.spent for r in records]  # every try's tokens, once per record (`AttemptRecord.spent`)
    costs = [record_cost(r, prices) for r in records]
    priced = [x for x in costs if x is not None]
    unpriced = unpriced_models(records, prices)
    cost = float(sum(priced)) if priced else None
    # the cost of a dependable task is what the covered tasks' attempts cost: the figure and its count share one task set
    covered_costs = [x for r, x in zip(records, costs, strict=True) if r.task_id in b.covered]
    covered_cost = float(sum(x for x in covered_costs if x is not None)) if any(x is not None for x in covered_costs) else None
    kk = sum(1 for t in judged if solved_every_time(t, n_run))
    agg = _aggregates(judged, k)
    at_k = {}
    for j in ks:
        a = _aggregates(judged, j)
        iv = bootstrap(judged, j, reps=bootstrap_reps, n_run=n_run) if bootstrap_reps else {}
        at_k[str(j)] = {
            "pass_at_k": a["pass_at_k"],
            "pass_hat_k": a["pass_hat_k"],
            "pass_hat_k_plugin": a["pass_hat_k_plugin"],
            "intervals": {m: iv[m] for m in ("pass_at_k", "pass_hat_k") if m in iv},
        }
    out: dict[str, Any] = {
        "tasks": len(counts),
        "tasks_covered": len(b.covered),
        "basis": b.sentence(),
        "set_apart": b.rows(),
        "set_apart_by_kind": b.kinds(),
        "n": n_run,
        "k": k,
        "ks": ks,
        "attempts": len(records),
        "covered_attempts": sum(t.n for t in judged),
        "clean_attempts": sum(t.n for t in counts.values()),
        "system_errors": sum(t.system_errors for t in counts.values()),
        "unjudged": sum(t.unjudged for t in counts.values()),
        "finish_reasons": finish_reasons(records),
        "complete": cov.complete,
        "coverage_problems": cov.problems(),
        **agg,
        "at_k": at_k,
        "solved_at_least_once": sum(1 for t in judged if t.c > 0),
        "pass_at_k_note": "solved_at_least_once equals pass@k x tasks only when every task has n = k",
        "observed_k_of_k": kk,
        "observed_k_of_k_note": f"tasks solved in all n={n_run} attempts (Observed n/n: measured, so only for k = n)",
        "observed_k_of_k_rate": kk / len(judged) if judged else None,
        "intervals": bootstrap(judged, k, reps=bootstrap_reps, n_run=n_run) if bootstrap_reps else {},
        "tokens": {name: sum(getattr(u, f"{name}_tokens") for u in spent) for name in ("input", "cached_input", "output")},
        "cost_usd": cost,
        "cost_priced_attempts": len(priced),
        "unpriced_models": unpriced,
        "cost_note": cost_note(unpriced),
        "cost_per_attempt": cost / len(records) if cost is not None and records else None,
        "cost_per_dependable_task": (covered_cost / kk) if covered_cost is not None and kk > 0 else None,
        "cost_per_dependable_task_note": (
            f"undefined: no task was solved {n_run}/{n_run}"
            if kk == 0
            else f"no price for {', '.join(sorted(unpriced))} (see the cost note)"
            if unpriced
            else f"the cost of the attempts of the {len(b.covered)} covered tasks over those solved {n_run}/{n_run}"
            if b.apart
            else None
        ),
        "per_task": [
            {
                "task_id": t.task_id,
                "domain": t.domain,
                "family": t.family,
                "n": t.n,
                "c": t.c,
                "system_errors": t.system_errors,
                "unjudged": t.unjudged,
                "covered": t.task_id in b.covered,
                "rate": t.c / t.n if t.n else None,
                "jeffreys_95": list(jeffreys_interval(t.n, t.c)) if t.n else None,
            }
            for t in sorted(counts.values(), key=lambda t: t.task_id)
        ],
    }
    out["blame_by_family"] = blame_by_family(r for r in records if r.task_id in b.covered)
    out["user_simulator_faults"] = user_simulator_faults(records)
    for group in ("domain", "family"):
        if by is None and group == "domain":
            continue
        groups: dict[str, list[TaskCounts]] = defaultdict(list)
        for t in judged:
            groups[str(getattr(t, group))].append(t)
        out[f"by_{group}"] = {
            g: {
                "tasks": len(ts),
                **_aggregates(ts, k),
                "observed_k_of_k": sum(1 for t in ts if solved_every_time(t, n_run)),
                "solved_at_least_once": sum(1 for t in ts if t.c > 0),
            }
            for g, ts in sorted(groups.items())
        }
    return out


def blame_by_family(records: Iterable[AttemptRecord]) -> dict[str, dict[str, Any]]:
    """The failed attempts (the records that count; `compute` gives the covered tasks') of each task family by where they went wrong (`Verdict.blame`):
    `failed`, `kinds` (diverged, stopped_early, never_acted, or `not recorded` for records made without blame),
    `calls` ("diverged at add_note" and the like, counted) and `most_common`, a sentence a person can read."""
    out: dict[str, dict[str, Any]] = {}
    for r in latest_per_key(records).values():
        if r.outcome != "fail":
            continue
        b = r.verdict.blame if r.verdict is not None else None
        kind = b.kind if b is not None else "not recorded"
        d = out.setdefault(r.family or "unspecified", {"failed": 0, "kinds": Counter(), "calls": Counter()})
        d["failed"] += 1
        d["kinds"][kind] += 1
        d["calls"][f"{kind.replace('_', ' ')} at {b.tool}" if b is not None and b.tool else kind.replace("_", " ")] += 1
    for d in out.values():
        where, n = d["calls"].most_common(1)[0]
        d["most_common"] = f"{n} of {d['failed']} failures: {where}"
        d["kinds"], d["calls"] = dict(d["kinds"]), dict(d["calls"].most_common())
    return dict(sorted(out.items()))
