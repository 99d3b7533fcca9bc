"""`groundstate probe` and `groundstate select`: typer command functions, registered on the app in cli.py.

Self-contained (own consoles and progress bar) so that cli.py can import them without an import cycle.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from groundstate import cli_options as opts
from groundstate.results import MAX_ATTEMPTS
from groundstate.tasks import TaskFileError

console = Console(stderr=True)
out = Console()


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[:60]


def _select(selector: str, tb_servers: Path | None = None, tb_no_sources: bool = False, run: bool = True):
    """Resolve a task selector for a command; `run` commands also need the servers of ThinkingBox tasks."""
    from groundstate.selectors import select_tasks

    try:
        pairs = select_tasks(selector, tb_servers=tb_servers, tb_no_sources=tb_no_sources)
        if run and selector_has_thinkingbox(selector):
            from groundstate.thinkingbox import require_servers

            require_servers(pairs)
    except (ValueError, TaskFileError, KeyError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    return pairs


def selector_has_thinkingbox(selector: str) -> bool:
    return any(p.strip().startswith("thinkingbox:") for p in selector.split(","))


def probe_command(
    agent: str = typer.Option(..., "--agent", help="Policy to probe with: scripted:gold|noop|noisy:P, openai:MODEL or openai:MODEL@URL, or hf:PATH."),
    tasks: str = typer.Option("pool", "--tasks", help="Candidate tasks: pool, a domain name or folder, a YAML list of ids, or a glob; comma-separated."),
    n: int = opts.count(8, "--n", hi=MAX_ATTEMPTS, help="Attempts per candidate task."),
    out_path: Optional[Path] = opts.file_out(None, "--out", help="Probe results JSONL (default: runs/probe_<agent>_<tasks>_n<N>/probes.jsonl). Re-running resumes it."),
    user: str = typer.Option("scripted", "--user", help="scripted, openai:MODEL or openai:MODEL@URL."),
    judge: Optional[str] = typer.Option(None, "--judge", help="openai:MODEL or openai:MODEL@URL for reply rubrics (without: rubric tasks are unjudged, not runs)."),
    repair: bool = typer.Option(False, "--repair", help="Retry only the attempts that ended in a system error."),
    rerun_changed: bool = typer.Option(False, "--rerun-changed", help="Resuming: probe again the tasks that changed since they were probed (without it, such a file is refused)."),
    concurrency: int = opts.Concurrency,
    seed: int = typer.Option(0, help="Seed for scripted noise and sampling."),
    temperature: Optional[float] = opts.temperature("Sampling temperature (probe at the temperature you will train at; 0: greedy)."),
    top_p: Optional[float] = opts.TopP,
    top_k: Optional[int] = opts.TopK,
    max_tokens: Optional[int] = opts.MaxTokens,
    max_turns: Optional[int] = opts.MaxTurns,
    backend: str = typer.Option("sqlite", "--backend", help="sqlite (embedded default) or postgres."),
    pg_dsn: Optional[str] = typer.Option(None, "--pg-dsn", help="PostgreSQL DSN (default: $GROUNDSTATE_PG_DSN or postgresql://postgres@127.0.0.1:5432/postgres)."),
    attempt_timeout: Optional[float] = opts.AttemptTimeout,
    grade_timeout: Optional[float] = opts.GradeTimeout,
    max_result_chars: Optional[int] = opts.MaxResultChars,
    max_attempt_tokens: Optional[int] = opts.MaxAttemptTokens,
    ray_address: Optional[str] = typer.Option(None, "--ray", help="Run attempts on Ray actors: local (a private instance), auto (the running cluster), HOST:PORT or ray://HOST:10001."),
    ray_cpus: Optional[int] = opts.RayCpus,
    tb_servers: Optional[Path] = typer.Option(None, "--tb-servers", help="ThinkingBox servers.yaml: how to start the MCP servers of thinkingbox: tasks."),
    tb_no_sources: bool = typer.Option(False, "--tb-no-sources", help="ThinkingBox tasks: drop the init configuration's knowledge-base `sources` (no Typesense needed)."),
) -> None:
    """Probe candidate tasks: N attempts each with the policy to be trained, for `groundstate select` (resumable like any run)."""
    from groundstate.results import RecordError, ResultsInUseError, ResultsWriteError, read_records
    from groundstate.attempt import DEFAULT_GRADE_TIMEOUT_S
    from groundstate.runner import ResumeRefused, RunConfig
    from groundstate.runner import outcome, progress_status, run_here_or_on_ray
    from groundstate.state import make_backend

    pairs = _select(tasks, tb_servers, tb_no_sources)
    sampling = {k: v for k, v in {"temperature": temperature, "top_p": top_p, "top_k": top_k, "max_tokens": max_tokens}.items() if v is not None}
    cfg = RunConfig(agent=agent, user=user, judge=judge, k=n, concurrency=concurrency, seed=seed, sampling=sampling, max_turns=max_turns,
                    attempt_timeout=attempt_timeout, max_result_chars=max_result_chars, max_attempt_tokens=max_attempt_tokens,
                    grade_timeout=DEFAULT_GRADE_TIMEOUT_S if grade_timeout is None else grade_timeout)
    path = out_path or Path("runs") / f"probe_{_slug(agent)}_{_slug(tasks)}_n{n}" / "probes.jsonl"
    if ray_address:
        try:
            import ray  # noqa: F401
        except ImportError:
            console.print("[red]error:[/red] --ray needs Ray: pip install 'groundstate[ray]'")
            raise typer.Exit(2) from None
    be = make_backend(backend, pg_dsn)
    if hasattr(be, "cleanup_stale"):
        be.cleanup_stale()
    try:
        with _progress() as progress:
            bar = progress.add_task(f"probe {agent}", total=len(pairs) * n, status="")
            tally = {"pass": 0, "fail": 0, "system_error": 0, "unjudged": 0}
            existing = read_records(path, missing_ok=True)
            wanted = {(t.id, a) for t, _ in pairs for a in range(n)}
            done = {(r["task_id"], r["attempt"]) for r in existing if r.get("system_error") is None} & wanted
            if repair:
                done = wanted - {(r["task_id"], r["attempt"]) for r in existing if r.get("system_error")}
            progress.update(bar, completed=len(done))

            def on_result(r):
                tally[outcome(r)] += 1
                progress.update(bar, advance=1, status=progress_status(tally))

            summary = run_here_or_on_ray(pairs, cfg, be, (backend, pg_dsn), path, ray_address=ray_address, ray_cpus=ray_cpus,
                                         repair=repair, on_result=on_result, rerun_changed=rerun_changed)
    except ResultsInUseError as e:  # another probe or run writes this file: one writer per results file
        console.print(f"[red]error:[/red] {escape(str(e))}\nnothing was run or written.")
        raise typer.Exit(3) from None
    except TaskFileError as e:  # a domain file the backend rejects (a schema PostgreSQL refuses): no attempt was run
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    except ResultsWriteError as e:  # disk full, read-only file or folder: stop, keeping every record already written
        console.print(f"[red]error:[/red] {e}\nthe probe stopped; every record written before the error is intact. "
                      "Free space or fix permissions, then re-run the same command to finish it.")
        raise typer.Exit(3) from None
    except (RecordError, ResumeRefused) as e:  # a results line that is not a record, or another run's file
        console.print(f"[red]error:[/red] {escape(str(e))}\nnothing was probed or written.")
        raise typer.Exit(2) from None
    finally:
        be.close()
    out.print(f"{summary.ran} attempts run ({summary.skipped} already done) on {len(pairs)} tasks × n={n} in {summary.seconds:.1f} s: "
              f"{summary.passed} passed, {summary.failed} failed, {summary.system_errors} system errors, {summary.unjudged} unjudged")
    for note in summary.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    console.print(f"probes written to {summary.path}\nmanifest written to {summary.manifest}")
    if summary.system_errors:
        console.print(f"[yellow]{summary.system_errors} system errors:[/yellow] re-run with --repair to retry them (they are not counted as runs)")
    console.print(f"next: groundstate select {summary.path} --out-dir {summary.path.parent / 'selection'} --exclude bench")


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{what} must be comma-separated numbers, got {text!r}") from None


def select_command(
    probes: Path = typer.Argument(..., help="Probe results JSONL (from `groundstate probe` or any run)."),
    out_dir: Path = opts.folder_out(..., "--out-dir", help="Where to write train.yaml, val.yaml, selection.jsonl and manifest.json."),
    exclude: Optional[list[str]] = typer.Option(None, "--exclude", help="Tasks never to train on, as a task selector (e.g. bench); repeatable. Checked by id and by content."),
    exclude_list: Optional[list[Path]] = typer.Option(None, "--exclude-list", help="YAML list of task ids never to train on; repeatable."),
    reference: Optional[Path] = typer.Option(None, "--reference", help="Results JSONL of a stronger reference policy: keep only tasks it solved at least once."),
    reference_min_runs: int = opts.count(1, "--reference-min-runs", help="Clean reference runs a task needs to pass the reference gate."),
    bands: str = typer.Option("hard,medium,easy", "--bands", help="Difficulty bands to keep (of too_hard, hard, medium, easy, too_easy)."),
    band_edges: str = typer.Option("0.08,0.40,0.60,0.90", "--band-edges", help="The four success-rate edges between the five bands."),
    min_clean_runs: int = opts.count(3, "--min-clean-runs", help="Clean runs (system errors and unjudged excluded) a task needs to be judged."),
    min_signal: float = opts.number(0.0, "--min-signal", lo=0.0, hi=0.25, help="Minimum learning signal: the posterior mean of p(1-p), at most 0.25."),
    near_dup_threshold: float = opts.number(0.7, "--near-dup-threshold", lo=0.01, hi=1.0, help="Instruction word-3-shingle Jaccard at or above which a task is a near-duplicate of an excluded one."),
    group_by: str = typer.Option("template", "--group-by", help="Keep groups on one side of the split: template, family, domain or none."),
    test_fraction: float = opts.number(0.2, "--test-fraction", lo=0.0, hi=1.0, help="Share of each band's tasks held out for validation."),
    seed: int = typer.Option(42, "--seed", help="Seed of the split (a seeded hash; bands do not depend on it)."),
    domain_path: Optional[list[str]] = typer.Option(None, "--domain-path", help="Extra domain folder, or thinkingbox:DIR[::LIST], whose task definitions to load for content checks (repeatable)."),
    require_content_check: bool = typer.Option(False, "--require-content-check", help="Exclude probe tasks whose definition cannot be loaded (so cannot be content-checked)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout."),
) -> None:
    """Select a training pool from probe runs: difficulty bands, learning signal, benchmark exclusion, grouped train/val split."""
    from groundstate.selection import SelectionParams, select_files

    if not probes.exists():
        console.print(f"[red]error:[/red] {probes}: no such results file")
        raise typer.Exit(2)
    try:
        params = SelectionParams(edges=_floats(band_edges, "--band-edges"), keep_bands=tuple(b.strip() for b in bands.split(",") if b.strip()),
                                 min_clean_runs=min_clean_runs, min_signal=min_signal, reference_min_runs=reference_min_runs,
                                 near_dup_threshold=near_dup_threshold, group_by=group_by, test_fraction=test_fraction, seed=seed,
                                 require_content_check=require_content_check)
    except ValueError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    try:
        result = select_files(probes, exclude=exclude or [], exclude_lists=exclude_list or [], reference=reference,
                              domain_paths=domain_path or [], params=params)
    except (ValueError, TaskFileError, KeyError, OSError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    paths = result.write(out_dir)
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
    d = summary["decisions"]
    table.add_row("[dim]insufficient runs[/dim]", "", str(d["insufficient_runs"]), "", "", "", str(d["insufficient_runs"]))
    show.print(table)
    show.print(" · ".join(f"{k} {v}" for k, v in d.items()))
    excluded = [r for r in result.rows if r["decision"] == "excluded"]
    for r in excluded[:10]:
        show.print(f"[yellow]excluded[/yellow] {r['task_id']}: {r['reason']}")
    if len(excluded) > 10:
        show.print(f"... and {len(excluded) - 10} more excluded (see selection.jsonl)")
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    if as_json:
        typer.echo(json.dumps({**summary, "outputs": {k: str(v) for k, v in paths.items()}}, indent=1, sort_keys=True))
    console.print("\n".join(f"{name} written to {p}" for name, p in paths.items()))
    console.print(f"train on it with: --tasks {paths['train.yaml']}")
