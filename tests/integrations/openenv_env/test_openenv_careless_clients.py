"""OpenEnv: `groundstate serve --protocol openenv` against careless and hostile clients, driven by OpenEnv's own
clients and raw HTTP: a request the server cannot take is one line of 4xx (503 at capacity), an unread stderr blocks
nothing, SIGTERM stops the server, an HTTP session a client forgets holds no slot past the idle timeout, no more
sandboxes are open than `--max-sessions`, and the `done` observation gives away no answer."""

import asyncio
import fcntl
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from server_wait import wait_until_serving

from groundstate.integrations.openenv import GroundstateAction, environment_factory
from groundstate.state.sqlite import SqliteBackend
from groundstate.tools.stderr_log import DroppingStderrHandler
from groundstate.types import EpisodeLimits
from groundstate.worlds.domain import Domain

SHOP = Path(__file__).parents[2] / "fixtures" / "shop"
SMALL_PIPE = 4096  # the least a pipe holds: a few log lines fill it, as 64 KiB of them fill the default one


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _server(*options: str):
    """`groundstate serve --protocol openenv` over the shop fixture, its stderr a small pipe that nobody reads (a
    supervisor that does not drain it); yields the process and its URL, kills it if it is still up at the end."""
    port = _free_port()
    command = [sys.executable, "-m", "groundstate.cli", "serve", "--protocol", "openenv", "--tasks", str(SHOP), "--port", str(port), *options]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    fcntl.fcntl(proc.stderr.fileno(), fcntl.F_SETPIPE_SZ, SMALL_PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(url, proc)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def _post(url: str, payload: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _stops_on_sigterm(proc: subprocess.Popen) -> bytes:
    """SIGTERM, then the process must exit (a generous bound: this is a hang check); returns what it wrote to stderr."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    return proc.stderr.read()


async def _play(url: str, task_id: str, calls: list[tuple[str, dict]], reply: str):
    async with GenericEnvClient(base_url=url) as env:
        await env.reset(task_id=task_id)
        for tool, args in calls:
            await env.step({"type": "call_tool", "tool_name": tool, "arguments": args})
        while True:
            step = await env.step({"type": "reply", "content": reply})
            if step.done:
                return step


def test_step_without_reset_is_one_line_of_409_and_sigterm_stops_a_server_whose_stderr_nobody_reads():
    with _server() as (proc, url):
        for _ in range(200):  # each answered with a logged traceback, today: the small pipe filled at the first
            status, body = _post(f"{url}/step", {"action": {"type": "reply", "content": "hi"}})
            assert status == 409 and "step before reset" in body["detail"] and "\n" not in body["detail"], (status, body)
        status, body = _post(f"{url}/reset", {"task_id": "../../etc/passwd"})
        assert status == 422 and "not one of this server's tasks" in body["detail"], (status, body)
        status, body = _post(f"{url}/reset", {"task_id": "shop-cancel"})  # OpenEnv's stateless reset still answers
        assert status == 200 and body["observation"]["task_id"] == "shop-cancel"
        final = asyncio.run(_play(url, "shop-cancel", [("cancel_order", {"order_id": 1})], "Done."))
        assert final.done and final.reward == 1.0
        err = _stops_on_sigterm(proc)
    assert b"Traceback" not in err, err.decode(errors="replace")[-3000:]


def test_malformed_requests_with_stderr_unread_never_block_the_server_and_sigterm_stops_it_mid_episode():
    # uvicorn logs a warning for every request that is not HTTP: a client that sends garbage fills the pipe
    # after a hundred, and a server that wrote its log on its event loop stopped there, SIGTERM included
    with _server() as (proc, url):
        for i in range(400):
            with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=60) as s:
                s.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
                assert s.recv(64).startswith(b"HTTP/1.1 400"), i

        async def mid_episode_sigterm():
            async with GenericEnvClient(base_url=url) as env:
                await env.reset(task_id="shop-cancel")
                step = await env.step({"type": "call_tool", "tool_name": "cancel_order", "arguments": {"order_id": 1}})
                assert '"status": "cancelled"' in step.observation["result"]
                return await asyncio.to_thread(_stops_on_sigterm, proc)  # the session is still open

        err = asyncio.run(mid_episode_sigterm())
    assert b"Invalid HTTP request received" in err  # the log was written while it could be


def test_the_log_handler_drops_what_a_full_stderr_cannot_take_and_says_how_many():
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, SMALL_PIPE)
    handler = DroppingStderrHandler(fd=write_end, capacity=10)
    log = logging.getLogger("test_openenv_careless_clients.dropping")
    log.propagate, log.handlers = False, [handler]
    try:
        for i in range(2000):  # ~100 KiB of lines into a 4 KiB pipe nobody reads: every call returns
            log.warning("line %d %s", i, "x" * 40)
        got = bytearray()

        def drain():
            while chunk := os.read(read_end, 65536):
                got.extend(chunk)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        handler.close(wait=60)  # the writer writes what it holds, then stops
        os.close(write_end)
        reader.join(timeout=60)
    finally:
        log.handlers = []
        os.close(read_end)
    text = got.decode()
    dropped = [int(n) for n in re.findall(r"^\[groundstate\] (\d+) log line\(s\) dropped: stderr was not read$", text, re.M)]
    written = re.findall(r"^line (\d+) x+$", text, re.M)
    assert written[0] == "0" and dropped and sum(dropped) + len(written) == 2000, text[-500:]  # every line is written or counted


@pytest.fixture(scope="module")
def server():
    with _server("--max-sessions", "2") as (proc, url):
        yield url
        err = _stops_on_sigterm(proc)
    assert b"Traceback" not in err, err.decode(errors="replace")[-3000:]


def test_http_sessions_a_client_forgets_hold_no_slot_past_the_idle_timeout():
    # MCPToolClient (OpenEnv 0.10) calls tools in an HTTP session (openenv/session/create) its WebSocket attaches to:
    # clients that never close theirs hold at most --max-sessions of them, and each is closed once idle
    with _server("--max-sessions", "2", "--idle-timeout", "1") as (proc, url):

        async def careless_clients():
            for _ in range(2):  # every slot; neither client is closed
                with pytest.raises(RuntimeError, match="step before reset"):  # a session, but no episode in it yet
                    await MCPToolClient(base_url=url).call_tool("get_order", order_id=1)
            with pytest.raises(RuntimeError, match="at capacity"):
                await MCPToolClient(base_url=url).call_tool("get_order", order_id=1)

        asyncio.run(careless_clients())
        deadline = time.monotonic() + 60  # OpenEnv's reaper looks every 5 s at the least
        while True:
            try:
                both = asyncio.run(_both(url))
                break
            except RuntimeError as e:
                assert "at capacity" in str(e) and time.monotonic() < deadline, e
                time.sleep(1)
        assert [s.reward for s in both] == [1.0, 1.0]
        err = _stops_on_sigterm(proc)
    assert b"Traceback" not in err, err.decode(errors="replace")[-3000:]


async def _both(url: str) -> list:
    """Two WebSocket episodes at once: both slots."""
    return await asyncio.gather(*(_play(url, "shop-cancel", [("cancel_order", {"order_id": 1})], "Done.") for _ in range(2)))


def test_a_session_id_that_is_not_text_is_a_json_rpc_error_not_a_traceback(server):
    # OpenEnv 0.10 looks a session id up as a dict key: a list or an object there was a 500 and a logged traceback
    # (the fixture fails on any traceback in the server's stderr)
    for method, session_id in (("tools/call", ["x"]), ("openenv/session/close", {"a": 1}), ("tools/list", 3.5)):
        payload = {"jsonrpc": "2.0", "id": 9, "method": method, "params": {"name": "get_order", "arguments": {}, "session_id": session_id}}
        status, body = _post(f"{server}/mcp", payload)
        assert status == 200 and body["id"] == 9 and body["error"]["code"] == -32602, (method, status, body)
        assert body["error"]["message"] == "session_id must be text"
    status, body = _post(f"{server}/mcp", {"jsonrpc": "2.0", "id": [1], "method": "tools/call", "params": {"session_id": ["x"]}})
    assert status == 200 and body["id"] is None and body["error"]["code"] == -32602


def test_a_tool_call_beside_a_reset_waits_for_it_and_a_bad_seed_is_refused():
    # an HTTP /mcp call may reach a session while its WebSocket resets: it used to find the episode half started
    # ("step before start"); it now waits for the reset, and runs on the episode the reset started
    shop = Domain(SHOP)
    env = environment_factory([(t, shop) for t in shop.tasks], SqliteBackend())()

    async def scenario():
        first = await env.reset_async(task_id="shop-refuse")
        reset, call = await asyncio.gather(env.reset_async(task_id="shop-cancel"), env.mcp_client.call_tool("cancel_order", {"order_id": 1}))
        final = await env.step_async(GroundstateAction(type="reply", content="Done."))
        return first, reset, call, final

    first, reset, call, final = asyncio.run(scenario())
    assert first.task_id == "shop-refuse" and reset.task_id == "shop-cancel"
    assert '"status": "cancelled"' in call["data"] and call["done"] is False
    assert final.done and final.reward == 1.0  # the call counted in the episode the reset started
    for seed in (True, -5, "7"):
        with pytest.raises(ValueError, match="seed must be a non-negative integer"):
            asyncio.run(env.reset_async(seed=seed))
    env.close()


def test_a_session_closed_under_its_connection_opens_no_sandbox_outside_the_slots(server):
    # OpenEnv's WebSocket `mcp` message closes any session whose id it is given; the connection stays open, with
    # the closed environment, and its slot is free: a reset there would open a sandbox no slot counts
    rpc = {"jsonrpc": "2.0", "id": 1, "params": {}}

    async def scenario():
        async with GenericEnvClient(base_url=server) as a, GenericEnvClient(base_url=server) as b:
            await a.reset(task_id="shop-cancel")
            created = await a._send_and_receive({"type": "mcp", "data": {**rpc, "method": "openenv/session/create"}})
            session_id = created["data"]["result"]["session_id"]
            closed = await b._send_and_receive(
                {"type": "mcp", "data": {**rpc, "method": "openenv/session/close", "params": {"session_id": session_id}}}
            )
            assert closed["data"]["result"]["closed"] is True
            with pytest.raises(Exception, match="this session was closed"):
                await a.reset(task_id="shop-cancel")
            with pytest.raises(Exception, match="step before reset"):
                await a.step({"type": "call_tool", "tool_name": "get_order", "arguments": {"order_id": 1}})

    asyncio.run(scenario())


def test_the_done_observation_gives_the_reward_and_the_failed_checks_by_name_not_the_answer(server):
    final = asyncio.run(_play(server, "shop-multi", [], "I cannot help."))
    verdict = final.observation["verdict"]
    assert final.reward == 0.0 and verdict["reward"] == 0 and verdict["state_reward"] == 0
    assert verdict["reasons"] == ["final state differs from the golden state", "check 0 failed"]
    assert "diff" not in verdict and verdict["system_error"] is None
    text = json.dumps(verdict)
    for secret in ("SELECT", "cancelled", "42.5", "vip"):  # the check's SQL, its expected rows, the golden rows
        assert secret not in text, secret
    again = asyncio.run(_play(server, "shop-multi", [], "I cannot help."))  # a second try learns nothing more
    assert again.observation["verdict"] == verdict
    passed = asyncio.run(_play(server, "shop-cancel", [("cancel_order", {"order_id": 1})], "Done."))
    assert passed.reward == 1.0 and passed.observation["verdict"]["reasons"] == ["final state matches the golden state"]


def test_a_system_error_reaches_the_client_as_such_and_its_detail_only_the_servers_log(caplog):
    shop = Domain(SHOP)

    async def scenario(reveal: bool):
        env = environment_factory([(t, shop) for t in shop.tasks], SqliteBackend(), EpisodeLimits(grade_timeout=1e-6), reveal_verdict=reveal)()
        first = await env.reset_async(task_id="shop-cancel")  # the golden replay runs under the bound too
        return first if first.done else await env.step_async(GroundstateAction(type="reply", content="Done."))

    with caplog.at_level(logging.WARNING, logger="groundstate.integrations.openenv"):
        hidden = asyncio.run(scenario(False))
    assert hidden.done and hidden.reward is None
    assert hidden.verdict["system_error"] and "grading bound" not in hidden.verdict["system_error"]
    assert hidden.verdict["reasons"] == [] and "diff" not in hidden.verdict
    assert any("shop-cancel" in r.getMessage() and "grading bound" in r.getMessage() for r in caplog.records)
    full = asyncio.run(scenario(True))
    assert full.reward is None and "grading bound" in full.verdict["system_error"] and full.verdict["diff"] == []


def _flood_of_resets(url: str, n: int) -> list[tuple[int, dict]]:
    """`n` stateless `POST /reset` at once (each opens a sandbox and closes it before it answers)."""
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: _post(f"{url}/reset", {"task_id": "shop-cancel"}), range(n)))


def _assert_refused_at_capacity(status: int, body: dict) -> None:
    assert status == 503 and "\n" not in body["detail"], (status, body)
    assert body["detail"].startswith("at capacity: this server keeps at most 2 sandboxes open and sessions hold every one"), body


def test_http_resets_take_the_sessions_sandbox_slots_and_are_refused_with_503_when_none_is_free(server):
    async def scenario():
        async with GenericEnvClient(base_url=server) as a, GenericEnvClient(base_url=server) as b:
            await a.reset(task_id="shop-cancel")
            await b.reset(task_id="shop-cancel")  # both slots hold a sandbox
            for status, body in await asyncio.to_thread(_flood_of_resets, server, 8):
                _assert_refused_at_capacity(status, body)
            return await a.reset(task_id="shop-cancel")  # a session that holds a slot keeps it across its resets

    assert asyncio.run(scenario()).observation["task_id"] == "shop-cancel"
    status, body = _post(f"{server}/reset", {"task_id": "shop-cancel"})  # the sessions ended: their slots are free
    assert status == 200 and body["observation"]["task_id"] == "shop-cancel", (status, body)


def _open_sandboxes(pid: int) -> int:
    """The server's sandboxes open now: connections to its clones inside an attempt's transaction (a pooled clone's
    is idle, out of one)."""
    import psycopg

    from groundstate.state.postgres import default_dsn

    with psycopg.connect(default_dsn(), autocommit=True) as conn:
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname LIKE %s AND state <> 'idle'"
        return conn.execute(query, (f"gs\\_sb\\_%\\_{pid}\\_%",)).fetchone()[0]


def _sandbox_databases(pid: int) -> list[str]:
    import psycopg

    from groundstate.state.postgres import default_dsn

    with psycopg.connect(default_dsn(), autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (f"gs\\_sb\\_%\\_{pid}\\_%",))]


@pytest.mark.postgres
def test_a_flood_of_http_resets_on_postgres_opens_no_more_sandboxes_than_max_sessions_and_releases_them(pg_backend):
    # before, every POST /reset opened a sandbox, whatever --max-sessions said: past the backend's pool (max-sessions
    # + 1 clones) the rest waited for a clone in the threads that would have closed the others, and no request of
    # the flood, nor SIGTERM, was answered again
    n = 30
    with _server("--backend", "postgres", "--max-sessions", "2") as (proc, url):
        most, sampling = [0], threading.Event()

        def sample():
            while not sampling.is_set():
                most[0] = max(most[0], _open_sandboxes(proc.pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:

            async def flood_while_two_sessions_play():
                async with GenericEnvClient(base_url=url) as a, GenericEnvClient(base_url=url) as b:
                    await a.reset(task_id="shop-cancel")
                    await b.reset(task_id="shop-cancel")
                    return await asyncio.to_thread(_flood_of_resets, url, n)

            while_full = asyncio.run(flood_while_two_sessions_play())
            when_free = _flood_of_resets(url, n)  # no session: two resets at a time get a sandbox
        finally:
            sampling.set()
            sampler.join()
        for status, body in while_full:
            _assert_refused_at_capacity(status, body)
        served = [body for status, body in when_free if status == 200]
        assert served and all(b["observation"]["task_id"] == "shop-cancel" for b in served)
        for status, body in when_free:
            if status != 200:
                _assert_refused_at_capacity(status, body)
        assert 0 < most[0] <= 2, most
        deadline = time.monotonic() + 60  # an HTTP reset closes its sandbox just after it answers
        while _open_sandboxes(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _open_sandboxes(proc.pid) == 0
        final = asyncio.run(_play(url, "shop-cancel", [("cancel_order", {"order_id": 1})], "Done."))
        assert final.done and final.reward == 1.0
        err = _stops_on_sigterm(proc)
    assert proc.returncode == 0 and b"Traceback" not in err, err.decode(errors="replace")[-3000:]
    assert _sandbox_databases(proc.pid) == []
