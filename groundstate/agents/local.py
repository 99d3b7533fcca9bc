"""A local policy that many concurrent episodes share, token-exact and batched.

Every episode keeps its own token sequence as segments: the prompt, then alternately the tokens the
policy *sampled* (trained on, mask 1) and the tokens of what came back from tools or the user
(observations, mask 0). The next turn's context is that sequence itself, never a re-tokenisation of
decoded text, so the ids trained on are exactly the ids generated. Observation segments are the chat
template's rendering of the new messages (the template is prefix-preserving: a conversation's
rendering extends the rendering of any of its prefixes).

Generation is batched across episodes: requests that arrive while the model is busy are generated
together on the next pass (left-padded), which is what makes hundreds of multi-turn rollouts per
minute possible on a CPU. Which requests share a pass depends on timing (threads finish when they finish), so
nothing an episode samples may depend on it: every episode draws from its own random stream (seeded by the
attempt, or by the order episodes were created in), and its token budget is its own context's, not the batch's.
An episode's samples are therefore the same whichever episodes it was batched with, up to the last bit of
floating point (different padding can round logits differently; a sample flips only on an exact tie).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groundstate.agents.template_check import warn_once
from groundstate.agents.toolcall_format import parse_response
from groundstate.types import AgentTurn, Usage

PROMPT_FLAGS = "groundstate.json"


# a Hugging Face hub id: NAME or OWNER/NAME of letters, digits, `-`, `_`, `.` (what the hub itself accepts)
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?")


WEIGHT_FILES = ("model*.safetensors", "pytorch_model*.bin")  # what from_pretrained loads a folder's weights from (shards too)


def check_model_ref(ref: str) -> None:
    """`ValueError` in one line unless `ref` is a Hugging Face model folder (config.json and weights) or a hub id. A path
    that does not exist is named as such, rather than reaching the hub as an id it cannot be."""
    if not ref.strip():
        raise ValueError("no model given (a Hugging Face model folder or a hub id)")
    path = Path(ref).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{ref}: is a file, not a model folder (a Hugging Face model folder holds config.json and the weights)")
        if not (path / "config.json").is_file():
            raise ValueError(f"{ref}: is not a Hugging Face model folder (no config.json in it)")
        if not any(next(path.glob(pattern), None) for pattern in WEIGHT_FILES):
            raise ValueError(f"{ref}: holds no weights (no model*.safetensors or pytorch_model*.bin beside its config.json)")
        return
    if ref.startswith(("/", ".", "~")) or not _HUB_ID.fullmatch(ref):
        raise ValueError(
            f"{ref}: no such model folder (give a Hugging Face model folder, e.g. one `groundstate tiny build --out DIR` wrote, or a hub id)"
        )


class ModelLoadError(ValueError):
    """A model reference that names no loadable model (a missing folder, a hub id with no hub, damaged weights)."""


def load_pretrained(ref: str) -> tuple[Any, Any]:
    """The tokenizer and float32 causal LM of a model folder or hub id; `ModelLoadError` in one line when it cannot be loaded."""
    try:
        check_model_ref(ref)
    except ValueError as e:
        raise ModelLoadError(str(e)) from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(ref), AutoModelForCausalLM.from_pretrained(ref, dtype=torch.float32)
    except OSError as e:  # transformers' own: no hub, no such repo, missing or damaged files
        lines = str(e).strip().splitlines()
        raise ModelLoadError(f"{ref}: cannot load the model: {lines[0] if lines else type(e).__name__}") from None


def prompt_flags(model_path: str | Path) -> dict[str, bool]:
    """How a model expects its prompt. Tiny models learn the tools in supervised warm-up, so their prompts
    omit the tool schemas and the policy text (recorded in `groundstate.json` beside the weights)."""
    p = Path(model_path) / PROMPT_FLAGS
    if p.exists():
        d = json.loads(p.read_text())
        return {"tools_in_prompt": bool(d.get("tools_in_prompt", True)), "system_in_prompt": bool(d.get("system_in_prompt", True))}
    return {"tools_in_prompt": True, "system_in_prompt": True}


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off (pass it explicitly: generate's own default is 50)
    max_new_tokens: int = 96
    max_context: int = 1024  # prompt + completion tokens of one episode

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> SamplingParams:
        """From a run's sampling options (`temperature`, `top_p`, `top_k`, `max_tokens`; unset ones keep their defaults)."""
        return cls(
            temperature=options.get("temperature", cls.temperature),
            top_p=options.get("top_p", cls.top_p),
            top_k=options.get("top_k", cls.top_k),
            max_new_tokens=options.get("max_tokens", cls.max_new_tokens),
        )


