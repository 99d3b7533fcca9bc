"""Tree rollouts (#34 item 2): a GRPO group whose G rollouts share a prefix sampled once and branch on forks of its
environment. Each branch is graded as its whole attempt, its prompt is the shared prefix and its completion its own
continuation, the prefix is counted once, and the same seed gives the same group whatever ran beside it. The model is
real (a tiny random Qwen2); its first turn is forced to a tool call so that there is a branch point."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from groundstate.agents.local import BatchedPolicy, SamplingParams  # noqa: E402
from groundstate.agents.scripted import ScriptedUser  # noqa: E402
from groundstate.agents.toolcall_format import render_tool_call  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.train.grpo import GroupSampler, StepStats, tree_group  # noqa: E402
from groundstate.types import EpisodeLimits  # noqa: E402
from groundstate.worlds.attempt import play  # noqa: E402

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"
G = 4
LIMITS = EpisodeLimits(max_turns=3)


class FirstTurnCalls(BatchedPolicy):
    """Real sampling, except that an episode's first turn is the gold call of shop-cancel (a write)."""

    def _generate_batch(self, batch, generators=None):
        eos = self.tok.eos_token_id
        sampled = super()._generate_batch(batch, generators)
        out = []
        for ids, res in zip(batch, sampled, strict=True):
            if "<tool_response>" in self.tok.decode(ids):
                out.append(res)
            else:
                seq = self.codec.encode(render_tool_call("cancel_order", {"order_id": 1})) + [eos]
                out.append((seq, [-0.25] * len(seq), True))
        return out


@pytest.fixture(scope="module")
def model_dir(tiny_shop_model):
    return tiny_shop_model


def _policy(model_dir, seed=0):
    return FirstTurnCalls.from_pretrained(str(model_dir), SamplingParams(temperature=1.0, max_new_tokens=12, max_context=256), seed=seed)


def test_a_tree_group_shares_its_prefix_and_grades_each_branch_as_its_whole_attempt(shop, model_dir):
    task = shop.task("shop-cancel")
    backend = SqliteBackend()
    group = asyncio.run(tree_group(task, shop, _policy(model_dir), backend, G, 1, LIMITS))
    assert len(group) == G and backend.in_use == 0
    ref = _policy(model_dir)
    flat_prompt = ref.codec.prompt_ids([{"role": "user", "content": task.instruction}], [])
    assert all(r.prompt_ids == flat_prompt for r in group)  # each rollout's prompt is its task's, as in a flat group
    call = ref.codec.encode(render_tool_call("cancel_order", {"order_id": 1})) + [ref.tok.eos_token_id]
    for r in group:  # every branch holds the prefix's call, masked (never trained on), then its own continuation
        assert r.completion_ids[: len(call)] == call and r.env_mask[: len(call)] == [0] * len(call)
        assert r.tool_calls[0].name == "cancel_order" and r.system_error is None and r.reward == 1.0
        assert len(r.completion_ids) == len(r.env_mask) == len(r.logprobs)
    assert len({tuple(r.completion_ids) for r in group}) > 1  # branches sample their own continuations
    # the ledger counts the prefix once: the group's output tokens are the prefix's call and each branch's own samples
    assert sum(r.output_tokens for r in group) == len(call) + sum(sum(r.env_mask) for r in group)
    assert group[0].seconds > 0


def test_each_branch_is_what_play_gives_its_attempt_straight_through(shop, model_dir):
    """Replaying a branch's own decisions as one attempt from the start gives the branch's verdict and tool calls."""
    task = shop.task("shop-cancel")
    group = asyncio.run(tree_group(task, shop, _policy(model_dir), SqliteBackend(), G, 1, LIMITS))

    class Replay(FirstTurnCalls):
        """Forced to one branch's continuation: its sampled segments, in order."""

        def __init__(self, *a, segments, **kw):
            super().__init__(*a, **kw)
            self.segments = list(segments)

        def _generate_batch(self, batch, generators=None):
            return [self.segments.pop(0) for _ in batch]

    ref = _policy(model_dir)
    eos = ref.tok.eos_token_id
    first = ref.codec.encode(render_tool_call("cancel_order", {"order_id": 1})) + [eos]
    for r in group:
        segments, cur = [first], []  # what the policy sampled: the prefix's call, then each run of the branch's own tokens
        for tok, m in zip(r.completion_ids, r.env_mask, strict=True):
            if m:
                cur.append(tok)
            elif cur:
                segments.append(cur)
                cur = []
        if cur:
            segments.append(cur)
        replay = Replay.from_pretrained(
            str(model_dir), SamplingParams(max_new_tokens=12, max_context=256), segments=[(s, [0.0] * len(s), s[-1] == eos) for s in segments]
        )
        out = asyncio.run(play(task, shop, replay.agent(), ScriptedUser(task.user.script), LIMITS, backend=SqliteBackend()))
        assert out.verdict.reward == r.reward and [c.name for c in out.trajectory.tool_calls] == [c.name for c in r.tool_calls]
        assert out.trajectory.finish_reason == r.finish_reason and replay.segments == []


