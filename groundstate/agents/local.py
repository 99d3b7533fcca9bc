"""A local policy that many concurrent episodes share, token-exact and batched.

Every episode keeps its own token sequence as segments: the prompt, then alternately the tokens the
policy *sampled* (trained on, mask 1) and the tokens of what came back from tools or the user
(observations, mask 0). The next turn's context is that sequence itself, never a re-tokenisation of
decoded text, so the ids trained on are exactly the ids generated. Observation segments are the chat
template's rendering of the new messages (the template is prefix-preserving: a conversation's
rendering extends the rendering of any of its prefixes).

Generation is batched across episodes: requests that arrive while the model is busy are generated
together on the next pass (left-padded), which is what makes hundreds of multi-turn rollouts per
minute possible on a CPU.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groundstate.agents.toolcall_format import parse_response
from groundstate.types import AgentTurn, Usage


PROMPT_FLAGS = "groundstate.json"


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
    def from_options(cls, options: dict[str, Any]) -> "SamplingParams":
        """From a run's sampling options (`temperature`, `top_p`, `top_k`, `max_tokens`; unset ones keep their defaults)."""
        return cls(temperature=options.get("temperature", cls.temperature), top_p=options.get("top_p", cls.top_p),
                   top_k=options.get("top_k", cls.top_k), max_new_tokens=options.get("max_tokens", cls.max_new_tokens))


class ChatCodec:
    """Renders conversations with the tokenizer's chat template, as token segments."""

    def __init__(self, tokenizer: Any, tools_in_prompt: bool = True, system_in_prompt: bool = True):
        self.tok = tokenizer
        self.tools_in_prompt = tools_in_prompt
        self.system_in_prompt = system_in_prompt
        self.eos_text = tokenizer.eos_token

    def _messages(self, conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        msgs = [m for m in conversation if self.system_in_prompt or m["role"] != "system"]
        return [{**m, "content": m.get("content") or ""} for m in msgs]

    def render(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None, generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(self._messages(conversation), tools=(tools or None) if self.tools_in_prompt else None,
                                            add_generation_prompt=generation_prompt, tokenize=False)

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
        tail = a[cut + len(self.eos_text):] if cut >= 0 else ""
        text = ("" if ended else self.eos_text) + tail + b[len(a):]
        return self.encode(text)


@dataclass
class _Request:
    ids: list[int]
    future: asyncio.Future


class BatchedPolicy:
    """A Hugging Face causal LM shared by concurrent episodes; `agent()` gives one episode its handle."""

    def __init__(self, model: Any, tokenizer: Any, sampling: SamplingParams | None = None, *, tools_in_prompt: bool = True,
                 system_in_prompt: bool = True, max_batch: int = 64, seed: int = 0):
        self.model = model
        self.tok = tokenizer
        self.sampling = sampling or SamplingParams()
        self.codec = ChatCodec(tokenizer, tools_in_prompt, system_in_prompt)
        self.max_batch = max_batch
        self.seed = seed
        self._queue: list[_Request] = []
        self._running = False
        self._lock = threading.Lock()
        self._calls = 0
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.generated_tokens = 0
        self.batches = 0

    @classmethod
    def from_pretrained(cls, path: str, sampling: SamplingParams | None = None, **kw: Any) -> "BatchedPolicy":
        """Load a local model directory; its `groundstate.json`, if any, says how it expects its prompt."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        return cls(model, tok, sampling, **{**prompt_flags(path), **kw})

    def agent(self) -> "EpisodeAgent":
        return EpisodeAgent(self)

    async def generate(self, ids: list[int]) -> tuple[list[int], list[float], bool]:
        """Sample one turn after `ids`: (token ids, their log-probs under the sampling distribution, ended with eos)."""
        fut = asyncio.get_running_loop().create_future()
        self._queue.append(_Request(ids, fut))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        try:
            while self._queue:
                await asyncio.sleep(0)  # let every episode that is ready submit its request first
                batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch:]
                try:
                    results = await asyncio.to_thread(self._generate_batch, [r.ids for r in batch])
                except Exception as e:  # noqa: BLE001 - every waiting episode must hear about it
                    for r in batch:
                        if not r.future.done():
                            r.future.set_exception(e)
                    continue
                for r, res in zip(batch, results):
                    if not r.future.done():
                        r.future.set_result(res)
        finally:
            self._running = False

    def _generate_batch(self, batch: list[list[int]]) -> list[tuple[list[int], list[float], bool]]:
        import torch

        s = self.sampling
        with self._lock, torch.inference_mode():
            self._calls += 1
            self.batches += 1
            width = max(len(x) for x in batch)
            input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, x in enumerate(batch):
                input_ids[i, width - len(x):] = torch.tensor(x)
                mask[i, width - len(x):] = 1
            room = min(s.max_new_tokens, max(1, s.max_context - width))
            greedy = s.temperature == 0
            torch.manual_seed(self.seed * 1_000_003 + self._calls)
            kwargs = dict(do_sample=not greedy, max_new_tokens=room, eos_token_id=self.eos_id, pad_token_id=self.pad_id,
                          return_dict_in_generate=True, output_scores=True)
            if not greedy:
                kwargs.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
            else:
                kwargs.update(temperature=None, top_p=None, top_k=None)
            out = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
            new = out.sequences[:, width:]
            logps = torch.stack([torch.log_softmax(sc.float(), -1) for sc in out.scores], 1)  # B × T × V
            results = []
            for i in range(len(batch)):
                ids, lps, ended = [], [], False
                for t in range(new.shape[1]):
                    tok = int(new[i, t])
                    ids.append(tok)
                    lps.append(float(logps[i, t, tok]))
                    if tok == self.eos_id:
                        ended = True
                        break
                self.generated_tokens += len(ids)
                results.append((ids, lps, ended))
            return results


@dataclass
class EpisodeAgent:
    """One episode's view of the policy: an `Agent` that also records its token-exact sequence."""

    policy: BatchedPolicy
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
        ids, lps, ended = await self.policy.generate(context)
        self._extend(ids, [1] * len(ids), lps)
        self._ended = ended
        self._seen = len(conversation)
        text = self.policy.tok.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
        prior = sum(len(m.get("tool_calls") or []) for m in conversation if m.get("role") == "assistant")
        parsed = parse_response(text, tools, id_offset=prior)
        usage = Usage(input_tokens=len(context), output_tokens=len(ids))
        return AgentTurn(text=parsed.content or None, tool_calls=parsed.tool_calls, usage=usage, extra={"completion_text": text, "ended": ended})

    def _extend(self, ids: list[int], mask: list[int], lps: list[float]) -> None:
        self.completion_ids += ids
        self.env_mask += mask
        self.logprobs += lps
