"""`groundstate train` and `tiny build` as jobs. `TrainJob` is `train`'s typed config (what `--config FILE` holds, one
YAML key per field, and what the command's flags override), and `train` checks it, resolves its tasks and runs the
engine it names; `TinyBuild` and `build_tiny` build a small policy from scratch or from SmolLM2.

A field left None takes its engine's own default (`TrainConfig` for trl, `VerlRecipe` for verl): the two engines'
defaults differ (the verl recipe is the 3-node reference shape), and each is written once, in its engine's config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator

from groundstate.tasks import TaskFileError

if TYPE_CHECKING:
    from groundstate.pipeline.runner import RunSummary
    from groundstate.tasks import Task
    from groundstate.train.verl.recipe import VerlRecipe
    from groundstate.types import Domain

ENGINES = ("trl", "verl")


class TrainJob(BaseModel):
    """What to train, on what, and how: the fields of `groundstate train` (each flag is a field, `--group-size` is
    `group_size`), and the keys of its `--config` YAML file. These defaults are the command's only ones."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str  # a Hugging Face model directory (or a hub id where reachable)
    train: str  # training tasks: a selection's train.yaml or any --tasks selector
    val: str | None = None  # validation tasks, evaluated after training (trl: k = val_k)
    val_checkpoints: bool = False  # trl, with val: also at step 0 and each checkpoint, for the curve (train/validation.py; --config only)
    engine: str = "trl"  # trl (one machine) or verl (GPUs and nodes)
    group_size: int | None = Field(None, ge=2)  # attempts per task in a GRPO group (advantages compare them: at least 2)
    tasks_per_step: PositiveInt | None = None
    steps: PositiveInt | None = None
    lr: float | None = Field(None, gt=0)
    temperature: float | None = Field(None, gt=0)  # of the rollouts
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)  # 0: off
    beta: float | None = Field(None, ge=0)  # KL coefficient (0: KL-free)
    refill_ratio: float | None = Field(None, ge=0)  # extra groups, × tasks_per_step, to replace zero-variance ones (verl: > 0 turns refill on)
    sampling: Literal["static", "online"] | None = None  # online draws each step's tasks by expected signal (train/online.py)
    forget: float | None = Field(None, gt=0, le=1)  # online: λ, the posteriors' forgetting factor per update
    explore: float | None = Field(None, ge=0, le=1)  # online: ε, the share of tasks drawn uniformly
    rollouts: Literal["flat", "tree"] | None = None  # trl: tree branches a group's rollouts from one shared prefix (grpo.tree_group)
    branch_turn: int | None = Field(None, ge=1)  # trl, tree: the agent turns a group's branches share
    save_steps: PositiveInt | None = None
    max_new_tokens: PositiveInt | None = None  # per agent turn
    max_context: PositiveInt | None = None  # prompt plus the whole multi-turn response of one episode
    max_turns: PositiveInt | None = None  # None: the tasks' own limits
    use_vllm: bool = False  # trl, GPU: TRL's vLLM integration for generation
    val_k: PositiveInt | None = None
    seed: int = 0  # of every random choice: initialisation, data order, sampling
    out: Path = Path("runs/train")  # checkpoints, metrics.jsonl and rollouts.jsonl
    backend: str = "sqlite"
    pg_dsn: str | None = None
    tb_servers: Path | None = None  # ThinkingBox servers.yaml, for thinkingbox: tasks
    tb_no_sources: bool = False
    nodes: PositiveInt | None = None  # verl: the Ray cluster's topology, parallelism and batches
    gpus_per_node: PositiveInt | None = None
    sp: PositiveInt | None = None
    rollout_tp: PositiveInt | None = None
    rollout_engine: str | None = None
    prompt_length: PositiveInt | None = None
    mini_batches: PositiveInt | None = None
    micro_batch: PositiveInt | None = None
    user: str = "scripted"  # verl: the episodes' simulated user, scripted or openai:MODEL[@URL]
    judge: str | None = None  # verl: openai:MODEL[@URL] for reply rubrics
    dry_run: bool = False  # verl: check the topology, print the resolved config and launch command; start nothing
    verl_set: dict[str, Any] = Field(default_factory=dict)  # verl: more config overrides, `a.b.c: value`

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, engine: str) -> str:
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}: use trl or verl")
        return engine


