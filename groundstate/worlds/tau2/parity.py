"""Parity with τ²'s own harness: one list of calls played through groundstate and through τ²'s orchestrator and evaluator.

`variants` gives, for one task, gold, no-op and single-call perturbations of gold (lint's mutants: a write call dropped,
duplicated, one argument changed; and two calls swapped; where the user has calls of its own, telecom's, the user's
last call dropped). `ours` plays the calls with groundstate's scripted agent on
the task's `Tau2Environment` and returns the verdict and the conversation as τ² would have recorded it; `theirs` plays
the same calls with a scripted agent inside τ²'s `Orchestrator` on τ²'s environment (a copy of one τ²'s constructor built,
as ours are: the verdict's standard is independent of that copy, since `evaluate_simulation` rebuilds both the
replayed and the gold environment with τ²'s own constructor) (its user opens with the task's
opening and stops at the agent's first text, as τ²'s agents never stop by themselves, having first made its own calls
in one message where the variant gives it some, as groundstate's scripted user does) and returns `evaluate_simulation`'s
reward (evaluation type ALL, τ²'s default) and τ²'s own messages. `tests/integrations/tau2_env` holds every verdict to
it, and `benchmarks/tau2_bench.py` prints the whole sweep with the speed of both.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

from groundstate.agents.scripted import NOOP_TEXT, ScriptedAgent, ScriptedUser
from groundstate.tasks import Task
from groundstate.tools.mutate import mutants
from groundstate.worlds.episode import run_episode
from groundstate.worlds.tau2.domain import Tau2Domain

Call = dict[str, Any]


PERTURBATIONS = ("drop", "duplicate", "change", "swap", "user_drop")


class Variant(NamedTuple):
    calls: list[Call]
    text: str  # the agent's last message
    user_calls: list[Call] = []  # the user's own calls, made in its first reply after the agent's text


def variants(task: Task, domain: Tau2Domain) -> dict[str, Variant]:
    """gold (the gold reply last, the user's gold calls after it), noop (scripted:noop: no call, its own words, and no
    call of the user's: nothing was asked of it), and with gold's reply and the user's gold calls the first drop,
    duplicate and change mutant and the first swap of gold, where gold has them; where the user has gold calls,
    gold with the user's last call dropped."""
    gold = [c.model_dump() for c in task.gold]
    mine = [c.model_dump() for c in task.user.actions]
    reply = task.gold_reply or "Done."
    out = {"gold": Variant(gold, reply, mine), "noop": Variant([], NOOP_TEXT)}
    for m in mutants(gold, domain.tools):
        out.setdefault(m.kind, Variant(m.calls, reply, mine))
    if len(gold) >= 2 and gold[0] != gold[1]:
        out["swap"] = Variant([gold[1], gold[0], *gold[2:]], reply, mine)
    if mine:
        out["user_drop"] = Variant(gold, reply, mine[:-1])
    return out


async def ours(task: Task, domain: Tau2Domain, variant: Variant) -> tuple[Any, list[Any]]:
    """(verdict, τ² messages) of the variant played through groundstate."""
    env = await domain.open_environment(task, None)  # type: ignore[arg-type]
    try:
        agent = ScriptedAgent(variant.calls, final_text=variant.text, hand_over=bool(variant.user_calls))
        traj = await run_episode(env, agent, ScriptedUser([], variant.user_calls))
        verdict = await env.grade(traj)
        return verdict, env.conversation(traj)
    finally:
        await env.close()


def theirs(task: Task, domain: Tau2Domain, variant: Variant) -> tuple[float, list[Any]]:
    """(reward, messages) of the same variant played by τ²'s own orchestrator and scored by τ²'s own evaluator."""
    from tau2.agent.base import LocalAgent
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.user.base import BaseUser, UserState

    t2 = domain.tau2_task(task)
    calls = variant.calls

    class Agent(LocalAgent):
        def get_init_state(self, message_history=None):
            return {"next": 0}

        def generate_next_message(self, message, state):
            i = state["next"]
            if i < len(calls):
                state["next"] = i + 1
                call = ToolCall(id=f"gs_{i + 1}", name=calls[i]["tool"], arguments=copy.deepcopy(calls[i]["args"]))
                return AssistantMessage(role="assistant", tool_calls=[call]), state
            return AssistantMessage(role="assistant", content=variant.text), state  # τ²'s user ends the run

        def set_seed(self, seed):
            pass

    class User(BaseUser):
        def get_init_state(self, message_history=None):
            return UserState(messages=[], system_messages=[])

        def generate_next_message(self, message, state):
            first = not state.messages
            state.messages.append(message)
            if first:
                return UserMessage(role="user", content=task.instruction), state
            if variant.user_calls and message.role == "assistant":  # its own calls, in one message, then the stop
                made = [
                    ToolCall(id=f"user_1_{i + 1}", name=c["tool"], arguments=copy.deepcopy(c["args"]), requestor="user")
                    for i, c in enumerate(variant.user_calls)
                ]
                return UserMessage(role="user", tool_calls=made), state
            return UserMessage(role="user", content="###STOP###"), state

        @classmethod
        def is_stop(cls, message):
            return "###STOP###" in (message.content or "")

        def set_seed(self, seed):
            pass

    env = domain.fresh_env()
    orchestrator = Orchestrator(domain.tau2_domain, Agent(env.get_tools(), env.get_policy()), User(), env, t2)
    sim = orchestrator.run()
    try:
        info = evaluate_simulation(sim, t2, EvaluationType.ALL, solo_mode=False, domain=domain.tau2_domain)
    except Exception:  # noqa: BLE001 - an assertion that cannot read the state: τ²'s run scores it 0 (skip_failed_samples)
        return 0.0, sim.messages
    return info.reward, sim.messages


def same_conversation(a: list[Any], b: list[Any]) -> bool:
    """Equal as τ²'s evaluators read them: each message's role, text, tool calls (name, arguments) and tool results."""

    def key(m: Any) -> tuple:
        calls = tuple((c.name, repr(c.arguments)) for c in (getattr(m, "tool_calls", None) or []))
        return (m.role, m.content, calls, getattr(m, "error", None))

    def stopped(ms: list[Any]) -> list[Any]:  # τ²'s user's closing stop message: ours ends at the agent's done
        return ms[:-1] if ms and ms[-1].role == "user" and ms[-1].content == "###STOP###" else ms

    return [key(m) for m in stopped(a)] == [key(m) for m in stopped(b)]
