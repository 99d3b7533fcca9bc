"""`groundstate serve-mcp --transport http` against a supervisor that keeps its stderr and never reads it, driven by the
MCP SDK's own client and raw sockets: the log blocks nothing (lines a full pipe cannot take are dropped and counted),
SIGTERM stops the server, and the verdict lines, its output, are never dropped: they wait in their own thread for a
reader, and a shutdown that cannot deliver them says so in its exit status."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

import httpx2  # noqa: E402  (installed with mcp)
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHOP = str(Path(__file__).parents[1] / "fixtures" / "shop")
SMALL_PIPE = 4096  # the least a pipe holds: a few lines fill it, as 64 KiB of them fill the default one
VERDICT = re.compile(r"^\[groundstate mcp\] session (\d+) ended: task shop-cancel reward=(\S+) ", re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _server(*options: str):
    """`serve-mcp --transport http --task shop-cancel`, its stderr a small pipe that nobody reads; yields the process,
    the endpoint and the token; kills the process if it is still up at the end."""
    port, token = _free_port(), secrets.token_urlsafe(16)
    command = [sys.executable, "-m", "groundstate.cli.mcp", "--domain", SHOP, "--task", "shop-cancel", "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen(
        [*command, *options],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "GROUNDSTATE_MCP_TOKEN": token},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    fcntl.fcntl(proc.stderr.fileno(), fcntl.F_SETPIPE_SZ, SMALL_PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        yield proc, url, token
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def _malformed(url: str, n: int) -> None:
    """`n` requests that are not HTTP: uvicorn answers each with 400 and logs a warning for it."""
    port = int(url.split(":")[2].split("/")[0])
    for i in range(n):
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
            assert s.recv(64).startswith(b"HTTP/1.1 400"), i


@contextlib.asynccontextmanager
async def _session(url: str, token: str):
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60, read=300)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as s,
    ):
        await s.initialize()
        yield s


def _run(fn, limit: float = 120.0):
    async def main():
        with anyio.fail_after(limit):
            return await fn()

    return anyio.run(main)


def test_malformed_requests_with_stderr_unread_never_block_the_server_and_a_late_reader_gets_every_verdict():
    # uvicorn logs a warning for every request that is not HTTP: before, it wrote them from the event loop, and the
    # server stopped answering after ~90 of them (the pipe was full), SIGTERM included
    with _server() as (proc, url, token):
        _malformed(url, 1200)  # more than the log's queue (1000 lines) and the pipe hold: some are dropped

        async def mid_session_sigterm():
            async with _session(url, token) as s:
                assert not (await s.call_tool("cancel_order", {"order_id": 1})).is_error
                proc.send_signal(signal.SIGTERM)  # the session is still open: the shutdown grades it
                # a supervisor that reads stderr only once it has asked the server to stop
                return await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=60)[1])

        err = _run(mid_session_sigterm).decode(errors="replace")
    assert proc.returncode == 0, err[-2000:]
    assert "Invalid HTTP request received" in err  # the log was written while it could be, the rest counted
    assert re.search(r"^\[groundstate\] \d+ log line\(s\) dropped: stderr was not read$", err, re.M), err[-2000:]
    assert VERDICT.findall(err) == [("1", "1")], err[-2000:]


def test_verdict_lines_are_never_dropped_and_never_stall_the_server_while_stderr_is_unread():
    # each verdict line is ~250 bytes: 40 sessions hold 10 KB, the pipe 4 KiB. Before, the line was written where
    # the session ended (the event loop, on SQLite), and the server stopped answering once the pipe was full
    n = 40
    with _server() as (proc, url, token):

        async def sessions():
            for _ in range(n):
                async with _session(url, token) as s:  # leaving it ends the session (DELETE): it is graded then
                    assert (await s.list_tools()).tools

        _run(sessions, limit=300)
        _malformed(url, 50)  # the server still answers; the log, unlike the verdicts, may be dropped
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1].decode(errors="replace")
    assert proc.returncode == 0, err[-2000:]
    assert VERDICT.findall(err) == [(str(i), "0") for i in range(1, n + 1)], err[-3000:]  # every one, in order, whole


def test_sigterm_stops_the_server_even_if_stderr_is_never_read_and_the_exit_status_says_a_verdict_was_not_written():
    with _server() as (proc, url, token):
        _malformed(url, 200)  # the pipe is full

        async def one_session():
            async with _session(url, token) as s:
                assert (await s.list_tools()).tools

        _run(one_session)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 1  # a hang check: the verdict line waited for a reader, for a bounded time
