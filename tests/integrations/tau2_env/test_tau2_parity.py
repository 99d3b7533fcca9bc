"""Verdict parity with τ²-bench's own harness, on every task of airline, retail, telecom (its default list and its small
set) and mock.

For each task, variants of its gold are played twice: through groundstate (`Tau2Environment`, our verdict) and through
τ²'s own `Orchestrator` with τ²'s `evaluate_simulation` (its verdict). Every verdict must be equal, and so must the
conversation τ²'s evaluators read (our rebuilt one against τ²'s recorded one).

Every task plays one variant, the kind rotating over the tasks (gold, no-op, a write call dropped, duplicated, an
argument changed, two calls swapped; the next kind the task has where it lacks one), so that each kind is checked on
about a sixth of the tasks and every task once: 173 pairs, about two minutes of CPU. Telecom's tasks are graded in
milliseconds (no database to hash: assertions and actions), so every kind is played on each of them, the user's own
calls on its phone included (gold's, and gold with the user's last call dropped): 627 pairs on its 114 default tasks and
75 on its small set (the bench's count), about twenty seconds. `GROUNDSTATE_TAU2_SWEEP=full`
plays every kind on every task (900 pairs on the other three domains; `benchmarks/tau2_bench.py` plays the same sweep and prints it as a table,
benchmarks/RESULTS.md has its figures). Gold on every telecom task and retail's test split, and no-op on every
airline and telecom task, are also played through the command line (`test_tau2_world.py`, against τ²'s own counts).
"""

from __future__ import annotations

import asyncio
import os

import pytest

from groundstate.worlds.tau2 import load_tau2
from groundstate.worlds.tau2.parity import PERTURBATIONS, ours, same_conversation, theirs, variants

PAIRS = load_tau2(["airline", "retail", "mock"], local=True)  # τ²'s objects in this process, for τ²'s own harness
TELECOM = load_tau2(["telecom"], local=True) + load_tau2(["telecom"], "small", local=True)
FULL = os.environ.get("GROUNDSTATE_TAU2_SWEEP") == "full"


ROTATION = ("gold", "noop", "drop", "duplicate", "change", "swap")  # the kinds every domain's tasks have


def chosen(index: int, kinds: dict) -> list[str]:
    """The task's kind in rotation (every kind under the full sweep)."""
    if FULL:
        return list(kinds)
    rotated = ROTATION[index % len(ROTATION) :] + ROTATION[: index % len(ROTATION)]
    return [next(k for k in rotated if k in kinds)]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PAIRS)), ids=[t.id for t, _ in PAIRS])
def test_each_variant_gets_taus_own_verdict(index):
    task, domain = PAIRS[index]
    kinds = variants(task, domain)
    same_verdict(task, domain, kinds, chosen(index, kinds))


def same_verdict(task, domain, kinds: dict, chosen: list[str]) -> None:
    for kind in chosen:
        verdict, conversation = asyncio.run(ours(task, domain, kinds[kind]))
        reward, recorded = theirs(task, domain, kinds[kind])
        assert verdict.system_error is None, (task.id, kind, verdict.system_error)
        assert verdict.reward == int(reward), (task.id, kind, verdict.reasons, reward)
        assert same_conversation(conversation, recorded), (task.id, kind)


def test_every_telecom_variant_gets_taus_own_verdict():
    """Every kind on every telecom task of its default list and its small set: the user's own calls on its phone are
    logged, rebuilt into τ²'s conversation and graded as τ²'s orchestrator and evaluator do."""
    played = {}
    for task, domain in TELECOM:
        kinds = variants(task, domain)
        same_verdict(task, domain, kinds, list(kinds))
        for kind in kinds:
            played[kind] = played.get(kind, 0) + 1
    assert played["gold"] == played["noop"] == 134 and played["user_drop"] == 110


def test_every_perturbation_kind_is_checked():
    seen = {k for i, (t, d) in enumerate(PAIRS) for k in chosen(i, variants(t, d))}
    assert seen == {"gold", "noop", *PERTURBATIONS} - {"user_drop"}
