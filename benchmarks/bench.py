#!/usr/bin/env python
"""groundstate performance benchmarks: `python benchmarks/bench.py [--quick]`.

Measures, in one process run (every figure a median of repeated runs, with min–max; every ratio taken from
figures measured in this same run):

1. sandbox open latency per attempt vs world size (SQLite `backend.open(template)` + close; PostgreSQL
   pooled reuse after warm-up and the first-clone cost), and memory per open SQLite sandbox (RSS delta);
2. grading latency for a fixed 3-row change (the shop fixture's `shop-multi` gold writes) with groundstate's
   grader (golden cached, only the attempt's grade timed) vs a full-dump baseline (every table, ORDER BY
   primary key, canonicalised with `canon_value`, JSON, SHA-256, compared with the golden hash);
3. episode throughput with the scripted gold agent: in-process tools vs MCP (stdio, one server process per
   attempt; and in-process MCP), and `runner.run` attempts per second with 1 and 2 worker processes;
4. harness overhead at benchmark scale: 507 bundled tasks × k = 20 (10,140 attempts) end to end on SQLite,
   then `metrics.compute` on the results file;
5. fork (`Backend.fork`) of a live sandbox vs an open of the same size and vs replaying the prefix on a fresh
   sandbox, both backends, 1k–100k (`--only fork` runs this phase alone and merges its keys).

Writes benchmarks/results.json (flat keys: `<key>` is the median, `<key>_min`, `<key>_max`, `<key>_n`) and
refreshes the "Performance benchmarks" section at the end of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import hashlib
import json
import multiprocessing as mp
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from results_file import RESULTS_MD, write_section  # noqa: E402 - beside this script

from groundstate.grading.grader import Grader, replay  # noqa: E402
from groundstate.state.changes import canon_value  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.worlds.domain import Domain  # noqa: E402

SHOP = ROOT / "tests" / "fixtures" / "shop"
RESULTS_JSON = ROOT / "benchmarks" / "results.json"
SECTION_START = "<!-- bench:start (written by benchmarks/bench.py; refreshed on each run) -->"
SECTION_END = "<!-- bench:end -->"
FORK_START = "<!-- bench-fork:start (written by benchmarks/bench.py's fork phase) -->"
FORK_END = "<!-- bench-fork:end -->"
SIZES = {"1k": 2.5, "10k": 25.0, "100k": 250.0, "1m": 2500.0}  # shop seed: ≈ 400 rows × scale
PG_BUILD_LIMIT_S = 180.0

R: dict[str, Any] = {}  # flat results
NOTES: list[str] = []


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def record(key: str, samples: list[float], digits: int = 4) -> float:
    med = statistics.median(samples)
    R[key] = round(med, digits)
    R[key + "_min"] = round(min(samples), digits)
    R[key + "_max"] = round(max(samples), digits)
    R[key + "_n"] = len(samples)
    return med


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def shop() -> tuple[Domain, Any]:
    """The shop fixture and its `shop-multi` task, with customer 3 patched to `basic` so that the gold writes
    change exactly 3 rows (customer 3's tier, order 3's total and status, a new tag); in the seed customer 3 is
    already `gold`, which would leave only 2 rows different from the template."""
    d = Domain(SHOP)
    t = d.task("shop-multi")
    return d, t.model_copy(update={"patch": {**t.patch, "customers": [{"id": 3, "tier": "basic"}]}})


def world_rows(domain: Domain, sandbox) -> int:
    return sum(sandbox.connection.scalar(f"SELECT COUNT(*) AS n FROM {t}") for t in domain.tables)


# -- full-dump baseline ------------------------------------------------------------------------------
def full_dump_hash(domain: Domain, sandbox) -> str:
    """The reference harness's approach: dump every table in primary-key order, canonicalise, JSON, SHA-256."""
    raw = sandbox.connection.raw
    h = hashlib.sha256()
    for table in sorted(domain.tables):
        pk = ", ".join(domain.primary_keys[table])
        cur = raw.cursor()
        cur.execute(f"SELECT * FROM {table} ORDER BY {pk}")
        cols = [c[0] for c in cur.description]
        rows = [[canon_value(v) for v in r] for r in cur.fetchall()]
        h.update(json.dumps({"table": table, "columns": cols, "rows": rows}, separators=(",", ":")).encode())
    return h.hexdigest()


# -- PostgreSQL helpers ---------------------------------------------------------------------------
def pg_backend(scale: float):
    try:
        from groundstate.state.postgres import PostgresBackend

        b = PostgresBackend(scale=scale)
        b._admin_execute("SELECT 1")
        return b
    except Exception as e:  # noqa: BLE001
        NOTES.append(f"PostgreSQL unavailable: {type(e).__name__}: {e}")
        return None


