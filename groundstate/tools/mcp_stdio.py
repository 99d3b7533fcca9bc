"""A bounded stdio transport for an MCP server: what one client on stdin/stdout can make the server hold.

The SDK's `stdio_server` reads every frame and starts a task for each request, so a client that does not read
its answers grows the server without bound; it drops a frame it cannot parse (one nesting deeper than its
JSON parser allows, or garbage) without an answer, leaving the client waiting; it reads a frame of any
length; and its stdin read cannot be abandoned, so SIGTERM hangs while the client keeps stdin open.
`stdio_streams()` reads and parses stdin itself (the SDK's transport still writes stdout):

- at most `max_pending` requests are served at once; a request beyond that, a frame nesting more than
  `MAX_NESTING` levels or longer than `MAX_FRAME` characters, and a frame that is not JSON-RPC are answered
  with a JSON-RPC error carrying the request id (found by a one-pass scan, never a recursive parse). These
  answers are written by the read loop, so while the client leaves answers unread the server stops reading:
  nothing queues without bound.
- stdin is read by a daemon thread, which never holds up the process's exit.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types
import pydantic
from mcp.server.stdio import stdio_server
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCRequest, JSONRPCResponse, RequestId

__all__ = ["DEFAULT_MAX_PENDING", "MAX_FRAME", "MAX_NESTING", "stdio_streams"]

DEFAULT_MAX_PENDING = 64  # requests served at once; more are refused until answers are read
MAX_NESTING = 64  # deepest nesting of objects/arrays in one frame (the SDK's parser refuses ~200+)
MAX_FRAME = 4 * 1024 * 1024  # characters in one frame (= the SDK's cap on an HTTP request body, in bytes)
_FRAME_HEAD = 4096  # of a frame too long, the characters kept to find its id


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+"|[{}\[\],:]')  # strings and structure; scalars need no token


def _scan(text: str) -> tuple[int, RequestId | None]:
    """The deepest nesting of a raw JSON text and its top-level `"id"` (a string or integer), found without
    parsing it: neither costs more than one pass, however deep the text nests."""
    depth = deepest = 0
    previous, key, request_id = "", None, None
    for m in _JSON_TOKEN.finditer(text):
        token = m.group()
        if token in ("{", "["):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("}", "]"):
            depth -= 1
        elif depth == 1 and token.startswith('"') and previous in ("{", ","):
            key = token
        elif depth == 1 and token == ":" and key == '"id"':
            rest = text[m.end() :]
            start = m.end() + len(rest) - len(rest.lstrip())
            if start < len(text) and (text[start] == '"' or text[start] in "-0123456789"):
                with contextlib.suppress(ValueError):  # a string or number decodes without recursion
                    value, _ = json.JSONDecoder().raw_decode(text, start)
                    if isinstance(value, (str, int)) and not isinstance(value, bool):
                        request_id = value
        previous = token
    return deepest, request_id


def _refusal(request_id: RequestId | None, code: int, message: str) -> SessionMessage:
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message)))


@dataclass
class _TooLong:
    """A frame longer than `MAX_FRAME`: its head only (the rest was read and dropped)."""

    head: str


def _parse(line: str) -> SessionMessage | None:
    """The frame's message, or None for a blank line; raises `_Refused` with the answer for a bad frame."""
    if not line.strip():
        return None
    depth, request_id = _scan(line)
    if depth > MAX_NESTING:
        raise _Refused(_refusal(request_id, INVALID_REQUEST, f"request nests {depth} levels deep; this server reads at most {MAX_NESTING}"))
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except pydantic.ValidationError as e:
        reason = "; ".join(err["msg"] for err in e.errors()[:3])
        raise _Refused(_refusal(request_id, PARSE_ERROR, f"not a JSON-RPC message: {reason}"[:500])) from None


class _Refused(Exception):
    def __init__(self, answer: SessionMessage):
        self.answer = answer


