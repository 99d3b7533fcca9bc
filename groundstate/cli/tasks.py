"""`groundstate tasks ...`: list, lint and regenerate tasks."""

from __future__ import annotations

import json
from contextlib import ExitStack, nullcontext
from pathlib import Path

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from groundstate.audits.certify import CertifiedSuite, CertifyJob
from groundstate.audits.lint import LintJob, LintReport
from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, load_domains, message_of, open_backend, out, progress, renamed, select
from groundstate.pipeline.catalog import GenerateJob
from groundstate.tasks import Task, TaskFileError
from groundstate.types import Domain

app = typer.Typer(help="Inspect and check tasks.", no_args_is_help=True)


@app.command("lint", cls=renamed({"--workers": "--concurrency"}))
def tasks_lint(
    domain: list[str] | None = typer.Option(None, "--domain", "-d", help="Domain name or folder (repeatable; default: all bundled)."),
    tasks: str | None = typer.Option(None, "--tasks", help="Lint these tasks instead (any --tasks selector, e.g. thinkingbox:DIR::LIST)."),
    tb_servers: Path | None = opts.TbServers,
    tb_no_sources: bool = opts.TbNoSources,
    backend: str = opts.Backend,
    pg_dsn: str | None = opts.PgDsn,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    out_file: Path | None = opts.file_out(LintJob.out, "--out", help="Also write the full per-task report as JSON here."),
    concurrency: int = opts.count(
        LintJob.concurrency, "--concurrency", "-c", lo=0, help="Tasks checked at once (default, 0: 1 on sqlite, 8 on postgres)."
    ),
) -> None:
    """Gold must pass, no-op must fail, and mutants of the gold solution must be killed."""
    from groundstate.audits.lint import lint_suite

    pairs = select(tasks, tb_servers, tb_no_sources) if tasks else load_domains(domain)
    with open_backend(backend, pg_dsn) as be, progress() as bars:
        bar = bars.add_task(f"lint ({be.name})", total=len(pairs), status="")
        try:
            report = lint_suite(pairs, be, LintJob(concurrency, out_file), on_done=lambda r: bars.update(bar, advance=1, status=r.task_id))
        except TaskFileError as e:  # a domain file the backend rejects (a schema PostgreSQL refuses)
            fail(str(e))
    if as_json:
        out.print_json(data=report.summary())
    else:
        _print_lint(report)
    if out_file:
        console.print(f"report written to {out_file}", markup=False)
    if not report.ok:
        raise typer.Exit(1)


def _print_lint(report: LintReport) -> None:
    """The lint table, each problem and survivor in full below it, and the totals line."""
    summary = report.summary()
    table = Table(title=f"tasks lint · {report.backend}")
    table.add_column("task", no_wrap=True)  # whole: two tasks must never look the same
    for col in ("gold", "no-op", "mutants killed", "not counted", "problems"):
        table.add_column(col)
    for t in report.tasks:
        table.add_row(
            escape(t.task_id),
            "pass" if t.gold_pass else "[red]FAIL[/red]",
            "fail" if t.noop_fail else "[red]PASS[/red]",
            f"{t.killed}/{t.counted}",
            _uncounted(t.count("equivalent"), t.count("refused"), t.count("no-op")) or "0",
            f"[red]{len(t.problems)}[/red]" if t.problems else "",
        )
    out.print(table)
    for t in report.tasks:  # in full, below the table: the real error (a ZeroDivisionError) must not be cut off
        for problem in t.problems:
            out.print(f"[red]problem[/red] {escape(t.task_id)}: {escape(problem)}")
    for s in summary["survivors"]:
        out.print(f"[yellow]survivor[/yellow] {escape(s['task_id'])}: {escape(str(s['mutant']))} — {escape(str(s['reason']))}")
    n = summary["tasks"]
    out.print(
        f"{n} tasks on {report.backend}: gold pass {summary['gold_pass']}/{n}, no-op fail {summary['noop_fail']}/{n}, "
        f"mutants killed {summary['mutants_killed']}/{summary['mutants']} ({summary['mutant_kill_rate']:.1%})"
        + (
            f", not counted: {uncounted}"
            if (uncounted := _uncounted(summary["mutants_equivalent"], summary["mutants_refused"], summary["mutants_noop"]))
            else ""
        )
    )


def _uncounted(equivalent: int, refused: int, noop: int) -> str:
    """The mutants lint does not count, by kind ("2 refused, 1 no-op"); empty when there are none."""
    return ", ".join(f"{n} {what}" for n, what in ((equivalent, "equivalent"), (refused, "refused"), (noop, "no-op")) if n)


