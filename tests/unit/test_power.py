"""groundstate.stats.power against a simulation of the design it models, and `groundstate power` / `compare`'s detectable
range on hostile inputs.

The simulation plays the paired experiment the calculation assumes: T tasks drawn (with replacement) from the base
run's tasks, each at its rate (c+½)/(n+1); the candidate at the same rates shifted by the solved logit δ; k Bernoulli
attempts per task for each run; the two-sided z test on the per-task differences (sample sd). Tolerance: 4000
experiments give the empirical power a Monte Carlo sd of at most 0.0063 (at 0.8), so ±0.03 is 3 sd plus ≤ 0.01 for the
normal approximation at the T ≥ 100 of these designs; the type-I rate at zero lift, sd 0.0034 at α = 0.05, gets ±0.012.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.records import AttemptRecord
from groundstate.stats import power as pw

REPS = 4000
TOL, TOL_ALPHA = 0.03, 0.012
N = 8


def records(counts, n: int = N, errors: dict[str, int] | None = None) -> list[AttemptRecord]:
    """n attempts per task, the first c passing; `errors`: task -> attempt index turned into a system error."""
    out = []
    for i, c in enumerate(counts):
        for a in range(n):
            bad = (errors or {}).get(f"t{i}") == a
            out.append(
                AttemptRecord.model_validate(
                    {"task_id": f"t{i}", "attempt": a, "reward": None if bad else int(a < c), "system_error": "boom" if bad else None}
                )
            )
    return out


def write(path, recs: list[AttemptRecord]) -> str:
    path.write_text("".join(r.to_line() for r in recs))
    return str(path)


@pytest.fixture(scope="module")
def base_counts() -> np.ndarray:
    """A base run of 200 tasks × 8 attempts whose true rates are U-shaped, as agent benchmarks' are."""
    rng = np.random.default_rng(1)
    return rng.binomial(N, rng.beta(0.7, 0.7, 200))


@pytest.fixture(scope="module")
def rates(base_counts) -> np.ndarray:
    return pw.base_rates(records(base_counts)).rates


def simulate(p, delta, tasks, k, alpha, rng, metric="pass_at_1", resample=True) -> float:
    """Empirical power (the rejection rate) of REPS paired experiments of `tasks` tasks × k attempts."""
    idx = rng.integers(0, len(p), size=(REPS, tasks)) if resample else np.broadcast_to(np.arange(len(p)), (REPS, len(p)))
    pb = p[idx]
    xb, xc = rng.binomial(k, pb), rng.binomial(k, pw.shifted(pb, delta))
    d = (xc - xb) / k if metric == "pass_at_1" else (xc == k).astype(float) - (xb == k)
    s = d.std(axis=1, ddof=1)
    z = np.divide(d.mean(axis=1) * np.sqrt(d.shape[1]), s, out=np.zeros(REPS), where=s > 0)
    return float((np.abs(z) > stats.norm.ppf(1 - alpha / 2)).mean())


@pytest.mark.parametrize(
    "metric, effect, k, alpha, target",
    [
        ("pass_at_1", 0.05, 1, 0.05, 0.8),
        ("pass_at_1", 0.05, 8, 0.05, 0.8),
        ("pass_at_1", 0.03, 8, 0.05, 0.8),
        ("pass_at_1", 0.05, 4, 0.01, 0.9),
        ("observed_k_of_k", 0.05, 4, 0.05, 0.8),
        ("observed_k_of_k", 0.05, 8, 0.05, 0.8),
    ],
)
def test_tasks_needed_give_the_target_power_in_a_simulation(rates, metric, effect, k, alpha, target):
    tasks = pw.tasks_needed(rates, effect, k, alpha, target, metric)
    delta = pw.solve_shift(rates, effect, k, k, metric)
    e, sd = pw.effect_and_sd(rates, delta, k, k, metric)
    computed = pw.power_of(e, sd, tasks, alpha)
    assert e == pytest.approx(effect, abs=1e-8) and tasks >= 100
    assert target <= computed < target + 0.01  # T is rounded up
    simulated = simulate(rates, delta, tasks, k, alpha, np.random.default_rng(7), metric)
    print(f"{metric} {effect:+.2f} k={k} α={alpha} T={tasks}: computed {computed:.3f}, simulated {simulated:.3f}")
    assert simulated == pytest.approx(computed, abs=TOL)


