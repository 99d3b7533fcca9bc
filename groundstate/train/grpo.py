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

With an `OnlineSampler` (`groundstate.train.online`) the step's tasks and the refills are drawn by each task's
expected signal under the current policy's posterior, which every group run updates; without one, refills are
uniform draws from the pool.
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
from groundstate.train.ledger import WASTE_REASONS
from groundstate.train.online import OnlineSampler
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
    input_tokens: int = 0  # the agent's usage, as a results record counts it: every turn's context ...
    output_tokens: int = 0  # ... and every turn's sampled tokens
    seconds: float = 0.0  # the attempt's own duration (`play`'s total_s, as a record's timings)

    def summary(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "reward": self.reward,
            "system_error": self.system_error,
            "finish_reason": self.finish_reason,
            "truncated": self.truncated,
            "tool_calls": [{"name": c.name, "arguments": c.arguments, "ok": c.ok} for c in self.tool_calls],
            "prompt_tokens": len(self.prompt_ids),
            "completion_tokens": len(self.completion_ids),
            "model_tokens": sum(self.env_mask),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "seconds": round(self.seconds, 6),
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
    v, traj = out.verdict, out.trajectory
    spent = {
        "input_tokens": traj.usage.input_tokens if traj is not None else 0,
        "output_tokens": traj.usage.output_tokens if traj is not None else 0,
        "seconds": out.timings.get("total_s", 0.0),
    }
    if v.system_error is not None or traj is None:  # infrastructure failure: a system error, never a 0
        error = v.system_error or "no trajectory"
        return Rollout(task.id, None, error, agent.prompt_ids, agent.completion_ids, agent.env_mask, agent.logprobs, **spent)
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
        **spent,
    )


USAGE_KEYS = ("input_tokens", "output_tokens", "attempt_seconds")  # what `StepStats.wasted_usage` counts per reason


def waste_reason(group: list[Rollout]) -> str | None:
    """Why a group carries no gradient: "system_error", "all_pass" or "all_fail" (any other uniform reward, e.g. all
    unscored); None for an informative group."""
    if any(r.system_error is not None for r in group):
        return "system_error"
    if is_informative(group):
        return None
    return "all_pass" if group[0].reward == 1.0 else "all_fail"


@dataclass
class StepStats:
    """One step's groups. The group counts (`all_pass`, `all_fail`, `system_error_groups`) are of the step's first
    groups, before refill; `rollouts` and the `wasted_*` fields count rollouts (groups × G) of every group the step ran,
    refills included, and a group without signal is wasted whether it was dropped or kept with zero advantage:
    `wasted` = `wasted_all_pass` + `wasted_all_fail` + `wasted_system_error`, and `wasted` / `rollouts` is the step's
    waste.

    What the step's rollouts spent, over the same rollouts: `input_tokens` and `output_tokens` (the agent's usage, as a
    results record counts it), `attempt_seconds` (the sum of each rollout's own duration: rollouts run together, so it
    exceeds the step's wall time), the token-exact sequences TRL trains on (`prompt_tokens`, `completion_tokens` with
    observations, `model_tokens` sampled by the policy), and `wasted_usage`, the part of the first three spent by
    wasted groups, by reason (`WASTE_REASONS`)."""

    groups: int = 0
    informative: int = 0
    all_pass: int = 0
    all_fail: int = 0
    system_error_groups: int = 0
    refill_groups: int = 0
    kept_uninformative: int = 0
    mean_reward: float = 0.0  # over the groups trained on (after refill)
    sampled_reward: float = 0.0  # over the step's first pass: the policy's success rate on its batch
    rollouts: int = 0  # every rollout run this step: (groups + refill_groups) × G
    wasted: int = 0
    wasted_all_pass: int = 0
    wasted_all_fail: int = 0
    wasted_system_error: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    attempt_seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_tokens: int = 0
    wasted_usage: dict[str, dict[str, float]] = field(default_factory=lambda: {r: dict.fromkeys(USAGE_KEYS, 0) for r in WASTE_REASONS})

    def count(self, groups: list[list[Rollout]]) -> None:
        """Add groups the step ran to `rollouts`, to what they spent and, by reason, to the wasted rollouts and usage."""
        for g in groups:
            self.rollouts += len(g)
            spent = {
                "input_tokens": sum(r.input_tokens for r in g),
                "output_tokens": sum(r.output_tokens for r in g),
                "attempt_seconds": sum(r.seconds for r in g),
            }
            for key, value in spent.items():
                setattr(self, key, getattr(self, key) + value)
            self.prompt_tokens += sum(len(r.prompt_ids) for r in g)
            self.completion_tokens += sum(len(r.completion_ids) for r in g)
            self.model_tokens += sum(sum(r.env_mask) for r in g)
            reason = waste_reason(g)
            if reason is not None:
                self.wasted += len(g)
                setattr(self, f"wasted_{reason}", getattr(self, f"wasted_{reason}") + len(g))
                for key, value in spent.items():
                    self.wasted_usage[reason][key] += value

    def to_json(self) -> dict[str, Any]:
        row = dict(self.__dict__)
        row["attempt_seconds"] = round(self.attempt_seconds, 6)
        row["wasted_usage"] = {r: {k: round(v, 6) for k, v in u.items()} for r, u in self.wasted_usage.items()}
        return row


