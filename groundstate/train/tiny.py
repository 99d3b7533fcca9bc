"""Tiny models built from scratch, for offline runs and tests: a byte-level BPE tokenizer and a Qwen2 model.

No weights are downloaded: the tokenizer is trained in seconds on text from the domain (policy, tool
schemas, instructions, rendered tool calls) and the model starts from random weights, to be
warm-started with supervised fine-tuning. Both save with `save_pretrained`, so `hf:DIR` loads them
like any Hugging Face checkpoint. The chat format is `chat_template.jinja` beside this file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CHAT_TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]  # control tokens: dropped by skip_special_tokens
FORMAT_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]  # kept in decoded text

# Qwen2's pre-tokenizer split: numbers are cut into single digits, so ids and amounts copy digit by digit.
_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


# How `tokenizer.parse_response` (transformers' response parsing, which TRL's tool loop uses) reads an assistant
# turn the chat template renders: text, then `<tool_call>` blocks of JSON, then `<|im_end|>`
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def chat_template() -> str:
    return CHAT_TEMPLATE_PATH.read_text()


def build_tokenizer(texts: Iterable[str], vocab_size: int = 1024):
    """A byte-level BPE tokenizer trained on `texts`, with groundstate's chat template; `len()` is at most `vocab_size`.

    eos is `<|im_end|>` (ends an assistant turn), pad is `<|endoftext|>`; the tool-call, tool-response and
    think tags are single added tokens that stay in decoded text.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS) + len(FORMAT_TOKENS):
        raise ValueError(f"vocab_size {vocab_size} is below the byte alphabet plus the special tokens")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(FORMAT_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in FORMAT_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        extra_special_tokens=[IM_START],
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    fast.chat_template = chat_template()
    fast.response_template = RESPONSE_TEMPLATE
    return fast


def build_model(
    tokenizer, hidden: int = 128, layers: int = 3, heads: int = 4, kv_heads: int = 2, ffn: int = 256, seed: int = 0, max_positions: int = 8192
):
    """A randomly initialised Qwen2 causal LM sized for `tokenizer`, tied embeddings, float32, eval mode.

    Stops at `<|im_end|>` or `<|endoftext|>`. The global torch RNG is left as it was.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    eot = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=im_end,
        pad_token_id=eot,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=[im_end, eot], pad_token_id=eot, bos_token_id=None)
    return model.eval()


def save_tiny(directory: str | Path, texts: Iterable[str], *, vocab_size: int = 1024, **model_kw: Any) -> Path:
    """Build a tokenizer on `texts` and a model for it, and save both to `directory` (loadable as `hf:DIR`)."""
    directory = Path(directory)
    tokenizer = build_tokenizer(texts, vocab_size=vocab_size)
    model = build_model(tokenizer, **model_kw)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory)
    return directory


def domain_corpus(domain: Any, repeat: int = 20) -> list[str]:
    """Text to train a domain's tokenizer on: its policy, tool schemas, task instructions and gold calls,
    rendered as the model will see and write them (repeated so that their pieces become merges)."""
    from groundstate.agents.toolcall_format import render_tool_call

    schemas = domain.tools.openai_schemas()
    texts = [domain.system_prompt(), *(json.dumps(s, ensure_ascii=False) for s in schemas)]
    for task in domain.tasks:
        texts.append(task.instruction)
        texts.extend(render_tool_call(c.tool, c.args) for c in task.gold)
    texts.extend(render_tool_call(s["function"]["name"], {}) for s in schemas)
    return texts * repeat


def build_tiny_policy(
    out_dir: str | Path,
    domain_name: str = "kiosk",
    *,
    vocab_size: int = 512,
    sft: Any = None,
    log: Any = print,
    tools_in_prompt: bool = False,
    system_in_prompt: bool = False,
    **model_kw: Any,
) -> dict[str, Any]:
    """`groundstate tiny build`: tokenizer + tiny Qwen2 + supervised warm-start on the pool domain, saved as a
    Hugging Face directory (`hf:DIR`). By default the prompt omits tool schemas and the policy text: the tiny model
    learns its tools from the demonstrations (recorded in `groundstate.json`). Nothing is downloaded.

    Only `hf:DIR` reads those flags: a generic OpenAI-compatible server (`transformers serve DIR`) renders every request
    with the system message and the tools it is sent. A model meant to be served the same way as it runs locally is
    built with `tools_in_prompt=True, system_in_prompt=True` (longer prompts, slower to train)."""
    import time

    from groundstate.agents.local import PROMPT_FLAGS, ChatCodec
    from groundstate.train.sft import SftConfig, fresh_tasks, train_sft
    from groundstate.worlds.domain import load_domain

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    domain = load_domain(domain_name)
    flags = {"tools_in_prompt": tools_in_prompt, "system_in_prompt": system_in_prompt}
    cfg = sft or SftConfig()
    texts = domain_corpus(domain, repeat=5)
    bootstrap = build_tokenizer(texts, vocab_size=vocab_size)  # a first tokenizer only to render sample prompts
    codec = ChatCodec(bootstrap, **flags)
    system, schemas = [{"role": "system", "content": domain.system_prompt()}], domain.tools.openai_schemas()
    for t in fresh_tasks(domain, 200, cfg.seed + 7, "corpus"):  # prompts as the flags render them (the codec drops what they omit)
        texts.append(codec.render(system + [{"role": "user", "content": t.instruction}], schemas, True))
    tokenizer = build_tokenizer(texts, vocab_size=vocab_size)
    model = build_model(tokenizer, **model_kw)
    params = sum(p.numel() for p in model.parameters())
    log(f"  tokenizer: {len(tokenizer)} tokens; model: Qwen2, {params / 1e6:.2f}M parameters")
    report = train_sft(model.train(), tokenizer, domain, out_dir, cfg, flags, log=log)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    info = {
        **flags,
        "domain": domain_name,
        "parameters": params,
        "vocab": len(tokenizer),
        "sft": report,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out_dir / PROMPT_FLAGS).write_text(json.dumps(info, indent=1, default=str))
    return info
