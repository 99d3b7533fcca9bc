"""Supervised warm-start of a tiny policy on rendered gold trajectories, stopped at an imperfect base.

A randomly initialised model never emits a valid tool call, so GRPO needs a base that sometimes
succeeds. Demonstrations are *fresh* instances of the pool domain's templates (`taskgen.instances`,
drawn with their own seed, never the checked-in tasks), replayed through the real episode loop so the
tool results are real, and rendered token-exact as the policy will see them (prompt and observation
tokens masked out of the loss). Training uses TRL's `SFTTrainer`.

The base is made deliberately imperfect, so that the pool has a spread of difficulty for GRPO:
- a share of demonstrations per template is *corrupted* with a well-formed wrong decision (one write
  argument changed), with a probability between 0.15 and 0.5 that depends on the template; and
- training stops once pass@1 on fresh held-out instances reaches a target (checked every
  `eval_every` steps with the real grader), not after a fixed number of steps.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from groundstate.agents.local import ChatCodec
from groundstate.agents.scripted import ScriptedAgent
from groundstate.agents.toolcall_format import render_tool_call
from groundstate.state.sqlite import SqliteBackend
from groundstate.tasks import Task
from groundstate.tools.mutate import alternative
from groundstate.types import EpisodeLimits
from groundstate.worlds.domain import Domain
from groundstate.worlds.environment import SqlEnvironment
from groundstate.worlds.episode import run_episode

FINAL_TEXT = "Done."


@dataclass
class SftConfig:
    demonstrations: int = 6000
    batch_size: int = 32
    lr: float = 2e-3  # with warm-up; 5e-3 constant never learned to copy ids (digit accuracy stuck near 0.2)
    warmup_steps: int = 50
    max_steps: int = 1500
    eval_every: int = 50
    eval_tasks: int = 60
    target_pass_at_1: float = 0.35
    eval_max_context: int = 768  # tokens per held-out episode (prompts with tool schemas need more)
    corrupt_min: float = 0.15
    corrupt_max: float = 0.5
    seed: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


def corruption_rate(template: str, lo: float, hi: float) -> float:
    """A fixed per-template share of corrupted demonstrations in [lo, hi] (a hash of the name, not random)."""
    h = int(hashlib.sha256(template.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return round(lo + (hi - lo) * h, 3)


def _taskgen(domain: Domain) -> Any:
    spec = importlib.util.spec_from_file_location(f"groundstate_domain_{domain.name}_taskgen_sft", domain.path / "taskgen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "instances"):
        raise ValueError(f"domain {domain.name} has no taskgen.instances(world, today, rng, n): it cannot make fresh demonstrations")
    return module


def fresh_tasks(domain: Domain, n: int, seed: int, prefix: str) -> list[Task]:
    """`n` fresh task instances of the domain's templates that are not among its checked-in tasks."""
    known = {t.instruction for t in domain.tasks}
    rng = random.Random(seed)
    out: list[Task] = []
    gen = _taskgen(domain)
    while len(out) < n:
        for inst in gen.instances(domain.seed_rows(), domain.config.today, rng, n):
            if inst["instruction"] in known or len(out) >= n:
                continue
            out.append(
                Task(
                    id=f"{prefix}-{len(out)}",
                    domain=domain.name,
                    instruction=inst["instruction"],
                    gold=inst["gold"],
                    family=inst.get("family", "unspecified"),
                    template=inst.get("template"),
                    split=domain.config.split,
                )
            )
    return out


def _corrupt(task: Task, domain: Domain, rng: random.Random) -> list[dict[str, Any]]:
    calls = [c.model_dump() for c in task.gold]
    writes = [i for i, c in enumerate(calls) if domain.tools[c["tool"]].write]
    if not writes:
        return calls
    i = rng.choice(writes)
    spec = domain.tools[calls[i]["tool"]]
    names = [n for n in calls[i]["args"] if alternative(spec.params.get(n), calls[i]["args"][n]) is not None and n not in ("body",)]
    if not names:
        return calls[:i] + calls[i + 1 :]
    name = rng.choice(names)
    calls[i] = {**calls[i], "args": {**calls[i]["args"], name: alternative(spec.params.get(name), calls[i]["args"][name])}}
    return calls


async def _conversation(task: Task, domain: Domain, calls: list[dict[str, Any]], backend: SqliteBackend) -> list[dict[str, Any]]:
    env = SqlEnvironment(task, backend.open(backend.prepare(domain, task.patch)))
    try:
        traj = await run_episode(env, ScriptedAgent(calls, final_text=FINAL_TEXT))
    finally:
        await env.close()
    return traj.messages


