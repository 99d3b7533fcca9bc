"""Engine-neutral GRPO pieces: group rollouts, zero-variance filtering with bounded refill, advantages.

What this is: on-policy group sampling for GRPO with the final-state verdict as the only reward. Each
task in a step is attempted G times through the *same* episode loop, tool-call parser and grader as
`groundstate run`, so a rollout's training reward is by construction the evaluator's verdict.
The engine computes the advantages (TRL's and verl's GRPO: group-normalised rewards).

What it is not: there is no learned value function, no reward shaping, no partial credit. A group whose
rewards are all equal (all 1 or all 0) carries no gradient; it is dropped and replaced by a group of a
further task from the pool, at most `refill_ratio × tasks_per_step` extra groups per step (oversampling
is bounded); what is still uninformative after that is kept with zero advantage and counted. A rollout
that ends in a system error is never scored 0, nor is one nobody scored (a rubric task graded without a judge): its
whole group is dropped (and refilled) the same way, and if kept, none of its rollouts is trained on (`trained_rewards`).

With an `OnlineSampler` (`groundstate.train.online`) the step's tasks and the refills are drawn by each task's
expected signal under the current policy's posterior, which every group run updates; without one, refills are
uniform draws from the pool.

A group is G independent rollouts ("flat") or, with tree rollouts, G branches of one shared prefix (`tree_group`): the
first turns are sampled once and the environment forked there (`Environment.fork`), so more of the group's tokens fall
where its outcomes can differ; each branch is still graded as one whole attempt.
"""

from __future__ import annotations

import asyncio
import copy
import random
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from groundstate.agents import make_user
from groundstate.agents.local import BatchedPolicy, EpisodeAgent
from groundstate.agents.scripted import ScriptedUser
from groundstate.specs import UserSpec, parse_user
from groundstate.state.base import Backend
from groundstate.state.postgres import PostgresBackend
from groundstate.tasks import Task
from groundstate.train.ledger import WASTE_REASONS
from groundstate.train.online import OnlineSampler
from groundstate.types import Agent, Domain, EpisodeLimits, ToolCallRecord, Usage, UserSimulator
from groundstate.worlds.attempt import Outcome, play, play_tree


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
    """A group teaches something only if every rollout was scored (no system error, no unjudged reward) and the
    rewards are not all equal (`waste_reason` is None)."""
    return waste_reason(group) is None


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
    return _rollout(task.id, agent, out)


def _rollout(task_id: str, agent: EpisodeAgent, out: Outcome, shared: int = 0, prefix: Usage | None = None, seconds: float | None = None) -> Rollout:
    """The rollout of one played attempt. In a tree group the first `shared` tokens of the agent's completion are the
    group's shared prefix: they stay in the completion, masked (`env_mask` 0: sampled once, they are the context the
    branches differ from, and no branch is trained on them), so a rollout's prompt is its task's and its sequence no
    longer than one attempt's. `prefix`, the prefix's usage, is taken off this attempt's (the group counts it once);
    `seconds` replaces the attempt's own."""
    v, traj = out.verdict, out.trajectory
    mask = [0] * min(shared, len(agent.env_mask)) + agent.env_mask[shared:]
    tokens = (agent.completion_ids, mask, agent.logprobs)
    spent = {  # a system error's tokens too (`Outcome.usage`: it has no trajectory)
        "input_tokens": out.usage.input_tokens - (prefix.input_tokens if prefix else 0),
        "output_tokens": out.usage.output_tokens - (prefix.output_tokens if prefix else 0),
        "seconds": out.timings.get("total_s", 0.0) if seconds is None else seconds,
    }
    if v.system_error is not None or traj is None:  # infrastructure failure: a system error, never a 0
        return Rollout(task_id, None, v.system_error or "no trajectory", agent.prompt_ids, *tokens, **spent)
    reward = None if v.reward is None else float(v.reward)
    return Rollout(task_id, reward, None, agent.prompt_ids, *tokens, traj.tool_calls, traj.finish_reason, agent.truncated, **spent)


async def tree_group(
    task: Task, domain: Domain, policy: BatchedPolicy, backend: Backend, group_size: int, branch_turn: int, limits: EpisodeLimits = EpisodeLimits()
) -> list[Rollout]:
    """A group of G rollouts that share their first `branch_turn` agent turns (`worlds.attempt.play_tree`): the prefix is
    sampled once, the environment forked at its end, and each branch samples its continuation from its own random
    stream; each is graded as one whole attempt, and its advantage is relative to the group, which shares the branch
    point. The shared turns are masked in every rollout (`_rollout`): a tree group trains the decisions after its
    branch point, never the turns before it (flat groups train those). The prefix's tokens and seconds are counted
    once, in the first rollout. An episode that ends before the branch point is a whole rollout, and the group's other
    G − 1 are flat; an attempt that fails before it is the whole group's system error. Each task's scripted user is
    forked with the environment (SQL domains only: `check_tree_pool`)."""
    agent, *shells = [policy.agent() for _ in range(group_size + 1)]  # every random stream fixed before any await
    made: list[EpisodeAgent] = []

    def branch(prefix_agent: Agent, user: UserSimulator | None) -> tuple[Agent, UserSimulator | None]:
        b = shells[len(made)]
        made.append(b)  # first: a branch that fails to build still has its place
        b.take_over(agent)
        return b, copy.deepcopy(user)

    tree = await play_tree(task, domain, agent, ScriptedUser(task.user.script), branch, group_size, branch_turn, limits, backend=backend)
    if tree.prefix is None:
        if len(tree.outcomes) == 1:  # over before the branch point: one whole rollout, the rest of the group flat
            rest = await asyncio.gather(*(play(task, domain, a, ScriptedUser(task.user.script), limits, backend=backend) for a in shells[1:]))
            return [_rollout(task.id, agent, tree.outcomes[0]), *(_rollout(task.id, a, o) for a, o in zip(shells[1:], rest, strict=True))]
        # failed before it: every rollout its system error; the one attempt's time counted once
        return [_rollout(task.id, agent, o, seconds=None if i == 0 else 0.0) for i, o in enumerate(tree.outcomes)]
    shared = len(agent.completion_ids)
    return [
        _rollout(task.id, b, o, shared, None if i == 0 else tree.prefix.usage, o.timings.get("total_s", 0.0) + (tree.prefix_s if i == 0 else 0.0))
        for i, (b, o) in enumerate(zip(made, tree.outcomes, strict=True))
    ]


