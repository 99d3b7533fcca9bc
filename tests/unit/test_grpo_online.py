"""`GroupSampler` with an online sampler: the step's tasks and its refills are the sampler's draws, every group it runs
(refills included) updates the posteriors, system errors are not evidence, and `StepStats` counts the wasted rollouts
by reason. The groups are real: a tiny model's policy whose decisions are forced (as in tests/integrations/test_train.py)
plays the shop fixture through the evaluator's episode loop and grader."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from groundstate.agents.local import BatchedPolicy, SamplingParams  # noqa: E402
from groundstate.agents.toolcall_format import render_tool_call  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.train import grpo  # noqa: E402
from groundstate.train.grpo import GroupSampler, Rollout, StepStats  # noqa: E402
from groundstate.train.online import OnlineConfig, OnlineSampler  # noqa: E402
from groundstate.types import EpisodeLimits  # noqa: E402

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"
G = 4


class HalfCancelPolicy(BatchedPolicy):
    """Real tokens, forced decisions: every other `shop-cancel` episode opens with the gold call (so its groups are
    mixed); every other episode says "Done." at once (so `shop-refuse` and `shop-multi` groups are all-fail)."""

    cancels = 0

    def _generate_batch(self, batch, generators=None):
        eos = self.tok.eos_token_id
        out = []
        for ids in batch:
            text = self.tok.decode(ids)
            first_cancel_turn = "Please cancel order 1" in text and "<tool_response>" not in text and "Done." not in text
            if first_cancel_turn:
                HalfCancelPolicy.cancels += 1
            call = first_cancel_turn and HalfCancelPolicy.cancels % 2 == 0
            seq = self.codec.encode(render_tool_call("cancel_order", {"order_id": 1}) if call else "Done.") + [eos]
            out.append((seq, [-0.5] * len(seq), True))
        return out


class Spy(GroupSampler):
    """Keeps every group the sampler runs, refills and dropped ones included, with the online sampler's step."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.ran: list[list[Rollout]] = []
        self.steps: list[int] = []

    async def _groups(self, tasks):
        groups = await super()._groups(tasks)
        self.ran += groups
        self.steps += [self.online.step] * len(groups)
        return groups


@pytest.fixture(scope="module")
def policy(tiny_shop_model):
    return HalfCancelPolicy.from_pretrained(str(tiny_shop_model), SamplingParams(max_new_tokens=24, max_context=256))


def test_real_groups_update_the_posterior_and_refills_come_from_the_online_sampler(shop, policy):
    pool = [(t, shop) for t in shop.tasks]
    online = OnlineSampler([t.id for t, _ in pool], G, config=OnlineConfig(forget=1.0, explore=0.0), seed=0)
    sampler = Spy(pool, policy, SqliteBackend(), G, refill_ratio=1.0, online=online, limits=EpisodeLimits(max_turns=4))
    for step in (1, 2):
        before = len(sampler.ran)
        tasks = sampler.next_tasks(2)
        assert online.step == step and len({t.id for t, _ in tasks}) == 2
        groups, stats = asyncio.run(sampler.step(tasks))
        ran = sampler.ran[before:]
        assert [g[0].task_id for g in ran[:2]] == [t.id for t, _ in tasks]  # the sampler's choice is what ran
        if stats.refill_groups:  # the first refill is the one pool task the step did not have
            assert ran[2][0].task_id not in {t.id for t, _ in tasks}
        assert len(ran) == stats.groups + stats.refill_groups and stats.rollouts == G * len(ran)
        all_fail = [g for g in ran if {r.reward for r in g} == {0.0}]
        assert stats.wasted_all_fail == G * len(all_fail) and stats.wasted == stats.wasted_all_fail
        assert stats.wasted_all_pass == stats.wasted_system_error == 0
        assert stats.informative == sum(grpo.is_informative(g) for g in groups)
        for t, _ in pool:  # λ = 1: each task's posterior is the Jeffreys prior plus every rollout it had, refills included
            rewards = [r.reward for g in sampler.ran for r in g if r.task_id == t.id]
            assert online.posterior(t.id) == (0.5 + sum(rewards), 0.5 + len(rewards) - sum(rewards))
            steps = [i for i, g in zip(sampler.steps, sampler.ran, strict=True) if g[0].task_id == t.id]
            assert online.to_json()["tasks"][t.id]["last_seen"] == (max(steps) if steps else None)
    cancel = [r.reward for g in sampler.ran for r in g if r.task_id == "shop-cancel"]
    assert 0 < sum(cancel) < len(cancel)  # the forced policy made its groups mixed: now the likeliest to be mixed again
    signal = dict(zip(online.ids, online.signal(), strict=True))
    assert signal["shop-cancel"] == max(signal.values())


