"""Run-to-run agreement: how often two runs of one agent give an attempt the same verdict, and what made them differ.

Two runs of the same agent (same `run.agent` and sampling: another seed, a rerun, another user simulator or judge)
are matched key by key, (task, attempt). Agreement is the share of shared keys with the same outcome, pass or fail
(keys that are a system error or unjudged in either run are counted apart); per task, the share of its attempts that
agree and whether its c/n is the same. Cohen's kappa corrects the overall share for the agreement two independent
runs with these pass rates would reach by chance (1: every verdict repeats; 0: no more than chance).

Each disagreement is attributed to the first party that made the two attempts differ:
- judge: the final-state verdict (`verdict.state_reward`) is the same, the reward is not (a rubric task's judge,
  or the reply it judged);
- user simulator: walking both conversations turn by turn (user messages, agent messages with their tool calls,
  then who ended it), the first difference is the user's;
- agent sampling: the first difference is the agent's (what it said, which calls it made, or stopping);
- unknown: a record holds no trajectory to compare (older records, other tools), or the conversations are the
  same turn by turn (then the difference lies in tool results or grading, which no party here chose).
Runs of different agents or sampling are not compared: their differences are the agents', which `compare`'s lift
measures, not run-to-run noise.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from groundstate.records import AttemptRecord, latest_per_key

CAUSES = ("agent", "user", "judge", "unknown")
CAUSE_NAMES = {"agent": "agent sampling", "user": "user simulator", "judge": "judge", "unknown": "unknown"}


def run_agreement(base: list[AttemptRecord], cand: list[AttemptRecord]) -> dict[str, Any]:
    """Agreement of two runs' verdicts, overall and per task, with each disagreement attributed (`CAUSES`); for runs of
    different agents or sampling, only `computed: False` and the `note` saying why."""
    ident = {name: _agent_of(recs) for name, recs in (("base", base), ("candidate", cand))}
    (agent_b, sampling_b), (agent_c, sampling_c) = ident["base"], ident["candidate"]
    if agent_b is not None and agent_c is not None and agent_b != agent_c:
        return {"computed": False, "note": f"different agents: agreement not computed ({agent_b} vs {agent_c})"}
    if sampling_b is not None and sampling_c is not None and sampling_b != sampling_c:
        return {"computed": False, "note": f"different sampling: agreement not computed ({sampling_b} vs {sampling_c})"}
    notes = [
        f"the {name} run's records do not name their {what}: assumed the same"
        for name, (agent, sampling) in ident.items()
        for what, value in (("agent", agent), ("sampling", sampling))
        if value is None
    ]
    runs = [r.run for r in (base[:1] + cand[:1]) if r.run is not None]
    differ = runs[0].differences(runs[1]) if len(runs) == 2 else None  # None: the records do not say

    kb, kc = latest_per_key(base), latest_per_key(cand)
    shared = sorted(set(kb) & set(kc))
    judged = [key for key in shared if kb[key].outcome in ("pass", "fail") and kc[key].outcome in ("pass", "fail")]
    causes: Counter[str] = Counter()
    disagreements = []
    for key in judged:
        a, b = kb[key], kc[key]
        if a.outcome != b.outcome:
            cause, why = attribute(a, b)
            causes[cause] += 1
            disagreements.append({"task_id": key[0], "attempt": key[1], "base": a.outcome, "candidate": b.outcome, "cause": cause, "why": why})
    agree = len(judged) - len(disagreements)
    kappa, chance = cohen_kappa([kb[key].outcome == "pass" for key in judged], [kc[key].outcome == "pass" for key in judged])
    per_task = _per_task(judged, kb, kc, disagreements)
    if causes["unknown"]:
        notes.append(f"{causes['unknown']} disagreements could not be attributed (cause `unknown`: see each one's `why`)")
    return {
        "computed": True,
        "note": "; ".join(notes) or None,
        "runs_differ_in": differ,
        "keys": len(judged),
        "agree": agree,
        "agreement": agree / len(judged) if judged else None,
        "kappa": kappa,
        "chance_agreement": chance,
        "kappa_note": None if kappa is not None or not judged else "undefined: both runs gave every compared attempt the same verdict",
        "not_compared": {
            "in_one_run_only": len(set(kb) ^ set(kc)),
            "system_error_or_unjudged": len(shared) - len(judged),
        },
        "disagreements_by_cause": {c: causes[c] for c in CAUSES},
        "tasks": len(per_task),
        "tasks_same_c_n": sum(t["same_c_n"] for t in per_task),
        "per_task": per_task,
        "disagreements": disagreements,
    }


def describe_agreement(a: dict[str, Any]) -> str:
    """`run_agreement`'s result in one line a person reads (the console and the report say the same)."""
    if not a["computed"]:
        return a["note"]
    if not a["keys"]:
        return "no (task, attempt) key has a pass or fail in both runs: nothing to compare" + (f" ({a['note']})" if a["note"] else "")
    kappa = f"Cohen's kappa {a['kappa']:.2f}" if a["kappa"] is not None else f"Cohen's kappa {a['kappa_note']}"
    causes = ", ".join(f"{CAUSE_NAMES[c]} {n}" for c, n in a["disagreements_by_cause"].items())
    differ = (
        ""
        if a["runs_differ_in"] is None
        else f"; the runs differ in {', '.join(a['runs_differ_in'])}"
        if a["runs_differ_in"]
        else "; the runs' identities are the same (a rerun)"
    )
    line = (
        f"{a['agree']} of {a['keys']} attempts ({a['agreement']:.1%}) got the same verdict ({kappa}); "
        f"{a['tasks_same_c_n']} of {a['tasks']} tasks the same c/n; {a['keys'] - a['agree']} disagreements: {causes}{differ}"
    )
    return line + (f" ({a['note']})" if a["note"] else "")


