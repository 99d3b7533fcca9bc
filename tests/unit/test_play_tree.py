"""`play_tree`: attempts that share a prefix and continue on forks of its environment (issue #34's tree rollouts).

Each branch must be graded exactly as the same attempt played straight through by `play` (trajectory, verdict and
change set), on both backends; a prefix that ends early is one whole attempt; a failure before the branch point is
every branch's system error; every sandbox is released."""

from __future__ import annotations

import asyncio
import copy

import pytest

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser
from groundstate.state.base import ForkUnsupported
from groundstate.state.sqlite import SqliteBackend
from groundstate.types import EpisodeLimits
from groundstate.worlds.attempt import play, play_tree
from groundstate.worlds.environment import SqlEnvironment

GOLD = [  # shop-multi's gold
    {"tool": "find_customer", "args": {"email": "c3@example.com"}},
    {"tool": "set_tier", "args": {"customer_id": 3, "tier": "gold"}},
    {"tool": "set_total", "args": {"order_id": 3, "total": 42.5}},
    {"tool": "cancel_order", "args": {"order_id": 3}},
    {"tool": "tag_customer", "args": {"customer_id": 3, "tag": "vip"}},
]


def multi(shop):
    t = shop.task("shop-multi")
    return t.model_copy(update={"patch": {**t.patch, "customers": [{"id": 3, "tier": "basic"}]}})


def _released(backend) -> None:
    assert backend.in_use == 0


def _as_played(outcome) -> tuple:
    return outcome.trajectory.to_json(), outcome.verdict.to_json()


@pytest.mark.parametrize("branch_turn", [1, 2, 4])
def test_every_branch_is_graded_as_its_attempt_played_straight_through(backend, shop, branch_turn):
    """Three branches after `branch_turn` agent turns: one finishes gold's calls, one stops there, one adds a row gold
    never writes.
    Each branch's trajectory and verdict equal `play` of the whole attempt (a scripted agent's call ids go on from the
    prefix's, so even the messages agree)."""
    task = multi(shop)
    wrong = {"tool": "add_note", "args": {"customer_id": 3, "body": "a note gold never writes"}}  # an insert: a generated id
    endings = [GOLD[branch_turn:], [], [*GOLD[branch_turn:], wrong]]

    def whole(ending) -> ScriptedAgent:
        return ScriptedAgent(GOLD[:branch_turn] + ending, final_text="Done.")

    async def main():
        want = [await play(task, shop, whole(e), ScriptedUser(task.user.script), backend=backend) for e in endings]
        ends = iter(endings)

        def branches(agent, user):
            a = copy.deepcopy(agent)  # where the prefix's agent stands (its next call id), then its own ending
            a.calls = GOLD[:branch_turn] + next(ends)
            return a, copy.deepcopy(user)

        tree = await play_tree(task, shop, whole([]), ScriptedUser(task.user.script), branches, 3, branch_turn, backend=backend)
        return want, tree

    want, tree = asyncio.run(main())
    assert [_as_played(o) for o in tree.outcomes] == [_as_played(o) for o in want]
    assert [o.verdict.reward for o in tree.outcomes] == [1, 0, 0] and {o.verdict.system_error for o in tree.outcomes} == {None}
    assert tree.prefix is not None and tree.prefix.turns == branch_turn and len(tree.prefix.tool_calls) == branch_turn
    assert tree.prefix.finish_reason == "" and tree.prefix_s > 0
    _released(backend)


def test_a_prefix_that_ends_before_the_branch_point_is_one_whole_attempt(backend, shop):
    task = multi(shop)
    agent = ScriptedAgent(GOLD[:1], final_text="Done.")

    def branches(agent, user):
        raise AssertionError("no branch point: nothing to branch")

    tree = asyncio.run(play_tree(task, shop, agent, ScriptedUser(task.user.script), branches, 4, 3, backend=backend))
    want = asyncio.run(play(task, shop, ScriptedAgent(GOLD[:1], final_text="Done."), ScriptedUser(task.user.script), backend=backend))
    assert tree.prefix is None and len(tree.outcomes) == 1 and _as_played(tree.outcomes[0]) == _as_played(want)
    _released(backend)


def test_limits_count_from_the_attempts_start_in_every_branch(shop):
    """A branch is the same attempt: with max_tool_calls 3 and the branch after 2 calls, each branch runs one call."""
    task = multi(shop)
    backend = SqliteBackend()
    limits = EpisodeLimits(max_tool_calls=3)

    def branches(agent, user):
        return copy.deepcopy(agent), copy.deepcopy(user)

    tree = asyncio.run(play_tree(task, shop, ScriptedAgent(GOLD), ScriptedUser(task.user.script), branches, 2, 2, limits, backend=backend))
    want = asyncio.run(play(task, shop, ScriptedAgent(GOLD), ScriptedUser(task.user.script), limits, backend=backend))
    assert [_as_played(o) for o in tree.outcomes] == [_as_played(want)] * 2
    assert {o.trajectory.finish_reason for o in tree.outcomes} == {"max_tool_calls"} and len(tree.outcomes[0].trajectory.tool_calls) == 3


