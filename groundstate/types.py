"""The types every layer shares: what an agent emits, what a tool returns, what an episode records, what a
grader decides, the limits of an attempt, and the interfaces every world implements (`Domain`, `Environment`).

One attempt, in these types: a `Domain` opens an `Environment` for a `Task`; the episode loop sends the
environment's `tool_schemas()` and the conversation to an `Agent`, whose `AgentTurn`s carry `ToolCallRequest`s
that the environment answers with `ToolResult`s (`call_tool`); the loop ends with a finish reason and a
`Trajectory`, which the environment grades into a `Verdict` (`grade`) before it is closed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from groundstate.state.changes import ChangeSet

if TYPE_CHECKING:  # the task model (pydantic) and backends are defined in their own modules; protocols only name them
    from groundstate.state.base import Backend
    from groundstate.tasks import Task

DEFAULT_GRADE_TIMEOUT_S = 300.0
FINISH_REASONS = ("agent_done", "user_done", "max_turns", "max_tool_calls", "max_tokens", "max_reply_chars", "timeout")
# The most characters one reply may have, the agent's (its text and tool calls: past it the episode ends, `max_reply_chars`)
# or an LLM user's (past it, a system error): a flood, never a message to a customer (a model that loops to a 25k-token
# limit writes about 100,000), which would otherwise be audited, sent back to every model call and written to the record.
MAX_REPLY_CHARS = 100_000


# -- what agents emit ---------------------------------------------------------------------------------------


@dataclass
class Usage:
    """Tokens billed for agent turns, as the endpoint reported them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_input_tokens += other.cached_input_tokens

    def to_json(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "cached_input_tokens": self.cached_input_tokens}


@dataclass
class ToolCallRequest:
    id: str
    name: str
    arguments: dict[str, Any] | str  # a string when the model produced unparsed JSON
    parse_error: str | None = None  # set when the model's call could not be parsed: the agent sees this error
    parser: str | None = None  # what read the call from the model's output: native, hermes, qwen, json, xml (None: scripted)

    def to_message(self) -> dict[str, Any]:
        args = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


@dataclass
class AgentTurn:
    text: str | None = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    done: bool = False  # the agent declares the conversation finished
    extra: dict[str, Any] = field(default_factory=dict)  # engine-specific data (token ids, log-probs)


class Agent(Protocol):
    """The policy: the next turn for a conversation (OpenAI-style chat messages) and the tools on offer."""

    async def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn: ...


class UserTools(Protocol):
    """The tools a world gives the user on the user's own side, for one attempt (τ²'s telecom: the customer's phone).
    The agent never sees them or their results; what they change is part of the final state."""

    def schemas(self) -> list[dict[str, Any]]:
        """The user's tools, in the OpenAI `tools` format."""
        ...

    async def act(self, calls: list[ToolCallRequest]) -> list[ToolCallRecord]:
        """Run one user message's calls, in order, as that world runs a message's calls; each answered, never raising
        for what the user asked (a bad call is an error result). Raises `EpisodeHang` for a call that does not return."""
        ...


class UserSimulator(Protocol):
    async def reply(self, conversation: list[dict[str, Any]], tools: UserTools | None = None) -> str | None:
        """The user's next message, or None when the user ends the conversation. `tools`: the user's own tools where the
        world has them (`Environment.user_tools`); a user may call them before it answers."""
        ...


# -- what tools return and episodes record --------------------------------------------------------------------


@dataclass
class ToolResult:
    ok: bool
    content: str  # what the agent sees: JSON of the return value, or the error message
    write: bool = False  # whether the tool may change state (as its domain declares it)


