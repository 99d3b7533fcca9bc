"""Agents (policies) and user simulators, built from spec strings.

Agent specs: `scripted:gold|noop|noisy:P`, `openai:MODEL[@BASE_URL]`, `hf:PATH`.
User specs: `scripted` (the task's script) or `openai:MODEL[@BASE_URL]` (an LLM playing the persona, checked by the
user-turn audit, `user_audit`, and replayable from a user cache, `user_cache`).
"""

from __future__ import annotations

from typing import Any

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser, attempt_seed, make_scripted_agent, parse_scripted_spec
from groundstate.agents.user_audit import AuditedUser, UserAudit
from groundstate.agents.user_cache import CachedUser, UserCache
from groundstate.tasks import Task
from groundstate.types import Agent, Domain, UserSimulator

__all__ = ["AgentSource", "ScriptedAgent", "ScriptedUser", "check_agent_spec", "check_user_spec", "is_llm_user", "make_agent", "make_user"]

AGENT_SPECS = "scripted:gold|noop|noisy:P, openai:MODEL[@URL] or hf:PATH"


class AgentSource:
    """The agents of one run's attempts, from one spec.

    Scripted agents are made per attempt (they replay the attempt's task, seeded by task, attempt and `seed`). A local
    model (`hf:PATH`) is loaded once, on first use, and batched across the attempts in flight, each attempt with its
    own token-exact record (`agents.local.BatchedPolicy`). An endpoint client (`openai:`) is made once and shared.
    """

    def __init__(self, spec: str, sampling: dict[str, Any] | None = None, seed: int = 0, tool_call_format: str = "auto"):
        kind = spec.split(":", 1)[0]
        if kind not in ("scripted", "openai", "hf"):
            raise ValueError(f"unknown agent spec {spec!r}: use {AGENT_SPECS}")
        self.spec, self.kind, self.sampling, self.seed = spec, kind, dict(sampling or {}), seed
        self.tool_call_format = tool_call_format  # where an `openai:` agent reads tool calls (`OpenAIAgent`)
        self._shared: Any = None

    def for_attempt(self, task: Task, domain: Domain, attempt: int) -> Agent:
        if self.kind == "scripted":
            return make_scripted_agent(self.spec, task, domain, attempt, self.seed)
        if self._shared is None:
            if self.kind == "hf":
                from groundstate.agents.local import BatchedPolicy, SamplingParams

                self._shared = BatchedPolicy.from_pretrained(
                    self.spec.removeprefix("hf:"), SamplingParams.from_options(self.sampling), seed=self.seed
                )
            else:
                from groundstate.agents.openai_compat import make_openai_agent

                self._shared = make_openai_agent(self.spec, self.sampling, tool_call_format=self.tool_call_format)
        if self.kind == "hf":  # the attempt's own random stream: its samples do not depend on which attempts ran beside it
            return self._shared.agent(seed=attempt_seed(task.id, attempt, self.seed))
        return self._shared


def check_agent_spec(spec: str) -> None:
    """`ValueError` in one line, naming the spec and the fix, unless `spec` is an agent spec that can be built: its
    syntax (`scripted:gold|noop|noisy:P`, `openai:MODEL[@URL]`) and, for `hf:PATH`, a model folder or hub id
    (`local.check_model_ref`). Nothing is loaded and no endpoint is called (`openai_compat.probe_endpoint` does that)."""
    kind, sep, rest = spec.partition(":")
    if kind == "scripted" and sep:
        parse_scripted_spec(spec)
    elif kind == "openai" and sep:
        from groundstate.agents.openai_compat import parse_endpoint

        parse_endpoint(spec)
    elif kind == "hf" and sep:
        from groundstate.agents.local import check_model_ref

        try:
            check_model_ref(rest)
        except ValueError as e:
            raise ValueError(f"bad agent spec {spec!r}: {e}") from None
    else:
        hint = f" (did you mean scripted:{spec}?)" if spec in ("gold", "noop") or spec.startswith("noisy") else ""
        hint = " (openai needs its model: openai:MODEL[@URL])" if spec == "openai" else " (hf needs its folder: hf:PATH)" if spec == "hf" else hint
        raise ValueError(f"unknown agent spec {spec!r}: use {AGENT_SPECS}{hint}")


def check_user_spec(spec: str) -> None:
    """`ValueError` in one line unless `spec` is a user spec: `scripted` or `openai:MODEL[@URL]`."""
    if spec in ("scripted", "scripted:task"):
        return
    if is_llm_user(spec):
        from groundstate.agents.openai_compat import parse_endpoint

        parse_endpoint(spec)
        return
    raise ValueError(f"unknown user spec {spec!r}: use scripted or openai:MODEL[@URL]")


def make_agent(spec: str, task: Task, domain: Domain, attempt: int = 0, seed: int = 0, sampling: dict[str, Any] | None = None) -> Agent:
    """An agent for one attempt (a run makes its agents with one `AgentSource`, which shares models between attempts)."""
    return AgentSource(spec, sampling, seed).for_attempt(task, domain, attempt)


def is_llm_user(spec: str) -> bool:
    """Whether a user spec names an LLM user (audited, cacheable, sampled) rather than the task's script."""
    return spec.startswith("openai:")


def make_user(
    spec: str,
    task: Task,
    attempt: int = 0,
    *,
    sampling: dict[str, Any] | None = None,
    cache: UserCache | None = None,
    audit: bool = True,
) -> UserSimulator:
    """The simulated user of one attempt.

    An LLM user (`openai:`) samples with `sampling` (default temperature 0), has every reply checked by the user-turn
    audit (`user_audit`: a fault raises `UserSimulatorFault`, a system error) unless `audit` is False, and with a `cache`
    (`user_cache.UserCache`) replays the replies stored for this task, attempt and conversation. The scripted user
    replays its task's script: nothing to sample, audit or cache (a cache or sampling for it is a `ValueError`)."""
    if spec in ("scripted", "scripted:task"):
        if cache is not None or sampling:
            raise ValueError(
                "a user cache and user sampling settings are for an LLM user (openai:MODEL[@URL]); the scripted user replays its task's script"
            )
        return ScriptedUser(task.user.script)
    if is_llm_user(spec):
        from groundstate.agents.openai_compat import make_openai_user, user_view

        user = make_openai_user(spec, task, sampling)
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
            )
        return AuditedUser(user, checks) if checks is not None else user
    raise ValueError(f"unknown user spec {spec!r}: use scripted or openai:MODEL[@URL]")
