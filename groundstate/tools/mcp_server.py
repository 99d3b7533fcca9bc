"""Serve a domain's tools over MCP, with one isolated sandbox per MCP session.

Built on the official MCP Python SDK's low-level `Server`, so `tools/list` carries our `ToolSpec`s exactly
(name, description, `json_schema()` as `inputSchema`) and `tools/call` runs `Toolset.call` on the session's
own sandbox: a refused or invalid call comes back as a tool result with `isError: true`, never a crash.

Sessions and sandboxes:
- A sandbox is opened from the task's template (`backend.prepare(domain, task.patch)`, built once) at the
  session's first tool call, and closed when the session ends. Two sessions never see each other's writes.
  At most `max_sessions` sandboxes are open at once; a first tool call that finds none free for
  `session_wait` seconds is answered with a JSON-RPC error (the waiting is asynchronous, so it never holds a
  worker thread or a database connection).
- stdio (and any stream pair, including the SDK's in-process `Client(server)`): the connection is the
  session, whatever protocol era the client speaks. The sandbox is closed when the connection ends. With a
  grading hook, every session that ends is graded, over any transport, even one that never called a tool
  (on a fresh sandbox of the start state: a no-op agent's 0; it waits `session_wait` for a slot, and at a
  shutdown as long as it takes, the other sessions' ends freeing them). A session that still cannot be
  graded (no sandbox could be opened) is recorded with why (`on_session_lost`): none ends unrecorded.
  Over stdio the transport is bounded (`mcp_stdio`): `max_pending` requests at once, `MAX_NESTING` levels.
- Streamable HTTP: the session is the `Mcp-Session-Id` of an `initialize`-handshake session. Its sandbox is
  closed when the client ends the session (`DELETE`), when no POST of the session has been in flight for
  `idle_timeout` seconds, or when the server shuts down; on SIGTERM/SIGINT requests still running after
  `SHUTDOWN_GRACE` seconds are cancelled, every sandbox is closed (graded first) and the process exits.
  2026-07-28 requests carry no session, so over HTTP this server advertises only the handshake era in
  `server/discover` (the SDK's `auto` clients then fall back to `initialize`), and a session-less tool call
  is refused with a protocol error.
- The HTTP app listens on loopback and requires `Authorization: Bearer <token>` (401 otherwise). It offers no
  standalone event stream: a GET of the endpoint is answered 405 (the server sends nothing unprompted), as is any
  method but POST and DELETE. A session's key is refused after its end for as long as the SDK remembers the session.

Blocking database work (opening, tool calls, closing) runs in worker threads on backends other than SQLite.
Failures that are not the agent's doing (no session, session ended, no sandbox could be opened) are JSON-RPC
errors whose `data` is `INFRA_ERROR_DATA`; `McpToolset` raises on them instead of showing them to the agent.
"""

from __future__ import annotations

import contextlib
import functools
import math
import secrets
import sys
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp import MCPError, types
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from groundstate.agents.base import valid_text
from groundstate.tools.listen import check_host
from groundstate.tools.mcp_stdio import DEFAULT_MAX_PENDING, MAX_NESTING, stdio_streams
from groundstate.tools.stderr_log import logging_to_stderr
from groundstate.types import ToolCallRecord, ToolResult

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from groundstate.state.base import Backend, Sandbox, Template
    from groundstate.state.base import World as Domain
    from groundstate.tasks import Task

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_PENDING",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_PORT",
    "DEFAULT_SESSION_WAIT",
    "MAX_NESTING",
    "SESSION_HEADER",
    "WRITE_META_KEY",
    "SessionLog",
    "SessionSandboxes",
    "build_server",
    "build_http_app",
    "check_host",
    "serve",
    "serve_async",
]