class ToolCallRecord(BaseModel):
    """One executed tool call as a trajectory records it: the tool's `name`, the `arguments` the model sent (a JSON
    object, or the text it wrote where that was not one), whether the tool answered `ok`, its full `result` (what the
    agent saw, before any `max_result_chars` cut), whether the tool may `write`; `parser`, what read the call from the
    model's output (`ToolCallRequest.parser`), and `truncated`, whether the agent saw only a cut of the result.

    Written as `{name, arguments, ok, result, write[, parser][, truncated]}`: `parser` and `truncated` only where set,
    as records always had them. Anything else in a recorded call is refused on read (`records.RecordError`)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: Any
    ok: Annotated[bool, Field(strict=True)]
    result: str
    write: Annotated[bool, Field(strict=True)]
    parser: str | None = None
    truncated: Annotated[bool, Field(strict=True)] = False

    @model_serializer
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "arguments": self.arguments, "ok": self.ok, "result": self.result, "write": self.write}
        if self.parser:
            out["parser"] = self.parser
        if self.truncated:
            out["truncated"] = True
        return out


class UserToolBatch(BaseModel):
    """One batch of the user's own calls (one `UserTools.act`): the next `calls` of `Trajectory.user_tool_calls`, made
    while the user wrote the message at index `at` of the conversation (`len(messages)` then: where the user ended the
    conversation instead, the end). What lets `regrade` make them again where they were made."""

    model_config = ConfigDict(extra="forbid")
    at: Annotated[int, Field(strict=True, ge=0)]
    calls: Annotated[int, Field(strict=True, ge=0)]


_RUNTIME_ONLY = ("usage", "seconds", "extra")  # `Trajectory` fields never written to or read from a record


class Trajectory(BaseModel):
    """One attempt as it happened: the conversation, every executed tool call, the finish reason and the tokens.

    `messages` are OpenAI-style chat messages, kept as they were (a results file may hold malformed ones, which their
    readers check: `audits.regrade`); `finish_reason` is empty for an attempt cut short by a system error. Records hold
    `to_json()`: messages, tool calls, finish reason and turns; `usage`, `seconds` and `extra` (each agent turn's
    engine data, e.g. token ids) are the running attempt's alone and are never written. Built and changed in place by
    the episode loop (assignments are not validated)."""

    model_config = ConfigDict(extra="forbid")
    messages: list[dict[str, Any]]
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    user_tool_calls: list[ToolCallRecord] = Field(default_factory=list)  # the user's own calls (`UserTools`), in order
    user_tool_batches: list[UserToolBatch] = Field(default_factory=list)  # where they were made (absent before they were recorded)
    finish_reason: str = ""
    turns: Annotated[int, Field(strict=True, ge=0)] = 0
    usage: Usage = Field(default_factory=Usage, exclude=True)
    seconds: float = Field(0.0, exclude=True)
    extra: list[dict[str, Any]] = Field(default_factory=list, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _recorded_fields_only(cls, data: Any) -> Any:
        """A trajectory read from a record holds what records hold: the running attempt's own fields are never in one
        (taken, they would be dropped again when the record is rewritten from its fields)."""
        if isinstance(data, dict) and (runtime := [k for k in _RUNTIME_ONLY if k in data]):
            raise ValueError(f"{', '.join(runtime)}: the running attempt's alone, never part of a recorded trajectory")
        return data

    def fork(self) -> Trajectory:
        """An independent copy, runtime fields included: the transcript of a forked environment (`Environment.fork`),
        which the continuation extends without touching this one."""
        return self.model_copy(deep=True)

    @property
    def final_reply(self) -> str | None:
        """The agent's last text message to the user (what reply rubrics judge)."""
        for m in reversed(self.messages):
            if m["role"] == "assistant" and m.get("content"):
                return m["content"]
        return None

    @model_serializer
    def to_json(self) -> dict[str, Any]:
        """`user_tool_calls` and `user_tool_batches` only where the user made calls: every other record reads as records
        always did."""
        out = {"messages": self.messages, "tool_calls": [c.to_json() for c in self.tool_calls]}
        if self.user_tool_calls:
            out["user_tool_calls"] = [c.to_json() for c in self.user_tool_calls]
        if self.user_tool_batches:
            out["user_tool_batches"] = [b.model_dump() for b in self.user_tool_batches]
        return {**out, "finish_reason": self.finish_reason, "turns": self.turns}


