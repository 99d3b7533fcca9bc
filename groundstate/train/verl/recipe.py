"""The verl recipe: GRPO on many GPUs and nodes, rendered as verl's Hydra overrides and checked before launch.

The reference shape is verl's synchronous GRPO on 3 nodes × 8 GPUs: 18 tasks per step × 8 rollouts,
50 steps, KL-free, lr 1e-6, sampling temperature 1.0 / top-k 20 / top-p 0.95, zero-variance groups
filtered and refilled (verl's `algorithm.filter_groups`, metric `reward`: the canonical final-state
reward), groups whose episode hit a system error refilled too (`trainer.v1.sampler.
sync_refill_failed_groups`), rollouts played by `GroundstateAgentLoop`.

`render()` turns a `VerlRecipe` into the nested config verl composes over its own `ppo_trainer.yaml`
(every key here exists there; a test composes them with verl's Hydra config and runs verl's own
`validate_config`). `check()` refuses a topology that cannot run — GPUs, tensor and sequence
parallelism, batch sizes, group size, micro batches — with the reason, before anything starts, so
a mis-sized job fails on the login node and not after the cluster has been allocated.

Refill, compared with groundstate's own GRPO: verl's sync trainer evicts k zero-variance groups and
fetches 2k fresh prompts, with no upper bound on the number of refills per step (its
`max_num_gen_batches` is ignored by the v1 trainer); only how many prompt batches are in flight at
once is bounded (`max_inflight_gen_batches`). A pool of tasks that are all always solved or never
solved therefore keeps sampling: select the pool for learning signal first (`groundstate select`), or sample online.

`sampling="online"`: every prompt verl fetches for training, refills included, is a draw of the online sampler, by
expected signal under the current policy's posteriors, which every rollout's reward updates (`train.verl.online`: a
dataset class of ours, `data.custom_cls`, and a Ray actor the agent loop reports to). `probe` names the selection's
`selection.jsonl` whose counts start the posteriors.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from groundstate.train.online import OnlineConfig
from groundstate.train.verl import AGENT_NAME, ONLINE_SETTINGS_FILE, ONLINE_SETTINGS_KEY

AGENT_LOOP_TARGET = "groundstate.train.verl.agent_loop.GroundstateAgentLoop"
RUN_INFO = "groundstate_verl.json"  # written beside the checkpoints: the base model, for `groundstate merge`


@dataclass
class VerlRecipe:
    model: str
    train_file: str
    out_dir: str
    val_file: str | None = None
    nodes: int = 3
    gpus_per_node: int = 8
    sp: int = 1  # Ulysses sequence parallelism of the actor
    rollout_tp: int = 1  # tensor parallelism of each vLLM/SGLang replica
    rollout_engine: str = "vllm"
    tasks_per_step: int = 18
    group_size: int = 8
    steps: int = 50
    lr: float = 1e-6
    beta: float = 0.0  # KL coefficient (0: KL-free, no reference model)
    temperature: float = 1.0
    top_k: int = 20
    top_p: float = 0.95
    filter_groups: bool = True
    max_inflight_gen_batches: int = 1
    mini_batches: int = 1  # optimiser updates per step (1: strictly on-policy)
    micro_batch_per_gpu: int = 2
    prompt_length: int = 4096
    response_length: int = 4096
    max_new_tokens: int = 512
    max_turns: int | None = None
    gpu_memory_utilization: float = 0.6
    save_freq: int = 25
    test_freq: int = 25
    val_k: int = 8
    backend: str = "sqlite"
    pg_dsn: str | None = None
    user: str = "scripted"
    judge: str | None = None
    seed: int = 0
    train_tasks: int | None = None  # size of the training pool, where known (checked against tasks_per_step)
    experiment: str = "grpo"
    sampling: str = "static"  # online: each prompt verl fetches is the online sampler's draw (`train.verl.online`)
    forget: float = OnlineConfig.forget  # online: λ, the posteriors' forgetting factor per update
    explore: float = OnlineConfig.explore  # online: ε, the share of draws made uniformly from the pool
    probe: str | None = None  # online: a selection's selection.jsonl, whose counts start the posteriors (else Jeffreys)
    extra: dict[str, Any] = field(default_factory=dict)  # further overrides, `a.b.c: value`

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def agent_loop_config(self) -> Path:
        return Path(self.out_dir) / "agent_loop.yaml"

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.out_dir) / "checkpoints"

    @property
    def online_settings(self) -> Path:
        return Path(self.out_dir) / ONLINE_SETTINGS_FILE

    @property
    def online_actor(self) -> str:
        """The Ray name of the run's sampler actor: one per output folder, so two runs on one cluster never share it."""
        import hashlib

        return "groundstate-online-" + hashlib.sha256(str(Path(self.out_dir).resolve()).encode()).hexdigest()[:16]


