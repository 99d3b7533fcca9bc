"""MCP: the domain's tools served over stdio and streamable HTTP, one sandbox per session, and McpToolset.

Servers run as `python -m groundstate.cli.mcp` subprocesses (stdio, and one HTTP server on a free loopback
port); clients are the official SDK's `ClientSession` + `stdio_client` / `streamable_http_client`, `mcp.Client`
and our `McpToolset`. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

mcp = pytest.importorskip("mcp")

import httpx2  # noqa: E402  (installed with mcp)
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from groundstate.grading.grader import grade  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.tools.mcp_client import McpToolset, McpToolsetError  # noqa: E402
from groundstate.tools.mcp_server import SessionEnded, SessionSandboxes, build_http_app, build_server, check_host  # noqa: E402
from groundstate.worlds.domain import load_domain  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHOP = str(Path(__file__).parents[1] / "fixtures" / "shop")
TASK = "shop-cancel"  # patch: order 1 is pending
SERVER_ARGS = ["-m", "groundstate.cli.mcp", "--domain", SHOP, "--task", TASK]
ENV = {"PYTHONPATH": str(ROOT)}


def run(fn, limit: float = 25.0):
    async def main():
        with anyio.fail_after(limit):
            return await fn()

    return anyio.run(main)


def stdio_params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=SERVER_ARGS, env=ENV, cwd=str(ROOT))


def text(result) -> str:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.content[0].text


@pytest.fixture(scope="module")
def shop():
    return load_domain(SHOP)


# -- stdio, with the SDK's own ClientSession ---------------------------------------------------------
def test_stdio_lists_specs_calls_tools_and_isolates_sessions(shop):
    """Two server processes: tools/list is the ToolSpecs, calls write, bad calls are isError, sessions are isolated."""

    async def main():
        async with (
            stdio_client(stdio_params()) as (ra, wa),
            stdio_client(stdio_params()) as (rb, wb),
            ClientSession(ra, wa) as a,
            ClientSession(rb, wb) as b,
        ):
            await a.initialize()
            await b.initialize()

            listed = (await a.list_tools()).tools
            assert [t.name for t in listed] == shop.tools.names()
            for t in listed:
                spec = shop.tools[t.name]
                assert t.description == spec.description
                assert t.input_schema == spec.json_schema()
                assert t.annotations.read_only_hint is (not spec.write)

            r = await a.call_tool("cancel_order", {"order_id": 1})
            assert not r.is_error and json.loads(text(r)) == {"order_id": 1, "status": "cancelled"}
            assert r.meta["groundstate/write"] is True
            r = await a.call_tool("get_order", {"order_id": 1})
            assert not r.is_error and json.loads(text(r))["status"] == "cancelled"

            # session B (another process, another sandbox) still sees the task's start state
            r = await b.call_tool("get_order", {"order_id": 1})
            assert json.loads(text(r))["status"] == "pending"

            r = await a.call_tool("get_order", {"order_id": "abc"})
            assert r.is_error and text(r).startswith("error: invalid arguments for get_order: order_id:")
            r = await a.call_tool("get_order", {})
            assert r.is_error and "order_id: Field required" in text(r)
            r = await a.call_tool("cancel_order", {"order_id": 1})
            assert r.is_error and text(r) == "error: order 1 is cancelled and cannot be cancelled"
            r = await a.call_tool("no_such_tool", {})
            assert r.is_error and text(r).startswith("error: unknown tool 'no_such_tool'")
            r = await a.call_tool("broken_tool", {"order_id": 1})
            assert r.is_error and "RuntimeError: bug in tool" in text(r)

    run(main)


# -- HTTP: one server subprocess, many sessions ---------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    port, token = _free_port(), secrets.token_urlsafe(16)
    log = tmp_path_factory.mktemp("mcp") / "stderr.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, *SERVER_ARGS, "--transport", "http", "--port", str(port)],
            cwd=ROOT,
            env={**os.environ, **ENV, "GROUNDSTATE_MCP_TOKEN": token},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx2.post(url, json={}, timeout=1)
            break
        except httpx2.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"HTTP MCP server did not start: {log.read_text()}")
            time.sleep(0.1)
    yield {"url": url, "token": token, "log": log, "proc": proc}
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def _ended_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if " ended: task " in line]


def _wait_for_ended(log: Path, n: int, timeout: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(_ended_lines(log)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return _ended_lines(log)


def test_http_requires_the_bearer_token(http_server):
    url = http_server["url"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    hdrs = {"Accept": "application/json, text/event-stream"}
    assert httpx2.post(url, json=body, headers=hdrs).status_code == 401
    r = httpx2.post(url, json=body, headers={**hdrs, "Authorization": "Bearer not-the-token"})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")

    async def main():
        with pytest.raises(BaseExceptionGroup) as refused:  # the SDK's task group wraps the refusal
            async with McpToolset.http(url, token="not-the-token"):
                pass
        assert refused.group_contains(MCPError, match="error response")

    run(main)


def test_http_offers_no_event_stream(http_server):
    """A GET of the endpoint is 405 with `Allow` (the server sends nothing unprompted, so it holds no stream per
    session); the SDK's client takes the 405 and its session works to the end, graded as it leaves."""
    url, token, log = http_server["url"], http_server["token"], http_server["log"]
    before = len(_ended_lines(log))
    for headers in ({"Authorization": f"Bearer {token}"}, {}):
        r = httpx2.get(url, headers={**headers, "Accept": "text/event-stream"})
        assert r.status_code == 405 and r.headers["allow"] == "POST, DELETE" and r.content == b"", r
    assert httpx2.get(url.rstrip("/") + "-not-mcp", headers={"Authorization": f"Bearer {token}"}).status_code == 404
    seen: list[tuple[str, int]] = []

    async def note(response: httpx2.Response) -> None:
        seen.append((response.request.method, response.status_code))

    async def main():
        hooks = {"response": [note]}
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30), event_hooks=hooks) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            assert not (await s.call_tool("cancel_order", {"order_id": 1})).is_error
            with anyio.fail_after(10):  # the client's GET runs beside the session: wait for its answer
                while not any(method == "GET" for method, _ in seen):
                    await anyio.sleep(0.01)

    run(main)
    assert ("GET", 405) in seen and all(status < 300 for method, status in seen if method != "GET"), seen
    assert "reward=1" in _wait_for_ended(log, before + 1)[before]