# What failed, when an attempt is a system error: never the agent's doing, so never a 0. `endpoint`: a model endpoint
# (the agent's or an LLM user's) past its retries; `malformed_response`: an endpoint's answer that is not a completion;
# `user_fault`: an LLM user that broke its persona (`fault` says how, `agents.user_audit`); `judge`: the rubric judge;
# `time_limit`: a tool, the backend or grading that outlasted its bound; `grader`: the grader itself; `infrastructure`:
# anything else outside the agent's control (a database gone, a worker lost, a server that died).
ErrorKind = Literal["endpoint", "malformed_response", "user_fault", "judge", "time_limit", "grader", "infrastructure"]
ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)
# how an LLM user broke its persona (`agents.user_audit`)
FaultKind = Literal["invented_fact", "contradicted_fact", "premature_stop", "overlong_reply"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
Reward = Annotated[int, Field(strict=True, ge=0, le=1)] | None


class Blame(BaseModel):
    """Where a failed final state went wrong (`grading.blame`): the first call after which the attempt could no longer
    reach the golden state (`diverged`), or what it left undone (`stopped_early`, `never_acted`); `unavailable` with the
    `reason` when it could not be found (never a change of the verdict)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["diverged", "stopped_early", "never_acted", "unavailable"]
    call: int | None = None  # the blamed call among the attempt's executed calls (or its first failed write)
    tool: str | None = None
    rows: list[dict[str, Any]] = Field(default_factory=list)  # what the blamed call got wrong (at most 5 rows)
    reason: str | None = None  # `unavailable` only

    @model_serializer
    def to_json(self) -> dict[str, Any]:
        if self.kind == "unavailable":
            return {"kind": self.kind, "reason": self.reason}
        return {"kind": self.kind, "call": self.call, "tool": self.tool, "rows": self.rows}


class Verdict(BaseModel):
    """A grader's decision on one attempt: reward 1 or 0 with its reasons and row diff, unjudged, or a system error
    (`system_error` says what happened, `error_kind` which party failed, `fault` how an LLM user did). Assignments are
    validated: a verdict is typed whoever changes it."""

    model_config = ConfigDict(validate_assignment=True, extra="allow")
    reward: Reward  # 1 or 0; None for a system error or an unjudged rubric task
    reasons: list[str] = Field(default_factory=list)
    diff: list[dict[str, Any]] = Field(default_factory=list)
    system_error: str | None = None
    error_kind: ErrorKind | None = None  # set with system_error, and only then
    fault: FaultKind | None = None  # an LLM user's fault, when error_kind is user_fault
    state_reward: Reward = None  # the final-state part alone (before any rubric)
    unjudged: bool = False  # rubric task graded without a judge: counted apart, never pass or fail
    changes: dict[str, int] = Field(default_factory=dict)
    # where a failed final state went wrong: what `groundstate run` and `regrade` record for SQL domains
    # (`attempt.play(blame=True)`); training rewards and the adapters do not compute it
    blame: Blame | None = None

    @model_validator(mode="after")
    def _kind_with_error(self) -> Verdict:
        if (self.system_error is None) != (self.error_kind is None):
            raise ValueError("a system error has an error_kind, and only a system error has one")
        if self.fault is not None and self.error_kind != "user_fault":
            raise ValueError("only a user_fault system error has a fault")
        return self

    @property
    def passed(self) -> bool:
        return self.reward == 1

    @model_serializer
    def to_json(self) -> dict[str, Any]:
        """The verdict as records hold it: the fields every verdict has, then blame, the error's kind and fault where
        there are, then any field another tool added."""
        out: dict[str, Any] = {
            "reward": self.reward,
            "state_reward": self.state_reward,
            "reasons": self.reasons,
            "diff": self.diff,
            "system_error": self.system_error,
            "unjudged": self.unjudged,
            "changes": self.changes,
        }
        if self.blame is not None:
            out["blame"] = self.blame.to_json()
        if self.error_kind is not None:
            out["error_kind"] = self.error_kind
        if self.fault is not None:
            out["fault"] = self.fault
        return {**out, **(self.model_extra or {})}


def system_error(message: str, kind: ErrorKind, fault: FaultKind | None = None) -> Verdict:
    """The verdict of an attempt that something other than the agent failed (`kind`: which): never a 0."""
    return Verdict(reward=None, reasons=[message], system_error=message, error_kind=kind, fault=fault)


class Judge(Protocol):
    """Judges a task's reply rubrics for an attempt whose final state passed (see `grading.with_rubrics`)."""

    def apply(self, task: Task, trajectory: Trajectory | None, verdict: Verdict) -> Verdict: ...


# -- limits and failures of an attempt ----------------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeLimits:
    """What one attempt may do. A limit reached ends the episode with a finish reason and the state is graded.

    `max_turns` / `max_tool_calls` override the task's own limits (None: the task's); `timeout` is the attempt's
    wall clock in seconds (the agent running out is finish reason `timeout`; a tool or user call that alone
    outlasts it is a hang of the harness, `EpisodeHang`); `max_result_chars` caps the tool result the agent is
    shown; `max_tokens` caps the agent's input + output tokens over the attempt; `grade_timeout` bounds
    grading (running out is a system error; None: unbounded).
    """

    max_turns: int | None = None
    max_tool_calls: int | None = None
    timeout: float | None = None
    max_result_chars: int | None = None
    max_tokens: int | None = None
    grade_timeout: float | None = DEFAULT_GRADE_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("max_turns", "timeout", "max_result_chars", "max_tokens", "grade_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.max_tool_calls is not None and self.max_tool_calls < 0:
            raise ValueError(f"max_tool_calls must be 0 or more, got {self.max_tool_calls}")

    def turns_for(self, task: Task) -> int:
        return self.max_turns or task.limits.max_turns

    def tool_calls_for(self, task: Task) -> int:
        return task.limits.max_tool_calls if self.max_tool_calls is None else self.max_tool_calls


class EpisodeHang(RuntimeError):
    """A tool, backend or user-simulator call did not return within the attempt's time limit (infrastructure)."""


class SandboxLost(RuntimeError):
    """The sandbox's database connection died under a tool call (a server restart): the attempt cannot be graded."""


# -- worlds ---------------------------------------------------------------------------------------------------


class ToolDescription(Protocol):
    """What the scripted agents and lint's mutants read of one tool: may it write, and its parameters' types."""

    write: bool
    params: dict[str, Any]


class ToolCatalog(Protocol):
    """A domain's tools by name, as far as scripted agents and lint's mutants need them (a `Toolset` is one)."""

    specs: Mapping[str, ToolDescription]


class Environment(Protocol):
    """What one attempt runs against: the world of one task, opened for this attempt alone.

    `call_tool` never raises for anything the agent did (a bad call is an error result); it raises for what is
    not the agent's doing (`EpisodeHang`, `SandboxLost`, a server that died), which the attempt records as a system
    error. The environment applies its own execution policy (worker threads, the attempt's time limit).
    `changes()` is the change set so far where the world has one (SQL sandboxes), else None.
    """

    task: Task

    def initial_messages(self) -> list[dict[str, Any]]:
        """The conversation an attempt starts from: the domain's policy (system) and the task's instruction (user)."""
        ...

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools the agent may call, in the OpenAI / chat-template `tools` format."""
        ...

    async def call_tool(self, name: str, arguments: Any) -> ToolResult: ...

    def user_tools(self) -> UserTools | None:
        """The user's own tools in this attempt (`UserTools`), or None where the world gives the user none (most)."""
        ...

    async def grade(self, trajectory: Trajectory, judge: Judge | None = None) -> Verdict: ...

    async def changes(self) -> ChangeSet | None: ...

    async def state_digest(self) -> str | None:
        """A digest of the world's state now, between tool calls: equal states give equal digests, a state changed in
        any way a grader could see gives another. None where the world cannot show one (lint then judges by the verdict
        and the tools' read-only marks alone)."""
        ...

    async def fork(self) -> Environment:
        """A new environment of the same task in exactly this one's state, independent of it from then on and closed
        on its own: for a SQL world a copy of the sandbox with its change log, so that the fork's `changes()` and
        `grade` after further calls equal what this environment's would be had it made the same calls. Called between
        tool calls; the transcript is the caller's to copy (`Trajectory.fork`). A world that cannot copy its live state
        raises `ForkUnsupported` (`groundstate.state.base`, a `NotImplementedError`) naming the environment."""
        ...

    async def close(self) -> None:
        """Release everything the attempt holds (always called, also after a failure; idempotent)."""
        ...


class AttemptObserver(Protocol):
    """Watches the attempts an attempt path grades, through the API (`worlds.attempt.play(observer=...)`,
    `grade_bounded`, and the adapters' `observer`): what `groundstate conformance` compares, and anything else that
    records an attempt without wrapping its environment.

    `graded` is called once per attempt whose environment graded it, as part of grading (under the grading bound, on
    the attempt's event loop, before the environment is closed), with the trajectory graded, the environment's verdict
    and `changes`, the change set that verdict judged (read just before grading; None where the world has none). It
    is not called for an attempt that ended before grading or whose grading failed (its verdict is a system error
    either way), and what `play` adds to the verdict after grading (user-fault notes, blame) is not in it yet. An
    observer that raises fails the grading: the attempt becomes a system error."""

    def graded(self, task: Task, trajectory: Trajectory, verdict: Verdict, changes: ChangeSet | None) -> None: ...


VALUE_VARIATIONS = ("upper", "padded")  # how a declared equivalent argument value may be written instead: upper-cased, or with spaces around it


@dataclass(frozen=True)
class Equivalences:
    """What a world treats alike, which the false-negative audit (`groundstate.audits.alternatives`) varies: the columns whose
    wording the grader ignores (table -> columns, compared by presence), and the argument values its tools read alike
    (parameter name -> `VALUE_VARIATIONS`, e.g. an e-mail address looked up case-insensitively)."""

    free_text: Mapping[str, frozenset[str]] = field(default_factory=dict)
    args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class Domain(Protocol):
    """A world that tasks run in: SQL domain folders (`groundstate.worlds.domain.Domain`) and ThinkingBox scenarios
    (`groundstate.worlds.thinkingbox.TbDomain`) both implement it.

    `ref()` is how another process (a Ray actor, a verl worker) finds this domain again (`groundstate.worlds.refs`);
    `content_hash` changes whenever what defines its attempts changes; `prepare(backend)` builds, once and before
    any attempt, what attempts need (`TaskFileError` naming the file when a domain file is broken);
    `open_environment` gives one attempt its own `Environment`.
    """

    name: str

    tools: ToolCatalog

    equivalences: Equivalences

    @property
    def content_hash(self) -> str: ...

    def system_prompt(self) -> str: ...

    def ref(self) -> str: ...

    def prepare(self, backend: Backend) -> None: ...

    async def open_environment(self, task: Task, backend: Backend, limits: EpisodeLimits) -> Environment: ...

    async def blame(self, task: Task, backend: Backend, trajectory: Trajectory, limits: EpisodeLimits) -> Blame | None:
        """Where an attempt whose final state failed went wrong (`groundstate.grading.blame`), replayed on a fresh world of the
        task; None where the domain cannot replay one cheaply."""
        ...
