"""The stdio transport to an MCP server process that groundstate starts: its process group dies with it, and
what it writes to stdout that is not MCP is counted, never echoed.

    async with stdio_transport(params, errlog, noise) as (read_stream, write_stream):
        ...   # hand the streams to `mcp.Client`

The MCP SDK's own `stdio_client` leaves two gaps this one closes. It kills the server's process tree only
when the server outlives its grace period, so processes a server spawned outlive a server that exits
cleanly; here the server starts in a session of its own and the whole process group is terminated (SIGTERM,
then SIGKILL) on every exit. And it logs a traceback for every stdout line that is not a JSON-RPC message
(a server printing 200,000 lines made a 180 MB log); here such lines are counted in `StdoutNoise`, the
first one kept, and summarised once, in the server's error log and as one warning, when the transport closes.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TextIO

import anyio
import mcp_types
from anyio.abc import Process
from mcp import StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

__all__ = ["StdoutNoise", "stdio_transport"]

log = logging.getLogger(__name__)

EXIT_GRACE_S = 2.0  # for the server to exit on its own once its stdin is closed
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL to the process group
NOISE_SAMPLE_CHARS = 200


class StdoutNoise:
    """Lines a server wrote to stdout that are not JSON-RPC messages: counted, the first one kept."""

    def __init__(self) -> None:
        self.lines = 0
        self.first: str | None = None

    def add(self, line: str) -> None:
        self.lines += 1
        if self.first is None:
            self.first = line[:NOISE_SAMPLE_CHARS]

    def summary(self) -> str:
        """One sentence for a log or an error message; empty when there was no noise."""
        if not self.lines:
            return ""
        return f"the server wrote {self.lines} line(s) to stdout that are not MCP messages (ignored; the first: {self.first!r})"


@asynccontextmanager
async def stdio_transport(
    params: StdioServerParameters, errlog: TextIO | None = None, noise: StdoutNoise | None = None
) -> AsyncIterator[tuple[anyio.abc.ObjectReceiveStream, anyio.abc.ObjectSendStream]]:
    """Start `params.command` in a new session and yield the (read, write) message streams `mcp.Client` takes."""
    noise = noise if noise is not None else StdoutNoise()
    errlog = errlog if errlog is not None else sys.stderr
    process = await anyio.open_process(
        [params.command, *params.args], env=get_default_environment() | (params.env or {}), cwd=params.cwd, stderr=errlog, start_new_session=True
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        assert process.stdout is not None
        buffer = b""
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for raw in lines:
                        line = raw.decode("utf-8", errors="replace").strip()
                        if not line:
                            continue
                        try:
                            message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                        except ValueError:
                            noise.add(line)
                            continue
                        await read_writer.send(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # our own shutdown, or the session went away: the process is stopped below either way

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the server stopped reading: let pending requests see the connection end

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_stdout)
        tg.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # a cancelled caller must not leave a live process group
                await _stop(process)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
                if noise.lines:
                    _report(noise, errlog)
            tg.cancel_scope.cancel()


async def _stop(process: Process) -> None:
    """Close stdin, give the server `EXIT_GRACE_S` to exit, then terminate its whole process group — always, so that
    whatever it spawned dies with it even when it exited cleanly — and reap it."""
    assert process.stdin is not None and process.stdout is not None
    await process.stdin.aclose()
    with anyio.move_on_after(EXIT_GRACE_S):
        while process.returncode is None:
            await anyio.sleep(0.01)
    await terminate_posix_process_tree(process, KILL_GRACE_S)  # SIGTERM to the group, SIGKILL to what is left
    await process.stdout.aclose()
    with anyio.move_on_after(KILL_GRACE_S):
        await process.wait()


def _report(noise: StdoutNoise, errlog: TextIO) -> None:
    message = noise.summary()
    log.warning("MCP server process: %s", message)
    try:
        errlog.write(f"[groundstate] {message}\n")
        errlog.flush()
    except (OSError, ValueError):
        pass  # the log is closed already: the warning above still says it
