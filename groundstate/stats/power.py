"""Statistical power of a paired comparison: the tasks and attempts needed to detect a lift, and the smallest lift a
design detects.

The design: a candidate run on the same tasks as a base run (paired), k_b and k_c clean attempts per task. The model,
from the base run alone (`groundstate power`; `compare` uses it for its detectable-range line):
- Tasks are drawn from a population that the base run's tasks represent, each with equal weight: the tasks metrics
  covers (`stats.basis` at k = n: an incomplete run's task with fewer than n clean attempts is set apart). Task i's
  true pass rate p_i is its Jeffreys posterior mean (c_i + ½)/(n_i + 1): a task seen 0/n or n/n can still move, and
  n = 1 works (its within-task variance is then assumed, not measured; `notes` says so).
- The candidate: q_i = expit(logit p_i + δ), one shift δ for every task, solved so the model's metric moves by the
  lift (a lift of L in pass@1 is mean q_i − mean p_i = L). Its only between-task spread of the lift is what a common
  logit shift makes; a candidate that helps some tasks and hurts others needs more tasks than this says. The two
  runs' attempts are independent: runs whose attempts agree more than chance (`agreement`) are less noisy than this.
- Per task, d_i = the candidate's per-task statistic minus the base's: for pass@1 the mean of the attempts (mean p,
  variance p(1−p)/k); for Observed k/k the indicator "all k attempts passed" (mean p^k, variance p^k(1−p^k)). The
  change in Observed k/k to detect is an absolute change in the fraction of tasks that pass all k attempts.
- σ² = Var(d_i) = Var_i(m(q_i) − m(p_i)) [B: between-task spread of the true lift; pairing removes the spread of p_i]
  + E_i[v(p_i, k_b) + v(q_i, k_c)] [W: within-task binomial noise; for pass@1 W = E[p(1−p) + q(1−q)]/k].
- The test: z = mean(d)/(s/√T), s the sample sd of the d_i, rejecting when |z| > z_{1−α/2} (two-sided); `compare`'s
  paired-bootstrap 95% interval excluding 0 is nearly this test. Normal approximation: power(L, T) =
  Φ(√T·|L|/σ − z_{1−α/2}) + Φ(−√T·|L|/σ − z_{1−α/2}); rough below ~30 tasks, and conservative for Observed k/k
  at large k, where all-pass tasks are rare (k = 32: 0.83 simulated for 0.80 computed).
- Hence tasks needed T = ⌈((z_{1−α/2} + z_power)·σ/L)²⌉. For pass@1 σ² = B + W/k: more attempts shrink T only down
  to T_min = (z_{1−α/2} + z_power)²·B/L², and with T tasks the attempts needed are k = ⌈W/(T·L²/(z_{1−α/2} + z_power)²
  − B)⌉. The smallest detectable lift at (T, k) solves power(L, T) = the target (σ depends on L).
tests/unit/test_power.py checks these against a simulation of the same design (tasks drawn anew, and compare's case
of the very same tasks, where the test is slightly conservative: the spread B is then not noise but is still counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from groundstate.records import AttemptRecord, check_one_run
from groundstate.stats.basis import basis, coverage, require_complete, solved_every_time, task_counts
from groundstate.stats.compare import pair_runs

Metric = Literal["pass_at_1", "observed_k_of_k"]
DEFAULT_KS = (1, 2, 4, 8, 16, 32)
_MAX_SHIFT = 30.0  # on the logit scale: expit(logit(p) + 30) is 1 to within 1e-8 for any rate a run can show
MODEL = (
    "paired design, tasks drawn from the base run's tasks; per-task rates (c+½)/(n+1); candidate = base shifted by one "
    "logit δ; normal approximation, two-sided α"
)


class UnreachableLift(ValueError):
    """The lift asked for cannot happen from this base run (it passes nearly everything already, or fails too much)."""


@dataclass(frozen=True)
class BaseRates:
    """A base run as the model sees it: per task of `metrics`' task set (`basis` at k = n; those set apart are in
    `set_apart`), n_i, c_i and the rate p_i = (c_i + ½)/(n_i + 1); `observed_k_of_k_rate`: solved in all n attempts."""

    attempts: np.ndarray
    successes: np.ndarray
    rates: np.ndarray
    notes: list[str]
    basis: str = ""  # `Basis.sentence()`: the task set, as metrics labels it
    set_apart: list[dict[str, str]] = field(default_factory=list)  # `Basis.rows()`
    observed_k_of_k_rate: float = 0.0

    @property
    def tasks(self) -> int:
        return len(self.rates)

    @property
    def pass_at_1(self) -> float:
        return float(np.mean(self.successes / self.attempts))


@dataclass(frozen=True)
class DesignRow:
    """Tasks needed at k attempts per task (each run): for the pass@1 lift and for the Observed k/k change; None where
    the model cannot reach that change at this k. `base_kk_rate` is the model's base Observed k/k, mean p_i^k."""

    k: int
    tasks_for_lift: int | None
    tasks_for_kk: int | None
    base_kk_rate: float
    # the smallest pass@1 lift the available tasks detect at this k (None: none is detectable)
    lift_with_available: float | None = None


