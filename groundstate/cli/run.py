"""`groundstate run` and `groundstate probe`: one command under two names (a probe is a run of the policy to be
trained over candidate tasks, written where `groundstate select` looks for it). The job is the library's
(`pipeline.evaluate`); the command parses its options into an `EvaluateConfig`, calls `evaluate` and prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, open_backend, out, progress, select
from groundstate.pipeline.evaluate import EvaluateConfig
from groundstate.pipeline.runner import RunSummary
from groundstate.records import MAX_ATTEMPTS, AttemptRecord
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import Domain

RUN_HELP = "Run tasks × k attempts, appending one JSON record per attempt; re-run the same command to resume."
PROBE_HELP = "Probe candidate tasks: N attempts each with the policy to be trained, for `groundstate select` (resumable like any run)."

# the options, each one line of the command's signature; a default a run shares with the library is read from its config
Agent = typer.Option(..., "--agent", help="scripted:gold, scripted:noop, scripted:noisy:P, openai:MODEL\\[@URL] or hf:PATH.")
Tasks = typer.Option(
    None,
    "--tasks",
    help="pool, bench, all, a domain name or folder, a YAML list of ids, a glob, tau2:DOMAIN[:SPLIT] (τ²-bench) or thinkingbox:DIR; comma-separated (default: bench for run, pool for probe).",
)
K = opts.count(None, "--k", hi=MAX_ATTEMPTS, help="Attempts per task (default: 1 for run, 8 for probe).")
User = typer.Option(
    str(EvaluateConfig.user), "--user", help="scripted, scripted:gold (also the user's own gold calls: τ² telecom) or openai:MODEL\\[@URL]."
)
UserTemperature = opts.number(
    None, "--user-temperature", lo=0.0, help="Sampling temperature of an openai: user (default 0); part of the run's identity."
)
UserCache = opts.folder_out(
    None,
    "--user-cache",
    help="Folder of an LLM user's reply cache (created if missing; its file: user-replies.sqlite): every reply is stored under "
    "(task, user model and sampling, attempt, conversation so far) and replayed on later runs, so a rerun, another agent "
    "or checkpoint meets the same customer. Not part of the run's identity; recorded in the manifest.",
)
NoUserAudit = typer.Option(
    False,
    "--no-user-audit",
    help="Do not check the openai: user's replies. By default each is checked against the task's user facts: an "
    "invented or contradicted fact, or ending the conversation when asked for one, is a user-simulator fault, a "
    "system error (--repair reruns it), never the agent's 0. Part of the run's identity.",
)
UserAudit = typer.Option(False, "--user-audit", hidden=True, help="The default (kept for scripts that say it).")
Judge = typer.Option(None, "--judge", help="openai:MODEL\\[@URL] for reply rubrics (without: rubric tasks are unjudged).")
Out = opts.file_out(
    None,
    "--out",
    help="Results JSONL (default: results.jsonl, for a probe probes.jsonl, in a folder under runs/ named after the "
    "agent, the tasks and k). Re-running resumes it.",
)
Repair = typer.Option(False, "--repair", help="Retry only the attempts that ended in a system error.")
RerunChanged = typer.Option(
    False,
    "--rerun-changed",
    help="Resuming: run again the attempts of tasks that changed since they were recorded (without it, such a file is refused).",
)
Concurrency = opts.count(EvaluateConfig.concurrency, "--concurrency", "-c", help=opts.Concurrency.help)
Seed = typer.Option(EvaluateConfig.seed, help="Seed for scripted noise and sampling.")
Temperature = opts.temperature("Sampling temperature (probe at the temperature you will train at; 0: greedy).")
Ray = typer.Option(
    None, "--ray", help="Run attempts on Ray actors: local (a private instance), auto (the running cluster), HOST:PORT or ray://HOST:10001."
)
ToolCallFormat = typer.Option(
    EvaluateConfig.tool_call_format, "--tool-call-format", callback=opts.ToolCallFormat.callback, help=opts.ToolCallFormat.help
)
MaxEndpointFailures = opts.count(
    EvaluateConfig.max_endpoint_failures,
    "--max-endpoint-failures",
    lo=0,
    help="Stop the run after this many attempts in a row fail on their model endpoint (0: never); the run stays resumable.",
)


def attempts_command(
    ctx: typer.Context,
    agent: str = Agent,
    tasks: str | None = Tasks,
    k: int | None = K,
    user: str = User,
    user_temperature: float | None = UserTemperature,
    user_cache: Path | None = UserCache,
    no_user_audit: bool = NoUserAudit,
    _user_audit: bool = UserAudit,
    judge: str | None = Judge,
    out_path: Path | None = Out,
    repair: bool = Repair,
    rerun_changed: bool = RerunChanged,
    concurrency: int = Concurrency,
    seed: int = Seed,
    temperature: float | None = Temperature,
    top_p: float | None = opts.TopP,
    top_k: int | None = opts.TopK,
    max_tokens: int | None = opts.MaxTokens,
    max_turns: int | None = opts.MaxTurns,
    attempt_timeout: float | None = opts.AttemptTimeout,
    grade_timeout: float | None = opts.GradeTimeout,
    max_result_chars: int | None = opts.MaxResultChars,
    max_attempt_tokens: int | None = opts.MaxAttemptTokens,
    backend: str = opts.Backend,
    pg_dsn: str | None = opts.PgDsn,
    ray_address: str | None = Ray,
    ray_cpus: int | None = opts.RayCpus,
    tb_servers: Path | None = opts.TbServers,
    tb_no_sources: bool = opts.TbNoSources,
    tool_call_format: str = ToolCallFormat,
    max_endpoint_failures: int = MaxEndpointFailures,
) -> None:
    cfg = job_of(ctx.params, probe=ctx.info_name == "probe")
    pairs = select(cfg.tasks, tb_servers, tb_no_sources)
    with open_backend(backend, pg_dsn, suffix=f"; {untouched(cfg)}.") as be:
        summary = play(cfg, pairs, be)
    say(cfg, summary)


def untouched(cfg: EvaluateConfig) -> str:
    return f"nothing was {'probed' if cfg.probe else 'run'} or written"


def job_of(p: dict[str, Any], probe: bool) -> EvaluateConfig:
    """The job the options name (`ctx.params`), or one error line: a spec that cannot be parsed, or settings of an
    LLM user given for the scripted one."""
    try:
        cfg = EvaluateConfig(
            agent=p["agent"],
            user=p["user"],
            judge=p["judge"],
            k=p["k"],
            concurrency=p["concurrency"],
            seed=p["seed"],
            sampling=opts.sampling(p["temperature"], p["top_p"], p["top_k"], p["max_tokens"]),
            limits=opts.limits(p["max_turns"], p["attempt_timeout"], p["grade_timeout"], p["max_result_chars"], p["max_attempt_tokens"]),
            tool_call_format=p["tool_call_format"],
            user_sampling={} if p["user_temperature"] is None else {"temperature": p["user_temperature"]},
            user_audit=not p["no_user_audit"],
            user_cache=p["user_cache"],
            max_endpoint_failures=p["max_endpoint_failures"],
            tasks=p["tasks"],
            probe=probe,
            out=p["out_path"],
            repair=p["repair"],
            rerun_changed=p["rerun_changed"],
            ray=p["ray_address"],
            ray_cpus=p["ray_cpus"],
        )
    except ValueError as e:  # a spec that cannot be parsed: one line, nothing written
        fail(f"{e}; nothing was {'probed' if probe else 'run'} or written.")
    if (p["user_temperature"] is not None or p["user_cache"] is not None) and not cfg.user.is_llm:
        given = "--user-temperature" if p["user_temperature"] is not None else "--user-cache"
        fail(f"{given} is for an LLM user (--user openai:MODEL[@URL]); --user {cfg.user} replays the task's script")
    return cfg


def play(cfg: EvaluateConfig, pairs: list[tuple[Task, Domain]], backend: Backend) -> RunSummary:
    """`evaluate` under a progress bar; what stops it is one error line with its exit status."""
    from groundstate.agents.user_cache import UserCacheError
    from groundstate.pipeline.evaluate import CannotStart, evaluate
    from groundstate.pipeline.runner import EndpointsDown, ResumeRefused, progress_status
    from groundstate.records import RecordError, ResultsInUseError, ResultsWriteError
    from groundstate.tasks import TaskFileError

    noun, planned = "probe" if cfg.probe else "run", len(pairs) * cfg.k
    tally = {"pass": 0, "fail": 0, "system_error": 0, "unjudged": 0}
    with progress() as bars:
        bar = bars.add_task(f"{noun} {cfg.agent}", total=planned, status="")

        def on_result(r: AttemptRecord) -> None:
            tally[r.outcome] += 1
            bars.update(bar, advance=1, status=progress_status(tally))

        def on_ready() -> None:  # a default a new user may not expect (the whole benchmark): said before it starts
            if cfg.defaulted:
                chosen = " ".join(f"--{name} {value}" for name, value in cfg.defaulted.items())
                console.print(f"defaults: {chosen} ({len(pairs)} tasks × {cfg.k} = {planned} attempts); give them to choose")

        try:
            return evaluate(
                cfg,
                pairs,
                backend,
                on_warning=lambda w: console.print(f"[yellow]warning:[/yellow] {escape(w)}"),
                on_ready=on_ready,
                on_plan=lambda n, done: bars.update(bar, total=n, completed=done),
                on_result=on_result,
            )
        except ResultsInUseError as e:  # another run writes this file: one writer per results file
            bars.stop()
            fail(f"{e}; {untouched(cfg)}.", 3)
        except TaskFileError as e:  # a domain file the backend rejects (a schema PostgreSQL refuses): no attempt was run
            bars.stop()
            fail(str(e))
        except ResultsWriteError as e:  # disk full, read-only file or folder: stop, keeping every record already written
            bars.stop()
            fail(
                f"{e}\nthe {noun} stopped; every record written before the error is intact. "
                "Free space or fix permissions, then re-run the same command to finish it.",
                3,
            )
        except EndpointsDown as e:  # the endpoint went away mid-run: stop instead of failing every attempt left
            bars.stop()
            fail(
                f"{e}\nthe {noun} stopped; every record written is intact ({cfg.out}). Fix the endpoint, then re-run the same "
                "command: it resumes, and retries the attempts the endpoint failed.",
                1,
            )
        except (CannotStart, RecordError, ResumeRefused, UserCacheError) as e:  # a spec, endpoint or file this run cannot use
            bars.stop()
            fail(f"{e}; {untouched(cfg)}.")


def say(cfg: EvaluateConfig, summary: RunSummary) -> None:
    """What the run did, where its files went, and what to do next; a run that measured nothing exits 1."""
    from groundstate.agents.user_cache import CACHE_FILE

    where = f" on {summary.planned // cfg.k} tasks × n={cfg.k}" if cfg.probe else ""
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
                if cfg.tool_call_format == "native"
                else f", and --tool-call-format {cfg.tool_call_format} did not read them: try another format, or the server's "
                "tool-call parser options (vLLM --enable-auto-tool-choice --tool-call-parser, llama.cpp --jinja)."
            )
        )
    console.print(f"{'probes' if cfg.probe else 'results'} written to {summary.path}\nmanifest written to {summary.manifest}", markup=False)
    if cfg.user_cache is not None:
        cached, generated = summary.user_replies.get("cached", 0), summary.user_replies.get("generated", 0)
        evicted = summary.user_replies.get("evicted", 0)
        console.print(
            f"user cache {escape(str(cfg.user_cache / CACHE_FILE))}: {cached} user replies served from the cache, {generated} generated and stored"
            + (f"; [yellow]{evicted} bad rows evicted[/yellow] (warnings above)" if evicted else "")
        )
    faults = f"; {summary.user_faults} of them user-simulator faults (see groundstate metrics)" if summary.user_faults else ""
    if summary.ran and summary.system_errors == summary.ran:  # nothing was measured: never a quiet exit 0
        said = (summary.first_error.strip().splitlines() or ["see the records"])[0][:300]
        fail(
            f"every one of the {summary.ran} attempts run was a system error, so nothing was measured{faults}; the first: "
            f"{said} (all in {summary.path}). Fix its cause, then re-run the same command with --repair.",
            1,
        )
    if summary.system_errors:
        console.print(
            f"[yellow]{summary.system_errors} system errors:[/yellow] re-run with --repair to retry them"
            + (" (they are not counted as runs)" if cfg.probe else "")
            + faults
        )
    if cfg.probe:
        console.print(f"next: groundstate select {summary.path} --out {summary.path.parent / 'selection'} --exclude bench", markup=False)
