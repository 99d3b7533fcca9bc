"""`groundstate serve --protocol {mcp,openenv}`: serve tasks through another project's protocol (docs/INTEGRATIONS.md).

An option both protocols take means the same in both; one only the other protocol takes is refused. An option left
unset keeps the protocol's default (`integrations.serving.McpServe`, `OpenEnvServe`). `serve-mcp` is the old
spelling of `serve --protocol mcp` (cli.mcp), with these same options.
"""

from __future__ import annotations

from typing import Any

import typer

from groundstate.cli import options as opts
from groundstate.cli.common import fail
from groundstate.cli.options import count, number
from groundstate.integrations.serving import PROTOCOLS, McpServe, OpenEnvServe, ServeConfig


def _per_protocol(name: str) -> str:
    """`Default: X (mcp), Y (openenv).` from the two configs."""
    return f"Default: {getattr(McpServe, name)} (mcp), {getattr(OpenEnvServe, name)} (openenv)."


Protocol = typer.Option(
    ..., "--protocol", help=f"{' or '.join(PROTOCOLS)}: mcp (a domain's tools over MCP), openenv (OpenEnv's reset/step/state over WebSocket)."
)
Domain = typer.Option(None, "--domain", "-d", help="Domain name or folder: mcp serves its tools, openenv every task of it.")
Tasks = typer.Option(None, "--tasks", help="openenv: or serve these tasks (any --tasks selector of SQL domains).")
Task = typer.Option(
    None,
    "--task",
    "-t",
    help="mcp: serve the start state of this task of the domain, and grade each session when it ends (default: the domain's seed world).",
)
Transport = typer.Option(
    None, "--transport", help=f"mcp: stdio (one session on stdin/stdout) or http (streamable HTTP). Default: {McpServe.transport}."
)
Host = typer.Option(
    None, "--host", help=f"Address to bind (mcp: with --transport http), loopback only unless --allow-remote. Default: {ServeConfig.host}."
)
Port = number(None, "--port", lo=1, hi=65535, help="Port to listen on (mcp: with --transport http). " + _per_protocol("port"))
Token = typer.Option(
    None,
    "--token",
    help="mcp, HTTP: bearer token clients must send (default: $GROUNDSTATE_MCP_TOKEN, else a random one, printed to stderr). "
    "Prefer the GROUNDSTATE_MCP_TOKEN variable: command lines are visible to other users.",
)
Backend = typer.Option(None, "--backend", help=f"sqlite (embedded default) or postgres. Default: {ServeConfig.backend}.")
User = typer.Option(
    None,
    "--user",
    help=f"openenv: the user side, scripted (the task's script), scripted:gold (and the user's own gold calls) or openai:MODEL\\[@URL]. Default: {OpenEnvServe.user}.",
)
AllowRemote = typer.Option(
    False, "--allow-remote", help="Allow a non-loopback address (neither protocol encrypts, openenv has no authentication: put a proxy in front)."
)
MaxSessions = count(
    None,
    "--max-sessions",
    help="Sessions served at once, each holding a sandbox (a database clone); openenv: an HTTP /reset holds one too (503 when none is free). "
    + _per_protocol("max_sessions"),
)
SessionWait = number(
    None,
    "--session-wait",
    lo=0.0,
    help=f"mcp: seconds a session's first tool call waits for a free sandbox before it is answered with an error. Default: {McpServe.session_wait:g}.",
)
IdleTimeout = number(
    None,
    "--idle-timeout",
    lo=0.0,
    lo_open=True,
    help="mcp, HTTP: seconds without a request after which a session's sandbox is graded and closed; openenv: after which an HTTP "
    "session (MCPToolClient's) with no WebSocket attached is closed. " + _per_protocol("idle_timeout"),
)
Split = typer.Option(
    None,
    "--split",
    help="openenv: a Task API split, NAME=SELECTOR (repeat for each: --split train=runs/selection/train.yaml --split bench=bench); "
    "its tasks are served too. Default: all, and the tasks' own pool and bench.",
)
MaxPending = count(
    None,
    "--max-pending",
    help=f"mcp, stdio: requests served at once; more are answered with an error until answers are read. Default: {McpServe.max_pending}.",
)
RevealVerdict = typer.Option(
    False,
    "--reveal-verdict",
    help="openenv: send the whole verdict with done: the golden-state diff, each failed check's SQL and expected rows "
    "(for evaluation: a client that resets to the task again has the answer). Default: reward and reasons by check name.",
)

Out = typer.Option(
    None,
    "--out",
    help="A results file (JSONL): every finished episode (openenv) or graded session (mcp with --task) written there as a "
    "record, for metrics, report and regrade; its agent is the name the client gives (openenv: reset(agent=...); mcp: "
    "clientInfo.name). A file of another run's records is refused.",
)


def serve(
    protocol: str = Protocol,
    domain: str | None = Domain,
    tasks: str | None = Tasks,
    task: str | None = Task,
    transport: str | None = Transport,
    host: str | None = Host,
    port: int | None = Port,
    token: str | None = Token,
    backend: str | None = Backend,
    pg_dsn: str | None = opts.PgDsn,
    user: str | None = User,
    allow_remote: bool = AllowRemote,
    max_sessions: int | None = MaxSessions,
    session_wait: float | None = SessionWait,
    idle_timeout: float | None = IdleTimeout,
    max_pending: int | None = MaxPending,
    max_turns: int | None = opts.MaxTurns,
    attempt_timeout: float | None = opts.AttemptTimeout,
    grade_timeout: float | None = opts.GradeTimeout,
    max_result_chars: int | None = opts.MaxResultChars,
    reveal_verdict: bool = RevealVerdict,
    out: str | None = Out,
    split: list[str] | None = Split,
) -> None:
    """Serve tasks through a protocol, one isolated database sandbox per session: mcp serves a domain's tools (with
    --task each session is graded when it ends, its verdict on stderr; exit status 1 if stderr was left unread with
    verdicts still unwritten after the server stopped); openenv makes each session one graded attempt."""
    options = dict(locals())  # the parameters, each named as the config field it gives
    options["split"] = tuple(split) if split else None
    serve_options(options.pop("protocol"), options)


def serve_options(protocol: str, options: dict[str, Any]) -> None:
    """Serve with the options given (those left unset, or a flag left off, keep the protocol's defaults): one error line
    for what cannot be served, exit 1 where a verdict line never reached stderr."""
    from groundstate.integrations.serving import ServeRefused, serve_config
    from groundstate.integrations.serving import serve as serve_protocol

    try:
        delivered = serve_protocol(serve_config(protocol, **{k: v for k, v in options.items() if v is not None and v is not False}))
    except ServeRefused as e:
        fail(str(e))
    if not delivered:
        raise typer.Exit(1)  # stderr is not read: the exit status is the one place left to say a verdict was not written