@dataclass(frozen=True)
class PowerPlan:
    """What `groundstate power` reports. `attempts_needed`: k per task for the lift with the run's own tasks (None: no k
    is enough; `min_tasks` is the fewest tasks any k can do with). Lifts are absolute fractions (0.03 = 3 points)."""

    lift: float
    kk_lift: float
    alpha: float
    power: float
    tasks: int
    n: int
    base_pass_at_1: float
    base_observed_k_of_k_rate: float  # over the same tasks as metrics' Observed n/n
    shift: float  # the logit δ that makes the lift
    sd_per_task: float  # σ at k = n
    min_detectable_lift: float | None  # with the run's tasks and attempts
    min_detectable_kk_change: float | None
    tasks_needed_at_n: int | None
    attempts_needed: int | None
    min_tasks: int
    designs: list[DesignRow]
    available_tasks: int = 0  # tasks there are to draw from (default: the run's own): no row may ask for more unsaid
    model: str = MODEL
    notes: list[str] = field(default_factory=list)
    basis: str = ""  # the task set, as metrics labels it: `238 of 240 tasks (set apart: …)`
    set_apart: list[dict[str, str]] = field(default_factory=list)  # task_id, kind, reason: as metrics' `set_apart`


@dataclass(frozen=True)
class DetectableRange:
    """Whether `compare`'s observed pass@1 lift is one its design (the shared tasks, each run's attempts) detects with
    `power`: `min_detectable_lift` is signed like the observed lift (a drop for a negative one); None when no lift
    of that sign is detectable. Computed from the base run's rates by the model above, not from the candidate's."""

    observed_lift: float
    min_detectable_lift: float | None
    detectable: bool
    tasks: int
    k_base: int
    k_candidate: int
    alpha: float
    power: float
    sentence: str
    notes: list[str] = field(default_factory=list)