def test_the_same_seed_gives_the_same_tree_group_whatever_runs_beside_it(shop, model_dir):
    task = shop.task("shop-cancel")

    async def alone():
        return await tree_group(task, shop, _policy(model_dir, seed=7), SqliteBackend(), G, 1, LIMITS)

    async def beside():  # another task's group decodes in the same batched passes as ours
        p = _policy(model_dir, seed=7)
        mine, _ = await asyncio.gather(
            tree_group(task, shop, p, SqliteBackend(), G, 1, LIMITS), tree_group(shop.task("shop-refuse"), shop, p, SqliteBackend(), G, 1, LIMITS)
        )
        return mine

    a, b = asyncio.run(alone()), asyncio.run(beside())
    assert [(r.prompt_ids, r.completion_ids, r.reward) for r in a] == [(r.prompt_ids, r.completion_ids, r.reward) for r in b]


def test_an_episode_over_before_the_branch_point_makes_a_flat_group(shop, model_dir):
    """Branch after 3 turns with max_turns 3: no branch point; the group is G whole attempts."""
    task = shop.task("shop-cancel")
    backend = SqliteBackend()
    group = asyncio.run(tree_group(task, shop, _policy(model_dir), backend, G, 3, LIMITS))
    assert len(group) == G and backend.in_use == 0
    assert all(r.system_error is None and r.tool_calls[0].name == "cancel_order" for r in group)
    flat_prompt = _policy(model_dir).codec.prompt_ids([{"role": "user", "content": task.instruction}], [])
    assert {tuple(r.prompt_ids) for r in group} == {tuple(flat_prompt)}  # nothing shared: each prompt is the task's own
    assert all(r.finish_reason in ("user_done", "max_turns") for r in group)


def test_the_group_sampler_runs_tree_groups_and_counts_them(shop, model_dir):
    pool = [(t, shop) for t in shop.tasks]
    sampler = GroupSampler(pool, _policy(model_dir), SqliteBackend(), G, refill_ratio=0.0, limits=LIMITS, shape="tree", branch_turn=1)
    groups, stats = asyncio.run(sampler.step([pool[0], pool[1]]))
    assert isinstance(stats, StepStats) and stats.rollouts == 2 * G and len(groups) == 2
    assert all(len({tuple(r.prompt_ids) for r in g}) == 1 for g in groups)
    with pytest.raises(ValueError, match="LLM user cannot be forked"):
        GroupSampler(pool, None, None, G, user_spec="openai:m@http://127.0.0.1:1/v1", shape="tree")
    with pytest.raises(ValueError, match="shape must be flat or tree"):
        GroupSampler(pool, None, None, G, shape="bush")
    tb = type("Scenario", (), {})()  # a world that is not a SQL domain (a ThinkingBox scenario's MCP servers) cannot fork
    with pytest.raises(ValueError, match="cannot fork: shop-cancel"):
        GroupSampler([(pool[0][0], tb), *pool[1:]], None, None, G, shape="tree")


def test_tree_groups_on_postgres_make_room_for_every_branch(shop, model_dir, pg_backend):
    """Each branch holds a sandbox while the group runs and a fork never waits for a slot: the sampler makes room for
    every branch of the step's groups first, so a pool smaller than that trains instead of failing its groups."""
    from groundstate.state.postgres import PostgresBackend

    backend = PostgresBackend(pg_backend.dsn, max_open=2)
    try:
        pool = [(t, shop) for t in shop.tasks]
        sampler = GroupSampler(pool, _policy(model_dir), backend, G, refill_ratio=0.0, limits=LIMITS, shape="tree", branch_turn=1)
        groups, stats = asyncio.run(sampler.step([pool[0], pool[1]]))
        assert stats.system_error_groups == 0 and all(r.system_error is None for g in groups for r in g)
        assert backend.max_open >= 2 * G and backend.in_use == 0
    finally:
        backend.close()


def test_tree_settings_that_cannot_work_are_refused_before_anything_loads():
    from groundstate.train.job import TrainJob, TrainRefused, _check_specs

    for job, why in (
        (TrainJob(model="m", train="t", branch_turn=2), "branch_turn is for rollouts: tree"),
        (TrainJob(model="m", train="t", rollouts="tree", branch_turn=3, max_turns=3), "leaves no turn to branch"),
        (TrainJob(model="m", train="t", engine="verl", rollouts="tree"), "for --engine trl"),
    ):
        with pytest.raises(TrainRefused, match=why):
            _check_specs(job)
    _check_specs(TrainJob(model="m", train="t", rollouts="tree", branch_turn=2, max_turns=6))