@pytest.mark.parametrize("metric, k", [("pass_at_1", 1), ("pass_at_1", 8), ("observed_k_of_k", 8)])
def test_type_one_error_at_zero_lift_is_near_alpha(rates, metric, k):
    tasks = pw.tasks_needed(rates, 0.05, k, 0.05, 0.8, metric)
    simulated = simulate(rates, 0.0, tasks, k, 0.05, np.random.default_rng(11), metric)
    print(f"{metric} k={k} T={tasks}: type-I {simulated:.4f}")
    assert simulated == pytest.approx(0.05, abs=TOL_ALPHA)
    assert pw.power_of(0.0, 0.3, tasks, 0.05) == pytest.approx(0.05)


@pytest.mark.parametrize("metric", ["pass_at_1", "observed_k_of_k"])
def test_the_smallest_detectable_lift_of_the_runs_design_is_detected_with_the_target_power(base_counts, rates, metric):
    plan = pw.plan(records(base_counts))
    mde = plan.min_detectable_lift if metric == "pass_at_1" else plan.min_detectable_kk_change
    delta = pw.solve_shift(rates, mde, N, N, metric)
    rng = np.random.default_rng(3)
    drawn = simulate(rates, delta, 200, N, 0.05, rng, metric)
    fixed = simulate(rates, delta, 200, N, 0.05, rng, metric, resample=False)  # compare's case: these very tasks
    print(f"{metric} smallest detectable {mde:+.4f} at 200 × {N}: simulated {drawn:.3f} (tasks drawn), {fixed:.3f} (these tasks)")
    assert drawn == pytest.approx(0.8, abs=TOL) and fixed == pytest.approx(0.8, abs=TOL)
    drop = pw.min_detectable(rates, 200, N, N, 0.05, 0.8, metric, sign=-1)
    assert drop < 0 and pw.power_of(*pw.effect_and_sd(rates, pw.solve_shift(rates, drop, N, N, metric), N, N, metric), 200, 0.05) == pytest.approx(
        0.8
    )


def test_attempts_needed_with_the_runs_tasks(rates):
    k, min_tasks = pw.attempts_needed(rates, 0.03, 200, 0.05, 0.8)
    delta = pw.solve_shift(rates, 0.03, k, k)
    power_at = [pw.power_of(*pw.effect_and_sd(rates, delta, j, j), 200, 0.05) for j in (k - 1, k)]
    assert power_at[0] < 0.8 <= power_at[1] and min_tasks < 200
    simulated = simulate(rates, delta, 200, k, 0.05, np.random.default_rng(5))
    print(f"+3% with 200 tasks: k={k}, computed {power_at[1]:.3f}, simulated {simulated:.3f}")
    assert simulated == pytest.approx(power_at[1], abs=TOL)


def test_more_attempts_help_only_down_to_the_between_task_floor(rates):
    p = np.array([0.01, 0.5, 0.99])  # a logit shift moves the middle task far more than the ends: the lift varies by task
    k, min_tasks = pw.attempts_needed(p, 0.05, 100, 0.05, 0.8)
    assert min_tasks > 3 and pw.attempts_needed(p, 0.05, min_tasks - 1, 0.05, 0.8)[0] is None
    assert pw.attempts_needed(p, 0.05, min_tasks, 0.05, 0.8)[0] > k
    needed = [pw.tasks_needed(rates, 0.03, k, 0.05, 0.8) for k in (1, 2, 4, 8, 16, 64, 1024)]
    floor = pw.attempts_needed(rates, 0.03, 200, 0.05, 0.8)[1]
    assert needed == sorted(needed, reverse=True) and needed[-1] >= floor


def test_the_variance_is_between_task_spread_plus_binomial_noise(rates):
    delta = pw.solve_shift(rates, 0.1, N, N)
    q = pw.shifted(rates, delta)
    assert (q - rates).mean() == pytest.approx(0.1)
    rng = np.random.default_rng(2)
    idx = rng.integers(0, len(rates), 400_000)
    d = (rng.binomial(N, q[idx]) - rng.binomial(N, rates[idx])) / N
    assert pw.effect_and_sd(rates, delta, N, N)[1] == pytest.approx(d.std(), rel=0.01)
    assert pw.effect_and_sd(rates, delta, N, N)[1] ** 2 == pytest.approx((q - rates).var() + ((rates * (1 - rates) + q * (1 - q)) / N).mean())