def base_rates(records: list[AttemptRecord], allow_incomplete: bool = False) -> BaseRates:
    """The tasks and rates of metrics' task set (`basis` at k = n: a task of an incomplete run with fewer than n clean
    attempts is set apart, as metrics does, so pass@1 and Observed n/n are metrics' figures). ValueError for no records,
    records of several runs, an incomplete run (unless allowed) and an all-pass run."""
    if not records:
        raise ValueError("no results records")
    check_one_run(records)
    incomplete = require_complete(records, "plan", allow_incomplete)
    run_n = coverage(records).n
    b = basis(task_counts(records), run_n)  # k = n: metrics' rule, one task set for every figure of the run
    counts = list(b.covered.values())
    if not counts:
        raise ValueError(f"no task to plan from: {b.sentence()}")
    if len(counts) < 2:
        one = f"one task to plan from, {b.sentence()}" if b.apart else "one task with a clean attempt"
        raise ValueError(f"{one}: a paired test across tasks needs two or more")
    n = np.array([t.n for t in counts], dtype=float)
    c = np.array([t.c for t in counts], dtype=float)
    if np.all(c == n):
        raise ValueError(
            f"the base run passed every attempt of its {len(counts)} tasks (pass@1 = 100%): it shows no variance to plan from, and no lift is possible"
        )
    notes = rate_notes(n, c)
    if incomplete:
        notes.append("incomplete run, planned anyway: " + "; ".join(incomplete))
    kk = sum(solved_every_time(t, run_n) for t in counts) / len(counts)
    return BaseRates(n, c, (c + 0.5) / (n + 1), notes, b.sentence(), b.rows(), kk)


def rate_notes(n: np.ndarray, c: np.ndarray) -> list[str]:
    """What a person must know about rates read from these counts: where the variance is assumed, not measured."""
    notes = []
    if np.all(c == 0):
        notes.append(
            f"the base run failed every attempt (pass@1 = 0%): it shows no variance; every task's rate is taken as "
            f"(0 + ½)/(n + 1) = {0.5 / (n.max() + 1):.1%}, an assumption, not a measurement"
        )
    elif np.all(c == n):
        notes.append("the base run passed every attempt (pass@1 = 100%): it shows no variance; every task's rate is taken as (n + ½)/(n + 1)")
    elif n.max() == 1:
        notes.append(
            "one attempt per task: the run cannot measure how much a task's attempts vary; the within-task variance is "
            "the binomial p(1 − p) of each task's shrunk rate (25% or 75%), an assumption"
        )
    elif np.all((c == 0) | (c == n)):
        notes.append(
            "no task both passed and failed: attempts look deterministic; the within-task variance comes from the "
            "Jeffreys shrinkage alone, an assumption (too high if the agent really is deterministic)"
        )
    if len(n) < 30:
        notes.append(f"only {len(n)} tasks: the normal approximation, and the base run's picture of the task population, are rough below ~30")
    return notes


def _per_task(p: np.ndarray, k: np.ndarray | float, metric: Metric) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of one run's per-task statistic at rate p with k attempts."""
    if metric == "pass_at_1":
        return p, p * (1 - p) / k
    m = p**k
    return m, m * (1 - m)


def shifted(p: np.ndarray, delta: float) -> np.ndarray:
    """The candidate's rates: each base rate moved by `delta` on the logit scale."""
    from scipy import special  # imported here: 0.5 s that a process which never plans power does not pay

    return special.expit(special.logit(p) + delta)


def effect_and_sd(p: np.ndarray, delta: float, k_b, k_c, metric: Metric = "pass_at_1") -> tuple[float, float]:
    """The model's lift (mean d_i) and σ (the sd of d_i: between-task spread plus within-task noise) for shift `delta`."""
    mb, vb = _per_task(p, k_b, metric)
    mc, vc = _per_task(shifted(p, delta), k_c, metric)
    d = mc - mb
    return float(d.mean()), float(math.sqrt(d.var() + (vb + vc).mean()))


def solve_shift(p: np.ndarray, effect: float, k_b, k_c, metric: Metric = "pass_at_1") -> float | None:
    """The logit shift δ whose lift is `effect`; None when no shift reaches it."""
    from scipy import optimize  # imported here: 0.5 s that a process which never plans power does not pay

    if effect == 0:
        return 0.0
    f = lambda delta: effect_and_sd(p, delta, k_b, k_c, metric)[0] - effect  # noqa: E731
    if not f(-_MAX_SHIFT) < 0 < f(_MAX_SHIFT):
        return None
    return float(optimize.brentq(f, -_MAX_SHIFT, _MAX_SHIFT, xtol=1e-10))