def test_a_get_is_405_where_the_app_is_mounted_under_a_prefix(shop):
    """Mounted under a prefix (`root_path`, as Starlette's `Mount` and a proxy's `--root-path` set it), the endpoint's
    GET is still 405: the path is compared as Starlette routes it."""
    app = build_http_app(shop, SqliteBackend(), shop.task("shop-cancel"), token="t")

    async def main():
        transport = httpx2.ASGITransport(app=app, root_path="/tools")
        async with httpx2.AsyncClient(transport=transport, base_url="http://testserver") as client:
            with anyio.fail_after(10):
                r = await client.get("/tools/mcp", headers={"Authorization": "Bearer t", "Accept": "text/event-stream"})
            assert r.status_code == 405 and r.headers["allow"] == "POST, DELETE", r

    run(main)


def test_http_concurrent_sessions_are_isolated_and_released(http_server):
    """Two ClientSessions on ONE HTTP server: each gets its own sandbox, closed (and graded) when the session ends."""
    url, token, log = http_server["url"], http_server["token"], http_server["log"]
    before = len(_ended_lines(log))

    async def session_calls(a_wrote: anyio.Event, role: str, out: dict) -> None:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300)) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            if role == "A":
                r = await s.call_tool("cancel_order", {"order_id": 1})
                assert not r.is_error, text(r)
                a_wrote.set()
                out["A"] = json.loads(text(await s.call_tool("get_order", {"order_id": 1})))["status"]
            else:
                await a_wrote.wait()
                out["B"] = json.loads(text(await s.call_tool("get_order", {"order_id": 1})))["status"]
                bad = await s.call_tool("cancel_order", {"order_id": "one"})
                assert bad.is_error and text(bad).startswith("error: invalid arguments for cancel_order")

    async def main():
        out: dict = {}
        a_wrote = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(session_calls, a_wrote, "A", out)
            tg.start_soon(session_calls, a_wrote, "B", out)
        return out

    assert run(main) == {"A": "cancelled", "B": "pending"}
    # leaving each session sends DELETE: both sandboxes are closed, after grading their final states
    ended = _wait_for_ended(log, before + 2)[before:]
    assert sorted(line.split("reward=")[1][0] for line in ended) == ["0", "1"], ended


def test_mcp_toolset_over_http_and_sdk_client_eras(http_server, shop):
    url, token = http_server["url"], http_server["token"]

    async def main():
        async with McpToolset.http(url, token=token) as a, McpToolset.http(url, token=token) as b:
            # the SDK's auto mode probes server/discover; over HTTP this server only offers the handshake era
            assert a.client.protocol_version == "2025-11-25"
            assert a.openai_schemas() == shop.tools.openai_schemas()
            r = await a.acall("cancel_order", {"order_id": 1})
            assert r.ok and r.write and json.loads(r.content)["status"] == "cancelled"
            assert json.loads((await b.acall("get_order", {"order_id": 1})).content)["status"] == "pending"
            assert json.loads((await a.acall("get_order", '{"order_id": 1}')).content)["status"] == "cancelled"

        # a client pinned to the session-less 2026-07-28 protocol is told why its call cannot be served
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
            Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as c,
        ):
            assert [t.name for t in (await c.list_tools()).tools] == shop.tools.names()
            with pytest.raises(MCPError, match="one database sandbox per MCP session") as e:
                await c.call_tool("get_order", {"order_id": 1})
            assert e.value.data == {"groundstate/infrastructure": True}
        # ... which McpToolset raises (a system error for the runner), rather than showing it to the agent
        async with McpToolset.http(url, token=token, mode="2026-07-28") as pinned:
            assert "get_order" in pinned
            with pytest.raises(McpToolsetError, match="one database sandbox per MCP session"):
                await pinned.acall("get_order", {"order_id": 1})

    run(main)


def test_http_session_without_tool_calls_is_graded(http_server):
    """An HTTP session that only lists the tools is graded when it ends (DELETE), like a stdio one: 0."""
    url, token, log = http_server["url"], http_server["token"], http_server["log"]
    before = len(_ended_lines(log))

    async def main():
        async with _http_session(url, token) as s:
            assert (await s.list_tools()).tools

    run(main)
    ended = _wait_for_ended(log, before + 1)[before:]
    assert len(ended) == 1 and "reward=0" in ended[0], ended


