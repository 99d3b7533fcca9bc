"""Two runs compared task by task at a common n: pass rates and their difference, tasks moved between categories,
and what was left out of the pairing and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from groundstate.records import AttemptRecord, check_one_run
from groundstate.stats.agreement import run_agreement
from groundstate.stats.basis import TaskCounts, basis, coverage, require_complete, solved_every_time, task_counts
from groundstate.stats.cost import cost_note, load_prices, record_cost, unpriced_models
from groundstate.stats.estimators import check_ks, pass_at_k, pass_hat_k


def category(n: int, c: int) -> str:
    """never (c = 0), sometimes, or always (c = n)."""
    return "never" if c == 0 else "always" if c == n else "sometimes"


def left_out(bc: dict[str, TaskCounts], cc: dict[str, TaskCounts], n: int, k: int) -> dict[str, str]:
    """Tasks that cannot be compared, each with the reason: in one run only, or set apart by either run's `basis`."""
    out = {}
    apart_b, apart_c = basis(bc, n, k).apart, basis(cc, n, k).apart
    for tid in sorted(set(bc) | set(cc)):
        if tid not in cc:
            out[tid] = "only in the base run"
        elif tid not in bc:
            out[tid] = "only in the candidate run"
        else:
            why = [
                f"{why} in the {name} run" for name, apart in (("base", apart_b), ("candidate", apart_c)) if tid in apart for _, why in [apart[tid]]
            ]
            if why:
                out[tid] = "; ".join(why)
    return out


@dataclass(frozen=True)
class Pairing:
    """Two runs made comparable: both read at their common attempts per task `n` (a run with more attempts is read at
    its attempts 0..n−1, which are the same attempts whatever k it was run with: `truncated` says so), and their
    shared tasks, those both runs' `basis` covers at `k`; every other task is `left_out` with its reason."""

    base: dict[str, TaskCounts]  # the shared tasks' counts, in task-id order
    candidate: dict[str, TaskCounts]
    left_out: dict[str, str]
    n: int
    k: int
    runs_n: dict[str, int]  # each run's own attempts per task
    truncated: dict[str, str]  # run name -> what of it was read
    incomplete: dict[str, list[str]]  # what --allow-incomplete compared anyway, per run


def pair_runs(base: list[AttemptRecord], cand: list[AttemptRecord], k: int | None = None, allow_incomplete: bool = False) -> Pairing:
    """`Pairing` of two runs, each one complete run by `compute`'s rule (`allow_incomplete` pairs them anyway); `k`
    defaults to the common n and may not exceed it. ValueError naming the run for a run that cannot be read."""
    runs_n: dict[str, int] = {}
    incomplete: dict[str, list[str]] = {}
    for name, recs in (("base", base), ("candidate", cand)):
        if not recs:
            raise ValueError(f"the {name} run holds no records")
        check_one_run(recs, f"the {name} run")
        cov = coverage(recs)
        require_complete(recs, "compare", allow_incomplete, name)
        if not cov.complete:
            incomplete[name] = cov.problems()
        runs_n[name] = cov.n
    n = min(runs_n.values())
    k = check_ks(k if k is not None else n, n)[0]
    truncated = {
        name: f"the {name} run has n={m}: read at its attempts 0–{n - 1}, as many as the other run's n={n}" for name, m in runs_n.items() if m > n
    }
    bc = task_counts(r for r in base if r.attempt < n)
    cc = task_counts(r for r in cand if r.attempt < n)
    skipped = left_out(bc, cc, n, k)
    shared = sorted(t for t in set(bc) & set(cc) if t not in skipped)
    if not shared:
        raise ValueError("the two runs share no task both cover" + (f" (left out: {_some(skipped)})" if skipped else ""))
    return Pairing({t: bc[t] for t in shared}, {t: cc[t] for t in shared}, skipped, n, k, runs_n, truncated, incomplete)