def pg_drop_cached(backend, scale: float) -> None:
    """Drop this benchmark's cached shop templates at this scale, so the build is measured from scratch."""
    suffix = "_" + str(scale).replace(".", "_")
    for (name,) in backend._admin_execute("SELECT datname FROM pg_database WHERE datname LIKE 'gs%%'"):
        if (name.startswith("gs_base_shop_") or name.startswith("gs_tpl_")) and name.endswith(suffix):
            backend._admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _sandbox_kib(scale: float, n_open: int) -> float:
    """In a fresh process: RSS growth per open SQLite sandbox over `n_open` open sandboxes (after the template is built)."""
    import ctypes

    domain, task = shop()
    be = SqliteBackend(scale=scale)
    tpl = be.prepare(domain, task.patch)
    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = rss_bytes()
    boxes = [be.open(tpl) for _ in range(n_open)]
    for b in boxes:
        b.connection.scalar("SELECT COUNT(*) AS n FROM customers")
    after = rss_bytes()
    for b in boxes:
        b.close()
    return (after - before) / n_open / 1024


# -- 1. sandbox open ------------------------------------------------------------------------------
def bench_open(sizes: list[str], quick: bool) -> None:
    domain, task = shop()
    for label in sizes:
        scale = SIZES[label]
        big = label == "1m"
        # SQLite
        log(f"open: sqlite {label}")
        be = SqliteBackend(scale=scale)
        t_build, tpl = timed(lambda be=be: be.prepare(domain, task.patch))
        R[f"sqlite_template_build_s_{label}"] = round(t_build, 3)
        R[f"sqlite_template_mib_{label}"] = round(len(tpl.handle) / 2**20, 2)
        with be.open(tpl) as sb:
            R[f"world_rows_{label}"] = world_rows(domain, sb)
        for _ in range(5):
            be.open(tpl).close()
        reps = (10 if quick else 40) if big else (30 if quick else 300)
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            sb = be.open(tpl)
            sb.close()
            samples.append((time.perf_counter() - t0) * 1000)
        record(f"sqlite_open_ms_{label}", samples)
        n_open = 10 if big else 100
        ctx = mp.get_context("spawn")
        with ctx.Pool(1, maxtasksperchild=1) as pool:  # a fresh process per run: freed heap is never reused
            kib = [pool.apply(_sandbox_kib, (scale, n_open)) for _ in range((2 if big else 3) if not quick else 1)]
        record(f"sqlite_sandbox_kib_{label}", kib, 1)
        R[f"sqlite_sandbox_kib_{label}_sandboxes"] = n_open
        be.close()
        be = tpl = None  # noqa: F841 - release the template before the next size
        gc.collect()

        # PostgreSQL
        pb = pg_backend(scale)
        if pb is None:
            continue
        try:
            log(f"open: postgres {label}")
            pg_drop_cached(pb, scale)
            if big and R.get("postgres_template_build_s_100k", 0) * 10 > PG_BUILD_LIMIT_S:
                NOTES.append(f"PostgreSQL 1M: not measured (predicted build {R['postgres_template_build_s_100k'] * 10:.0f} s > 180 s)")
                continue
            t_build, ptpl = timed(lambda pb=pb: pb.prepare(domain, task.patch))
            R[f"postgres_template_build_s_{label}"] = round(t_build, 2)
            if t_build > PG_BUILD_LIMIT_S:
                NOTES.append(f"PostgreSQL {label}: template build took {t_build:.0f} s (> 180 s): not measured")
                continue
            first = []
            for _ in range(3 if (quick or big) else 7):
                pb.drain()
                t0 = time.perf_counter()
                sb = pb.open(ptpl)
                first.append((time.perf_counter() - t0) * 1000)
                sb.close()
            record(f"postgres_first_clone_ms_{label}", first, 2)
            for _ in range(10):
                pb.open(ptpl).close()
            samples = []
            for _ in range(30 if quick else 300):
                t0 = time.perf_counter()
                sb = pb.open(ptpl)
                sb.close()
                samples.append((time.perf_counter() - t0) * 1000)
            record(f"postgres_open_ms_{label}", samples)
        finally:
            pb.close()


