"""Verdicts of ThinkingBox cases from the servers' effects.

The benchmark convention (`validate_database` in every ThinkingBox-Bench test file): an attempt passes iff,
for every server, `result_db_hash == golden_db_hash` — the hash of the final database equals that of a
fresh database on which the server replayed the gold `tool_interactions`. The servers' `diff` (items
`{path, type, result, golden}`) goes into the verdict, tagged with the server, so a person can see why.

Cases that also call `validate_rubrics_yesno` need every yes/no rubric (from the init configuration's
`rubrics_yesno`, carried as `Task.rubrics`) answered "yes" by the judge about the agent's final reply;
without a judge they are *unjudged* (reward None, counted apart), never a pass or a fail. A judge failure
is a system error. Effects that lack the hashes, or whose hashes are empty or malformed, are a system error: the
server is not a benchmark server.
Cases with other test code are run by ThinkingBox's own test worker (`groundstate.worlds.thinkingbox.framework`).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from groundstate.grading.grader import with_rubrics
from groundstate.tasks import Task
from groundstate.types import Trajectory, Verdict, system_error
from groundstate.worlds.thinkingbox.case import TbCase

MAX_DIFF_ITEMS = 200  # per server, in the verdict (and so in every results record); the count is always reported


# A database hash as the benchmark servers write one (a hex or base64 digest): anything else — missing, empty,
# blank, a number, a sentence — cannot be compared meaningfully, and two equal empty strings must not pass.
HASH_PATTERN = re.compile(r"[0-9A-Za-z+/=_:.\-]{1,512}")


def hash_verdict(effects: dict[str, dict[str, Any]]) -> Verdict:
    """The final-state verdict: every server's result hash equals its golden hash.

    No server at all, or a hash that is missing or not a well-formed digest (`HASH_PATTERN`), is a system
    error: there is nothing to compare, which must never read as a pass.
    """
    if not effects:
        return system_error("no server returned effects: there is no final state to check", "infrastructure")
    reasons: list[str] = []
    diff: list[dict[str, Any]] = []
    for server, eff in effects.items():
        missing = [k for k in ("result_db_hash", "golden_db_hash") if not isinstance(eff.get(k), str)]
        if missing:
            return system_error(
                f"server {server!r} returned effects without {' and '.join(missing)}: it does not follow the benchmark's hash convention",
                "infrastructure",
            )
        malformed = [f"{k}={eff[k][:80]!r}" for k in ("result_db_hash", "golden_db_hash") if not HASH_PATTERN.fullmatch(eff[k])]
        if malformed:
            return system_error(
                f"server {server!r} returned malformed effects ({', '.join(malformed)}): a database hash "
                "must be a non-empty digest of at most 512 characters [0-9A-Za-z+/=_:.-]",
                "infrastructure",
            )
        if eff["result_db_hash"] != eff["golden_db_hash"]:
            items = eff.get("diff") if isinstance(eff.get("diff"), list) else []
            shown = "" if len(items) <= MAX_DIFF_ITEMS else f", the first {MAX_DIFF_ITEMS} in the diff"
            reasons.append(
                f"{server}: database hash {eff['result_db_hash'][:12]} differs from the golden hash "
                f"{eff['golden_db_hash'][:12]} ({len(items)} difference(s){shown})"
            )
            diff += [{"server": server, **item} if isinstance(item, dict) else {"server": server, "item": item} for item in items[:MAX_DIFF_ITEMS]]
    state_reward = 0 if reasons else 1
    return Verdict(
        reward=state_reward, reasons=reasons or ["final database hash equals the golden hash on every server"], diff=diff, state_reward=state_reward
    )


async def grade_case(
    task: Task,
    case: TbCase,
    effects: dict[str, dict[str, Any]],
    trajectory: Trajectory,
    judge: Any = None,
    init_results: dict[str, dict[str, Any]] | None = None,
) -> Verdict:
    """The verdict of one attempt of a case, from its servers' effects and (for rubric cases) its final reply."""
    if case.check == "python":
        from groundstate.worlds.thinkingbox.framework import run_test_function

        return await run_test_function(task, case, effects, init_results or {}, trajectory, judge)
    verdict = hash_verdict(effects)
    if judge is None:
        return with_rubrics(task, trajectory, verdict)
    return await asyncio.to_thread(with_rubrics, task, trajectory, verdict, judge)  # the judge's client blocks