def compare(
    base: list[AttemptRecord],
    cand: list[AttemptRecord],
    k: int | None = None,
    prices: dict | None = None,
    reps: int = 2000,
    seed: int = 0,
    allow_incomplete: bool = False,
) -> dict[str, Any]:
    """Lift of each metric on the shared tasks, with paired bootstrap intervals and P(lift > 0); task transitions; cost change.

    The runs are paired by `pair_runs` (one common n: Observed n/n is an observation of the same n attempts on both
    sides; `truncated` says where a run was read at fewer attempts than it has); tasks that cannot be compared are in
    `left_out` with the reason, and what an incomplete run lacks in `incomplete`. `agreement` is
    `agreement.run_agreement` of the two runs (not computed for different agents)."""
    pair = pair_runs(base, cand, k, allow_incomplete)
    n, k = pair.n, pair.k
    shared = list(pair.base)
    b, c = list(pair.base.values()), list(pair.candidate.values())

    def per_task(ts: list[TaskCounts]) -> dict[str, np.ndarray]:
        return {
            "pass_at_1": np.array([t.c / t.n for t in ts]),
            "pass_at_k": np.array([pass_at_k(t.n, t.c, k) for t in ts]),
            "pass_hat_k": np.array([pass_hat_k(t.n, t.c, k) for t in ts]),
            "observed_k_of_k_rate": np.array([float(solved_every_time(t, n)) for t in ts]),
        }

    pb, pc = per_task(b), per_task(c)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(shared), size=(reps, len(shared)))
    lifts = {}
    for m in pb:
        d = pc[m] - pb[m]
        samples = d[idx].mean(axis=1)
        lifts[m] = {
            "base": float(pb[m].mean()),
            "candidate": float(pc[m].mean()),
            "lift": float(d.mean()),
            "ci_95": [float(np.quantile(samples, 0.025)), float(np.quantile(samples, 0.975))],
            "p_lift_positive": float((samples > 0).mean()),
        }
    transitions: dict[str, dict[str, int]] = {a: {z: 0 for z in ("never", "sometimes", "always")} for a in ("never", "sometimes", "always")}
    for x, y in zip(b, c, strict=True):
        transitions[category(x.n, x.c)][category(y.n, y.c)] += 1
    prices = prices if prices is not None else load_prices()
    keep = set(shared)
    costs = {}
    read = {"base": [r for r in base if r.task_id in keep and r.attempt < n], "candidate": [r for r in cand if r.task_id in keep and r.attempt < n]}
    for name, recs in read.items():
        cs = [record_cost(r, prices) for r in recs]
        costs[name] = float(sum(x for x in cs if x is not None)) if any(x is not None for x in cs) else None
    unpriced = unpriced_models([*read["base"], *read["candidate"]], prices)
    into_kk = sum(1 for x, y in zip(pb["observed_k_of_k_rate"], pc["observed_k_of_k_rate"], strict=True) if not x and y)
    out_kk = sum(1 for x, y in zip(pb["observed_k_of_k_rate"], pc["observed_k_of_k_rate"], strict=True) if x and not y)
    bc_all, cc_all = {r.task_id for r in base}, {r.task_id for r in cand}
    return {
        "shared_tasks": len(shared),
        "basis": f"{len(shared)} shared tasks × n={n}" + (f", k={k}" if k != n else ""),
        "only_in_base": len(bc_all - cc_all),
        "only_in_candidate": len(cc_all - bc_all),
        "left_out": [{"task_id": t, "reason": why} for t, why in pair.left_out.items()],
        "incomplete": pair.incomplete,
        "n": n,
        "runs_n": pair.runs_n,
        "truncated": pair.truncated,
        "k": k,
        "metrics": lifts,
        "observed_k_of_k": {
            "k": n,
            "base": int(pb["observed_k_of_k_rate"].sum()),
            "candidate": int(pc["observed_k_of_k_rate"].sum()),
            "moved_in": into_kk,
            "fell_out": out_kk,
        },
        "transitions": transitions,
        "cost_usd": {**costs, "change": (costs["candidate"] - costs["base"]) if None not in costs.values() else None},
        "cost_note": cost_note(unpriced),
        # the same keys as every figure above: the shared tasks, their attempts below the common n
        "agreement": run_agreement(read["base"], read["candidate"]),
    }


def _some(tasks: dict[str, str], limit: int = 5) -> str:
    items = [f"{t} ({why})" for t, why in list(tasks.items())[:limit]]
    return "; ".join(items) + (f"; and {len(tasks) - limit} more" if len(tasks) > limit else "")
