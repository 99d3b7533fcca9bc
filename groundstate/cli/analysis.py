"""`groundstate metrics`, `compare`, `report` and `export`: commands that read results files (and never run anything a
record names)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, message_of, out, print_set_apart, read_run
from groundstate.jsontext import finite
from groundstate.pipeline.analysis import Exported, ExportJob, ReportJob


def _fmt(x, pct=True):
    if x is None or (isinstance(x, float) and x != x):
        return "—"
    return f"{x:.2%}" if pct else f"{x}"


def metrics(
    results: Path = typer.Argument(..., help="Results JSONL of a run."),
    k: str | None = typer.Option(
        None, "--k", help="k for pass@k / pass^k: one or more, comma-separated (e.g. 1,5,20), each at most n, the attempts per task (default: n)."
    ),
    prices: Path | None = typer.Option(None, "--prices", help="YAML price table overriding the bundled one."),
    by: str = opts.choice("domain", "--by", choices=("domain", "family"), help="Breakdown: domain or family (--json has both)."),
    allow_incomplete: bool = typer.Option(False, "--allow-incomplete", help="Compute despite missing, duplicated or system-error keys."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """pass@1, pass@k, pass^k, Observed k/k with intervals, per-domain breakdown, tokens and cost."""
    from groundstate.stats.cost import load_prices
    from groundstate.stats.estimators import parse_ks
    from groundstate.stats.metrics import compute

    try:
        ks = parse_ks(k) if k is not None else None
    except ValueError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    records = read_run(results)
    try:
        m = compute(records, ks, load_prices(prices), allow_incomplete)
    except ValueError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from None
    if not m["complete"]:  # --allow-incomplete: computed anyway, and said (on stderr, also with --json)
        console.print(f"[yellow]incomplete run, computed anyway:[/yellow] {escape('; '.join(m['coverage_problems']))}")
    if as_json:
        out.print_json(data=finite({k_: v for k_, v in m.items() if k_ != "per_task"} | {"per_task": m["per_task"]}), allow_nan=False)
    else:
        _print_metrics(m, results, by)


def _print_metrics(m: dict, results: Path, by: str) -> None:
    """The figures' table, the tasks left out, the breakdown by domain or family, where failed attempts went wrong, and
    the user simulator's faults."""
    from groundstate.types import FAULT_KINDS

    iv = m["intervals"]
    n = m["n"]
    table = Table(title=f"{escape(str(results))} · {escape(m['basis'])} × n={n}")
    table.add_column("metric")
    table.add_column("value")
    table.add_column("95% CI (bootstrap over tasks)")

    def ci(iv, name):
        return "—" if name not in iv else f"[{_fmt(iv[name][0])}, {_fmt(iv[name][1])}]"

    table.add_row("pass@1", _fmt(m["pass_at_1"]), ci(iv, "pass_at_1"))
    for k_, at in m["at_k"].items():
        table.add_row(f"pass@{k_} (unbiased)", _fmt(at["pass_at_k"]), ci(at["intervals"], "pass_at_k"))
    table.add_row("tasks solved at least once", str(m["solved_at_least_once"]), "")
    for k_, at in m["at_k"].items():
        table.add_row(f"pass^{k_} (unbiased)", _fmt(at["pass_hat_k"]), ci(at["intervals"], "pass_hat_k"))
        table.add_row(f"pass^{k_} (plug-in (c/n)^k)", _fmt(at["pass_hat_k_plugin"]), "")
    table.add_row(f"Observed {n}/{n}", f"{m['observed_k_of_k']} ({_fmt(m['observed_k_of_k_rate'])})", ci(iv, "observed_k_of_k_rate"))
    table.add_row("system errors", str(m["system_errors"]), "excluded from the rates")
    table.add_row("unjudged (rubric, no judge)", str(m["unjudged"]), "their tasks set apart" if m["unjudged"] else "")
    table.add_row("cost (USD)", "—" if m["cost_usd"] is None else f"{m['cost_usd']:.4f}", escape(m["cost_note"] or ""))
    table.add_row(
        "cost per dependable task",
        "—" if m["cost_per_dependable_task"] is None else f"{m['cost_per_dependable_task']:.4f}",
        escape(m["cost_per_dependable_task_note"] or ""),
    )
    out.print(table)
    print_set_apart(m["set_apart"], "the figures")
    group = m.get(f"by_{by}", {})
    if group:
        t2 = Table(title=f"by {by}")
        for col in (by, "tasks", "pass@1", f"pass@{m['k']}", f"pass^{m['k']}", f"{n}/{n}"):
            t2.add_column(col)
        for g, v in group.items():
            t2.add_row(escape(g), str(v["tasks"]), _fmt(v["pass_at_1"]), _fmt(v["pass_at_k"]), _fmt(v["pass_hat_k"]), str(v["observed_k_of_k"]))
        out.print(t2)
    if m["blame_by_family"]:
        t3 = Table(title="where failed attempts went wrong (blame), by task family")
        t3.add_column("family", no_wrap=True)  # names are never cut: a person looks them up
        for col in ("failed", "diverged", "stopped early", "never acted"):
            t3.add_column(col, justify="right")
        for fam, b in m["blame_by_family"].items():
            kinds = b["kinds"]
            t3.add_row(escape(fam), str(b["failed"]), *(str(kinds.get(k, 0)) for k in ("diverged", "stopped_early", "never_acted")))
        out.print(t3)
        for fam, b in m["blame_by_family"].items():  # a sentence each, below the table: never cut to fit a column
            out.print(f"  {fam}: most common: {b['most_common']}", markup=False)
    if m["user_simulator_faults"]:  # an LLM user played the customer: how often it broke its persona (`agents.user_audit`)
        t4 = Table(title="user-simulator faults (system errors, never the agent's 0; --repair reruns them), by user model")
        for col in ("user", "tries", "faults", "rate", *FAULT_KINDS, "unrepaired"):
            t4.add_column(col)
        for user, f in m["user_simulator_faults"].items():
            t4.add_row(
                escape(user), str(f["tries"]), str(f["faults"]), _fmt(f["rate"]), *(str(f["kinds"][k]) for k in FAULT_KINDS), str(f["unrepaired"])
            )
        out.print(t4)


