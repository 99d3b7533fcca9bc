"""GRPO on one machine with TRL's `GRPOTrainer`, rollouts by groundstate.

TRL does the optimisation (the clipped policy-gradient loss, optimiser, schedule, checkpoints); our
`rollout_func` does the rollouts: each step's prompts are task ids, each repeated G times; the groups
run through groundstate's episode loop and grader (`grpo.GroupSampler`, which also refills
zero-variance groups), and come back token-exact (`prompt_ids`, `completion_ids` with observation
tokens masked out by `env_mask`, the sampled `logprobs`) with the verdict as the only reward.
KL-free by default (beta 0), like the reference recipe; `beta > 0` adds TRL's KL term.

`sampling="online"` hands the choice of each step's tasks to an `online.OnlineSampler`: `rollout_func` then ignores
the task ids TRL sampled from its dataset and runs the sampler's choice of as many tasks. That is safe because TRL
uses the prompts only to count and group: advantages are normalised over consecutive blocks of G completions
(`rewards.view(-1, G)`), the reward function reads the verdicts we return (`gs_reward`) and nothing else, and the
prompts TRL keeps are for its logs (the rollouts' `gs_task_id` and `rollouts.jsonl` name the tasks actually run,
as they already did for refilled groups). The sampler's state is written into each checkpoint
(`online_sampler.json`), resumed from the latest, and into the output folder at the end.

`metrics.jsonl` is the run's curve, one JSON object a line, appended as training goes (`train.ledger.read_curve` is
its one reader): per step a `kind: "rollouts"` row (`grpo.StepStats`: groups, waste by reason, tokens, the step's
`rollout_seconds`) and a `kind: "step"` row (`seconds`: the step's wall time, rollouts and update), TRL's own logs as
`kind: "trainer"` rows, and with a `validate` hook a `kind: "validation"` row at step 0 (the base) and at each
checkpoint (`train.validation`: pass@1 with its interval on the validation tasks).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from groundstate.agents.local import PROMPT_FLAGS, BatchedPolicy, SamplingParams, load_pretrained, prompt_flags
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.train.grpo import GroupSampler, trained_rewards
from groundstate.train.ledger import append_row, metrics_rows
from groundstate.train.online import OnlineConfig, OnlineSampler, SamplerStateError
from groundstate.types import EpisodeLimits
from groundstate.worlds.domain import Domain


@dataclass
class TrainConfig:
    """The TRL engine's settings; these defaults are `groundstate train --engine trl`'s (the CLI takes them from here).

    They suit a real model on GPUs; the offline quickstart's 0.5M-parameter model sets its own (`groundstate.pipeline.quickstart`)."""

    group_size: int = 8  # G: attempts per task in a group
    tasks_per_step: int = 8
    steps: int = 100
    lr: float = 1e-6
    lr_scheduler: str = "cosine"
    warmup_steps: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off (passed explicitly: generate's own default is 50)
    beta: float = 0.0  # KL coefficient (0: KL-free, like the reference recipe)
    max_new_tokens: int = 512  # per agent turn
    max_context: int = 8192  # prompt plus the whole multi-turn response of one episode
    max_turns: int | None = None  # None: the tasks' own limits
    refill_ratio: float = 1.0  # at most this × tasks_per_step extra groups to replace zero-variance ones
    save_steps: int = 25
    seed: int = 0
    use_vllm: bool = False
    gradient_checkpointing: bool = True  # TRL's default: recompute activations in the backward pass to save memory
    val_k: int = 8  # attempts per task of the validation run after training (`groundstate train --val`)
    sampling: Literal["static", "online"] = "static"  # online: each step's tasks and refills by expected signal (`online.py`)
    forget: float = OnlineConfig.forget  # online: λ, the posteriors' forgetting factor per update (1: never forgets)
    explore: float = OnlineConfig.explore  # online: ε, the share of a step's tasks drawn uniformly from the pool

    rollouts: Literal["flat", "tree"] = "flat"  # tree: a group's G rollouts branch from one prefix (`grpo.tree_group`)
    branch_turn: int = 1  # tree: the agent turns the branches share

    def __post_init__(self) -> None:
        if self.sampling not in ("static", "online"):
            raise ValueError(f"sampling must be static or online, got {self.sampling!r}")
        if self.rollouts not in ("flat", "tree"):
            raise ValueError(f"rollouts must be flat or tree, got {self.rollouts!r}")
        if self.branch_turn < 1:
            raise ValueError(f"branch_turn must be at least 1, got {self.branch_turn}")
        OnlineConfig(forget=self.forget, explore=self.explore)  # checks them


ONLINE_STATE = "online_sampler.json"


def online_sampler(
    cfg: TrainConfig, train: list[tuple[Task, Domain]], out_dir: Path, probe: dict[str, tuple[int, int]] | None
) -> OnlineSampler | None:
    """The run's online sampler (None with static sampling): in a resumed run, the state saved in the checkpoint TRL
    resumes from (the latest `checkpoint-N`), else fresh from the probe's counts (`online.probe_counts`) where given.
    `SamplerStateError` naming the file for a state that cannot be resumed from: damaged, missing from that checkpoint
    (a run begun with static sampling), or of another group size than this run's."""
    if cfg.sampling != "online":
        return None
    ids = [t.id for t, _ in train]
    latest = _latest_checkpoint(out_dir)
    if latest is None:
        return OnlineSampler(ids, cfg.group_size, probe, OnlineConfig(forget=cfg.forget, explore=cfg.explore), cfg.seed)
    path = latest / ONLINE_STATE
    if not path.is_file():
        raise SamplerStateError(
            f"{path}: missing: the run resumes from {latest.name}, which holds no online sampler state (begun with static sampling?)"
        )
    sampler = OnlineSampler.load(path, ids)
    if cfg.group_size != sampler.G:
        raise SamplerStateError(f"{path}: group_size: the state is of groups of {sampler.G}, this run's are of {cfg.group_size}")
    return sampler


def _latest_checkpoint(out_dir: Path) -> Path | None:
    """The checkpoint TRL resumes from: `checkpoint-N` of the largest N (transformers' `get_last_checkpoint`)."""
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(out_dir)) if out_dir.is_dir() else None
    return Path(last) if last else None