def check_tree_pool(pool: list[tuple[Task, Domain]]) -> None:
    """`ValueError` naming them unless every task of `pool` is of a world that forks (a SQL domain): tree rollouts fork
    the environment at each group's branch point (`Environment.fork`)."""
    from groundstate.worlds.domain import Domain as SqlDomain

    cannot = sorted({t.id for t, d in pool if not isinstance(d, SqlDomain)})
    if cannot:
        more = f" and {len(cannot) - 3} more" if len(cannot) > 3 else ""
        raise ValueError(f"tree rollouts fork each group's environment, and these tasks' worlds cannot fork: {', '.join(cannot[:3])}{more}")


USAGE_KEYS = ("input_tokens", "output_tokens", "attempt_seconds")  # what `StepStats.wasted_usage` counts per reason


def waste_reason(group: list[Rollout]) -> str | None:
    """Why a group is not trained on (`train.ledger.WASTE_REASONS`): "system_error" (a rollout the infrastructure
    failed), "unjudged" (a rollout nobody scored: a rubric task graded without a judge, whose reward is neither 1 nor
    0), "all_pass" or "all_fail" (equal rewards: no gradient); None for an informative group. A group with a system
    error or an unjudged rollout is dropped whole, like one without signal: its other rewards alone would be a biased
    sample of the task."""
    if any(r.system_error is not None for r in group):
        return "system_error"
    if any(r.reward is None for r in group):
        return "unjudged"
    if len({r.reward for r in group}) > 1:
        return None
    return "all_pass" if group[0].reward == 1.0 else "all_fail"


def trained_rewards(groups: list[list[Rollout]]) -> list[float | None]:
    """The reward each rollout is trained on, in order: its verdict's, except in a group kept after refill ran out
    that holds a system error or an unjudged rollout, where every reward is None (TRL's unscorable: advantage 0), so
    that such a group's other rollouts are never trained on alone."""
    out: list[float | None] = []
    for g in groups:
        whole = waste_reason(g) not in ("system_error", "unjudged")
        out += [r.reward if whole else None for r in g]
    return out


@dataclass
class StepStats:
    """One step's groups. The group counts (`all_pass`, `all_fail`, `unjudged_groups`, `system_error_groups`) are of the
    step's first groups, before refill; `rollouts` and the `wasted_*` fields count rollouts (groups × G) of every group the step ran,
    refills included, and a group without signal is wasted whether it was dropped or kept with zero advantage:
    `wasted` = `wasted_all_pass` + `wasted_all_fail` + `wasted_unjudged` + `wasted_system_error`, and `wasted` / `rollouts` is the step's
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
    unjudged_groups: int = 0
    system_error_groups: int = 0
    refill_groups: int = 0
    kept_uninformative: int = 0
    mean_reward: float = 0.0  # over the groups trained on (after refill)
    sampled_reward: float = 0.0  # over the step's first pass: the policy's success rate on its batch
    rollouts: int = 0  # every rollout run this step: (groups + refill_groups) × G
    wasted: int = 0
    wasted_all_pass: int = 0
    wasted_all_fail: int = 0
    wasted_unjudged: int = 0
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

    `shape` is how a group is played: "flat", G independent rollouts (`rollout`), or "tree", G branches of one shared
    prefix of `branch_turn` agent turns (`tree_group`; scripted users only).

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
        shape: Literal["flat", "tree"] = "flat",
        branch_turn: int = 1,
    ):
        if shape not in ("flat", "tree"):
            raise ValueError(f"shape must be flat or tree, got {shape!r}")
        if shape == "tree" and parse_user(user_spec).is_llm:
            raise ValueError("tree rollouts fork each task's scripted user with its environment: an LLM user cannot be forked")
        if branch_turn < 1:
            raise ValueError(f"branch_turn must be at least 1, got {branch_turn}")
        if shape == "tree":
            check_tree_pool(pool)
        self.shape, self.branch_turn = shape, branch_turn
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
        if self.shape == "tree":
            if isinstance(self.backend, PostgresBackend):  # every branch holds a sandbox at once, and a fork never waits for one
                await asyncio.to_thread(self.backend.reserve, len(tasks) * self.G)  # (an open's golden replay is done first)
            groups = list(
                await asyncio.gather(*(tree_group(t, d, self.policy, self.backend, self.G, self.branch_turn, self.limits) for t, d in tasks))
            )
        else:
            flat = await asyncio.gather(
                *(rollout(t, d, self.policy, self.backend, self.user_spec, self.limits) for t, d in tasks for _ in range(self.G))
            )
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
        silent = {"all_pass": 0, "all_fail": 0, "unjudged": 0, "system_error": 0}
        for g in groups:
            reason = waste_reason(g)
            if reason is not None:
                silent[reason] += 1
        stats.all_pass, stats.all_fail = silent["all_pass"], silent["all_fail"]
        stats.unjudged_groups, stats.system_error_groups = silent["unjudged"], silent["system_error"]
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