def power_of(effect: float, sd: float, tasks: float, alpha: float) -> float:
    """Normal-approximation power of the two-sided paired test for a lift `effect` with per-task sd `sd`."""
    from scipy import stats  # imported here: 0.5 s that a process which never plans power does not pay

    z = stats.norm.ppf(1 - alpha / 2)
    shift = math.sqrt(tasks) * abs(effect) / sd if sd > 0 else math.inf
    return float(stats.norm.cdf(shift - z) + stats.norm.cdf(-shift - z))


def _z_sum(alpha: float, power: float) -> float:
    from scipy import stats  # imported here: 0.5 s that a process which never plans power does not pay

    return float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))


def tasks_needed(p: np.ndarray, effect: float, k, alpha: float, power: float, metric: Metric = "pass_at_1") -> int | None:
    """Tasks (at least 2) for the paired test to detect `effect` with `power` at k attempts per task in each run; None
    when the model cannot reach `effect`."""
    delta = solve_shift(p, effect, k, k, metric)
    if delta is None:
        return None
    e, sd = effect_and_sd(p, delta, k, k, metric)
    return max(2, math.ceil((_z_sum(alpha, power) * sd / e) ** 2))


def attempts_needed(p: np.ndarray, lift: float, tasks: int, alpha: float, power: float) -> tuple[int | None, int]:
    """For a pass@1 lift: the attempts per task (each run) that `tasks` tasks need, None when no k is enough; and the
    fewest tasks any k can do with (σ² = B + W/k → B as k grows)."""
    delta = solve_shift(p, lift, 1, 1)
    if delta is None:
        raise UnreachableLift(f"a pass@1 lift of {lift:+.1%} cannot be reached from this base run")
    q = shifted(p, delta)
    between = float((q - p).var())
    within = float((p * (1 - p) + q * (1 - q)).mean())
    zz = _z_sum(alpha, power) ** 2
    min_tasks = max(2, math.floor(zz * between / lift**2) + 1)
    room = tasks * lift**2 / zz - between
    return (max(1, math.ceil(within / room)) if room > 0 else None), min_tasks


def min_detectable(p: np.ndarray, tasks: int, k_b, k_c, alpha: float, power: float, metric: Metric = "pass_at_1", sign: int = 1) -> float | None:
    """The smallest lift of `sign` (+1 a rise, −1 a drop) that `tasks` tasks at k_b, k_c attempts detect with `power`;
    None when none does (every reachable lift is detected less often)."""
    from scipy import optimize  # imported here: 0.5 s that a process which never plans power does not pay

    def gap(delta: float) -> float:
        e, sd = effect_and_sd(p, delta, k_b, k_c, metric)
        return power_of(e, sd, tasks, alpha) - power

    grid = sign * np.linspace(0, _MAX_SHIFT, 301)
    gaps = [gap(d) for d in grid]
    first = next((i for i, g in enumerate(gaps) if g >= 0), None)
    if first is None or first == 0:
        return None
    delta = optimize.brentq(gap, grid[first - 1], grid[first], xtol=1e-10)
    return effect_and_sd(p, delta, k_b, k_c, metric)[0]


@dataclass(frozen=True)
class PowerQuestion:
    """What `groundstate power` asks of `plan` (`plan(records, **asdict(question))`): these defaults are the command's
    and `plan`'s."""

    lift: float = 0.03  # pass@1 lift to detect, absolute
    kk_lift: float = 0.05  # change in Observed k/k to detect, absolute
    alpha: float = 0.05  # two-sided significance level of the paired test
    power: float = 0.8  # chance the test detects the lift
    ks: list[int] | None = None  # attempts per task to tabulate (None: `DEFAULT_KS` and the run's n)
    allow_incomplete: bool = False
    available_tasks: int | None = None  # tasks there are to draw from (None: the run's)