Reuse = typer.Option(
    None,
    "--reuse",
    dir_okay=False,
    help="An earlier --out file, a cache (not evidence): keep each certified certificate whose task, domain, checking code, backends and judge are unchanged as the file says them (counts that cannot be are refused; the rest is believed); certify the rest.",
)


@app.command("certify", cls=renamed({"--workers": "--concurrency"}))
def tasks_certify(
    domain: list[str] | None = typer.Option(None, "--domain", "-d", help="Domain name or folder (repeatable; default: all bundled)."),
    tasks: str | None = typer.Option(None, "--tasks", help="Certify these tasks instead (any --tasks selector, e.g. thinkingbox:DIR::LIST)."),
    tb_servers: Path | None = opts.TbServers,
    tb_no_sources: bool = opts.TbNoSources,
    backend: list[str] = typer.Option(
        ["sqlite", "postgres"], "--backend", help="Backends to certify on (repeatable); with two, every attempt must get the same reward on both."
    ),
    pg_dsn: str | None = opts.PgDsn,
    as_json: bool = typer.Option(False, "--json", help="Print the suite's summary as one JSON object instead of tables."),
    fmt: str = typer.Option("table", "--format", help="table, json (as --json), or openenv: the suite as OpenEnv's RFC 008 validation report."),
    out_file: Path | None = opts.file_out(CertifyJob.out, "--out", help="Also write every certificate as JSON here."),
    concurrency: int = opts.count(
        CertifyJob.concurrency, "--concurrency", "-c", lo=0, help="Tasks certified at once (default, 0: 1 on sqlite alone, 8 with postgres)."
    ),
    judge: str | None = typer.Option(
        None, "--judge", help="openai:MODEL\\[@URL]: judge the replies of rubric tasks (the gold reply must pass, a reply that states nothing fail)."
    ),
    reuse: Path | None = Reuse,
) -> None:
    """A certificate per task: gold, no-op, mutants, alternative solutions, reward hacks, SQLite = PostgreSQL, content hashes."""
    from groundstate.audits.certify import CertifyRefused, certify_suite, load_certificates
    from groundstate.grading.judge import make_judge

    if fmt not in ("table", "json", "openenv") or (as_json and fmt != "table"):
        fail(f"--format: unknown format {fmt!r}: use table, json or openenv (--json is --format json)")
    pairs = select(tasks, tb_servers, tb_no_sources) if tasks else load_domains(domain)
    try:
        the_judge = make_judge(judge)
    except ValueError as e:
        fail(f"--judge: {e}")
    try:
        previous = load_certificates(reuse) if reuse else None
    except TaskFileError as e:
        fail(f"--reuse: {e}")
    with ExitStack() as stack:
        backends = [stack.enter_context(open_backend(name, pg_dsn, label=f"--backend {name}")) for name in dict.fromkeys(backend)]
        names = " = ".join(b.name for b in backends)
        bars = stack.enter_context(progress())
        bar = bars.add_task(f"certify ({names})", total=len(pairs), status="")
        try:
            suite = certify_suite(
                pairs,
                backends,
                CertifyJob(concurrency, out_file),
                the_judge,
                previous,
                on_done=lambda c: bars.update(bar, advance=1, status=c.task_id),
            )
        except (CertifyRefused, TaskFileError) as e:  # an --out or a judge refused before any task; a domain file a backend rejects
            fail(str(e))
    _print_suite(suite, "json" if as_json and fmt == "table" else fmt, names, tasks, pairs, judge)
    _print_certify_notes(suite.totals, reuse)
    if out_file:
        console.print(f"certificates written to {out_file}", markup=False)
    if suite.totals["certified"] != suite.totals["tasks"]:
        raise typer.Exit(1)


def _print_suite(suite: CertifiedSuite, fmt: str, names: str, tasks: str | None, pairs: list, judge: str | None) -> None:
    """On stdout: the certificates' table, the totals as JSON, or OpenEnv's RFC 008 validation report."""
    if fmt == "openenv":
        from groundstate.audits.openenv_report import validation_report

        domains = list({d.name: d for _, d in pairs}.values())
        target = tasks if tasks else ",".join(d.name for d in domains)
        out.print_json(data=validation_report(target, suite.certificates, domains, judge))
    elif fmt == "json":
        out.print_json(data=suite.totals)
    else:
        _print_certificates(suite, names)


def _print_certify_notes(totals: dict, reuse: Path | None) -> None:
    """On stderr, also with --json: rubric replies left unjudged or failed, certificates reused."""
    if totals["replies_unjudged"]:
        console.print(f"{totals['replies_unjudged']} rubric task(s): replies unjudged, the final state certified only (give --judge to judge them)")
    failed_replies = totals["rubric_tasks"] - totals["replies_judged"] - totals["replies_unjudged"]
    if failed_replies:
        console.print(f"{failed_replies} rubric task(s): the reply checks failed (see `reply` in their certificates)")
    if reuse:
        console.print(f"{totals['reused']} of {totals['tasks']} certificates reused from {reuse}; the rest certified anew", markup=False)


