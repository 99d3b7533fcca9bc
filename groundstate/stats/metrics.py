"""Reliability metrics from results records alone.

Per task: clean attempts n and successes c (system errors and unjudged attempts excluded and counted
apart). Every figure is computed over one task set, `basis`: the tasks whose verdicts need no judge nobody gave, with
a clean attempt, and (an incomplete run) at least k clean ones; the others are set apart, counted and named, never
dropped in silence and never scored 0. So on one file pass^k ≤ pass@1 ≤ pass@k for every k. A run is *complete* when every task has the same n clean attempts, keyed 0..n−1 once each (no
missing or duplicated key, no system error); figures are refused otherwise (`allow_incomplete` computes
them anyway), and always for records of more than one run (`results.check_one_run`). The estimators are
defined for every k ≤ n: one or more k (`ks`, e.g. 1, 5, 20 of n = 20) choose them; k > n is refused.
Aggregates over tasks:
- pass@1 = mean c/n;
- pass@k (unbiased) = mean 1 − C(n−c, k)/C(n, k): the chance that at least one of k attempts passes;
- pass^k (unbiased) = mean C(c, k)/C(n, k): the chance that all k attempts pass; and the plug-in
  (c/n)^k that some published harnesses report, labelled as such;
- Observed k/k = tasks solved in every one of their n attempts (an observation, so only for k = n);
with per-task Jeffreys intervals and bootstrap-over-tasks intervals for each aggregate; and cost:
total inference cost and cost per dependable task (total cost / tasks solved k/k), priced by `price_key` from
the bundled `prices.yaml` and `--prices FILE`; a model without a price is named (`cost_note`), never costed at 0.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from groundstate.records import AttemptRecord, check_one_run, latest_per_key, task_set_hash
from groundstate.specs import parse_agent
from groundstate.stats.agreement import run_agreement
from groundstate.types import FAULT_KINDS, FINISH_REASONS

DEFAULT_PRICES = Path(__file__).parent / "prices.yaml"
# USD per million tokens: a thousand times the dearest model's price, and far enough below float's range that no run's
# tokens can turn a cost into Infinity (which no JSON reader can read back)
MAX_PRICE = 1_000_000


def metric_label(name: str, k: int, n: int | None = None) -> str:
    """How every table names a metric key of `compute`/`compare` (`pass_at_k` → `pass@5`): one naming everywhere.
    Observed is named by n, the attempts it observed (default k)."""
    n = k if n is None else n
    labels = {"pass_at_1": "pass@1", "pass_at_k": f"pass@{k}", "pass_hat_k": f"pass^{k}", "observed_k_of_k_rate": f"Observed {n}/{n}"}
    return labels.get(name, name)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k: 1 − C(n−c, k)/C(n, k)."""
    _check(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k: C(c, k)/C(n, k)."""
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def pass_hat_k_plugin(n: int, c: int, k: int) -> float:
    """Plug-in pass^k: (c/n)^k (biased for small n; kept for comparison with published numbers)."""
    _check(n, c, k)
    return (c / n) ** k


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n) or n < 1:
        raise ValueError(f"need 0 <= c <= n and n >= 1 (n={n}, c={c})")
    if not 1 <= k <= n:
        raise ValueError(f"k={k} is outside 1..n={n}: pass@k needs at least k clean attempts")


def jeffreys_interval(n: int, c: int, level: float = 0.95) -> tuple[float, float]:
    """Jeffreys interval for a binomial rate: quantiles of Beta(c + ½, n − c + ½); ends pinned at 0 and 1."""
    a = (1 - level) / 2
    lo = 0.0 if c == 0 else float(stats.beta.ppf(a, c + 0.5, n - c + 0.5))
    hi = 1.0 if c == n else float(stats.beta.ppf(1 - a, c + 0.5, n - c + 0.5))
    return lo, hi


@dataclass
class TaskCounts:
    task_id: str
    domain: str | None
    family: str | None
    n: int = 0  # clean attempts
    c: int = 0  # successes
    system_errors: int = 0
    unjudged: int = 0
    attempts: set[int] = field(default_factory=set)
    awaits_judge: bool = False  # a rubric task of a run without a judge (`AttemptRecord.awaits_judge`): set apart


@dataclass
class Coverage:
    complete: bool
    n: int  # attempts per task: the highest attempt index + 1 of any task
    missing: list[tuple[str, int]]  # a few of the missing keys (`missing_count` of them in all)
    duplicated: list[tuple[str, int]]
    system_errors: list[tuple[str, int]]
    unequal: dict[str, int]  # task -> clean attempts, where it differs from n
    missing_count: int = 0
    foreign_task_set: bool = False  # the file's task ids are not the set its run selected

    def problems(self) -> list[str]:
        """What the run lacks, a sentence each, naming a few of the keys (`task attempt i`)."""
        out = []
        if self.missing_count:
            out.append(f"{self.missing_count} missing keys, e.g. {_keys(self.missing, self.missing_count)}")
        if self.duplicated:
            out.append(f"{len(self.duplicated)} duplicated keys, e.g. {_keys(self.duplicated)}")
        if self.system_errors:
            out.append(f"{len(self.system_errors)} system errors, e.g. {_keys(self.system_errors)}")
        if self.foreign_task_set:
            out.append(
                "the file's tasks are not the run's selected task set (a task's records are gone, or records of a "
                "task the run did not select were added)"
            )
        if self.unequal:
            shown = ", ".join(f"{t} has {n}" for t, n in list(self.unequal.items())[:5]) + (", …" if len(self.unequal) > 5 else "")
            out.append(f"{len(self.unequal)} tasks without exactly n={self.n} clean attempts, e.g. {shown}")
        return out


def _keys(keys: list[tuple[str, int]], total: int | None = None) -> str:
    """A few attempt keys as a person reads them: `t1 attempt 0, t2 attempt 3, …`."""
    shown = ", ".join(f"{t} attempt {a}" for t, a in keys[:5])
    return shown + (", …" if (total if total is not None else len(keys)) > 5 else "")


def task_counts(records: Iterable[AttemptRecord]) -> dict[str, TaskCounts]:
    """Per task (in task-id order), over the records that count (`results.latest_per_key`): clean attempts, successes,
    system errors, unjudged."""
    out: dict[str, TaskCounts] = {}
    for r in latest_per_key(records).values():
        t = out.setdefault(r.task_id, TaskCounts(r.task_id, r.domain, r.family))
        t.attempts.add(r.attempt)
        t.awaits_judge |= r.awaits_judge
        outcome = r.outcome
        if outcome == "system_error":
            t.system_errors += 1
        elif outcome == "unjudged":
            t.unjudged += 1
        else:
            t.n += 1
            t.c += outcome == "pass"
    # by task id, whatever order the attempts finished in: the bootstrap resamples positions, so the same records
    # give the same intervals only in one order
    return dict(sorted(out.items()))


def coverage(records: list[AttemptRecord]) -> Coverage:
    """Whether every task has the same n clean attempts 0..n−1, each once (unjudged tasks are counted apart)."""
    seen = Counter(r.key for r in records)
    counts = task_counts(records)
    n = max((max(t.attempts) + 1 for t in counts.values()), default=0)
    # n comes from the records (one attempt index of 10**15 makes it that): count the missing keys and name a few,
    # never list every index below n
    missing_count = sum(n - len(t.attempts) for t in counts.values())
    missing = list(itertools.islice(((tid, a) for tid in sorted(counts) for a in _missing_below(counts[tid].attempts, n)), 5))
    duplicated = sorted(key for key, c in seen.items() if c > 1)
    errors = sorted(key for key, r in latest_per_key(records).items() if r.outcome == "system_error")
    unequal = {tid: t.n for tid, t in counts.items() if t.n != n and not t.awaits_judge}
    # a record names its run's selected task set (a hash of the ids): a task with no record left, or one never selected,
    # is invisible to the per-task rules above
    selected = {r.run.tasks for r in records if r.run is not None}
    foreign = len(selected) == 1 and selected != {task_set_hash(list(counts))}
    return Coverage(
        not (missing_count or duplicated or errors or unequal or foreign), n, missing, duplicated, errors, unequal, missing_count, foreign
    )


APART_KINDS = {
    "awaits_judge": "rubric tasks without a judge",
    "no_clean_attempt": "without a clean attempt",
    "fewer_than_k": "with fewer than k clean attempts",
}


@dataclass(frozen=True)
class Basis:
    """What every figure of a run is computed over (metrics, compare, report, select, power, the quickstart): the
    `covered` tasks, each with at least `k` clean attempts, and the tasks set `apart`, each with its kind
    (`APART_KINDS`) and a sentence. A task is set apart when its verdicts wait on a judge nobody gave (a rubric task of
    a judge-less run), when it has no clean attempt, or (an incomplete run) fewer than k; `unjudged` counts the attempts
    of the set-apart rubric tasks that passed on state and wait for the judge."""

    covered: dict[str, TaskCounts]
    apart: dict[str, tuple[str, str]]
    n: int
    k: int

    @property
    def tasks(self) -> int:
        return len(self.covered) + len(self.apart)

    def kinds(self) -> dict[str, int]:
        """Set-apart tasks per kind, in `APART_KINDS` order (kinds with none left out)."""
        seen = Counter(kind for kind, _ in self.apart.values())
        return {kind: seen[kind] for kind in APART_KINDS if seen[kind]}

    def sentence(self) -> str:
        """`201 of 206 tasks (set apart: 5 rubric tasks without a judge)`: the task set, as every figure is labelled."""
        if not self.apart:
            return f"{self.tasks} tasks"
        return f"{len(self.covered)} of {self.tasks} tasks (set apart: {self.apart_text()})"

    def apart_text(self) -> str:
        """`5 rubric tasks without a judge, 1 without a clean attempt` ("" when none is set apart)."""
        return ", ".join(f"{n} {APART_KINDS[kind]}" for kind, n in self.kinds().items())

    def rows(self) -> list[dict[str, str]]:
        return [{"task_id": t, "kind": kind, "reason": why} for t, (kind, why) in self.apart.items()]


def basis(counts: dict[str, TaskCounts], n: int, k: int | None = None) -> Basis:
    """The one rule (`Basis`) over `counts` (`task_counts`) of a run of n attempts per task, for figures up to `k`
    (default n)."""
    k = n if k is None else k
    covered: dict[str, TaskCounts] = {}
    apart: dict[str, tuple[str, str]] = {}
    for tid, t in counts.items():
        if t.awaits_judge:
            waiting = f"{t.unjudged} unjudged (state passed)" + (f", {t.n - t.c} failed on state" if t.n > t.c else "")
            apart[tid] = ("awaits_judge", f"reply rubrics and no judge: {waiting} of {len(t.attempts)} attempts; give --judge to judge them")
        elif t.n == 0:
            apart[tid] = ("no_clean_attempt", f"no clean attempt ({t.system_errors} system errors)")
        elif t.n < k:
            apart[tid] = ("fewer_than_k", f"{t.n} clean attempts, fewer than k={k} ({t.system_errors} system errors)")
        else:
            covered[tid] = t
    return Basis(covered, apart, n, k)


class IncompleteRun(ValueError):
    """A run that is not complete by `coverage`'s rule, refused by every read command unless `--allow-incomplete`."""


def require_complete(records: list[AttemptRecord], verb: str, allow_incomplete: bool = False, name: str = "") -> list[str]:
    """The one rule of every read command (metrics, compare, power, report, select): a run with missing, duplicated or
    system-error keys, or tasks with fewer clean attempts, is refused (`IncompleteRun`, naming what it lacks and both
    ways on: --repair, or --allow-incomplete to `verb` anyway); allowed, it returns the problems for the command to say.
    `name` names the run in the message (`base`, `candidate`)."""
    cov = coverage(records)
    if cov.complete:
        return []
    problems = cov.problems()
    if not allow_incomplete:
        run = f"{name} run" if name else "run"
        raise IncompleteRun(
            f"incomplete {run}: " + "; ".join(problems) + user_fault_note(records)
            + f" — re-run it with --repair to finish it, or use --allow-incomplete to {verb} anyway"
        )  # fmt: skip
    return problems


def _missing_below(attempts: set[int], n: int) -> Iterator[int]:
    """The indices in 0..n−1 that `attempts` lacks, ascending; the next one comes after at most len(attempts) steps."""
    a = 0
    while a < n:
        if a not in attempts:
            yield a
        a += 1


def parse_ks(text: str) -> list[int]:
    """`--k` text: one or more whole numbers >= 1, comma-separated (`5`, `1,5,20`); ValueError naming the bad one."""
    ks = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()) or len(part) > 9 or int(part) < 1:  # ² and 5,000 digits are digits to isdigit
            raise ValueError(
                f"--k {text!r}: {part!r} is not a whole number from 1 to 999999999 (give one k or several, comma-separated, e.g. 1,5,20)"
            )
        ks.append(int(part))
    return sorted(set(ks))


