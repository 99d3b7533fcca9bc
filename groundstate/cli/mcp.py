"""`groundstate serve-mcp`: serve a domain's tools over MCP (stdio or streamable HTTP).

Registered in `groundstate.cli` as a command; also runnable on its own (what MCP hosts and the tests do):
    python -m groundstate.cli.mcp --domain retail --task retail-001 [--transport http --port 8765]
With a task, each session's final state is graded when it ends and its verdict printed to stderr (`VerdictLines`).
The log goes to stderr too, and may be dropped when nobody reads it (`groundstate.tools.stderr_log`); the verdicts never are.
"""

from __future__ import annotations

import itertools
import sys
import threading
from typing import TYPE_CHECKING, Optional

import typer

from groundstate.cli.options import count, number
from groundstate.tools.stderr_log import StderrLines

if TYPE_CHECKING:
    from groundstate.state.base import Sandbox
    from groundstate.tasks import Task

# = groundstate.tools.mcp_server's DEFAULT_*; not imported here, so the CLI loads without the MCP SDK (a test checks they agree)
DEFAULT_PORT = 8765
DEFAULT_MAX_SESSIONS = 32
DEFAULT_SESSION_WAIT = 30.0
DEFAULT_IDLE_TIMEOUT = 300.0
DEFAULT_MAX_PENDING = 64
VERDICT_WAIT = 10.0  # seconds a stopped server waits for stderr to take its last verdict lines before it exits with 1


class VerdictLines:
    """One numbered line on stderr (`fd`) per session that ends: `graded` grades its final state and prints the
    verdict; `lost` prints `reward=None` and why a session could not be graded (the server's `on_session_lost`, or
    grading that failed), so that every session has its line: `[groundstate mcp] session N ended: task T reward=R
    (reasons)`.

    The lines are the server's output, not its log: never dropped, unlike log lines (`DroppingStderrHandler`). They
    are written in order by a thread of their own (an unbounded `StderrLines`), so a stderr nobody reads blocks that
    thread alone: the session's sandbox is still closed and its slot freed, the server goes on serving and stops on
    SIGTERM, and the lines wait for a reader (one that reads only once the server stops gets them all). `close`
    says whether they were all written: a server whose stderr has not taken them all `VERDICT_WAIT` seconds after
    it stops exits with status 1, so that no verdict is lost in silence."""

    def __init__(self, task: "Task", fd: int = 2):
        self.task = task
        self._counter = itertools.count(1)
        self._numbering = threading.Lock()  # sessions end in several threads: numbers in the order of the lines
        self._lines = StderrLines(fd, None, name="groundstate-verdicts")

    def graded(self, sandbox: "Sandbox") -> None:
        from groundstate.grading.grader import grade

        try:
            v = grade(self.task, sandbox)
        except Exception as e:  # noqa: BLE001 - the session still gets its line, saying why it has no reward
            self.lost(f"grading failed: {type(e).__name__}: {e}")
            return
        self._line(f"reward={v.reward} ({'; '.join(v.reasons)[:300]})")

    def lost(self, why: str) -> None:
        self._line(f"reward=None (not graded: {why[:300]})")

    def close(self, wait: float = VERDICT_WAIT) -> bool:
        """Write the lines still queued, waiting at most `wait` seconds for stderr to take them; whether all were."""
        return self._lines.close(wait)

    def _line(self, verdict: str) -> None:
        # one write per line (`StderrLines`): sessions ending at once in their own threads once interleaved into
        # "…row(s))[groundstate mcp] session 2 ended: …" (a CI run read one line for two)
        with self._numbering:
            self._lines.put(f"[groundstate mcp] session {next(self._counter)} ended: task {self.task.id} {verdict}\n")


