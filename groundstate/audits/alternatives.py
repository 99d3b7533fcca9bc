"""The false-negative audit: valid alternative solutions of a task must pass.

A task's checks must accept every way of doing the task, not only its gold. The gold is played first, and where the
world shows its state (SQL sandboxes) so is each prefix of it that ends at a write, which gives the rows each gold
call wrote. From that the audit builds *variations* that do the same work another way, plays each through
`attempt.play`, and requires a pass:

- `reorder`: two writes that follow each other among the gold's writes, whose written rows are disjoint, swapped;
- `insert_read`: a read-only call added before the first call and after the last (the gold's first read, or else a
  read tool of the domain whose parameters the gold's arguments fill by name);
- `repeat_read`: a read-only call of the gold made twice in a row;
- `reword`: a string argument of a write that reaches a free-text column given in other words (`REWORD_PREFIX` first);
- `equivalent`: an argument the domain declares read alike (`Equivalences.args`) upper-cased or padded with spaces.

Whether a variation is really the same work is decided from what its calls did, never from its verdict. A read-extended
variation is *valid* iff every gold call in it returned exactly what it returned in the gold, a reordered one iff every
write did but for which of the new rows' ids it got (otherwise the writes depend on each other: an id the first creates is used by the second, an identity check
must come first; a read between the swapped writes sees another state, as it should). A reworded one is valid iff its final state differs from the gold's only in the domain's free-text columns
(otherwise the argument is data, a payee's name or an e-mail address, not wording). A declared equivalence is valid by
declaration, and a false negative too where the tool answers it otherwise than the gold's value (the declaration or
the tool is wrong). An invalid variation is listed with why and not counted; a valid one that fails is a *false negative* of
the task's checks, listed with the difference. Where a world shows no change set (ThinkingBox servers), only the read
variations apply, with reads as the server marks them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import typing
from dataclasses import dataclass, field
from typing import Any

from groundstate.state.base import Backend
from groundstate.state.changes import ChangeSet, Normaliser, diff
from groundstate.tasks import Task
from groundstate.types import Domain, ToolCallRecord
from groundstate.worlds.attempt import Outcome, play_calls

REWORD_PREFIX = "In other words: "
PER_KIND = 3  # variations of each kind per task, at most
CONCURRENCY = 4  # variations played at once (each attempt owns its environment)

Calls = list[dict[str, Any]]


@dataclass
class Variation:
    kind: str
    description: str
    calls: Calls
    gold_at: list[int | None]  # per call, the gold call it is (None: an added read)
    varied: int | None = None  # reword and equivalent: the position of the changed call
    swapped: tuple[int, int] | None = None  # reorder: the two gold calls swapped


@dataclass
class AltResult:
    kind: str
    description: str
    outcome: str  # accepted | false_negative | invalid
    reason: str
    reward: int | None = None  # the state reward it got (parity between backends compares these)


@dataclass
class TaskAlternatives:
    task_id: str
    results: list[AltResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what kept the audit from running (gold fails, system errors)
    shows_state: bool = True  # whether the world showed a change set (SQL sandboxes do; ThinkingBox servers do not)

    def count(self, outcome: str) -> int:
        return sum(r.outcome == outcome for r in self.results)


@dataclass
class _Gold:
    calls: Calls
    records: list[ToolCallRecord]  # the trajectory's record of each gold call
    touched: list[frozenset] | None  # per gold call, the rows it wrote; None where the world shows no change set
    changes: ChangeSet | None
    created: list[frozenset] = field(default_factory=list)  # per gold call, the rows it inserted (kept or not)


def _description(call: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in call["args"].items())
    return f"{call['tool']}({args})"


def _reads(gold: _Gold, domain: Domain) -> Calls:
    """Read-only calls to add: the gold's first read, else a read tool whose parameters the gold's arguments fill."""
    for call, rec in zip(gold.calls, gold.records, strict=True):
        if not rec.write:
            return [call]
    known: dict[str, Any] = {}
    for call in gold.calls:
        for k, v in call["args"].items():
            known.setdefault(k, v)
    for name, spec in sorted(domain.tools.specs.items()):
        if not spec.write and spec.params and all(p in known for p in spec.params):
            return [{"tool": name, "args": {p: known[p] for p in spec.params}}]
    return []


def variations(gold: _Gold, domain: Domain) -> list[Variation]:
    """Every variation of the gold this world allows (see the module docstring), at most `PER_KIND` of each kind, in
    the order reorder, insert_read, repeat_read, reword, equivalent."""
    return [*_reorders(gold), *_inserted_reads(gold, domain), *_repeated_reads(gold), *_rewords(gold, domain), *_equivalents(gold, domain)]


def _reorders(gold: _Gold) -> list[Variation]:
    """Two neighbouring writes swapped, where they touch no row in common."""
    if gold.touched is None:
        return []
    calls, idx, out = gold.calls, list(range(len(gold.calls))), []
    writes = [i for i in idx if gold.records[i].write]
    for a, b in itertools.pairwise(writes):
        if gold.touched[a] & gold.touched[b] or len(out) >= PER_KIND:
            continue
        order = idx[:]
        order[a], order[b] = b, a
        swapped = f"calls {a} ({calls[a]['tool']}) and {b} ({calls[b]['tool']}) swapped"
        out.append(Variation("reorder", swapped, [calls[i] for i in order], list(order), swapped=(a, b)))
    return out


def _inserted_reads(gold: _Gold, domain: Domain) -> list[Variation]:
    """A read-only call the gold does not make, added first and added last."""
    calls, idx = gold.calls, list(range(len(gold.calls)))
    out = []
    for read in _reads(gold, domain)[:1]:
        out.append(Variation("insert_read", f"{_description(read)} added before call 0", [read] + calls, [None] + idx))
        out.append(Variation("insert_read", f"{_description(read)} added after the last call", calls + [read], idx + [None]))
    return out


def _repeated_reads(gold: _Gold) -> list[Variation]:
    """A read of the gold's made twice."""
    calls, idx = gold.calls, list(range(len(gold.calls)))
    return [
        Variation(
            "repeat_read",
            f"call {i} ({calls[i]['tool']}) made twice",
            calls[: i + 1] + [calls[i]] + calls[i + 1 :],
            idx[: i + 1] + [None] + idx[i + 1 :],
        )
        for i in [i for i in idx if not gold.records[i].write][:PER_KIND]
    ]


