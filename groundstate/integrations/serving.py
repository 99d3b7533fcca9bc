"""Serving tasks through another project's protocol, as one job: `groundstate serve --protocol mcp|openenv`.

The protocols share what they mean alike: the world (`domain`: mcp serves its tools, openenv its tasks, or any
`tasks` selector), the host policy (loopback only unless `allow_remote`), the backend (on PostgreSQL a pool of one
clone more than `max_sessions`, for the golden replay that grading a session runs) and the bound on sessions at once.
Each keeps its own defaults (`McpServe`, `OpenEnvServe`) and the options only it takes; neither protocol's SDK is
imported before it serves. While a server serves, the process's start-up heap is out of the cyclic collector's reach
(`tools.listen.startup_heap_frozen`).

With a task, every MCP session is graded when it ends and its verdict written to stderr (`VerdictLines`); the log goes
to stderr too, and may be dropped when nobody reads it (`groundstate.tools.stderr_log`); the verdicts never are.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from groundstate.tasks import TaskFileError
from groundstate.tools.listen import startup_heap_frozen
from groundstate.tools.stderr_log import StderrLines
from groundstate.types import EpisodeLimits

if TYPE_CHECKING:
    from groundstate.pipeline.served import ServedEpisodes
    from groundstate.state.base import Backend, Sandbox
    from groundstate.tasks import Task
    from groundstate.tools.mcp_server import SessionLog
    from groundstate.types import Domain, Verdict

VERDICT_WAIT = 10.0  # seconds a stopped server waits for stderr to take its last verdict lines before it exits with 1
TOKEN_VARIABLE = "GROUNDSTATE_MCP_TOKEN"  # the MCP server's bearer token where none is given (command lines are visible to other users)


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """What both protocols take; a protocol's own config adds the rest and its defaults."""

    protocol: ClassVar[str]
    domain: str | None = None  # a domain's name or folder
    host: str = "127.0.0.1"  # the address to bind: loopback only unless allow_remote
    backend: str = "sqlite"  # sqlite or postgres
    pg_dsn: str | None = None
    allow_remote: bool = False  # a non-loopback host (put TLS or a proxy in front)


@dataclass(frozen=True, kw_only=True)
class McpServe(ServeConfig):
    """`--protocol mcp`: the domain's tools over MCP, one sandbox per session; with a `task`, each session starts from its
    start state and is graded when it ends. The defaults are `groundstate.tools.mcp_server`'s (a test checks that they
    agree: that module needs the MCP SDK, which the command line loads only to serve)."""

    protocol: ClassVar[str] = "mcp"
    task: str | None = None  # None: the domain's seed world, ungraded
    transport: str = "stdio"  # stdio (one session on stdin/stdout) or http (streamable HTTP)
    port: int = 8765  # http
    token: str | None = None  # http: the bearer token clients must send (None: $GROUNDSTATE_MCP_TOKEN, else a random one)
    max_sessions: int = 32  # sessions holding a sandbox (a database clone) at once
    session_wait: float = 30.0  # seconds a session's first tool call waits for a free sandbox before its error
    idle_timeout: float = 300.0  # http: seconds without a request after which a session's sandbox is graded and closed
    max_pending: int = 64  # stdio: requests served at once; more are answered with an error until answers are read
    out: str | None = None  # with a task: a results file, every session written there as a record (`pipeline.served`)


@dataclass(frozen=True, kw_only=True)
class OpenEnvServe(ServeConfig):
    """`--protocol openenv`: OpenEnv's reset/step/state over WebSocket; each session is one graded attempt on its own sandbox."""

    protocol: ClassVar[str] = "openenv"
    tasks: str | None = None  # any --tasks selector of SQL domains (instead of a domain)
    port: int = 8000
    max_sessions: int = 64  # sessions at once, and sandboxes open: an HTTP /reset holds one too (503 when none is free)
    user: str = "scripted"  # the task's script, or openai:MODEL[@URL] (`specs.parse_user`)
    max_turns: int | None = None  # the attempt's limits (None: the task's own; grading: `EpisodeLimits`' bound)
    attempt_timeout: float | None = None
    grade_timeout: float | None = None
    max_result_chars: int | None = None
    reveal_verdict: bool = False  # send the whole verdict with done (for evaluation: the answer travels with it)
    out: str | None = None  # a results file: every finished episode written there as a record (`pipeline.served`)
    split: tuple[str, ...] = ()  # the Task API's splits, each NAME=SELECTOR (none: `integrations.splits`' default)
    idle_timeout: float = 300.0  # seconds an HTTP session (MCPToolClient's) with no WebSocket attached may go without a request