class RecipeError(ValueError):
    """A recipe that cannot run; `reasons` lists every problem found."""

    def __init__(self, reasons: list[str]):
        super().__init__("; ".join(reasons))
        self.reasons = reasons


def model_shape(model: str) -> dict[str, int] | None:
    """Attention heads of a local model directory (its config.json), or None where it cannot be read here."""
    p = Path(model) / "config.json"
    if not p.is_file():
        return None
    cfg = json.loads(p.read_text())
    cfg = cfg.get("text_config", cfg)
    heads = cfg.get("num_attention_heads")
    if not isinstance(heads, int):
        return None
    kv = cfg.get("num_key_value_heads") or heads
    return {"heads": heads, "kv_heads": kv}


def check(r: VerlRecipe) -> dict[str, Any]:
    """Every divisibility and size rule the launch depends on; returns the derived sizes or raises RecipeError."""
    bad: list[str] = []
    for name in (
        "nodes",
        "gpus_per_node",
        "sp",
        "rollout_tp",
        "tasks_per_step",
        "group_size",
        "steps",
        "mini_batches",
        "micro_batch_per_gpu",
        "prompt_length",
        "response_length",
        "max_new_tokens",
        "save_freq",
        "max_inflight_gen_batches",
    ):
        if getattr(r, name) < 1:
            bad.append(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(r, name)})")
    if bad:
        raise RecipeError(bad)
    shape = model_shape(r.model)
    dp, per_rank, batch_errors = _batch_sizes(r)
    bad += _layout_errors(r) + batch_errors + _model_errors(r, shape) + _size_errors(r)
    if bad:
        raise RecipeError(bad)
    return {
        "gpus": r.world,
        "data_parallel_ranks": dp,
        "rollout_replicas": r.world // r.rollout_tp,
        "trajectories_per_step": r.tasks_per_step * r.group_size,
        "mini_batch_tasks": r.tasks_per_step // r.mini_batches if r.tasks_per_step % r.mini_batches == 0 else 0,
        "trajectories_per_rank_per_mini_batch": per_rank,
        "model_heads": shape,
        "pool_tasks": r.train_tasks,
    }


def _layout_errors(r: VerlRecipe) -> list[str]:
    """The rules of the GPU layout: group size, engine, parallelism over a node, the step over the GPUs."""
    bad: list[str] = []
    if r.group_size < 2:
        bad.append(f"--group-size {r.group_size}: GRPO needs at least 2 rollouts per task to compare them")
    if r.rollout_engine not in ("vllm", "sglang"):
        bad.append(f"--rollout-engine {r.rollout_engine!r}: use vllm or sglang")
    if r.gpus_per_node % r.rollout_tp:
        bad.append(
            f"rollout tensor parallelism {r.rollout_tp} does not divide the {r.gpus_per_node} GPUs of a node: "
            f"each vLLM/SGLang replica needs {r.rollout_tp} GPUs on one node"
        )
    if r.gpus_per_node % r.sp:
        bad.append(
            f"sequence parallelism {r.sp} does not divide the {r.gpus_per_node} GPUs of a node: a Ulysses group of {r.sp} GPUs must sit on one node"
        )
    if r.tasks_per_step % r.mini_batches:
        bad.append(f"--mini-batches {r.mini_batches} does not divide --tasks-per-step {r.tasks_per_step}")
    trajectories = r.tasks_per_step * r.group_size
    if trajectories % r.world:
        bad.append(
            f"{r.tasks_per_step} tasks × {r.group_size} rollouts = {trajectories} trajectories per step do not split "
            f"evenly over {r.world} GPUs ({r.nodes} nodes × {r.gpus_per_node})"
        )
    return bad