DEFAULT_PORT = 8765
DEFAULT_IDLE_TIMEOUT = 5 * 60.0  # seconds an HTTP session may hold its sandbox with no request in flight
DEFAULT_MAX_SESSIONS = 32  # sandboxes open at once (= PostgresBackend's default pool size, `max_open`)
DEFAULT_SESSION_WAIT = 30.0  # seconds a first tool call waits for a free sandbox before its error
# An HTTP session outlives its sandbox's idle timeout by this long: a client that comes back after its sandbox idled out
# is told its session ended (an infrastructure error), not "Session not found"; then the SDK forgets the session (about
# 40 kB each, for a client that left without DELETE)
SESSION_MEMORY = 5 * 60.0
# An ended session's key is refused (`SessionEnded`) until it has had no request for the HTTP server's own memory of it
# (`idle_timeout + SESSION_MEMORY`, reset by every request) and this much more: by then the SDK has forgotten the
# session and answers its requests 404 itself, so the key is forgotten here too (kept for ever, they grew by one per
# ended session)
ENDED_MARGIN = 60.0
SHUTDOWN_GRACE = 5  # seconds HTTP requests may still run after SIGTERM/SIGINT before they are cancelled
SESSION_HEADER = "mcp-session-id"
WRITE_META_KEY = "groundstate/write"  # tool results carry whether the tool may write, in `_meta`
INFRA_ERROR_DATA = {"groundstate/infrastructure": True}  # `data` of JSON-RPC errors that are not the agent's doing

SessionEndHook = Callable[["Sandbox", "SessionLog"], None]  # grades a session that ended, on its sandbox
SessionLostHook = Callable[[str], None]  # records a session that ended and could not be graded, with why


class SessionEnded(Exception):
    """A tool call for a session whose sandbox was already closed."""


@dataclass
class SessionLog:
    """What one session did, for its end hook: its tool calls in order, as a trajectory records them, and the name the
    client gave in its `initialize` (`clientInfo.name`), noted at its first `tools/list` or `tools/call`."""

    calls: list[ToolCallRecord] = field(default_factory=list)
    client: str | None = None


@dataclass
class _Entry:
    owner: object = None  # the lifespan scope (stream connection or HTTP app) that serves the session
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    sandbox: Sandbox | None = None
    owned: bool = True  # False for a caller-provided sandbox: never closed here
    closed: bool = False
    slot: bool = False  # holds one of the `max_sessions` slots (released when its sandbox is closed)
    log: SessionLog = field(default_factory=SessionLog)


@dataclass
class _Activity:
    in_flight: int = 0
    last_seen: float = 0.0


@dataclass(eq=False)
class _Scope:
    """What the server's lifespan yields: one per stream connection, one for the whole HTTP app."""

    sessions: SessionSandboxes
    connection_key: str = field(default_factory=lambda: f"connection-{uuid.uuid4().hex}")


def _call_held(sandbox: Sandbox, tools: Any, name: str, arguments: Any) -> ToolResult:
    """A tool call that holds its sandbox (`Sandbox.in_use`): a shutdown closing it meanwhile waits for the call."""
    with sandbox.in_use():
        return tools.call(sandbox.connection, name, arguments)