PROTOCOLS: dict[str, type[ServeConfig]] = {c.protocol: c for c in (McpServe, OpenEnvServe)}


class ServeRefused(ValueError):
    """What cannot be served, in one line, said before anything is."""


def serve_config(protocol: str, **options: object) -> ServeConfig:
    """The config of `protocol` with the options given (each named as its field; the others keep the protocol's
    defaults). `ServeRefused` for an unknown protocol, or an option only another protocol takes."""
    if protocol not in PROTOCOLS:
        raise ServeRefused(f"unknown protocol {protocol!r}: use {', '.join(PROTOCOLS)}")
    cls = PROTOCOLS[protocol]
    own = {f.name for f in fields(cls)}
    for name in options:
        if name not in own:
            takes = [p for p, c in PROTOCOLS.items() if name in {f.name for f in fields(c)}]
            raise ServeRefused(f"--{name.replace('_', '-')} is for --protocol {' or '.join(takes) or '?'}, not {protocol}")
    return cls(**options)


def serve(config: ServeConfig) -> bool:
    """Serve until stopped (SIGTERM or Ctrl-C; over stdio, the client leaving). `ServeRefused` for what cannot be
    served, before anything is. Returns whether every verdict line reached stderr: an MCP server with a task whose
    stderr has not taken them all `VERDICT_WAIT` seconds after it stops returns False."""
    return _SERVERS[config.protocol](config)


def _backend(config: ServeConfig, max_sessions: int) -> Backend:
    """The backend every session's sandbox is cloned from; on PostgreSQL a pool of one clone more than sessions."""
    from groundstate.state import make_backend

    try:
        return make_backend(config.backend, config.pg_dsn, **({} if config.backend == "sqlite" else {"max_open": max_sessions + 1}))
    except ValueError as e:
        raise ServeRefused(f"--backend: {e}") from None


def _serve_mcp(c: McpServe) -> bool:
    from groundstate.worlds.domain import load_domain

    try:
        from groundstate.tools.mcp_server import serve as serve_tools
    except ImportError as e:
        raise ServeRefused(f"serving MCP needs the MCP SDK (pip install 'mcp>=2.3'): {e}") from None
    if c.transport not in ("stdio", "http"):
        raise ServeRefused(f"unknown transport {c.transport!r}: use stdio or http")
    if c.domain is None:
        raise ServeRefused("give --domain: the domain whose tools to serve")
    try:
        domain = load_domain(c.domain)
        task = domain.task(c.task) if c.task else None
    except (TaskFileError, KeyError) as e:
        raise ServeRefused(str(e)) from None
    if c.transport == "http":
        from groundstate.tools.listen import check_host

        try:
            check_host(c.host, c.allow_remote)
        except ValueError as e:
            raise ServeRefused(str(e)) from None
    if c.out is not None and task is None:
        raise ServeRefused("--out records graded sessions: give --task too (without one, sessions are not graded)")
    records = _records(c.out, "mcp", [(task, domain)], "none", EpisodeLimits()) if task is not None else None
    backend = _backend(c, c.max_sessions)
    verdicts = VerdictLines(task, records=records, domain=domain, backend=backend) if task is not None else None
    try:
        with startup_heap_frozen():
            serve_tools(
                domain,
                task,
                c.transport,
                c.host,
                c.port,
                c.token if c.token is not None else os.environ.get(TOKEN_VARIABLE) or None,
                backend=backend,
                allow_remote=c.allow_remote,
                idle_timeout=c.idle_timeout,
                on_session_end=verdicts.graded if verdicts else None,
                on_session_lost=verdicts.lost if verdicts else None,
                max_sessions=c.max_sessions,
                session_wait=c.session_wait,
                max_pending=c.max_pending,
            )
    finally:
        delivered = verdicts is None or verdicts.close()
        backend.close()
        if records is not None:
            records.close()
            print(f"[groundstate mcp] records written to {records.path}", file=sys.stderr, flush=True)
    return delivered