def check_ks(ks: Iterable[int] | int | None, n: int) -> list[int]:
    """The k to report, ascending (default: n); ValueError for a k outside 1..n (pass@k needs k clean attempts)."""
    ks = [n] if ks is None else [ks] if isinstance(ks, int) else sorted(set(ks))
    if not ks:
        raise ValueError("no k given")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k={k!r} is not a whole number >= 1")
        if k > n:
            raise ValueError(f"k={k} exceeds n={n}, the attempts per task: pass@k and pass^k are defined for k <= n")
    return ks


def load_prices(path: Path | None = None) -> dict[str, dict[str, float]]:
    """Model → USD per million tokens (`input`, `cached_input`, `output`); an override file extends the bundled table.

    A malformed file fails naming the file and the field (a wrong price would silently skew every cost figure).
    """
    from groundstate.tasks import TaskFileError, read_data_file

    prices: dict[str, dict[str, float]] = {}
    for f in [DEFAULT_PRICES] + ([Path(path)] if path is not None else []):
        table = read_data_file(f) or {}
        if not isinstance(table, dict):
            raise TaskFileError(f, "must map model names to prices")
        for model, p in table.items():
            if not isinstance(p, dict):
                raise TaskFileError(f, "must map input/cached_input/output to USD per million tokens", field=str(model))
            for key, usd in p.items():
                if key not in ("input", "cached_input", "output"):
                    raise TaskFileError(f, f"unknown price {key!r}: use input, cached_input or output", field=f"{model}.{key}")
                if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or not 0 <= usd <= MAX_PRICE:
                    raise TaskFileError(
                        f, f"a price must be a number from 0 to {MAX_PRICE:,.0f} USD per million tokens, got {usd!r:.60}", field=f"{model}.{key}"
                    )
            prices[str(model)] = {k: float(v) for k, v in p.items()}
    return prices