class ChatCodec:
    """Renders conversations with the tokenizer's chat template, as token segments."""

    def __init__(self, tokenizer: Any, tools_in_prompt: bool = True, system_in_prompt: bool = True):
        warn_once(tokenizer, tools_in_prompt)  # a template that drops tools, calls or results: said once, here
        self.tok = tokenizer
        self.tools_in_prompt = tools_in_prompt
        self.system_in_prompt = system_in_prompt
        self.eos_text = tokenizer.eos_token

    def _messages(self, conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        msgs = [m for m in conversation if self.system_in_prompt or m["role"] != "system"]
        return [{**m, "content": m.get("content") or ""} for m in msgs]

    def render(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None, generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(
            self._messages(conversation),
            tools=(tools or None) if self.tools_in_prompt else None,
            add_generation_prompt=generation_prompt,
            tokenize=False,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        return self.encode(self.render(conversation, tools, True))

    def observation_ids(self, before: list[dict[str, Any]], now: list[dict[str, Any]], tools: list[dict[str, Any]] | None, ended: bool) -> list[int]:
        """Tokens that follow a sampled assistant turn: the rest of its end marker, the new messages, the next header.

        `before` ends with the assistant message as the episode recorded it; `ended` says whether the
        sampled tokens already closed the turn with the end-of-turn token.
        """
        a = self.render(before, tools, False)
        b = self.render(now, tools, True)
        if not b.startswith(a):
            raise ValueError("the chat template is not prefix-preserving; token-exact training needs one that is")
        cut = a.rfind(self.eos_text)
        tail = a[cut + len(self.eos_text) :] if cut >= 0 else ""
        text = ("" if ended else self.eos_text) + tail + b[len(a) :]
        return self.encode(text)


@dataclass
class _Request:
    ids: list[int]
    rng: Any  # the episode's torch.Generator
    future: asyncio.Future


class _RowSampler:
    """Chooses each row's next token and records it: greedy (temperature 0: the most likely token) or sampled from
    the row's own random stream under the sampling distribution (temperature, top-k, top-p: transformers' own
    warpers); it records the tokens and their log-probs, and stops a row at its end-of-sequence token or its own
    token budget.

    Sampling never lets one row's draws depend on the other rows of the batch: each row takes a block of
    `max_new_tokens` uniforms from its generator per pass (however many it uses), and inverts its distribution's CDF
    at them, all rows at once."""

    def __init__(self, s: SamplingParams, generators: list[Any] | None, rooms: list[int], eos_id: int, pad_id: int):
        import torch
        from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        self.greedy = s.temperature == 0
        self.warpers: list[Any] = []
        if not self.greedy:
            if generators is None:
                raise ValueError("sampling at a temperature above 0 needs each row's generator")
            self.warpers.append(TemperatureLogitsWarper(s.temperature))
            if s.top_k:
                self.warpers.append(TopKLogitsWarper(s.top_k))
            if s.top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(s.top_p))
            # 1 - U(0, 1) is in (0, 1]: the inverse CDF never lands on a token of probability 0
            self.uniforms = 1.0 - torch.stack([torch.rand(s.max_new_tokens, generator=g, dtype=torch.float64) for g in generators])
        self.rooms = torch.tensor(rooms)
        self.eos_id, self.pad_id = eos_id, pad_id
        self.done = torch.zeros(len(rooms), dtype=torch.bool)
        self.steps: list[tuple[Any, Any, Any]] = []  # per step: (tokens, their log-probs, rows that were still going)

    def next_tokens(self, scores: Any) -> Any:
        """The next token of every row from its logits (B × V): a row that has stopped gets the pad token."""
        import torch

        warped = scores.float()
        for w in self.warpers:
            warped = w(None, warped)
        logp = torch.log_softmax(warped, -1)
        t = len(self.steps)
        if self.greedy:
            tok = logp.argmax(-1)
        else:
            cdf = logp.exp().double().cumsum(-1)
            u = self.uniforms[:, t : t + 1] * cdf[:, -1:]
            tok = torch.searchsorted(cdf, u).clamp_(max=scores.shape[-1] - 1).squeeze(1)
        going = ~self.done
        self.steps.append((tok, logp.gather(1, tok[:, None]).squeeze(1), going))
        self.done = self.done | (tok == self.eos_id) | (t + 1 >= self.rooms)
        return torch.where(going, tok, self.pad_id)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """As a logits processor of `generate`: forces the chosen tokens."""
        import torch

        tok = self.next_tokens(scores)
        forced = torch.full_like(scores, float("-inf"))
        forced[torch.arange(len(tok)), tok] = 0.0
        return forced

    @property
    def results(self) -> list[tuple[list[int], list[float]]]:
        """Per row: the tokens it chose and their log-probs."""
        import torch

        if not self.steps:
            return [([], []) for _ in range(len(self.done))]
        toks, lps, going = (torch.stack(x, 1) for x in zip(*self.steps, strict=True))  # B × T each
        out = []
        for row_t, row_lp, row_go in zip(toks.tolist(), lps.tolist(), going.tolist(), strict=True):
            n = sum(row_go)  # a row goes on, step after step, until it stops
            out.append((row_t[:n], row_lp[:n]))
        return out


class BatchedPolicy:
    """A Hugging Face causal LM shared by concurrent episodes; `agent()` gives one episode its handle."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        sampling: SamplingParams | None = None,
        *,
        tools_in_prompt: bool = True,
        system_in_prompt: bool = True,
        max_batch: int = 64,
        seed: int = 0,
    ):
        self.model = model
        self.tok = tokenizer
        self.sampling = sampling or SamplingParams()
        self.codec = ChatCodec(tokenizer, tools_in_prompt, system_in_prompt)
        self.max_batch = max_batch
        self.seed = seed
        self._queue: list[_Request] = []
        self._running = False
        self._lock = threading.Lock()
        self._agents = 0
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.generated_tokens = 0
        self.batches = 0
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    @classmethod
    def from_pretrained(cls, path: str, sampling: SamplingParams | None = None, **kw: Any) -> BatchedPolicy:
        """Load a local model directory; its `groundstate.json`, if any, says how it expects its prompt."""
        tok, model = load_pretrained(path)
        return cls(model.eval(), tok, sampling, **{**prompt_flags(path), **kw})

    def agent(self, seed: int | None = None) -> EpisodeAgent:
        """One episode's handle. Its random stream is seeded by `seed` (e.g. the attempt's: task, index and run seed), or,
        without one, by this policy's seed and the number of episodes created before it (GRPO's rollouts, which
        start in a fixed order)."""
        import torch

        if seed is None:
            seed = self.seed * 1_000_003 + self._agents
        self._agents += 1
        return EpisodeAgent(self, rng=torch.Generator().manual_seed(seed % 2**63))

    async def generate(self, ids: list[int], rng: Any) -> tuple[list[int], list[float], bool]:
        """Sample one turn after `ids` from the episode's stream `rng`: (token ids, their log-probs under the sampling
        distribution, ended with eos)."""
        fut = asyncio.get_running_loop().create_future()
        self._queue.append(_Request(ids, rng, fut))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        try:
            while self._queue:
                await asyncio.sleep(0)  # let every episode that is ready submit its request first
                batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
                try:
                    results = await asyncio.to_thread(self._generate_batch, [r.ids for r in batch], [r.rng for r in batch])
                    if len(results) != len(batch):
                        raise RuntimeError(f"the model gave {len(results)} results for a batch of {len(batch)} requests")
                except Exception as e:  # noqa: BLE001 - every waiting episode must hear about it
                    for r in batch:
                        if not r.future.done():
                            r.future.set_exception(e)
                    continue
                for r, res in zip(batch, results, strict=True):
                    if not r.future.done():
                        r.future.set_result(res)
        finally:
            self._running = False

    def _generate_batch(self, batch: list[list[int]], generators: list[Any] | None = None) -> list[tuple[list[int], list[float], bool]]:
        """One left-padded pass over `batch`: per row (token ids, log-probs, ended with eos). Each row may add up to
        `max_new_tokens`, and no more than its own context leaves of `max_context`; rows sample from their own
        `generators` (greedy decoding, temperature 0, needs none)."""
        import torch

        s = self.sampling
        with self._lock, torch.inference_mode():
            self.batches += 1
            width = max(len(x) for x in batch)
            input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, x in enumerate(batch):
                input_ids[i, width - len(x) :] = torch.tensor(x)
                mask[i, width - len(x) :] = 1
            rooms = [min(s.max_new_tokens, max(1, s.max_context - len(x))) for x in batch]
            sampler = _RowSampler(s, generators, rooms, self.eos_id, self.pad_id)
            self._decode(input_ids, mask, sampler)
            results = [(ids, lps, bool(ids) and ids[-1] == self.eos_id) for ids, lps in sampler.results]
            self.generated_tokens += sum(len(ids) for ids, _, _ in results)
            return results

    def _decode(self, input_ids: Any, mask: Any, sampler: _RowSampler) -> None:
        """Runs the model token by token over its KV cache until every row has stopped: what `generate` did with the
        sampler as its logits processor, without generate's per-token bookkeeping (the same tokens, 1.05-1.18x faster
        for the quickstart's model: `benchmarks/decoding.py`)."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)  # filled in place by every forward pass
        position = (mask.cumsum(-1) - 1).clamp_(min=0)
        logits = self._forward(input_ids, mask, position, cache)
        while True:
            tok = sampler.next_tokens(logits)
            if bool(sampler.done.all()):
                return
            mask = torch.cat([mask, mask.new_ones((len(mask), 1))], 1)
            position = position[:, -1:] + 1
            logits = self._forward(tok[:, None], mask, position, cache)

    def _forward(self, input_ids: Any, mask: Any, position: Any, cache: Any) -> Any:
        """The next-token logits (B × V) of one forward pass that extends `cache`."""
        # transformers renamed `past_key_values` to `cache` (5.2x); the supported range has both spellings
        kw = {self._cache_kw: cache}
        return self.model(input_ids=input_ids, attention_mask=mask, position_ids=position, use_cache=True, logits_to_keep=1, **kw).logits[:, -1, :]


