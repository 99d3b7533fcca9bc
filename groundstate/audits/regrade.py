"""Regrading stored attempts against the current task definitions and grader, without calling a model.

Each record whose attempt ran to its end (a trajectory with a finish reason) is played again through `attempt.play`
on a fresh sandbox of the task as it is defined now: the recorded assistant turns (their text and the tool calls that
were executed, in order) and the recorded user messages, both after the environment's initial messages
(`opening_length`: τ²'s greeting is not the agent's), with the user's own calls (τ² telecom's phone) made again where
they were made, so the agent side is exactly what the model did then and the state it reaches is what those calls do
to today's task. The new verdict replaces the old one; the record keeps
its attempt, usage and run identity, takes the task's current fingerprint, and notes what it was (`regraded`).

Reply rubrics are judged again only with a judge. Without one, a rubric task's verdict is carried over when it can
be: the final state passes now and passed then (the reply is the recorded one, so the judge's answer stands).
Otherwise it is unjudged, never a guess. Records that cannot be replayed are kept as they are and counted: no
trajectory or an attempt cut short by a system error (there is no complete agent side to replay), a malformed
trajectory (content that is not text, tool calls that are not a list of mappings, a tool call id that is an object or
a list, fewer assistant messages than agent turns, user call batches that do not add up), a user's own calls recorded
without where they were made (before `Trajectory.user_tool_batches`), or a task that no longer exists. A trajectory that is not one at all (messages that are not mappings, tool
call records of another shape) is refused when the file is read (`records.RecordError`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groundstate.jsontext import json_object, too_deep
from groundstate.records import AttemptRecord
from groundstate.specs import JudgeSpec
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import AgentTurn, Domain, EpisodeLimits, Judge, ToolCallRecord, ToolCallRequest, Trajectory, UserTools, Verdict
from groundstate.worlds.attempt import play, task_fingerprint
from groundstate.worlds.episode import LIMIT_NAMES, NOT_EXECUTED


def opening_length(trajectory: Trajectory) -> int | None:
    """How many of the trajectory's messages are the environment's initial ones (`Environment.initial_messages`: a
    system message, τ²'s greeting or a task's history, the instruction), that no agent or user of the attempt wrote:
    those before the first of the agent's `turns` assistant messages (each agent turn adds exactly one, after them),
    all of them where the agent never acted; None where fewer assistant messages than `turns` are recorded."""
    at = [i for i, m in enumerate(trajectory.messages) if m.get("role") == "assistant"]
    turns = trajectory.turns
    if turns > len(at):
        return None
    return at[len(at) - turns] if turns else len(trajectory.messages)


class ReplayAgent:
    """The recorded assistant turns, in order: text and the executed tool calls; the last one ends the conversation if
    the agent ended it then (`agent_done`). Past the last one, it is done. The assistant messages of the opening
    (`opening_length`: τ²'s greeting, a task's history) are the environment's, not turns of the agent's.

    A call counts as executed unless the tool message that answers it says a limit stopped it (`_not_run`). A call's
    answer is found by position: the k-th tool message after an assistant message answers its k-th call, as the episode
    writes them. Ids are labels, not keys: a server that omits them gets `call_0` in every turn from older groundstate
    versions (`openai_compat.parse_tool_call`), and a match by id would skip every executed `call_0` along with the one a
    limit stopped."""

    def __init__(self, trajectory: Trajectory):
        messages, start = trajectory.messages, opening_length(trajectory) or 0
        self.turns = [_turn(m, _answers(messages, i)) for i, m in enumerate(messages) if i >= start and m.get("role") == "assistant"]
        if self.turns and trajectory.finish_reason == "agent_done":
            self.turns[-1].done = True

    async def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        return self.turns.pop(0) if self.turns else AgentTurn(done=True)


# what the episode writes for a call a limit stopped ("error: tool-call limit reached; call not executed"), whole: a
# result that merely quotes those words (an error naming an argument the model wrote) answers a call that ran
_STOPPED = re.compile(rf"error: (?:{'|'.join(map(re.escape, LIMIT_NAMES.values()))}) reached; {re.escape(NOT_EXECUTED)}")


def _answers(messages: list[dict[str, Any]], at: int) -> list[dict[str, Any]]:
    """The tool messages that answer the calls of the assistant message at `at`: those right after it, one per call."""
    calls = len(messages[at].get("tool_calls") or [])
    found: list[dict[str, Any]] = []
    for m in messages[at + 1 : at + 1 + calls]:
        if m.get("role") != "tool":
            break
        found.append(m)
    return found


def _not_run(answer: dict[str, Any]) -> bool:
    return _STOPPED.fullmatch(str(answer.get("content") or "")) is not None


def _turn(message: dict[str, Any], answers: list[dict[str, Any]]) -> AgentTurn:
    calls = []
    for k, c in enumerate(message.get("tool_calls") or []):
        if k < len(answers) and _not_run(answers[k]):
            continue
        fn = c.get("function") or {}
        raw = fn.get("arguments", "")
        args: Any = json_object(raw) if isinstance(raw, str) else raw
        if isinstance(args, dict) and not too_deep(args):
            calls.append(ToolCallRequest(str(c.get("id", "")), str(fn.get("name", "")), args))
        else:  # the model's malformed call: answered with an error again, as it was
            calls.append(ToolCallRequest(str(c.get("id", "")), str(fn.get("name", "")), str(raw), parse_error="the arguments are not a JSON object"))
    return AgentTurn(text=message.get("content") or None, tool_calls=calls)


class ReplayUser:
    """The recorded user messages after the opening (`opening_length`), in order; then the user ends the conversation.
    Before each, the user's own calls recorded as made while it wrote that message (`Trajectory.user_tool_batches`), in
    their batches, where the world gives the user tools; the calls made before it ended, at its last turn."""

    def __init__(self, trajectory: Trajectory):
        messages, start = trajectory.messages, opening_length(trajectory) or 0
        self.replies = [m.get("content") or "" for m in messages[start:] if m.get("role") == "user"]
        self.batches: dict[int, list[list[ToolCallRequest]]] = {}  # the user's turn (0: its first reply) → its batches
        calls = iter(trajectory.user_tool_calls)
        for b in trajectory.user_tool_batches:
            turn = sum(m.get("role") == "user" for m in messages[start : b.at])
            self.batches.setdefault(turn, []).append([_user_call(next(calls), k) for k in range(b.calls)])
        self.asked = 0

    async def reply(self, conversation: list[dict[str, Any]], tools: UserTools | None = None) -> str | None:
        turn, self.asked = self.asked, self.asked + 1
        for batch in self.batches.get(turn, []):
            if tools is not None:
                await tools.act(batch)
        return self.replies[turn] if turn < len(self.replies) else None


def _user_call(record: ToolCallRecord, k: int) -> ToolCallRequest:
    """A recorded call of the user's as it asks for it again (arguments that were not a JSON object: refused again)."""
    if isinstance(record.arguments, dict):
        return ToolCallRequest(f"user_{k}", record.name, record.arguments)
    return ToolCallRequest(f"user_{k}", record.name, str(record.arguments), parse_error="the arguments are not a JSON object")