def _size_errors(r: VerlRecipe) -> list[str]:
    """The pool must fill a step; one turn's new tokens must fit the episode's response length."""
    bad: list[str] = []
    if r.train_tasks is not None and r.train_tasks < r.tasks_per_step:
        bad.append(f"the training pool has {r.train_tasks} tasks, fewer than --tasks-per-step {r.tasks_per_step}: no full step can be drawn")
    if r.sampling not in ("static", "online"):
        bad.append(f"sampling must be static or online, got {r.sampling!r}")
    if r.sampling == "online" and r.val_file is not None and Path(r.val_file).resolve() == Path(r.train_file).resolve():
        bad.append("online sampling draws the training file's rows: give validation a file of its own")
    if r.sampling == "online":
        try:
            OnlineConfig(forget=r.forget, explore=r.explore)
        except ValueError as e:
            bad.append(str(e))
        fixed = sorted(k for k in r.extra if k in ("actor_rollout_ref.rollout.n", "data.train_batch_size", f"data.{ONLINE_SETTINGS_KEY}"))
        if fixed:
            bad.append(f"--verl-set {', '.join(fixed)}: online sampling counts groups and steps by --group-size and --tasks-per-step: set those")
    if r.max_new_tokens > r.response_length:
        bad.append(f"--max-new-tokens {r.max_new_tokens} exceeds the response length {r.response_length} of a whole episode")
    return bad


def _model_errors(r: VerlRecipe, shape: dict[str, int] | None) -> list[str]:
    """The rules the model's shape sets (when its config could be read): heads over tensor and sequence parallelism."""
    bad: list[str] = []
    if not shape:
        return bad
    if shape["heads"] % r.rollout_tp:
        bad.append(f"the model's {shape['heads']} attention heads do not split over rollout tensor parallelism {r.rollout_tp}")
    if shape["heads"] % r.sp:
        bad.append(f"the model's {shape['heads']} attention heads do not split over sequence parallelism {r.sp}")
    kv = shape["kv_heads"]
    if kv % r.sp and r.sp % kv:
        bad.append(f"the model's {kv} key-value heads and sequence parallelism {r.sp} divide neither way")
    return bad


def _batch_sizes(r: VerlRecipe) -> tuple[int, int, list[str]]:
    """The data-parallel ranks and each rank's trajectories per mini-batch (0 where they do not divide), and the
    rules they break."""
    bad: list[str] = []
    dp = r.world // r.sp if r.world % r.sp == 0 else 0
    mini_prompts = r.tasks_per_step // r.mini_batches if r.tasks_per_step % r.mini_batches == 0 else 0
    per_rank = 0
    if dp and mini_prompts:
        mini_traj = mini_prompts * r.group_size
        if mini_traj % dp:
            bad.append(
                f"a mini-batch of {mini_prompts} tasks × {r.group_size} = {mini_traj} trajectories does not split over "
                f"{dp} data-parallel ranks ({r.world} GPUs / sequence parallelism {r.sp})"
            )
        else:
            per_rank = mini_traj // dp
            if per_rank % r.micro_batch_per_gpu:
                bad.append(
                    f"--micro-batch {r.micro_batch_per_gpu} does not divide the {per_rank} trajectories each data-parallel rank gets per mini-batch"
                )
    return dp, per_rank, bad