def _rewords(gold: _Gold, domain: Domain) -> list[Variation]:
    """A write's free-text argument reworded, where the text reaches a free-text column of the final state."""
    if gold.changes is None:
        return []
    calls, out = gold.calls, []
    texts = _free_text_values(gold.changes, domain.equivalences.free_text)
    for i in [i for i in range(len(calls)) if gold.records[i].write]:
        for name, value in calls[i]["args"].items():
            if not isinstance(value, str) or not any(value == t or (len(value.split()) >= 3 and value in t) for t in texts):
                continue
            if len(out) < PER_KIND:
                changed = {**calls[i], "args": {**calls[i]["args"], name: REWORD_PREFIX + value}}
                out.append(
                    Variation(
                        "reword",
                        f"call {i} ({calls[i]['tool']}): {name} reworded",
                        calls[:i] + [changed] + calls[i + 1 :],
                        list(range(len(calls))),
                        i,
                    )
                )
    return out


def _equivalents(gold: _Gold, domain: Domain) -> list[Variation]:
    """An argument written in a form the domain declares equivalent (upper case, padded)."""
    calls, out = gold.calls, []
    for i, call in enumerate(calls):
        for name, value in call["args"].items():
            for how in domain.equivalences.args.get(name, ()):
                if not isinstance(value, str) or len(out) >= PER_KIND:
                    continue
                alike = value.upper() if how == "upper" else f"  {value}  "
                if alike == value:
                    continue
                changed = {**call, "args": {**call["args"], name: alike}}
                what = f"call {i} ({call['tool']}): {name} {how} ({alike!r})"
                out.append(Variation("equivalent", what, calls[:i] + [changed] + calls[i + 1 :], list(range(len(calls))), i))
    return out


