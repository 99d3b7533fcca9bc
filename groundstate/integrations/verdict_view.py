"""A verdict as a client of a served episode may see it by default: what failed, never the answer.

A server that lets a client reset to the same task again (OpenEnv, NeMo Gym) must not hand it the golden rows, a
check's SQL or expected rows, a rubric's text or a system error's detail: with them, the next attempt passes without
solving the task. `verdict_summary` keeps the reward, the counts and the reasons by check name.
"""

from __future__ import annotations

import re
from typing import Any

from groundstate.types import Verdict

SYSTEM_ERROR_SHOWN = "the server failed, not the agent (its log has the detail)"

# The grader's reasons (`grading.Grader.grade`, `grading.with_rubrics`, `judge.Judge.apply`) as a client may see
# them: each names what failed and nothing of the answer. A reason of no form here (a user's words, a traceback)
# is left out.
_REASON_NAMES = (
    (re.compile(r"final state (matches|differs from) the golden state"), lambda m: f"final state {m[1]} the golden state"),
    (re.compile(r"check (\d+) failed: "), lambda m: f"check {m[1]} failed"),
    (re.compile(r"rubric (\d+) .*: (yes|no)$", re.S), lambda m: f"rubric {m[1]}: {m[2]}"),
    (re.compile(r"\d+ reply rubric\(s\) (not judged: the final state failed|unjudged: no judge configured)"), lambda m: m[0]),
)


def verdict_summary(verdict: Verdict) -> dict[str, Any]:
    """The verdict as the `done` observation gives it by default: reward, state reward, whether unjudged, the
    agent's own change counts and the reasons by check name ("final state differs from the golden state",
    "check 1 failed", "rubric 0: no"). Never the golden rows, a check's SQL or expected rows, a rubric's text,
    nor a system error's detail (`system_error` is then `SYSTEM_ERROR_SHOWN`; the server logs the detail): what
    would let a client that resets to the same task again pass it without solving it."""
    reasons = []
    if verdict.system_error is None:
        for reason in verdict.reasons:
            for pattern, name in _REASON_NAMES:
                if m := pattern.match(reason):
                    reasons.append(name(m))
                    break
    return {
        "reward": verdict.reward,
        "state_reward": verdict.state_reward,
        "reasons": reasons,
        "system_error": None if verdict.system_error is None else SYSTEM_ERROR_SHOWN,
        "unjudged": verdict.unjudged,
        "changes": verdict.changes,
    }
