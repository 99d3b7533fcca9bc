"""How often blame names a failed attempt's real mistake: `python benchmarks/blame_accuracy.py [--k 4] [--no-write]`.

`scripted:noisy:0.3` over every bundled task × k, its injected mistakes recorded by the agent (`Injected`). For each
failed attempt, blame (`groundstate.grading.blame`) counts as naming the mistake when it points at an injected changed or
duplicated call, or, when a call was dropped (which leaves no call in the trajectory), says the attempt stopped early
or never acted. Merges `blame_*` keys into benchmarks/results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter

from results_file import merge  # noqa: E402 - beside this script

from groundstate.agents import make_agent, make_user
from groundstate.grading.blame import blame, names_injected
from groundstate.grading.grader import grader_for
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.attempt import play
from groundstate.worlds.domain import iter_tasks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    backend = SqliteBackend()
    grader = grader_for(backend)
    failed = named = 0
    kinds: Counter[str] = Counter()
    started = time.perf_counter()
    for task, domain in iter_tasks():
        for attempt in range(args.k):
            agent = make_agent("scripted:noisy:0.3", task, domain, attempt)
            out = asyncio.run(play(task, domain, agent, make_user("scripted", task), backend=backend))
            if out.verdict.reward != 0:
                continue
            failed += 1
            b = blame(task, backend.prepare(domain, task.patch), grader, out.trajectory.tool_calls)
            kinds[b.kind] += 1
            named += names_injected(b, agent.injected)
    R = {
        "blame_failed_attempts": failed,
        "blame_named_injected": named,
        "blame_named_share": round(named / failed, 4),
        "blame_kinds": dict(kinds),
        "blame_k": args.k,
        "blame_wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(R, indent=1))
    if not args.no_write:
        print(f"wrote {merge(R)}")


if __name__ == "__main__":
    main()