def _free_text_values(changes: ChangeSet, free_text: typing.Mapping[str, frozenset[str]]) -> list[str]:
    """The strings the gold wrote into free-text columns (a reworded argument is one that reaches them)."""
    return [
        v for (table, _), c in changes.rows.items() for col, v in (c.after or {}).items() if col in free_text.get(table, ()) and isinstance(v, str)
    ]


def _free_text_only(gold: ChangeSet, got: ChangeSet, free_text: typing.Mapping[str, frozenset[str]]) -> str | None:
    """None if `got` differs from `gold`, and only in free-text columns (the grader's own masking of them); else what
    makes the rewording invalid."""
    if got.rows == gold.rows:
        return "the argument does not reach the final state"
    wording = Normaliser(free_text=dict(free_text))
    rows = diff(gold.masked(wording), got.masked(wording))
    if not rows:
        return None
    where = rows[0]
    columns = ", ".join(f"{where['table']}.{c}" for c in where.get("columns", {})) or f"a {where['problem']} in {where['table']}"
    return f"it changes {columns}, which the domain compares exactly: the argument is data, not wording"


def _validity(v: Variation, out: Outcome, gold: _Gold, domain: Domain) -> str | None:
    """None when the variation is the same work as the gold (see the module docstring), else why it is not."""
    records = out.trajectory.tool_calls if out.trajectory is not None else []
    if len(records) != len(v.calls):
        return f"{len(records)} of its {len(v.calls)} calls ran"
    if v.kind == "equivalent":
        return None  # valid by declaration; whether the tool honours it is checked with the verdict (`audit`)
    if v.kind == "reword":
        if not records[v.varied].ok:
            return f"the tool refused the reworded argument: {records[v.varied].result[:120]}"
        if out.changes is None or gold.changes is None:
            return "the world shows no change set to compare"
        return _free_text_only(gold.changes, out.changes, domain.equivalences.free_text)
    new_ids = _inserted_ids(gold.changes) if v.kind == "reorder" else set()
    if v.swapped is not None and gold.created:
        a, b = v.swapped
        new = [gold.created[a], gold.created[b]]
        shared = {t for t, _ in new[0]} & {t for t, _ in new[1]}  # tables both insert into: there their ids trade places
        theirs = {k[0] for t, k in new[0] | new[1] if t in shared}
        named = [i for i in range(a + 1, len(gold.calls)) if i != b and theirs & _ints(gold.calls[i]["args"])]
        if named:  # a later call names a new row whose id the swap gives to the other write's row
            return f"call {named[0]} ({gold.calls[named[0]]['tool']}) names an id that the swapped writes create: the calls depend on each other"
    for pos, g in enumerate(v.gold_at):
        if g is None or (v.kind == "reorder" and not gold.records[g].write):  # a read between swapped writes sees another state
            continue
        got, want = records[pos], gold.records[g]
        if (got.ok, _without(got.result, new_ids)) != (want.ok, _without(want.result, new_ids)):
            return f"call {g} ({want.name}) returned differently than in the gold: the calls depend on each other"
    return None


def _dishonoured(v: Variation, out: Outcome, gold: _Gold) -> str | None:
    """Why the tool does not read a declared equivalent value alike (it answered otherwise than to the gold's), if so."""
    got, want = out.trajectory.tool_calls[v.varied], gold.records[v.varied]
    if (got.ok, got.result) == (want.ok, want.result):
        return None
    return f"{want.name} does not read the declared equivalent value alike: it answered {got.result[:160]!r}"