@dataclass
class Regrade:
    records: list[AttemptRecord]  # the new file's records, in the old file's order
    replayed: int = 0
    kept: dict[str, int] = field(default_factory=dict)  # why records were not replayed → how many
    flips: dict[str, dict[str, int]] = field(default_factory=dict)  # task id → {"pass→fail": n, ...}

    def flip_count(self) -> int:
        return sum(n for per in self.flips.values() for n in per.values())

    def to_json(self) -> dict[str, Any]:
        return {"records": len(self.records), "replayed": self.replayed, "kept": self.kept, "flips": self.flips, "flipped": self.flip_count()}


def replayable(record: AttemptRecord) -> str | None:
    """Why the record cannot be replayed, or None."""
    traj = record.trajectory
    if traj is None:
        return "no trajectory"
    if not traj.finish_reason:
        return "cut short by a system error"
    if not all(_well_formed(m) for m in traj.messages):
        return "malformed trajectory"  # a results file is input like any other: a broken one is reported, never replayed
    start = opening_length(traj)
    if start is None:
        return "malformed trajectory"  # more agent turns than assistant messages: which are the agent's is unknown
    if traj.user_tool_calls and not traj.user_tool_batches:
        return "user's own calls not placed (recorded before their batches were)"  # where they were made is unknown
    ats = [b.at for b in traj.user_tool_batches]
    if sum(b.calls for b in traj.user_tool_batches) != len(traj.user_tool_calls) or ats != sorted(ats):
        return "malformed trajectory"
    if ats and not start <= ats[0] <= ats[-1] <= len(traj.messages):
        return "malformed trajectory"
    return None


_ID = (str, int, float, type(None))  # a tool call's id as JSON may hold it; an object or a list cannot be matched to its result


