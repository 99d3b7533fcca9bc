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

Both the server's environment and the group's termination are written here, on public APIs only (`os.killpg`): the
SDK's helpers for them are not part of its API.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TextIO

import anyio
import mcp_types
from anyio.abc import Process
from mcp import StdioServerParameters
from mcp.shared.message import SessionMessage

from groundstate.tools.fork_pool import ZygoteError, zygote_for

__all__ = ["INHERITED_ENV", "StdoutNoise", "server_environment", "stdio_transport", "terminate_group"]

log = logging.getLogger(__name__)

EXIT_GRACE_S = 2.0  # for the server to exit on its own once its stdin is closed
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL to the process group
DEFAULT_ZYGOTE_TIMEOUT_S = 30.0  # a zygote's imports, once per command (the benchmark's servers take 3-4 s)
NOISE_SAMPLE_CHARS = 200
# what a server inherits of this process's environment (as the SDK's stdio client passes it): what a program needs to
# run, never this process's secrets (API keys, DSNs); the server's spec adds its own
INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


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
    params: StdioServerParameters,
    errlog: TextIO | None = None,
    noise: StdoutNoise | None = None,
    *,
    fork: bool = False,
    startup_timeout: float = DEFAULT_ZYGOTE_TIMEOUT_S,
) -> AsyncIterator[tuple[anyio.abc.ObjectReceiveStream, anyio.abc.ObjectSendStream]]:
    """Start `params.command` in a new session and yield the (read, write) message streams `mcp.Client` takes.

    With `fork`, the server is forked from its command's zygote (`groundstate.tools.fork_pool`: its imports paid
    once per command, within `startup_timeout`), or started as a process where the command cannot fork; either way
    it is a fresh server leading its own session, stopped in the same way."""
    noise = noise if noise is not None else StdoutNoise()
    errlog = errlog if errlog is not None else sys.stderr
    server = await _forked(params, errlog, startup_timeout) if fork else None
    if server is None:
        server = _Spawned(
            await anyio.open_process(
                [params.command, *params.args], env=server_environment(params.env), cwd=params.cwd, stderr=errlog, start_new_session=True
            )
        )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        buffer = b""
        try:
            async with read_writer:
                async for chunk in server.stdout:
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
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await server.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the server stopped reading: let pending requests see the connection end

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_stdout)
        tg.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # a cancelled caller must not leave a live process group
                await _stop(server)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
                if noise.lines:
                    _report(noise, errlog)
            tg.cancel_scope.cancel()


class _Spawned:
    """A server started as a process of ours: its pipes, and the event loop reaps it."""

    def __init__(self, process: Process):
        assert process.stdin is not None and process.stdout is not None
        self.process, self.pid = process, process.pid
        self.stdin: anyio.abc.ByteSendStream = process.stdin
        self.stdout: anyio.abc.ByteReceiveStream = process.stdout

    async def close_input(self) -> None:
        await self.stdin.aclose()

    def exited(self) -> bool:
        return self.process.returncode is not None

    async def release(self) -> None:
        await self.stdout.aclose()
        with anyio.move_on_after(KILL_GRACE_S):
            await self.process.wait()


class _Half(anyio.abc.ByteSendStream):
    """The sending half of a socket stream: closing it ends the server's stdin (EOF), not its stdout."""

    def __init__(self, stream: anyio.abc.SocketStream):
        self.stream = stream

    async def send(self, item: bytes) -> None:
        await self.stream.send(item)

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self) -> None:
        with suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.stream.send_eof()


class _Forked:
    """A server forked by a zygote: one socket is its stdin and stdout; the zygote's kernel reaps it."""

    def __init__(self, pid: int, stream: anyio.abc.SocketStream):
        self.pid, self.stream = pid, stream
        self.stdin = _Half(stream)
        self.stdout: anyio.abc.ByteReceiveStream = stream

    async def close_input(self) -> None:
        await self.stdin.aclose()

    def exited(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                return f.read().rpartition(b")")[2].split()[0] == b"Z"  # a zombie has exited
        except FileNotFoundError:
            return True
        except OSError:
            return not _group_alive(self.pid)

    async def release(self) -> None:
        await self.stream.aclose()


async def _forked(params: StdioServerParameters, errlog: TextIO, timeout: float) -> _Forked | None:
    """A server forked from `params`' zygote, or None when that command does not fork (then it starts as a process)."""
    zygote = await anyio.to_thread.run_sync(zygote_for, params, server_environment(params.env), timeout)
    if zygote is None:
        return None
    errlog.flush()
    try:
        pid, sock = await anyio.to_thread.run_sync(zygote.fork, errlog.fileno())
    except ZygoteError as e:  # closed meanwhile (the pool keeps a few) or died: this attempt starts a process
        log.warning("MCP server %s: its zygote failed (%s); this attempt starts a fresh process", params.command, e)
        return None
    return _Forked(pid, await anyio.abc.UNIXSocketStream.from_socket(sock))


def server_environment(own: dict[str, str] | None = None) -> dict[str, str]:
    """A server process's environment: `INHERITED_ENV` from this process's, where set, then the server's `own`. A value
    that is a shell function definition (`() {...}`, Shellshock's form) is not inherited."""
    inherited = {name: value for name in INHERITED_ENV if (value := os.environ.get(name)) is not None and not value.startswith("()")}
    return inherited | (own or {})


async def _stop(server: _Spawned | _Forked) -> None:
    """Close stdin, give the server `EXIT_GRACE_S` to exit, then terminate its whole process group — always, so that
    whatever it spawned dies with it even when it exited cleanly — and release it."""
    await server.close_input()
    with anyio.move_on_after(EXIT_GRACE_S):
        while not server.exited():
            await anyio.sleep(0.01)
    await terminate_group(server.pid, KILL_GRACE_S)
    await server.release()


async def terminate_group(pgid: int, grace: float) -> None:
    """SIGTERM to process group `pgid`, then, when any of it is still there after `grace` seconds, SIGKILL to the rest.

    The server leads a session of its own, so its pid is the group's id (never `os.getpgid`, which fails once the
    leader is reaped while members live on); the group reaches what the server spawned, even after it exited. A
    member that may not be signalled (EPERM) is waited for all the same. The event loop reaps the leader; orphans
    are reaped by init, so a process that is PID 1 without reaping them waits out `grace`."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return  # the whole group is gone
    except PermissionError:
        pass  # some member may not be signalled by us: the others were, and the wait below still holds
    with anyio.move_on_after(grace):
        while _group_alive(pgid):
            await anyio.sleep(0.01)
        return
    with suppress(ProcessLookupError, PermissionError):  # gone meanwhile, or not ours to kill
        os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is left: only ESRCH says none is (EPERM says one is, unsignallable)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _report(noise: StdoutNoise, errlog: TextIO) -> None:
    message = noise.summary()
    log.warning("MCP server process: %s", message)
    try:
        errlog.write(f"[groundstate] {message}\n")
        errlog.flush()
    except (OSError, ValueError):
        pass  # the log is closed already: the warning above still says it
