"""Engine-neutral GRPO pieces: group rollouts, zero-variance filtering with bounded refill, advantages.

What this is: on-policy group sampling for GRPO with the final-state verdict as the only reward. Each
task in a step is attempted G times through the *same* episode loop, tool-call parser and grader as
`groundstate run`, so a rollout's training reward is by construction the evaluator's verdict.
The engine computes the advantages (TRL's and verl's GRPO: group-normalised rewards).

What it is not: there is no learned value function, no reward shaping, no partial credit. A group whose
rewards are all equal (all 1 or all 0) carries no gradient; it is dropped and replaced by a group of a
further task from the pool, at most `refill_ratio × tasks_per_step` extra groups per step (oversampling
is bounded); what is still uninformative after that is kept with zero advantage and counted. A rollout
that ends in a system error is never scored 0: its whole group is dropped (and refilled) the same way.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from dataclasses import dataclass, field
from typing import Any

from groundstate.agents import make_user
from groundstate.agents.local import BatchedPolicy
from groundstate.specs import UserSpec, parse_user
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import Domain, EpisodeLimits, ToolCallRecord
from groundstate.worlds.attempt import play


@dataclass
class Rollout:
    task_id: str
    reward: float | None  # None: system error
    system_error: str | None
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float]
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    finish_reason: str = ""
    truncated: bool = False

    def summary(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "reward": self.reward,
            "system_error": self.system_error,
            "finish_reason": self.finish_reason,
            "truncated": self.truncated,
            "tool_calls": [{"name": c.name, "arguments": c.arguments, "ok": c.ok} for c in self.tool_calls],
            "completion_tokens": len(self.completion_ids),
            "model_tokens": sum(self.env_mask),
        }


def is_informative(group: list[Rollout]) -> bool:
    """A group teaches something only if no rollout is a system error and the rewards are not all equal."""
    return all(r.system_error is None for r in group) and len({r.reward for r in group}) > 1


async def rollout(
    task: Task,
    domain: Domain,
    policy: BatchedPolicy,
    backend: Backend,
    user_spec: UserSpec | str = "scripted",
    limits: EpisodeLimits = EpisodeLimits(),
) -> Rollout:
    """One rollout through the same attempt path as evaluation (`groundstate.worlds.attempt.play`)."""
    agent = policy.agent()
    out = await play(task, domain, agent, make_user(user_spec, task), limits, backend=backend)
    v = out.verdict
    if v.system_error is not None:  # infrastructure failure: a system error, never a 0
        return Rollout(task.id, None, v.system_error, agent.prompt_ids, agent.completion_ids, agent.env_mask, agent.logprobs)
    traj = out.trajectory
    reward = None if v.reward is None else float(v.reward)
    return Rollout(
        task.id,
        reward,
        None,
        agent.prompt_ids,
        agent.completion_ids,
        agent.env_mask,
        agent.logprobs,
        traj.tool_calls,
        traj.finish_reason,
        agent.truncated,
    )


@dataclass
class StepStats:
    groups: int = 0
    informative: int = 0
    all_pass: int = 0
    all_fail: int = 0
    system_error_groups: int = 0
    refill_groups: int = 0
    kept_uninformative: int = 0
    mean_reward: float = 0.0  # over the groups trained on (after refill)
    sampled_reward: float = 0.0  # over the step's first pass: the policy's success rate on its batch

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class GroupSampler:
    """Runs the groups of one step and refills the uninformative ones from the pool, within a bound."""

    def __init__(
        self,
        pool: list[tuple[Task, Domain]],
        policy: BatchedPolicy,
        backend: Backend,
        group_size: int,
        refill_ratio: float = 1.0,
        seed: int = 0,
        user_spec: UserSpec | str = "scripted",
        limits: EpisodeLimits = EpisodeLimits(),
    ):
        self.pool = pool
        self.policy, self.backend = policy, backend
        self.G = group_size
        self.refill_ratio = refill_ratio
        self.rng = random.Random(seed)
        self.user_spec, self.limits = parse_user(user_spec), limits

    async def _groups(self, tasks: list[tuple[Task, Domain]]) -> list[list[Rollout]]:
        flat = await asyncio.gather(*(rollout(t, d, self.policy, self.backend, self.user_spec, self.limits) for t, d in tasks for _ in range(self.G)))
        return [list(flat[i * self.G : (i + 1) * self.G]) for i in range(len(tasks))]

    async def step(self, tasks: list[tuple[Task, Domain]]) -> tuple[list[list[Rollout]], StepStats]:
        groups = await self._groups(tasks)
        stats = StepStats(groups=len(groups))
        first = [r.reward for g in groups for r in g if r.reward is not None]
        stats.sampled_reward = statistics.fmean(first) if first else 0.0
        for g in groups:
            if any(r.system_error for r in g):
                stats.system_error_groups += 1
            elif not is_informative(g):
                stats.all_pass += g[0].reward == 1.0
                stats.all_fail += g[0].reward == 0.0
        budget = int(self.refill_ratio * len(tasks))
        bad = [i for i, g in enumerate(groups) if not is_informative(g)]
        while bad and budget > 0:
            n = min(len(bad), budget)
            budget -= n
            stats.refill_groups += n
            fresh = await self._groups([self.rng.choice(self.pool) for _ in range(n)])
            still_bad = []
            for i, g in zip(bad[:n], fresh):
                if is_informative(g):
                    groups[i] = g
                else:
                    still_bad.append(i)
            bad = still_bad + bad[n:]
        stats.kept_uninformative = len(bad)
        stats.informative = len(groups) - len(bad)
        rewards = [r.reward for g in groups for r in g if r.reward is not None]
        stats.mean_reward = statistics.fmean(rewards) if rewards else 0.0
        return groups, stats
