"""Blame for a failed attempt: the first tool call after which it could no longer reach the golden state.

The attempt's executed calls are replayed in order on a fresh sandbox of the task's template (cheap at groundstate's
reset cost), and after each successful write the change set so far is compared with the golden one, column by
column: a row the golden state does not touch, a row deleted or created where the golden state keeps or lacks it,
or a column set to a value the golden state does not give it, is a divergence, and the call that made it is to
blame. Masked (volatile) columns and free text compare as the grader compares them.

When no write diverges, the attempt failed by what it left undone: `never_acted` (no write succeeded) or
`stopped_early` (its writes were right, the golden state needs more), naming the first write call that failed, if
any (the write that did not happen: a wrong id, a refused argument). A golden change that a later gold call
overwrites (an intermediate value) could be blamed wrongly; the bundled suite's gold writes each column once.
"""

from __future__ import annotations

from typing import Any

from groundstate.grading.grader import Grader
from groundstate.state.base import Template
from groundstate.state.changes import ChangeSet, RowChange, _sort_key
from groundstate.tasks import Task
from groundstate.tools.mutate import Injected
from groundstate.types import Blame, ToolCallRecord

KINDS = ("diverged", "stopped_early", "never_acted")


def names_injected(b: Blame, injected: list[Injected]) -> bool:
    """Whether blame points at one of the mistakes the noisy agent injected: the changed or duplicated call itself
    (diverging, or refused by its tool), or, where a call was dropped (no call is left in the trajectory to name), that
    the attempt stopped early or never acted."""
    if b.call is not None and b.call in {m.at for m in injected if m.kind != "drop"}:
        return True
    return any(m.kind == "drop" for m in injected) and b.kind in ("stopped_early", "never_acted")


def wrong_rows(golden: ChangeSet, now: ChangeSet) -> list[dict[str, Any]]:
    """The rows of `now` that no continuation could turn into the golden state's, without undoing them."""
    out = []
    for tk, change in sorted(now.rows.items(), key=lambda kv: (kv[0][0], _sort_key(kv[0][1]))):  # one order on every backend
        want = golden.rows.get(tk)
        table, key = tk
        problem = _problem(change, want)
        if problem:
            out.append({"table": table, "key": list(key), "problem": problem, "got": change.after, "golden": want.after if want else change.before})
    return out


def _problem(change: RowChange, want: RowChange | None) -> str | None:
    if want is None:
        return f"{change.kind} of a row the golden state leaves alone"
    if change.after is None or want.after is None:
        return None if change.after == want.after else f"{change.kind} where the golden state has {want.kind}"
    before = change.before or {}
    moved = [c for c, v in change.after.items() if c not in before or before[c] != v]  # the columns this attempt changed
    bad = [c for c in moved if want.after.get(c) != change.after[c]]
    return f"{', '.join(bad)} set to a value the golden state does not have" if bad else None


def blame(task: Task, template: Template, grader: Grader, calls: list[ToolCallRecord]) -> Blame:
    """Where an attempt that failed went wrong. `calls` are its executed tool calls as its trajectory records them,
    replayed in order (a call whose arguments are not a JSON object changed nothing); the template is the one the attempt started from."""
    backend = template.owner
    if backend is None:
        raise ValueError("the template has no backend to replay the attempt on")
    tools = template.domain.tools
    wrote, missed = False, None
    with backend.open(template) as sandbox:
        golden = grader.golden(task, template).masked(sandbox.normaliser)
        for i, call in enumerate(calls):
            name = call.name
            spec = tools.specs.get(name)
            result = tools.call(sandbox.connection, name, call.arguments) if isinstance(call.arguments, dict) else None
            if result is None or not result.ok:  # garbled, unknown or refused: it changed nothing
                if missed is None and spec is not None and spec.write:
                    missed = i
                continue
            if not result.write:
                continue
            wrote = True
            wrong = wrong_rows(golden, sandbox.changes().masked(sandbox.normaliser))
            if wrong:
                return Blame(kind="diverged", call=i, tool=name, rows=wrong[:5])
    kind = "stopped_early" if wrote else "never_acted"
    return Blame(kind=kind, call=missed, tool=calls[missed].name if missed is not None else None)