# -- the command line ------------------------------------------------------------------------------------------


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_power_command_table_and_json(tmp_path, base_counts):
    path = write(tmp_path / "base.jsonl", records(base_counts))
    r = invoke("power", path, "--lift", "0.05")
    assert r.exit_code == 0, r.output
    assert "200 tasks × n=8" in r.stdout and "detects a pass@1 lift of +" in r.stdout and "attempts per task in each run" in r.stdout
    j = json.loads(invoke("power", path, "--json", "--k", "3,8", "--lift", "0.05").stdout)
    assert [d["k"] for d in j["designs"]] == [3, 8] and j["tasks"] == 200 and j["n"] == 8
    assert (
        j["designs"][1]["tasks_for_lift"] == j["tasks_needed_at_n"] == pw.tasks_needed(pw.base_rates(records(base_counts)).rates, 0.05, 8, 0.05, 0.8)
    )
    assert 0 < j["min_detectable_lift"] < 0.05 and "logit" in j["model"]
    # k = 3 needs more tasks than the run's 200: said, with what the 200 can detect there (#32 item 8)
    assert j["available_tasks"] == 200 and j["designs"][0]["tasks_for_lift"] > 200 and j["designs"][1]["tasks_for_lift"] <= 200
    assert j["notes"] == [
        f"1 of the 2 designs need more than the 200 tasks available; with them, the smallest pass@1 lift detectable is "
        f"{j['designs'][1]['lift_with_available']:+.2%} (at k = 8) (the tasks the base run's rates cover: give --tasks-available N if the task "
        "source has more)"
    ]  # the smallest over every design, not only those out of reach (k = 8 detects less than k = 3)
    assert j["designs"][1]["lift_with_available"] < j["designs"][0]["lift_with_available"]


@pytest.mark.parametrize(
    "args, option",
    [
        (["--lift", "0"], "--lift"),
        (["--lift", "1"], "--lift"),
        (["--lift", "-0.1"], "--lift"),
        (["--kk-lift", "1.5"], "--kk-lift"),
        (["--alpha", "1.5"], "--alpha"),
        (["--alpha", "0"], "--alpha"),
        (["--power", "nan"], "--power"),
        (["--power", "1"], "--power"),
        (["--power", "0.04"], "--power"),  # not above alpha
        (["--lift", "0.6"], "--lift"),  # beyond what the base can gain
        (["--k", "0"], "--k"),
    ],
)
def test_bad_options_exit_2_naming_the_option(tmp_path, args, option):
    path = write(tmp_path / "base.jsonl", records([2, 4, 6, 8] * 10))
    r = invoke("power", path, *args)
    assert r.exit_code == 2, r.output
    if "Invalid value for" in r.output:  # refused where typer parses it (opts.number), as every numeric option is
        assert f"Invalid value for '{option}'" in r.output
    else:  # refused against the run or the other options: one line
        assert r.output.startswith("error:") and option in r.output and len(r.output.strip().splitlines()) == 1