def _agent_of(records: list[AttemptRecord]) -> tuple[str | None, str | None]:
    """(agent spec, sampling as JSON) of a run's records; None for what they do not say (records without run identity)."""
    r = next(iter(records), None)
    if r is None:
        return None, None
    if r.run is not None:
        return r.run.agent, json.dumps(r.run.sampling, sort_keys=True)
    return r.agent, None


def _per_task(judged: list[tuple[str, int]], kb: dict, kc: dict, disagreements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_task: dict[str, list[tuple[str, int]]] = {}
    for key in judged:
        by_task.setdefault(key[0], []).append(key)
    causes: dict[str, Counter[str]] = {}
    for d in disagreements:
        causes.setdefault(d["task_id"], Counter())[d["cause"]] += 1
    cn_b, cn_c = _c_of_n(kb), _c_of_n(kc)
    out = []
    for tid, keys in sorted(by_task.items()):
        cb, cc = cn_b[tid], cn_c[tid]
        agree = sum(kb[key].outcome == kc[key].outcome for key in keys)
        out.append(
            {
                "task_id": tid,
                "attempts": len(keys),
                "agree": agree,
                "agreement": agree / len(keys),
                "base": f"{cb[0]}/{cb[1]}",
                "candidate": f"{cc[0]}/{cc[1]}",
                "same_c_n": cb == cc,
                "disagreements_by_cause": dict(causes.get(tid, {})),
            }
        )
    return out


def _c_of_n(records: dict[tuple[str, int], AttemptRecord]) -> dict[str, tuple[int, int]]:
    """Per task of one run, (passes, clean attempts): its c/n."""
    c: Counter[str] = Counter()
    n: Counter[str] = Counter()
    for (tid, _), r in records.items():
        if r.outcome in ("pass", "fail"):
            n[tid] += 1
            c[tid] += r.outcome == "pass"
    return {tid: (c[tid], n[tid]) for tid in n}


def cohen_kappa(a: list[bool], b: list[bool]) -> tuple[float | None, float | None]:
    """(kappa, chance agreement) of two raters' pass/fail over the same items; kappa is None when chance agreement is 1
    (both gave every item one verdict, so there is nothing to correct)."""
    n = len(a)
    if n == 0:
        return None, None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pa, pb = sum(a) / n, sum(b) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    if chance >= 1:
        return None, chance
    return (observed - chance) / (1 - chance), chance


def attribute(a: AttemptRecord, b: AttemptRecord) -> tuple[str, str]:
    """Why two attempts of one key got different verdicts: (cause, a sentence saying how it was told), cause in `CAUSES`."""
    sa, sb = (_state_reward(r) for r in (a, b))
    if sa is not None and sa == sb:
        return "judge", f"same final-state verdict (state reward {sa}), different reward: the rubric judge decided differently"
    ca, cb = _conversation(a), _conversation(b)
    if ca is None or cb is None:
        missing = " and ".join(name for name, c in (("base", ca), ("candidate", cb)) if c is None)
        return "unknown", f"the {missing} record holds no trajectory to compare"
    for i, (x, y) in enumerate(zip(ca, cb, strict=False)):  # up to the shorter one: a longer one is told below
        if x != y:
            who = "user" if x[0] == y[0] == "user" else "agent"
            return who, f"the conversations first differ at turn {i}, the {CAUSE_NAMES[who]}'s"
    if len(ca) != len(cb):  # one is a prefix of the other: only a record without a finish reason ends without saying who
        return "unknown", f"one conversation stops after turn {min(len(ca), len(cb)) - 1} without a recorded finish reason"
    return "unknown", "the conversations are the same turn by turn: the difference is in tool results or grading"


def _state_reward(r: AttemptRecord) -> int | None:
    return r.verdict.state_reward if r.verdict is not None else None


def _conversation(r: AttemptRecord) -> list[tuple[Any, ...]] | None:
    """The attempt's turns as comparable values: ("user", text), ("agent", text, calls) with each call as (name,
    canonical arguments) and no call ids (an endpoint makes new ones each time), then ("user"|"agent", "ended", reason)
    for who ended it (`user_done` is the user's; stopping or a limit is the agent's). None without a trajectory."""
    t = r.trajectory
    if t is None:
        return None
    turns: list[tuple[Any, ...]] = []
    for m in t.messages:
        if m.get("role") == "user":
            turns.append(("user", _text(m.get("content"))))
        elif m.get("role") == "assistant":
            turns.append(("agent", _text(m.get("content")), tuple(_call(c) for c in _list(m.get("tool_calls")))))
    reason = t.finish_reason or r.finish_reason
    if reason:
        turns.append(("user" if reason == "user_done" else "agent", "ended", str(reason)))
    return turns


def _text(content: Any) -> str:
    return content.strip() if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str)


def _list(value: Any) -> Iterable[Any]:
    return value if isinstance(value, list) else ()


def _call(call: Any) -> tuple[str, str]:
    f = call.get("function") if isinstance(call, dict) else None
    if not isinstance(f, dict):
        return ("?", json.dumps(call, sort_keys=True, default=str))
    args = f.get("arguments")
    if isinstance(args, str):
        with contextlib.suppress(ValueError):  # else compared as the text the model wrote
            args = json.loads(args)
    return (str(f.get("name")), json.dumps(args, sort_keys=True, default=str))
