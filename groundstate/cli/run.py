"""`groundstate run` and `groundstate probe`: one command under two names (a probe is a run of the policy to be
trained over candidate tasks, written where `groundstate select` looks for it)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, out, progress, select, slug
from groundstate.records import MAX_ATTEMPTS

RUN_HELP = "Run tasks × k attempts, appending one JSON record per attempt; re-run the same command to resume."
PROBE_HELP = "Probe candidate tasks: N attempts each with the policy to be trained, for `groundstate select` (resumable like any run)."


def attempts_command(
    ctx: typer.Context,
    agent: str = typer.Option(..., "--agent", help="scripted:gold, scripted:noop, scripted:noisy:P, openai:MODEL\\[@URL] or hf:PATH."),
    tasks: Optional[str] = typer.Option(
        None,
        "--tasks",
        help="pool, bench, all, a domain name or folder, a YAML list of ids, or a glob; comma-separated (default: bench for run, pool for probe).",
    ),
    k: Optional[int] = opts.count(None, "--k", hi=MAX_ATTEMPTS, help="Attempts per task (default: 1 for run, 8 for probe)."),
    user: str = typer.Option("scripted", "--user", help="scripted or openai:MODEL\\[@URL]."),
    user_temperature: Optional[float] = opts.number(
        None, "--user-temperature", lo=0.0, help="Sampling temperature of an openai: user (default 0); part of the run's identity."
    ),
    user_cache: Optional[Path] = opts.folder_out(
        None,
        "--user-cache",
        help="Folder of an LLM user's reply cache (created if missing; its file: user-replies.sqlite): every reply is stored under "
        "(task, user model and sampling, attempt, conversation so far) and replayed on later runs, so a rerun, another agent "
        "or checkpoint meets the same customer. Not part of the run's identity; recorded in the manifest.",
    ),
    no_user_audit: bool = typer.Option(
        False,
        "--no-user-audit",
        help="Do not check the openai: user's replies. By default each is checked against the task's user facts: an "
        "invented or contradicted fact, or ending the conversation when asked for one, is a user-simulator fault, a "
        "system error (--repair reruns it), never the agent's 0. Part of the run's identity.",
    ),
    _user_audit: bool = typer.Option(False, "--user-audit", hidden=True, help="The default (kept for scripts that say it)."),
    judge: Optional[str] = typer.Option(None, "--judge", help="openai:MODEL\\[@URL] for reply rubrics (without: rubric tasks are unjudged)."),
    out_path: Optional[Path] = opts.file_out(
        None,
        "--out",
        help="Results JSONL (default: results.jsonl, for a probe probes.jsonl, in a folder under runs/ named after the "
        "agent, the tasks and k). Re-running resumes it.",
    ),
    repair: bool = typer.Option(False, "--repair", help="Retry only the attempts that ended in a system error."),
    rerun_changed: bool = typer.Option(
        False,
        "--rerun-changed",
        help="Resuming: run again the attempts of tasks that changed since they were recorded (without it, such a file is refused).",
    ),
    concurrency: int = opts.Concurrency,
    seed: int = typer.Option(0, help="Seed for scripted noise and sampling."),
    temperature: Optional[float] = opts.temperature("Sampling temperature (probe at the temperature you will train at; 0: greedy)."),
    top_p: Optional[float] = opts.TopP,
    top_k: Optional[int] = opts.TopK,
    max_tokens: Optional[int] = opts.MaxTokens,
    max_turns: Optional[int] = opts.MaxTurns,
    attempt_timeout: Optional[float] = opts.AttemptTimeout,
    grade_timeout: Optional[float] = opts.GradeTimeout,
    max_result_chars: Optional[int] = opts.MaxResultChars,
    max_attempt_tokens: Optional[int] = opts.MaxAttemptTokens,
    backend: str = opts.Backend,
    pg_dsn: Optional[str] = opts.PgDsn,
    ray_address: Optional[str] = typer.Option(
        None, "--ray", help="Run attempts on Ray actors: local (a private instance), auto (the running cluster), HOST:PORT or ray://HOST:10001."
    ),
    ray_cpus: Optional[int] = opts.RayCpus,
    tb_servers: Optional[Path] = opts.TbServers,
    tb_no_sources: bool = opts.TbNoSources,
    tool_call_format: str = opts.ToolCallFormat,
    max_endpoint_failures: int = opts.count(
        5,
        "--max-endpoint-failures",
        lo=0,
        help="Stop the run after this many attempts in a row fail on their model endpoint (0: never); the run stays resumable.",
    ),
) -> None:
    from groundstate.agents.openai_compat import probe_endpoint
    from groundstate.agents.user_cache import CACHE_FILE, UserCacheError
    from groundstate.pipeline.runner import EndpointsDown, LocalExecutor, ResumeRefused, RunConfig, check_config, endpoint_specs, progress_status, run
    from groundstate.records import RecordError, ResultsInUseError, ResultsWriteError
    from groundstate.specs import parse_user
    from groundstate.state import make_backend
    from groundstate.tasks import TaskFileError

    probe = ctx.info_name == "probe"
    noun = "probe" if probe else "run"
    chosen = [] if tasks else [f"--tasks {'pool' if probe else 'bench'}"]
    chosen += [] if k else [f"--k {8 if probe else 1}"]
    tasks = tasks or ("pool" if probe else "bench")
    k = k or (8 if probe else 1)
    untouched = f"nothing was {'probed' if probe else 'run'} or written"
    try:
        llm_user = parse_user(user).is_llm
    except ValueError as e:
        fail(f"{e}; {untouched}.")
    if (user_temperature is not None or user_cache is not None) and not llm_user:
        given = "--user-temperature" if user_temperature is not None else "--user-cache"
        fail(f"{given} is for an LLM user (--user openai:MODEL[@URL]); --user {user} replays the task's script")
    pairs = select(tasks, tb_servers, tb_no_sources)
    try:  # a spec that could only fail every attempt stops here: one line, nothing written
        cfg = RunConfig(
            agent=agent,
            user=user,
            judge=judge,
            k=k,
            concurrency=concurrency,
            seed=seed,
            sampling=opts.sampling(temperature, top_p, top_k, max_tokens),
            limits=opts.limits(max_turns, attempt_timeout, grade_timeout, max_result_chars, max_attempt_tokens),
            tool_call_format=tool_call_format,
            user_sampling={} if user_temperature is None else {"temperature": user_temperature},
            user_audit=not no_user_audit,
            user_cache=user_cache,
            max_endpoint_failures=max_endpoint_failures,
        )
        check_config(cfg)
    except ValueError as e:
        fail(f"{e}; {untouched}.")
    try:  # a misspelled backend or an unreachable server: one line before anything else is printed
        be = make_backend(backend, pg_dsn)
    except ValueError as e:
        fail(f"--backend: {e}; {untouched}.")
    for role, spec in endpoint_specs(cfg).items():  # one request each, before the first attempt
        found = probe_endpoint(spec.endpoint)
        if found.problem:
            be.close()
            fail(f"--{role} {spec}: {found.problem}; {untouched}.")
        if found.warning:
            console.print(f"[yellow]warning:[/yellow] --{role} {escape(str(spec))}: {escape(found.warning)}")
    if chosen:  # a default a new user may not expect (the whole benchmark): said before it starts
        console.print(f"defaults: {' '.join(chosen)} ({len(pairs)} tasks × {k} = {len(pairs) * k} attempts); give them to choose")
    if out_path is not None:
        path = out_path
    elif probe:
        path = Path("runs") / f"probe_{slug(agent)}_{slug(tasks)}_n{k}" / "probes.jsonl"
    else:
        path = Path("runs") / f"{slug(agent)}_{slug(tasks)}_k{k}" / "results.jsonl"
    if ray_address:
        try:
            import ray  # noqa: F401
        except ImportError:
            be.close()
            fail(f"--ray needs Ray: pip install 'groundstate[ray]'; {untouched}.")
    be.cleanup_stale()
    if ray_address:
        from groundstate.pipeline.ray_executor import RayExecutor

        executor = RayExecutor(be, address=None if ray_address == "local" else ray_address, num_cpus=ray_cpus)
    else:
        executor = LocalExecutor(be)
    with progress() as bar_progress:
        bar = bar_progress.add_task(f"{noun} {agent}", total=len(pairs) * k, status="")
        tally = {"pass": 0, "fail": 0, "system_error": 0, "unjudged": 0}
        user_faults = 0
        first_error = ""  # the first system error's text, said if every attempt had one

        def on_result(r) -> None:
            nonlocal user_faults, first_error
            first_error = first_error or r.system_error or ""
            tally[r.outcome] += 1
            user_faults += r.error_kind == "user_fault"
            bar_progress.update(bar, advance=1, status=progress_status(tally))

        try:
            summary = run(
                pairs,
                cfg,
                be,
                path,
                repair,
                on_result,
                rerun_changed,
                executor=executor,
                on_plan=lambda planned, done: bar_progress.update(bar, total=planned, completed=done),
            )
        except ResultsInUseError as e:  # another run writes this file: one writer per results file
            bar_progress.stop()
            fail(f"{e}; {untouched}.", 3)
        except TaskFileError as e:  # a domain file the backend rejects (a schema PostgreSQL refuses): no attempt was run
            bar_progress.stop()
            fail(str(e))
        except ResultsWriteError as e:  # disk full, read-only file or folder: stop, keeping every record already written
            bar_progress.stop()
            fail(
                f"{e}\nthe {noun} stopped; every record written before the error is intact. "
                "Free space or fix permissions, then re-run the same command to finish it.",
                3,
            )
        except EndpointsDown as e:  # the endpoint went away mid-run: stop instead of failing every attempt left
            bar_progress.stop()
            fail(
                f"{e}\nthe {noun} stopped; every record written is intact ({path}). Fix the endpoint, then re-run the same "
                "command: it resumes, and retries the attempts the endpoint failed.",
                1,
            )
        except (RecordError, ResumeRefused, UserCacheError) as e:  # a results line that is not a record, another run's file, an unusable user cache
            bar_progress.stop()
            fail(f"{e}; {untouched}.")
        finally:
            be.close()
    where = f" on {len(pairs)} tasks × n={k}" if probe else ""
    out.print(
        f"{summary.ran} attempts run ({summary.skipped} already done){where} in {summary.seconds:.1f} s: "
        f"{summary.passed} passed, {summary.failed} failed, {summary.system_errors} system errors, {summary.unjudged} unjudged"
    )
    for note in summary.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if summary.unread_tool_calls:  # the quiet 0% of a server that hands tool calls back as text
        console.print(
            f"[bold red]warning: {summary.unread_tool_calls} of {summary.ran} attempts wrote replies that look like tool calls "
            "but executed none.[/bold red] The server returned them as text, not tool_calls"
            + (
                "; --tool-call-format native reads only tool_calls: try --tool-call-format auto."
                if tool_call_format == "native"
                else f", and --tool-call-format {tool_call_format} did not read them: try another format, or the server's "
                "tool-call parser options (vLLM --enable-auto-tool-choice --tool-call-parser, llama.cpp --jinja)."
            )
        )
    console.print(f"{'probes' if probe else 'results'} written to {summary.path}\nmanifest written to {summary.manifest}", markup=False)
    if user_cache is not None:
        cached, generated = summary.user_replies.get("cached", 0), summary.user_replies.get("generated", 0)
        evicted = summary.user_replies.get("evicted", 0)
        console.print(
            f"user cache {escape(str(user_cache / CACHE_FILE))}: {cached} user replies served from the cache, {generated} generated and stored"
            + (f"; [yellow]{evicted} bad rows evicted[/yellow] (warnings above)" if evicted else "")
        )
    faults = f"; {user_faults} of them user-simulator faults (see groundstate metrics)" if user_faults else ""
    if summary.ran and summary.system_errors == summary.ran:  # nothing was measured: never a quiet exit 0
        said = (first_error.strip().splitlines() or ["see the records"])[0][:300]
        fail(
            f"every one of the {summary.ran} attempts run was a system error, so nothing was measured{faults}; the first: "
            f"{said} (all in {summary.path}). Fix its cause, then re-run the same command with --repair.",
            1,
        )
    if summary.system_errors:
        console.print(
            f"[yellow]{summary.system_errors} system errors:[/yellow] re-run with --repair to retry them"
            + (" (they are not counted as runs)" if probe else "")
            + faults
        )
    if probe:
        console.print(f"next: groundstate select {summary.path} --out {summary.path.parent / 'selection'} --exclude bench", markup=False)
