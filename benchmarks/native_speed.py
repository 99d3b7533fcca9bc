#!/usr/bin/env python
"""Bridges and servers at native speed (#37): `python benchmarks/native_speed.py [--quick] [--only bridge]`.

Every figure is measured in this run against a baseline measured in the same run:

- **bridge** — `bridge_fork_speedup`: attempts per second of the ThinkingBox bridge with each attempt's server forked
  from a zygote (`start: fork`) over a fresh process per attempt (`start: process`), at the same concurrency, on
  the stand-in server of tests/fixtures/thinkingbox (served by the MCP SDK; with `--fastmcp PYTHON` also by
  fastmcp 3, as the benchmark's servers are). Each attempt is a full production attempt (`attempt.play`: servers
  started and initialised, the gold calls, effects, grading, teardown); one warm-up attempt per mode is not timed
  (it pays the zygote's imports once). The verdicts of both modes must be identical (every gold passes).

- **certify** — `certify_wall_over_cpu`: `groundstate tasks certify --domain D --backend sqlite` on bundled domains,
  its wall time over the CPU time of its process (user + system, from the OS); `certify_postgres_over_sqlite`: the
  same command's wall time with `--backend postgres` over SQLite's (the largest over the domains is the key); and,
  through the ThinkingBox bridge, certify of the stand-in's cases with `start: fork` against `start: process`
  (`certify_bridge_process_over_fork`, wall times).

Keys are merged into benchmarks/results.json (`results_file.merge`); the section between the `bench-native`
markers in benchmarks/RESULTS.md is refreshed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from results_file import RESULTS_MD, merge, write_section  # noqa: E402
from tb_standin import tb_pairs, write_dataset  # noqa: E402

from groundstate.agents.scripted import ScriptedUser, make_scripted_agent  # noqa: E402
from groundstate.state import make_backend  # noqa: E402
from groundstate.tools.fork_pool import close_all  # noqa: E402
from groundstate.worlds.attempt import play  # noqa: E402

INTROS = {
    "bridge": (
        "## Bridges and servers at native speed (#37): the forked bridge",
        "Each attempt is a whole production attempt through the ThinkingBox bridge (`attempt.play`: the case's server "
        "started and initialised, the gold calls, effects, grading, teardown, the server stopped), gold every time, all "
        "rewards 1 in both modes; one warm-up attempt per mode untimed. `start: process` starts a fresh server process per "
        "attempt (what the bridge did before); `start: fork` forks it from the command's zygote.",
    ),
    "certify": (
        "## Bridges and servers at native speed (#37): certify",
        "`groundstate tasks certify --domain D --backend B --json` as a subprocess, timed whole (the interpreter's start "
        "and the domain's load included); CPU is the subprocess's user + system time as the OS reports it (PostgreSQL's "
        "own server processes are not in it). Through the bridge: certify of the stand-in dataset's two cases (lint, "
        "alternatives, hacks: every attempt a fresh server), with `start: process` and with `start: fork`.",
    ),
}

BACKEND = make_backend("sqlite")  # unused by the bridge's worlds (their state is in the servers), required by play
R: dict[str, Any] = {}
ROWS: dict[str, list[tuple[str, str, str]]] = {"bridge": [], "certify": []}


def log(msg: str) -> None:
    print(f"[native_speed] {msg}", flush=True)


async def _attempts(task, domain, n: int, concurrency: int) -> tuple[float, list[Any]]:
    """`n` gold attempts, `concurrency` at a time: (wall seconds, rewards in order)."""
    slots = asyncio.Semaphore(concurrency)

    async def one() -> Any:
        async with slots:
            outcome = await play(task, domain, make_scripted_agent("scripted:gold", task, domain), ScriptedUser([]), backend=BACKEND)
            return outcome.verdict.reward if outcome.verdict.system_error is None else outcome.verdict.system_error

    start = time.perf_counter()
    rewards = await asyncio.gather(*(one() for _ in range(n)))
    return time.perf_counter() - start, list(rewards)


def bench_bridge(quick: bool, fastmcp: str | None) -> None:
    n, concurrency, rounds = (16, 4, 2) if quick else (48, 4, 3)
    frameworks = [("mcp", sys.executable, {})] + ([("fastmcp", fastmcp, {"TB_STANDIN_FRAMEWORK": "fastmcp"})] if fastmcp else [])
    with tempfile.TemporaryDirectory(prefix="gs_native_") as tmp:
        tb = write_dataset(Path(tmp))
        for label, python, extra in frameworks:
            rates: dict[str, list[float]] = {"process": [], "fork": []}
            for start in ("process", "fork"):
                spec = yaml.safe_load(tb["servers_ok"].read_text())
                server = spec["servers"]["standin_bank"]
                server["command"][0] = python
                server["env"] = {"TB_STANDIN_NO_TYPESENSE": "1", **extra}
                server["start"] = start
                path = Path(tmp) / f"servers_{label}_{start}.yaml"
                path.write_text(yaml.safe_dump(spec))
                ((task, domain),) = tb_pairs({**tb, f"servers_{label}_{start}": path}, "transfer", f"{label}_{start}")
                _, warm = asyncio.run(_attempts(task, domain, 1, 1))
                assert warm == [1], f"{label} {start}: the warm-up gold attempt got {warm}"
                for r in range(rounds):
                    wall, rewards = asyncio.run(_attempts(task, domain, n, concurrency))
                    assert rewards == [1] * n, f"{label} {start} round {r}: {rewards}"
                    rates[start].append(n / wall)
                    log(f"{label} start={start} round {r}: {n} attempts at concurrency {concurrency} in {wall:.2f} s ({n / wall:.2f}/s)")
            close_all()
            key = "" if label == "mcp" else f"_{label}"
            for start in ("process", "fork"):
                R[f"bridge_attempts_per_s_{start}{key}"] = round(statistics.median(rates[start]), 3)
                R[f"bridge_attempts_per_s_{start}{key}_min"] = round(min(rates[start]), 3)
                R[f"bridge_attempts_per_s_{start}{key}_max"] = round(max(rates[start]), 3)
            R[f"bridge_fork_speedup{key}"] = round(R[f"bridge_attempts_per_s_fork{key}"] / R[f"bridge_attempts_per_s_process{key}"], 2)
            R[f"bridge_n{key}"], R[f"bridge_concurrency{key}"], R[f"bridge_rounds{key}"] = n, concurrency, rounds
            served = "the MCP SDK" if label == "mcp" else "fastmcp 3 (as the benchmark's servers are)"
            for start in ("process", "fork"):
                k = f"bridge_attempts_per_s_{start}{key}"
                ROWS["bridge"].append(
                    (
                        f"stand-in served by {served}: attempts/s, start: {start}",
                        f"{R[k]} ({R[k + '_min']}–{R[k + '_max']}, {rounds} rounds of {n})",
                        f"`{k}`",
                    )
                )
            ROWS["bridge"].append(
                (f"stand-in served by {served}: fork / process", f"**{R[f'bridge_fork_speedup{key}']}×**", f"`bridge_fork_speedup{key}`")
            )


def _timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s of the command's process and its waited-for children) of one run of `cmd`, which must succeed."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_certify(quick: bool) -> None:
    domains = ["kiosk"] if quick else ["kiosk", "helpdesk", "retail"]
    gs = [sys.executable, "-c", "from groundstate.cli import main; main()", "tasks", "certify", "--json"]
    worst_wall_cpu, worst_pg = 0.0, 0.0
    with tempfile.TemporaryDirectory(prefix="gs_native_certify_") as tmp:
        for domain in domains:
            walls = {}
            for backend in ("sqlite", "postgres"):
                wall, cpu = _timed([*gs, "--domain", domain, "--backend", backend], Path(tmp))
                walls[backend] = wall
                R[f"certify_wall_s_{backend}_{domain}"], R[f"certify_cpu_s_{backend}_{domain}"] = round(wall, 2), round(cpu, 2)
                log(f"certify {domain} on {backend}: {wall:.1f} s wall, {cpu:.1f} s CPU")
                ROWS["certify"].append(
                    (
                        f"certify {domain} on {backend}: wall / CPU of its process",
                        f"{wall:.1f} s / {cpu:.1f} s = {wall / cpu:.2f}×",
                        f"`certify_wall_s_{backend}_{domain}`",
                    )
                )
                if backend == "sqlite":
                    worst_wall_cpu = max(worst_wall_cpu, wall / cpu)
            ratio = walls["postgres"] / walls["sqlite"]
            worst_pg = max(worst_pg, ratio)
            ROWS["certify"].append((f"certify {domain}: PostgreSQL wall / SQLite wall", f"{ratio:.2f}×", f"`certify_wall_s_postgres_{domain}`"))
        R["certify_wall_over_cpu"], R["certify_postgres_over_sqlite"] = round(worst_wall_cpu, 2), round(worst_pg, 2)
        R["certify_domains"] = domains
        ROWS["certify"].append(
            ("certify on SQLite: wall / CPU, the largest over the domains", f"**{R['certify_wall_over_cpu']}×**", "`certify_wall_over_cpu`")
        )
        ROWS["certify"].append(
            (
                "certify: PostgreSQL / SQLite wall, the largest over the domains",
                f"**{R['certify_postgres_over_sqlite']}×**",
                "`certify_postgres_over_sqlite`",
            )
        )
        tb = write_dataset(Path(tmp) / "tb")
        bridged = {}
        for start in ("process", "fork"):
            spec = yaml.safe_load(tb["servers_ok"].read_text())
            spec["servers"]["standin_bank"]["start"] = start
            path = Path(tmp) / f"servers_{start}.yaml"
            path.write_text(yaml.safe_dump(spec))
            selector = f"thinkingbox:{tb['dataset']}::{tb['list_main']}"
            wall, cpu = _timed([*gs, "--tasks", selector, "--tb-servers", str(path), "--tb-no-sources"], Path(tmp))
            bridged[start] = wall
            R[f"certify_bridge_wall_s_{start}"] = round(wall, 2)
            log(f"certify of the stand-in's cases through the bridge, start: {start}: {wall:.1f} s wall")
            ROWS["certify"].append(
                (f"certify of the stand-in's 2 cases through the bridge, start: {start}", f"{wall:.1f} s wall", f"`certify_bridge_wall_s_{start}`")
            )
        R["certify_bridge_process_over_fork"] = round(bridged["process"] / bridged["fork"], 2)
        ROWS["certify"].append(
            ("certify through the bridge: process / fork wall", f"**{R['certify_bridge_process_over_fork']}×**", "`certify_bridge_process_over_fork`")
        )


def write_markdown(phase: str, command: str, finished: str) -> None:
    """Refresh the phase's section of RESULTS.md (between its markers; appended where there is none yet)."""
    start, end = f"<!-- bench-native-{phase}:start (written by benchmarks/native_speed.py) -->", f"<!-- bench-native-{phase}:end -->"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    title, intro = INTROS[phase]
    lines = [
        start,
        title,
        "",
        f"Command: `{command}`, {finished}; load average at end {load} (2 shared cores). {intro}",
        "",
        "| measurement | value | key in results.json |",
        "| --- | --- | --- |",
        *[f"| {a} | {b} | {c} |" for a, b, c in ROWS[phase]],
        "",
        end,
    ]
    write_section("\n".join(lines), start, end)


