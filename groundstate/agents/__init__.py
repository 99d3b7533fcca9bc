"""Agents (policies) and user simulators, built from their specs (`groundstate.specs`).

Agent specs: `scripted:gold|noop|noisy:P`, `openai:MODEL[@BASE_URL]`, `hf:PATH`.
User specs: `scripted` (the task's script) or `openai:MODEL[@BASE_URL]` (an LLM playing the persona, checked by the
user-turn audit, `user_audit`, and replayable from a user cache, `user_cache`).
Each factory takes a parsed spec, or its text (parsed on the way in).
"""

from __future__ import annotations

from typing import Any

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser, attempt_seed, make_scripted_agent, scripted_user
from groundstate.agents.user_audit import AuditedUser, UserAudit
from groundstate.agents.user_cache import CachedUser, UserCache
from groundstate.records import UserReplies
from groundstate.specs import AgentSpec, UserSpec, parse_agent, parse_user
from groundstate.tasks import Task
from groundstate.types import Agent, Domain, UserSimulator

__all__ = ["AgentSource", "ScriptedAgent", "ScriptedUser", "check_agent_spec", "make_agent", "make_user"]


class AgentSource:
    """The agents of one run's attempts, from one spec.

    Scripted agents are made per attempt (they replay the attempt's task, seeded by task, attempt and `seed`). A local
    model (`hf:PATH`) is loaded once, on first use, and batched across the attempts in flight, each attempt with its
    own token-exact record (`agents.local.BatchedPolicy`). An endpoint client (`openai:`) is made once and shared.
    """

    def __init__(self, spec: AgentSpec | str, sampling: dict[str, Any] | None = None, seed: int = 0, tool_call_format: str = "auto"):
        self.spec = parse_agent(spec)
        self.kind, self.sampling, self.seed = self.spec.kind, dict(sampling or {}), seed
        self.tool_call_format = tool_call_format  # where an `openai:` agent reads tool calls (`OpenAIAgent`)
        self._shared: Any = None

    def for_attempt(self, task: Task, domain: Domain, attempt: int) -> Agent:
        if self.kind == "scripted":
            return make_scripted_agent(self.spec, task, domain, attempt, self.seed)
        if self._shared is None:
            if self.kind == "hf":
                from groundstate.agents.local import BatchedPolicy, SamplingParams

                self._shared = BatchedPolicy.from_pretrained(self.spec.path, SamplingParams.from_options(self.sampling), seed=self.seed)
            else:
                from groundstate.agents.openai_compat import make_openai_agent

                self._shared = make_openai_agent(self.spec.endpoint, self.sampling, tool_call_format=self.tool_call_format)
        if self.kind == "hf":  # the attempt's own random stream: its samples do not depend on which attempts ran beside it
            return self._shared.agent(seed=attempt_seed(task.id, attempt, self.seed))
        return self._shared


def check_agent_spec(spec: AgentSpec) -> None:
    """`ValueError` in one line, naming the spec and the fix, unless the agent can be built: for `hf:PATH`, a model
    folder or hub id (`local.check_model_ref`; every other kind is whole once parsed). Nothing is loaded and no endpoint
    is called (`openai_compat.probe_endpoint` does that)."""
    if spec.kind == "hf":
        from groundstate.agents.local import check_model_ref

        try:
            check_model_ref(spec.path or "")
        except ValueError as e:
            raise ValueError(f"bad agent spec {spec.text!r}: {e}") from None


def make_agent(spec: AgentSpec | str, task: Task, domain: Domain, attempt: int = 0, seed: int = 0, sampling: dict[str, Any] | None = None) -> Agent:
    """An agent for one attempt (a run makes its agents with one `AgentSource`, which shares models between attempts)."""
    return AgentSource(spec, sampling, seed).for_attempt(task, domain, attempt)


def make_user(
    spec: UserSpec | str,
    task: Task,
    attempt: int = 0,
    *,
    sampling: dict[str, Any] | None = None,
    cache: UserCache | None = None,
    replies: UserReplies | None = None,
    audit: bool = True,
) -> UserSimulator:
    """The simulated user of one attempt.

    An LLM user (`openai:`) samples with `sampling` (default temperature 0), has every reply checked by the user-turn
    audit (`user_audit`: a fault raises `UserSimulatorFault`, a system error) unless `audit` is False, and with a `cache`
    (`user_cache.UserCache`) replays the replies stored for this task, attempt and conversation, counting in `replies`
    how each reply was made. The scripted user
    replays its task's script (`scripted:gold` also makes the user's own gold calls, `scripted.scripted_user`): nothing
    to sample, audit or cache (a cache or sampling for it is a `ValueError`)."""
    spec = parse_user(spec)
    if not spec.is_llm:
        if cache is not None or sampling:
            raise ValueError(
                "a user cache and user sampling settings are for an LLM user (openai:MODEL[@URL]); the scripted user replays its task's script"
            )
        return scripted_user(task) if spec.gold else ScriptedUser(task.user.script)
    from groundstate.agents.openai_compat import make_openai_user, user_view

    user = make_openai_user(spec.endpoint, task, sampling)
    checks = UserAudit(task) if audit else None
    if cache is not None:
        return CachedUser(
            user,
            cache,
            task=task,
            user_model=user.endpoint,
            sampling={**user.sampling, **user.extra_body},
            attempt=attempt,
            view=lambda conversation: user_view(conversation, user.system_prompt),
            audit=checks,
            count=replies,
        )
    return AuditedUser(user, checks) if checks is not None else user
