"""The offline end-to-end demo (`make quickstart`): the whole method on a model this machine builds.

Stages: a scripted sanity check of every bundled task → build the tiny base (tokenizer, 0.5M-parameter
Qwen2, supervised warm-start on fresh kiosk demonstrations, stopped at an imperfect base) → probe the
kiosk pool (n = 4) → select (Jeffreys bands, benchmark excluded; validation = unseen instances of seen
templates, `--group-by none`) → evaluate the base on validation (k = 8) → GRPO with TRL (4 tasks × groups of 16 a
step; validated on the same tasks at step 0 and each checkpoint, `train.validation`) → evaluate the trained checkpoint the same way → evaluate
both on a fixed sample of the out-of-distribution benchmark (travel, insurance, hr), reported whatever it shows →
the ledger of what probing, training and evaluation spent (`ledger.json`, `train.ledger`) → compare and report, with
the training curve and the whole cost.

The last stage is the method's last step, not a claim of this model: a 0.5M-parameter model learns the kiosk tools
in its warm-up and its prompt carries no tool schemas, so it cannot call a benchmark tool it has never seen (0% is
what it can show, and a sample shows it as well as all 206 tasks would). Transfer needs a pretrained model that
reads tool schemas: `groundstate train --model <checkpoint>` on the pool, then `groundstate run --tasks bench`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groundstate.jsontext import dumps
from groundstate.pipeline.runner import RunConfig, run
from groundstate.records import AttemptRecord, read_records
from groundstate.state.sqlite import SqliteBackend
from groundstate.stats.basis import basis, task_counts
from groundstate.stats.compare import compare
from groundstate.stats.metrics import compute
from groundstate.train import hide_transformers_deprecations
from groundstate.train.ledger import PHASES, WASTE_REASONS, Curve, Ledger
from groundstate.types import EpisodeLimits
from groundstate.worlds.domain import iter_tasks
from groundstate.worlds.selectors import select_tasks

NOTIONAL_PRICE = {"input": 0.10, "cached_input": 0.05, "output": 0.40}  # USD per million tokens, stated in the output


class QuickstartError(RuntimeError):
    """A stage that leaves the next nothing to work on (an empty selection): one line, naming what to change."""


@dataclass
class QuickstartConfig:
    seed: int = 0
    sft_max_steps: int = 1500
    sft_demonstrations: int = 6000
    sft_target: float = 0.35
    probe_n: int = 4
    eval_k: int = 8
    ood_k: int = 4
    ood_per_domain: int = 8  # tasks of each benchmark domain in the out-of-distribution sample (templates in turn)
    test_fraction: float = 0.25
    grpo_steps: int = 50  # profiled: the lift came by step 50 (pass@1 75.4% there, 75.7% at 100), at half the stage's time
    # 4 groups of 16 a step, not 8 of 8 (the same rollouts): the policy passes about 80% of every kiosk template within
    # 20 steps, where a group of 8 is all-pass 17% of the time and one of 16 3%; measured at equal budget over three
    # seeds, a fifth as many rollouts wasted at the same validation lift (benchmarks/training.py, RESULTS.md)
    group_size: int = 16
    tasks_per_step: int = 4
    lr: float = 2e-4  # 1e-3 collapsed the tiny policy within 15 steps under TRL's token-normalised loss; 1e-4 and 3e-4 were stable
    max_pool: int | None = None  # fewer pool tasks (the reduced CI run)
    bands: tuple[str, ...] = ("hard", "medium", "easy")  # kept for training and validation
    ood: bool = True
    sanity: bool = True
    val_checkpoints: bool = True  # validation pass@1 at step 0 and each checkpoint, for the curve (about 6 s each here)


def run_quickstart(out: Path, cfg: QuickstartConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every stage into `out`, each stage and its result through `log`; the summary (also `out/summary.json`).
    transformers' FutureWarnings about names TRL still calls (`is_gradient_checkpointing`, ...) are not shown: a user
    can act on none of them, and the log holds the stages and their results."""
    with warnings.catch_warnings():
        hide_transformers_deprecations()
        return _run_quickstart(out, cfg, log)


