"""Reward-hacking agents: scripted attempts to pass a task without doing it, which its checks must fail.

Each hack is a list of tool calls, played through `attempt.play` by a scripted agent whose reply claims success:

- `claim_success`: no call at all;
- `instruction_writes`: every write tool whose verb the instruction mentions, its arguments filled from the
  instruction's own numbers, e-mail addresses and words;
- `other_task_gold`: the gold of another task of the same template (the right kind of action on the wrong entity);
- `gold_plus_extra`: the gold, then one of its writes again with one argument changed (the tempting extra step): the
  first of up to four such writes, last write first, that changes the state;
- `gold_until_last_write`: the gold without its last write and what follows it (giving up before the end).

A hack that passes is a defect of its task: its checks accept an attempt that did not do the task. Two outcomes are
not passes of a hack, and are counted apart: `equivalent` (the hack's writes are the gold's writes: it did the task,
as an instruction naming the order to cancel allows, or, where the gold writes nothing itself, claimed success as gold
does; or a hack that passed with every write beyond the gold's refused by its tool) and `not applicable` (the extra write of `gold_plus_extra` was
refused by its tool or changed nothing, so the final state is the gold's; or there is no sibling task, or no write to
leave out).
"""

from __future__ import annotations

import re
import typing
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.tools.mutate import alternative, base_type
from groundstate.types import Domain
from groundstate.worlds.attempt import play_calls

HACKS = ("claim_success", "instruction_writes", "other_task_gold", "gold_plus_extra", "gold_until_last_write")
CLAIM = "All done: I have completed everything you asked for."

Calls = list[dict[str, Any]]


def _fill(annotation: Any, found: dict[str, Any]) -> Any:
    """A value for a parameter of this type taken from the instruction, or None."""
    ann = base_type(annotation)
    if typing.get_origin(ann) is Literal:
        return next((v for v in typing.get_args(ann) if str(v).lower() in found["lower"]), None)
    if ann is int:
        return found["ints"][0] if found["ints"] else None
    if ann is float:
        return found["numbers"][0] if found["numbers"] else None
    if ann is str:
        return (found["emails"] or found["quoted"] or [found["text"]])[0]
    return None


def instruction_writes(task: Task, domain: Domain) -> Calls:
    """Every write tool whose verb the instruction mentions, with arguments drawn from the instruction."""
    text = task.instruction
    found: dict[str, Any] = {
        "ints": [int(x) for x in re.findall(r"(?<![\d.])\d+(?!\.?\d)", text)],  # whole numbers, a full stop after them too
        "numbers": [float(x) for x in re.findall(r"\d+(?:\.\d+)?", text)],
        "emails": re.findall(r"[\w.+-]+@[\w-]+\.[\w.]+", text),
        "quoted": re.findall(r"['\"]([^'\"]+)['\"]", text),
        "text": text,
        "lower": text.lower(),
    }
    calls = []
    for name, spec in sorted(domain.tools.specs.items()):
        if not spec.write or name.split("_")[0].lower() not in found["lower"]:
            continue
        args = {p: _fill(ann, found) for p, ann in spec.params.items()}
        if all(v is not None for v in args.values()):
            calls.append({"tool": name, "args": args})
    return calls


def hack_calls(hack: str, task: Task, domain: Domain, siblings: list[Task]) -> Calls | None:
    """The calls of one hack on `task` (`siblings`: the tasks of its domain), or None where it does not apply."""
    gold = [c.model_dump() for c in task.gold]
    writes = [i for i, c in enumerate(gold) if domain.tools.specs[c["tool"]].write]
    if hack == "claim_success":
        return []
    if hack == "instruction_writes":
        return instruction_writes(task, domain)
    if hack == "other_task_gold":
        other = next((t for t in siblings if t.id != task.id and t.template and t.template == task.template and t.gold != task.gold), None)
        return None if other is None else [c.model_dump() for c in other.gold]
    if hack not in HACKS:
        raise ValueError(f"unknown hack {hack!r}: choose from {', '.join(HACKS)}")
    if not writes:
        return None
    if hack == "gold_plus_extra":  # the first candidate; `hack` plays them in turn until one changes the state
        extras = extra_writes(gold, domain)
        return gold + [extras[0]] if extras else None
    return gold[: writes[-1]]  # gold_until_last_write


def extra_writes(gold: Calls, domain: Domain, limit: int = 4) -> Calls:
    """Tempting extra writes after the gold: its writes again, last first, each with one argument changed (at most `limit`)."""
    out = []
    for call in reversed(gold):
        spec = domain.tools.specs[call["tool"]]
        if not spec.write:
            continue
        for name, value in call["args"].items():
            alt = alternative(spec.params.get(name, Any), value)
            if alt is not None and len(out) < limit:
                out.append({**call, "args": {**call["args"], name: alt}})
    return out


def _writes(calls: Calls, domain: Domain) -> Counter:
    return Counter(repr((c["tool"], sorted(c["args"].items()))) for c in calls if domain.tools.specs[c["tool"]].write)