def test_a_system_error_is_not_evidence_and_its_rollouts_are_wasted_by_reason(shop, monkeypatch):
    """Outcomes scripted per task (no model): shop-refuse's first rollout is a system error, its others pass."""
    pool = [(t, shop) for t in shop.tasks]

    calls = {"shop-refuse": 0, "shop-cancel": 0}

    async def scripted(task, domain, policy, backend, user_spec, limits):
        calls[task.id] += 1
        if task.id == "shop-refuse" and calls[task.id] == 1:
            return Rollout(task.id, None, "sandbox gone", [], [], [], [])
        reward = 1.0 if task.id == "shop-refuse" else float(calls[task.id] % 2)
        return Rollout(task.id, reward, None, [1], [2], [1], [-0.1])

    monkeypatch.setattr(grpo, "rollout", scripted)
    online = OnlineSampler([t.id for t, _ in pool], G, config=OnlineConfig(forget=1.0, explore=0.0), seed=0)
    sampler = GroupSampler(pool, None, None, G, refill_ratio=0.0, online=online)
    groups, stats = asyncio.run(sampler.step([pool[1], pool[0]]))  # shop-refuse, shop-cancel
    assert online.posterior("shop-refuse") == (0.5 + 3, 0.5)  # three passes; the system error counts neither way
    assert online.posterior("shop-cancel") == (0.5 + 2, 0.5 + 2)
    assert online.step == 1  # tasks chosen elsewhere: the step still counts
    assert (stats.system_error_groups, stats.kept_uninformative, stats.informative) == (1, 1, 1)
    assert (stats.rollouts, stats.wasted, stats.wasted_system_error) == (2 * G, G, G)
    assert set(StepStats().to_json()) >= {"all_pass", "all_fail", "system_error_groups", "refill_groups", "kept_uninformative", "wasted_all_pass"}


def test_without_an_online_sampler_next_tasks_is_uniform_without_replacement(shop):
    pool = [(t, shop) for t in shop.tasks]
    sampler = GroupSampler(pool, None, None, G, seed=3)
    assert sorted(t.id for t, _ in sampler.next_tasks(3)) == sorted(t.id for t in shop.tasks)
    picks = [t.id for t, _ in sampler.next_tasks(7)]
    assert len(picks) == 7 and all(picks.count(t.id) >= 2 for t in shop.tasks)  # repeats only once the pool is used up
    with pytest.raises(ValueError, match="group size"):
        GroupSampler(pool, None, None, G, online=OnlineSampler([t.id for t in shop.tasks], G + 1))


def test_an_unjudged_rollout_drops_its_group_and_a_kept_one_is_never_trained_on(shop, monkeypatch):
    """A rubric task graded without a judge has reward None and no system error. A group {1, 0, None, 1} is not
    informative (its scored rollouts alone are a biased sample of the task): it is wasted as `unjudged`, refilled,
    and where refill ran out kept with every reward None (TRL's unscorable: advantage 0), its 1 and 0 included."""
    pool = [(t, shop) for t in shop.tasks]
    scripted_rewards = {"shop-refuse": [1.0, 0.0, None, 1.0], "shop-cancel": [1.0, 0.0, 1.0, 0.0]}
    seen = {t: 0 for t in scripted_rewards}

    async def scripted(task, domain, policy, backend, user_spec, limits):
        r = scripted_rewards[task.id][seen[task.id] % G]
        seen[task.id] += 1
        return Rollout(task.id, r, None, [1], [2], [1], [-0.1])

    monkeypatch.setattr(grpo, "rollout", scripted)
    sampler = GroupSampler(pool, None, None, G, refill_ratio=0.0)
    groups, stats = asyncio.run(sampler.step([pool[1], pool[0]]))  # shop-refuse, shop-cancel
    assert [grpo.waste_reason(g) for g in groups] == ["unjudged", None]
    assert (stats.unjudged_groups, stats.kept_uninformative, stats.informative) == (1, 1, 1)
    assert (stats.wasted, stats.wasted_unjudged, stats.wasted_all_fail) == (G, G, 0)
    assert grpo.trained_rewards(groups) == [None] * G + [1.0, 0.0, 1.0, 0.0]


def test_a_system_error_rollout_counts_the_tokens_its_policy_sampled():
    """A rollout a system error ended (a user fault after the policy's turns) has no trajectory, but its tokens were
    sampled: the ledger's training spend and its waste by reason count them (`Outcome.usage`; before: 0)."""
    from types import SimpleNamespace

    from groundstate.types import Usage, system_error
    from groundstate.worlds.attempt import Outcome

    agent = SimpleNamespace(completion_ids=[1, 2, 3], env_mask=[1, 1, 1], logprobs=[0.0] * 3, prompt_ids=[9], truncated=False)
    out = Outcome(None, system_error("user-simulator fault", "user_fault"), {"total_s": 1.0}, usage=Usage(1000, 200))
    rollout = grpo._rollout("t", agent, out)
    assert rollout.reward is None and (rollout.input_tokens, rollout.output_tokens) == (1000, 200)
    branch = grpo._rollout("t", agent, out, prefix=Usage(400, 50))  # a later branch: the shared prefix is counted once
    assert (branch.input_tokens, branch.output_tokens) == (600, 150)
