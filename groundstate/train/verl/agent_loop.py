"""A verl agent loop that plays one groundstate episode per rollout against verl's async LLM server.

verl (0.9.x) owns the optimisation, the rollout servers (vLLM/SGLang) and the batching; this loop owns
the episode. `run()` resolves the row's task, then plays it through `groundstate.worlds.attempt.play` — the
same path as `groundstate run` and the TRL engine: it opens the task's sandbox, runs the episode with
groundstate's tool-call parser and simulated user, grades the final state and always closes the
sandbox, whatever happens. The policy side is `policy.EpisodeAgent`, whose model calls go to verl's
server manager (`generate(request_id, prompt_ids=..., sampling_params=...) -> TokenOutput`): the ids
the server sampled and their log-probs are kept exactly, observation tokens (tool results, user
replies, the next assistant header) are masked out, and nothing is re-tokenised from decoded text.

Rewards: the verdict (1 or 0) is the `reward_score`. A system error (backend down, grader failure, the
server failing mid-episode) is never scored 0: `run()` raises `EpisodeSystemError`, verl marks the
whole prompt group as failed, and with `trainer.v1.sampler.sync_refill_failed_groups` (set by the
recipe) the sync trainer replaces the group with a fresh prompt — the same rule as groundstate's own
GRPO (`grpo.GroupSampler`: a system error drops its group and refills it).

Register the loop with a file passed as `actor_rollout_ref.rollout.agent.agent_loop_config_path`
(the recipe writes it); its extra keys (backend, pg_dsn, user, judge, max_turns, ...) reach `__init__`. With
`online_sampler` (the recipe's `sampling="online"`), the reward of every rollout of a row the sampler drew also goes
to the run's online sampler (`train.verl.online`), None for a system error or an episode that failed before grading.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from dataclasses import replace
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from groundstate.agents import make_user
from groundstate.agents.local import ChatCodec, EpisodeAgent, SamplingParams, prompt_flags
from groundstate.specs import JudgeSpec, parse_judge, parse_user
from groundstate.state import make_backend
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.train.verl import AGENT_NAME, ONLINE_DRAW
from groundstate.train.verl.online import record
from groundstate.types import Domain, EpisodeLimits
from groundstate.worlds.attempt import play
from groundstate.worlds.refs import TaskResolver

log = logging.getLogger(__name__)


class EpisodeSystemError(RuntimeError):
    """The episode could not be played or graded for reasons outside the policy's control."""


_lock = threading.Lock()
_backends: dict[tuple[str, str | None], Backend] = {}
_judges: dict[JudgeSpec, Any] = {}


def shared_backend(kind: str, dsn: str | None = None) -> Backend:
    """One backend per (kind, DSN) per process: every loop instance of a worker shares its template cache
    and, on PostgreSQL, its pool of cloned databases (a loop object lives for a single episode)."""
    key = (kind, dsn)
    with _lock:
        backend = _backends.get(key)
        if backend is None:
            backend = make_backend(kind, dsn)
            try:
                backend.cleanup_stale()  # sandbox databases of workers that were killed
            except Exception as e:  # noqa: BLE001 - best effort: a leftover database must not stop training
                log.warning("could not clean up stale sandbox databases: %s", e)
            _backends[key] = backend
        return backend


def shared_judge(spec: JudgeSpec | None) -> Any:
    """One reply-rubric judge per spec per process (None: rubric tasks stay unjudged, see `run()`)."""
    if spec is None:
        return None
    with _lock:
        if spec not in _judges:
            from groundstate.grading.judge import make_judge

            _judges[spec] = make_judge(spec)
        return _judges[spec]


_tasks = TaskResolver()


def resolve_task(ref: str, task_id: str) -> tuple[Task, Domain]:
    """A row's task from its `extra_info` (domain reference, task id), loading each domain once per process."""
    return _tasks.resolve(ref, task_id)


class ServerPolicy:
    """One episode's handle on verl's LLM server, shaped like `BatchedPolicy` for `EpisodeAgent`.

    Every turn of the episode uses one request id (verl routes it to the same server: prefix caching).
    `response_length` bounds the whole response (sampled plus observation tokens), as verl pads and
    truncates it; each turn may sample at most what is left of it, and at most `max_new_tokens`.
    """

    def __init__(
        self,
        server_manager: Any,
        tokenizer: Any,
        codec: ChatCodec,
        sampling_params: dict[str, Any],
        *,
        prompt_length: int,
        response_length: int,
        max_new_tokens: int,
    ):
        self.server_manager = server_manager
        self.tok = tokenizer
        self.codec = codec
        self.params = dict(sampling_params)
        self.prompt_length, self.response_length = prompt_length, response_length
        self.eos_id = tokenizer.eos_token_id
        self.sampling = SamplingParams(
            temperature=float(self.params.get("temperature", 1.0)), max_new_tokens=max_new_tokens, max_context=prompt_length + response_length
        )
        self.request_id = uuid.uuid4().hex
        self.prompt_len: int | None = None
        self.logprobs_missing = False
        self.generate_s = 0.0  # time spent waiting for the server, for verl's timing metrics

    async def generate(self, ids: list[int], rng: Any = None) -> tuple[list[int], list[float], bool]:
        """One turn from verl's server (which samples: `rng`, the local policy's per-episode stream, is not used)."""
        if self.prompt_len is None:
            if len(ids) > self.prompt_length:
                raise EpisodeSystemError(f"the episode's prompt has {len(ids)} tokens, over rollout.prompt_length={self.prompt_length}")
            self.prompt_len = len(ids)
            self.sampling = replace(self.sampling, max_context=len(ids) + self.response_length)
        room = min(self.sampling.max_new_tokens, self.sampling.max_context - len(ids))
        params = {**self.params, "max_tokens": room, "stop_token_ids": sorted({*(self.params.get("stop_token_ids") or []), self.eos_id})}
        t0 = time.perf_counter()
        out = await self.server_manager.generate(request_id=self.request_id, prompt_ids=list(ids), sampling_params=params)
        self.generate_s += time.perf_counter() - t0
        tokens = list(out.token_ids)[:room]
        if out.log_probs is None or len(out.log_probs) < len(tokens):
            self.logprobs_missing = True
            lps = [0.0] * len(tokens)
        else:
            lps = [float(x) for x in out.log_probs[: len(tokens)]]
        return tokens, lps, bool(tokens) and tokens[-1] == self.eos_id


