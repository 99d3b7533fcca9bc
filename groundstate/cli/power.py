"""`groundstate power`: the tasks and attempts a paired comparison with a base run needs to detect a lift, and the
smallest lift the run's own design detects (the model: groundstate/stats/power.py)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, out, print_set_apart, read_run
from groundstate.jsontext import finite
from groundstate.stats.power import PowerPlan, PowerQuestion


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.2%}"


def _count(x: int | None) -> str:
    return "—" if x is None else f"{x:,}"


def power_command(
    base: Path = typer.Argument(..., help="Results JSONL of the base run."),
    lift: float = opts.number(
        PowerQuestion.lift, "--lift", lo=0, hi=1, lo_open=True, hi_open=True, help="pass@1 lift to detect, absolute (0.03: three points)."
    ),
    kk_lift: float = opts.number(
        PowerQuestion.kk_lift,
        "--kk-lift",
        lo=0,
        hi=1,
        lo_open=True,
        hi_open=True,
        help="Change in Observed k/k to detect: the absolute change in the fraction of tasks passing all k attempts.",
    ),
    alpha: float = opts.number(
        PowerQuestion.alpha, "--alpha", lo=0, hi=1, lo_open=True, hi_open=True, help="Two-sided significance level of the paired test."
    ),
    power: float = opts.number(PowerQuestion.power, "--power", lo=0, hi=1, lo_open=True, hi_open=True, help="Chance the test detects the lift."),
    k: str | None = typer.Option(None, "--k", help="Attempts per task to tabulate, comma-separated (default: 1,2,4,8,16,32 and the run's n)."),
    tasks_available: int | None = opts.count(
        None, "--tasks-available", lo=2, help="Tasks there are to draw from (default: the run's): designs needing more are marked out of reach."
    ),
    allow_incomplete: bool = typer.Option(False, "--allow-incomplete", help="Plan from a run with missing, duplicated or system-error keys."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Tasks and attempts per task a paired comparison needs to detect a pass@1 lift and an Observed k/k change, and the
    smallest lift this run's tasks and attempts detect (normal approximation, rates from the base run)."""
    from groundstate.stats.estimators import parse_ks
    from groundstate.stats.power import UnreachableLift, plan

    if power <= alpha:
        fail(f"--power {power} must exceed --alpha {alpha}: any test detects a lift with probability at least alpha")
    try:
        ks = parse_ks(k) if k is not None else None
    except ValueError as e:
        fail(str(e))
    records = read_run(base)
    try:
        p = plan(records, **asdict(PowerQuestion(lift, kk_lift, alpha, power, ks, allow_incomplete, tasks_available)))
    except UnreachableLift as e:
        fail(f"--lift {lift}: {e}")
    except ValueError as e:
        fail(str(e), 1)
    if as_json:
        out.print_json(data=finite(asdict(p)), allow_nan=False)
    else:
        _print_plan(p, base)
    print_set_apart(p.set_apart, "the plan")  # as metrics says its own: on stderr, also with --json


def _print_plan(p: PowerPlan, base: Path) -> None:
    """The base run's rates, what its design detects, what the lift needs, the table of designs, the model and notes."""
    out.print(
        f"{escape(str(base))}: {escape(p.basis)} × n={p.n}, pass@1 {p.base_pass_at_1:.2%}, Observed {p.n}/{p.n} "
        f"{p.base_observed_k_of_k_rate:.2%} · two-sided α = {p.alpha:g}, power {p.power:.0%}"
    )
    out.print(
        f"this run's design ({p.tasks} tasks × {p.n} attempt{'s' if p.n != 1 else ''}, paired) detects a pass@1 lift of {_pct(p.min_detectable_lift)} "
        f"and an Observed {p.n}/{p.n} change of {_pct(p.min_detectable_kk_change)}"
    )
    if p.attempts_needed is not None:
        out.print(f"to detect {p.lift:+.2%} pass@1 with these {p.tasks} tasks: {p.attempts_needed:,} attempts per task in each run")
    else:
        reach = "" if p.min_tasks <= p.available_tasks else f", more than the {p.available_tasks:,} available"
        out.print(f"to detect {p.lift:+.2%} pass@1, {p.tasks} tasks are too few at any k: at least {p.min_tasks:,} tasks are needed{reach}")
    t = Table(title=f"tasks needed (paired; each run makes k attempts per task) for pass@1 {p.lift:+.2%} and Observed k/k {p.kk_lift:+.2%}")
    for col in (
        "k",
        f"tasks for pass@1 {p.lift:+.2%}",
        "attempts (both runs)",
        f"lift the {p.available_tasks:,} tasks detect",
        "base Observed k/k (model)",
        f"tasks for Observed k/k {p.kk_lift:+.2%}",
    ):
        t.add_column(col)
    for row in p.designs:
        total = None if row.tasks_for_lift is None else 2 * row.k * row.tasks_for_lift
        needed = _count(row.tasks_for_lift) + (" (too many)" if row.tasks_for_lift is not None and row.tasks_for_lift > p.available_tasks else "")
        t.add_row(str(row.k), needed, _count(total), _pct(row.lift_with_available), f"{row.base_kk_rate:.2%}", _count(row.tasks_for_kk))
    out.print(t)
    out.print(f"model: {escape(p.model)} (groundstate/stats/power.py)")
    for note in p.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