def _ints(args: Any) -> set[int]:
    """The integers among a call's arguments (nested lists and mappings included)."""
    if isinstance(args, dict):
        return set().union(*(_ints(v) for v in args.values())) if args else set()
    if isinstance(args, list):
        return set().union(*(_ints(v) for v in args)) if args else set()
    return {args} if isinstance(args, int) and not isinstance(args, bool) else set()


def _inserted_ids(changes: ChangeSet | None) -> set[int]:
    """The generated keys of the rows the gold inserted: reordered inserts trade them, as the grader allows."""
    return {c.key[0] for c in (changes.rows.values() if changes else ()) if c.before is None and len(c.key) == 1 and isinstance(c.key[0], int)}


def _without(result: str, ids: set[int]) -> Any:
    """A call's result with the given ids blanked wherever they stand as a JSON integer (the text itself otherwise)."""
    if not ids:
        return result
    try:
        data = json.loads(result)
    except json.JSONDecodeError:
        return result

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return "<new id>" if isinstance(x, int) and not isinstance(x, bool) and x in ids else x

    return walk(data)


async def _play(task: Task, domain: Domain, backend: Backend, calls: Calls) -> Outcome:
    return await play_calls(task, domain, calls, backend=backend, keep_changes=True)


async def _gold(task: Task, domain: Domain, backend: Backend) -> _Gold | str:
    calls = [c.model_dump() for c in task.gold]
    out = await _play(task, domain, backend, calls)
    if out.verdict.system_error or out.verdict.state_reward != 1 or out.trajectory is None:
        return "gold does not pass: " + (out.verdict.system_error or "; ".join(out.verdict.reasons))
    records = out.trajectory.tool_calls
    if out.changes is None:
        return _Gold(calls, records, None, None)
    touched: list[frozenset] = []
    created: list[frozenset] = []
    before: dict = {}
    for k in range(len(calls)):
        if not records[k].write:
            touched.append(frozenset())
            created.append(frozenset())
            continue
        prefix = out if k == len(calls) - 1 else await _play(task, domain, backend, calls[: k + 1])
        if prefix.changes is None:
            return f"the change set after gold call {k} is not available: {prefix.verdict.system_error or 'no changes'}"
        rows = prefix.changes.rows
        touched.append(frozenset(tk for tk in set(rows) | set(before) if rows.get(tk) != before.get(tk)))
        created.append(frozenset(tk for tk in set(rows) - set(before) if rows[tk].before is None))
        before = rows
    return _Gold(calls, records, touched, out.changes, created)


async def audit(task: Task, domain: Domain, backend: Backend, concurrency: int = CONCURRENCY) -> TaskAlternatives:
    """Every variation of one task's gold, played and classified (see the module docstring), `concurrency` at a time."""
    report = TaskAlternatives(task.id)
    gold = await _gold(task, domain, backend)
    if isinstance(gold, str):
        report.problems.append(gold)
        return report
    report.shows_state = gold.changes is not None
    slots = asyncio.Semaphore(concurrency)

    async def bounded(v: Variation) -> Outcome:
        async with slots:
            return await _play(task, domain, backend, v.calls)

    cases = variations(gold, domain)
    for v, out in zip(cases, await asyncio.gather(*(bounded(v) for v in cases)), strict=True):
        verdict = out.verdict
        if verdict.system_error:
            report.problems.append(f"system error on variation {v.description}: {verdict.system_error}")
            continue
        invalid = _validity(v, out, gold, domain)
        dishonoured = _dishonoured(v, out, gold) if not invalid and v.kind == "equivalent" else None
        if dishonoured:
            report.results.append(AltResult(v.kind, v.description, "false_negative", dishonoured, verdict.state_reward))
        elif invalid:
            report.results.append(AltResult(v.kind, v.description, "invalid", invalid, verdict.state_reward))
        elif verdict.state_reward == 1:
            report.results.append(AltResult(v.kind, v.description, "accepted", "passes", 1))
        else:
            report.results.append(AltResult(v.kind, v.description, "false_negative", "; ".join(verdict.reasons), verdict.state_reward))
    return report