# -- McpToolset over stdio -------------------------------------------------------------------------------
def test_mcp_toolset_over_stdio(shop):
    async def main():
        async with McpToolset.stdio(sys.executable, SERVER_ARGS, env=ENV, cwd=str(ROOT)) as tools:
            assert tools.client.protocol_version == "2026-07-28"  # over a stream both eras work: the process is the session
            assert tools.names() == shop.tools.names()
            assert "cancel_order" in tools and "nope" not in tools
            assert tools.openai_schemas() == shop.tools.openai_schemas()
            assert tools.openai_schemas(["get_order"]) == shop.tools.openai_schemas(["get_order"])
            assert tools.instructions == shop.system_prompt()

            r = await tools.acall("cancel_order", {"order_id": 1})
            assert r.ok and r.write and json.loads(r.content) == {"order_id": 1, "status": "cancelled"}
            r = await tools.acall("get_order", {"order_id": 1})
            assert r.ok and not r.write and json.loads(r.content)["status"] == "cancelled"

            r = await tools.acall("get_order", {"order_id": "abc"})
            assert not r.ok and r.content.startswith("error: invalid arguments for get_order: order_id:")
            r = await tools.acall("get_order", "{not json")
            assert not r.ok and r.content.startswith("error: arguments of get_order are not valid JSON")
            r = await tools.acall("get_order", [1])
            assert not r.ok and r.content == "error: arguments of get_order must be a JSON object, got list"
            r = await tools.acall("nope", {})
            assert not r.ok and r.content.startswith("error: unknown tool 'nope'; available tools: get_order")
            nested: object = 1
            for _ in range(63):  # the arguments 64 levels deep: sent, in a frame deeper than the server reads
                nested = [nested]
            # the server refuses the frame (`mcp_stdio.MAX_NESTING`): the agent's doing, a failed call, not a system error
            r = await tools.acall("get_order", {"order_id": nested})
            assert not r.ok and "request nests" in r.content, r

    run(main)


# -- in process: the episode's own sandbox, session lifecycle, idle reaping ---------------------------------------
def test_in_process_server_on_an_attempts_sandbox_grades_it(shop):
    backend = SqliteBackend()
    task = shop.task(TASK)
    sandbox = backend.open(backend.prepare(shop, task.patch))

    async def main():
        async with McpToolset.in_process(build_server(shop, backend, task, sandbox=sandbox)) as tools:
            r = await tools.acall("cancel_order", {"order_id": 1})
            assert r.ok and r.write

    run(main)
    assert not sandbox.closed  # the caller owns it
    assert grade(task, sandbox).reward == 1
    sandbox.close()


def test_mcp_results_equal_direct_toolset_results(shop):
    """Through MCP the agent reads exactly what Toolset.call returns, failures included."""
    backend = SqliteBackend()
    task = shop.task(TASK)
    calls = [
        ("get_order", {"order_id": 1}),
        ("cancel_order", {"order_id": 1}),
        ("cancel_order", {"order_id": 1}),
        ("get_order", {"order_id": "abc"}),
        ("get_order", {"order_id": True}),
        ("get_order", {}),
        ("cancel_order", "{bad json"),
        ("get_order", '{"order_id": 1}'),
        ("set_tier", {"customer_id": 1, "tier": "platinum"}),
        ("add_note", {"customer_id": 1, "body": "ünïcode ✓"}),
        ("broken_tool", {"order_id": 2}),
        ("no_such_tool", {}),
        ("get_order", {"order_id": 1, "extra": 1}),
    ]
    direct = backend.open(backend.prepare(shop, task.patch))
    expected = [shop.tools.call(direct.connection, name, args) for name, args in calls]

    async def main():
        async with McpToolset.in_process(build_server(shop, backend, task)) as tools:
            return [await tools.acall(name, args) for name, args in calls]

    assert run(main) == expected
    direct.close()


def test_each_connection_gets_a_sandbox_released_at_its_end(shop):
    backend = SqliteBackend()
    task = shop.task(TASK)
    ended = []
    server = build_server(shop, backend, task, on_session_end=lambda sb, _log: ended.append(grade(task, sb).reward))

    async def main():
        async with McpToolset.in_process(server) as a, McpToolset.in_process(server) as b:
            await a.acall("cancel_order", {"order_id": 1})
            assert json.loads((await b.acall("get_order", {"order_id": 1})).content)["status"] == "pending"
            assert ended == [] and backend.in_use == 2
        async with McpToolset.in_process(server) as c:  # no tool call: no sandbox while it runs ...
            assert "get_order" in c
            assert backend.in_use == 0 and len(ended) == 2
        # ... but its end is graded all the same (the untouched start state fails the task)

    run(main)
    assert sorted(ended) == [0, 0, 1] and backend.in_use == 0


@pytest.mark.postgres
def test_postgres_sessions_get_their_own_clones_and_release_them(shop, pg_backend):
    """On PostgreSQL the blocking work runs in threads; each session's clone goes back to the pool when it ends."""
    task = shop.task(TASK)
    server = build_server(shop, pg_backend, task)
    in_use = pg_backend.in_use

    async def main():
        async with McpToolset.in_process(server) as a, McpToolset.in_process(server) as b:
            assert (await a.acall("cancel_order", {"order_id": 1})).ok
            assert json.loads((await b.acall("get_order", {"order_id": 1})).content)["status"] == "pending"
            assert json.loads((await a.acall("get_order", {"order_id": 1})).content)["status"] == "cancelled"
            assert pg_backend.in_use == in_use + 2

    run(main)
    assert pg_backend.in_use == in_use


def test_idle_http_sessions_are_reaped(shop):
    backend = SqliteBackend()
    sessions = SessionSandboxes(shop, backend, backend.prepare(shop, shop.task(TASK).patch), idle_timeout=0.2)

    async def main():
        async with anyio.create_task_group() as tg:
            tg.start_soon(sessions.reap_idle)
            sessions.begin("s1")
            assert (await sessions.call("s1", "cancel_order", {"order_id": 1})).ok
            sessions.finish("s1")
            sessions.begin("s2")  # a request still in flight keeps its session alive
            await sessions.call("s2", "get_order", {"order_id": 1})
            await anyio.sleep(0.6)
            assert sessions.closed == 1 and sessions.open_count == 1
            with pytest.raises(SessionEnded):
                await sessions.call("s1", "get_order", {"order_id": 1})
            sessions.finish("s2")
            await sessions.aclose()
            assert sessions.open_count == 0 and sessions.closed == 2
            tg.cancel_scope.cancel()

    run(main)


