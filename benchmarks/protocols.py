#!/usr/bin/env python
"""Served-protocol throughput: `python benchmarks/protocols.py [--sessions N] [--quick] [--no-write]`.

N concurrent OpenEnv sessions (default 1,000) against one `groundstate serve --protocol openenv` process on this
machine, and N concurrent MCP sessions over streamable HTTP against one `groundstate serve-mcp --transport http` (the
MCP SDK's own client; see `mcp_http`), driven by OpenEnv's own `GenericEnvClient` from one client process: every session connects and resets
(a fresh sandbox of the shop fixture's `shop-cancel` task), then, once all N are open, each makes one tool call,
then each replies and is graded. Timed per session: reset, the tool step, the final step (grading); the
memory per session is the server's RSS growth with all N sessions open, divided by N. The baseline, measured
in the same run: the same N sessions through the same environment class in process (no server, no socket),
concurrently on one event loop. Both client and server share the machine's cores.

Merges its keys into benchmarks/results.json and refreshes the "Served protocols" section of RESULTS.md. OpenEnv 0.10
and the MCP server's SDK cannot share an environment: run from the main one, the OpenEnv half (baseline and server)
runs in `.venv-openenv`'s interpreter (`GROUNDSTATE_OPENENV_PYTHON` to name another), the MCP half here.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from results_file import RESULTS_MD, merge, write_section  # noqa: E402 - beside this script

SHOP = ROOT / "tests" / "fixtures" / "shop"
OPENENV_PYTHON = os.environ.get("GROUNDSTATE_OPENENV_PYTHON", str(ROOT / ".venv-openenv" / "bin" / "python"))
CPU: dict[str, float] = {}  # "<protocol>_server" / "<protocol>_client": CPU seconds over the timed sessions
SECTION_START, SECTION_END = "<!-- protocols:start -->", "<!-- protocols:end -->"
CALL = {"type": "call_tool", "tool_name": "cancel_order", "arguments": {"order_id": 1}}
REPLY = {"type": "reply", "content": "Your order is cancelled."}


def log(msg: str) -> None:
    print(f"[protocols] {msg}", file=sys.stderr, flush=True)


def percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summarise(prefix: str, samples: dict[str, list[float]], out: dict[str, Any]) -> None:
    for op, xs in samples.items():
        out[f"{prefix}_{op}_p50_ms"] = round(statistics.median(xs), 2)
        out[f"{prefix}_{op}_p99_ms"] = round(percentile(xs, 99), 2)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def sessions(
    n: int, open_session: Callable[[], Awaitable[Any]], close: Callable[[Any], Awaitable[None]], step
) -> tuple[dict[str, list[float]], list[Any], float]:
    """N sessions in three waves (all reset, then all step, then all finish), each op timed per session."""
    times: dict[str, list[float]] = {"reset": [], "step": [], "grade": []}
    rewards: list[Any] = []

    async def one_reset() -> Any:
        t0 = time.perf_counter()
        handle = await open_session()
        await step(handle, "reset")
        times["reset"].append((time.perf_counter() - t0) * 1000)
        return handle

    started = time.perf_counter()
    handles = await asyncio.gather(*(one_reset() for _ in range(n)))

    async def one(handle: Any, op: str, what: str) -> None:
        t0 = time.perf_counter()
        result = await step(handle, what)
        times[op].append((time.perf_counter() - t0) * 1000)
        if op == "grade":
            rewards.append(result)

    await asyncio.gather(*(one(h, "step", "call") for h in handles))
    await asyncio.gather(*(one(h, "grade", "reply") for h in handles))
    await asyncio.gather(*(close(h) for h in handles))
    return times, rewards, time.perf_counter() - started


def in_process(n: int) -> tuple[dict[str, list[float]], list[Any], float]:
    from groundstate.integrations.openenv import GroundstateAction, environment_factory
    from groundstate.state.sqlite import SqliteBackend
    from groundstate.worlds.domain import Domain

    domain = Domain(SHOP)
    factory = environment_factory([(domain.task("shop-cancel"), domain)], SqliteBackend())

    async def open_session() -> Any:
        return factory()

    async def step(env: Any, what: str) -> Any:
        if what == "reset":
            return await env.reset_async(task_id="shop-cancel")
        observation = await env.step_async(GroundstateAction(**(CALL if what == "call" else REPLY)))
        return observation.reward

    async def close(env: Any) -> None:
        env.close()

    cpu0 = time.process_time()
    out = asyncio.run(sessions(n, open_session, close, step))
    CPU["inprocess"] = time.process_time() - cpu0
    return out


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (from /proc: no psutil needed in either interpreter)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15 of stat


def served(n: int) -> tuple[dict[str, list[float]], list[Any], float, float, float]:
    from openenv.core.generic_client import GenericEnvClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "groundstate.cli",
        "serve",
        "--protocol",
        "openenv",
        "--tasks",
        str(SHOP),
        "--port",
        str(port),
        "--max-sessions",
        str(n),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.3)
        idle_rss = rss_mib(proc.pid)
        peak: list[float] = []

        async def open_session() -> Any:
            client = GenericEnvClient(base_url=url, connect_timeout_s=300, message_timeout_s=600)
            await client.connect()
            return client

        async def step(client: Any, what: str) -> Any:
            if what == "reset":
                return await client.reset(task_id="shop-cancel")
            if what == "call" and not peak:
                peak.append(rss_mib(proc.pid))  # every session is open and holds its sandbox
            result = await client.step(CALL if what == "call" else REPLY)
            return result.reward

        async def close(client: Any) -> None:
            await client.close()

        server0, client0 = cpu_s(proc.pid), time.process_time()
        times, rewards, wall = asyncio.run(sessions(n, open_session, close, step))
        CPU["openenv_server"], CPU["openenv_client"] = cpu_s(proc.pid) - server0, time.process_time() - client0
        return times, rewards, wall, idle_rss, peak[0]
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def mcp_http(n: int) -> tuple[dict[str, list[float]], int, float, float, float]:
    """N concurrent MCP sessions over streamable HTTP against `groundstate serve-mcp --transport http`, with the MCP SDK's
    own client (`streamable_http_client` + `ClientSession`), in the same three waves. Each session has its own HTTP
    client, all sharing one TLS context as `McpToolset.http` does (a context per client cost 26 ms of client CPU). An SDK session lives in one task
    (its context managers cannot be left from another), so each session is one task and the waves are barriers:
    reset = connect + `initialize` + `tools/list`; step = the first tool call (it opens the session's sandbox);
    grade = leaving the session (the client's DELETE; the server grades the sandbox as it closes it and logs the
    verdict, which is counted)."""
    import secrets
    import tempfile

    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from groundstate.tools.mcp_client import tls_context

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_urlsafe(16)
    cmd = [sys.executable, "-m", "groundstate.cli.mcp", "--domain", str(SHOP), "--task", "shop-cancel", "--transport", "http"]
    cmd += ["--port", str(port), "--max-sessions", str(n), "--session-wait", "600"]
    err = tempfile.NamedTemporaryFile("w+", prefix="gs_protocols_mcp_", suffix=".log", delete=False)  # noqa: SIM115 - closed and unlinked in the finally below
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT, env={**os.environ, "GROUNDSTATE_MCP_TOKEN": token})
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx2.post(url, json={}, timeout=2)
                break
            except httpx2.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the MCP server did not start") from None
                time.sleep(0.3)
        idle_rss = rss_mib(proc.pid)
        times: dict[str, list[float]] = {"reset": [], "step": [], "grade": []}
        peak: list[float] = []

        async def run_all() -> float:
            counts = {"open": 0, "stepped": 0}
            all_open, all_stepped = asyncio.Event(), asyncio.Event()

            async def one() -> None:
                headers = {"Authorization": f"Bearer {token}"}
                async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(600, read=600), verify=tls_context()) as http:
                    t0 = time.perf_counter()
                    async with streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
                        await session.initialize()
                        await session.list_tools()
                        times["reset"].append((time.perf_counter() - t0) * 1000)
                        counts["open"] += 1
                        if counts["open"] == n:
                            all_open.set()
                        await all_open.wait()
                        t0 = time.perf_counter()
                        result = await session.call_tool(CALL["tool_name"], CALL["arguments"])
                        times["step"].append((time.perf_counter() - t0) * 1000)
                        assert not result.is_error, result
                        counts["stepped"] += 1
                        if counts["stepped"] == n:
                            peak.append(rss_mib(proc.pid))  # every session holds its sandbox
                            all_stepped.set()
                        await all_stepped.wait()
                        t0 = time.perf_counter()
                    times["grade"].append((time.perf_counter() - t0) * 1000)

            started = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n)))
            return time.perf_counter() - started

        server0, client0 = cpu_s(proc.pid), time.process_time()
        wall = asyncio.run(run_all())
        CPU["mcp_http_server"], CPU["mcp_http_client"] = cpu_s(proc.pid) - server0, time.process_time() - client0
        deadline = time.monotonic() + 120
        while True:  # the verdicts of sessions that ended, as the server logged them
            err.flush()
            ended = [line for line in Path(err.name).read_text().splitlines() if " ended: task " in line]
            if len(ended) >= n or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        passed = sum("reward=1" in line for line in ended)
        return times, passed, wall, idle_rss, peak[0]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        err.close()
        Path(err.name).unlink(missing_ok=True)


def openenv_half(n: int) -> dict[str, Any]:
    """The in-process baseline and the OpenEnv server, in an interpreter that has OpenEnv 0.10."""
    log(f"in-process baseline: {n} concurrent sessions")
    inprocess = in_process(n)
    log(f"OpenEnv server: {n} concurrent sessions over WebSocket")
    from importlib.metadata import version

    return {"inprocess": inprocess, "served": served(n), "cpu": dict(CPU), "openenv_version": version("openenv"), "python": sys.executable}


def openenv_results(n: int) -> dict[str, Any]:
    """`openenv_half` here if this interpreter has OpenEnv, else in OpenEnv's own (`OPENENV_PYTHON`): OpenEnv 0.10
    pins mcp 1.x, the MCP server needs mcp >= 2.3, so no one environment holds both halves of this benchmark."""
    if importlib.util.find_spec("openenv") is not None:
        return openenv_half(n)
    log(f"OpenEnv is not installed here: its half runs in {OPENENV_PYTHON} (make openenv-env)")
    done = subprocess.run([OPENENV_PYTHON, __file__, "--openenv-half", "--sessions", str(n)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"the OpenEnv half failed in {OPENENV_PYTHON} (exit {done.returncode})")
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="100 sessions (a smoke run)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--openenv-half", action="store_true", help="(internal) run the OpenEnv half and print it as JSON")
    args = ap.parse_args()
    n = 100 if args.quick else args.sessions
    if args.openenv_half:
        print(json.dumps(openenv_half(n)))
        return
    started = time.perf_counter()
    R: dict[str, Any] = {}
    half = openenv_results(n)
    CPU.update(half["cpu"])
    base_times, base_rewards, base_wall = half["inprocess"]
    assert base_rewards == [1.0] * n, "every in-process session must pass"
    summarise(f"inprocess_sessions_{n}", base_times, R)
    R[f"inprocess_sessions_{n}_per_s"] = round(n / base_wall, 1)
    times, rewards, wall, idle, peak = half["served"]
    assert rewards == [1.0] * n, f"every served session must pass: {sorted(set(map(str, rewards)))}"
    summarise(f"openenv_sessions_{n}", times, R)
    R[f"openenv_sessions_{n}_per_s"] = round(n / wall, 1)
    R["openenv_session_mib"] = round((peak - idle) / n, 3)
    R["openenv_server_idle_rss_mib"] = round(idle, 1)
    for op in ("reset", "step", "grade"):
        R[f"openenv_vs_inprocess_{op}_p50_ratio"] = round(R[f"openenv_sessions_{n}_{op}_p50_ms"] / R[f"inprocess_sessions_{n}_{op}_p50_ms"], 1)
    log(f"MCP server: {n} concurrent sessions over streamable HTTP")
    mtimes, passed, mwall, midle, mpeak = mcp_http(n)
    assert passed == n, f"every MCP session must be graded 1: {passed} of {n}"
    summarise(f"mcp_http_sessions_{n}", mtimes, R)
    R[f"mcp_http_sessions_{n}_per_s"] = round(n / mwall, 1)
    R["mcp_http_session_mib"] = round((mpeak - midle) / n, 3)
    R["mcp_http_vs_openenv_sessions_ratio"] = round(R[f"mcp_http_sessions_{n}_per_s"] / R[f"openenv_sessions_{n}_per_s"], 3)
    R["openenv_vs_inprocess_sessions_ratio"] = round(R[f"openenv_sessions_{n}_per_s"] / R[f"inprocess_sessions_{n}_per_s"], 3)
    for key, seconds in CPU.items():  # where the time goes: the server's work and the client's, per session
        R[f"{key}_cpu_ms_per_session"] = round(seconds / n * 1000, 2)
    # A server's capacity, apart from its clients' cost (on two shared cores the MCP SDK's client bounds the waves):
    # sessions per second of the server's own CPU, against OpenEnv's and against the in-process work (whose CPU is
    # the environment's and its caller's together).
    R["mcp_http_vs_openenv_server_capacity_ratio"] = round(CPU["openenv_server"] / CPU["mcp_http_server"], 3)
    R["openenv_vs_inprocess_server_capacity_ratio"] = round(CPU["inprocess"] / CPU["openenv_server"], 3)
    R["protocols_sessions"] = n
    R["protocols_openenv_version"], R["protocols_openenv_python"] = half["openenv_version"], half["python"]
    R["protocols_mcp_version"] = importlib.metadata.version("mcp")
    R["protocols_wall_s"] = round(time.perf_counter() - started, 1)
    R["protocols_finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    print(json.dumps(R, indent=1))
    if args.no_write:
        return
    path = merge(R)
    write_markdown(R, n)
    log(f"wrote {path.relative_to(ROOT)} and the section in {RESULTS_MD.relative_to(ROOT)}")


def write_markdown(R: dict[str, Any], n: int) -> None:
    def row(label: str, key: str, unit: str = " ms") -> str:
        return f"| {label} | {R[key]:g}{unit} | `{key}` |"

    lines = [
        SECTION_START,
        "## Served protocols",
        "",
        f"Command: `python benchmarks/protocols.py --sessions {n}` (part of `make bench`), {R['protocols_finished'][:10]}, "
        f"{R['protocols_wall_s']:.0f} s in all, on this 2-core machine with the server and {n} clients sharing the cores "
        f"({os.cpu_count()} CPUs seen). OpenEnv {R['protocols_openenv_version']} (baseline, server and client in "
        f"`{Path(R['protocols_openenv_python']).parent.parent.name}`'s interpreter: it pins mcp 1.x), MCP SDK "
        f"{R['protocols_mcp_version']} (server and client in this one).",
        "",
        f"{n} sessions held open at once against one `groundstate serve --protocol openenv` process, driven by OpenEnv's "
        "`GenericEnvClient` over WebSocket: each resets (a fresh sandbox of `shop-cancel`), then, with all sessions "
        "open, makes one tool call, then replies and is graded; every session passed. Baseline: the same sessions "
        "through the same environment class in process, concurrently on one event loop. Then the same waves over MCP: "
        f"{n} sessions at once against one `groundstate serve-mcp --transport http` process, driven by the MCP SDK's "
        "`streamable_http_client` and `ClientSession` (reset = connect, `initialize`, `tools/list`; step = the first tool "
        "call, which opens the session's sandbox; grade = leaving the session: the server grades the sandbox as it closes "
        "it, and every session's logged verdict was 1).",
        "",
        "| measurement | value | key in results.json |",
        "| --- | --- | --- |",
    ]
    for prefix, title in ((f"openenv_sessions_{n}", "OpenEnv server"), (f"inprocess_sessions_{n}", "in process (baseline)")):
        for op, what in (("reset", "reset (connect + fresh sandbox)"), ("step", "one tool step"), ("grade", "final step (user, grading)")):
            lines.append(row(f"{title}: {what}, p50", f"{prefix}_{op}_p50_ms"))
            lines.append(row(f"{title}: {what}, p99", f"{prefix}_{op}_p99_ms"))
        lines.append(row(f"{title}: sessions per second (first connect to last close)", f"{prefix}_per_s", "/s"))
    lines.append(row("OpenEnv server: memory per open session (RSS growth / sessions)", "openenv_session_mib", " MiB"))
    lines.append(row("OpenEnv server: its CPU per session", "openenv_server_cpu_ms_per_session"))
    lines.append(row("OpenEnv client (`GenericEnvClient`, this process): its CPU per session", "openenv_client_cpu_ms_per_session"))
    lines.append(row("OpenEnv server / in process: sessions per second", "openenv_vs_inprocess_sessions_ratio", "×"))
    prefix = f"mcp_http_sessions_{n}"
    for op, what in (
        ("reset", "connect + initialize + tools/list"),
        ("step", "first tool call (opens the sandbox)"),
        ("grade", "leave the session (DELETE)"),
    ):
        lines.append(row(f"MCP over HTTP: {what}, p50", f"{prefix}_{op}_p50_ms"))
        lines.append(row(f"MCP over HTTP: {what}, p99", f"{prefix}_{op}_p99_ms"))
    lines.append(row("MCP over HTTP: sessions per second (first connect to last close)", f"{prefix}_per_s", "/s"))
    lines.append(row("MCP over HTTP: memory per session holding its sandbox (RSS growth / sessions)", "mcp_http_session_mib", " MiB"))
    lines.append(row("MCP over HTTP: the server's CPU per session", "mcp_http_server_cpu_ms_per_session"))
    lines.append(row("MCP over HTTP: the client's (the MCP SDK's, this process) CPU per session", "mcp_http_client_cpu_ms_per_session"))
    lines.append(row("MCP over HTTP / OpenEnv server: sessions per second", "mcp_http_vs_openenv_sessions_ratio", "×"))
    lines.append(row("in process: CPU per session (environment and caller)", "inprocess_cpu_ms_per_session"))
    lines.append(row("MCP over HTTP / OpenEnv server: sessions per second of the server's own CPU", "mcp_http_vs_openenv_server_capacity_ratio", "×"))
    lines.append(row("OpenEnv server / in process: sessions per second of CPU", "openenv_vs_inprocess_server_capacity_ratio", "×"))
    for op in ("reset", "step", "grade"):
        lines.append(row(f"server / in-process, {op} p50", f"openenv_vs_inprocess_{op}_p50_ratio", "×"))
    lines += [
        "",
        f"Each wave sends all {n} requests at once, so a figure is a session's time inside a wave of {n}: the p99 is about the "
        f"time the whole wave took, and a wave's p99 divided by {n} is the service time per session "
        f"({R[f'openenv_sessions_{n}_step_p99_ms'] / n:.2f} ms per tool step, {R[f'openenv_sessions_{n}_grade_p99_ms'] / n:.2f} ms per "
        f"graded final step, {R[f'openenv_sessions_{n}_reset_p99_ms'] / n:.2f} ms per connect and reset on the server). The baseline runs its "
        "sessions and their client on one event loop in one process, the served run uses two processes (server and "
        "clients), which is why a served step can be faster than the in-process one. The MCP waves carry the MCP SDK client's "
        f"own cost as well: {n} SDK sessions (each its own HTTP client, all sharing one TLS context, and its JSON-RPC "
        "session; each asks twice, a second apart, for an event stream the server answers 405, as it offers none) in one "
        "client process on the same cores as the server: "
        f"{R['mcp_http_client_cpu_ms_per_session']:g} ms of client CPU per session against the server's "
        f"{R['mcp_http_server_cpu_ms_per_session']:g} ms, so the waves measure the SDK's client as much as the server. The "
        "server-capacity ratios compare the servers alone: sessions per second of each server's own CPU (the in-process "
        "figure: the whole process's CPU, environment and caller). Both servers run as the `serve` commands run them, "
        "their start-up heap frozen out of the cyclic collector (`startup_heap_frozen`); the baseline and the clients run "
        "with the interpreter's defaults, as a training script does.",
        SECTION_END,
        "",
    ]
    write_section("\n".join(lines), SECTION_START, SECTION_END)


if __name__ == "__main__":
    main()
