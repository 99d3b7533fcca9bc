"""Mutations of tool calls: `alternative`, `mutants`, `corrupt`, and the noisy scripted agent built on them."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import pydantic
import pytest

from groundstate.agents import ScriptedAgent, make_agent, make_user
from groundstate.tools.mutate import alternative, corrupt, mutants
from groundstate.worlds.domain import load_domain

FIXTURE = Path(__file__).parents[1] / "fixtures" / "shop"


@pytest.fixture(scope="module")
def domain():
    return load_domain(str(FIXTURE))


@pytest.fixture(scope="module")
def multi(domain):
    return domain.task("shop-multi")


def gold_of(task) -> list[dict[str, Any]]:
    return [c.model_dump() for c in task.gold]


# -- alternative -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "annotation, value, expected",
    [
        (Literal["basic", "gold"], "basic", "gold"),
        (Literal["basic", "gold"], "gold", "basic"),
        (Literal["a", "b", "c"], "b", "a"),
        (Optional[Literal["basic", "gold"]], "gold", "basic"),  # noqa: UP045 - the spelling older tools use
        (int, 3, 4),
        (int, 0, 1),
        (int, -1, 0),
        (float, 42.5, 43.5),
        (float, 0.1, 1.1),
        (float, 19.999, 21.0),
        (bool, True, False),
        (bool, False, True),
        (str, "2026-03-01", "2026-03-02"),
        (str, "2026-02-28", "2026-03-01"),
        (str, "2024-12-31", "2025-01-01"),
        (str, "vip", "vip-x"),
        (str, "", "x"),
        (str, "c3@example.com", "c3@example.com-x"),
        (list[int], [1, 2, 3], [1, 2]),
        (list[str], ["a", "b"], ["a"]),
        (list[int], [5], [6]),
        (Optional[int], 3, 4),  # noqa: UP045 - the spelling older tools use
        (int | None, 7, 8),
        (Annotated[int, "an id"], 9, 10),
        (dict[str, int], {"a": 1, "b": 2}, {"a": 1}),
        (Any, 5, 6),
    ],
)
def test_alternative(annotation, value, expected):
    alt = alternative(annotation, value)
    assert alt == expected
    assert type(alt) is type(expected)
    assert alt != value
    # the alternative is still a valid value of the annotation
    pydantic.TypeAdapter(annotation).validate_python(alt, strict=True)


@pytest.mark.parametrize(
    "annotation, value",
    [
        (Literal["only"], "only"),
        (list[str], ["solo"]),
        (list[int], []),
        (list[bool], [True]),
        (Optional[int], None),  # noqa: UP045 - the spelling older tools use
        (dict[str, int], {}),
    ],
)
def test_no_alternative(annotation, value):
    assert alternative(annotation, value) is None


def test_alternative_is_deterministic():
    assert [alternative(str, "vip") for _ in range(3)] == ["vip-x"] * 3
    assert [alternative(Literal["a", "b", "c"], "c") for _ in range(3)] == ["a"] * 3


# -- mutants ---------------------------------------------------------------------------------------


def test_mutants_only_for_write_calls(domain, multi):
    gold = gold_of(multi)
    out = mutants(gold, domain.tools)
    descriptions = [m.description for m in out]
    assert descriptions == [
        "drop gold[1] set_tier",
        "duplicate gold[1] set_tier",
        "change gold[1] set_tier.customer_id: 3 -> 4",
        "change gold[1] set_tier.tier: 'gold' -> 'basic'",
        "drop gold[2] set_total",
        "duplicate gold[2] set_total",
        "change gold[2] set_total.order_id: 3 -> 4",
        "change gold[2] set_total.total: 42.5 -> 43.5",
        "drop gold[3] cancel_order",
        "duplicate gold[3] cancel_order",
        "change gold[3] cancel_order.order_id: 3 -> 4",
        "drop gold[4] tag_customer",
        "duplicate gold[4] tag_customer",
        "change gold[4] tag_customer.customer_id: 3 -> 4",
        "change gold[4] tag_customer.tag: 'vip' -> 'vip-x'",
    ]
    assert not any("gold[0]" in d or "find_customer" in d for d in descriptions)  # a read call
    assert gold == gold_of(multi)  # the input is not modified


def test_mutant_calls(domain, multi):
    gold = gold_of(multi)
    by_desc = {d: (calls, i) for d, calls, i, _ in mutants(gold, domain.tools)}
    calls, i = by_desc["drop gold[1] set_tier"]
    assert calls == [gold[0], gold[2], gold[3], gold[4]] and i == 1
    calls, i = by_desc["duplicate gold[3] cancel_order"]
    assert calls == gold[:4] + [gold[3]] + gold[4:] and i == 4
    calls, i = by_desc["change gold[1] set_tier.tier: 'gold' -> 'basic'"]
    assert i == 1
    assert calls == [gold[0], {"tool": "set_tier", "args": {"customer_id": 3, "tier": "basic"}}] + gold[2:]
    for _, calls, _, _ in mutants(gold, domain.tools):
        for c in calls:  # every mutant is made of valid calls
            domain.tools[c["tool"]].validate(c["args"])


def test_no_mutants_for_reads_or_unknown_tools(domain):
    reads = [{"tool": "get_order", "args": {"order_id": 1}}, {"tool": "find_customer", "args": {"email": "a@b.c"}}]
    assert mutants(reads, domain.tools) == []
    assert mutants([{"tool": "teleport", "args": {"x": 1}}], domain.tools) == []
    assert mutants([], domain.tools) == []


# -- corrupt ---------------------------------------------------------------------------------------


def test_corrupt_with_p0_is_the_gold(domain, multi):
    gold = gold_of(multi)
    for seed in range(20):
        assert corrupt(gold, domain.tools, 0.0, random.Random(seed)) == gold


def test_corrupt_with_p1_changes_every_call(domain, multi):
    gold = gold_of(multi)  # five distinct calls
    kinds = Counter()
    for seed in range(50):
        out = corrupt(gold, domain.tools, 1.0, random.Random(seed))
        assert out != gold
        for call in gold:
            n = out.count(call)
            assert n in (0, 2), f"seed {seed}: {call} kept as is ({n} copies) at p=1: {out}"
            kinds["duplicated" if n == 2 else "gone"] += 1
        changed = [c for c in out if c not in gold]
        kinds["changed"] += len(changed)
        for c in changed:  # a changed call is the same tool with exactly one argument changed
            originals = [g for g in gold if g["tool"] == c["tool"]]
            assert len(originals) == 1
            diff = [k for k in c["args"] if c["args"][k] != originals[0]["args"][k]]
            assert len(diff) == 1 and set(c["args"]) == set(originals[0]["args"])
    assert kinds["duplicated"] and kinds["gone"] and kinds["changed"]  # all three corruptions occur


def test_corrupt_is_deterministic_per_seed(domain, multi):
    gold = gold_of(multi)
    a = corrupt(gold, domain.tools, 0.5, random.Random(1234))
    b = corrupt(gold, domain.tools, 0.5, random.Random(1234))
    assert a == b
    others = [corrupt(gold, domain.tools, 0.5, random.Random(s)) for s in range(20)]
    assert len({repr(o) for o in others}) > 1  # the seed matters
    assert gold == gold_of(multi)  # the input is not modified


# -- make_agent --------------------------------------------------------------------------------------


def test_make_agent_gold_and_noop(domain, multi):
    gold = make_agent("scripted:gold", multi, domain)
    assert isinstance(gold, ScriptedAgent) and gold.name == "scripted:gold"
    assert gold.calls == gold_of(multi)
    noop = make_agent("scripted:noop", multi, domain)
    assert noop.calls == [] and noop.name == "scripted:noop"


def test_noisy_agent_is_deterministic_per_task_and_attempt(domain, multi):
    for attempt in range(5):
        a = make_agent("scripted:noisy:0.3", multi, domain, attempt=attempt)
        b = make_agent("scripted:noisy:0.3", multi, domain, attempt=attempt)
        assert a.calls == b.calls
        assert a.name == "scripted:noisy:0.3"
    runs = [make_agent("scripted:noisy:0.3", multi, domain, attempt=k).calls for k in range(10)]
    assert len({repr(r) for r in runs}) > 1  # attempts differ
    assert any(r != gold_of(multi) for r in runs)


def test_noisy_agent_depends_on_task_and_seed(domain, multi):
    seeded = [make_agent("scripted:noisy:0.5", multi, domain, attempt=0, seed=s).calls for s in range(10)]
    assert len({repr(r) for r in seeded}) > 1
    other = multi.model_copy(update={"id": "shop-multi-copy"})
    same_task = [make_agent("scripted:noisy:0.5", multi, domain, attempt=k).calls for k in range(10)]
    other_task = [make_agent("scripted:noisy:0.5", other, domain, attempt=k).calls for k in range(10)]
    assert same_task != other_task


def test_noisy_extremes(domain, multi):
    assert make_agent("scripted:noisy:0", multi, domain).calls == gold_of(multi)
    for attempt in range(5):
        assert make_agent("scripted:noisy:1", multi, domain, attempt=attempt).calls != gold_of(multi)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("scripted:noisy:abc", "bad agent spec 'scripted:noisy:abc': noisy:P needs a probability"),
        ("scripted:noisy:", "bad agent spec 'scripted:noisy:': noisy:P needs a probability"),
        ("scripted:noisy:1.5", "bad agent spec 'scripted:noisy:1.5': P must be in [0, 1]"),
        ("scripted:noisy:-0.1", "bad agent spec 'scripted:noisy:-0.1': P must be in [0, 1]"),
        ("scripted:noisy:nan", "bad agent spec 'scripted:noisy:nan': P must be in [0, 1]"),
        ("scripted:perfect", "unknown agent spec 'scripted:perfect': use scripted:gold, scripted:noop or scripted:noisy:P"),
        ("", "unknown agent spec ''"),
    ],
)
def test_bad_agent_specs(domain, multi, spec, message):
    with pytest.raises(ValueError) as info:
        make_agent(spec, multi, domain)
    assert str(info.value).startswith(message), str(info.value)


def test_bad_user_spec(multi):
    with pytest.raises(ValueError, match="unknown user spec 'llm': use scripted"):
        make_user("llm", multi)
    assert make_user("scripted", multi).script == multi.user.script