def _run_quickstart(out: Path, cfg: QuickstartConfig, log: Callable[[str], None]) -> dict[str, Any]:
    from datasets.utils.logging import disable_progress_bar as no_dataset_bars
    from transformers.utils import logging as hf_logging

    from groundstate.audits.overlap import build_exclude_set
    from groundstate.pipeline.selection import select
    from groundstate.pipeline.selection_rules import SelectionParams
    from groundstate.train.ledger import build_ledger, read_curve, whole_cost_per_dependable_task, write_ledger
    from groundstate.train.sft import SftConfig
    from groundstate.train.tiny import build_tiny_policy
    from groundstate.train.trl_engine import TrainConfig, train_trl
    from groundstate.train.validation import CheckpointValidator

    hf_logging.disable_progress_bar()  # a bar per model load and checkpoint write buries the stage lines
    no_dataset_bars()  # and one per dataset the trainers map
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    backend = SqliteBackend()

    def stage(key: str, title: str):
        log(f"\n== {title}")
        return _Timer(key, seconds, log)

    if cfg.sanity:
        with stage("sanity", "sanity: scripted gold and no-op on every bundled task"):
            pairs = iter_tasks()
            per: dict[str, dict[str, list[AttemptRecord]]] = {}
            for spec in ("scripted:gold", "scripted:noop"):
                path = out / "sanity" / f"{spec.split(':')[1]}.jsonl"
                run(pairs, RunConfig(agent=spec, k=1), backend, path)
                for r in read_records(path):
                    per.setdefault(r.domain or "", {}).setdefault(spec, []).append(r)
            for name, d in per.items():
                log(f"  {name:<10} {sanity_line(d['scripted:gold'], d['scripted:noop'])}")

    base = out / "base"
    with stage("build_base", "build the tiny base (tokenizer, model, supervised warm-start)"):
        if (base / "groundstate.json").exists():
            log(f"  reusing {base}")
        else:
            info = build_tiny_policy(
                base,
                "kiosk",
                sft=SftConfig(demonstrations=cfg.sft_demonstrations, max_steps=cfg.sft_max_steps, target_pass_at_1=cfg.sft_target, seed=cfg.seed),
                log=log,
            )
            log(f"  base built: {info['parameters'] / 1e6:.2f}M parameters, {info['sft']['steps']} SFT steps")

    pool = select_tasks("kiosk")
    if cfg.max_pool:
        pool = pool[: cfg.max_pool]
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_tokens": 64}
    with stage("probe", f"probe the pool: {len(pool)} tasks × n={cfg.probe_n}"):
        run(
            pool,
            RunConfig(agent=f"hf:{base}", k=cfg.probe_n, seed=cfg.seed, sampling=sampling, concurrency=256, limits=EpisodeLimits(max_turns=6)),
            backend,
            out / "probes.jsonl",
        )

    with stage("select", "select the training pool (benchmark excluded; validation = unseen instances of seen templates)"):
        exclude = build_exclude_set(["bench"])
        result = select(
            read_records(out / "probes.jsonl"),
            {t.id: t for t, _ in pool},
            exclude,
            params=SelectionParams(
                group_by="none", test_fraction=cfg.test_fraction, seed=42 + cfg.seed, min_clean_runs=min(3, cfg.probe_n), keep_bands=cfg.bands
            ),
        )
        result.write(out / "selection")
        train_ids, val_ids = result.train, result.val
        if not train_ids or not val_ids:
            raise QuickstartError(
                f"selection left {len(train_ids)} training and {len(val_ids)} validation tasks: probe more tasks or runs "
                f"(see {out / 'selection' / 'selection.jsonl'})"
            )
        counts = result.counts()
        judged = sum(counts["bands"].values())  # tasks with enough clean runs to be judged
        log(
            f"  {counts['tasks']} probed tasks, {judged} with enough clean runs, by band: "
            + ", ".join(f"{b.replace('_', ' ')} {n}" for b, n in counts["bands"].items())
        )
        log(f"  train {len(train_ids)} tasks, validation {len(val_ids)} tasks (--group-by none: held-out instances of seen templates)")
        select_command = (
            f"groundstate select {out / 'probes.jsonl'} --out {out / 'selection'} --exclude bench --group-by none "
            f"--bands {','.join(cfg.bands)} --test-fraction {cfg.test_fraction:g} --seed {42 + cfg.seed} --min-clean-runs {min(3, cfg.probe_n)}"
        )
        log(f"  the same selection by hand: {select_command}")
    by_id = {t.id: (t, d) for t, d in pool}
    train_pairs = [by_id[i] for i in train_ids]
    val_pairs = [by_id[i] for i in val_ids]

    def evaluate(model_dir: Path, pairs, k: int, path: Path) -> dict[str, Any]:
        run(
            pairs,
            RunConfig(agent=f"hf:{model_dir}", k=k, seed=cfg.seed + 1000, sampling=sampling, concurrency=256, limits=EpisodeLimits(max_turns=6)),
            backend,
            path,
        )
        return compute(read_records(path), prices={str(model_dir): NOTIONAL_PRICE}, bootstrap_reps=1000)

    with stage("eval_base", f"evaluate the base on validation: {len(val_pairs)} tasks × k={cfg.eval_k}"):
        base_m = evaluate(base, val_pairs, cfg.eval_k, out / "eval" / "base_val.jsonl")

    with stage("grpo", f"GRPO (TRL): {cfg.grpo_steps} steps × {cfg.tasks_per_step} tasks × G={cfg.group_size}"):
        tcfg = TrainConfig(
            group_size=cfg.group_size,
            tasks_per_step=cfg.tasks_per_step,
            steps=cfg.grpo_steps,
            lr=cfg.lr,
            save_steps=max(1, cfg.grpo_steps // 2),
            seed=cfg.seed,
            max_new_tokens=64,
            max_context=768,
            max_turns=6,
            gradient_checkpointing=False,
        )  # 0.5M parameters: memory is no concern, recomputing costs a fifth of a step
        last = {"t": time.perf_counter()}

        def on_step(row: dict[str, Any]) -> None:
            if row["step"] == 1 or row["step"] % 10 == 0:
                log(
                    f"  step {row['step']}: sampled reward {row['sampled_reward']:.2f}, informative groups {row['informative']}/{row['groups']} "
                    f"(refilled {row['refill_groups']}; {row['wasted']} of {row['rollouts']} rollouts wasted), {time.perf_counter() - last['t']:.1f} s"
                )
                last["t"] = time.perf_counter()

        validate = None
        if cfg.val_checkpoints:  # the validation tasks, as the before/after evaluation runs them, at step 0 and each checkpoint
            limits = EpisodeLimits(max_turns=6)
            validate = CheckpointValidator(
                val_pairs, backend, out / "grpo", k=cfg.eval_k, seed=cfg.seed + 1000, sampling=sampling, limits=limits,
                reuse={0: out / "eval" / "base_val.jsonl"},  # step 0 is the base's evaluation above: not run twice
            )  # fmt: skip
        trained = train_trl(str(base), train_pairs, backend, out / "grpo", tcfg, on_step=on_step, validate=validate)

    with stage("eval_trained", f"evaluate the trained checkpoint on validation: {len(val_pairs)} tasks × k={cfg.eval_k}"):
        trained_m = evaluate(trained, val_pairs, cfg.eval_k, out / "eval" / "trained_val.jsonl")

    base_ood = trained_ood = None
    if cfg.ood:
        bench = ood_sample(select_tasks("bench"), cfg.ood_per_domain)
        with stage(
            "ood",
            f"out-of-distribution benchmark, a fixed sample: {len(bench)} tasks × k={cfg.ood_k}, base and trained "
            "(a 0.5M model without tool schemas in its prompt cannot call tools it has never seen: expect 0%)",
        ):
            base_ood = evaluate(base, bench, cfg.ood_k, out / "eval" / "base_bench.jsonl")
            trained_ood = evaluate(trained, bench, cfg.ood_k, out / "eval" / "trained_bench.jsonl")

    with stage("ledger", "the whole cost: rollouts, tokens and seconds of probing, training and evaluation"):
        eval_files = [out / "eval" / f"{name}.jsonl" for name in ("base_val", "trained_val", "base_bench", "trained_bench")]
        eval_wall = sum(seconds.get(k, 0.0) for k in ("eval_base", "eval_trained", "ood"))
        ledger = build_ledger([out / "probes.jsonl"], out / "grpo", eval_files, wall_seconds={"probing": seconds["probe"], "evaluation": eval_wall})
        write_ledger(ledger, out / "ledger.json")
        curve = read_curve(out / "grpo")
        trained_records = read_records(out / "eval" / "trained_val.jsonl")
        whole, whole_note = whole_cost_per_dependable_task(trained_records, trained_m, ledger, {str(trained): NOTIONAL_PRICE})
        training_text = training_summary(curve, ledger)
        log(f"  {training_text}")
        log(f"  ledger written to {out / 'ledger.json'}")

    with stage("compare_report", "compare and report"):
        from groundstate.pipeline.report import write_report

        # the same notional prices as the console's cost per dependable task (the bundled table prices no local model)
        notional = {str(base): NOTIONAL_PRICE, str(trained): NOTIONAL_PRICE}
        cmp = compare(read_records(out / "eval" / "base_val.jsonl"), read_records(out / "eval" / "trained_val.jsonl"), prices=notional)
        (out / "compare.json").write_text(dumps(cmp, indent=1))
        write_report(
            read_records(out / "eval" / "trained_val.jsonl"),
            out / "report.html",
            "quickstart: trained vs base (validation)",
            baseline=read_records(out / "eval" / "base_val.jsonl"),
            prices=notional,
            training=out / "grpo",
            ledger=ledger,
        )

    def strip(m):
        return None if m is None else {k: v for k, v in m.items() if k != "per_task"}

    summary = {
        "base": strip(base_m),
        "trained": strip(trained_m),
        "base_ood": strip(base_ood),
        "trained_ood": strip(trained_ood),
        "compare": cmp,
        "cost_per_dependable_task_with_training_and_probing": {"usd": whole, "note": whole_note},
        "training_summary": training_text,
        "ledger": ledger.model_dump(),
        "stage_seconds": seconds,
        "notional_price_usd_per_million_tokens": NOTIONAL_PRICE,
        "train_tasks": len(train_pairs),
        "val_tasks": len(val_pairs),
        "checkpoint": str(trained),
        "select_command": select_command,
        "paths": {
            "base": str(base),
            "trained": str(trained),
            "probes": str(out / "probes.jsonl"),
            "selection": str(out / "selection"),
            "eval": str(out / "eval"),
            "report": str(out / "report.html"),
            "grpo_metrics": str(out / "grpo" / "metrics.jsonl"),
            "ledger": str(out / "ledger.json"),
        },
    }
    (out / "summary.json").write_text(dumps(summary, indent=1, default=str))
    return summary


def training_summary(curve: Curve, ledger: Ledger) -> str:
    """One paragraph: the curve from its first step to its last (informative share, wasted share, validation pass@1) and
    the ledger's totals."""
    parts = []
    if curve.steps:
        first, last = curve.steps[0], curve.steps[-1]
        wasted = ledger.wasted().rollouts
        parts.append(
            f"Training: {len(curve.steps)} steps; the informative share of each step's first groups went from "
            f"{first.informative_share:.0%} (step {first.step}) to {last.informative_share:.0%} (step {last.step}); "
            f"{wasted} of {ledger.training.rollouts} training rollouts were wasted ({wasted / max(1, ledger.training.rollouts):.1%}: "
            + ", ".join(f"{r.replace('_', ' ')} {ledger.training.wasted[r].rollouts}" for r in WASTE_REASONS)
            + ")."
        )
    failed = [v for v in curve.validation if v.error]
    if failed:
        parts.append("Validation failed at " + "; ".join(f"step {v.step} ({v.error})" for v in failed) + "; training went on.")
    val = [v for v in curve.validation if v.pass_at_1 is not None]
    if len(val) > 1:
        parts.append(
            "Validation pass@1 " + " → ".join(f"{v.pass_at_1:.1%} (step {v.step})" for v in val) + f", {val[-1].tasks} tasks × k={val[-1].k}."
        )
    t = ledger.total()
    seconds = [(n, getattr(ledger, n).wall_seconds) for n in PHASES]
    parts.append(
        f"The whole run spent {t.rollouts:,} rollouts and {t.input_tokens + t.output_tokens:,} tokens: "
        + ", ".join(
            f"{n} {getattr(ledger, n).rollouts:,} rollouts, {getattr(ledger, n).input_tokens + getattr(ledger, n).output_tokens:,} tokens"
            + (f", {s:.0f} s" if s is not None else "")
            for n, s in seconds
        )
        + "."
    )
    return " ".join(parts)


def sanity_line(gold: list[AttemptRecord], noop: list[AttemptRecord]) -> str:
    """One domain's sanity figures (one attempt per task), each over the task set `stats.basis` gives: `224 tasks:
    gold 100% pass, no-op 0% pass, of 200 (set apart: 24 rubric tasks without a judge)`."""
    parts, apart = [], ""
    for name, records in (("gold", gold), ("no-op", noop)):
        b = basis(task_counts(records), 1)
        rate = sum(t.c for t in b.covered.values()) / len(b.covered) if b.covered else None
        parts.append(f"{name} {'—' if rate is None else f'{rate:.0%}'} pass")
        if b.apart:
            apart = f", of {len(b.covered)} (set apart: {b.apart_text()})"
    return f"{len({r.task_id for r in gold}):>4} tasks: " + ", ".join(parts) + apart


def ood_sample(pairs: list, per_domain: int) -> list:
    """A fixed sample of a benchmark: `per_domain` tasks of each domain, taking each template's tasks in turn (in id order)."""
    by_domain: dict[str, dict[str, list]] = {}
    for t, d in sorted(pairs, key=lambda p: p[0].id):
        by_domain.setdefault(t.domain, {}).setdefault(t.template or t.id, []).append((t, d))
    out = []
    for templates in by_domain.values():
        queues, taken = list(templates.values()), 0
        while taken < per_domain and any(queues):
            for q in queues:
                if q and taken < per_domain:
                    out.append(q.pop(0))
                    taken += 1
    return out


class _Timer:
    def __init__(self, name: str, seconds: dict[str, float], log: Callable[[str], None]):
        self.name, self.seconds, self.log = name, seconds, log

    def __enter__(self) -> _Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        dt = time.perf_counter() - self.t0
        self.seconds[self.name] = round(dt, 1)
        self.log(f"  [{dt:.1f} s]")
