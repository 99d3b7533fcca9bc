"""`groundstate regrade`: re-score a run's stored attempts against today's task definitions and grader."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from groundstate.audits.regrade import Regrade, RegradeJob
from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, open_backend, out, progress, read_run, select


def regrade_command(
    results: Path = typer.Argument(..., help="Results JSONL of a run."),
    out_file: Path = opts.file_out(..., "--out", help="Where the regraded records go (a new file; never the input)."),
    tasks: str = typer.Option("all", "--tasks", help="Where today's task definitions come from (any --tasks selector; default: every bundled task)."),
    judge: str | None = typer.Option(
        None, "--judge", help="openai:MODEL\\[@URL]: judge reply rubrics again (without: a passing state keeps its recorded judgement)."
    ),
    backend: str = opts.Backend,
    pg_dsn: str | None = opts.PgDsn,
    concurrency: int = opts.count(RegradeJob.concurrency, "--concurrency", "-c", help=opts.Concurrency.help),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: records, replayed, kept, flips."),
) -> None:
    """Replay each attempt's recorded turns (no model calls) on a fresh sandbox of its task as defined now, grade it, and
    print the verdicts that flipped, per task."""
    from groundstate.audits.regrade import RegradeRefused, regrade_file
    from groundstate.specs import parse_judge

    if out_file.resolve() == results.resolve():
        fail("--out must be a new file: regrade never rewrites the run it reads")
    if out_file.exists():
        fail(f"--out {out_file} exists: choose a new file")
    records = read_run(results)
    pairs = {t.id: (t, d) for t, d in select(tasks, run=False)}
    try:
        spec = None if judge is None else parse_judge(judge)
    except ValueError as e:
        fail(f"--judge: {e}")
    with open_backend(backend, pg_dsn) as be, progress() as bars:
        bar = bars.add_task("regrade", total=len(records), status="")
        try:
            result = regrade_file(records, pairs, be, RegradeJob(out_file, concurrency), spec, on_record=lambda: bars.update(bar, advance=1))
        except RegradeRefused as e:
            fail(str(e))
    if as_json:
        out.print_json(data=result.to_json())
    else:
        _print_flips(result)
    console.print(f"regraded records written to {escape(str(out_file))}")


def _print_flips(result: Regrade) -> None:
    """The verdicts that flipped, per task, and the records kept as recorded, with why."""
    table = Table(title=f"verdict flips · {result.replayed} of {len(result.records)} attempts replayed")
    table.add_column("task")
    table.add_column("flips")
    for task_id in sorted(result.flips):
        table.add_row(escape(task_id), escape(", ".join(f"{k} ×{n}" for k, n in sorted(result.flips[task_id].items()))))
    out.print(table if result.flips else "no verdict flipped")
    for why, n in sorted(result.kept.items()):
        out.print(f"kept as recorded (not replayed): {n} · {escape(why)}")
