"""A toolset backed by an MCP server, for the episode loop in place of a domain's `Toolset`.

    async with McpToolset.stdio(sys.executable, ["-m", "groundstate.cli.mcp", "--domain", "retail"]) as tools:
        tools.openai_schemas()                    # the server's tools/list, in the OpenAI `tools` format
        r = await tools.acall("get_order", {"order_id": 1})   # -> ToolResult(ok, content, write)

Built on the official MCP SDK's `Client` (stdio subprocess, streamable HTTP with a bearer token, or an
in-process server). What the agent did wrong comes back as a result, never an exception: an `isError`
result, a JSON-RPC error from the server, unknown tools and malformed arguments all become
`ToolResult(ok=False, content="error: ...")`. What is not the agent's doing raises instead, for the runner to
record as a system error: `McpToolsetError` for a closed connection, a timed-out request, an HTTP session the server
no longer knows (its 404, as after a restart) or a JSON-RPC error that groundstate's server marks as infrastructure
(no sandbox could be opened, no session); a transport that
fails outright (an HTTP server gone) is torn down by the SDK, and its exception leaves the `async with`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any, TextIO

from mcp import Client, MCPError, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from groundstate.tools.mcp_stdio import MAX_NESTING
from groundstate.tools.stdio_transport import StdoutNoise, stdio_transport
from groundstate.types import ToolResult

__all__ = ["McpToolset", "McpToolsetError", "tls_context"]

WRITE_META_KEY = "groundstate/write"  # = mcp_server.WRITE_META_KEY: set by groundstate's own MCP server
SESSION_HEADER = "mcp-session-id"  # streamable HTTP's session header (= mcp_server.SESSION_HEADER)
INFRA_KEY = "groundstate/infrastructure"  # in mcp_server.INFRA_ERROR_DATA: the error is not the agent's doing
DEFAULT_STARTUP_TIMEOUT_S = 30.0  # a stdio server's start-up: spawn, initialize, tools/list (the SDK's servers take 1-4 s)


class McpToolsetError(RuntimeError):
    """The MCP connection failed (closed, timed out): an infrastructure failure, not the agent's."""