def serve_mcp(
    domain: str = typer.Option(..., "--domain", "-d", help="Domain name or folder."),
    task: Optional[str] = typer.Option(None, "--task", "-t", help="Serve the start state of this task (default: the domain's seed world)."),
    transport: str = typer.Option("stdio", "--transport", help="stdio (one session on stdin/stdout) or http (streamable HTTP)."),
    host: str = typer.Option("127.0.0.1", "--host", help="HTTP: address to bind (loopback only unless --allow-remote)."),
    port: int = number(DEFAULT_PORT, "--port", lo=1, hi=65535, help="HTTP: port to listen on."),
    token: Optional[str] = typer.Option(
        None,
        "--token",
        envvar="GROUNDSTATE_MCP_TOKEN",
        help="HTTP: bearer token clients must send (default: a random one, printed to stderr). "
        "Prefer the GROUNDSTATE_MCP_TOKEN variable: command lines are visible to other users.",
    ),
    backend: str = typer.Option("sqlite", "--backend", help="sqlite (embedded default) or postgres."),
    pg_dsn: Optional[str] = typer.Option(
        None, "--pg-dsn", help="PostgreSQL DSN (default: $GROUNDSTATE_PG_DSN, else database postgres on 127.0.0.1:5432 as user postgres)."
    ),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="HTTP: allow binding a non-loopback address (put TLS in front of it)."),
    max_sessions: int = count(DEFAULT_MAX_SESSIONS, "--max-sessions", help="Sessions that may hold a sandbox (a database clone) at once."),
    session_wait: float = number(
        DEFAULT_SESSION_WAIT,
        "--session-wait",
        lo=0.0,
        help="Seconds a session's first tool call waits for a free sandbox before it is answered with an error.",
    ),
    idle_timeout: float = number(
        DEFAULT_IDLE_TIMEOUT,
        "--idle-timeout",
        lo=0.0,
        lo_open=True,
        help="HTTP: seconds without a request after which a session's sandbox is graded and closed.",
    ),
    max_pending: int = count(
        DEFAULT_MAX_PENDING, "--max-pending", help="stdio: requests served at once; more are answered with an error until answers are read."
    ),
) -> None:
    """Serve a domain's tools over MCP, one isolated database sandbox per MCP session.

    With --task, each session starts from the task's start state and is graded when it ends (verdict on stderr;
    exit status 1 if stderr was left unread with verdicts still unwritten after the server stopped).
    """
    from groundstate.state import make_backend
    from groundstate.tasks import TaskFileError
    from groundstate.worlds.domain import load_domain

    try:
        from groundstate.tools.mcp_server import check_host, serve
    except ImportError as e:
        print(f"error: serving MCP needs the MCP SDK (pip install 'mcp>=2.3'): {e}", file=sys.stderr)
        raise typer.Exit(2) from None

    if transport not in ("stdio", "http"):
        print(f"error: unknown transport {transport!r}: use stdio or http", file=sys.stderr)
        raise typer.Exit(2)
    try:
        d = load_domain(domain)
        t = d.task(task) if task else None
    except (TaskFileError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(2) from None
    if transport == "http":
        try:
            check_host(host, allow_remote)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(2) from None
    try:
        # PostgreSQL: one clone more than sessions, for the golden replay that grading a session runs
        be = make_backend(backend, pg_dsn, **({} if backend == "sqlite" else {"max_open": max_sessions + 1}))
    except ValueError as e:
        print(f"error: --backend: {e}", file=sys.stderr)
        raise typer.Exit(2) from None
    verdicts = VerdictLines(t) if t is not None else None
    try:
        serve(
            d,
            t,
            transport,
            host,
            port,
            token,
            backend=be,
            allow_remote=allow_remote,
            idle_timeout=idle_timeout,
            on_session_end=verdicts.graded if verdicts else None,
            on_session_lost=verdicts.lost if verdicts else None,
            max_sessions=max_sessions,
            session_wait=session_wait,
            max_pending=max_pending,
        )
    finally:
        be.close()
        delivered = verdicts is None or verdicts.close()
    if not delivered:
        raise typer.Exit(1)  # stderr is not read: the exit status is the one place left to say a verdict was not written


def main() -> None:
    typer.run(serve_mcp)


if __name__ == "__main__":
    main()