def plan(
    records: list[AttemptRecord],
    lift: float = PowerQuestion.lift,
    kk_lift: float = PowerQuestion.kk_lift,
    alpha: float = PowerQuestion.alpha,
    power: float = PowerQuestion.power,
    ks: list[int] | None = None,
    allow_incomplete: bool = False,
    available_tasks: int | None = None,
) -> PowerPlan:
    """All figures of `groundstate power` (the module docstring gives the model). `ks`: attempts per task to tabulate
    (default `DEFAULT_KS` and the run's n). `available_tasks`: how many tasks there are to draw from (default: the
    run's); a design needing more is said to be out of reach, with the lift the available tasks detect at that k.
    ValueError as `base_rates`; `UnreachableLift` for a lift the base cannot make."""
    for name, value in (("lift", lift), ("kk_lift", kk_lift), ("alpha", alpha), ("power", power)):
        if not 0 < value < 1:
            raise ValueError(f"{name} must be between 0 and 1 (exclusive), got {value}")
    if power <= alpha:
        raise ValueError(f"power ({power}) must exceed alpha ({alpha}): a test detects any lift with probability at least alpha")
    if alpha < 1e-12 or power > 1 - 1e-12:  # beyond what a normal quantile in double precision tells apart from 0 or 1
        raise ValueError(f"alpha ({alpha:g}) must be at least 1e-12 and power ({power:g}) at most 1 - 1e-12")
    if ks is not None and any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"attempts per task must be whole numbers >= 1, got {ks}")
    base = base_rates(records, allow_incomplete)
    available = base.tasks if available_tasks is None else available_tasks
    if isinstance(available, bool) or not isinstance(available, int) or available < 2:
        raise ValueError(f"available tasks must be a whole number of at least 2 (a paired test needs two tasks), got {available!r}")
    p, n_i = base.rates, base.attempts
    n = int(n_i.max())
    if lift >= 1 - base.pass_at_1:
        raise UnreachableLift(f"the base run's pass@1 is {base.pass_at_1:.1%}: a pass@1 lift must be below {1 - base.pass_at_1:.1%}")
    delta = solve_shift(p, lift, n_i, n_i)
    if delta is None:
        raise UnreachableLift(f"a pass@1 lift of {lift:+.1%} cannot be reached from this base run's rates (mean {p.mean():.1%})")
    attempts, min_tasks = attempts_needed(p, lift, base.tasks, alpha, power)
    rows = []
    for k in sorted(set(ks or DEFAULT_KS) | {n}):
        needed = tasks_needed(p, lift, k, alpha, power)
        reach = min_detectable(p, available, k, k, alpha, power)
        rows.append(DesignRow(k, needed, tasks_needed(p, kk_lift, k, alpha, power, "observed_k_of_k"), float(np.mean(p**k)), reach))
    notes = list(base.notes)
    beyond = [r for r in rows if r.tasks_for_lift is None or r.tasks_for_lift > available]
    if beyond:
        best = min((r for r in rows if r.lift_with_available is not None), key=lambda r: r.lift_with_available or 0, default=None)
        notes.append(
            f"{len(beyond)} of the {len(rows)} designs need more than the {available:,} tasks available"
            + (f"; with them, the smallest pass@1 lift detectable is {best.lift_with_available:+.2%} (at k = {best.k})" if best else "")
            + (" (the tasks the base run's rates cover: give --tasks-available N if the task source has more)" if available_tasks is None else "")
        )
    if any(r.tasks_for_kk is None for r in rows):
        notes.append(f"an Observed k/k change of {kk_lift:+.1%} cannot be reached at some k (—): the model's k/k fraction is too close to 1 there")
    return PowerPlan(
        lift=lift,
        kk_lift=kk_lift,
        alpha=alpha,
        power=power,
        tasks=base.tasks,
        n=n,
        base_pass_at_1=base.pass_at_1,
        base_observed_k_of_k_rate=base.observed_k_of_k_rate,
        shift=delta,
        sd_per_task=effect_and_sd(p, delta, n_i, n_i)[1],
        min_detectable_lift=min_detectable(p, base.tasks, n_i, n_i, alpha, power),
        min_detectable_kk_change=min_detectable(p, base.tasks, n_i, n_i, alpha, power, "observed_k_of_k"),
        tasks_needed_at_n=tasks_needed(p, lift, n, alpha, power),
        attempts_needed=attempts,
        min_tasks=min_tasks,
        designs=rows,
        available_tasks=available,
        notes=notes,
        basis=base.basis,
        set_apart=base.set_apart,
    )