class McpToolset:
    """The tools of a connected MCP server. Use one of the async context managers to get one."""

    def __init__(self, client: Client, tools: Sequence[types.Tool]):
        self.client = client
        self.tools: dict[str, types.Tool] = {t.name: t for t in tools}
        # set by `http` when the server answers a POST of this session 404: it no longer knows the session (its
        # restart, its expiry), and what fails from then on is not the agent's doing
        self.session_lost = False

    # -- connecting ----------------------------------------------------------------------------
    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        target: Any,
        *,
        mode: str = "auto",
        read_timeout_seconds: float | None = None,
        startup_timeout: float | None = None,
        noise: StdoutNoise | None = None,
    ) -> AsyncIterator[McpToolset]:
        """Connect through anything `mcp.Client` accepts (a transport, a URL, `StdioServerParameters`, a server object).

        `startup_timeout` bounds the whole start-up — connecting, the initialize handshake and tools/list — on its
        own (a server that never answers, or answers garbage, raises `McpToolsetError` once it runs out).
        """
        async with contextlib.AsyncExitStack() as stack:
            try:
                async with asyncio.timeout(startup_timeout) as scope:
                    client = await stack.enter_async_context(Client(target, mode=mode, read_timeout_seconds=read_timeout_seconds))
                    toolset = cls(client, [])
                    await toolset.refresh()
            except TimeoutError:
                if not scope.expired():
                    raise
                extra = f"; {noise.summary()}" if noise is not None and noise.lines else ""
                raise McpToolsetError(
                    f"the MCP server did not finish start-up (initialize, tools/list) within its start-up bound of {startup_timeout:g} s{extra}"
                ) from None
            yield toolset

    @classmethod
    @contextlib.asynccontextmanager
    async def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        *,
        cwd: str | None = None,
        errlog: TextIO | None = None,
        mode: str = "auto",
        read_timeout_seconds: float | None = None,
        startup_timeout: float | None = DEFAULT_STARTUP_TIMEOUT_S,
        fork: bool = False,
    ) -> AsyncIterator[McpToolset]:
        """Spawn `command args…` in a session of its own and talk MCP over its stdin/stdout
        (`groundstate.tools.stdio_transport`): start-up is bounded by `startup_timeout`, each request by
        `read_timeout_seconds`; on exit the server's whole process group is stopped, whatever it spawned included.
        With `fork`, a Python server is forked from a zygote that imported its dependencies once
        (`groundstate.tools.fork_pool`; the zygote's own start-up also within `startup_timeout`).

        The child gets the SDK's minimal environment (PATH, HOME, …) plus `env`; its stderr goes to `errlog`.
        """
        params = StdioServerParameters(command=command, args=list(args), env=env, cwd=cwd)
        noise = StdoutNoise()
        transport = stdio_transport(params, errlog, noise, fork=fork, startup_timeout=startup_timeout or DEFAULT_STARTUP_TIMEOUT_S)
        async with cls.connect(
            transport, mode=mode, read_timeout_seconds=read_timeout_seconds, startup_timeout=startup_timeout, noise=noise
        ) as toolset:
            yield toolset

    @classmethod
    @contextlib.asynccontextmanager
    async def http(
        cls,
        url: str,
        token: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
        read_timeout: float = 300.0,
        mode: str = "auto",
        read_timeout_seconds: float | None = None,
    ) -> AsyncIterator[McpToolset]:
        """Connect to a streamable-HTTP MCP server, sending `Authorization: Bearer <token>` when a token is given.

        The session is ended (HTTP DELETE) on exit, which is when groundstate's server closes its sandbox.
        """
        import httpx2

        all_headers = dict(headers or {})
        if token:
            all_headers["Authorization"] = f"Bearer {token}"
        connected: list[McpToolset] = []

        async def note_lost_session(response: httpx2.Response) -> None:
            # streamable HTTP: a server answers 404 to a request naming a session it does not know
            # (to a POST only: a proxy or a server that routes only POSTs may answer the client's GET stream 404)
            if response.status_code == 404 and response.request.method == "POST" and SESSION_HEADER in response.request.headers and connected:
                connected[0].session_lost = True

        hooks = {"response": [note_lost_session]}
        async with (
            httpx2.AsyncClient(
                headers=all_headers, timeout=httpx2.Timeout(timeout, read=read_timeout), verify=tls_context(), event_hooks=hooks
            ) as http,
            cls.connect(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=read_timeout_seconds) as toolset,
        ):
            connected.append(toolset)
            yield toolset

    @classmethod
    def in_process(cls, server: Any, *, mode: str = "auto") -> contextlib.AbstractAsyncContextManager[McpToolset]:
        """Connect to a server object in this process (no subprocess, no socket), e.g. `build_server(..., sandbox=s)`."""
        return cls.connect(server, mode=mode)

    async def refresh(self) -> None:
        """Re-read the server's tool list (all pages)."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        try:
            while True:
                page = await self.client.list_tools(cursor=cursor, cache_mode="refresh")
                tools += page.tools
                cursor = page.next_cursor
                if not cursor:
                    break
        except MCPError as e:
            raise McpToolsetError(f"tools/list failed: {e.message}") from e
        self.tools = {t.name: t for t in tools}

    # -- the Toolset surface the episode loop uses ---------------------------------------------
    @property
    def instructions(self) -> str | None:
        """The server's instructions (groundstate's server sends the domain's policy)."""
        return self.client.instructions

    def __contains__(self, name: str) -> bool:
        return name in self.tools

    def __len__(self) -> int:
        return len(self.tools)

    def names(self) -> list[str]:
        return list(self.tools)

    def openai_schemas(self, allowed: list[str] | None = None) -> list[dict[str, Any]]:
        """The tools in the OpenAI / Hugging Face chat-template `tools` format (as `Toolset.openai_schemas`)."""
        return [
            {"type": "function", "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema}}
            for n, t in self.tools.items()
            if allowed is None or n in allowed
        ]

    def may_write(self, name: str) -> bool:
        """Whether a tool may change state, from its `readOnlyHint` (unknown: assume it may)."""
        tool = self.tools.get(name)
        return not (tool is not None and tool.annotations is not None and tool.annotations.read_only_hint)

    async def acall(self, name: str, arguments: Any) -> ToolResult:
        """Call a tool; failures the agent caused come back as `ToolResult(ok=False, "error: ...")`.

        `arguments` is a dict or a JSON string (as a model emits it). Raises `McpToolsetError` when the failure
        is not the agent's (see the module docstring).
        """
        write = self.may_write(name)
        if name not in self.tools:
            return ToolResult(False, f"error: unknown tool {name!r}; available tools: {', '.join(self.tools)}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                return ToolResult(False, f"error: arguments of {name} are not valid JSON: {e.msg}", write)
            except RecursionError:
                return ToolResult(False, f"error: arguments of {name} nest deeper than {MAX_NESTING} levels", write)
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return ToolResult(False, f"error: arguments of {name} must be a JSON object, got {type(arguments).__name__}", write)
        problem = _unsendable(arguments)
        if problem is not None:  # the agent's arguments, refused here: sent, they broke the client or its connection
            return ToolResult(False, f"error: arguments of {name} {problem}", write)
        try:
            result = await self.client.call_tool(name, arguments)
        except MCPError as e:
            if e.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT) or self.session_lost or (isinstance(e.data, dict) and e.data.get(INFRA_KEY)):
                raise McpToolsetError(f"MCP call of {name} failed: {e.message}") from e
            return ToolResult(False, f"error: {name} failed: {e.message}", write)
        meta = result.meta or {}
        if isinstance(meta.get(WRITE_META_KEY), bool):
            write = meta[WRITE_META_KEY]
        content = _text(result)
        if result.is_error:
            return ToolResult(False, content if content.startswith("error:") else f"error: {content}", write)
        return ToolResult(True, content, write)


def _unsendable(arguments: dict[str, Any]) -> str | None:
    """Why `arguments` cannot travel as a JSON-RPC request, or None: nested deeper than `MAX_NESTING` (what our stdio
    server reads; the SDK's serializer raises past ~250 levels, the stdlib's past ~1,000), a non-finite number, text that
    is not valid Unicode (a lone surrogate killed the HTTP transport: every later call failed), or a value JSON has no
    type for."""
    level: list[tuple[Any, int]] = [(arguments, 1)]
    while level:
        value, depth = level.pop()
        if isinstance(value, (dict, list, tuple)):
            if depth > MAX_NESTING:
                return f"nest deeper than {MAX_NESTING} levels"
            level += [(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value)]
    try:
        json.dumps(arguments, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (ValueError, TypeError) as e:  # UnicodeEncodeError is a ValueError
        return f"cannot be sent as JSON: {type(e).__name__}: {str(e)[:200]}"
    return None


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The HTTP clients' default certificate-verifying TLS context, built once per process and shared: building one
    loads the trust store, 26 ms here, which was most of an MCP-over-HTTP session's client CPU."""
    import httpx2

    return httpx2.create_ssl_context()


def _text(result: types.CallToolResult) -> str:
    """What the agent reads: the text blocks, joined; other blocks (and structured-only results) as JSON."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, default=str, sort_keys=True, ensure_ascii=False))
    return "\n".join(parts)