def test_ended_sessions_are_refused_while_their_client_asks_then_forgotten(shop):
    """An ended session's key is refused for as long as requests for it keep coming (each one resets the HTTP server's
    own memory of the session too), and forgotten once it has had none for `forget_ended_after`: thousands of clients
    that DELETE their sessions leave nothing behind."""
    backend = SqliteBackend()
    sessions = SessionSandboxes(shop, backend, backend.prepare(shop, shop.task(TASK).patch), forget_ended_after=1.0)

    async def main():
        for key in ("old", "asking"):
            sessions.begin(key)
            await sessions.call(key, "get_order", {"order_id": 1})
            sessions.finish(key)
            await sessions.end(key, remember=True)
        assert sessions.remembered == 2
        for _ in range(12):  # the client of "asking" keeps asking, past the memory's length
            await anyio.sleep(0.1)
            sessions.begin("asking")
            with pytest.raises(SessionEnded):
                await sessions.call("asking", "get_order", {"order_id": 1})
            sessions.finish("asking")
        assert sessions.remembered == 1  # "old" had no request for 1.2 s or more
        await anyio.sleep(1.1)
        sessions.begin("new")
        await sessions.call("new", "get_order", {"order_id": 1})
        sessions.finish("new")
        await sessions.end("new", remember=True)
        assert sessions.remembered == 1  # only "new": "asking" went quiet
        await sessions.aclose()

    run(main)


@pytest.mark.parametrize("method", ["HEAD", "PUT", "OPTIONS"])
def test_no_request_keeps_an_ended_session_alive_in_the_sdk_after_it_is_forgotten_here(shop, monkeypatch, method):
    """Only POST and DELETE reach the SDK at the endpoint. Any other method the SDK answers 405 itself, but after
    counting it as the session's activity: a client that sent one every half second kept an ended session alive in the
    SDK while the server forgot the session had ended, and the session's next call opened a fresh sandbox (its cancel
    gone). Scaled down: the SDK forgets a session 1.5 s after its last request, the server 2 s after."""
    import uvicorn

    from groundstate.tools import mcp_server

    monkeypatch.setattr(mcp_server, "SESSION_MEMORY", 1.0)
    monkeypatch.setattr(mcp_server, "ENDED_MARGIN", 0.5)
    port = _free_port()
    app = build_http_app(shop, SqliteBackend(), shop.task("shop-cancel"), token="t", port=port, idle_timeout=0.5)
    url, headers = f"http://127.0.0.1:{port}/mcp", {"Authorization": "Bearer t", "Accept": "application/json, text/event-stream"}
    opening = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on"))

    def call(i: int, name: str) -> dict:
        return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": {"order_id": 1}}}

    async def session(client) -> dict:
        r = await client.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": opening}, headers=headers)
        mine = {**headers, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        await client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=mine)
        return mine

    async def main():
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:
                await anyio.sleep(0.02)
            async with httpx2.AsyncClient(timeout=10) as client:
                a = await session(client)
                assert not (await client.post(url, json=call(1, "cancel_order"), headers=a)).json()["result"]["isError"]
                await anyio.sleep(1.0)  # its sandbox idles out: graded and closed
                assert "session has ended" in (await client.post(url, json=call(2, "get_order"), headers=a)).text
                for _ in range(8):  # 4 s of requests that are not POSTs
                    assert (await client.request(method, url, headers=a)).status_code == 405
                    await anyio.sleep(0.5)
                b = await session(client)  # another session ends: the server forgets what has aged out
                await client.post(url, json=call(1, "get_order"), headers=b)
                await client.request("DELETE", url, headers=b)
                late = await client.post(url, json=call(3, "get_order"), headers=a)
                assert late.status_code == 404 and "Session not found" in late.text, late.text  # the SDK forgot it too
                assert app.app.sessions.opened == 2  # a's and b's: no fresh sandbox for a
            server.should_exit = True

    run(main, limit=60)


def test_sandbox_slots_are_bounded_and_a_session_without_one_is_graded_when_it_ends(shop):
    """`max_sessions=1, session_wait=0`: a second session is refused at once (a free slot is taken even with no
    time to wait); when both end together, the refused one is graded on its start state too."""
    backend = SqliteBackend()
    task = shop.task(TASK)
    ended = []
    sessions = SessionSandboxes(
        shop,
        backend,
        backend.prepare(shop, task.patch),
        max_sessions=1,
        session_wait=0,
        on_session_end=lambda sb, _log: ended.append(grade(task, sb).reward),
    )

    async def main():
        assert (await sessions.call("a", "cancel_order", {"order_id": 1}, owner="http")).ok
        with pytest.raises(MCPError, match="no sandbox free: this server keeps at most 1") as e:
            await sessions.call("b", "get_order", {"order_id": 1}, owner="http")
        assert e.value.data == {"groundstate/infrastructure": True} and backend.in_use == 1
        sessions.session_wait = 5.0
        await sessions.end_owner("http")  # together: b waits for the slot a's end frees, to be graded
        assert sorted(ended) == [0, 1] and backend.in_use == 0

    run(main)