class SessionSandboxes:
    """The open sandboxes of one MCP server, by session key; each opened lazily, each closed exactly once."""

    def __init__(
        self,
        domain: Domain,
        backend: Backend,
        template: Template,
        *,
        offload: bool | None = None,
        on_session_end: SessionEndHook | None = None,
        on_session_lost: SessionLostHook | None = None,
        sandbox: Sandbox | None = None,
        idle_timeout: float | None = None,
        max_sessions: int | None = DEFAULT_MAX_SESSIONS,
        session_wait: float = DEFAULT_SESSION_WAIT,
        forget_ended_after: float | None = None,
    ):
        """`forget_ended_after`: seconds with no request after which an ended session's key is no longer remembered
        (None: remembered while the registry lives); the HTTP app passes its SDK's session memory plus `ENDED_MARGIN`."""
        if max_sessions is not None and max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        if session_wait < 0:
            raise ValueError(f"session_wait must be 0 or more seconds, got {session_wait}")
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be more than 0 seconds, got {idle_timeout}")
        self.domain, self.backend, self.template = domain, backend, template
        self.offload = backend.name != "sqlite" if offload is None else offload
        self.on_session_end, self.on_session_lost = on_session_end, on_session_lost
        self.shared = sandbox  # serve this one sandbox to every session (the caller owns and closes it)
        self.idle_timeout = idle_timeout
        self.max_sessions, self.session_wait = max_sessions, session_wait
        # Waiting for a slot here (asynchronously, cancellable) rather than inside `backend.open` keeps a full
        # pool from parking worker threads forever and lets a shutdown cancel the waiters.
        self._slots = anyio.Semaphore(max_sessions) if max_sessions is not None else None
        self._entries: dict[str, _Entry] = {}
        self.forget_ended_after = forget_ended_after
        self._ended: OrderedDict[str, float] = OrderedDict()  # ended sessions' keys -> their last request, oldest first
        self._activity: dict[str, _Activity] = {}
        self._closing = False
        self.opened = 0  # sandboxes opened / closed so far
        self.closed = 0

    # -- tool calls ------------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.offload:
            return await anyio.to_thread.run_sync(fn, *args)
        return fn(*args)

    async def call(self, key: str, name: str, arguments: Any, *, owner: object = None, client: str | None = None) -> ToolResult:
        """Run one tool call on the session's sandbox (opened on first use); calls of a session run in order, each
        logged for the session's end hook (`SessionLog`).

        `owner` is what the session belongs to (`end_owner` closes all of its sessions); `client`, the name the client
        gave in its `initialize`.
        """
        if key in self._ended:
            raise SessionEnded(key)
        if self.shared is not None:
            key = "shared"  # one sandbox, one lock: its calls never overlap
        entry = self._entries.get(key)
        if entry is None:  # no await between the lookup and the insert: one entry per key
            entry = self._entries[key] = _Entry(owner=owner)
        async with entry.lock:
            if entry.closed:
                raise SessionEnded(key)
            if entry.sandbox is None:
                if self.shared is not None:
                    entry.sandbox, entry.owned = self.shared, False
                else:
                    await self._open(entry)
            result = await self._run(_call_held, entry.sandbox, self.domain.tools, name, arguments)
            entry.log.client = entry.log.client or client
            entry.log.calls.append(ToolCallRecord(name=name, arguments=arguments, ok=result.ok, result=result.content, write=result.write))
            return result

    def note_client(self, key: str, name: str) -> None:
        """The name a session's client gave in its `initialize`, for its end hook (`SessionLog.client`)."""
        entry = self._entries.get(key)
        if entry is not None and entry.log.client is None:
            entry.log.client = name

    def register(self, key: str, *, owner: object = None) -> None:
        """Know a session before its first tool call, so that its end is graded even if it never calls one
        (stream connections when they open, HTTP sessions when the `initialize` answer names them)."""
        self._entries.setdefault(key, _Entry(owner=owner))

    async def _open(self, entry: _Entry, wait: float | None = None) -> None:
        """Open the entry's sandbox once one of the `max_sessions` slots is free (waiting `wait`, default
        `session_wait`, at most; `math.inf`: until one is)."""
        wait = self.session_wait if wait is None else wait
        if self._slots is not None:
            try:
                self._slots.acquire_nowait()
            except anyio.WouldBlock:
                with anyio.move_on_after(wait) as waited:
                    await self._slots.acquire()
                if waited.cancelled_caught:
                    raise MCPError(
                        code=INTERNAL_ERROR,
                        message=f"no sandbox free: this server keeps at most {self.max_sessions} sessions' sandboxes "
                        f"open and none was released within {wait:g} s; end a session, or retry later",
                        data=INFRA_ERROR_DATA,
                    ) from None
            entry.slot = True
        try:
            with anyio.CancelScope(shield=True):  # a cancelled request must not leak the sandbox it opened
                entry.sandbox = await self._run(self.backend.open, self.template)
        except Exception as e:
            self._release_slot(entry)
            raise MCPError(code=INTERNAL_ERROR, message=f"could not open a sandbox: {type(e).__name__}: {e}", data=INFRA_ERROR_DATA) from e
        self.opened += 1

    def _release_slot(self, entry: _Entry) -> None:
        if entry.slot:
            entry.slot = False
            assert self._slots is not None
            self._slots.release()

    # -- session ends ----------------------------------------------------------------------------
    async def end(self, key: str, *, remember: bool = False) -> None:
        """Close the session's sandbox (after any call in flight); `remember`: refuse later calls for the key."""
        self._activity.pop(key, None)
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        if remember:
            self._touch_ended(key)
        with anyio.CancelScope(shield=True):
            async with entry.lock:
                if entry.closed:
                    return
                entry.closed = True
                if entry.sandbox is None and entry.owned and self.shared is None and self.on_session_end is not None:
                    # A session that never called a tool still ended: grade the start state it left unchanged.
                    # A shutdown waits as long as it takes for a slot: every session is ending, so each one held
                    # is freed (with `session_wait`, 135 of 300 such sessions went ungraded at a SIGTERM).
                    try:
                        await self._open(entry, math.inf if self._closing else None)
                    except MCPError as e:
                        self._lost(f"{'ended by shutdown' if self._closing else 'ended'} without a tool call, with no sandbox to grade it on: {e}")
                try:
                    if entry.sandbox is not None and entry.owned:
                        await self._run(self._finish, entry.sandbox, entry.log)
                        self.closed += 1
                finally:
                    self._release_slot(entry)

    def _lost(self, why: str) -> None:
        """Record a session that ended ungraded: `on_session_lost(why)`, else one line on stderr."""
        if self.on_session_lost is not None:
            try:
                self.on_session_lost(why)
                return
            except Exception as e:  # the record must not be lost with it
                why += f" (and the session-lost hook failed: {type(e).__name__}: {e})"
        sys.stderr.write(f"[groundstate mcp] a session was not graded: {why}\n")  # one write: sessions end in threads

    def _finish(self, sandbox: Sandbox, log: SessionLog) -> None:
        try:
            if self.on_session_end is not None:
                self.on_session_end(sandbox, log)
        except Exception as e:  # a failing hook must not leak the sandbox
            sys.stderr.write(f"[groundstate mcp] session-end hook failed: {type(e).__name__}: {e}\n")  # one write: sessions end in threads
        finally:
            sandbox.close()

    async def _end_all(self, keys: list[str], *, remember: bool = False) -> None:
        # Together, not one by one: a session without a sandbox waits for a slot to be graded, which only
        # the others' ends can free.
        async with anyio.create_task_group() as tg:
            for key in keys:
                tg.start_soon(functools.partial(self.end, key, remember=remember))

    async def end_owner(self, owner: object) -> None:
        """End every session that `owner` served."""
        await self._end_all([key for key, entry in self._entries.items() if entry.owner is owner])

    async def aclose(self) -> None:
        """Close every open sandbox (the server stops): each session is graded, one that never called a tool waiting
        for a slot as long as it takes, since the others' ends free them; one that cannot be is `_lost`."""
        self._closing = True
        await self._end_all(list(self._entries))

    @property
    def open_count(self) -> int:
        return sum(1 for e in self._entries.values() if e.sandbox is not None and e.owned and not e.closed)

    @property
    def remembered(self) -> int:
        """Ended sessions whose keys are still refused."""
        return len(self._ended)

    def _touch_ended(self, key: str) -> None:
        """Note a request for (or the end of) an ended session, and forget the keys past `forget_ended_after`."""
        now = anyio.current_time()
        self._ended[key] = now
        self._ended.move_to_end(key)
        if self.forget_ended_after is not None:
            while self._ended and now - next(iter(self._ended.values())) > self.forget_ended_after:
                self._ended.popitem(last=False)

    # -- HTTP session activity (fed by the ASGI wrapper with the session's POSTs), for the idle reaper ----
    def begin(self, key: str) -> None:
        if key in self._ended:
            self._touch_ended(key)
        a = self._activity.setdefault(key, _Activity())
        a.in_flight += 1
        a.last_seen = anyio.current_time()

    def finish(self, key: str, status: int | None = None) -> None:
        if key in self._ended:
            self._touch_ended(key)
        a = self._activity.get(key)
        if a is not None:
            a.in_flight = max(0, a.in_flight - 1)
            a.last_seen = anyio.current_time()
            if status in (401, 403, 404) and a.in_flight == 0 and key not in self._entries:
                del self._activity[key]  # refused: no session of ours to keep track of

    async def reap_idle(self) -> None:
        """End HTTP sessions with no POST in flight for `idle_timeout` seconds, closing their sandboxes."""
        assert self.idle_timeout is not None
        while True:
            await anyio.sleep(min(max(self.idle_timeout / 4, 0.05), 30.0))
            now = anyio.current_time()
            idle = [key for key, a in self._activity.items() if a.in_flight == 0 and now - a.last_seen >= self.idle_timeout]
            await self._end_all(idle, remember=True)