class TrainRefused(ValueError):
    """A job that cannot start, in one line: a config file, a spec, a task selector, a model or a backend at fault."""


def load_train_job(config: Path | None, overrides: dict[str, Any]) -> TrainJob:
    """The job `config`'s YAML mapping describes (keys: `TrainJob`'s fields), each of `overrides` (the flags given)
    taking the place of the file's value; `verl_set` merges, an override winning per key. `TrainRefused` in one line
    for a file that cannot be read, a key that is not a field, or a bad value: `FILE: KEY: why` for the file's, `why`
    for an override's (the command line has checked its own values)."""
    import yaml

    from_file: dict[str, Any] = {}
    if config is not None:
        try:
            from_file = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise TrainRefused(f"{config}: {' '.join(str(getattr(e, 'strerror', None) or e).split())}") from None
        if not isinstance(from_file, dict):
            raise TrainRefused(f"{config}: expected a mapping of the train config's fields (model: ..., train: ..., steps: ...)")
    values = {**from_file, **overrides}
    if isinstance(from_file.get("verl_set"), dict) and "verl_set" in overrides:
        values["verl_set"] = {**from_file["verl_set"], **overrides["verl_set"]}
    try:
        return TrainJob.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(x) for x in err["loc"])
        why = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            why = "not a field of the train config (a field is a flag's name with _ for -, e.g. group_size)"
        if err["type"] == "missing":
            why = f"missing (give --{key.replace('_', '-')}, or {key}: in --config FILE)"
        if err["loc"] and err["loc"][0] in overrides:
            raise TrainRefused(why) from None
        raise TrainRefused(f"{config}: {key}: {why}" if config is not None else f"{key}: {why}") from None


@dataclass
class Trained:
    """What `train` did. trl: the final `checkpoint`, and with `val` the `validation` run's summary and file (or why it
    was not run). verl: with `dry_run` the resolved config and launch command (`plan`: its topology), else the trainer's
    `exit_code` and where the checkpoints went."""

    job: TrainJob
    checkpoint: Path | None = None
    validation: RunSummary | None = None
    validation_file: Path | None = None
    validation_error: str | None = None
    plan: dict[str, Any] | None = None
    dry_run_text: str | None = None
    recipe: VerlRecipe | None = None
    exit_code: int = 0