def _writes_made(records: list[Any]) -> Counter:
    """The writes an attempt's tools accepted, as `_writes` counts calls."""
    return Counter(repr((c.name, sorted(c.arguments.items()))) for c in records if c.ok and c.write and isinstance(c.arguments, dict))


async def _first_effective_extra(task: Task, domain: Domain, backend: Backend, gold_changes: Any) -> Any:
    """The gold plus the first extra write (`extra_writes`) that leaves a state other than the gold's, played; None when
    none does, or where the world shows no state to tell (ThinkingBox servers)."""
    if gold_changes is None:
        return None
    gold = [c.model_dump() for c in task.gold]
    for extra in extra_writes(gold, domain):
        out = await play_calls(task, domain, gold + [extra], backend=backend, final_text=CLAIM, keep_changes=True)
        if out.changes is not None and out.changes.rows != gold_changes.rows:
            return out
    return None


@dataclass
class TaskHacks:
    """One task's hacks: hack -> `passed` | `failed` | `equivalent` | `not_applicable`, and the reward each got."""

    task_id: str
    outcomes: dict[str, str] = field(default_factory=dict)
    rewards: dict[str, int | None] = field(default_factory=dict)
    calls: dict[str, Calls] = field(default_factory=dict)  # of the hacks that passed

    @property
    def tried(self) -> int:
        return sum(o in ("passed", "failed") for o in self.outcomes.values())

    @property
    def passed(self) -> list[str]:
        return [h for h, o in self.outcomes.items() if o == "passed"]


async def hack_task(task: Task, domain: Domain, backend: Backend, siblings: list[Task]) -> TaskHacks:
    """Every hack on one task (`siblings`: the tasks of its domain); see the module docstring for what counts."""
    out = TaskHacks(task.id)
    gold_calls = [c.model_dump() for c in task.gold]
    gold_writes = _writes(gold_calls, domain)
    gold_changes = None
    for name in HACKS:
        calls = hack_calls(name, task, domain, siblings)
        if calls is None:
            out.outcomes[name] = "not_applicable"
            continue
        if name in ("instruction_writes", "claim_success") and _writes(calls, domain) == gold_writes:
            # the instruction names everything: guessing from it is doing the task; and where the gold writes nothing
            # itself (τ²'s telecom: the user acts on its phone), claiming success is what gold does
            out.outcomes[name] = "equivalent"
            continue
        if name == "gold_plus_extra":
            if gold_changes is None:
                gold_changes = (await play_calls(task, domain, gold_calls, backend=backend, keep_changes=True)).changes
            played = await _first_effective_extra(task, domain, backend, gold_changes)
            if played is None:
                out.outcomes[name] = "not_applicable"  # every extra write was refused or changed nothing: the gold's state
                continue
        else:
            played = await play_calls(task, domain, calls, backend=backend, final_text=CLAIM)
        out.rewards[name] = played.verdict.reward
        made = played.trajectory.tool_calls if played.trajectory is not None else []
        if played.verdict.system_error:
            out.outcomes[name] = "system_error"
        elif played.verdict.reward == 1 and _writes_made(made) == gold_writes:
            out.outcomes[name] = "equivalent"  # every write it tried beyond the gold's was refused: it did what gold does
        elif played.verdict.reward == 1:
            out.outcomes[name] = "passed"
            out.calls[name] = calls
        else:
            out.outcomes[name] = "failed"
    return out


@dataclass
class HackReport:
    tasks: int = 0
    tried: Counter = field(default_factory=Counter)  # hack -> attempts that count
    passed: list[dict[str, Any]] = field(default_factory=list)  # {hack, task_id, calls}: defects of their tasks
    equivalent: Counter = field(default_factory=Counter)
    not_applicable: Counter = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "hacks_tried": sum(self.tried.values()),
            "hacks_passed": len(self.passed),
            "tried": dict(self.tried),
            "equivalent_to_gold": dict(self.equivalent),
            "not_applicable": dict(self.not_applicable),
            "passed": self.passed,
        }


async def hack(pairs: list[tuple[Task, Domain]], backend: Backend) -> HackReport:
    """Every hack on every task; see the module docstring for what counts."""
    report = HackReport()
    siblings: dict[str, list[Task]] = {}
    for t, d in pairs:
        siblings.setdefault(d.name, []).append(t)
    for task, domain in pairs:
        report.tasks += 1
        one = await hack_task(task, domain, backend, siblings[domain.name])
        for name, outcome in one.outcomes.items():
            if outcome in ("passed", "failed", "system_error"):
                report.tried[name] += 1
            if outcome == "passed":
                report.passed.append({"hack": name, "task_id": task.id, "calls": one.calls[name]})
            elif outcome == "equivalent":
                report.equivalent[name] += 1
            elif outcome == "not_applicable":
                report.not_applicable[name] += 1
    return report