def _well_formed(message: dict[str, Any]) -> bool:
    """Whether the replay can read the message: text content, a list of tool calls that are mappings with a mapping
    `function`, and ids (of each call, and a tool message's `tool_call_id`) that are JSON scalars."""
    if not isinstance(message.get("content") or "", str) or not isinstance(message.get("tool_call_id"), _ID):
        return False
    calls = message.get("tool_calls") or []
    return isinstance(calls, list) and all(
        isinstance(c, dict) and isinstance(c.get("function") or {}, dict) and isinstance(c.get("id"), _ID) for c in calls
    )


def _carry_rubric(old: AttemptRecord, new: Verdict) -> Verdict:
    """Without a judge: the old rubric answer, where the final state passes now and passed then."""
    if not new.unjudged or new.state_reward != 1:
        return new
    if old.reward is None or old.verdict is None or old.verdict.state_reward != 1:
        return new
    new.reward, new.unjudged = old.reward, False
    new.reasons.append("reply rubrics: the recorded judgement is kept (the final state passes now as then; --judge asks again)")
    return new


async def regrade_records(
    records: Iterable[AttemptRecord],
    tasks: dict[str, tuple[Task, Domain]],
    backend: Backend,
    judge: Judge | None = None,
    concurrency: int = 32,
    on_record: Any = None,
) -> Regrade:
    """Replay and regrade `records` (see the module docstring); `tasks` maps task ids to today's definitions."""
    records = list(records)
    out: list[AttemptRecord | None] = [None] * len(records)
    result = Regrade(records=[])
    gate = asyncio.Semaphore(concurrency)

    def keep(i: int, why: str) -> None:
        out[i] = records[i]
        result.kept[why] = result.kept.get(why, 0) + 1

    async def one(i: int, r: AttemptRecord) -> None:
        why = replayable(r)
        if why is None and r.task_id not in tasks:
            why = "task no longer defined"
        if why is None and r.domain is not None and r.domain != tasks[r.task_id][1].name:
            why = "task id now in another domain"
        if why is not None:
            keep(i, why)
            return
        task, domain = tasks[r.task_id]
        traj = r.trajectory
        assert traj is not None  # replayable
        async with gate:
            outcome = await play(
                task,
                domain,
                ReplayAgent(traj),
                ReplayUser(traj),
                EpisodeLimits(),
                backend=backend,
                judge=judge,
                blame=True,
            )
        verdict = outcome.verdict if judge is not None else _carry_rubric(r, outcome.verdict)
        replayed = outcome.trajectory
        out[i] = r.model_copy(
            update={
                "reward": verdict.reward,
                "system_error": verdict.system_error,
                "unjudged": verdict.unjudged,
                "verdict": verdict,
                "finish_reason": replayed.finish_reason if replayed is not None else r.finish_reason,
                "task_fingerprint": task_fingerprint(task, domain),
                "regraded": {"reward": r.reward, "outcome": r.outcome, "task_fingerprint": r.task_fingerprint},
            }
        )
        result.replayed += 1
        before, after = r.outcome, out[i].outcome
        if before != after:
            per = result.flips.setdefault(r.task_id, {})
            per[f"{before}→{after}"] = per.get(f"{before}→{after}", 0) + 1
        if on_record is not None:
            on_record()

    await asyncio.gather(*(one(i, r) for i, r in enumerate(records)))
    result.records = [r for r in out if r is not None]
    return result


@dataclass(frozen=True)
class RegradeJob:
    """What `groundstate regrade` asks of `regrade_file`; these defaults are the command's."""

    out: Path  # the new results file (never the one read)
    concurrency: int = 8  # attempts replayed at once


class RegradeRefused(ValueError):
    """Nothing was regraded or written: a judge that cannot answer, said before any replay."""


def regrade_file(
    records: list[AttemptRecord],
    tasks: dict[str, tuple[Task, Domain]],
    backend: Backend,
    job: RegradeJob,
    judge: JudgeSpec | None = None,
    on_record: Any = None,
) -> Regrade:
    """`regrade_records` at the job's concurrency, the new records written to `job.out` in one step (an interrupted
    regrade leaves no half-written file). A judge endpoint gets one request first: a dead judge is `RegradeRefused`
    in one line, not a system error per attempt."""
    from groundstate.agents.openai_compat import probe_endpoint
    from groundstate.grading.judge import make_judge
    from groundstate.records import ResultsWriter

    if judge is not None and judge.endpoint is not None:
        found = probe_endpoint(judge.endpoint)
        if found.problem:
            raise RegradeRefused(f"--judge {judge}: {found.problem}; nothing was regraded or written.")
    result = asyncio.run(regrade_records(records, tasks, backend, make_judge(judge), job.concurrency, on_record=on_record))
    job.out.parent.mkdir(parents=True, exist_ok=True)
    with ResultsWriter(job.out) as writer:
        writer.rewrite(result.records)
    return result