def test_a_session_that_cannot_be_graded_is_recorded_with_why_and_a_shutdown_waits_for_a_slot(shop):
    """#32 item 15: a session that ends without a tool call while the one slot is held and `session_wait=0` is not
    graded, but recorded (`on_session_lost`) with why; at a shutdown such a session waits for the slot the others'
    ends free, and is graded; one whose sandbox cannot be opened at all is recorded as ended by shutdown."""
    import dataclasses

    backend = SqliteBackend()
    task = shop.task(TASK)
    template = backend.prepare(shop, task.patch)
    graded, lost = [], []

    def registry(template, **limits) -> SessionSandboxes:
        return SessionSandboxes(
            shop, backend, template, on_session_end=lambda sb, _log: graded.append(grade(task, sb).reward), on_session_lost=lost.append, **limits
        )

    async def main():
        sessions = registry(template, max_sessions=1, session_wait=0)
        assert (await sessions.call("a", "cancel_order", {"order_id": 1})).ok
        sessions.register("b")
        await sessions.end("b")  # a holds the one slot, and there is no time to wait for it
        assert graded == [] and len(lost) == 1 and lost[0].startswith("ended without a tool call") and "no sandbox free" in lost[0]
        sessions.register("c")
        await sessions.aclose()  # c waits, past session_wait, for the slot a's end frees
        assert sorted(graded) == [0, 1] and len(lost) == 1 and backend.in_use == 0
        broken = registry(dataclasses.replace(template, handle=None))  # a start state that cannot be opened
        broken.register("d")
        await broken.aclose()
        assert len(lost) == 2 and lost[1].startswith("ended by shutdown without a tool call") and "could not open a sandbox" in lost[1]

    run(main)


def test_serve_mcp_prints_one_numbered_verdict_line_per_session_graded_or_not(shop, capfd):
    from groundstate.cli.mcp import VerdictLines
    from groundstate.tools.mcp_server import SessionLog

    backend = SqliteBackend()
    task = shop.task(TASK)
    lines = VerdictLines(task)
    with backend.open(backend.prepare(shop, task.patch)) as sandbox:
        lines.graded(sandbox, SessionLog())
    lines.lost("ended by shutdown without a tool call, with no sandbox to grade it on: could not open a sandbox")
    lines.graded(None, SessionLog())  # grading that fails still gives the session its line
    assert lines.close(wait=30)  # every line written
    err = capfd.readouterr().err.splitlines()
    assert err[0].startswith("[groundstate mcp] session 1 ended: task shop-cancel reward=0 (final state differs")
    assert err[1] == (
        "[groundstate mcp] session 2 ended: task shop-cancel reward=None (not graded: ended by shutdown without a tool call, "
        "with no sandbox to grade it on: could not open a sandbox)"
    )
    assert err[2].startswith("[groundstate mcp] session 3 ended: task shop-cancel reward=None (not graded: grading failed: AttributeError")


# -- host policy and the CLI ----------------------------------------------------------------------------
def test_http_binds_loopback_unless_allowed():
    for host in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"):
        check_host(host)
    for host in ("0.0.0.0", "::", "10.1.2.3", "example.com"):
        with pytest.raises(ValueError, match="non-loopback"):
            check_host(host)
    check_host("0.0.0.0", allow_remote=True)


def test_cli_refuses_a_remote_host_and_unknown_tasks():
    import typer
    from typer.testing import CliRunner

    from groundstate.cli.mcp import serve_mcp

    app = typer.Typer()
    app.command()(serve_mcp)
    r = CliRunner().invoke(app, ["--domain", SHOP, "--transport", "http", "--host", "0.0.0.0"])
    assert r.exit_code == 2 and "non-loopback" in r.output
    r = CliRunner().invoke(app, ["--domain", SHOP, "--task", "no-such-task"])
    assert r.exit_code == 2 and "no task 'no-such-task'" in r.output
    r = CliRunner().invoke(app, ["--domain", SHOP, "--transport", "carrier-pigeon"])
    assert r.exit_code == 2 and "unknown transport" in r.output
    r = CliRunner().invoke(app, ["--domain", SHOP, "--backend", "oracle"])
    assert r.exit_code == 2 and "--backend: unknown backend 'oracle'" in r.output
    r = CliRunner().invoke(app, ["--domain", SHOP, "--max-sessions", "0"])
    assert r.exit_code == 2 and "--max-sessions" in r.output

    # the CLI repeats the server's defaults (so that it loads without the SDK): they must agree
    from groundstate.cli import mcp as cli_mcp
    from groundstate.tools import mcp_server

    for name in ("DEFAULT_PORT", "DEFAULT_MAX_SESSIONS", "DEFAULT_SESSION_WAIT", "DEFAULT_IDLE_TIMEOUT", "DEFAULT_MAX_PENDING"):
        assert getattr(cli_mcp, name) == getattr(mcp_server, name), name


# -- limits: stdio queue and nesting, sessions without tool calls (raw frames where the stream is the point) ---
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}


def _frame(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _call(i, order_id=1) -> dict:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "get_order", "arguments": {"order_id": order_id}}}


class _Lines:
    """The server's stdout, read on demand by a thread (nothing is read between calls, so unread answers stay
    in the pipe): `next(timeout)` is the next JSON line, None at the end of the stream."""

    def __init__(self, stream):
        import queue
        import threading

        self.asks: queue.Queue = queue.Queue()
        self.lines: queue.Queue = queue.Queue()

        def serve() -> None:
            while self.asks.get():
                self.lines.put(stream.readline())

        threading.Thread(target=serve, daemon=True).start()

    def next(self, timeout: float = 20.0):
        import queue

        self.asks.put(True)
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no answer from the server within {timeout} s")
        return json.loads(line) if line else None