# -- 2. grading ------------------------------------------------------------------------------------
def bench_grading(sizes: list[str], quick: bool) -> None:
    domain, task = shop()
    gold = [c.model_dump() for c in task.gold]
    makers: list[tuple[str, Callable[[float], Any]]] = [("sqlite", lambda s: SqliteBackend(scale=s)), ("postgres", pg_backend)]
    for label in sizes:
        scale = SIZES[label]
        reps = {"1k": 30, "10k": 20, "100k": 7, "1m": 3}[label]
        if quick:
            reps = max(3, reps // 5)
        for name, make in makers:
            if name == "postgres" and f"postgres_open_ms_{label}" not in R:
                continue  # not built (unavailable or too slow)
            log(f"grading: {name} {label}")
            be = make(scale)
            if be is None:
                continue
            try:
                tpl = be.prepare(domain, task.patch)
                grader = Grader(be)
                grader.golden(task, tpl)  # cached: only the attempt's grade is timed
                with be.open(tpl) as sb:
                    replay(sb, gold)
                    golden_hash = full_dump_hash(domain, sb)
                    R[f"grade_changed_rows_{label}"] = len(sb.changes())
                ours, dump = [], []
                for i in range(reps):
                    with be.open(tpl) as sb:
                        results = replay(sb, gold)
                        assert all(ok for ok, _ in results), results
                        order = [0, 1] if i % 2 == 0 else [1, 0]
                        for which in order:
                            if which == 0:
                                dt, v = timed(lambda grader=grader: grader.grade(task, sb))
                                assert v.reward == 1, v.reasons
                                ours.append(dt * 1000)
                            else:
                                dt, h = timed(lambda: full_dump_hash(domain, sb))
                                assert h == golden_hash
                                dump.append(dt * 1000)
                assert R[f"grade_changed_rows_{label}"] == 3, R[f"grade_changed_rows_{label}"]
                record(f"{name}_grade_ms_{label}", ours)
                record(f"{name}_full_dump_ms_{label}", dump, 2)
                ratios = [d / o for o, d in zip(ours, dump, strict=True)]
                record(f"{name}_grade_speedup_vs_full_dump_{label}", ratios, 1)
            finally:
                be.close()
        if f"sqlite_grade_speedup_vs_full_dump_{label}" in R:
            R[f"grade_speedup_vs_full_dump_{label}"] = R[f"sqlite_grade_speedup_vs_full_dump_{label}"]


# -- 3. episode throughput -------------------------------------------------------------------------
def bench_mcp(quick: bool) -> None:
    from groundstate.grading.grader import grader_for
    from groundstate.tools.mcp_client import McpToolset
    from groundstate.tools.mcp_server import build_server

    domain, task = shop()
    gold = [c.model_dump() for c in task.gold]
    be = SqliteBackend()
    tpl = be.prepare(domain, task.patch)
    grader = grader_for(be)
    grader.golden(task, tpl)

    log("throughput: in-process tools")
    samples = []
    for _ in range(30 if quick else 300):
        t0 = time.perf_counter()
        with be.open(tpl) as sb:
            for c in gold:
                assert domain.tools.call(sb.connection, c["tool"], c["args"]).ok
            assert grader.grade(task, sb).reward == 1
        samples.append((time.perf_counter() - t0) * 1000)
    inproc = record("attempt_ms_inprocess_tools", samples)

    async def mcp_inprocess_once() -> None:
        with be.open(tpl) as sb:
            server = build_server(domain, be, task, sandbox=sb)
            async with McpToolset.in_process(server) as ts:
                for c in gold:
                    assert (await ts.acall(c["tool"], c["args"])).ok
            assert grader.grade(task, sb).reward == 1

    log("throughput: MCP in-process")
    samples = []
    for _ in range(10 if quick else 50):
        t0 = time.perf_counter()
        asyncio.run(mcp_inprocess_once())
        samples.append((time.perf_counter() - t0) * 1000)
    mcp_in = record("attempt_ms_mcp_inprocess", samples, 2)

    errpath = Path(tempfile.mkstemp(prefix="gs_bench_mcp_", suffix=".log")[1])

    async def mcp_stdio_once() -> None:
        with open(errpath, "a") as errlog:
            async with McpToolset.stdio(
                sys.executable, ["-m", "groundstate.cli.mcp", "--domain", str(SHOP), "--task", task.id], cwd=str(ROOT), errlog=errlog
            ) as ts:
                for c in gold:
                    assert (await ts.acall(c["tool"], c["args"])).ok

    log("throughput: MCP stdio, one server process per attempt")
    samples = []
    n_stdio = 3 if quick else 10
    for _ in range(n_stdio):
        t0 = time.perf_counter()
        asyncio.run(mcp_stdio_once())
        samples.append((time.perf_counter() - t0) * 1000)
    stdio = record("attempt_ms_mcp_stdio_process_per_attempt", samples, 1)
    text = errpath.read_text()
    R["mcp_stdio_attempts_graded_reward_1"] = text.count("reward=1")
    R["mcp_stdio_attempts"] = n_stdio
    errpath.unlink(missing_ok=True)
    R["mcp_stdio_vs_inprocess_slowdown"] = round(stdio / inproc, 1)
    R["mcp_inprocess_vs_inprocess_slowdown"] = round(mcp_in / inproc, 1)
    R["attempts_per_s_inprocess_tools"] = round(1000 / inproc, 1)
    R["attempts_per_s_mcp_stdio_process_per_attempt"] = round(1000 / stdio, 2)
    be.close()


def _worker(share_ids: list[str], k: int, path: str, barrier, queue) -> None:
    from groundstate.pipeline.runner import RunConfig, run
    from groundstate.worlds.domain import iter_tasks

    wanted = set(share_ids)
    tasks = [(t, d) for t, d in iter_tasks() if t.id in wanted]
    barrier.wait()
    be = SqliteBackend()
    s = run(tasks, RunConfig(agent="scripted:gold", k=k), be, Path(path))
    queue.put((time.monotonic(), s.ran, s.passed, s.system_errors))


def bench_workers(quick: bool, tmp: Path) -> None:
    from groundstate.worlds.domain import iter_tasks

    ids = [t.id for t, _ in iter_tasks()[:507]]
    k = 2 if quick else 4
    ctx = mp.get_context("spawn")
    rates: dict[int, float] = {}
    for n in (1, 2):
        log(f"throughput: runner.run with {n} worker process(es), 507 tasks × k={k}")
        samples = []
        for rep in range(1 if quick else 3):
            barrier, queue = ctx.Barrier(n + 1), ctx.Queue()
            procs = [ctx.Process(target=_worker, args=(ids[i::n], k, str(tmp / f"w{n}_{rep}_{i}.jsonl"), barrier, queue)) for i in range(n)]
            for p in procs:
                p.start()
            barrier.wait()
            t0 = time.monotonic()
            outs = [queue.get() for _ in procs]
            for p in procs:
                p.join()
            wall = max(o[0] for o in outs) - t0
            ran = sum(o[1] for o in outs)
            assert ran == len(ids) * k and sum(o[2] for o in outs) == ran, outs
            samples.append(ran / wall)
        rates[n] = record(f"attempts_per_s_runner_{n}_worker{'s' if n > 1 else ''}", samples, 1)
    R["runner_workers_attempts"] = len(ids) * k
    R["runner_2_workers_speedup"] = round(rates[2] / rates[1], 2)


# -- 4. benchmark-scale run -----------------------------------------------------------------------
def bench_scale(quick: bool, tmp: Path) -> None:
    from groundstate.pipeline.runner import RunConfig, run
    from groundstate.records import read_records
    from groundstate.stats import metrics
    from groundstate.worlds.domain import iter_tasks

    t_load, all_tasks = timed(iter_tasks)
    R["bundled_tasks"] = len(all_tasks)
    R["tasks_load_s"] = round(t_load, 3)
    tasks = all_tasks[:507]
    k = 2 if quick else 20
    runs, mets = [], []
    for rep in range(1 if quick else 3):
        log(f"scale: 507 tasks × k={k} scripted run, rep {rep + 1}")
        path = tmp / f"scale_{rep}.jsonl"
        t0 = time.perf_counter()
        be = SqliteBackend()
        s = run(tasks, RunConfig(agent="scripted:gold", k=k), be, path)
        be.close()
        runs.append(time.perf_counter() - t0)
        assert s.ran == 507 * k and s.passed == s.ran, s
        t0 = time.perf_counter()
        m = metrics.compute(read_records(path), k=k)
        mets.append(time.perf_counter() - t0)
        assert m["attempts"] == 507 * k
        R["scale_results_mib"] = round(path.stat().st_size / 2**20, 1)
    key = f"scripted_run_{507 * k}_s"
    record(key, runs, 2)
    record(f"metrics_compute_{507 * k}_s", mets, 3)
    R["scale_attempts"] = 507 * k
    R["scale_attempts_per_s"] = round(507 * k / statistics.median(runs), 1)


# -- machine, report --------------------------------------------------------------------------------
# -- 5. fork ---------------------------------------------------------------------------------------
def bench_fork(sizes: list[str], quick: bool) -> None:
    """Per backend and world size, from one loop: open a sandbox (SQLite: a deserialized copy; PostgreSQL: a new clone,
    CREATE DATABASE … TEMPLATE, as the pool is empty), replay the prefix (shop-multi's first 3 gold calls, 2 writes),
    fork it; then close both. `fork_open_ms` is that open, `fork_ms` the fork, `fork_replay_ms` open + prefix (what a
    fork saves); on PostgreSQL also open + prefix on a pooled clone (`fork_replay_pooled_ms`, its reset a ROLLBACK)."""
    domain, task = shop()
    gold = [c.model_dump() for c in task.gold]
    prefix = gold[:3]

    def play(sb) -> None:
        for call in prefix:
            result = domain.tools.call(sb.connection, call["tool"], call["args"])
            assert result.ok, result.content

    for label in [lb for lb in sizes if lb != "1m"]:
        scale = SIZES[label]
        for name in ("sqlite", "postgres"):
            be = SqliteBackend(scale=scale) if name == "sqlite" else pg_backend(scale)
            if be is None:
                continue
            log(f"fork: {name} {label}")
            try:
                tpl = be.prepare(domain, task.patch)
                if name == "sqlite" and f"world_rows_{label}" not in R:
                    with be.open(tpl) as sb:
                        R[f"world_rows_{label}"] = world_rows(domain, sb)
                reps = (30 if quick else 200) if name == "sqlite" else (5 if quick else 15)
                opens, forks, replays = [], [], []
                for i in range(reps + 2):  # the first 2 warm up
                    t_open, sb = timed(lambda be=be, tpl=tpl: be.open(tpl))
                    t_play, _ = timed(lambda sb=sb: play(sb))
                    t_fork, fork = timed(lambda be=be, sb=sb: be.fork(sb))
                    if i == 0:
                        assert fork.changes().to_json() == sb.changes().to_json() and len(sb.changes()) == 2
                    fork.close()
                    sb.close()
                    if i >= 2:
                        opens.append(t_open * 1000)
                        forks.append(t_fork * 1000)
                        replays.append((t_open + t_play) * 1000)
                o = record(f"fork_open_ms_{name}_{label}", opens)
                f = record(f"fork_ms_{name}_{label}", forks)
                r = record(f"fork_replay_ms_{name}_{label}", replays)
                R[f"fork_vs_open_{name}_{label}"] = round(f / o, 2)
                R[f"fork_vs_replay_{name}_{label}"] = round(f / r, 2)
                if name == "postgres":
                    pooled = []
                    for i in range(reps + 2):
                        t0 = time.perf_counter()
                        with be.open(tpl) as sb:
                            play(sb)
                            if i >= 2:
                                pooled.append((time.perf_counter() - t0) * 1000)
                    p = record(f"fork_replay_pooled_ms_postgres_{label}", pooled)
                    R[f"fork_vs_replay_pooled_postgres_{label}"] = round(f / p, 2)
                log(f"fork {name} {label}: open {o:.3f} ms, fork {f:.3f} ms ({f / o:.2f}× open), replay {r:.3f} ms ({f / r:.2f}×)")
            finally:
                be.close()


def fork_rows(sizes: list[str]) -> list[tuple[str, str, str]]:
    out = []
    for label in [lb for lb in sizes if lb != "1m"]:
        out.append((f"world {label} ({R.get(f'world_rows_{label}', '?')} rows)", "", ""))
        for be, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
            for key, what, unit in (
                (f"fork_open_ms_{be}_{label}", f"{name} open (a copy of the template)", " ms"),
                (f"fork_ms_{be}_{label}", f"{name} fork of a live sandbox", " ms"),
                (f"fork_replay_ms_{be}_{label}", f"{name} open + replay of the 3-call prefix", " ms"),
                (f"fork_replay_pooled_ms_{be}_{label}", f"{name} pooled open + replay of the prefix", " ms"),
                (f"fork_vs_open_{be}_{label}", f"{name} fork / open", "×"),
                (f"fork_vs_replay_{be}_{label}", f"{name} fork / (open + replay)", "×"),
                (f"fork_vs_replay_pooled_{be}_{label}", f"{name} fork / (pooled open + replay)", "×"),
            ):
                if key in R:
                    out.append((f"  {what}", fmt(key, unit), key))
    return out


def write_fork_markdown(sizes: list[str], command: str, finished: str, load: str) -> None:
    lines = [
        FORK_START,
        "## Fork of a live sandbox vs open (#34)",
        "",
        f"Command: `{command}`, {finished[:10]}; load average (1/5/15 min) at end {load} (2 shared cores: absolute "
        "times are pessimistic; ratios are taken within this run). World: the shop fixture in `shop-multi`'s start "
        "state, as above. Each round opens a sandbox, replays the prefix (the first 3 of the task's gold calls, 2 of "
        "them writes), forks it, then closes both; the open is a copy of the template (SQLite: deserialize; "
        "PostgreSQL: a new clone, CREATE DATABASE … TEMPLATE, since forked-from sandboxes are dropped, not pooled), the "
        "fork a copy of the live sandbox (SQLite: the backup API, page by page; PostgreSQL: commit, CREATE DATABASE … "
        "TEMPLATE the sandbox, reconnect). On PostgreSQL the prefix is also replayed on a pooled clone (reset by "
        "ROLLBACK), which a fork of a short prefix does not beat.",
        "",
        "| measurement | median (min–max, n) | key in results.json |",
        "| --- | --- | --- |",
    ]
    for label, value, key in fork_rows(sizes):
        lines.append(f"| **{label}** | | |" if not value else f"| {label} | {value} | `{key}` |")
    lines += ["", FORK_END, ""]
    write_section("\n".join(lines), FORK_START, FORK_END, after=SECTION_END)


def machine() -> dict[str, str]:
    def sh(cmd: str) -> str:
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001
            return "?"

    mem = sh("free -g | awk '/Mem:/ {print $2}'")
    pg = "?"
    try:
        pb = pg_backend(1.0)
        if pb is not None:
            pg = pb._admin_execute("SHOW server_version")[0][0]
            pb.close()
    except Exception:  # noqa: BLE001
        pass
    return {
        "nproc": sh("nproc"),
        "memory_gib": mem,
        "cpu": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgresql": pg,
        "platform": platform.platform(),
    }


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def fmt(key: str, unit: str = "") -> str:
    if key not in R:
        return "not measured"
    v = R[key]
    if key + "_min" in R:
        return f"{v:g}{unit} ({R[key + '_min']:g}–{R[key + '_max']:g}, n={R[key + '_n']})"
    return f"{v:g}{unit}"


def rows_table(sizes: list[str]) -> list[tuple[str, ...]]:
    out = []
    for label in sizes:
        out.append((f"world {label} ({R.get(f'world_rows_{label}', '?')} rows)", "", ""))
        out.append(("  SQLite open+close per attempt", fmt(f"sqlite_open_ms_{label}", " ms"), f"sqlite_open_ms_{label}"))
        out.append(("  SQLite memory per open sandbox", fmt(f"sqlite_sandbox_kib_{label}", " KiB"), f"sqlite_sandbox_kib_{label}"))
        out.append(("  PostgreSQL pooled open+close", fmt(f"postgres_open_ms_{label}", " ms"), f"postgres_open_ms_{label}"))
        out.append(
            (
                "  PostgreSQL first clone (CREATE DATABASE … TEMPLATE)",
                fmt(f"postgres_first_clone_ms_{label}", " ms"),
                f"postgres_first_clone_ms_{label}",
            )
        )
        out.append(
            ("  PostgreSQL template build (seed + patch)", fmt(f"postgres_template_build_s_{label}", " s"), f"postgres_template_build_s_{label}")
        )
        for be, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
            out.append((f"  {name} grade (groundstate, golden cached)", fmt(f"{be}_grade_ms_{label}", " ms"), f"{be}_grade_ms_{label}"))
            out.append((f"  {name} grade (full-dump baseline)", fmt(f"{be}_full_dump_ms_{label}", " ms"), f"{be}_full_dump_ms_{label}"))
            out.append(
                (f"  {name} speedup vs full dump", fmt(f"{be}_grade_speedup_vs_full_dump_{label}", "×"), f"{be}_grade_speedup_vs_full_dump_{label}")
            )
    out.append(("episode throughput (shop-multi, 5 gold calls, graded)", "", ""))
    for key, label, unit in (
        ("attempt_ms_inprocess_tools", "  in-process tools, per attempt", " ms"),
        ("attempt_ms_mcp_inprocess", "  MCP in-process (no subprocess), per attempt", " ms"),
        ("attempt_ms_mcp_stdio_process_per_attempt", "  MCP stdio, one server process per attempt", " ms"),
        ("mcp_stdio_vs_inprocess_slowdown", "  MCP stdio / in-process", "×"),
        ("attempts_per_s_runner_1_worker", "  runner.run, 1 worker process", " attempts/s"),
        ("attempts_per_s_runner_2_workers", "  runner.run, 2 worker processes", " attempts/s"),
        ("runner_2_workers_speedup", "  2 workers / 1 worker", "×"),
    ):
        out.append((label, fmt(key, unit), key))
    out.append(("benchmark-scale run", "", ""))
    sk = next((k for k in R if k.startswith("scripted_run_") and k.endswith("_s")), None)
    mk = next((k for k in R if k.startswith("metrics_compute_") and k.endswith("_s")), None)
    if sk:
        out.append((f"  scripted run, 507 tasks × k, {R['scale_attempts']:,} attempts (SQLite, incl. results file)", fmt(sk, " s"), sk))
    if mk:
        out.append(("  metrics.compute on the results file", fmt(mk, " s"), mk))
    return out


def targets() -> list[tuple[str, str, str]]:
    def check(cond: bool | None) -> str:
        return "not measured" if cond is None else ("holds" if cond else "MISSED")

    g100, g1 = R.get("grade_speedup_vs_full_dump_100k"), R.get("grade_speedup_vs_full_dump_1k")
    o10 = R.get("sqlite_open_ms_10k")
    sk = R.get("scripted_run_10140_s")
    out = [
        ("grading at 100k ≥ 100× faster than full dump (SQLite)", f"{g100}×" if g100 else "-", check(None if g100 is None else g100 >= 100)),
        ("grading at 1k not slower than full dump (SQLite)", f"{g1}×" if g1 else "-", check(None if g1 is None else g1 >= 1)),
        ("SQLite open of a 10k world < 1 ms median", f"{o10} ms" if o10 is not None else "-", check(None if o10 is None else o10 < 1)),
        ("10,140-attempt scripted run < 60 s", f"{sk} s" if sk is not None else "-", check(None if sk is None else sk < 60)),
    ]
    pg100, pg1 = R.get("postgres_grade_speedup_vs_full_dump_100k"), R.get("postgres_grade_speedup_vs_full_dump_1k")
    out.append(
        ("PostgreSQL grading at 100k ≥ 100× faster than full dump", f"{pg100}×" if pg100 else "-", check(None if pg100 is None else pg100 >= 100))
    )
    out.append(("PostgreSQL grading at 1k not slower than full dump", f"{pg1}×" if pg1 else "-", check(None if pg1 is None else pg1 >= 1)))
    return out


def write_markdown(sizes: list[str], meta: dict[str, Any]) -> None:
    m = meta
    lines = [
        SECTION_START,
        "## Performance benchmarks",
        "",
        f"Command: `{m['command']}` (what `make bench` runs), {m['finished'][:10]}, {m['wall_s']:.0f} s in all.",
        f"Machine: {m['nproc']} CPU cores ({m['cpu']}), {m['memory_gib']} GiB, Python {m['python']}, SQLite {m['sqlite']}, "
        f"PostgreSQL {m['postgresql']} on localhost. Load average (1/5/15 min) at start {m['load_start']}, at end {m['load_end']}; 1-minute load after each phase: {m['load_1min_after_each_phase']}"
        " — another test run may have been using the CPUs, so absolute times are pessimistic; ratios are taken within this run.",
        "",
        "Every figure is the median of repeated runs, with min–max and the number of runs in brackets. World: the shop "
        "fixture (`tests/fixtures/shop`, 100 customers + 300 orders per unit of scale) in the start state of its "
        "`shop-multi` task (its patch extended to set customer 3's tier to basic); the attempt is that task's 5 gold tool calls, "
        f"which change {R.get('grade_changed_rows_10k', '?')} rows (customer 3's tier, order 3's total and status, a new tag). "
        "PostgreSQL isolation scheme: template databases, pooled private clones reset by ROLLBACK. The full-dump baseline "
        "dumps every table (`SELECT * … ORDER BY` primary key), canonicalises each value with `canon_value`, serialises to "
        "JSON and hashes with SHA-256, then compares with the golden hash (the reference harness's approach); "
        "groundstate's grade reads the trigger-filled change log with the golden change set cached. Each speedup is the "
        "median of per-attempt ratios (both graders on the same sandbox, order alternated).",
        "",
        "| measurement | median (min–max, n) | key in results.json |",
        "| --- | --- | --- |",
    ]
    for label, value, key in rows_table(sizes):
        if not value:
            lines.append(f"| **{label}** | | |")
        else:
            lines.append(f"| {label} | {value} | `{key}` |")
    lines += ["", "Targets (from the issue):", "", "| target | measured | verdict |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in targets()]
    lines += [""]
    extra = [
        f"SQLite memory per open sandbox: RSS growth over {R.get('sqlite_sandbox_kib_10k_sandboxes', 100)} open sandboxes "
        "(10 for the 1M world), divided by their number, each run in a fresh process after the template is built; "
        "open+close latency is timed in a tight loop after 5 warm-up opens; template sizes (serialized database): "
        + ", ".join(f"{lb} {R[f'sqlite_template_mib_{lb}']} MiB" for lb in sizes if f"sqlite_template_mib_{lb}" in R)
        + ".",
        f"MCP stdio: each attempt spawns `python -m groundstate.cli.mcp --domain tests/fixtures/shop --task shop-multi` "
        f"(the server builds the template, serves the 5 calls and grades the session at its end; "
        f"{R.get('mcp_stdio_attempts_graded_reward_1', '?')}/{R.get('mcp_stdio_attempts', '?')} graded reward=1); the wall time "
        'includes interpreter start, imports and template build. "MCP in-process" is the SDK\'s in-process client against '
        "`build_server(..., sandbox=...)` per attempt (no process, no pipe). A reused stdio session is not measured: over "
        "stdio the connection is the session, so one sandbox would be shared by attempts.",
        f"Worker throughput: 507 bundled tasks × k = {R.get('runner_workers_attempts', 0) // 507}, split by task across "
        "spawned worker processes, each running `runner.run` with its own SQLite backend into its own results file; timed "
        "from a barrier after imports to the last worker's end (template builds included).",
        f"Benchmark-scale run: the first 507 of the {R.get('bundled_tasks', '?')} bundled tasks (`iter_tasks()`), "
        '`runner.run(..., RunConfig(agent="scripted:gold", k=20))` on a fresh `SqliteBackend()`, results written to a JSONL '
        f"file ({R.get('scale_results_mib', '?')} MiB); every attempt passed. Loading the task files is not included.",
    ]
    lines += [f"- {e}" for e in extra + NOTES]
    lines += ["", SECTION_END, ""]
    write_section("\n".join(lines), SECTION_START, SECTION_END)


def print_table(sizes: list[str]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for label, value, _ in rows_table(sizes):
            print(f"{label:70} {value}")
        return
    t = Table(title="groundstate benchmarks (median, min–max, n)")
    t.add_column("measurement")
    t.add_column("value", justify="right")
    for label, value, _ in rows_table(sizes):
        t.add_row(f"[bold]{label}[/bold]" if not value else label, value)
    c = Console()
    c.print(t)
    tt = Table(title="targets")
    for col in ("target", "measured", "verdict"):
        tt.add_column(col)
    for row in targets():
        tt.add_row(*row)
    c.print(tt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, no 1M world, k=2 instead of 20 (a smoke run)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results.json and RESULTS.md alone")
    ap.add_argument("--only", choices=["fork"], help="run this phase alone and merge its keys into results.json")
    args = ap.parse_args()
    sizes = ["1k", "10k", "100k"] if args.quick else ["1k", "10k", "100k", "1m"]
    if args.only == "fork":
        fork_only(sizes, args.quick, args.no_write)
        return
    start = time.perf_counter()
    meta = machine()
    meta["load_start"] = loadavg()
    meta["command"] = "python benchmarks/bench.py" + (" --quick" if args.quick else "")
    meta["started"] = datetime.now(UTC).isoformat(timespec="seconds")
    log(f"machine: {meta}")
    with tempfile.TemporaryDirectory(prefix="gs_bench_") as tmp:
        phases: dict[str, str] = {}
        for name, fn in (
            ("open", lambda: bench_open(sizes, args.quick)),
            ("grading", lambda: bench_grading(sizes, args.quick)),
            ("mcp", lambda: bench_mcp(args.quick)),
            ("workers", lambda: bench_workers(args.quick, Path(tmp))),
            ("scale", lambda: bench_scale(args.quick, Path(tmp))),
            ("fork", lambda: bench_fork(sizes, args.quick)),
        ):
            fn()
            phases[name] = loadavg().split()[0]
        meta["load_1min_after_each_phase"] = ", ".join(f"{k} {v}" for k, v in phases.items())
    meta["load_end"] = loadavg()
    meta["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    meta["wall_s"] = time.perf_counter() - start
    print_table(sizes)
    if args.no_write:
        return
    out = {f"meta_{k}": v for k, v in meta.items()}
    out["meta_quick"] = args.quick
    out["meta_notes"] = NOTES
    out.update(R)
    RESULTS_JSON.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    write_markdown(sizes, meta)
    write_fork_markdown(sizes, meta["command"], meta["finished"], meta["load_end"])
    log(f"wrote {RESULTS_JSON.relative_to(ROOT)} and the section in {RESULTS_MD.relative_to(ROOT)}")


def fork_only(sizes: list[str], quick: bool, no_write: bool) -> None:
    """`--only fork`: the fork phase alone; its keys (and `meta_fork_*`) merged into results.json, its section refreshed."""
    from results_file import merge

    command = "python benchmarks/bench.py --only fork" + (" --quick" if quick else "")
    started = time.perf_counter()
    bench_fork(sizes, quick)
    for label, value, _ in fork_rows(sizes):
        print(f"{label:60} {value}")
    if no_write:
        return
    finished = datetime.now(UTC).isoformat(timespec="seconds")
    meta = {"meta_fork_command": command, "meta_fork_finished": finished, "meta_fork_wall_s": round(time.perf_counter() - started, 1)}
    merge({**meta, "meta_fork_load_end": loadavg(), **{k: v for k, v in R.items() if k.startswith(("fork_", "world_rows_"))}})
    write_fork_markdown(sizes, command, finished, loadavg())
    log(f"merged the fork keys into {RESULTS_JSON.relative_to(ROOT)} and refreshed their section in {RESULTS_MD.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