@contextlib.asynccontextmanager
async def _bounded(lines: Any, write_stream: Any, max_pending: int) -> AsyncIterator[tuple[Any, Any]]:
    """Streams for `Server.run` from stdin's `lines`: at most `max_pending` requests at once, each frame checked.

    A refused frame is answered at once, by the read loop. A request's slot is freed when its answer is
    written or when it settles unanswered (cancelled by the client).
    """
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    pending: Counter[RequestId] = Counter()
    reading = anyio.CancelScope()

    def settle(request_id: RequestId) -> None:
        if pending[request_id] > 0:
            pending[request_id] -= 1
            if not pending[request_id]:
                del pending[request_id]

    async def read() -> None:
        with reading, to_server:
            async for line in lines:
                try:
                    if isinstance(line, _TooLong):
                        raise _Refused(
                            _refusal(
                                _scan(line.head)[1], INVALID_REQUEST, f"frame longer than {MAX_FRAME} characters; this server reads no longer ones"
                            )
                        )
                    item = _parse(line)
                except _Refused as refused:
                    await write_stream.send(refused.answer)
                    continue
                if item is None:
                    continue
                message = item.message
                if isinstance(message, JSONRPCRequest):
                    if pending.total() >= max_pending:
                        await write_stream.send(
                            _refusal(
                                message.id,
                                INTERNAL_ERROR,
                                f"too many requests in flight: {max_pending} are still "
                                "unanswered on this connection; read their answers before sending more",
                            )
                        )
                        continue
                    pending[message.id] += 1

                    async def unanswered(request_id: RequestId = message.id) -> None:
                        settle(request_id)

                    item = SessionMessage(message, ServerMessageMetadata(on_request_unanswered=unanswered))
                await to_server.send(item)

    async def write() -> None:
        async with from_server:
            async for item in from_server:
                await write_stream.send(item)
                if isinstance(item.message, (JSONRPCResponse, JSONRPCError)) and item.message.id is not None:
                    settle(item.message.id)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            tg.start_soon(write)
            try:
                yield server_reads, server_writes
            finally:
                reading.cancel()
                server_writes.close()  # the writer relays the server's last answers, then ends
    finally:
        await write_stream.aclose()  # ours now (Server.run closed the one it was given)


class _StdinLines:
    """This process's stdin, frame by frame (`str`, or `_TooLong`), read by a daemon thread.

    The SDK reads stdin in a worker thread that a cancellation must wait for: while the client kept stdin
    open, SIGTERM graded the session and then hung on that read. A daemon thread does not hold up the exit.
    Meanwhile fd 0 reads the null device, so nothing else in the process (a tool, a child) consumes frames.
    """

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[Any](0)
        self._wire = os.dup(0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        token = anyio.lowlevel.current_token()  # anyio's public way (4.11 on) into this loop from a thread it did not start
        wire = io.TextIOWrapper(os.fdopen(os.dup(self._wire), "rb"), encoding="utf-8", errors="replace")

        def frames() -> Any:
            while line := wire.readline(MAX_FRAME + 1):
                if len(line) <= MAX_FRAME or line.endswith("\n"):
                    yield line
                    continue
                while (more := wire.readline(MAX_FRAME)) and not more.endswith("\n"):
                    pass  # drop the rest of the frame as it arrives: never more than MAX_FRAME held
                yield _TooLong(line[:_FRAME_HEAD])

        def pump() -> None:
            try:
                for frame in frames():
                    anyio.from_thread.run(self._send.send, frame, token=token)  # waits until it is read: no queue
            except Exception:  # noqa: BLE001 - the loop has finished or the reader left: nothing to deliver to
                return
            with contextlib.suppress(Exception):
                anyio.from_thread.run_sync(self._send.close, token=token)

        threading.Thread(target=pump, name="groundstate-mcp-stdin", daemon=True).start()

    def __aiter__(self) -> Any:
        return self._receive

    def restore(self) -> None:
        os.dup2(self._wire, 0)
        os.close(self._wire)


async def _no_input() -> AsyncIterator[str]:
    return
    yield


@contextlib.asynccontextmanager
async def stdio_streams(max_pending: int = DEFAULT_MAX_PENDING) -> AsyncIterator[tuple[Any, Any]]:
    """`(read_stream, write_stream)` over this process's stdin/stdout for `Server.run`, bounded as above."""
    if max_pending < 1:
        raise ValueError(f"max_pending must be at least 1, got {max_pending}")
    stdin = _StdinLines()
    try:
        # The SDK's transport writes stdout (and keeps stray prints off it); stdin is read above.
        async with (
            stdio_server(stdin=_no_input()) as (_, write_stream),  # type: ignore[arg-type]
            _bounded(stdin, write_stream, max_pending) as streams,
        ):
            yield streams
    finally:
        stdin.restore()