@pytest.fixture
def raw_stdio_server(tmp_path):
    """A stdio server process driven with raw JSON lines (the client misbehaviour is the point), after the
    handshake. Yields start(*options) -> (process, its stdout lines), and the stderr log."""
    log = tmp_path / "stderr.log"
    procs = []

    def start(*extra: str) -> tuple[subprocess.Popen, _Lines]:
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, *SERVER_ARGS, *extra], cwd=ROOT, env={**os.environ, **ENV}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
            )
        procs.append(proc)
        lines = _Lines(proc.stdout)
        proc.stdin.write(_frame(INIT))
        proc.stdin.flush()
        assert lines.next()["id"] == 0
        proc.stdin.write(_frame({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        proc.stdin.flush()
        return proc, lines

    yield start, log
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stdio_unread_requests_are_bounded_and_every_one_is_answered(raw_stdio_server):
    """A client that writes thousands of requests without reading answers: the server stops reading once
    `--max-pending` requests are unanswered (before the fix it read all of them, one task each, without bound);
    once the client reads, every request has exactly one answer, results or 'too many requests in flight'."""
    import threading

    start, log = raw_stdio_server
    proc, lines = start("--max-pending", "8")
    n = 4000  # far more than the two pipes and the server's 8 requests in flight can hold
    flood = b"".join(_frame(_call(i)) for i in range(1, n + 1))
    writer = threading.Thread(target=lambda: (proc.stdin.write(flood), proc.stdin.flush()), daemon=True)
    writer.start()
    writer.join(20)
    assert writer.is_alive(), "the server read every unanswered request (its queue is unbounded)"

    answers: dict = {}
    while len(answers) < n:
        message = lines.next()
        assert message, f"the server stopped before answering every request: {log.read_text()[-2000:]}"
        assert message["id"] not in answers, f"request {message['id']} answered twice"
        answers[message["id"]] = message
    writer.join(20)
    assert not writer.is_alive()
    assert set(answers) == set(range(1, n + 1))
    busy = [a for a in answers.values() if "error" in a]
    served = [a for a in answers.values() if "result" in a]
    assert busy and served
    assert all("too many requests in flight: 8 are still unanswered" in a["error"]["message"] for a in busy)
    assert all(json.loads(a["result"]["content"][0]["text"])["status"] == "pending" for a in served)

    # the connection is still a working session, and its end is graded
    proc.stdin.write(_frame(_call(n + 1)))
    proc.stdin.flush()
    assert json.loads(lines.next()["result"]["content"][0]["text"])["status"] == "pending"
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0
    assert " ended: task shop-cancel reward=0" in log.read_text()


@pytest.mark.parametrize("depth", [100, 100_000])
def test_stdio_deeply_nested_requests_are_answered_with_an_error(raw_stdio_server, depth):
    """Arguments nested 100 levels (parsed by the SDK) or 100,000 levels (which its parser refused, and the SDK
    then dropped the frame without an answer): an error for that request id; garbage and a frame cut off inside
    a 200,000-character string are answered too (the id found by a linear scan); the session goes on."""
    start, log = raw_stdio_server
    proc, lines = start()
    deep = (
        '{"jsonrpc": "2.0", "id": "deep", "method": "tools/call", "params": {"name": "get_order", "arguments": {"order_id": '
        + "[" * depth
        + "]" * depth
        + "}}}\n"
    )
    unterminated = b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "' + b"a" * 200_000 + b"\n"
    proc.stdin.write(deep.encode() + _frame(_call(2)) + b"{not json\n" + unterminated)
    proc.stdin.flush()
    answers = {m["id"]: m for m in (lines.next() for _ in range(4))}  # in any order
    refused, served, garbled = answers["deep"], answers[2], answers[None]
    assert answers[9]["error"]["code"] == -32700 and answers[9]["error"]["message"].startswith("not a JSON-RPC message")
    assert refused["id"] == "deep" and refused["error"]["code"] == -32600
    assert "levels deep" in refused["error"]["message"] and "64" in refused["error"]["message"]
    assert served["id"] == 2 and not served["result"]["isError"]
    assert garbled["id"] is None and garbled["error"]["code"] == -32700
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0


def test_stdio_frame_longer_than_the_limit_is_answered_with_an_error(raw_stdio_server):
    """A 5 MiB frame (over `MAX_FRAME`, 4 MiB): dropped as it is read, never held whole, and answered with an
    error for its id (before: read whole, parsed and run); the session goes on."""
    from groundstate.tools.mcp_stdio import MAX_FRAME

    start, log = raw_stdio_server
    proc, lines = start()
    huge = {
        "jsonrpc": "2.0",
        "id": "long",
        "method": "tools/call",
        "params": {"name": "add_note", "arguments": {"customer_id": 1, "body": "x" * (MAX_FRAME + MAX_FRAME // 4)}},
    }
    proc.stdin.write(_frame(huge) + _frame(_call(2)))
    proc.stdin.flush()
    answers = {m["id"]: m for m in (lines.next() for _ in range(2))}
    assert answers["long"]["error"]["code"] == -32600
    assert answers["long"]["error"]["message"] == f"frame longer than {MAX_FRAME} characters; this server reads no longer ones"
    assert json.loads(answers[2]["result"]["content"][0]["text"])["status"] == "pending"
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0
    assert " ended: task shop-cancel reward=0" in log.read_text()  # the note was never written


def test_stdio_server_stops_on_sigterm_while_its_client_keeps_stdin_open(raw_stdio_server):
    """SIGTERM with the session open: its sandbox is graded and the process exits (before the fix it graded,
    then waited without end for its read of stdin, which the client kept open)."""
    start, log = raw_stdio_server
    proc, lines = start()
    proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "cancel_order", "arguments": {"order_id": 1}}}))
    proc.stdin.flush()
    assert not lines.next()["result"]["isError"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert " ended: task shop-cancel reward=1" in log.read_text()


def test_stdio_session_without_tool_calls_is_graded(tmp_path):
    """The SDK's own client connects, lists the tools and leaves: the no-op session still gets its verdict (0)."""
    log = tmp_path / "stderr.log"

    async def main():
        with open(log, "w") as err:
            async with stdio_client(stdio_params(), errlog=err) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                assert (await s.list_tools()).tools

    run(main)
    deadline = time.monotonic() + 10  # the verdict is printed as the process winds down
    while " ended: " not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert " ended: task shop-cancel reward=0" in log.read_text(), log.read_text()


# -- limits: the PostgreSQL HTTP server at a full pool, idle sessions, SIGTERM -------------------------------
def _start_http(
    log: Path, *extra: str, backend: str = "postgres", port: int | None = None, token: str | None = None
) -> tuple[subprocess.Popen, str, str]:
    port, token = port or _free_port(), token or secrets.token_urlsafe(16)
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, *SERVER_ARGS, "--transport", "http", "--port", str(port), "--backend", backend, *extra],
            cwd=ROOT,
            env={**os.environ, **ENV, "GROUNDSTATE_MCP_TOKEN": token},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx2.post(url, json={}, timeout=1)
            return proc, url, token
        except httpx2.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"HTTP MCP server did not start: {log.read_text()}")
            time.sleep(0.1)


@contextlib.asynccontextmanager
async def _http_session(url: str, token: str):
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as s,
    ):
        await s.initialize()
        yield s


