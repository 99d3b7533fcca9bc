"""Mutations of tool calls: the lint's mutants and the noisy agent's corruptions share them."""

from __future__ import annotations

import datetime as dt
import random
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from groundstate.types import ToolCatalog

Call = dict[str, Any]  # {"tool": name, "args": {...}}


class Mutant(NamedTuple):
    """The gold solution with one write call dropped, duplicated or with one argument changed (`kind`)."""

    description: str
    calls: list[Call]
    index: int  # of the mutated call in `calls` (for a drop: where the dropped call was)
    kind: Literal["drop", "duplicate", "change"]


def base_type(annotation: Any) -> Any:
    """Unwrap Annotated and Optional to the underlying type."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return base_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return base_type(args[0]) if len(args) == 1 else annotation
    return annotation


def alternative(annotation: Any, value: Any) -> Any:
    """Another valid value of the same type, deterministically; `None` when there is none."""
    ann = base_type(annotation)
    origin = typing.get_origin(ann)
    if origin is Literal:
        others = [o for o in typing.get_args(ann) if o != value]
        return others[0] if others else None
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value + 1.0, 2)
    if isinstance(value, str):
        try:
            return (dt.date.fromisoformat(value) + dt.timedelta(days=1)).isoformat()
        except ValueError:
            return value + "-x" if value else "x"
    if isinstance(value, list):
        if len(value) > 1:
            return value[:-1]
        if value and isinstance(value[0], int) and not isinstance(value[0], bool):
            return [value[0] + 1]
        return None
    if isinstance(value, dict) and value:
        k = sorted(value)[-1]
        return {kk: vv for kk, vv in value.items() if kk != k}
    return None


def mutants(gold: list[Call], toolset: ToolCatalog) -> list[Mutant]:
    """The mutants of each write call of `gold`: drop it, duplicate it, change each argument it has an alternative for."""
    out = []
    for i, call in enumerate(gold):
        spec = toolset.specs.get(call["tool"])
        if spec is None or not spec.write:
            continue
        out.append(Mutant(f"drop gold[{i}] {call['tool']}", gold[:i] + gold[i + 1 :], i, "drop"))
        out.append(Mutant(f"duplicate gold[{i}] {call['tool']}", gold[: i + 1] + [call] + gold[i + 1 :], i + 1, "duplicate"))
        for name, value in call["args"].items():
            alt = alternative(spec.params.get(name, Any), value)
            if alt is None:
                continue
            changed = {**call, "args": {**call["args"], name: alt}}
            out.append(Mutant(f"change gold[{i}] {call['tool']}.{name}: {value!r} -> {alt!r}", gold[:i] + [changed] + gold[i + 1 :], i, "change"))
    return out


def corrupt(gold: list[Call], toolset: ToolCatalog, p: float, rng: random.Random) -> list[Call]:
    """Each call independently, with probability p: dropped, one argument changed, or duplicated."""
    return corrupt_noting(gold, toolset, p, rng)[0]


@dataclass(frozen=True)
class Injected:
    """One mistake `corrupt` made: `kind` (drop, change, duplicate) of gold call `gold`; `at` is the index of the
    wrong call in the corrupted list (the changed call, the second copy), or where the dropped call would have been."""

    kind: str
    gold: int
    at: int


def corrupt_noting(gold: list[Call], toolset: ToolCatalog, p: float, rng: random.Random) -> tuple[list[Call], list[Injected]]:
    """`corrupt`, with the mistakes it made (the same random draws: the same calls for the same generator)."""
    out: list[Call] = []
    notes: list[Injected] = []
    for i, call in enumerate(gold):
        if rng.random() >= p:
            out.append(call)
            continue
        how = rng.choice(["drop", "change", "duplicate"])
        if how == "drop":
            notes.append(Injected("drop", i, len(out)))
            continue
        if how == "duplicate":
            out += [call, call]
            notes.append(Injected("duplicate", i, len(out) - 1))
            continue
        spec = toolset.specs.get(call["tool"])
        names = [n for n in call["args"] if spec is not None]
        rng.shuffle(names)
        for name in names:
            alt = alternative(spec.params.get(name, Any), call["args"][name])
            if alt is not None:
                out.append({**call, "args": {**call["args"], name: alt}})
                notes.append(Injected("change", i, len(out) - 1))
                break
        else:
            notes.append(Injected("drop", i, len(out)))  # nothing to change: the call is lost
            continue
    return out, notes
