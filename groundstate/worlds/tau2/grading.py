"""The verdict of a τ² attempt: τ²'s own evaluation of the task, plus our keyed diff of the two databases.

τ²'s `evaluate_simulation` (evaluation type ALL) multiplies the components of the task's reward basis:

- `DB` and `ENV_ASSERTION`: the agent's (and user's) database hash equals the gold state's (`replay_gold`), and
  every environment assertion of the task holds, on the attempt's final state (one that raises, because the state lacks
  what it reads, fails: τ²'s evaluator raises there, and its harness scores the run 0 with `skip_failed_samples`). τ²'s evaluator replays the recorded
  calls on a fresh environment to get that state (checking that each call returns what was recorded); the attempt's
  own environment is that state already, so it is read directly;
- `ACTION`: every expected action appears among the agent's calls (τ²'s `ActionEvaluator`, on the conversation);
- `COMMUNICATE`: every `communicate_info` item appears in an agent message (τ²'s `CommunicateEvaluator`);
- `NL_ASSERTION`: the task's rubrics, judged only when the rest passed, unjudged without a judge
  (`grading.with_rubrics`, the one rule of every rubric task).

An attempt that did not end by the agent's or the user's stop (a limit: turns, tool calls, time, tokens, a flooded
reply) scores 0, as τ² scores a premature termination; so does one that τ²'s own run would have cut short, by its
limits on steps (messages sent, `DEFAULT_MAX_STEPS`) and failed tool calls (`DEFAULT_MAX_ERRORS`), counted as its
orchestrator counts them (`conversation.tau2_cutoff`). The conversation τ²'s evaluators read is rebuilt from the
trajectory and the environment's call log (`conversation.tau2_messages`); `tests/integrations/tau2_env` checks every verdict
against `evaluate_simulation` itself on the same conversation, and against τ²'s own orchestrator.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from groundstate.grading.grader import with_rubrics
from groundstate.tasks import Task
from groundstate.types import Blame, Judge, ToolCallRecord, Trajectory, Verdict, system_error
from groundstate.worlds.tau2.conversation import ConversationMismatch, history, tau2_cutoff, tau2_messages

STOPS = ("agent_done", "user_done")  # τ²'s AGENT_STOP and USER_STOP: the terminations τ² evaluates
MAX_DIFF_ITEMS = 200


@dataclass
class GoldState:
    """What τ²'s evaluator compares an attempt's databases with: the databases after the task's gold actions, replayed on
    a fresh environment of the task as τ²'s `EnvironmentEvaluator` replays them (their hashes, and the agent database)."""

    db_hash: str | None
    user_db_hash: str | None
    db: dict[str, Any]
    errors: list[str] = field(default_factory=list)  # gold actions τ² itself could not run (it logs and goes on)


def start(env: Any, t2: Any) -> None:
    """`env` (a fresh τ² environment) set to the task's initial state as τ²'s orchestrator sets it: data, actions and
    history, then the sides synced."""
    init = t2.initial_state
    env.set_state(
        initialization_data=init.initialization_data if init else None,
        initialization_actions=init.initialization_actions if init else None,
        message_history=history(t2),
    )
    env.sync_tools()


def replay_gold(env: Any, t2: Any) -> GoldState:
    """The gold state as τ²'s `EnvironmentEvaluator` computes it: the task's initial state, then its gold actions (an
    action τ² cannot run is skipped, as τ² skips it after a warning)."""
    init = t2.initial_state
    env.set_state(
        initialization_data=init.initialization_data if init else None,
        initialization_actions=init.initialization_actions if init else None,
        message_history=(init.message_history or []) if init else [],
    )
    errors = []
    actions = t2.evaluation_criteria.actions if t2.evaluation_criteria else None
    for action in actions or []:
        try:
            env.make_tool_call(tool_name=action.name, requestor=action.requestor, **action.arguments)
        except Exception as e:  # noqa: BLE001 - τ²'s own rule: a gold action that fails is logged and skipped
            errors.append(f"{action.name}: {e}")
    return GoldState(env.get_db_hash(), env.get_user_db_hash(), env.tools.db.model_dump(mode="json"), errors)


@dataclass
class Attempt:
    """What grading reads of one attempt: its task (ours and τ²'s), τ²'s live environment, the calls it executed
    (`Tau2Environment.log`), where the trajectory's own messages start, and the task's gold state (computed once, by
    its domain)."""

    task: Task
    tau2_task: Any
    env: Any
    log: list[tuple[Any, Any]]
    start: int
    gold: Callable[[], GoldState]


