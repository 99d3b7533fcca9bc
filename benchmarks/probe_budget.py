"""The quickstart's probe budget, measured (#34 item 1): what a shorter probe would have chosen, and what it saves.

`python benchmarks/probe_budget.py QUICKSTART_DIR`, where QUICKSTART_DIR is what `groundstate quickstart --out DIR`
wrote (its `probes.jsonl`: every kiosk task × n = 4). For n = 1, 2 and 3 the probe is cut to each task's first n
attempts (the same policy and sampling streams: attempt i of a task is the same draw whatever n is) and selected
with the quickstart's own rule (`SelectionParams` as `pipeline.quickstart` sets them, `min_clean_runs = min(3, n)`);
each is compared with the selection of the whole probe (n = 4): how many of the tasks it keeps (train and validation)
the whole probe keeps too, how many it keeps that the whole probe drops, the probe's rollouts and its share of the
quickstart's whole run (`ledger.json`). Keys `probe_budget_{kept,agree,extra,rollouts}_n{1,2,3,4}` go into
benchmarks/results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import merge  # noqa: E402 - beside this script

from groundstate.audits.overlap import build_exclude_set  # noqa: E402
from groundstate.pipeline.quickstart import QuickstartConfig  # noqa: E402
from groundstate.pipeline.selection import select  # noqa: E402
from groundstate.pipeline.selection_rules import SelectionParams  # noqa: E402
from groundstate.records import read_records  # noqa: E402
from groundstate.worlds.selectors import select_tasks  # noqa: E402


def kept(records, tasks, n: int) -> set[str]:
    cfg = QuickstartConfig()
    params = SelectionParams(group_by="none", test_fraction=cfg.test_fraction, seed=42 + cfg.seed, min_clean_runs=min(3, n), keep_bands=cfg.bands)
    result = select([r for r in records if r.attempt < n], tasks, build_exclude_set(["bench"]), params=params)
    return set(result.train) | set(result.val)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("quickstart", type=Path, help="a folder `groundstate quickstart --out DIR` wrote")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results.json alone")
    args = ap.parse_args()
    records = read_records(args.quickstart / "probes.jsonl")
    tasks = {t.id: t for t, _ in select_tasks("kiosk")}
    ledger = json.loads((args.quickstart / "ledger.json").read_text())
    total = sum(ledger[stage]["rollouts"] for stage in ("probing", "training", "evaluation"))
    whole = kept(records, tasks, 4)
    out: dict[str, float] = {}
    print("| probe n | rollouts | share of the whole run | tasks kept | kept by n = 4 too | kept here only |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in (1, 2, 3, 4):
        mine = kept(records, tasks, n)
        rollouts = sum(1 for r in records if r.attempt < n)
        out |= {
            f"probe_budget_kept_n{n}": len(mine),
            f"probe_budget_agree_n{n}": len(mine & whole),
            f"probe_budget_extra_n{n}": len(mine - whole),
            f"probe_budget_rollouts_n{n}": rollouts,
        }
        share = total - (len(records) - rollouts)  # the whole run, had it probed n times instead
        print(f"| {n} | {rollouts} | {rollouts / share:.1%} | {len(mine)} | {len(mine & whole)} | {len(mine - whole)} |")
    print(f"(the whole probe, n = 4, keeps {len(whole)} of {len(tasks)} tasks)")
    if not args.no_write:
        print(f"merged into {merge(out)}")


if __name__ == "__main__":
    main()