class GroundstateAgentLoop(AgentLoopBase):
    """`agent_name: groundstate` rows: one groundstate episode, graded by its final database state."""

    def __init__(
        self,
        *args: Any,
        backend: str = "sqlite",
        pg_dsn: str | None = None,
        user: str = "scripted",
        judge: str | None = None,
        max_turns: int | None = None,
        max_tool_calls: int | None = None,
        max_new_tokens: int = 512,
        tools_in_prompt: bool | None = None,
        system_in_prompt: bool | None = None,
        online_sampler: str | None = None,
        **kwargs: Any,
    ):
        kwargs.pop("tools", None)  # verl's own tool list: a groundstate domain brings its tools
        super().__init__(*args, **kwargs)
        self.backend_kind, self.pg_dsn = backend, pg_dsn
        self.user_spec, self.judge_spec = parse_user(user), None if judge is None else parse_judge(judge)
        self.limits = EpisodeLimits(max_turns=max_turns, max_tool_calls=max_tool_calls)
        self.max_new_tokens = max_new_tokens
        self.online_sampler = online_sampler  # the run's sampler actor (`train.verl.online`): every reward goes to it
        flags = prompt_flags(str(self.config.actor_rollout_ref.model.path))
        if tools_in_prompt is not None:
            flags["tools_in_prompt"] = tools_in_prompt
        if system_in_prompt is not None:
            flags["system_in_prompt"] = system_in_prompt
        self.codec = ChatCodec(self.tokenizer, **flags)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = dict(kwargs.get("extra_info") or {})
        if "task_id" not in extra or "domain" not in extra:
            raise ValueError(f"a {AGENT_NAME!r} row needs extra_info.task_id and extra_info.domain; got keys {sorted(extra)}")
        drawn = self.online_sampler is not None and extra.get(ONLINE_DRAW) is True
        try:
            out = await self._play(sampling_params, extra)
        except BaseException:  # the episode failed before it was graded: no evidence, and the group must still close
            if drawn:
                record(self.online_sampler, str(extra["task_id"]), None)
            raise
        if drawn:
            record(self.online_sampler, str(extra["task_id"]), out.reward_score)
        return out

    async def _play(self, sampling_params: dict[str, Any], extra: dict[str, Any]) -> AgentLoopOutput:
        task, domain = resolve_task(str(extra["domain"]), str(extra["task_id"]))
        backend = await asyncio.to_thread(shared_backend, self.backend_kind, self.pg_dsn)  # the first call may connect to PostgreSQL
        policy = ServerPolicy(
            self.server_manager,
            self.tokenizer,
            self.codec,
            sampling_params,
            prompt_length=self.rollout_config.prompt_length,
            response_length=self.rollout_config.response_length,
            max_new_tokens=self.max_new_tokens,
        )
        agent = EpisodeAgent(policy)  # type: ignore[arg-type] - ServerPolicy has the members EpisodeAgent uses
        outcome = await play(task, domain, agent, make_user(self.user_spec, task), self.limits, backend=backend, judge=shared_judge(self.judge_spec))
        verdict = outcome.verdict
        if verdict.system_error is not None or verdict.reward is None:
            # never a 0: verl fails the group and the sync trainer refills it (see the module docstring)
            reason = verdict.system_error or "the verdict has no reward (a rubric task without a judge: set the loop's judge)"
            raise EpisodeSystemError(f"task {task.id}: {reason}")
        n = self.rollout_config.response_length
        traj = outcome.trajectory
        return AgentLoopOutput(
            prompt_ids=agent.prompt_ids,
            response_ids=agent.completion_ids[:n],
            response_mask=agent.env_mask[:n],
            response_logprobs=None if policy.logprobs_missing else agent.logprobs[:n],
            reward_score=float(verdict.reward),
            num_turns=len(traj.messages) if traj else 0,
            metrics=AgentLoopMetrics(
                generate_sequences=policy.generate_s,  # the rest of the episode: tools and the user
                tool_calls=max(0.0, outcome.timings.get("episode_s", 0.0) - policy.generate_s),
                compute_score=outcome.timings.get("grade_s", 0.0),
            ),
            extra_fields={
                "task_id": task.id,
                "finish_reason": traj.finish_reason if traj else "",
                "truncated": agent.truncated,
                "turn_scores": [],
                "tool_rewards": [],
            },
        )


def close_shared_backends() -> None:
    """Close and forget the process's backends (PostgreSQL: drop pooled clones, close connections)."""
    with _lock:
        backends = list(_backends.values())
        _backends.clear()
    for backend in backends:
        backend.close()