# a snapshot's date (`gpt-4.1-mini-2025-04-14`, `claude-3-5-sonnet-20241022`): the same model at the undated name's
# price. Nothing looser: `gpt-4.1-mini` is not `gpt-4.1`, and a fine-tune (`ft:gpt-4o-mini:...`) has prices of its own
_SNAPSHOT_DATE = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|20\d{6})$")
_ROUTER_PREFIX = "openai/"  # how OpenAI-compatible routers (OpenRouter, LiteLLM) name OpenAI's models


def record_model(r: AttemptRecord) -> str:
    """The model a record was made with, as a price table names it: its `model` field, else the MODEL of its agent spec
    (`openai:MODEL[@URL]`, `hf:PATH`), else the spec itself."""
    if r.model:
        return r.model
    spec = r.agent or (r.run.agent if r.run is not None else "") or ""
    try:
        return parse_agent(spec).model_name
    except ValueError:  # another tool's spec, or one that does not parse: its text is the name
        return spec


def price_key(r: AttemptRecord, prices: dict[str, dict[str, float]]) -> str | None:
    """The entry of `prices` that prices `r`'s model: its name (`record_model`), then its agent spec, exactly; else
    the name without a snapshot date or an `openai/` router prefix, also ignoring case. None when no entry fits."""
    names = [n for n in dict.fromkeys([record_model(r), r.agent or "", r.run.agent if r.run is not None else ""]) if n]
    for n in names:
        if n in prices:
            return n
    folded = {k.casefold(): k for k in prices}
    for n in names:
        base = _SNAPSHOT_DATE.sub("", n.removeprefix(_ROUTER_PREFIX)).casefold()
        if base in folded:
            return folded[base]
    return None