def _sandbox_databases(pid: int) -> list[str]:
    import psycopg

    from groundstate.state.postgres import default_dsn

    with psycopg.connect(default_dsn(), autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (f"gs\\_sb\\_%\\_{pid}\\_%",))]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.postgres
def test_postgres_http_server_at_a_full_pool_answers_an_error_and_serves_again(pg_backend, tmp_path):
    """`--max-sessions 2`: a third session's first tool call waits `--session-wait` (1 s), then gets a clear
    JSON-RPC error (before the fix it never returned: the server's 33rd clone waited forever); once a session
    ends, the waiting session is served."""
    log = tmp_path / "stderr.log"
    proc, url, token = _start_http(log, "--max-sessions", "2", "--session-wait", "1")
    try:

        async def main():
            async with _http_session(url, token) as c:
                async with _http_session(url, token) as a, _http_session(url, token) as b:
                    assert not (await a.call_tool("cancel_order", {"order_id": 1})).is_error
                    assert not (await b.call_tool("get_order", {"order_id": 1})).is_error
                    with pytest.raises(MCPError, match="no sandbox free: this server keeps at most 2") as e:
                        await c.call_tool("get_order", {"order_id": 1})
                    assert e.value.data == {"groundstate/infrastructure": True}
                # a and b ended (DELETE): their clones are free again
                r = await c.call_tool("get_order", {"order_id": 1})
                assert json.loads(text(r))["status"] == "pending"

        run(main, limit=60)
        # a cancelled the order (1), b and c did not (0); every session was graded once
        assert sorted(line.split("reward=")[1][0] for line in _wait_for_ended(log, 3, 20.0)) == ["0", "0", "1"]
    finally:
        _stop(proc)
    assert proc.returncode == 0, log.read_text()
    assert _sandbox_databases(proc.pid) == [] and len(_ended_lines(log)) == 3


def test_toolset_raises_when_the_server_forgets_its_session(tmp_path):
    """A server restarted under a session answers its next call 404 "Session not found": not the agent's doing, so
    McpToolset raises for the runner to record a system error instead of showing the agent a failed call."""
    proc, url, token = _start_http(tmp_path / "first.log", backend="sqlite")
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    procs = [proc]

    def restart() -> None:
        _stop(procs[0])
        procs.append(_start_http(tmp_path / "second.log", backend="sqlite", port=port, token=token)[0])

    async def main():
        async with McpToolset.http(url, token=token) as tools:
            assert (await tools.acall("get_order", {"order_id": 1})).ok
            await anyio.to_thread.run_sync(restart)
            with pytest.raises(McpToolsetError, match="Session not found"):
                await tools.acall("get_order", {"order_id": 1})

    try:
        run(main, limit=60)
    finally:
        for p in procs:
            _stop(p)