def keyed_diff(result: Any, golden: Any, path: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Where two τ² databases differ, by table, record key and field: `{table, key, field, result, golden}` (a record
    only one side has: field None and the other side None)."""
    if isinstance(result, dict) and isinstance(golden, dict):
        out = []
        for k in sorted(set(result) | set(golden), key=str):
            if k not in golden or k not in result:
                out.append(_item(path + (str(k),), result.get(k), golden.get(k)))
            elif result[k] != golden[k]:
                out += keyed_diff(result[k], golden[k], path + (str(k),))
        return out
    return [_item(path, result, golden)] if result != golden else []


def _item(path: tuple[str, ...], result: Any, golden: Any) -> dict[str, Any]:
    table = path[0] if path else None
    key = path[1] if len(path) > 1 else None
    return {"table": table, "key": key, "field": ".".join(path[2:]) or None, "result": result, "golden": golden}


def evaluate(env: Attempt, trajectory: Trajectory) -> Verdict:
    """τ²'s verdict on the attempt's final state and conversation, before rubrics (see the module docstring)."""
    from tau2.data_model.tasks import RewardType

    t2 = env.tau2_task
    if trajectory.finish_reason not in STOPS:
        reason = f"ended by {trajectory.finish_reason or 'an error'}, not by the agent or the user: τ² scores a premature termination 0"
        return Verdict(reward=0, state_reward=0, reasons=[reason])
    crit = t2.evaluation_criteria
    if crit is None:
        return Verdict(reward=1, state_reward=1, reasons=["τ² task has no evaluation criteria"])
    messages = tau2_messages(t2, env.task, env.log, env.start, trajectory)
    past = len(history(t2)) or 1  # τ²'s steps start after the history, or after the greeting it opens with
    cut = tau2_cutoff(messages, past)
    if cut is not None:
        return Verdict(reward=0, state_reward=0, reasons=[f"{cut}: τ² scores a premature termination 0"])
    basis = set(crit.reward_basis)
    reasons, diff = _state_failures(env, basis), []
    if reasons and reasons[0].startswith("DB:"):
        diff = keyed_diff(env.env.tools.db.model_dump(mode="json"), env.gold().db)
        shown = "" if len(diff) <= MAX_DIFF_ITEMS else f", the first {MAX_DIFF_ITEMS} in the diff"
        reasons[0] = f"DB: the database differs from the gold state in {len(diff)} field(s){shown}"
        diff = diff[:MAX_DIFF_ITEMS]
    if RewardType.ACTION in basis:
        reasons += _action_failures(t2, messages)
    if RewardType.COMMUNICATE in basis:
        reasons += _communicate_failures(t2, messages)
    if reasons:
        return Verdict(reward=0, state_reward=0, reasons=reasons, diff=diff)
    return Verdict(reward=1, state_reward=1, reasons=[f"τ² reward 1 on its basis {', '.join(sorted(b.value for b in basis))}"])


def _state_failures(env: Attempt, basis: set) -> list[str]:
    """τ²'s environment component: the database hashes against the gold state's (`DB`), the task's assertions on the
    final state (`ENV_ASSERTION`); nothing to check where the task names neither actions nor assertions."""
    from tau2.data_model.tasks import RewardType

    crit = env.tau2_task.evaluation_criteria
    if not basis & {RewardType.DB, RewardType.ENV_ASSERTION} or (crit.actions is None and crit.env_assertions is None):
        return []
    gold, live, out = env.gold(), env.env, []
    if RewardType.DB in basis and (live.get_db_hash(), live.get_user_db_hash()) != (gold.db_hash, gold.user_db_hash):
        out.append("DB: the database differs from the gold state")
    if RewardType.ENV_ASSERTION in basis:
        for a in crit.env_assertions or []:
            call = f"{a.func_name}({json.dumps(a.arguments, default=str)})"
            try:
                held = live.run_env_assertion(a, raise_assertion_error=False)
            except Exception as e:  # noqa: BLE001 - the state lacks what the assertion reads: τ²'s harness scores it 0
                out.append(f"ENV_ASSERTION: {call} raised {type(e).__name__}: {e}")
                continue
            if not held:
                out.append(f"ENV_ASSERTION: {call} is not {a.assert_value}")
    return out


def _action_failures(t2: Any, messages: list[Any]) -> list[str]:
    from tau2.evaluator.evaluator_action import ActionEvaluator

    info = ActionEvaluator.calculate_reward(task=t2, full_trajectory=messages)
    return [
        f"ACTION: expected call {c.action.name}({json.dumps(c.action.arguments, default=str)}) was not made"
        for c in info.action_checks or []
        if not c.action_match
    ]


def _communicate_failures(t2: Any, messages: list[Any]) -> list[str]:
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator

    info = CommunicateEvaluator.calculate_reward(task=t2, full_trajectory=messages)
    return [f"COMMUNICATE: {c.info!r} was not told to the user" for c in info.communicate_checks or [] if not c.met]


async def grade_attempt(env: Attempt, trajectory: Trajectory | None, judge: Judge | None = None) -> Verdict:
    """The attempt's verdict: `evaluate` (off the event loop: hashing a τ² database takes tens of milliseconds), then the
    task's rubrics. A harness disagreement (`ConversationMismatch`) is a grader system error."""
    if trajectory is None:
        return system_error("a τ² attempt is graded on its conversation: no trajectory was given", "grader")
    verdict = await asyncio.to_thread(tau2_verdict, env, trajectory)
    return await rubrics(env.task, trajectory, verdict, judge)


def tau2_verdict(env: Attempt, trajectory: Trajectory) -> Verdict:
    """`evaluate`, with a harness disagreement (`ConversationMismatch`) as a grader system error: the verdict before
    rubrics (what τ²'s own interpreter computes when τ² runs in one: `worlds.tau2.remote`)."""
    try:
        return evaluate(env, trajectory)
    except ConversationMismatch as e:
        return system_error(f"τ² conversation could not be rebuilt: {e}", "grader")


async def rubrics(task: Task, trajectory: Trajectory, verdict: Verdict, judge: Judge | None) -> Verdict:
    """The task's rubrics on τ²'s verdict (`grading.with_rubrics`: judged only when the rest passed)."""
    if judge is None:
        return with_rubrics(task, trajectory, verdict)
    return await asyncio.to_thread(with_rubrics, task, trajectory, verdict, judge)


def blame(env: Any, t2: Any, gold: GoldState, calls: list[ToolCallRecord], writes: dict[str, bool]) -> Blame:
    """Where a failed τ² attempt went wrong, as `grading.blame` finds it for SQL worlds: the agent's executed calls
    replayed in order on `env` (a fresh environment of the domain, set to the task's initial state here), and after
    each write τ² accepted, the fields it changed compared with the gold state's: a field set to a value the gold state
    does not have (a record the gold state lacks, or lacks no more) is a divergence, and that call is to blame. Without
    one: `never_acted` or `stopped_early`, naming the first write τ² refused. `unavailable` where τ² does not compare
    this task's database (telecom: assertions and actions), or where it equals the gold state (the reasons name the
    action or communication that failed)."""
    from tau2.data_model.message import ToolCall
    from tau2.data_model.tasks import RewardType

    crit = t2.evaluation_criteria
    if crit is None or RewardType.DB not in crit.reward_basis:
        return Blame(kind="unavailable", reason="τ² does not compare this task's database (its checks are assertions and actions)")
    start(env, t2)
    before = env.tools.db.model_dump(mode="json")
    wrote, missed = False, None
    for i, call in enumerate(calls):
        if not isinstance(call.arguments, dict):
            continue  # never reached τ²: it changed nothing
        answer = env.get_response(ToolCall(id=f"blame_{i}", name=call.name, arguments=call.arguments, requestor="assistant"))
        env.sync_tools()
        if answer.error:
            if missed is None and writes.get(call.name, False):
                missed = i
            continue
        if not writes.get(call.name, False):
            continue
        wrote = True
        now = env.tools.db.model_dump(mode="json")
        wrong = {(d["table"], d["key"], d["field"]): d for d in keyed_diff(now, gold.db)}
        moved = [wrong[k] for d in keyed_diff(now, before) if (k := (d["table"], d["key"], d["field"])) in wrong]
        if moved:
            return Blame(kind="diverged", call=i, tool=call.name, rows=moved[:5])
        before = now
    if wrote and env.get_db_hash() == gold.db_hash:
        return Blame(kind="unavailable", reason="the database equals the gold state: the failure is another of τ²'s checks (its reasons)")
    kind = "stopped_early" if wrote else "never_acted"
    return Blame(kind=kind, call=missed, tool=calls[missed].name if missed is not None else None)