def test_hostile_base_runs(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    r = invoke("power", empty)
    assert r.exit_code == 2 and f"{empty}: holds no records" in r.output
    # one attempt per task: still planned, from the binomial formula, and said
    r = invoke("power", write(tmp_path / "n1.jsonl", records([0, 1] * 40, n=1)), "--json")
    assert r.exit_code == 0, r.output
    j = json.loads(r.stdout)
    assert j["n"] == 1 and j["min_detectable_lift"] > 0 and any("one attempt per task" in note for note in j["notes"])
    # all pass: nothing to lift, no variance
    r = invoke("power", write(tmp_path / "pass.jsonl", records([N] * 40)))
    assert r.exit_code == 1 and "passed every attempt" in r.output and "no variance" in r.output
    # all fail: planned, with the assumption said plainly
    r = invoke("power", write(tmp_path / "fail.jsonl", records([0] * 40)))
    assert r.exit_code == 0, r.output
    assert "failed every attempt" in r.output and "assumption" in r.output
    # deterministic agent: every task 0/n or n/n
    j = json.loads(invoke("power", write(tmp_path / "det.jsonl", records([0, N] * 20)), "--json").stdout)
    assert any("no task both passed and failed" in note for note in j["notes"])
    # system errors: an incomplete run is refused unless allowed, and its errors are excluded, as metrics does
    path = write(tmp_path / "err.jsonl", records([4] * 40, errors={"t0": 7}))
    r = invoke("power", path)
    assert r.exit_code == 1 and "system errors" in r.output and "--allow-incomplete" in r.output
    j = json.loads(invoke("power", path, "--allow-incomplete", "--json").stdout)
    assert j["tasks"] == 39 and j["basis"] == "39 of 40 tasks (set apart: 1 with fewer than k clean attempts)"
    assert any("incomplete run" in note for note in j["notes"])
    # records of two runs
    other = [r.model_copy(update={"agent": "scripted:gold"}) for r in records([4] * 40)]
    r = invoke("power", write(tmp_path / "mixed.jsonl", records([4] * 40) + other))
    assert r.exit_code == 1 and "mixes 2 runs" in r.output


def test_power_plans_from_the_tasks_and_figures_of_metrics_and_compare(tmp_path):
    """An incomplete run planned anyway: power's task set, pass@1 and Observed n/n are metrics' (a task with fewer than
    n clean attempts set apart and named, not planned from nor counted as not solved n/n), and its smallest detectable
    lift is the one compare gives the same run against itself."""
    from groundstate.pipeline.analysis import compare_runs
    from groundstate.stats.metrics import compute

    recs = records([8, 7, 0, 8, 4, 2, 6, 8, 1, 5] * 4, errors={"t0": 7, "t3": 2})  # two all-pass tasks lose an attempt
    m = compute(recs, allow_incomplete=True)
    p = pw.plan(recs, allow_incomplete=True)
    assert p.base_pass_at_1 == pytest.approx(m["pass_at_1"])
    assert p.base_observed_k_of_k_rate == pytest.approx(m["observed_k_of_k_rate"])
    assert (p.tasks, p.basis, p.set_apart) == (m["tasks_covered"], m["basis"], m["set_apart"]) and p.tasks == 38
    c = compare_runs(recs, recs, allow_incomplete=True)
    assert c["power"]["tasks"] == p.tasks and c["power"]["min_detectable_lift"] == pytest.approx(p.min_detectable_lift)
    assert c["metrics"]["pass_at_1"]["base"] == pytest.approx(p.base_pass_at_1)
    r = invoke("power", write(tmp_path / "inc.jsonl", recs), "--allow-incomplete")
    assert r.exit_code == 0, r.output
    assert f"{m['basis']} × n={N}, pass@1 {m['pass_at_1']:.2%}, Observed {N}/{N} {m['observed_k_of_k_rate']:.2%}" in r.output
    assert "2 tasks left out of the plan" in r.output and "t0: 7 clean attempts, fewer than k=8" in r.output


def test_compare_says_whether_the_lift_is_in_the_detectable_range(tmp_path, base_counts, rates):
    base = write(tmp_path / "base.jsonl", records(base_counts))
    mde = pw.plan(records(base_counts)).min_detectable_lift
    rerun = write(tmp_path / "rerun.jsonl", records(np.random.default_rng(4).binomial(N, rates)))  # the same agent again: no lift
    nudged = write(tmp_path / "nudged.jsonl", records(np.minimum(base_counts + (np.arange(200) % 20 == 0), N)))  # +0.5%, no noise
    large = write(tmp_path / "large.jsonl", records(np.minimum(base_counts + (np.arange(200) % 2 == 0), N)))  # about +5%
    r = invoke("compare", base, rerun)
    assert r.exit_code == 0, r.output
    assert "is below the smallest lift this design can detect at 80% power" in r.stdout and "not distinguishable from noise" in r.stdout
    j = json.loads(invoke("compare", base, nudged, "--json").stdout)
    assert j["metrics"]["pass_at_1"]["ci_95"][0] > 0 and not j["power"]["detectable"] and "treat it as tentative" in j["power"]["sentence"]
    j = json.loads(invoke("compare", base, large, "--json").stdout)["power"]
    assert j["detectable"] and j["min_detectable_lift"] == pytest.approx(mde) and j["observed_lift"] > mde
    assert "is above the smallest lift" in j["sentence"] and (j["tasks"], j["k_base"], j["k_candidate"]) == (200, N, N)
    j = json.loads(invoke("compare", large, base, "--json").stdout)["power"]  # a drop
    assert j["detectable"] and j["min_detectable_lift"] < 0 and "smallest drop" in j["sentence"]


def test_what_a_hostile_review_found(tmp_path):
    """An all-pass base has no detectable range in compare either; one task cannot be tested; alpha too small for a
    double is refused, not an OverflowError."""
    gold = records([N] * 30)
    assert pw.detectable_range(gold, gold, 0.0).min_detectable_lift is None
    assert "passed every attempt" in pw.detectable_range(gold, gold, 0.0).sentence
    one = write(tmp_path / "one.jsonl", records([2]))
    r = invoke("power", one)
    assert r.exit_code == 1 and "one task with a clean attempt" in r.output
    path = write(tmp_path / "base.jsonl", records([2, 4, 6, 8] * 10))
    r = invoke("power", path, "--alpha", "1e-300")
    assert r.exit_code == 1 and "alpha (1e-300) must be at least 1e-12" in r.output and "Traceback" not in r.output