def test_a_get_answered_404_is_not_a_lost_session(shop):
    """Before a server that routes only POSTs (a proxy, an Express app) the client's GET stream is answered 404: the
    session is not lost, so the agent's failures stay its own. A surrogate, a NaN, or arguments nested past
    `mcp_stdio.MAX_NESTING` are the agent's failed calls too, refused before they are sent (a surrogate sent killed the
    HTTP transport, every later call a system error), and the session serves on."""
    import uvicorn

    port, token, gets = _free_port(), secrets.token_urlsafe(16), []
    inner = build_http_app(shop, SqliteBackend(), shop.task("shop-cancel"), token=token, port=port)

    async def posts_only(scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET":
            gets.append(scope["path"])
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Cannot GET /mcp"})
            return
        await inner(scope, receive, send)

    server = uvicorn.Server(uvicorn.Config(posts_only, host="127.0.0.1", port=port, log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    async def main():
        while not server.started:
            await anyio.sleep(0.02)
        async with McpToolset.http(f"http://127.0.0.1:{port}/mcp", token=token) as tools:
            with anyio.fail_after(10):
                while not gets:
                    await anyio.sleep(0.01)
            assert not tools.session_lost
            deep = "[" * 2000 + "1" + "]" * 2000  # as text: the stdlib's parser recurses past its limit
            for arguments, says in [
                ({"order_id": "\ud800"}, "cannot be sent as JSON: UnicodeEncodeError"),
                ({"order_id": float("nan")}, "cannot be sent as JSON: ValueError"),
                ({"order_id": json.loads("[" * 100 + "1" + "]" * 100)}, "nest deeper than 64 levels"),
                ('{"order_id": ' + deep + "}", "nest deeper than 64 levels"),
            ]:
                r = await tools.acall("get_order", arguments)
                assert not r.ok and says in r.content, (says, r)
            assert (await tools.acall("cancel_order", {"order_id": 1})).ok and not tools.session_lost

    try:
        run(main, limit=60)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.postgres
def test_postgres_http_idle_session_is_graded_and_frees_its_clone(pg_backend, tmp_path):
    """A session that called a tool, then idles: after `--idle-timeout` its clone is graded and released, so another
    session gets it; the idle session's next call is told its session ended (the MCP session outlives its sandbox)."""
    log = tmp_path / "stderr.log"
    proc, url, token = _start_http(log, "--max-sessions", "1", "--session-wait", "20", "--idle-timeout", "1")
    try:

        async def main():
            async with _http_session(url, token) as a:
                assert not (await a.call_tool("cancel_order", {"order_id": 1})).is_error
                ended = await anyio.to_thread.run_sync(_wait_for_ended, log, 1, 30.0)
                assert len(ended) == 1 and "reward=1" in ended[0]
                async with _http_session(url, token) as b:
                    assert json.loads(text(await b.call_tool("get_order", {"order_id": 1})))["status"] == "pending"
                with pytest.raises(MCPError, match="session has ended"):
                    await a.call_tool("get_order", {"order_id": 1})

        run(main, limit=60)
    finally:
        _stop(proc)
    assert _sandbox_databases(proc.pid) == []


@pytest.mark.postgres
def test_postgres_http_server_stops_on_sigterm_with_sessions_in_flight(pg_backend, tmp_path):
    """SIGTERM while two sessions hold clones and a third waits for one: the server exits promptly, every session
    graded (the third on its untouched start state), and no `gs_sb_*` database is left (before the fix it did not
    stop: uvicorn waited without end for requests still open)."""
    log = tmp_path / "stderr.log"
    proc, url, token = _start_http(log, "--max-sessions", "2", "--session-wait", "600")
    outcome: dict = {}

    async def waiting(c) -> None:
        try:
            await c.call_tool("get_order", {"order_id": 1})
            outcome["c"] = "served"
        except Exception as e:  # noqa: BLE001 - any error is fine; an answer that never comes is not
            outcome["c"] = type(e).__name__

    async def main():
        try:
            async with contextlib.AsyncExitStack() as stack:
                a = await stack.enter_async_context(_http_session(url, token))
                b = await stack.enter_async_context(_http_session(url, token))
                c = await stack.enter_async_context(_http_session(url, token))
                assert not (await a.call_tool("cancel_order", {"order_id": 1})).is_error
                assert not (await b.call_tool("get_order", {"order_id": 1})).is_error
                async with anyio.create_task_group() as tg:
                    tg.start_soon(waiting, c)
                    await anyio.sleep(0.5)  # c's call is waiting for a clone
                    proc.send_signal(signal.SIGTERM)
                    outcome["rc"] = await anyio.to_thread.run_sync(lambda: proc.wait(timeout=30))
        except Exception as e:  # noqa: BLE001 - leaving sessions of a stopped server may fail; the server is the point
            outcome.setdefault("left", type(e).__name__)

    try:
        run(main, limit=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert outcome.get("rc") == 0, (outcome, log.read_text())
    assert outcome["c"] != "served"
    assert sorted(line.split("reward=")[1][0] for line in _ended_lines(log)) == ["0", "0", "1"], log.read_text()
    assert _sandbox_databases(proc.pid) == []


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_http_sigterm_grades_every_session_that_called_no_tool(pg_backend, tmp_path):
    """#32 item 15: 300 sessions of the SDK's client that never called a tool, then SIGTERM, with tight bounds
    (`--max-sessions 2 --session-wait 1`). Before, each waited at most `--session-wait` for a clone to be graded on,
    and 135 of 300 ended with no verdict; now every session has its verdict line (reward 0: the start state) or, had
    none been possible, a reward=None line saying why, and no clone is left."""
    n = 300
    log = tmp_path / "stderr.log"
    proc, url, token = _start_http(log, "--max-sessions", "2", "--session-wait", "1")
    outcome: dict = {"opened": 0}

    async def session(ready: anyio.Event, stop: anyio.Event) -> None:
        with contextlib.suppress(Exception):  # leaving a session of a stopped server may fail; the server is the point
            async with _http_session(url, token) as s:
                assert (await s.list_tools()).tools
                outcome["opened"] += 1
                if outcome["opened"] == n:
                    ready.set()
                await stop.wait()

    async def main():
        ready, stop = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(session, ready, stop)
            await ready.wait()
            proc.send_signal(signal.SIGTERM)
            outcome["rc"] = await anyio.to_thread.run_sync(lambda: proc.wait(timeout=120))
            tg.cancel_scope.cancel()  # the clients of a stopped server: nothing to leave

    try:
        run(main, limit=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ended = _ended_lines(log)
    assert outcome["opened"] == n and outcome.get("rc") == 0, (outcome, log.read_text()[-2000:])
    assert len(ended) == n and all("reward=0 " in line for line in ended), log.read_text()[-2000:]
    assert sorted(int(line.split(" session ")[1].split()[0]) for line in ended) == list(range(1, n + 1))
    assert _sandbox_databases(proc.pid) == []