def check_prompts(r: VerlRecipe, pairs: list) -> dict[str, Any] | None:
    """Tokenizer-level checks on a local model directory, so that no episode fails for a reason known up front.

    Every episode would otherwise end as a system error — and verl would refill its group forever: the
    chat template must be prefix-preserving (token-exact observations need it) and every task's opening
    prompt must fit `prompt_length`. Returns what was checked, or None where the model has no local tokenizer.
    """
    model = Path(r.model)
    if not pairs or not ((model / "tokenizer.json").is_file() or (model / "tokenizer_config.json").is_file()):
        return None
    from transformers import AutoTokenizer

    from groundstate.agents.local import ChatCodec, prompt_flags
    from groundstate.types import ToolCallRequest

    codec = ChatCodec(AutoTokenizer.from_pretrained(str(model)), **prompt_flags(str(model)))
    bad: list[str] = []
    longest = (0, "")
    for task, domain in pairs:
        tools = domain.tools.openai_schemas()
        opening = [{"role": "system", "content": domain.system_prompt()}, {"role": "user", "content": task.instruction}]
        n = len(codec.prompt_ids(opening, tools))
        longest = max(longest, (n, task.id))
    if longest[0] > r.prompt_length:
        bad.append(f"the opening prompt of task {longest[1]} has {longest[0]} tokens, over --prompt-length {r.prompt_length}")
    task, domain = pairs[0]
    tools = domain.tools.openai_schemas()
    call = ToolCallRequest("call_1", task.gold[0].tool, dict(task.gold[0].args)) if task.gold else ToolCallRequest("call_1", "noop", {})
    before = [
        {"role": "system", "content": domain.system_prompt()},
        {"role": "user", "content": task.instruction},
        {"role": "assistant", "content": "", "tool_calls": [call.to_message()]},
    ]
    try:
        codec.observation_ids(before, before + [{"role": "tool", "tool_call_id": "call_1", "name": call.name, "content": "ok"}], tools, True)
    except ValueError as e:
        bad.append(f"{model}: {e}")
    if bad:
        raise RecipeError(bad)
    return {"longest_prompt_tokens": longest[0], "longest_prompt_task": longest[1], "template_prefix_preserving": True}


def agent_loop_entries(r: VerlRecipe) -> list[dict[str, Any]]:
    """The agent-loop config file: registers `groundstate` and hands the loop its settings."""
    return [
        {
            "name": AGENT_NAME,
            "_target_": AGENT_LOOP_TARGET,
            "backend": r.backend,
            "pg_dsn": r.pg_dsn,
            "user": r.user,
            "judge": r.judge,
            "max_turns": r.max_turns,
            "max_new_tokens": r.max_new_tokens,
            **({"online_sampler": r.online_actor} if r.sampling == "online" else {}),
        }
    ]


ADDED_KEYS = {f"data.{ONLINE_SETTINGS_KEY}"}  # keys verl's config does not have: Hydra adds them (`+key=value`)


def online_settings(r: VerlRecipe) -> dict[str, Any]:
    """What the run's sampler actor starts from (`train.verl.online.sampler_actor`)."""
    return {
        "actor": r.online_actor,
        "group_size": r.group_size,
        "tasks_per_step": r.tasks_per_step,
        "seed": r.seed,
        "forget": r.forget,
        "explore": r.explore,
        "probe": r.probe,
    }