MAX_CLIENT_NAME = 200  # characters of a client's declared name kept for its session's record


def _client_name(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The name the client gave in its `initialize` (`clientInfo.name`), as valid text of at most `MAX_CLIENT_NAME`
    characters (a client's name is its own to choose, and ends up in records), or None where it gave none."""
    params = ctx.session.client_params
    name = params.client_info.name if params is not None else None
    return valid_text(name)[:MAX_CLIENT_NAME] or None if isinstance(name, str) else None


def _session_key(ctx: ServerRequestContext[Any, Any]) -> str:
    """The session a request belongs to: its HTTP `Mcp-Session-Id`, else its stream connection."""
    scope: _Scope = ctx.lifespan_context
    request = ctx.request
    if request is None:  # stdio or in-memory: the connection is the session
        return scope.connection_key
    headers = getattr(request, "headers", None)
    sid = headers.get(SESSION_HEADER) if headers is not None else None
    if not sid:
        raise MCPError(
            code=INVALID_REQUEST,
            message="this server keeps one database sandbox per MCP session, and this request has none: connect "
            "with the initialize handshake (protocol 2025-11-25 or earlier; e.g. mcp.Client(..., mode='legacy')) "
            "so that the server assigns an Mcp-Session-Id",
            data=INFRA_ERROR_DATA,
        )
    return sid


def build_server(
    domain: Domain,
    backend: Backend,
    task: Task | None = None,
    *,
    sandbox: Sandbox | None = None,
    on_session_end: SessionEndHook | None = None,
    on_session_lost: SessionLostHook | None = None,
    sessions: SessionSandboxes | None = None,
    max_sessions: int | None = DEFAULT_MAX_SESSIONS,
    session_wait: float = DEFAULT_SESSION_WAIT,
) -> Server[_Scope]:
    """An MCP server (the SDK's low-level `Server`) for the domain's tools, one sandbox per session.

    The task's template is built here (`backend.prepare`, blocking); sandboxes are opened from it at each
    session's first tool call and closed when the session ends, after `on_session_end(sandbox, log)` (e.g. to
    grade it). `sandbox=` serves that one sandbox to every session instead and never closes it: the caller
    owns it (to run an in-process MCP round trip against an attempt's own sandbox and grade it afterwards).
    `sessions=` supplies the registry (the HTTP app passes one with an idle timeout); otherwise one is made
    with `max_sessions`/`session_wait`, and every stream connection is a session, graded when it ends.
    """
    connection_is_session = sessions is None  # stream connections: the lifespan is entered once per session
    if sessions is None:
        template = sandbox.template if sandbox is not None else backend.prepare(domain, task.patch if task else {})
        sessions = SessionSandboxes(
            domain,
            backend,
            template,
            on_session_end=on_session_end,
            on_session_lost=on_session_lost,
            sandbox=sandbox,
            max_sessions=max_sessions,
            session_wait=session_wait,
        )
    registry = sessions
    tools = [
        types.Tool(
            name=spec.name,
            description=spec.description,
            input_schema=spec.json_schema(),
            annotations=types.ToolAnnotations(read_only_hint=not spec.write, open_world_hint=False),
        )
        for spec in domain.tools.specs.values()
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_server: Server[_Scope]) -> AsyncIterator[_Scope]:
        # Entered once per stream connection (Server.run, in-process Client) and once for a whole HTTP app;
        # on the way out it closes the sandboxes of the sessions it served.
        scope = _Scope(registry)
        if connection_is_session:
            registry.register(scope.connection_key, owner=scope)
        async with contextlib.AsyncExitStack() as stack:
            if registry.idle_timeout is not None:
                tg = await stack.enter_async_context(anyio.create_task_group())
                tg.start_soon(registry.reap_idle)
                stack.callback(tg.cancel_scope.cancel)
            try:
                yield scope
            finally:
                with anyio.CancelScope(shield=True):
                    # a stream connection ends its own session; the HTTP app, entered once, ends all of them
                    await (registry.end_owner(scope) if connection_is_session else registry.aclose())

    async def list_tools(ctx: ServerRequestContext[_Scope], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        client = _client_name(ctx)
        if client is not None:
            with contextlib.suppress(MCPError):  # a session-less request: nothing to note it on
                registry.note_client(_session_key(ctx), client)
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[_Scope], params: types.CallToolRequestParams) -> types.CallToolResult:
        key = _session_key(ctx)
        try:
            arguments = params.arguments if params.arguments is not None else {}
            result = await registry.call(key, params.name, arguments, owner=ctx.lifespan_context, client=_client_name(ctx))
        except SessionEnded:
            raise MCPError(
                code=INVALID_REQUEST, message="this MCP session has ended and its sandbox is closed; start a new session", data=INFRA_ERROR_DATA
            ) from None
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.content)],
            is_error=not result.ok,
            _meta={WRITE_META_KEY: result.write},
        )

    server: Server[_Scope] = Server(
        f"groundstate-{domain.name}",
        version=_version(),
        description=domain.config.description or None,
        instructions=domain.system_prompt() or None,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )

    async def discover(ctx: ServerRequestContext[_Scope], params: types.RequestParams) -> types.DiscoverResult:
        # Over HTTP only the handshake era has sessions (and so sandboxes): advertise it alone, and the SDK's
        # `auto` clients fall back to `initialize`. Over a stream the connection is the session: both eras work.
        versions = list(HANDSHAKE_PROTOCOL_VERSIONS if ctx.request is not None else MODERN_PROTOCOL_VERSIONS)
        return types.DiscoverResult(
            supported_versions=versions,
            capabilities=server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=server.instructions,
        )

    server.add_request_handler("server/discover", types.RequestParams, discover)
    return server


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("groundstate")
    except Exception:
        return ""


