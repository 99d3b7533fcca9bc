"""A run's settings (`RunConfig`), their checks before anything is written, and the shapes executors pass around:
a planned attempt and the sink of its record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from groundstate.agents.user_cache import UserCache, UserCacheError
from groundstate.records import AttemptRecord
from groundstate.specs import AgentSpec, JudgeSpec, UserSpec, parse_agent, parse_judge, parse_user
from groundstate.tasks import Task
from groundstate.types import Domain, EpisodeLimits

Planned = tuple[Task, Domain, int]  # an attempt to run: the task, its domain, the attempt index

RecordSink = Callable[[AttemptRecord], None]


@dataclass
class RunConfig:
    """One run's settings. The agent, user and judge are specs (`groundstate.specs`): given as text, they are parsed
    here, once (a `ValueError` names what is wrong; the judge's says `judge:`); `judge` None is no judge given."""

    agent: AgentSpec = parse_agent("scripted:gold")
    user: UserSpec = parse_user("scripted")
    judge: JudgeSpec | None = None
    k: int = 1
    concurrency: int = 8
    seed: int = 0
    sampling: dict[str, Any] = field(default_factory=dict)  # temperature, top_p, top_k, max_tokens
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    tool_call_format: str = "auto"  # where an `openai:` agent reads tool calls (`agents.toolcall_format.TOOL_CALL_FORMATS`)
    user_sampling: dict[str, Any] = field(default_factory=dict)  # an LLM user's temperature (default 0)
    user_audit: bool = True  # check every LLM-user reply against the task's user facts (`agents.user_audit`)
    # replay LLM-user replies from this folder's cache and store new ones (`agents.user_cache`); not part of the run's
    # identity (a cached reply is the reply the model gave), recorded in the manifest's config
    user_cache: Path | None = None
    # stop the run (`EndpointsDown`, resumable) after this many attempts in a row ended by an endpoint failure; 0: never
    max_endpoint_failures: int = 5

    def __post_init__(self) -> None:
        self.agent = parse_agent(self.agent)
        self.user = parse_user(self.user)
        try:
            self.judge = None if self.judge is None else parse_judge(self.judge)
        except ValueError as e:
            raise ValueError(f"judge: {e}") from None

    def to_json(self) -> dict[str, Any]:
        """The settings as the manifest records them: each spec as its text."""
        return {**asdict(self), "agent": str(self.agent), "user": str(self.user), "judge": None if self.judge is None else str(self.judge)}


def check_config(cfg: RunConfig) -> None:
    """`ValueError` in one line for a run that could only fail: an agent that cannot be built (`agents.check_agent_spec`),
    an endpoint without the `openai` client, and what `check_user` refuses (the specs themselves were parsed with the
    config). Called before anything is written; it loads no model and calls no endpoint (`endpoint_specs` to probe those)."""
    from groundstate.agents import check_agent_spec
    from groundstate.agents.openai_compat import require_openai

    check_agent_spec(cfg.agent)
    for role, spec in endpoint_specs(cfg).items():
        try:
            require_openai()
        except ValueError as e:
            raise ValueError(f"--{role} {spec}: {e}") from None
    if cfg.max_endpoint_failures < 0:
        raise ValueError(f"max_endpoint_failures must be 0 (never stop) or more, got {cfg.max_endpoint_failures}")
    check_user(cfg)


def endpoint_specs(cfg: RunConfig) -> dict[str, AgentSpec | UserSpec | JudgeSpec]:
    """The run's specs that name an OpenAI-compatible endpoint, by role (agent, user, judge): what to probe before the
    first attempt."""
    roles = {"agent": cfg.agent, "user": cfg.user, "judge": cfg.judge}
    return {role: spec for role, spec in roles.items() if spec is not None and spec.endpoint is not None}


def check_user(cfg: RunConfig) -> None:
    """Refuse, before anything is written, a user side that would fail every attempt: user sampling settings for the
    scripted user (`ValueError`), and a user cache that cannot be used (`UserCacheError`, naming the path: a folder that
    is a file or read-only, a file of another schema, or a cache for the scripted user, which has nothing to cache)."""
    if cfg.user_sampling and not cfg.user.is_llm:
        raise ValueError(f"user sampling settings are for an LLM user (openai:MODEL[@URL]); user {cfg.user} replays the task's script")
    if cfg.user_cache is None:
        return
    if not cfg.user.is_llm:
        raise UserCacheError(
            Path(cfg.user_cache),
            f"a user cache replays an LLM user's replies, and --user {cfg.user} is the task's script: use --user openai:MODEL[@URL]",
        )
    UserCache(cfg.user_cache).close()
