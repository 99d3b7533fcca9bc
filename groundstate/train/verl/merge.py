"""`groundstate merge`: a verl FSDP checkpoint to a Hugging Face model directory that `hf:DIR` loads.

verl saves each rank's shard (`model_world_size_W_rank_R.pt`), `fsdp_config.json` and, in
`huggingface/`, the model config and tokenizer. `verl.model_merger` (its FSDP merger) joins the shards
into one state dict and saves the model with that config and tokenizer. What verl does not carry
over is groundstate's own: the prompt flags beside the base model (`groundstate.json`: tiny models
are prompted without tool schemas) and, for a tokenizer saved without one, the chat template; those
come from the base model the recipe recorded (or `--base`). The result is then verified: config,
weights, tokenizer and chat template must all load.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from groundstate.agents.local import PROMPT_FLAGS
from groundstate.train.verl.recipe import RUN_INFO


class MergeError(ValueError):
    """The checkpoint cannot be found or merged, or the merged directory is incomplete."""


def actor_dir(checkpoint: str | Path) -> Path:
    """The actor shard folder inside a checkpoint: the folder itself, its `actor/`, or the latest `global_step_N/actor`."""
    p = Path(checkpoint)
    if not p.is_dir():
        raise MergeError(f"{p}: no such checkpoint directory")
    for candidate in (p, p / "actor"):
        if (candidate / "fsdp_config.json").is_file() or any(candidate.glob("model_world_size_*_rank_0.pt")):
            return candidate
    latest = p / "latest_checkpointed_iteration.txt"
    steps = sorted((d for d in p.glob("global_step_*") if d.name.split("_")[-1].isdigit()), key=lambda d: int(d.name.split("_")[-1]))
    if latest.is_file():
        step = p / f"global_step_{latest.read_text().strip()}"
        if step.is_dir():
            steps = [step]
    if steps:
        return actor_dir(steps[-1])
    raise MergeError(
        f"{p}: no FSDP checkpoint here (expected fsdp_config.json and model_world_size_*_rank_*.pt, an actor/ folder, or global_step_N/ folders)"
    )


def base_model_of(actor: Path) -> Path | None:
    """The base model the recipe recorded beside the checkpoints (`groundstate_verl.json`), if any."""
    for parent in [actor, *actor.parents][:6]:
        info = parent / RUN_INFO
        if info.is_file():
            model = Path(json.loads(info.read_text()).get("model", ""))
            return model if model.is_dir() else None
    return None


def merge(checkpoint: str | Path, out_dir: str | Path, base: str | Path | None = None) -> dict[str, Any]:
    """Merge the FSDP shards with verl's model merger, complete the directory, verify it; returns a report."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    actor = actor_dir(checkpoint)
    hf_dir = actor / "huggingface"
    if not (hf_dir / "config.json").is_file():
        raise MergeError(f"{hf_dir}: the checkpoint has no huggingface/config.json (verl writes it on rank 0)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(actor), target_dir=str(out), hf_model_config_path=str(hf_dir))
    merger = FSDPModelMerger(cfg)
    try:
        merger.merge_and_save()
    except AssertionError as e:  # verl checks the shard layout with asserts
        raise MergeError(f"{actor}: verl's model merger refused the checkpoint: {e}") from None
    finally:
        merger.cleanup()
    base_dir = Path(base) if base else base_model_of(actor)
    completed = complete(out, base_dir)
    report = verify(out)
    return {"checkpoint": str(actor), "out": str(out), "base": str(base_dir) if base_dir else None, "completed_from_base": completed, **report}


def complete(out: Path, base: Path | None) -> list[str]:
    """Copy what verl leaves out from the base model: prompt flags, and tokenizer/chat template where missing."""
    copied: list[str] = []
    if base is None:
        return copied
    if (base / PROMPT_FLAGS).is_file() and not (out / PROMPT_FLAGS).is_file():
        shutil.copy2(base / PROMPT_FLAGS, out / PROMPT_FLAGS)
        copied.append(PROMPT_FLAGS)
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(out))
    except (OSError, ValueError):
        tok = None
    if tok is None:
        AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(out))
        copied.append("tokenizer")
    elif not tok.chat_template:
        tok.chat_template = AutoTokenizer.from_pretrained(str(base)).chat_template
        if tok.chat_template:
            tok.save_pretrained(str(out))
            copied.append("chat_template")
    return copied


def verify(out: Path) -> dict[str, Any]:
    """Config, weights, tokenizer and chat template of a model directory must all load; returns what was found."""
    from transformers import AutoConfig, AutoTokenizer

    problems = []
    try:
        config = AutoConfig.from_pretrained(str(out))
    except (OSError, ValueError) as e:
        raise MergeError(f"{out}: config.json does not load: {e}") from None
    weights = sorted(p.name for p in out.iterdir() if p.suffix in (".safetensors", ".bin") or p.name.endswith(".index.json"))
    if not weights:
        problems.append("no weights (*.safetensors or *.bin)")
    try:
        tok = AutoTokenizer.from_pretrained(str(out))
        template = bool(tok.chat_template)
    except (OSError, ValueError) as e:
        tok, template = None, False
        problems.append(f"tokenizer does not load: {e}")
    if tok is not None and not template:
        problems.append("the tokenizer has no chat template (pass --base MODEL_DIR to copy the base model's)")
    if problems:
        raise MergeError(f"{out}: " + "; ".join(problems))
    return {"model_type": config.model_type, "weights": weights, "vocab": len(tok), "chat_template": template}