def compare(
    base: Path = typer.Argument(..., help="Baseline results JSONL."),
    cand: Path = typer.Argument(..., help="Candidate results JSONL."),
    k: int | None = opts.count(None, "--k", help="k for pass@k / pass^k, at most the smaller n of the two runs (default: that n)."),
    prices: Path | None = typer.Option(None, "--prices", help="YAML price table extending the bundled one (as for metrics)."),
    allow_incomplete: bool = typer.Option(
        False, "--allow-incomplete", help="Compare despite missing, duplicated or system-error keys (said in the output)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Lift of each metric on the shared tasks (paired bootstrap CI, P(lift > 0)) and whether the pass@1 lift is
    within the range this design detects (see `groundstate power`), task transitions, cost change; for
    two runs of the same agent, run-to-run agreement with each disagreement's cause (agent sampling, user, judge)."""
    from groundstate.pipeline.analysis import compare_runs
    from groundstate.stats.cost import load_prices

    base_records, cand_records = read_run(base), read_run(cand)
    try:
        c = compare_runs(base_records, cand_records, k, load_prices(prices), allow_incomplete=allow_incomplete)
    except ValueError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from None
    for name, problems in c["incomplete"].items():  # --allow-incomplete: compared anyway, and said, also with --json
        console.print(f"[yellow]{name} run incomplete, compared anyway:[/yellow] {escape('; '.join(problems))}")
    for why in c["truncated"].values():  # runs of different n are compared at the common n, and said
        console.print(f"[yellow]note:[/yellow] {escape(why)}")
    print_set_apart(c["left_out"], "the comparison")
    if as_json:
        out.print_json(data=finite(c), allow_nan=False)
    else:
        _print_comparison(c, base, cand)


def _print_comparison(c: dict, base: Path, cand: Path) -> None:
    """The lifts' table, the detectable range, the task transitions, Observed k/k and cost, and the agreement."""
    from groundstate.stats.estimators import metric_label

    t = Table(title=f"{escape(str(cand))} vs {escape(str(base))} · {c['shared_tasks']} shared tasks × n={c['n']} · k={c['k']}")
    for col in ("metric", "base", "candidate", "lift", "95% CI", "P(lift > 0)"):
        t.add_column(col)
    for name, v in c["metrics"].items():
        t.add_row(
            metric_label(name, c["k"], c["n"]),
            _fmt(v["base"]),
            _fmt(v["candidate"]),
            f"{v['lift']:+.2%}",
            f"[{v['ci_95'][0]:+.2%}, {v['ci_95'][1]:+.2%}]",
            f"{v['p_lift_positive']:.3f}",
        )
    out.print(t)
    out.print(f"detectable range: {escape(c['power']['sentence'])}")
    tr = Table(title="task transitions (rows: base, columns: candidate)")
    tr.add_column("base \\ candidate")
    for col in ("never", "sometimes", "always"):
        tr.add_column(col)
    for a, row in c["transitions"].items():
        tr.add_row(a, *(str(row[z]) for z in ("never", "sometimes", "always")))
    out.print(tr)
    kk = c["observed_k_of_k"]
    cost = c["cost_usd"]
    spent = " → ".join("—" if cost.get(side) is None else f"{cost[side]:.4f}" for side in ("base", "candidate"))
    change = "" if cost.get("change") is None else f" ({cost['change']:+.4f})"
    out.print(
        f"Observed {kk['k']}/{kk['k']}: {kk['base']} → {kk['candidate']} (moved in {kk['moved_in']}, fell out {kk['fell_out']}); cost USD: {spent}{change}"
    )
    if c["cost_note"]:
        out.print(escape(c["cost_note"]))
    _print_agreement(c["agreement"])


def _print_agreement(a: dict) -> None:
    """The agreement line, and the tasks whose attempts disagree most (all of them are in --json)."""
    from groundstate.stats.agreement import CAUSE_NAMES, describe_agreement

    out.print(f"run-to-run agreement: {escape(describe_agreement(a))}")
    worst = sorted((t for t in a.get("per_task", []) if t["agree"] < t["attempts"]), key=lambda t: (t["agreement"], t["task_id"]))
    if not worst:
        return
    t = Table(title=f"tasks whose attempts disagree ({len(worst)}; the first 10)")
    for col in ("task", "attempts agree", "base c/n", "candidate c/n", "disagreements by cause"):
        t.add_column(col)
    for row in worst[:10]:
        causes = ", ".join(f"{CAUSE_NAMES[c]} {n}" for c, n in row["disagreements_by_cause"].items())
        t.add_row(escape(row["task_id"]), f"{row['agree']}/{row['attempts']}", row["base"], row["candidate"], causes)
    out.print(t)


def report(
    results: Path = typer.Argument(..., help="Results JSONL of a run."),
    baseline: Path | None = typer.Option(None, "--baseline", help="Baseline results for a before/after comparison."),
    output: Path | None = opts.file_out(
        ReportJob.out, "--out", help="Where to write the HTML file (default: RESULTS.report.html beside the results file)."
    ),
    prices: Path | None = typer.Option(None, "--prices", help="YAML price table extending the bundled one (as for metrics)."),
    allow_incomplete: bool = typer.Option(
        ReportJob.allow_incomplete, "--allow-incomplete", help="Report runs with missing, duplicated or system-error keys (said in the report)."
    ),
    training: Path | None = typer.Option(
        ReportJob.training, "--training", exists=True, file_okay=False, help="A training folder (groundstate train --out): its curve is drawn."
    ),
    ledger: Path | None = typer.Option(
        ReportJob.ledger,
        "--ledger",
        exists=True,
        dir_okay=False,
        help="A ledger.json (the quickstart writes one): the whole cost, and cost per dependable task with training and probing.",
    ),
) -> None:
    """One self-contained HTML report: metrics, success grid, plots, and failing attempts with their diffs."""
    from groundstate.pipeline.analysis import write_run_report
    from groundstate.stats.cost import load_prices

    def incomplete(name: str) -> None:
        console.print(f"[yellow]{name or 'the'} run incomplete, reported anyway[/yellow] (the report says what it lacks)")

    records = read_run(results)
    base_records = read_run(baseline) if baseline else None
    try:
        path = write_run_report(
            results, records, base_records, ReportJob(output, allow_incomplete, training, ledger), load_prices(prices), on_incomplete=incomplete
        )
    except ValueError as e:  # an incomplete run, records of several runs, or a baseline that cannot be compared
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from None
    console.print(f"report written to {path}", markup=False)


def export_command(
    results: Path = typer.Argument(..., help="Results JSONL of a run."),
    fmt: str = typer.Option(..., "--format", help="hf-dataset (a datasets folder, save_to_disk), parquet or sft-jsonl."),
    out_dir: Path = opts.folder_out(..., "--out", help="Output folder."),
    passed_only: bool | None = typer.Option(
        ExportJob.passed_only,
        "--passed-only/--all-attempts",
        help="Keep only attempts with reward 1, or every attempt with its reward (default: passed only for sft-jsonl, "
        "whose examples are imitated; every attempt for hf-dataset and parquet, which carry the reward).",
    ),
    domain: list[str] | None = typer.Option(
        None, "--domain", "-d", help="Domain name or folder to take tool schemas from, besides the bundled domains (repeatable)."
    ),
) -> None:
    """Turn a run's trajectories into chat training data (messages with tool calls, tools, reward); system errors are skipped."""
    from groundstate.pipeline.analysis import export_run
    from groundstate.pipeline.export import FORMATS

    if fmt not in FORMATS:
        fail(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    records = read_run(results)  # a missing or broken file is one line, before anything else is printed
    try:
        done = export_run(results, records, ExportJob(fmt, out_dir, passed_only, tuple(domain or ())))
    except (OSError, ValueError, KeyError) as e:
        fail(message_of(e))
    if done.chosen:  # the default said, since it differs by format
        console.print(
            f"{fmt}: {'passed attempts only (--all-attempts to keep the rest)' if done.passed_only else 'every attempt, with its reward (--passed-only to keep reward 1 only)'}"
        )
    _print_exported(done)
    console.print(f"{fmt} written to {done.path}\ncounts written to {Path(out_dir) / 'export.json'}", markup=False)


def _print_exported(done: Exported) -> None:
    """What was exported and skipped, and what the examples lack."""
    counts = done.counts
    skipped = [
        f"{n} {label}"
        for n, label in (
            (counts.system_errors, "system errors"),
            (counts.not_passed, "not passed"),
            (counts.duplicates, "superseded duplicates"),
            (counts.no_trajectory, "without a trajectory"),
        )
        if n
    ]
    kept = f"; {counts.not_passed_kept} of them not passed" if counts.not_passed_kept else ""
    out.print(f"{counts.exported} examples exported from {counts.records} records{kept}" + (f" (skipped: {', '.join(skipped)})" if skipped else ""))
    if counts.without_tools:
        console.print(
            f"[yellow]{counts.without_tools} examples have no tools column:[/yellow] their domain is not bundled; name its folder "
            "with --domain DIR (a folder named in a record is never loaded: that would run its code)"
        )
    if counts.unparsed_arguments:
        console.print(f"{counts.unparsed_arguments} tool calls keep their arguments as a raw string (not valid JSON objects)")