def _serve_openenv(c: OpenEnvServe) -> bool:
    from groundstate.specs import parse_user
    from groundstate.worlds.selectors import select_tasks
    from groundstate.worlds.thinkingbox import require_servers

    if c.domain is not None and c.tasks is not None or (c.domain is None and c.tasks is None and not c.split):
        raise ServeRefused("give --domain or --tasks (one of them), or --split")
    try:
        user = parse_user(c.user)  # once, for every session
        if user.is_llm:  # every session's user calls the endpoint: refused now, not at the first client's reply
            from groundstate.agents.openai_compat import require_openai

            require_openai()
    except ValueError as e:
        raise ServeRefused(f"--user {c.user}: {e}") from None
    selector = c.tasks if c.tasks is not None else c.domain
    try:
        pairs = select_tasks(selector) if selector is not None else []
        named = _splits(c.split, pairs)
        served = {t.id: (t, d) for t, d in pairs}
        for t, d in (pair for chosen in named.values() for pair in chosen):
            if t.id not in served:  # a split's tasks are served too
                served[t.id] = (t, d)
                pairs.append((t, d))
            elif served[t.id][0] != t or served[t.id][1].content_hash != d.content_hash:
                raise ValueError(
                    f"--split: task id {t.id!r} names two different tasks (domains {served[t.id][1].name} and {d.name}): select only one"
                )
        if any(p.strip().startswith("thinkingbox:") for p in ",".join([selector or "", *c.split]).split(",")):
            require_servers(pairs)
    except (ValueError, TaskFileError, KeyError) as e:
        raise ServeRefused(str(e)) from None
    from groundstate.integrations.splits import TaskSplits

    try:
        splits = TaskSplits({name: [t for t, _ in chosen] for name, chosen in named.items()}) if named else None
    except ValueError as e:
        raise ServeRefused(f"--split: {e}") from None
    limits = EpisodeLimits(
        max_turns=c.max_turns,
        timeout=c.attempt_timeout,
        max_result_chars=c.max_result_chars,
        **({} if c.grade_timeout is None else {"grade_timeout": c.grade_timeout}),
    )
    records = _records(c.out, "openenv", pairs, str(user), limits)
    backend = _backend(c, c.max_sessions)
    try:
        try:
            from groundstate.integrations.openenv import serve as serve_openenv
        except ImportError as e:
            raise ServeRefused(f"--protocol openenv needs openenv 0.10 (pip install -e '.[openenv]'): {e}") from None
        with startup_heap_frozen():
            serve_openenv(
                pairs,
                backend,
                c.host,
                c.port,
                limits=limits,
                user=user,
                max_sessions=c.max_sessions,
                allow_remote=c.allow_remote,
                name=pairs[0][1].name if c.domain is not None else "groundstate",  # the Task API's routes: /{name}/splits
                reveal_verdict=c.reveal_verdict,
                records=records,
                splits=splits,
                idle_timeout=c.idle_timeout,
            )
    except ValueError as e:
        raise ServeRefused(str(e)) from None
    finally:
        backend.close()
        if records is not None:
            records.close()
            print(f"[groundstate openenv] records written to {records.path}", file=sys.stderr, flush=True)
    return True


def _splits(given: tuple[str, ...], served: list[tuple[Task, Domain]]) -> dict[str, list[tuple[Task, Domain]]]:
    """`--split NAME=SELECTOR` options as the tasks each selects, in the order given (task ids and patterns name the
    bundled domains' tasks and those of the domain folders `served` comes from); ValueError for a malformed one or a
    name given twice."""
    from groundstate.worlds.domain import DOMAINS_DIR, bundled_domains
    from groundstate.worlds.domain import Domain as SqlDomain
    from groundstate.worlds.selectors import select_tasks

    folders = sorted({str(d.path) for _, d in served if isinstance(d, SqlDomain) and d.path.resolve().parent != DOMAINS_DIR.resolve()})
    universe = [*bundled_domains(), *folders]

    named: dict[str, list[tuple[Task, Domain]]] = {}
    for option in given:
        name, sep, selector = (part.strip() for part in option.partition("="))
        if not sep or not name or not selector:
            raise ValueError(f"--split {option!r}: give NAME=SELECTOR (train=runs/selection/train.yaml, bench=bench)")
        if name in named:
            raise ValueError(f"--split: split {name!r} is given twice")
        if Path(selector).suffix in (".yaml", ".yml", ".json") and not Path(selector).exists():
            raise ValueError(f"--split {name}: no such file: {selector}")
        try:
            named[name] = select_tasks(selector, universe)
        except (ValueError, TaskFileError, KeyError) as e:
            raise ValueError(f"--split {name}: {e}") from None
    return named


