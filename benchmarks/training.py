"""Training that wastes nothing, measured at equal budget (#34 item 5): static pool vs online sampling vs online
sampling with tree rollouts, on the quickstart's setting, several seeds.

`python benchmarks/training.py QUICKSTART_DIR [--seeds 0 1 2] [--steps 50]`, where QUICKSTART_DIR is what
`groundstate quickstart --out DIR` wrote: its base model (`base/`), its pool and validation split (`selection/`,
whose `selection.jsonl` holds the probe's counts the online sampler starts from) and the base's validation run
(`eval/base_val.jsonl`). Every variant trains the same base on the same pool with the quickstart's GRPO settings and
the same budget (steps × tasks per step × G, refill bounded alike), then its final checkpoint is evaluated on the
same validation tasks as the base (k = 8, the same evaluation seed):

- static: a fixed pool drawn uniformly, zero-variance groups refilled within the bound, 8 tasks × groups of 8 (the
  quickstart's setting until static_g16 measured better);
- online: each step's tasks and refills by expected signal under the online posteriors (`train/online.py`);
- tree: online, and each group's G rollouts branch from one shared first turn (`grpo.tree_group`);
- static_g16, online_g16: static and online with the step's rollouts in 4 groups of 16 instead of 8 groups of 8
  (static_g16 is the quickstart's setting now);
- online_noprobe: online with every pool task's posterior started from Jeffreys, not from the probe's counts.

For each: the share of rollouts wasted (groups without signal, by the ledger's rule: `train.ledger.training_spend`),
rollouts per informative group (every rollout run, over the informative groups obtained), the tokens the policy
sampled per informative group, the training's wall seconds, and the validation pass@1 lift over the base with its
paired 95% bootstrap interval (`stats.compare`). Means over the seeds go into benchmarks/results.json as
`training_{wasted_share,rollouts_per_informative_group,output_tokens_per_informative_group,lift_pts,lift_ci_low,
lift_ci_high,seconds}_{static,online,tree,static_g16,online_g16,online_noprobe}`; every run's own figures into QUICKSTART_DIR/training-bench/summary.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import merge  # noqa: E402 - beside this script

from groundstate.jsontext import dumps  # noqa: E402
from groundstate.pipeline.runner import RunConfig, run  # noqa: E402
from groundstate.records import read_records  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.stats.compare import compare  # noqa: E402
from groundstate.train import hide_transformers_deprecations  # noqa: E402
from groundstate.train.ledger import metrics_rows, training_spend  # noqa: E402
from groundstate.train.online import probe_counts  # noqa: E402
from groundstate.train.trl_engine import TrainConfig, train_trl  # noqa: E402
from groundstate.types import EpisodeLimits  # noqa: E402
from groundstate.worlds.selectors import select_tasks  # noqa: E402

VARIANTS = {
    "static": {"sampling": "static"},
    "online": {"sampling": "online"},
    "tree": {"sampling": "online", "rollouts": "tree"},
    # the same rollouts per step in half as many groups of twice the size: a group of 16 at the policy's late pass rate
    # (p = 0.8) is all-pass 2.8% of the time, against 16.8% for a group of 8
    "static_g16": {"sampling": "static", "group_size": 16, "tasks_per_step": 4},
    "online_g16": {"sampling": "online", "group_size": 16, "tasks_per_step": 4},
    # online without the probe's counts (every pool task starts from Jeffreys): what the probe adds beyond the pool
    "online_noprobe": {"sampling": "online", "probe": False},
}
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_tokens": 64}  # the quickstart's
EVAL_SEED = 1000  # the quickstart's evaluation seed (its seed 0 + 1000): the base's run is paired with the same streams


def train_one(qs: Path, variant: str, seed: int, steps: int, out: Path) -> dict[str, Any]:
    """One variant at one seed: train, evaluate on validation, and the figures."""
    train_pairs, val_pairs = select_tasks(str(qs / "selection" / "train.yaml")), select_tasks(str(qs / "selection" / "val.yaml"))
    backend = SqliteBackend()
    shape = {"group_size": 8, "tasks_per_step": 8, **VARIANTS[variant]}
    use_probe = shape.pop("probe", True)
    cfg = TrainConfig(
        steps=steps,
        lr=2e-4,
        save_steps=steps,
        seed=seed,
        max_new_tokens=64,
        max_context=768,
        max_turns=6,
        gradient_checkpointing=False,
        **shape,
    )  # fmt: skip - the quickstart's GRPO stage (pipeline/quickstart.py), one checkpoint at the end
    probe = probe_counts(qs / "selection" / "selection.jsonl") if cfg.sampling == "online" and use_probe else None
    t0 = time.perf_counter()
    final = train_trl(str(qs / "base"), train_pairs, backend, out, cfg, probe=probe)
    seconds = time.perf_counter() - t0
    val_file = out / "val.jsonl"
    run(
        val_pairs,
        RunConfig(agent=f"hf:{final}", k=8, seed=EVAL_SEED, sampling=SAMPLING, concurrency=256, limits=EpisodeLimits(max_turns=6)),
        backend,
        val_file,
    )
    lift = compare(read_records(qs / "eval" / "base_val.jsonl"), read_records(val_file), prices={}, reps=2000)["metrics"]["pass_at_1"]
    spend = training_spend(out)
    rows = [r for r in metrics_rows(out) if r["kind"] == "rollouts"]
    informative = sum(r["informative"] for r in rows)
    wasted = sum(p.rollouts for p in spend.wasted.values())
    return {
        "variant": variant,
        "seed": seed,
        "steps": len(rows),
        "rollouts": spend.rollouts,
        "wasted": wasted,
        "wasted_by_reason": {k: p.rollouts for k, p in spend.wasted.items()},
        "informative_groups": informative,
        "wasted_share": wasted / spend.rollouts,
        "rollouts_per_informative_group": spend.rollouts / informative if informative else None,
        "output_tokens_per_informative_group": spend.output_tokens / informative if informative else None,
        "seconds": round(seconds, 1),
        "val_pass_at_1": lift["candidate"],
        "base_pass_at_1": lift["base"],
        "lift_pts": 100 * lift["lift"],
        "lift_ci_low": 100 * lift["ci_95"][0],
        "lift_ci_high": 100 * lift["ci_95"][1],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("quickstart", type=Path, help="a folder `groundstate quickstart --out DIR` wrote")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--no-write", action="store_true", help="print only; leave results.json alone")
    args = ap.parse_args()
    qs = args.quickstart
    for need in ("base/groundstate.json", "selection/train.yaml", "selection/val.yaml", "selection/selection.jsonl", "eval/base_val.jsonl"):
        if not (qs / need).is_file():
            sys.exit(f"{qs / need}: missing: give a folder `groundstate quickstart --out DIR` wrote")
    bench = qs / "training-bench"
    runs: list[dict[str, Any]] = []
    import warnings

    with warnings.catch_warnings():
        hide_transformers_deprecations()
        for seed in args.seeds:
            for variant in args.variants:
                out = bench / f"{variant}-s{seed}"
                if out.exists():
                    sys.exit(f"{out}: exists: remove {bench} to measure again")
                r = train_one(qs, variant, seed, args.steps, out)
                runs.append(r)
                print(
                    f"{variant:<10} seed {seed}: wasted {r['wasted_share']:.1%} of {r['rollouts']} rollouts, "
                    f"{r['rollouts_per_informative_group']:.2f} rollouts per informative group, {r['seconds']:.0f} s, "
                    f"val pass@1 {r['val_pass_at_1']:.1%} (lift {r['lift_pts']:+.1f} pts [{r['lift_ci_low']:+.1f}, {r['lift_ci_high']:+.1f}])",
                    flush=True,
                )
    keys = (
        "wasted_share",
        "rollouts_per_informative_group",
        "output_tokens_per_informative_group",
        "lift_pts",
        "lift_ci_low",
        "lift_ci_high",
        "seconds",
    )
    means: dict[str, Any] = {}
    lines = [
        "| variant | wasted share | rollouts / informative group | sampled tokens / informative group | lift (pts) [95% CI] | seconds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for variant in args.variants:
        mine = [r for r in runs if r["variant"] == variant]
        m = {k: statistics.fmean(r[k] for r in mine) for k in keys}
        means.update({f"training_{k}_{variant}": round(v, 4) for k, v in m.items()})
        lines.append(
            f"| {variant} | {m['wasted_share']:.1%} | {m['rollouts_per_informative_group']:.2f} | {m['output_tokens_per_informative_group']:.0f} "
            f"| {m['lift_pts']:+.1f} [{m['lift_ci_low']:+.1f}, {m['lift_ci_high']:+.1f}] | {m['seconds']:.0f} |"
        )
    means["meta_training_seeds"] = len(args.seeds)
    means["meta_training_steps"] = args.steps
    (bench / "summary.json").write_text(dumps({"runs": runs, "means": means}, indent=1) + "\n")
    print("\n".join(lines))
    print(f"every run's figures: {bench / 'summary.json'}")
    if not args.no_write:
        print(f"means merged into {merge(means)}")


if __name__ == "__main__":
    main()
