"""`groundstate serve --protocol openenv`: serve tasks through another project's environment protocol (docs/INTEGRATIONS.md)."""

from __future__ import annotations

from typing import Optional

import typer

from groundstate.cli import options as opts
from groundstate.cli.common import fail, select
from groundstate.cli.options import count, number

PROTOCOLS = ("openenv",)


def serve(
    protocol: str = typer.Option(..., "--protocol", help="openenv (OpenEnv's reset/step/state over WebSocket)."),
    domain: Optional[str] = typer.Option(None, "--domain", "-d", help="Serve every task of this domain (name or folder)."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="Or serve these tasks (any --tasks selector of SQL domains)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback only unless --allow-remote)."),
    port: int = number(8000, "--port", lo=1, hi=65535, help="Port to listen on."),
    backend: str = typer.Option("sqlite", "--backend", help="sqlite (embedded default) or postgres."),
    pg_dsn: Optional[str] = typer.Option(None, "--pg-dsn", help="PostgreSQL DSN (default: $GROUNDSTATE_PG_DSN or the local server)."),
    user: str = typer.Option("scripted", "--user", help="The user side: scripted (the task's script) or openai:MODEL\\[@URL]."),
    max_sessions: int = count(
        64, "--max-sessions", help="Sessions served at once, and sandboxes open: each session holds one, an HTTP /reset one (503 when none is free)."
    ),
    max_turns: Optional[int] = opts.MaxTurns,
    attempt_timeout: Optional[float] = opts.AttemptTimeout,
    grade_timeout: Optional[float] = opts.GradeTimeout,
    max_result_chars: Optional[int] = opts.MaxResultChars,
    allow_remote: bool = typer.Option(
        False, "--allow-remote", help="Allow a non-loopback address (OpenEnv has no authentication: put a proxy in front)."
    ),
    reveal_verdict: bool = typer.Option(
        False,
        "--reveal-verdict",
        help="Send the whole verdict with done: the golden-state diff, each failed check's SQL and expected rows "
        "(for evaluation: a client that resets to the task again has the answer). Default: reward and reasons by check name.",
    ),
) -> None:
    """Serve tasks through an environment protocol; each session is one graded attempt on its own sandbox."""
    if protocol not in PROTOCOLS:
        fail(f"unknown protocol {protocol!r}: use {', '.join(PROTOCOLS)}")
    if (domain is None) == (tasks is None):
        fail("give --domain or --tasks (one of them)")
    pairs = select(tasks if tasks is not None else str(domain))
    from groundstate.state import make_backend

    try:
        from groundstate.integrations.openenv import serve as serve_openenv
    except ImportError as e:
        fail(f"--protocol openenv needs openenv-core (pip install 'groundstate[openenv]'): {e}")
    try:
        be = make_backend(backend, pg_dsn, **({} if backend == "sqlite" else {"max_open": max_sessions + 1}))
    except ValueError as e:
        fail(f"--backend: {e}")
    name = domain if domain is not None else "groundstate"
    try:
        limits = opts.limits(max_turns, attempt_timeout, grade_timeout, max_result_chars, None)
        serve_openenv(
            pairs,
            be,
            host,
            port,
            limits=limits,
            user=user,
            max_sessions=max_sessions,
            allow_remote=allow_remote,
            name=name,
            reveal_verdict=reveal_verdict,
        )
    except ValueError as e:
        fail(str(e))
    finally:
        be.close()