def encode_demo(codec: ChatCodec, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """(input_ids, assistant_masks) exactly as the policy's episodes are tokenised: prompt, then sampled
    turns (mask 1, each ending with the end-of-turn token) and observations (mask 0)."""
    eos = codec.tok.eos_token_id
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    ids = codec.prompt_ids(messages[:first], tools)
    mask = [0] * len(ids)
    for i in range(first, len(messages)):
        m = messages[i]
        if m["role"] != "assistant":
            continue
        if i > first:
            prev = max(j for j in range(first, i) if messages[j]["role"] == "assistant")
            obs = codec.observation_ids(messages[: prev + 1], messages[:i], tools, ended=True)
            ids += obs
            mask += [0] * len(obs)
        text = m.get("content") or ""
        for c in m.get("tool_calls") or []:
            text += ("\n" if text else "") + render_tool_call(c["function"]["name"], json.loads(c["function"]["arguments"]))
        turn = codec.encode(text) + [eos]
        ids += turn
        mask += [1] * len(turn)
    return ids, mask


def build_dataset(domain: Domain, codec: ChatCodec, cfg: SftConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Tokenised demonstrations and a summary (counts, corruption rates)."""
    backend = SqliteBackend()
    tasks = fresh_tasks(domain, cfg.demonstrations, cfg.seed + 1, "sft")
    rng = random.Random(cfg.seed + 2)
    rates = {t: corruption_rate(t, cfg.corrupt_min, cfg.corrupt_max) for t in sorted({t.template or "" for t in tasks})}
    tools = domain.tools.openai_schemas()

    async def all_convs() -> list[list[dict[str, Any]]]:
        out = []
        for t in tasks:
            calls = _corrupt(t, domain, rng) if rng.random() < rates[t.template or ""] else [c.model_dump() for c in t.gold]
            out.append(await _conversation(t, domain, calls, backend))
        return out

    rows = []
    for msgs in asyncio.run(all_convs()):
        ids, mask = encode_demo(codec, msgs, tools)
        rows.append({"input_ids": ids, "assistant_masks": mask})
    return rows, {"demonstrations": len(rows), "corruption_rate_by_template": rates, "max_tokens": max(len(r["input_ids"]) for r in rows)}


def pass_at_1(
    model: Any,
    tokenizer: Any,
    domain: Domain,
    tasks: list[Task],
    flags: dict[str, bool],
    seed: int = 0,
    temperature: float = 1.0,
    max_turns: int = 6,
    max_context: int = 768,
) -> float:
    """Share of tasks solved by one sampled attempt each, through the real episode loop and grader."""
    from groundstate.agents.local import BatchedPolicy, SamplingParams
    from groundstate.train.grpo import rollout

    policy = BatchedPolicy(model, tokenizer, SamplingParams(temperature=temperature, max_new_tokens=64, max_context=max_context), seed=seed, **flags)
    backend = SqliteBackend()

    async def run_all():
        return await asyncio.gather(*(rollout(t, domain, policy, backend, limits=EpisodeLimits(max_turns=max_turns)) for t in tasks))

    was = model.training
    model.eval()
    try:
        rs = asyncio.run(run_all())
    finally:
        model.train(was)
    return sum(r.reward == 1.0 for r in rs) / len(rs)


def train_sft(
    model: Any, tokenizer: Any, domain: Domain, out_dir: Path, cfg: SftConfig, flags: dict[str, bool], log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Warm-start `model` in place with TRL's SFTTrainer; stops at `cfg.target_pass_at_1` (or `max_steps`)."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    codec = ChatCodec(tokenizer, **flags)
    t0 = time.perf_counter()
    rows, info = build_dataset(domain, codec, cfg)
    log(
        f"  {info['demonstrations']} demonstrations rendered in {time.perf_counter() - t0:.1f} s "
        "(corrupted share by template: " + ", ".join(f"{t or '(no template)'} {r:.0%}" for t, r in info["corruption_rate_by_template"].items()) + ")"
    )
    val = fresh_tasks(domain, cfg.eval_tasks, cfg.seed + 3, "sft-val")
    history: list[dict[str, Any]] = []

    class StopAtTarget(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step % cfg.eval_every:
                return
            p = pass_at_1(model, tokenizer, domain, val, flags, seed=state.global_step, max_context=cfg.eval_max_context)
            loss = next((h["loss"] for h in reversed(state.log_history) if "loss" in h), None)
            history.append({"step": state.global_step, "val_pass_at_1": p, "loss": loss})
            log(f"  step {state.global_step}: loss {loss if loss is None else round(loss, 4)}, held-out pass@1 {p:.2f}")
            if p >= cfg.target_pass_at_1:
                control.should_training_stop = True

    args = SFTConfig(
        output_dir=str(out_dir / "sft"),
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=cfg.warmup_steps,
        max_grad_norm=1.0,
        max_steps=cfg.max_steps,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        seed=cfg.seed,
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        max_length=None,
        dataloader_num_workers=0,
        disable_tqdm=True,
        assistant_only_loss=False,
        activation_checkpointing=True,  # TRL's default, under transformers 5.x's name: `gradient_checkpointing` warns
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[StopAtTarget()])
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # our own progress lines instead of raw log dicts
    trainer.train()
    model.eval()
    return {
        **info,
        "config": {k: v for k, v in asdict(cfg).items() if k != "history"},
        "history": history,
        "steps": trainer.state.global_step,
        "seconds": round(time.perf_counter() - t0, 1),
    }