def test_a_failure_before_the_branch_point_is_every_branchs_system_error(shop, monkeypatch):
    task = multi(shop)
    backend = SqliteBackend()

    async def lost(self, name, arguments):
        raise ConnectionError("the sandbox went away")

    monkeypatch.setattr(SqlEnvironment, "call_tool", lost)
    tree = asyncio.run(play_tree(task, shop, ScriptedAgent(GOLD), None, lambda a, u: (a, u), 3, 2, backend=backend))
    assert tree.prefix is None and len(tree.outcomes) == 3
    assert all(o.verdict.system_error and "the sandbox went away" in o.verdict.system_error for o in tree.outcomes)
    assert all(o.verdict.reward is None for o in tree.outcomes)
    _released(backend)


def test_a_failing_branch_is_its_own_system_error_and_the_others_are_graded(shop):
    task = multi(shop)
    backend = SqliteBackend()
    made = []

    class Broken(ScriptedAgent):
        async def act(self, conversation, tools):
            raise RuntimeError("the policy crashed")

    def branches(agent, user):
        made.append(1)
        a = copy.deepcopy(agent) if len(made) > 1 else Broken([])
        return a, copy.deepcopy(user)

    tree = asyncio.run(play_tree(task, shop, ScriptedAgent(GOLD), ScriptedUser(task.user.script), branches, 3, 2, backend=backend))
    errors = [o.verdict.system_error for o in tree.outcomes]
    assert errors[0] is not None and "the policy crashed" in errors[0] and errors[1:] == [None, None]
    assert [o.verdict.reward for o in tree.outcomes[1:]] == [1, 1]
    _released(backend)


def test_a_world_that_cannot_fork_says_so_and_releases_its_sandbox(shop, monkeypatch):
    task = multi(shop)
    backend = SqliteBackend()

    async def cannot(self):
        raise ForkUnsupported("this world cannot fork")

    monkeypatch.setattr(SqlEnvironment, "fork", cannot)
    with pytest.raises(ForkUnsupported, match="cannot fork"):
        asyncio.run(play_tree(task, shop, ScriptedAgent(GOLD), None, lambda a, u: (a, u), 2, 1, backend=backend))
    _released(backend)


def test_bad_shapes_are_refused(shop):
    with pytest.raises(ValueError, match="width"):
        asyncio.run(play_tree(multi(shop), shop, ScriptedAgent(GOLD), None, lambda a, u: (a, u), 0, 1, backend=SqliteBackend()))


def test_a_branchs_clock_goes_on_from_the_pause_not_from_the_forks(shop, monkeypatch):
    """Forking takes time between the pause and the branches (on PostgreSQL a COMMIT, a CREATE DATABASE and a
    reconnect each): it is not the attempt's. With each fork slowed to 0.6 s, two forks, a branch's own clock stays
    far below the 1.2 s they took."""
    task = multi(shop)
    real = SqlEnvironment.fork

    async def slow(self):
        await asyncio.sleep(0.6)
        return await real(self)

    monkeypatch.setattr(SqlEnvironment, "fork", slow)

    def branches(agent, user):
        return copy.deepcopy(agent), copy.deepcopy(user)

    limits = EpisodeLimits(timeout=60)
    tree = asyncio.run(play_tree(task, shop, ScriptedAgent(GOLD), ScriptedUser(task.user.script), branches, 3, 2, limits, backend=SqliteBackend()))
    assert [o.verdict.reward for o in tree.outcomes] == [1, 1, 1]
    assert all(o.trajectory.seconds < 0.6 for o in tree.outcomes) and tree.prefix_s >= 1.2


def test_a_branch_that_cannot_be_built_is_its_own_system_error(shop):
    task = multi(shop)
    backend = SqliteBackend()
    calls = []

    def branches(agent, user):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("this user cannot be copied")
        return copy.deepcopy(agent), copy.deepcopy(user)

    tree = asyncio.run(play_tree(task, shop, ScriptedAgent(GOLD), ScriptedUser(task.user.script), branches, 3, 2, backend=backend))
    errors = [o.verdict.system_error for o in tree.outcomes]
    assert errors[0] is None and "cannot be copied" in errors[1] and errors[2] is None
    assert [o.verdict.reward for o in tree.outcomes] == [1, None, 1]
    _released(backend)