def is_scripted(r: AttemptRecord) -> bool:
    return (r.agent or (r.run.agent if r.run is not None else "") or "").startswith("scripted:")


def unpriced_models(records: Iterable[AttemptRecord], prices: dict[str, dict[str, float]]) -> dict[str, int]:
    """Attempts per model that `prices` has no price for (`price_key`), by the name a price table would use."""
    return dict(Counter(record_model(r) or "unknown" for r in records if not is_scripted(r) and price_key(r, prices) is None))


def cost_note(unpriced: dict[str, int]) -> str | None:
    """What a person reads where a cost would be: which models have no price, and how to give one."""
    if not unpriced:
        return None
    names = ", ".join(f"{m} ({n} attempts)" for m, n in sorted(unpriced.items()))
    example = next(iter(sorted(unpriced)))
    return (
        f"no price for {names}: cost not counted for them; give prices with --prices FILE, a YAML table such as "
        f"`{example}: {{input: X, cached_input: Y, output: Z}}` (USD per million input, cached input and output tokens)"
    )


def record_cost(r: AttemptRecord, prices: dict[str, dict[str, float]]) -> float | None:
    """USD of one attempt's tokens, or None when its model has no price (`price_key`; scripted agents cost nothing)."""
    if is_scripted(r):
        return 0.0
    key = price_key(r, prices)
    if key is None:
        return None
    p = prices[key]
    u = r.usage
    fresh = max(0, u.input_tokens - u.cached_input_tokens)
    return (fresh * p.get("input", 0) + u.cached_input_tokens * p.get("cached_input", p.get("input", 0)) + u.output_tokens * p.get("output", 0)) / 1e6


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