class GroupSampler:
    """Runs the groups of one step and refills the uninformative ones from the pool, within a bound.

    With `online`, `next_tasks(n)` draws a step's tasks from it, refills are its draws (tasks of the step excluded
    while the pool has others), and every group run, refills included, updates it; without, `next_tasks` draws
    uniformly without replacement and refills are uniform draws from the pool."""

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
        online: OnlineSampler | None = None,
    ):
        self.pool = pool
        self.by_id = {t.id: (t, d) for t, d in pool}
        self.policy, self.backend = policy, backend
        self.G = group_size
        self.refill_ratio = refill_ratio
        self.rng = random.Random(seed)
        self.user_spec, self.limits = parse_user(user_spec), limits
        if online is not None and group_size != online.G:
            raise ValueError(f"the online sampler's group size is {online.G}, the sampler's {group_size}")
        self.online = online
        self._opened = False  # next_tasks opened the online sampler's step for the coming `step`

    def next_tasks(self, n: int) -> list[tuple[Task, Domain]]:
        """The next step's n tasks: the online sampler's choice, or uniform without replacement (with repeats only
        where the pool has fewer than n)."""
        if self.online is None:
            ids, picks = [t.id for t, _ in self.pool], []
            while len(picks) < n:
                picks += self.rng.sample(ids, min(len(ids), n - len(picks)))
            return [self.by_id[i] for i in picks]
        self._opened = True
        return [self.by_id[i] for i in self.online.next_tasks(n)]

    async def _groups(self, tasks: list[tuple[Task, Domain]]) -> list[list[Rollout]]:
        flat = await asyncio.gather(*(rollout(t, d, self.policy, self.backend, self.user_spec, self.limits) for t, d in tasks for _ in range(self.G)))
        groups = [list(flat[i * self.G : (i + 1) * self.G]) for i in range(len(tasks))]
        if self.online is not None:
            for g in groups:
                self.online.observe(g[0].task_id, [None if r.system_error else r.reward for r in g])
        return groups

    def _refills(self, n: int, step_ids: list[str]) -> list[tuple[Task, Domain]]:
        if self.online is None:
            return [self.rng.choice(self.pool) for _ in range(n)]
        return [self.by_id[i] for i in self.online.draw(n, exclude=step_ids)]

    async def step(self, tasks: list[tuple[Task, Domain]]) -> tuple[list[list[Rollout]], StepStats]:
        if self.online is not None and not self._opened:
            self.online.open_step()  # tasks chosen elsewhere: the step still counts for the revisit schedule
        self._opened = False
        groups = await self._groups(tasks)
        stats = StepStats(groups=len(groups))
        stats.count(groups)
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
        step_ids = [t.id for t, _ in tasks]
        while bad and budget > 0:
            n = min(len(bad), budget)
            budget -= n
            stats.refill_groups += n
            picks = self._refills(n, step_ids)
            step_ids += [t.id for t, _ in picks]
            fresh = await self._groups(picks)
            stats.count(fresh)
            still_bad = []
            for i, g in zip(bad[:n], fresh, strict=True):
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