def _records(out: str | None, protocol: str, pairs: list[tuple[Task, Domain]], user: str, limits: EpisodeLimits) -> ServedEpisodes | None:
    """The results file every finished episode is written to (`--out`), or None; `ServeRefused` for one that holds
    another run's records or cannot be written."""
    if out is None:
        return None
    from groundstate.pipeline.resume import ResumeRefused
    from groundstate.pipeline.served import ServedEpisodes
    from groundstate.records import RecordError, ResultsInUseError, ResultsWriteError

    try:
        return ServedEpisodes(out, protocol, pairs, user, limits)
    except (ResumeRefused, RecordError, ResultsInUseError, ResultsWriteError) as e:
        raise ServeRefused(f"--out: {e}") from None


_SERVERS = {"mcp": _serve_mcp, "openenv": _serve_openenv}


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

    def __init__(
        self, task: Task, fd: int = 2, *, records: ServedEpisodes | None = None, domain: Domain | None = None, backend: Backend | None = None
    ):
        self.task, self.records, self.domain, self.backend = task, records, domain, backend
        self._counter = itertools.count(1)
        self._numbering = threading.Lock()  # sessions end in several threads: numbers in the order of the lines
        self._lines = StderrLines(fd, None, name="groundstate-verdicts")

    def graded(self, sandbox: Sandbox, log: SessionLog) -> None:
        from groundstate.grading.grader import grade

        try:
            v = grade(self.task, sandbox)
        except Exception as e:  # noqa: BLE001 - the session still gets its line, saying why it has no reward
            self.lost(f"grading failed: {type(e).__name__}: {e}")
            return
        self._line(f"reward={v.reward} ({'; '.join(v.reasons)[:300]})")
        if self.records is not None:
            self._record(v, log)

    def lost(self, why: str) -> None:
        self._line(f"reward=None (not graded: {why[:300]})")
        if self.records is not None:
            from groundstate.types import system_error

            self.records.record(self.task, system_error(f"the session was not graded: {why}", "infrastructure"), None, {}, None)

    def _record(self, verdict: Verdict, log: SessionLog) -> None:
        """The session as a record: its tool calls (the conversation is the client's own, unseen here), its verdict, and
        where a failed one went wrong (`Domain.blame`, on a fresh world)."""
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        from groundstate.types import Blame, Trajectory

        assert self.records is not None and self.domain is not None and self.backend is not None
        trajectory = Trajectory(messages=[], tool_calls=log.calls, finish_reason="agent_done", turns=len(log.calls))
        if verdict.state_reward == 0:
            try:  # on a loop of its own: this hook may run on the server's (SQLite sessions end there)
                with ThreadPoolExecutor(1) as apart:
                    verdict.blame = apart.submit(asyncio.run, self.domain.blame(self.task, self.backend, trajectory)).result()
            except Exception as e:  # noqa: BLE001 - blame explains a verdict; failing to find it never changes one
                verdict.blame = Blame(kind="unavailable", reason=f"{type(e).__name__}: {e}")
        self.records.record(self.task, verdict, trajectory, {}, log.client)

    def close(self, wait: float = VERDICT_WAIT) -> bool:
        """Write the lines still queued, waiting at most `wait` seconds for stderr to take them; whether all were."""
        return self._lines.close(wait)

    def _line(self, verdict: str) -> None:
        # one write per line (`StderrLines`): sessions ending at once in their own threads once interleaved into
        # "…row(s))[groundstate mcp] session 2 ended: …" (a CI run read one line for two)
        with self._numbering:
            self._lines.put(f"[groundstate mcp] session {next(self._counter)} ended: task {self.task.id} {verdict}\n")