def solved_every_time(t: TaskCounts, n: int) -> bool:
    """Observed n/n: the task has all n clean attempts and passed every one."""
    return t.n == n and t.c == n


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
        "tokens": {
            "input": sum(r.usage.input_tokens for r in records),
            "cached_input": sum(r.usage.cached_input_tokens for r in records),
            "output": sum(r.usage.output_tokens for r in records),
        },
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


def user_simulator_faults(records: Iterable[AttemptRecord]) -> dict[str, dict[str, Any]]:
    """Per LLM user (the records' `user`, `openai:` specs only): `tries`, the `faults` among them
    (`agents.user_audit`: system errors whose text names a fault kind), their `rate` and the count per kind (`kinds`),
    and `unrepaired`, the faults still standing. A try is a record that counts, or an earlier try of its key that a
    fault ended and `--repair` replaced (kept in the new record's `user_faults`), so the rate survives a repair."""
    out: dict[str, dict[str, Any]] = {}
    for r in latest_per_key(records).values():
        if not (r.user or "").startswith("openai:"):
            continue
        earlier = r.user_faults
        now = r.fault
        d = out.setdefault(r.user, {"tries": 0, "faults": 0, "unrepaired": 0, "kinds": Counter()})
        d["tries"] += 1 + len(earlier)
        d["faults"] += len(earlier) + (now is not None)
        d["unrepaired"] += now is not None
        d["kinds"].update(earlier + ([now] if now else []))
    for d in out.values():
        d["rate"] = d["faults"] / d["tries"]
        d["kinds"] = {k: d["kinds"][k] for k in FAULT_KINDS}
    return dict(sorted(out.items()))


def user_fault_note(records: Iterable[AttemptRecord]) -> str:
    """The user-simulator fault rate of each LLM user, as a clause of the refusal of an incomplete run ("" if none)."""
    parts = [
        f"{user}: {d['faults']} of {d['tries']} tries ({d['rate']:.1%}; " + ", ".join(f"{k} {n}" for k, n in d["kinds"].items() if n) + ")"
        for user, d in user_simulator_faults(records).items()
        if d["faults"]
    ]
    return "; user-simulator faults " + "; ".join(parts) if parts else ""


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
