"""`groundstate serve-mcp`: the old spelling of `groundstate serve --protocol mcp`, hidden from help (a note names the
new one), with the MCP options of `serve` (cli.serve); the server is `groundstate.integrations.serving`'s.

Also runnable on its own, without the note (what MCP hosts and the tests do):
    python -m groundstate.cli.mcp --domain retail --task retail-001 [--transport http --port 8765]
With a task, each session's final state is graded when it ends and its verdict printed to stderr (`VerdictLines`).
The log goes to stderr too, and may be dropped when nobody reads it (`groundstate.tools.stderr_log`); the verdicts never are.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand

from groundstate.cli import options as opts
from groundstate.cli.common import console
from groundstate.cli.serve import (
    AllowRemote,
    Backend,
    Host,
    IdleTimeout,
    MaxPending,
    MaxSessions,
    Out,
    Port,
    SessionWait,
    Task,
    Token,
    Transport,
    serve_options,
)
from groundstate.integrations.serving import VERDICT_WAIT, McpServe, VerdictLines

__all__ = ["VERDICT_WAIT", "OldSpelling", "VerdictLines", "serve_mcp"]

# the MCP server's defaults, as `McpServe` gives them (= groundstate.tools.mcp_server's DEFAULT_*, which needs the MCP
# SDK to import: a test checks they agree)
DEFAULT_PORT = McpServe.port
DEFAULT_MAX_SESSIONS = McpServe.max_sessions
DEFAULT_SESSION_WAIT = McpServe.session_wait
DEFAULT_IDLE_TIMEOUT = McpServe.idle_timeout
DEFAULT_MAX_PENDING = McpServe.max_pending


class OldSpelling(TyperCommand):
    """`serve-mcp` as registered in `groundstate.cli`: one note on stderr naming the new spelling, then the same command."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        console.print("note: serve-mcp is now serve --protocol mcp (the old spelling goes in a later release)", markup=False, highlight=False)
        return super().parse_args(ctx, args)


def serve_mcp(
    domain: str = typer.Option(..., "--domain", "-d", help="Domain name or folder."),
    task: str | None = Task,
    transport: str | None = Transport,
    host: str | None = Host,
    port: int | None = Port,
    token: str | None = Token,
    backend: str | None = Backend,
    pg_dsn: str | None = opts.PgDsn,
    allow_remote: bool = AllowRemote,
    max_sessions: int | None = MaxSessions,
    session_wait: float | None = SessionWait,
    idle_timeout: float | None = IdleTimeout,
    max_pending: int | None = MaxPending,
    out: str | None = Out,
) -> None:
    """Serve a domain's tools over MCP, one isolated database sandbox per MCP session (`serve --protocol mcp`).

    With --task, each session starts from the task's start state and is graded when it ends (verdict on stderr;
    exit status 1 if stderr was left unread with verdicts still unwritten after the server stopped).
    """
    options: dict[str, Any] = dict(locals())  # the parameters, each named as the config field it gives
    serve_options("mcp", options)


def main() -> None:
    typer.run(serve_mcp)


if __name__ == "__main__":
    main()