# -- HTTP ----------------------------------------------------------------------------------------
class _StaticTokenVerifier:
    """The SDK's `TokenVerifier` protocol for one shared bearer token (compared in constant time)."""

    def __init__(self, token: str):
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if secrets.compare_digest(token.encode(), self._token):
            return AccessToken(token="", client_id="groundstate-mcp", scopes=[])
        return None


def _route_path(scope: Scope) -> str:
    """The request's path within the app, as Starlette routes it: without the `root_path` the app is mounted under."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class _PostAndDeleteOnly:
    """ASGI wrapper: at the MCP endpoint only POST and DELETE reach the SDK; any other method is answered 405 here.

    A GET is the client's event stream, which streamable HTTP lets a server without one refuse. This server writes to a
    client only in answer to a POST (no notifications, no requests to the client), so the stream would carry nothing,
    yet the SDK's clients hold one open all session long: a task, a response and a connection per session on each side
    (benchmarks/protocols.py measures what dropping it saves). The SDK's Python client tries the GET twice, a second
    apart, then goes on without it; its TypeScript client stops at the first 405.

    Any other method (HEAD, PUT, OPTIONS, ...) is refused here too: the SDK answers those 405 itself, but only after
    counting the request as the session's activity, so a client could keep a session alive in the SDK while this
    server, which counts only POST and DELETE, forgot that the session had ended (`SessionSandboxes.forget_ended_after`).
    """

    def __init__(self, app: ASGIApp, path: str):
        self.app, self.path = app, path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in ("POST", "DELETE") and _route_path(scope).rstrip("/") == self.path.rstrip("/"):
            headers = [(b"allow", b"POST, DELETE"), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 405, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)


class _SessionLifecycle:
    """ASGI wrapper: feeds HTTP session activity to the registry and closes a sandbox when its session is deleted."""

    def __init__(self, app: ASGIApp, sessions: SessionSandboxes):
        self.app, self.sessions = app, sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sid = next((v.decode("latin-1") for k, v in scope["headers"] if k == SESSION_HEADER.encode()), None)
        if not sid and scope["method"] == "POST":  # possibly an `initialize`: its answer names a new session
            await self.app(scope, receive, self._opening(send))
            return
        if not sid or scope["method"] not in ("POST", "DELETE"):
            await self.app(scope, receive, send)
            return
        status: int | None = None

        async def watch(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.sessions.begin(sid)
        try:
            await self.app(scope, receive, watch)
        finally:
            self.sessions.finish(sid, status)
            if scope["method"] == "DELETE" and status is not None and 200 <= status < 300:
                await self.sessions.end(sid, remember=True)

    def _opening(self, send: Send) -> Send:
        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and 200 <= message["status"] < 300:
                sid = next((v.decode("latin-1") for k, v in message.get("headers", []) if k.lower() == SESSION_HEADER.encode()), None)
                if sid:  # known from now on: graded when it ends or idles out, even without a tool call
                    self.sessions.register(sid)
                    self.sessions.begin(sid)
                    self.sessions.finish(sid)
            await send(message)

        return watch


def build_http_app(
    domain: Domain,
    backend: Backend,
    task: Task | None = None,
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    path: str = "/mcp",
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    on_session_end: SessionEndHook | None = None,
    on_session_lost: SessionLostHook | None = None,
    allow_remote: bool = False,
    max_sessions: int | None = DEFAULT_MAX_SESSIONS,
    session_wait: float = DEFAULT_SESSION_WAIT,
) -> ASGIApp:
    """The streamable-HTTP ASGI app: bearer-token protected, one sandbox per MCP session."""
    check_host(host, allow_remote)
    if not token:
        raise ValueError("an HTTP MCP server needs a bearer token")
    sessions = SessionSandboxes(
        domain,
        backend,
        backend.prepare(domain, task.patch if task else {}),
        on_session_end=on_session_end,
        on_session_lost=on_session_lost,
        idle_timeout=idle_timeout,
        max_sessions=max_sessions,
        session_wait=session_wait,
        forget_ended_after=idle_timeout + SESSION_MEMORY + ENDED_MARGIN,
    )
    server = build_server(domain, backend, task, sessions=sessions)
    base = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    app = server.streamable_http_app(
        streamable_http_path=path,
        # Each POST is answered with its JSON-RPC response as plain JSON, not an event stream of one message: this
        # server sends nothing while a request runs (no progress, no requests to the client), and the stream cost
        # a third of its CPU per session (benchmarks/protocols.py).
        json_response=True,
        host=host,
        session_idle_timeout=idle_timeout + SESSION_MEMORY,
        token_verifier=_StaticTokenVerifier(token),
        # Resource-server-only auth: the SDK's bearer middleware checks every request; no OAuth routes are added.
        auth=AuthSettings(issuer_url=base, resource_server_url=None),
    )
    return _PostAndDeleteOnly(_SessionLifecycle(app, sessions), path)


# -- serving -------------------------------------------------------------------------------------
async def _stdio(server: Server[_Scope], max_pending: int = DEFAULT_MAX_PENDING) -> None:
    async with anyio.create_task_group() as tg:

        async def on_signal() -> None:
            import signal

            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    tg.cancel_scope.cancel()  # unwinds Server.run, whose lifespan grades and closes the sandbox
                    return

        tg.start_soon(on_signal)
        async with stdio_streams(max_pending) as streams:
            await server.run(*streams, server.create_initialization_options())
        tg.cancel_scope.cancel()


async def _run_uvicorn(server: Any) -> None:
    """Run uvicorn to a graceful stop on SIGINT/SIGTERM, then return (so the backend is closed after it).

    uvicorn handles both signals while it serves and re-raises the one it caught once it has shut down (its
    lifespan closing every session's sandbox); no-op handlers installed here receive that re-raise.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        await server.serve()
        return
    previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        await server.serve()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


async def serve_async(
    domain: Domain,
    task: Task | None = None,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    *,
    backend: Backend | None = None,
    allow_remote: bool = False,
    path: str = "/mcp",
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    on_session_end: SessionEndHook | None = None,
    on_session_lost: SessionLostHook | None = None,
    max_sessions: int | None = DEFAULT_MAX_SESSIONS,
    session_wait: float = DEFAULT_SESSION_WAIT,
    max_pending: int = DEFAULT_MAX_PENDING,
) -> None:
    """Serve until stdin closes (stdio) or the process is interrupted (HTTP); see `serve`."""
    from groundstate.state.sqlite import SqliteBackend

    host = host.strip("[]")  # "[::1]" -> "::1"
    d, t, hook, lost = domain, task, on_session_end, on_session_lost
    be = backend if backend is not None else SqliteBackend()  # closed at the end only if created here
    try:
        if transport == "stdio":
            server = await anyio.to_thread.run_sync(
                lambda: build_server(d, be, t, on_session_end=hook, on_session_lost=lost, max_sessions=max_sessions, session_wait=session_wait)
            )
            await _stdio(server, max_pending)
        elif transport == "http":
            import uvicorn

            check_host(host, allow_remote)
            if not token:
                token = secrets.token_urlsafe(32)
                print(f"[groundstate mcp] bearer token: {token}", file=sys.stderr)
            app = await anyio.to_thread.run_sync(
                lambda: build_http_app(
                    d,
                    be,
                    t,
                    token=token,
                    host=host,
                    port=port,
                    path=path,
                    idle_timeout=idle_timeout,
                    on_session_end=hook,
                    on_session_lost=lost,
                    allow_remote=allow_remote,
                    max_sessions=max_sessions,
                    session_wait=session_wait,
                )
            )
            shown = f"[{host}]" if ":" in host else host
            print(
                f"[groundstate mcp] serving {d.name}{' task ' + t.id if t else ''} at http://{shown}:{port}{path} "
                "(send Authorization: Bearer <token>)",
                file=sys.stderr,
                flush=True,
            )
            # Without a graceful-shutdown limit uvicorn waits forever for requests still open (a tool call waiting for a
            # sandbox). log_config None: uvicorn's loggers keep no handler of their own (one writing to stderr on the
            # event loop stalled the server once a pipe nobody read was full) and reach the root logger's (`serve`:
            # `logging_to_stderr`).
            config = uvicorn.Config(
                app, host=host, port=port, log_level="warning", log_config=None, lifespan="on", timeout_graceful_shutdown=SHUTDOWN_GRACE
            )
            await _run_uvicorn(uvicorn.Server(config))
        else:
            raise ValueError(f"unknown transport {transport!r}: use stdio or http")
    finally:
        if backend is None:
            await anyio.to_thread.run_sync(be.close)


def serve(
    domain: Domain,
    task: Task | None = None,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    *,
    backend: Backend | None = None,
    allow_remote: bool = False,
    path: str = "/mcp",
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    on_session_end: SessionEndHook | None = None,
    on_session_lost: SessionLostHook | None = None,
    max_sessions: int | None = DEFAULT_MAX_SESSIONS,
    session_wait: float = DEFAULT_SESSION_WAIT,
    max_pending: int = DEFAULT_MAX_PENDING,
) -> None:
    """Serve a domain's tools (in the start state of `task`, if given) over MCP.

    `transport="stdio"`: one session, on this process's stdin/stdout. `transport="http"`: streamable HTTP at
    `http://host:port/mcp`, loopback only unless `allow_remote=True`, every request needing
    `Authorization: Bearer <token>` (a random token is generated and printed to stderr when none is given).
    `on_session_end(sandbox, log)` runs when each session ends, before its sandbox is closed (`groundstate serve --protocol mcp --task`
    grades it there and prints the verdict to stderr); `on_session_lost(why)` for a session that ended and could not be
    graded (no sandbox could be had for one that never called a tool), so that every session that ends is recorded.
    Limits: `max_sessions` sandboxes open at once, a first tool call waiting `session_wait` s for one before its
    error; HTTP sessions idle for `idle_timeout` s lose their sandbox; stdio serves `max_pending` requests at once.
    `backend` defaults to a new SQLite backend (closed on return); a backend passed in stays the caller's to close.
    The log (uvicorn's, the SDK's, warnings) goes to stderr through `logging_to_stderr`: a stderr nobody reads costs
    log lines, never a stalled server; the hooks' output is theirs to write.
    """
    if transport == "http":
        check_host(host, allow_remote)
    with logging_to_stderr():
        anyio.run(
            lambda: serve_async(
                domain,
                task,
                transport,
                host,
                port,
                token,
                backend=backend,
                allow_remote=allow_remote,
                path=path,
                idle_timeout=idle_timeout,
                on_session_end=on_session_end,
                on_session_lost=on_session_lost,
                max_sessions=max_sessions,
                session_wait=session_wait,
                max_pending=max_pending,
            ),
            backend_options={"use_uvloop": transport == "http" and _has_uvloop()},
        )


def _has_uvloop() -> bool:
    """uvloop (installed with the `serving` extras, as uvicorn's own `standard` set has it) runs the HTTP server's event
    loop in C: the SDK's session manager is mostly event-loop work (tasks and memory streams per session)."""
    import importlib.util

    return importlib.util.find_spec("uvloop") is not None