def train(
    job: TrainJob,
    log: Callable[[str], None] = print,
    on_start: Callable[[int], None] | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> Trained:
    """Run the job: check it (`TrainRefused` in one line before anything is loaded or written), resolve its tasks and run
    its engine. trl trains here (`on_start(steps)` once the model is about to load, `on_step(row)` after each step: the
    row `metrics.jsonl` gets), then evaluates `val`; verl writes the run files and launches verl's trainer (`RecipeError`
    for a recipe that cannot run, with every reason)."""
    _check_specs(job)
    pairs = _tasks(job.train, job)
    if job.engine == "verl":
        return _train_verl(job, pairs, log)
    return _train_trl(job, pairs, on_start, on_step)


def _check_specs(job: TrainJob) -> None:
    """--dry-run, --user and --judge as the engine takes them: a spec that cannot be parsed (`groundstate.specs`), or one
    the TRL engine would not use (its rollouts play each task's scripted user and are graded without a judge), is refused."""
    from groundstate.specs import parse_judge, parse_user

    if job.dry_run and job.engine != "verl":
        raise TrainRefused("--dry-run is for --engine verl")
    if job.engine == "verl" and job.sampling != "online" and (job.forget is not None or job.explore is not None):
        raise TrainRefused("forget and explore are for sampling: online")
    if job.engine == "verl" and (job.rollouts == "tree" or job.branch_turn is not None):
        raise TrainRefused("rollouts and branch_turn are for --engine trl: verl's agent loop plays each rollout whole")
    if job.branch_turn is not None and job.rollouts != "tree":
        raise TrainRefused("branch_turn is for rollouts: tree (where a group's rollouts branch)")
    if job.rollouts == "tree" and job.max_turns is not None and (job.branch_turn or 1) >= job.max_turns:
        raise TrainRefused(
            f"branch_turn {job.branch_turn or 1} leaves no turn to branch in under max_turns {job.max_turns}: every group would be flat"
        )
    if job.engine == "verl" and job.val_checkpoints:
        raise TrainRefused("val_checkpoints is for --engine trl: verl validates with its own trainer.test_freq")
    try:
        llm_user = parse_user(job.user).is_llm
    except ValueError as e:
        raise TrainRefused(f"--user {job.user}: {e}; nothing was trained or written.") from None
    try:
        judged = job.judge is not None and parse_judge(job.judge).kind != "none"
    except ValueError as e:
        raise TrainRefused(f"--judge {job.judge}: {e}; nothing was trained or written.") from None
    if job.engine == "trl" and (llm_user or judged):
        given = "--user" if llm_user else "--judge"
        raise TrainRefused(f"{given} is for --engine verl: the TRL engine plays each task's scripted user and grades without a judge")
    if llm_user or judged:  # verl's rollouts call the endpoint from this environment's openai client
        from groundstate.agents.openai_compat import require_openai

        try:
            require_openai()
        except ValueError as e:
            given = f"--user {job.user}" if llm_user else f"--judge {job.judge}"
            raise TrainRefused(f"{given}: {e}; nothing was trained or written.") from None


def _tasks(selector: str, job: TrainJob) -> list[tuple[Task, Domain]]:
    """The tasks a selector names (with their ThinkingBox servers), or `TrainRefused` saying what matched nothing."""
    from groundstate.worlds.selectors import select_tasks
    from groundstate.worlds.thinkingbox import require_servers

    try:
        pairs = select_tasks(selector, tb_servers=job.tb_servers, tb_no_sources=job.tb_no_sources)
        if any(p.strip().startswith("thinkingbox:") for p in selector.split(",")):
            require_servers(pairs)
    except (ValueError, TaskFileError, KeyError) as e:
        raise TrainRefused(str(e)) from None
    return pairs


def _given(**options: Any) -> dict[str, Any]:
    return {k: v for k, v in options.items() if v is not None}


def _sampling(job: TrainJob) -> dict[str, Any]:
    """The fields both engines' configs share, where the job sets them."""
    keys = ("group_size", "tasks_per_step", "steps", "lr", "temperature", "top_p", "top_k", "beta", "max_new_tokens", "max_turns", "val_k")
    return _given(**{k: getattr(job, k) for k in keys})


def _train_trl(
    job: TrainJob, pairs: list[tuple[Task, Domain]], on_start: Callable[[int], None] | None, on_step: Callable[[dict[str, Any]], None] | None
) -> Trained:
    from groundstate.agents.local import ModelLoadError, check_model_ref
    from groundstate.state import make_backend
    from groundstate.train.online import SamplerStateError
    from groundstate.train.trl_engine import TrainConfig, train_trl
    from groundstate.worlds.attempt import prepare_domains

    try:  # TRL loads it here (verl's workers load it on their nodes, where the path may be theirs only)
        check_model_ref(job.model)
    except ValueError as e:
        raise TrainRefused(f"--model {e}") from None
    cfg = TrainConfig(
        **_sampling(job),
        **_given(refill_ratio=job.refill_ratio, save_steps=job.save_steps, max_context=job.max_context),
        **_given(sampling=job.sampling, forget=job.forget, explore=job.explore, rollouts=job.rollouts, branch_turn=job.branch_turn),
        seed=job.seed,
        use_vllm=job.use_vllm,
    )
    probe = _probe(job.train) if cfg.sampling == "online" else None
    if cfg.rollouts == "tree":
        from groundstate.train.grpo import check_tree_pool

        try:
            check_tree_pool(pairs)
        except ValueError as e:
            raise TrainRefused(f"rollouts: tree: {e}") from None
    val_pairs = _tasks(job.val, job) if job.val else []
    try:
        backend = make_backend(job.backend, job.pg_dsn)
    except ValueError as e:
        raise TrainRefused(f"--backend: {e}") from None
    try:
        try:
            prepare_domains((d for _, d in pairs + val_pairs), backend)  # a schema the backend rejects stops here, not in every rollout
        except TaskFileError as e:
            raise TrainRefused(str(e)) from None
        if on_start:
            on_start(cfg.steps)
        validate = _checkpoint_validator(job, val_pairs, cfg, backend)
        try:
            final = train_trl(job.model, pairs, backend, job.out, cfg, on_step=on_step, probe=probe, validate=validate)
        except ModelLoadError as e:
            raise TrainRefused(f"--model {e}") from None
        except SamplerStateError as e:
            raise TrainRefused(f"{e}; nothing was trained") from None
        done = Trained(job, checkpoint=final)
        if val_pairs:
            _validate(done, val_pairs, cfg, backend)
        return done
    finally:
        backend.close()


def _checkpoint_validator(job: TrainJob, val_pairs: list[tuple[Task, Domain]], cfg: Any, backend: Any) -> Any:
    """With `val_checkpoints`, the validation run after training's settings at step 0 and each checkpoint
    (`train.validation`); `TrainRefused` without validation tasks to run."""
    if not job.val_checkpoints:
        return None
    if not val_pairs:
        raise TrainRefused("val_checkpoints needs validation tasks: give --val")
    from groundstate.train.validation import CheckpointValidator

    sampling = {"temperature": cfg.temperature, "top_p": cfg.top_p, "top_k": cfg.top_k}
    return CheckpointValidator(val_pairs, backend, job.out, k=cfg.val_k, seed=cfg.seed, sampling=sampling)


def _probe_file(selector: str) -> str | None:
    """The selection's selection.jsonl where the training tasks are its train.yaml (absolute: verl's trainer process
    reads it, wherever it runs), its counts checked here; None for any other selector."""
    return str((Path(selector).parent / "selection.jsonl").resolve()) if _probe(selector) is not None else None


def _probe(selector: str) -> dict[str, tuple[int, int]] | None:
    """The probe's counts per task where the training tasks are a selection's train.yaml: its selection.jsonl, beside
    it, holds them (`groundstate select`); None for any other selector (the online sampler then starts from Jeffreys)."""
    from groundstate.train.online import probe_counts

    rows = Path(selector).parent / "selection.jsonl"
    if not Path(selector).is_file() or not rows.is_file():
        return None
    try:
        return probe_counts(rows)
    except (OSError, UnicodeDecodeError) as e:
        raise TrainRefused(f"{rows}: cannot read the selection's rows ({e}); the online sampler starts from them") from None
    except ValueError as e:
        raise TrainRefused(f"{e} (the online sampler starts from the selection's rows)") from None


def _validate(done: Trained, val_pairs: list[tuple[Task, Domain]], cfg: Any, backend: Any) -> None:
    """The trained checkpoint's run on the validation tasks, into `out/val.jsonl` (a file of another validation run is
    never mixed into this one: then `validation_error` says why it was not run)."""
    from groundstate.pipeline.runner import ResumeRefused, RunConfig, run
    from groundstate.records import RecordError

    done.validation_file = done.job.out / "val.jsonl"
    sampling = {"temperature": cfg.temperature, "top_p": cfg.top_p, "top_k": cfg.top_k}
    try:
        done.validation = run(
            val_pairs,
            RunConfig(agent=f"hf:{done.checkpoint}", k=cfg.val_k, seed=cfg.seed, concurrency=256, sampling=sampling),
            backend,
            done.validation_file,
        )
    except (RecordError, ResumeRefused) as e:
        done.validation_error = str(e)


def _train_verl(job: TrainJob, pairs: list[tuple[Task, Domain]], log: Callable[[str], None]) -> Trained:
    from groundstate.train.verl.cli import dry_run_text, launch, plan
    from groundstate.train.verl.recipe import RecipeError, VerlRecipe

    if job.nodes is None or job.gpus_per_node is None:
        log(
            f"verl topology: {job.nodes or VerlRecipe.nodes} nodes × {job.gpus_per_node or VerlRecipe.gpus_per_node} GPUs "
            f"({'the reference recipe' if job.nodes is None and job.gpus_per_node is None else 'partly the reference recipe'}; "
            "--nodes and --gpus-per-node to change)"
        )
    val_pairs = _tasks(job.val, job) if job.val else None
    topology = _given(
        nodes=job.nodes,
        gpus_per_node=job.gpus_per_node,
        sp=job.sp,
        rollout_tp=job.rollout_tp,
        rollout_engine=job.rollout_engine,
        prompt_length=job.prompt_length,
        mini_batches=job.mini_batches,
        micro_batch_per_gpu=job.micro_batch,
    )
    out = job.out
    prompt_length = topology.get("prompt_length", VerlRecipe.prompt_length)
    recipe = VerlRecipe(
        model=str(Path(job.model).resolve()) if Path(job.model).exists() else job.model,  # workers on other nodes see the same absolute path
        train_file=str((out / "data" / "train.parquet").resolve()),
        out_dir=str(out.resolve()),
        val_file=str((out / "data" / "val.parquet").resolve()) if val_pairs else None,
        **topology,
        **_sampling(job),
        **({"response_length": job.max_context - prompt_length} if job.max_context is not None else {}),
        **({"save_freq": job.save_steps, "test_freq": job.save_steps} if job.save_steps is not None else {}),
        **({"filter_groups": job.refill_ratio > 0} if job.refill_ratio is not None else {}),
        user=job.user,
        judge=job.judge,
        backend=job.backend,
        pg_dsn=job.pg_dsn,
        seed=job.seed,
        train_tasks=len(pairs),
        experiment=out.name,
        **_given(sampling=job.sampling, forget=job.forget, explore=job.explore),
        probe=_probe_file(job.train) if job.sampling == "online" else None,
        extra=dict(job.verl_set),
    )
    if recipe.response_length < 1:
        raise RecipeError([f"--max-context {job.max_context} leaves no room for a response after --prompt-length {prompt_length}"])
    p = plan(recipe, pairs)
    if job.dry_run:
        return Trained(job, plan=p, dry_run_text=dry_run_text(p), recipe=recipe)
    return Trained(job, recipe=recipe, exit_code=launch(recipe, pairs, val_pairs, log=log))


@dataclass(frozen=True)
class TinyBuild:
    """What `groundstate tiny build` asks of `build_tiny`; these defaults are the command's."""

    out: Path  # the model directory to write (loadable as hf:DIR)
    domain: str = "kiosk"  # name or folder of a domain with a task generator: its fresh instances are the demonstrations
    base: Literal["scratch", "smollm2"] = "scratch"  # a tokenizer and a tiny Qwen2 built here, or SmolLM2-135M-Instruct
    max_steps: int | None = None  # upper bound on supervised steps (None: the base's own, 1500 from scratch, 60 from smollm2)
    target: float = 0.35  # stop once held-out pass@1 reaches this (a deliberately imperfect base)
    demonstrations: int | None = None  # fresh demonstrations to render (None: the base's own, 6000 from scratch, 400 from smollm2)
    cache: Path | None = None  # smollm2: where the converted base is kept (None: OUT/../.smollm2-hf)
    seed: int = 0  # of every random choice: initialisation, data order, sampling


class TinyBuildRefused(ValueError):
    """A build that cannot start: a domain that cannot be loaded, or one without a task generator."""


def build_tiny(job: TinyBuild, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Build the job's model (`tiny.build_tiny_policy` from scratch, `smollm.build_from_smollm2` from SmolLM2) and return
    what its `groundstate.json` says. `TinyBuildRefused` before anything is built or written; `SmolLM2Missing` where
    SmolLM2's package is not installed."""
    from groundstate.train.sft import SftConfig
    from groundstate.train.tiny import build_tiny_policy
    from groundstate.worlds.domain import load_domain

    try:
        domain = load_domain(job.domain)
    except (TaskFileError, KeyError) as e:
        raise TinyBuildRefused(str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)) from None
    if not (domain.path / "taskgen.py").exists():
        raise TinyBuildRefused(f"domain {job.domain!r} has no task generator (taskgen.py): tiny build draws its demonstrations from one")
    overrides = {k: v for k, v in (("max_steps", job.max_steps), ("demonstrations", job.demonstrations)) if v is not None}
    if job.base == "smollm2":
        from groundstate.train.smollm import build_from_smollm2, smollm2_sft_config

        sft = smollm2_sft_config(target_pass_at_1=job.target, seed=job.seed, **overrides)
        return build_from_smollm2(job.out, job.domain, sft=sft, cache_dir=job.cache, log=log)
    return build_tiny_policy(job.out, job.domain, sft=SftConfig(target_pass_at_1=job.target, seed=job.seed, **overrides), log=log)