@dataclass
class EpisodeAgent:
    """One episode's view of the policy: an `Agent` that also records its token-exact sequence."""

    policy: BatchedPolicy
    rng: Any = None  # the episode's own random stream (a torch.Generator; `BatchedPolicy.agent` makes it)
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)  # sampled and observation tokens after the prompt
    env_mask: list[int] = field(default_factory=list)  # 1 = sampled by the policy (trained), 0 = observation
    logprobs: list[float] = field(default_factory=list)
    truncated: bool = False
    _seen: int = 0  # messages in the conversation at the previous turn
    _ended: bool = True

    async def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        codec, s = self.policy.codec, self.policy.sampling
        if not self.prompt_ids:
            self.prompt_ids = codec.prompt_ids(conversation, tools)
        else:
            obs = codec.observation_ids(conversation[: self._seen + 1], conversation, tools, self._ended)
            self._extend(obs, [0] * len(obs), [0.0] * len(obs))
        context = self.prompt_ids + self.completion_ids
        if len(context) >= s.max_context - 1:
            self.truncated = True
            return AgentTurn(text=None, done=True, extra={"truncated": True})
        ids, lps, ended = await self.policy.generate(context, self.rng)
        self._extend(ids, [1] * len(ids), lps)
        self._ended = ended
        self._seen = len(conversation)
        text = self.policy.tok.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
        prior = sum(len(m.get("tool_calls") or []) for m in conversation if m.get("role") == "assistant")
        parsed = parse_response(text, tools, id_offset=prior)
        usage = Usage(input_tokens=len(context), output_tokens=len(ids))
        return AgentTurn(text=parsed.content or None, tool_calls=parsed.tool_calls, usage=usage, extra={"completion_text": text, "ended": ended})

    def take_over(self, other: EpisodeAgent) -> None:
        """Go on from where `other` stands (a branch of a shared prefix, `worlds.attempt.play_tree`): a copy of its
        token-exact record so far, sampled on from this agent's own random stream."""
        self.prompt_ids, self.completion_ids = list(other.prompt_ids), list(other.completion_ids)
        self.env_mask, self.logprobs = list(other.env_mask), list(other.logprobs)
        self.truncated, self._seen, self._ended = other.truncated, other._seen, other._ended

    def _extend(self, ids: list[int], mask: list[int], lps: list[float]) -> None:
        self.completion_ids += ids
        self.env_mask += mask
        self.logprobs += lps
