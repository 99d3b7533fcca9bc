#!/usr/bin/env python
"""Bridges and servers at native speed (#37): `python benchmarks/native_speed.py [--quick] [--only bridge]`.

Every figure is measured in this run against a baseline measured in the same run:

- **bridge** — `bridge_fork_speedup`: attempts per second of the ThinkingBox bridge with each attempt's server forked
  from a zygote (`start: fork`) over a fresh process per attempt (`start: process`), at the same concurrency, on
  the stand-in server of tests/fixtures/thinkingbox (served by the MCP SDK; with `--fastmcp PYTHON` also by
  fastmcp 3, as the benchmark's servers are). Each attempt is a full production attempt (`attempt.play`: servers
  started and initialised, the gold calls, effects, grading, teardown); one warm-up attempt per mode is not timed
  (it pays the zygote's imports once). The verdicts of both modes must be identical (every gold passes).

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

from results_file import merge  # noqa: E402
from tb_standin import tb_pairs, write_dataset  # noqa: E402

from groundstate.agents.scripted import ScriptedUser, make_scripted_agent  # noqa: E402
from groundstate.state import make_backend  # noqa: E402
from groundstate.tools.fork_pool import close_all  # noqa: E402
from groundstate.worlds.attempt import play  # noqa: E402

RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
START = "<!-- bench-native:start (written by benchmarks/native_speed.py) -->"
END = "<!-- bench-native:end -->"

BACKEND = make_backend("sqlite")  # unused by the bridge's worlds (their state is in the servers), required by play
R: dict[str, Any] = {}
ROWS: list[tuple[str, str, str]] = []


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
                ROWS.append(
                    (
                        f"stand-in served by {served}: attempts/s, start: {start}",
                        f"{R[k]} ({R[k + '_min']}–{R[k + '_max']}, {rounds} rounds of {n})",
                        f"`{k}`",
                    )
                )
            ROWS.append((f"stand-in served by {served}: fork / process", f"**{R[f'bridge_fork_speedup{key}']}×**", f"`bridge_fork_speedup{key}`"))


def write_markdown(command: str, finished: str) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        START,
        "## Bridges and servers at native speed (#37)",
        "",
        f"Command: `{command}`, {finished}; load average at end {load} (2 shared cores). Each attempt is a whole "
        "production attempt through the ThinkingBox bridge (`attempt.play`: the case's server started and "
        "initialised, the gold calls, effects, grading, teardown, the server stopped), gold every time, all rewards "
        "1 in both modes; one warm-up attempt per mode untimed. `start: process` starts a fresh server process per "
        "attempt (what the bridge did before); `start: fork` forks it from the command's zygote.",
        "",
        "| measurement | median (min–max) | key in results.json |",
        "| --- | --- | --- |",
        *[f"| {a} | {b} | {c} |" for a, b, c in ROWS],
        "",
        END,
    ]
    section = "\n".join(lines) + "\n"
    text = RESULTS_MD.read_text()
    if START in text:
        text = text[: text.index(START)] + section + text[text.index(END) + len(END) :].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    RESULTS_MD.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer attempts and rounds (a smoke run)")
    ap.add_argument("--only", choices=["bridge"], default="bridge", help="the phase to run")
    ap.add_argument("--fastmcp", metavar="PYTHON", help="an interpreter with fastmcp>=3,<4: also bench the stand-in served by fastmcp")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results.json and RESULTS.md alone")
    args = ap.parse_args()
    command = "python benchmarks/native_speed.py" + (" --quick" if args.quick else "") + (" --fastmcp PYTHON" if args.fastmcp else "")
    bench_bridge(args.quick, args.fastmcp)
    for a, b, c in ROWS:
        print(f"{a:80} {b:40} {c}")
    if args.no_write:
        return
    finished = datetime.now(UTC).isoformat(timespec="seconds")
    path = merge({"meta_native_command": command, "meta_native_finished": finished, **R})
    write_markdown(command, finished)
    log(f"merged {len(R)} keys into {path.relative_to(ROOT)} and refreshed its section in {RESULTS_MD.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