def _print_certificates(suite: CertifiedSuite, names: str) -> None:
    """The certificates' table, each uncertified task with why, and the totals line."""
    certs, totals = suite.certificates, suite.totals
    # short headers, said in full in the caption, so that 80 columns hold them whole beside whole ids; whether a task
    # is certified is the lines below (each uncertified task, with why) and the totals line
    both = " = " in names  # two backends: a column says whether they gave the same verdicts
    table = Table(
        title=f"tasks certify · {names}",
        caption="mutants killed/counted · alternative solutions accepted/tried · reward hacks passed/tried (0 is right)"
        + (f" · =: {names} gave the same verdicts" if both else "")
        + " · a task not certified is named below, with why",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    # the one column that may give way: an id too long for the terminal folds onto a second line, never cut with "…"
    table.add_column("task", overflow="fold")
    for col in ("gold", "no-op", "mutants", "alts", "hacks", *(["="] if both else [])):
        table.add_column(col, no_wrap=True, min_width=max(len(col), 3))
    for c in certs:
        # a world outside the backends (ThinkingBox) has no parity to check: "—", not a red NO
        parity = ["—" if c.sqlite_equals_postgres is None else "yes" if c.sqlite_equals_postgres else "[red]NO[/red]"] if both else []
        table.add_row(
            escape(c.task_id),
            "pass" if c.gold_pass else "[red]FAIL[/red]",
            "fail" if c.noop_fail else "[red]PASS[/red]",
            f"{c.mutants_killed}/{c.mutants_counted}",
            f"{c.alternatives_accepted}/{c.alternatives_tried}",  # invalid ones: in the totals line and `tasks show`
            f"{c.hacks_passed}/{c.hacks_tried}",
            *parity,
        )
    out.print(table)
    for bad in totals["not_certified"]:
        out.print(f"[red]not certified[/red] {escape(bad['task_id'])}: {escape(json.dumps({k: v for k, v in bad.items() if v and k != 'task_id'}))}")
    out.print(
        f"{totals['certified']}/{totals['tasks']} tasks certified on {names}: alternatives accepted {totals['alternatives_accepted']}/"
        f"{totals['alternatives_tried']} ({totals['alternatives_invalid']} invalid), hacks passed {totals['hacks_passed']}/{totals['hacks_tried']}, "
        f"mutants killed {totals['mutants_killed']}/{totals['mutants']}"
    )


@app.command("generate")
def tasks_generate(
    domain: list[str] | None = typer.Option(
        None, "--domain", "-d", help="Domain name or folder (repeatable; default: every bundled domain with a generator)."
    ),
    check: bool = typer.Option(GenerateJob.check, "--check", help="Only verify that the checked-in files are reproduced exactly (exit 1 if not)."),
) -> None:
    """Regenerate task files from each domain's seeded generator (byte-identical for unchanged generators)."""
    from groundstate.pipeline.catalog import generate_task_files

    def written(name: str, path: Path, n: int) -> None:
        console.print(f"{name}: {n} tasks written to {path}", markup=False)

    try:
        done = generate_task_files(GenerateJob(tuple(domain or ()), check), on_written=written)
    except (TaskFileError, KeyError, ValueError) as e:
        fail(message_of(e))
    if check:
        if done.stale:
            console.print("[red]out of date:[/red] " + ", ".join(done.stale))
            raise typer.Exit(1)
        console.print(f"{len(done.domains)} task files reproduced exactly")


SPLITS = ("pool", "bench")


def _tasks_for(tasks: str | None, domain: list[str] | None, split: str | None) -> list:
    """The tasks a listing command names: a --tasks selector, else the named (default: every bundled) domains, of one split."""
    if tasks:
        return [(t, d) for t, d in select(tasks, run=False) if split is None or t.split == split]
    return load_domains(domain, split)


@app.command("list")
def tasks_list(
    split: str | None = opts.choice(None, "--split", choices=SPLITS, help="Only this split: pool or bench."),
    domain: list[str] | None = typer.Option(None, "--domain", "-d", help="Domain name or folder (repeatable; default: all bundled)."),
    tasks: str | None = typer.Option(None, "--tasks", help="List these tasks instead (any --tasks selector, e.g. thinkingbox:DIR::LIST)."),
    counts_only: bool = typer.Option(False, "--counts", help="Only the counts per domain, split and family, not every task."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array of tasks."),
) -> None:
    """Every task's id with its domain, split, family and gold calls (--json adds template and tags); then counts per domain, split and family.
    `groundstate tasks show ID` prints one task in full."""
    from groundstate.pipeline.catalog import count_tasks

    pairs = _tasks_for(tasks, domain, split)
    if as_json:
        keys = ("id", "domain", "split", "family", "template")
        out.print_json(data=[{**{k: getattr(t, k) for k in keys}, "gold_calls": len(t.gold), "tags": t.tags} for t, _ in pairs])
        return
    if not pairs:
        fail("no tasks match" + (f" --split {split}" if split else "") + (f" in --tasks {tasks}" if tasks else ""), 1)
    if not counts_only:
        table = Table(title=f"{len(pairs)} tasks (groundstate tasks show ID: one in full)")
        table.add_column("id", no_wrap=True)  # an id is never wrapped or cut: it is what a person copies
        for col in ("domain", "split", "family", "gold calls"):
            table.add_column(col, overflow="fold")
        for t, _ in pairs:
            table.add_row(escape(t.id), escape(t.domain), t.split or "", escape(t.family), str(len(t.gold)))
        out.print(table)
    table = Table(title=f"{len(pairs)} tasks by domain, split and family")
    for col in ("domain", "split", "family", "tasks"):
        table.add_column(col)
    for (d, s, f), n in count_tasks(pairs).items():
        table.add_row(escape(d), s, escape(f), str(n))
    out.print(table)


@app.command("show")
def tasks_show(
    task_id: str = typer.Argument(..., help="The task's id (as `groundstate tasks list` prints it)."),
    domain: list[str] | None = typer.Option(None, "--domain", "-d", help="Domain name or folder to look in (repeatable; default: all bundled)."),
    tasks: str | None = typer.Option(None, "--tasks", help="Look in these tasks instead (any --tasks selector, e.g. thinkingbox:DIR::LIST)."),
    certify_it: bool = typer.Option(False, "--certify", help="Also certify the task (gold, no-op, mutants, alternatives, hacks) on --backend."),
    backend: str = opts.Backend,
    pg_dsn: str | None = opts.PgDsn,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (the task as its file holds it, and its certificate)."),
) -> None:
    """One task in full: instruction, user, data patch, gold solution, checks, rubrics, limits, and with --certify its certificate."""
    from groundstate.pipeline.catalog import NoSuchTask, show_task

    pairs = _tasks_for(tasks, domain, None)
    try:
        with open_backend(backend, pg_dsn) if certify_it else nullcontext() as be:
            task, dom, data = show_task(pairs, task_id, certify_on=be)
    except NoSuchTask as e:
        hint = f"; did you mean {', '.join(e.near)}?" if e.near else "; `groundstate tasks list` prints every id"
        fail(f"no task {task_id!r} in {'--tasks ' + tasks if tasks else ', '.join(domain) if domain else 'the bundled domains'}{hint}", 1)
    except TaskFileError as e:
        fail(str(e))
    if as_json:
        out.print_json(data=data)
        return
    _print_task(task, dom, data)
    if certify_it:
        c = data["certificate"]
        verdict = "[green]certified[/green]" if c["certified"] else "[red]not certified[/red]"
        out.print(f"\n[bold]certificate[/bold] ({escape(backend)}): {verdict}")
        out.print(escape(json.dumps(c, indent=1, ensure_ascii=False, default=str)), soft_wrap=True)


def _print_task(task: Task, dom: Domain, data: dict) -> None:
    """The task's header lines and its sections, each in full."""
    t = data["task"]
    out.print(f"[bold]{escape(task.id)}[/bold] · domain {escape(task.domain)} ({escape(str(dom.path))}) · split {task.split or '—'}", soft_wrap=True)
    out.print(
        f"family {escape(task.family)} · template {escape(task.template or '—')} · tags {escape(', '.join(task.tags) or '—')} · fingerprint {data['fingerprint']}"
    )
    sections = [
        ("instruction", task.instruction),
        ("user", json.dumps(t["user"], indent=1, ensure_ascii=False)),
        ("data patch", json.dumps(t["patch"], indent=1, ensure_ascii=False, default=str) if task.patch else "none"),
        (
            "gold solution",
            "\n".join(f"{i}. {c.tool}({json.dumps(c.args, ensure_ascii=False, default=str)})" for i, c in enumerate(task.gold, 1)) or "none",
        ),
        ("checks", json.dumps(t["checks"], indent=1, ensure_ascii=False) if task.checks else "none"),
        ("rubrics", "\n".join(f"- {r}" for r in task.rubrics) or "none"),
        ("gold reply", task.gold_reply or "none"),
        ("limits", json.dumps(t["limits"])),
    ]
    for title, body in sections:
        out.print(f"\n[bold]{title}[/bold]")
        out.print(escape(body), soft_wrap=True)