def train_trl(
    model_path: str,
    train: list[tuple[Task, Domain]],
    backend: Backend,
    out_dir: Path,
    cfg: TrainConfig,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    policy_cls: type[BatchedPolicy] = BatchedPolicy,
    probe: dict[str, tuple[int, int]] | None = None,
    validate: Callable[[Path, int], dict[str, Any]] | None = None,
) -> Path:
    """Train with GRPO; returns the final checkpoint directory (a Hugging Face model directory).

    `policy_cls` decides how turns are sampled from the model being trained (a subclass can, for
    example, force the decisions in a test while the update itself stays TRL's). `probe` (task id → clean runs,
    successes) starts the online sampler's posteriors; unused with static sampling. `validate(model_dir, step)`, where
    given, evaluates the base before the first step and each checkpoint once it is saved (`train.validation`); its row,
    with the `seconds` it took, goes into `metrics.jsonl` as `kind: "validation"` (a step already validated, in a
    resumed run, is not validated again)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(cfg.seed)
    out_dir = Path(out_dir)
    online = online_sampler(cfg, train, out_dir, probe)  # SamplerStateError before anything is loaded or written
    tok, model = load_pretrained(model_path)  # ModelLoadError before anything is written
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "train_config.json").write_text(json.dumps({"model": model_path, "tasks": [t.id for t, _ in train], **asdict(cfg)}, indent=1))
    flags = prompt_flags(model_path)
    policy = policy_cls(
        model, tok, SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens, cfg.max_context), seed=cfg.seed, **flags
    )
    by_id = {t.id: (t, d) for t, d in train}
    sampler = GroupSampler(
        train,
        policy,
        backend,
        cfg.group_size,
        cfg.refill_ratio,
        cfg.seed,
        limits=EpisodeLimits(max_turns=cfg.max_turns),
        online=online,
        shape=cfg.rollouts,
        branch_turn=cfg.branch_turn,
    )
    rollouts_path, metrics_path = out_dir / "rollouts.jsonl", out_dir / "metrics.jsonl"
    step = {"n": 0}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list]:
        G = cfg.group_size
        if online is None:
            tasks = [by_id[p if isinstance(p, str) else p[-1]["content"]] for p in prompts[::G]]
        else:  # TRL's prompts only say how many groups: the sampler chooses which tasks (see the module's docstring)
            tasks = sampler.next_tasks(len(prompts) // G)
        was_training = model.training
        model.eval()
        t0 = time.perf_counter()
        try:
            groups, stats = asyncio.run(sampler.step(tasks))
        finally:
            model.train(was_training)
        state = getattr(trainer, "state", None)  # the step being taken (also in a resumed run): global_step counts those done
        step["n"] = state.global_step + 1 if state is not None else step["n"] + 1
        flat = [r for g in groups for r in g]
        for r in flat:
            append_row(rollouts_path, {"step": step["n"], **r.summary()})
        row = {"step": step["n"], "rollout_seconds": round(time.perf_counter() - t0, 3), **stats.to_json(), **(online.summary() if online else {})}
        append_row(metrics_path, {"kind": "rollouts", **row})
        if on_step:
            on_step(row)
        return {
            "prompt_ids": [r.prompt_ids for r in flat],
            "completion_ids": [r.completion_ids or [tok.eos_token_id] for r in flat],
            "logprobs": [r.logprobs or [0.0] for r in flat],
            "env_mask": [r.env_mask or [0] for r in flat],
            "gs_reward": trained_rewards(groups),
            "gs_task_id": [r.task_id for r in flat],
        }

    def verdict_reward(prompts: list[Any], completions: list[Any], gs_reward: list[float | None], **_: Any) -> list[float | None]:
        """The final-state verdict of each rollout; None (TRL's unscorable: excluded, never 0) for a system error, an
        unjudged rollout, and every rollout of a kept group that holds one (`grpo.trained_rewards`)."""
        return gs_reward

    logger = _metrics_logger(TrainerCallback, metrics_path, model_path, tok, online, validate)

    report_to = [r for r in ("tensorboard", "wandb") if _installed(r) and (r != "wandb" or os.environ.get("WANDB_API_KEY"))]
    args = GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=cfg.group_size * cfg.tasks_per_step,
        num_generations=cfg.group_size,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        max_steps=cfg.steps,
        learning_rate=cfg.lr,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup_steps,
        beta=cfg.beta,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        max_completion_length=cfg.max_context,
        logging_steps=1,
        save_steps=cfg.save_steps,
        save_only_model=False,
        report_to=report_to,
        seed=cfg.seed,
        use_vllm=cfg.use_vllm,
        activation_checkpointing=cfg.gradient_checkpointing,  # transformers 5.x's name (gradient_checkpointing warns)
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    dataset = Dataset.from_dict({"prompt": [t.id for t, _ in train]})
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[verdict_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tok,
        rollout_func=rollout_func,
        callbacks=[logger],
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # metrics go to metrics.jsonl and on_step, not raw dicts on stdout
    trainer.train(resume_from_checkpoint=True if _latest_checkpoint(out_dir) is not None else None)
    final = out_dir / "final"
    trainer.save_model(str(final))
    tok.save_pretrained(str(final))
    copy_prompt_flags(model_path, final)
    if online is not None:
        online.save(out_dir / ONLINE_STATE)
    return final


def _metrics_logger(
    base: type,
    metrics_path: Path,
    model_path: str,
    tok: Any,
    online: OnlineSampler | None,
    validate: Callable[[Path, int], dict[str, Any]] | None,
) -> Any:
    """The callback that writes TRL's logs, each step's wall time and the validation rows into `metrics.jsonl`, and
    completes each checkpoint (prompt flags, tokenizer, the online sampler's state) before validating it."""
    out_dir = metrics_path.parent

    def run_validation(model_dir: Path, at: int) -> None:
        """A validation row for step `at`; a validation that fails is a row with its `error` (the curve has a gap
        there), never the end of the training run."""
        if validate is None or at in _validated_steps(metrics_path):
            return
        t0 = time.perf_counter()
        try:
            row = validate(model_dir, at)
        except Exception as e:  # noqa: BLE001 - a checkpoint's evaluation failing must not lose the training
            row = {"pass_at_1": None, "error": f"{type(e).__name__}: {e}"}
        append_row(metrics_path, {"kind": "validation", "step": at, **row, "seconds": round(time.perf_counter() - t0, 3)})

    class MetricsLogger(base):  # type: ignore[misc,valid-type]
        began = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step == 0:
                run_validation(Path(model_path), 0)

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.began = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            append_row(metrics_path, {"kind": "step", "step": state.global_step, "seconds": round(time.perf_counter() - self.began, 3)})

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if logs:
                append_row(metrics_path, {"kind": "trainer", "step": state.global_step, **logs})

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            ckpt = out_dir / f"checkpoint-{state.global_step}"
            if ckpt.is_dir():
                copy_prompt_flags(model_path, ckpt)
                tok.save_pretrained(str(ckpt))
                if online is not None:
                    online.save(ckpt / ONLINE_STATE)
                run_validation(ckpt, state.global_step)

    return MetricsLogger()


def _validated_steps(metrics_path: Path) -> set[int]:
    return {r["step"] for r in metrics_rows(metrics_path.parent) if r["kind"] == "validation"}


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def copy_prompt_flags(src: str | Path, dst: Path) -> None:
    """Checkpoints carry the base model's prompt flags, so `hf:CHECKPOINT` prompts the way it was trained."""
    p = Path(src) / PROMPT_FLAGS
    if p.exists():
        (Path(dst) / PROMPT_FLAGS).write_text(p.read_text())
