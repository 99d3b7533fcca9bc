"""`groundstate conformance`: every adapter gives every trajectory `groundstate run`'s verdict and change set."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, open_backend, out, progress, select


def conformance_command(
    tasks: str = typer.Option(
        "all", "--tasks", help="Tasks to check (any --tasks selector of SQL domains or of τ²: tau2:...; default: every bundled task)."
    ),
    adapters: str | None = typer.Option(None, "--adapters", help="Comma-separated: trl, gymnasium, openenv, or none (default: every one installed)."),
    fork: bool = typer.Option(False, "--fork", help="Also play each trajectory's second half on a fork taken at its middle call."),
    backend: str = opts.Backend,
    pg_dsn: str | None = opts.PgDsn,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: adapters, tasks, trajectories, checked, refused, mismatches, forked."),
    out_file: Path | None = opts.file_out(None, "--out", help="Also write the JSON report here."),
) -> None:
    """Play gold, no-op and every lint mutant of each task through each adapter (and forked) and through `groundstate run`; list mismatches."""
    from groundstate.integrations.conformance import ADAPTERS, conformance

    wanted = [a.strip() for a in adapters.split(",") if a.strip() not in ("", "none")] if adapters else list(ADAPTERS)
    pairs = select(tasks, run=False)
    with open_backend(backend, pg_dsn) as be, progress() as bars:
        bar = bars.add_task(f"conformance ({be.name})", total=len(pairs), status="")
        try:
            report = conformance(pairs, be, wanted, on_task=lambda t: bars.update(bar, advance=1, status=t.id), fork=fork)
        except ValueError as e:
            fail(str(e))
    data = report.to_json()
    if out_file:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps(data, indent=1, default=str))
    if as_json:
        out.print_json(data=data)
    else:
        for adapter, reason in report.skipped.items():
            out.print(f"[yellow]skipped[/yellow] {escape(adapter)}: {escape(reason)}")
        for adapter, why in report.refused.items():
            out.print(f"{adapter} refuses {why['tasks']} task(s) with reply rubrics: {why['reason']}", markup=False)
        for m in report.mismatches[:50]:
            out.print(f"[red]mismatch[/red] {escape(f'{m.adapter} · {m.task_id} · {m.trajectory}: {m.field}')} differs")
        per = ", ".join([*(f"{a} {n}" for a, n in report.checked.items()), *([f"forked {report.forked}"] if fork else [])])
        out.print(f"{report.tasks} tasks, {report.trajectories} trajectories; checked: {per}; mismatches: {len(report.mismatches)}", markup=False)
    if out_file:
        console.print(f"report written to {out_file}", markup=False)
    if not report.ok:
        raise typer.Exit(1)
