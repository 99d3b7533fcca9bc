"""A local Hugging Face causal LM as the policy (`hf:PATH`).

The conversation and tool schemas go through the tokenizer's own chat template; the model samples one
assistant turn (temperature, top-p, top-k; greedy at temperature 0) until it ends its turn; tool calls are
read from the text by `toolcall_format` (Hermes JSON or Qwen3-Coder XML). The turn keeps the exact prompt
and sampled token ids with their log-probabilities, for training on what was generated.

Sampling is a plain loop over the model's forward pass with a KV cache rather than `model.generate`, so that
a per-call `torch.Generator` makes it deterministic and the log-probabilities are those of the distribution
actually sampled from (after temperature, top-k and top-p). Generation blocks, so it runs in a worker thread;
one lock serialises access to the model, which may be shared by concurrent attempts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import inspect
import json
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from groundstate.agents.base import AgentTurn, Usage
from groundstate.agents.toolcall_format import parse_response

__all__ = ["HFAgent", "Sampling", "make_hf_agent"]


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off (transformers' generate would default to 50)
    max_new_tokens: int = 512
    seed: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Sampling":
        """From run options; `max_tokens` (the runner's name) is accepted for `max_new_tokens`."""
        d = dict(d)
        if "max_tokens" in d:
            d.setdefault("max_new_tokens", d.pop("max_tokens"))
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown sampling options for hf: {sorted(unknown)}")
        s = cls(**{k: v for k, v in d.items() if v is not None})
        if s.temperature < 0 or not 0 < s.top_p <= 1 or s.top_k < 0 or s.max_new_tokens < 1:
            raise ValueError(f"bad sampling options {s}: need temperature >= 0, 0 < top_p <= 1, top_k >= 0, max_new_tokens >= 1")
        return s


class _Model:
    """What attempts share: tokenizer, model, stop ids and the lock."""

    def __init__(self, path: str, device: str | None = None, dtype: Any = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if dtype is None:
            dtype = torch.bfloat16 if str(device).startswith("cuda") and torch.cuda.is_bf16_supported() else torch.float32
        self.path = path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
        self.device = torch.device(device)
        stop: set[int] = set()
        for ids in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id, self.tokenizer.convert_tokens_to_ids("<|im_end|>")):
            for i in ids if isinstance(ids, (list, tuple)) else [ids]:
                if isinstance(i, int) and i >= 0 and i != self.tokenizer.unk_token_id:
                    stop.add(i)
        if not stop:
            raise ValueError(f"{path}: the tokenizer and generation config name no end-of-turn token")
        self.stop_ids = frozenset(stop)
        # transformers renamed the forward's `past_key_values` to `cache` (5.x); accept either
        params = inspect.signature(self.model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.forward_kw = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self.lock = threading.Lock()  # across threads and event loops
        self._loop_locks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # keeps waiting attempts off the thread pool

    def loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._loop_locks.get(loop)
        if lock is None:
            lock = self._loop_locks[loop] = asyncio.Lock()
        return lock


class HFAgent:
    """`hf:PATH`: a local directory (or a hub id, where a hub is reachable) loaded with transformers.

    Each call's generator seed depends on the base seed and the prompt only, so a conversation replays
    exactly; attempts that share an agent but should differ need their own seed (`with_seed`).
    """

    def __init__(self, spec: str, sampling: Sampling | dict[str, Any] | None = None, *, device: str | None = None, dtype: Any = None, _shared: _Model | None = None):
        path = spec.removeprefix("hf:")
        if not path:
            raise ValueError(f"bad agent spec {spec!r}: use hf:PATH (a model directory or hub id)")
        self.spec = f"hf:{path}"
        self.sampling = sampling if isinstance(sampling, Sampling) else Sampling.from_dict(sampling or {})
        self._m = _shared or _Model(path, device, dtype)

    @property
    def tokenizer(self):
        return self._m.tokenizer

    @property
    def model(self):
        return self._m.model

    def with_seed(self, seed: int) -> "HFAgent":
        """The same model (not reloaded) with another base seed, e.g. one per attempt so attempts differ."""
        return HFAgent(self.spec, dataclasses.replace(self.sampling, seed=seed), _shared=self._m)

    def encode_prompt(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        """Token ids of the conversation and tools rendered by the chat template, ending with the assistant header."""
        text = self.tokenizer.apply_chat_template(_for_template(conversation), tools=tools or None, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def call_seed(self, prompt_ids: list[int]) -> int:
        """The generator seed of one call: a function of the base seed and the prompt only."""
        h = hashlib.sha256(f"{self.sampling.seed}:".encode() + json.dumps(prompt_ids).encode())
        return int.from_bytes(h.digest()[:8], "big") >> 1

    async def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        async with self._m.loop_lock():
            return await asyncio.to_thread(self.act_sync, conversation, tools)

    def act_sync(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        """One assistant turn, blocking."""
        with self._m.lock:  # the tokenizer too: fast tokenizers are not safe to share between threads
            prompt_ids = self.encode_prompt(conversation, tools)
            seed = self.call_seed(prompt_ids)
            completion_ids, logprobs, finish = self._generate(prompt_ids, seed)
            body = completion_ids[:-1] if finish == "stop" else completion_ids
            text = self.tokenizer.decode(body, skip_special_tokens=False)
        prior_calls = sum(len(m.get("tool_calls") or []) for m in conversation if m.get("role") == "assistant")
        parsed = parse_response(text, tools, id_offset=prior_calls)
        extra = {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": logprobs,
            "completion_text": text,
            "finish": finish,
            "seed": seed,
        }
        if parsed.reasoning is not None:
            extra["reasoning"] = parsed.reasoning
        usage = Usage(input_tokens=len(prompt_ids), output_tokens=len(completion_ids))
        return AgentTurn(text=parsed.content or None, tool_calls=parsed.tool_calls, usage=usage, extra=extra)

    def _generate(self, prompt_ids: list[int], seed: int) -> tuple[list[int], list[float], str]:
        """Sample up to max_new_tokens after the prompt: (ids, log-probs, "stop" | "length").

        The ids include the end-of-turn token when the model produced one ("stop"). At temperature 0 the
        choice is greedy and its log-probability is the model's own (temperature 1, no truncation).
        """
        import torch

        s = self.sampling
        m = self._m
        model, device = m.model, m.device
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        ids: list[int] = []
        logprobs: list[float] = []
        finish = "length"
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([prompt_ids], device=device), use_cache=True, **m.forward_kw)
            for _ in range(s.max_new_tokens):
                logits = out.logits[0, -1].float()
                if s.temperature == 0:
                    logp = torch.log_softmax(logits, -1)
                    tok = int(torch.argmax(logits))
                else:
                    logp = torch.log_softmax(_truncate(logits / s.temperature, s.top_k, s.top_p), -1)
                    tok = int(torch.multinomial(logp.exp(), 1, generator=gen))
                ids.append(tok)
                logprobs.append(float(logp[tok]))
                if tok in m.stop_ids:
                    finish = "stop"
                    break
                cache = {m.cache_arg: getattr(out, m.cache_arg)}
                out = model(input_ids=torch.tensor([[tok]], device=device), use_cache=True, **cache, **m.forward_kw)
        return ids, logprobs, finish


def _truncate(logits, top_k: int, top_p: float):
    """Logits with everything outside the top-k and the top-p nucleus set to -inf (always keeps the best)."""
    import torch

    if 0 < top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, -1)
        before = torch.cumsum(probs, -1) - probs  # mass of the strictly better tokens
        drop = before >= top_p
        drop[0] = False
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return logits


def _for_template(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-style messages as chat templates expect them: tool-call arguments as mappings when they parse
    (templates apply `tojson` to them), content never None."""
    out = []
    for m in conversation:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = dict(c.get("function", {}))
                if isinstance(fn.get("arguments"), str):
                    try:
                        args = json.loads(fn["arguments"])
                    except json.JSONDecodeError:
                        args = None
                    if isinstance(args, dict):
                        fn["arguments"] = args
                calls.append({**c, "function": fn})
            m["tool_calls"] = calls
        out.append(m)
    return out


def make_hf_agent(spec: str, sampling: dict[str, Any] | None = None) -> HFAgent:
    """`hf:PATH` with run sampling options (temperature, top_p, top_k, max_tokens / max_new_tokens, seed)."""
    return HFAgent(spec, sampling or {})
