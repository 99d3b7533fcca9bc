"""`groundstate select`: a training pool from probe runs (bands, learning signal, benchmark exclusion, split)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, message_of, out, read_run
from groundstate.jsontext import dumps
from groundstate.pipeline.selection import SelectJob
from groundstate.pipeline.selection_result import SelectionResult
from groundstate.pipeline.selection_rules import SelectionParams
from groundstate.tasks import TaskFileError


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{what} must be comma-separated numbers, got {text!r}") from None


# the options whose declarations are long, in the command's order; each default is `SelectionParams`'
ReferenceMinRuns = opts.count(
    SelectionParams.reference_min_runs, "--reference-min-runs", help="Clean reference runs a task needs to pass the reference gate."
)
Bands = typer.Option(",".join(SelectionParams.keep_bands), "--bands", help="Difficulty bands to keep (of too_hard, hard, medium, easy, too_easy).")
BandEdges = typer.Option(
    ",".join(f"{e:.2f}" for e in SelectionParams.edges), "--band-edges", help="The four success-rate edges between the five bands."
)
MinCleanRuns = opts.count(
    SelectionParams.min_clean_runs, "--min-clean-runs", help="Clean runs (system errors and unjudged excluded) a task needs to be judged."
)
MinSignal = opts.number(
    SelectionParams.min_signal, "--min-signal", lo=0.0, hi=0.25, help="Minimum learning signal: the posterior mean of p(1-p), at most 0.25."
)
NearDupThreshold = opts.number(
    SelectionParams.near_dup_threshold,
    "--near-dup-threshold",
    lo=0.01,
    hi=1.0,
    help="Instruction word-3-shingle Jaccard at or above which a task is a near-duplicate of an excluded one.",
)
GroupBy = typer.Option(SelectionParams.group_by, "--group-by", help="Keep groups on one side of the split: template, family, domain or none.")
TestFraction = opts.number(
    SelectionParams.test_fraction, "--test-fraction", lo=0.0, hi=1.0, help="Share of each band's tasks held out for validation."
)
DomainPath = typer.Option(
    None,
    "--domain",
    "-d",
    help="A domain name or folder, thinkingbox:DIR\\[::LIST] or tau2:DOMAIN, besides the bundled domains, whose task definitions "
    "to load for content checks (repeatable).",
)
RequireContentCheck = typer.Option(
    SelectionParams.require_content_check,
    "--require-content-check",
    help="Exclude probe tasks whose definition cannot be loaded (so cannot be content-checked).",
)


def select_command(
    probes: Path = typer.Argument(..., help="Probe results JSONL (from `groundstate probe` or any run)."),
    out_dir: Path = opts.folder_out(..., "--out", help="Where to write train.yaml, val.yaml, selection.jsonl and manifest.json."),
    exclude: list[str] | None = typer.Option(
        None, "--exclude", help="Tasks never to train on, as a task selector (e.g. bench); repeatable. Checked by id and by content."
    ),
    exclude_list: list[Path] | None = typer.Option(None, "--exclude-list", help="YAML list of task ids never to train on; repeatable."),
    reference: Path | None = typer.Option(
        SelectJob.reference, "--reference", help="Results JSONL of a stronger reference policy: keep only tasks it solved at least once."
    ),
    reference_min_runs: int = ReferenceMinRuns,
    bands: str = Bands,
    band_edges: str = BandEdges,
    min_clean_runs: int = MinCleanRuns,
    min_signal: float = MinSignal,
    near_dup_threshold: float = NearDupThreshold,
    group_by: str = GroupBy,
    test_fraction: float = TestFraction,
    seed: int = typer.Option(SelectionParams.seed, "--seed", help="Seed of the split (a seeded hash; bands do not depend on it)."),
    domain_path: list[str] | None = DomainPath,
    require_content_check: bool = RequireContentCheck,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout."),
    allow_incomplete: bool = typer.Option(
        SelectJob.allow_incomplete,
        "--allow-incomplete",
        help="Select from probes with missing, duplicated or system-error keys (said in the output).",
    ),
) -> None:
    """Select a training pool from probe runs: difficulty bands, learning signal, benchmark exclusion, grouped train/val split."""
    from groundstate.pipeline.selection import select_pool
    from groundstate.stats.basis import IncompleteRun

    def incomplete(problems: list[str]) -> None:
        console.print(f"[yellow]probes incomplete, selected from anyway:[/yellow] {escape('; '.join(problems))}")

    records = read_run(probes)
    try:
        keep = tuple(b.strip() for b in bands.split(",") if b.strip())
        params = SelectionParams(
            edges=_floats(band_edges, "--band-edges"), keep_bands=keep, min_clean_runs=min_clean_runs, min_signal=min_signal,
            reference_min_runs=reference_min_runs, near_dup_threshold=near_dup_threshold, group_by=group_by,
            test_fraction=test_fraction, seed=seed, require_content_check=require_content_check,
        )  # fmt: skip
    except ValueError as e:
        fail(str(e))
    job = SelectJob(out_dir, params, tuple(exclude or ()), tuple(exclude_list or ()), reference, tuple(domain_path or ()), allow_incomplete)
    try:
        result, paths = select_pool(probes, records, job, on_incomplete=incomplete)
    except IncompleteRun as e:
        fail(str(e), 1)
    except (ValueError, TaskFileError, KeyError, OSError) as e:
        fail(message_of(e))
    _print_selection(result, paths, probes, as_json)


def _print_selection(result: SelectionResult, paths: dict[str, Path], probes: Path, as_json: bool) -> None:
    """The difficulty table and the decisions (on stderr with --json, whose summary is stdout), the tasks excluded,
    the notes, where the files went and what to run next."""
    summary = result.summary()
    show = console if as_json else out
    table = Table(title=f"difficulty of {summary['tasks']} probed tasks · {probes.name}")
    for col in ("band", "success rate", "tasks", "", "train", "val", "set aside"):
        table.add_column(col, justify="right" if col not in ("band", "") else "left")
    widest = max([h["tasks"] for h in summary["histogram"]] + [1])
    for h in summary["histogram"]:
        lo, hi = h["interval"]
        bar = "█" * round(24 * h["tasks"] / widest)
        name = h["band"] if h["kept_band"] else f"[dim]{h['band']}[/dim]"
        table.add_row(name, f"{lo:.2f}–{hi:.2f}", str(h["tasks"]), bar, str(h["train"]), str(h["val"]), str(h["set_aside"]))
    d, unbanded = summary["decisions"], summary["not_banded"]  # the table's rows add up to the probed tasks
    table.add_row("[dim]insufficient runs[/dim]", "", str(unbanded["insufficient_runs"]), "", "", "", str(unbanded["insufficient_runs"]))
    if unbanded["awaits_judge"]:
        table.add_row("[dim]awaits a judge[/dim]", "", str(unbanded["awaits_judge"]), "", "", "", str(unbanded["awaits_judge"]))
    show.print(table)
    show.print(" · ".join(f"{k} {v}" for k, v in d.items()))
    excluded = [r for r in result.rows if r["decision"] == "excluded"]
    for r in excluded[:10]:
        show.print(f"[yellow]excluded[/yellow] {escape(r['task_id'])}: {escape(r['reason'])}")
    if len(excluded) > 10:
        show.print(f"... and {len(excluded) - 10} more excluded (see selection.jsonl)")
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if as_json:
        typer.echo(dumps({**summary, "outputs": {k: str(v) for k, v in paths.items()}}, indent=1, sort_keys=True))
    console.print("\n".join(f"{name} written to {p}" for name, p in paths.items()), markup=False)
    if summary["train"]:
        val = f" --val {paths['val.yaml']}" if summary["val"] else ""
        console.print(f"next: groundstate train --model MODEL --train {paths['train.yaml']}{val}", markup=False)
    else:
        console.print("[yellow]nothing to train on:[/yellow] no task was selected for training (see the bands and decisions above)")