PHASES = {"bridge": bench_bridge, "certify": lambda quick, _fastmcp: bench_certify(quick)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer attempts and rounds (a smoke run)")
    ap.add_argument("--only", choices=list(PHASES), help="run this phase alone (default: every phase)")
    ap.add_argument("--fastmcp", metavar="PYTHON", help="an interpreter with fastmcp>=3,<4: also bench the stand-in served by fastmcp")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results.json and RESULTS.md alone")
    args = ap.parse_args()
    command = "python benchmarks/native_speed.py" + (" --quick" if args.quick else "") + (f" --only {args.only}" if args.only else "")
    command += " --fastmcp PYTHON" if args.fastmcp else ""
    for name in [args.only] if args.only else list(PHASES):
        PHASES[name](args.quick, args.fastmcp)
    for a, b, c in (row for rows in ROWS.values() for row in rows):
        print(f"{a:80} {b:40} {c}")
    if args.no_write:
        return
    finished = datetime.now(UTC).isoformat(timespec="seconds")
    path = merge({"meta_native_command": command, "meta_native_finished": finished, **R})
    for phase, rows in ROWS.items():
        if rows:
            write_markdown(phase, command, finished)
    log(f"merged {len(R)} keys into {path.relative_to(ROOT)} and refreshed its section in {RESULTS_MD.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