def render(r: VerlRecipe) -> dict[str, Any]:
    """The nested config (overrides over verl's `ppo_trainer.yaml`) for this recipe."""
    kl = r.beta > 0
    cfg: dict[str, Any] = {
        "data": {
            "train_files": r.train_file,
            "val_files": r.val_file or r.train_file,
            "train_batch_size": r.tasks_per_step,
            "max_prompt_length": r.prompt_length,
            "max_response_length": r.response_length,
            "return_raw_chat": True,
            "filter_overlong_prompts": True,
            "truncation": "error",
            "shuffle": True,
            "seed": r.seed,
        },
        "actor_rollout_ref": {
            "model": {"path": r.model, "use_remove_padding": True, "enable_gradient_checkpointing": True},
            "actor": {
                "strategy": "fsdp2",
                "optim": {"lr": r.lr, "lr_scheduler_type": "constant"},
                "ppo_mini_batch_size": r.tasks_per_step // max(1, r.mini_batches),
                "ppo_micro_batch_size_per_gpu": r.micro_batch_per_gpu,
                "ppo_epochs": 1,
                "use_kl_loss": kl,
                "kl_loss_coef": r.beta,
                "entropy_coeff": 0,
                "loss_agg_mode": "token-mean",
                "ulysses_sequence_parallel_size": r.sp,
                "checkpoint": {"save_contents": ["model", "optimizer", "extra"]},
            },
            "ref": {"log_prob_micro_batch_size_per_gpu": r.micro_batch_per_gpu},
            "rollout": {
                "name": r.rollout_engine,
                "mode": "async",
                "n": r.group_size,
                "temperature": r.temperature,
                "top_k": r.top_k,
                "top_p": r.top_p,
                "tensor_model_parallel_size": r.rollout_tp,
                "gpu_memory_utilization": r.gpu_memory_utilization,
                "prompt_length": r.prompt_length,
                "response_length": r.response_length,
                "calculate_log_probs": True,
                "log_prob_micro_batch_size_per_gpu": r.micro_batch_per_gpu,
                "multi_turn": {"enable": True},
                "agent": {"agent_loop_config_path": str(r.agent_loop_config), "default_agent_loop": AGENT_NAME},
                "val_kwargs": {"temperature": r.temperature, "top_k": r.top_k, "top_p": r.top_p, "n": r.val_k, "do_sample": True},
            },
        },
        "algorithm": {
            "adv_estimator": "grpo",
            "norm_adv_by_std_in_grpo": True,
            "use_kl_in_reward": False,
            "filter_groups": {"enable": r.filter_groups, "metric": "reward", "max_inflight_gen_batches": r.max_inflight_gen_batches},
        },
        "trainer": {
            "nnodes": r.nodes,
            "n_gpus_per_node": r.gpus_per_node,
            "total_training_steps": r.steps,
            "total_epochs": max(1, r.steps),  # an upper bound: total_training_steps ends the run
            "save_freq": r.save_freq,
            "test_freq": r.test_freq if r.val_file else -1,
            "val_before_train": bool(r.val_file),
            "default_local_dir": str(r.checkpoint_dir),
            "resume_mode": "auto",
            "logger": ["console"],
            "project_name": "groundstate",
            "experiment_name": r.experiment,
            "use_v1": True,
            "v1": {"trainer_mode": "sync", "sampler": {"sync_refill_failed_groups": True}},
        },
    }
    if r.sampling == "online":  # the training rows are the sampler's draws, fetched where its actor is reachable
        cfg["data"].update(
            {
                "custom_cls": {"path": "pkg://groundstate.train.verl.online", "name": "OnlineTaskDataset"},
                "dataloader_num_workers": 0,
                ONLINE_SETTINGS_KEY: str(r.online_settings),
            }
        )
    for dotted, value in r.extra.items():
        node = cfg
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return cfg


def flatten(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


_PLAIN = re.compile(r"^[A-Za-z0-9_./+:@-]+$")  # what Hydra's override grammar takes unquoted


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    s = str(v)
    if _PLAIN.match(s) and s not in ("null", "true", "false"):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def overrides(cfg: dict[str, Any]) -> list[str]:
    """Hydra command-line overrides (`key=value`) for a nested config."""
    return [f"{'+' if k in ADDED_KEYS else ''}{k}={_value(v)}" for k, v in flatten(cfg).items()]


def command(cfg: dict[str, Any], python: str | None = None) -> list[str]:
    """The launch command: verl's PPO entry point with the recipe's overrides (run it on the Ray head node)."""
    return [python or sys.executable, "-m", "verl.trainer.main_ppo", *overrides(cfg)]


def shell(cmd: list[str]) -> str:
    """The command as a copyable shell line: the entry point first, then one override per line."""
    head, rest = cmd[:3], cmd[3:]
    return " \\\n  ".join([" ".join(shlex.quote(c) for c in head), *(shlex.quote(c) for c in rest)])


def write_run_files(r: VerlRecipe, cfg: dict[str, Any]) -> dict[str, Path]:
    """The agent-loop config file, the resolved config and the run info (base model, for `merge`)."""
    import yaml

    out = Path(r.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    r.agent_loop_config.write_text(yaml.safe_dump(agent_loop_entries(r), sort_keys=False))
    files = {"agent_loop": r.agent_loop_config}
    if r.sampling == "online":
        r.online_settings.write_text(json.dumps(online_settings(r), indent=1))
        files["online_sampler"] = r.online_settings
    (out / "verl_config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (out / RUN_INFO).write_text(json.dumps({"model": r.model, "recipe": asdict(r)}, indent=1, default=str))
    return {**files, "config": out / "verl_config.yaml", "run_info": out / RUN_INFO}