def detectable_range(
    base: list[AttemptRecord],
    cand: list[AttemptRecord],
    observed_lift: float,
    alpha: float = 0.05,
    power: float = 0.8,
    ci_excludes_zero: bool | None = None,
    k: int | None = None,
) -> DetectableRange:
    """Whether `observed_lift` (compare's pass@1 lift) is at least the smallest lift of its sign that this design
    detects with `power`: the tasks and attempts `stats.compare` compared (`stats.compare.pair_runs`), rates from the
    base run. `ci_excludes_zero` (compare's interval) only words the sentence."""
    pair = pair_runs(base, cand, k, allow_incomplete=True)  # the tasks and attempts `compare` compared (at its `k`): one rule
    bc, cc, shared = pair.base, pair.candidate, list(pair.base)
    n_b = np.array([bc[t].n for t in shared], dtype=float)
    c_b = np.array([bc[t].c for t in shared], dtype=float)
    n_c = np.array([cc[t].n for t in shared], dtype=float)
    if np.all(c_b == n_b) or len(shared) < 2:  # as `base_rates` refuses: no variance to plan from, or no spread to test
        why = "the base run passed every attempt of the shared tasks" if np.all(c_b == n_b) else "one shared task: a paired test needs two or more"
        sentence = f"no detectable range: {why}, so this design's power cannot be estimated (observed lift {observed_lift:+.2%})"
        kb, kc = int(n_b.max()), int(n_c.max())
        return DetectableRange(observed_lift, None, False, len(shared), kb, kc, alpha, power, sentence, rate_notes(n_b, c_b))
    sign = -1 if observed_lift < 0 else 1
    mde = min_detectable((c_b + 0.5) / (n_b + 1), len(shared), n_b, n_c, alpha, power, sign=sign)
    detectable = mde is not None and abs(observed_lift) >= abs(mde)
    kb, kc = int(n_b.max()), int(n_c.max())
    design = (
        f"{len(shared)} tasks × {kb} attempt{'s' if kb != 1 else ''}" if kb == kc else f"{len(shared)} tasks × {kb} base / {kc} candidate attempts"
    )
    what, head = ("lift" if sign > 0 else "drop"), f"observed lift {observed_lift:+.2%}"
    if mde is None:
        sentence = f"no {what} of pass@1 is detectable at {power:.0%} power by {design}: {head} is not distinguishable from noise"
    else:
        where = f"the smallest {what} this design can detect at {power:.0%} power ({mde:+.2%}; {design}, two-sided α = {alpha:g})"
        if detectable:
            sentence = f"{head} is {'above' if sign > 0 else 'beyond'} {where}"
        elif ci_excludes_zero:
            # significant by luck as often as not: an effect found below the detectable range is usually overstated
            sentence = (
                f"{head} is {'below' if sign > 0 else 'short of'} {where}: its 95% CI excludes 0, but a {what} this small is "
                f"found in fewer than {power:.0%} of such experiments and overstated when found, so treat it as tentative"
            )
        else:
            sentence = f"{head} is {'below' if sign > 0 else 'short of'} {where}: not distinguishable from noise"
    return DetectableRange(observed_lift, mde, detectable, len(shared), kb, kc, alpha, power, sentence, rate_notes(n_b, c_b))
