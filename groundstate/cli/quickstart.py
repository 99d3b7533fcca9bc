"""`groundstate quickstart`: the offline end-to-end demo, printed as a before/after table."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, out
from groundstate.pipeline.quickstart import QuickstartConfig


def _fmt(x, pct=True):
    if x is None or (isinstance(x, float) and x != x):
        return "—"
    return f"{x:.2%}" if pct else f"{x}"


def quickstart(
    out_dir: Path = opts.folder_out(Path("runs/quickstart"), "--out", help="Where every artefact goes."),
    seed: int = typer.Option(
        QuickstartConfig.seed, "--seed", help="Seed of every random choice (model, data, sampling): the same seed gives the same figures."
    ),
    grpo_steps: int = opts.count(QuickstartConfig.grpo_steps, "--grpo-steps", help="GRPO steps on the selected pool."),
    sft_max_steps: int = opts.count(
        QuickstartConfig.sft_max_steps,
        "--sft-max-steps",
        help="At most this many supervised warm-up steps (it stops earlier on its validation target).",
    ),
    max_pool: int | None = opts.count(QuickstartConfig.max_pool, "--max-pool", help="Use only the first N pool tasks (a reduced run)."),
    ood: bool = typer.Option(QuickstartConfig.ood, "--ood/--no-ood", help="Also evaluate on the out-of-distribution benchmark."),
) -> None:
    """The offline end-to-end demo: tiny base → probe → select → evaluate → GRPO → evaluate → compare, report."""
    from groundstate.pipeline.quickstart import QuickstartError, run_quickstart
    from groundstate.pipeline.runner import ResumeRefused
    from groundstate.records import RecordError

    cfg = QuickstartConfig(seed=seed, grpo_steps=grpo_steps, sft_max_steps=sft_max_steps, max_pool=max_pool, ood=ood)
    t0 = time.perf_counter()
    console.print(  # what to expect, before the first stage
        f"quickstart: the whole method offline, on a model built here; about 8 minutes on 2 CPU cores (the full settings); "
        f"every artefact goes under {out_dir}",
        markup=False,
    )
    try:
        s = run_quickstart(out_dir, cfg, log=lambda m: console.print(m, markup=False))
    except (RecordError, ResumeRefused) as e:  # an --out of an earlier quickstart with other settings: never mixed
        fail(f"{e}\nuse another --out for these settings")
    except QuickstartError as e:
        fail(str(e), 1)
    _print_summary(s)
    out.print("stage seconds: " + ", ".join(f"{k_} {v}" for k_, v in s["stage_seconds"].items()) + f"; total {time.perf_counter() - t0:.0f} s")
    for name, path in s["paths"].items():
        console.print(f"{name}: {path}", markup=False)
    console.print(f"summary written to {out_dir / 'summary.json'}", markup=False)
    console.print(
        "next, on your own model (a Hugging Face folder, or any OpenAI-compatible server as openai:MODEL@URL):\n"
        "  groundstate probe --agent hf:MODEL_DIR --tasks pool --k 8 --out runs/probe/probes.jsonl\n"
        "  groundstate select runs/probe/probes.jsonl --out runs/selection --exclude bench\n"
        "  groundstate train --model MODEL_DIR --train runs/selection/train.yaml --val runs/selection/val.yaml --out runs/train"
    )


def _before_after(title: str, base: dict, trained: dict) -> Table:
    k_ = base["k"]
    t = Table(title=title)
    for col in ("metric", "base", "trained"):
        t.add_column(col)

    def money(x):
        return "undefined (no task solved k/k)" if x is None else f"${x:.5f}"

    t.add_row("pass@1", _fmt(base["pass_at_1"]), _fmt(trained["pass_at_1"]))
    t.add_row(f"pass@{k_}", _fmt(base["pass_at_k"]), _fmt(trained["pass_at_k"]))
    t.add_row(f"pass^{k_}", _fmt(base["pass_hat_k"]), _fmt(trained["pass_hat_k"]))
    t.add_row(
        f"Observed {k_}/{k_}",
        f"{base['observed_k_of_k']} / {base['tasks_covered']}",
        f"{trained['observed_k_of_k']} / {trained['tasks_covered']}",
    )
    t.add_row("cost per dependable task", money(base["cost_per_dependable_task"]), money(trained["cost_per_dependable_task"]))
    if base["set_apart"] or trained["set_apart"]:  # the figures' task set, said under the table
        t.caption = f"base over {base['basis']}; trained over {trained['basis']}"
    return t


def _print_summary(s: dict) -> None:
    """The before/after tables: held-out validation, then the out-of-distribution benchmark where it ran."""
    price = s["notional_price_usd_per_million_tokens"]
    out.print(_before_after(f"held-out validation ({s['val_tasks']} tasks × k={s['base']['k']}): base vs GRPO-trained", s["base"], s["trained"]))
    out.print(f"cost at a notional ${price['input']}/M input and ${price['output']}/M output tokens")
    whole = s.get("cost_per_dependable_task_with_training_and_probing")
    if whole is not None:  # the trained model's figure again, now counting what training and probing spent
        usd = "undefined" if whole["usd"] is None else f"${whole['usd']:.5f}"
        out.print(f"trained: cost per dependable task with training and probing {usd}: {whole['note']}", markup=False)
    if s.get("training_summary"):
        out.print(s["training_summary"], markup=False)
    if s["base_ood"]:
        out.print(
            _before_after(f"out-of-distribution benchmark ({s['base_ood']['tasks']} tasks × k={s['base_ood']['k']})", s["base_ood"], s["trained_ood"])
        )
        out.print(
            "the out-of-distribution benchmark's domains were never seen in training, and a 0.5M-parameter model without tool "
            "schemas in its prompt cannot call tools it has never seen: zeros there are the expected result, not a failure; "
            "a real model shows its transfer in this table"
        )
