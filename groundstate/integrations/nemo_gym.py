"""NeMo Gym 0.4: groundstate tasks as a NeMo Gym resources server, rewarded by the final state of their database.

`groundstate new nemo-gym NAME --tasks SELECTOR` writes the server's folder (`integrations.nemo_gym_files`); NeMo
Gym starts it (`gym env start`) beside its own `simple_agent` and a model server, and its rollout collection
(`gym eval run`) plays every row, each in a NeMo Gym session of its own (its cookie):

- `POST /seed_session` with the row (its `task_id`) opens a fresh sandbox for the task: the session's one graded
  attempt. The same seed again before any call is the same attempt; any other seed of a session that holds one is a
  409 (NeMo Gym's agent posts whatever function a model calls to `/{name}`: a model calling `seed_session` must not
  swap its task);
- `POST /{tool}` with the call's arguments is one agent turn, answered with the tool's result as text (what the agent
  appends as the call's output); a call the agent got wrong (bad arguments, not JSON, an unknown tool) is a result
  holding the error, as `groundstate run` shows it;
- `POST /verify` with NeMo Gym's response: its last assistant message is the agent's closing turn, which ends the
  attempt (NeMo Gym's agents stop at their first reply with no tool call, so the task's user is not asked again),
  and the final state is graded. The answer adds `reward` (1.0 or 0.0), `task_id`, `finish_reason` and `verdict`
  (`verdict_view.verdict_summary`: reasons by check name; with `reveal_verdict`, the whole verdict). A verify repeated
  or raced gets the same answer, graded and recorded once; one whose row names another task is a 409.

The attempt is `groundstate run`'s (`attempt.play` through `SteppedEpisode`): same limits, finish reasons and grader,
so a trajectory gets the same verdict here as there (each call is one turn: the rows ask for one call per response).
A system error (the backend failed, a tool hung past `attempt_timeout`) is not the agent's failure: the answer carries
NeMo Gym's failure mark (`_ng_failure_class`: `groundstate_system_error`), so its rollout collection writes the rollout
to its failures file, which its metrics leave out and a resumed collection plays again, never as a reward. Tasks with
reply rubrics are left out (a log line counts them): NeMo Gym's reward is a number, and such a task has none until a
judge reads the reply. At most `max_sessions` attempts are open at once (a seed beyond them: 503). A request waits for
the one before it in its session (the sandbox opening included); a session with no request in flight for
`idle_timeout` seconds is closed, its attempt abandoned after the request it was serving (a log line says so). With
`out`, every verified attempt is written there as a results record (agent: the row's `agent_ref` name; a failed
verdict says where it went wrong, `blame`).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import PlainTextResponse
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.server_utils import SESSION_ID_KEY
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from groundstate.agents import make_user
from groundstate.agents.base import valid_text
from groundstate.integrations.nemo_gym_files import servable
from groundstate.integrations.stepped import SteppedEpisode
from groundstate.integrations.verdict_view import verdict_summary
from groundstate.pipeline.served import ServedEpisodes
from groundstate.specs import UserSpec, parse_user
from groundstate.state import make_backend
from groundstate.state.base import Backend
from groundstate.tasks import Task, TaskFileError
from groundstate.types import AgentTurn, EpisodeLimits, ToolCallRequest
from groundstate.worlds.attempt import prepare_domains
from groundstate.worlds.domain import Domain

log = logging.getLogger(__name__)
MAX_NAME = 200  # characters of an agent's name in a record
# NeMo Gym's mark of a failed rollout (`nemo_gym.rollout_collection.NG_FAILURE_CLASS_KEY`, whose module imports wandb)
NG_FAILURE_CLASS_KEY = "_ng_failure_class"
SYSTEM_ERROR = "groundstate_system_error"  # the failure class of a rollout the server could not grade
DEFAULT_ATTEMPT_TIMEOUT = 3600.0  # seconds: bounds a hung tool call (the server has no other way to free its sandbox)


class GroundstateResourcesServerConfig(BaseResourcesServerConfig):
    """The server's entry in NeMo Gym's config (`configs/NAME.yaml`, written by `groundstate new nemo-gym`)."""

    tasks: str  # a --tasks selector: bundled domains, task ids, patterns, a selection's train.yaml, domain folders
    backend: Literal["sqlite", "postgres"] = "sqlite"
    pg_dsn: str | None = None
    max_sessions: int = Field(64, ge=1)  # attempts (sandboxes) open at once
    idle_timeout: float = Field(300.0, gt=0)  # seconds a session may go without a request before it is closed
    user: str = "scripted"  # the task's scripted user (asked only if the agent replies before its last turn: never here)
    max_turns: int | None = Field(None, ge=1)  # None: the task's own
    # the attempt's wall clock: also what bounds a tool call that hangs, which would otherwise hold its sandbox for good
    attempt_timeout: float | None = Field(DEFAULT_ATTEMPT_TIMEOUT, gt=0)
    max_result_chars: int | None = Field(None, ge=1)
    reveal_verdict: bool = False  # the whole verdict with the reward (for evaluation: the answer travels with it)
    out: str | None = None  # a results file: every finished attempt written there as a record

    @model_validator(mode="before")
    @classmethod
    def _no_near_misses(cls, data: Any) -> Any:
        """NeMo Gym puts keys of its own in a server's entry (`datasets`, `verified`, ...), so a key that is neither
        ours nor NeMo Gym's is let through; one that is a near miss of a key read here (`max_session`, `idle-timeout`)
        is an error naming that key, where it had been ignored and its default served."""
        if isinstance(data, dict):
            for key in data:
                if isinstance(key, str) and key not in cls.model_fields:
                    near = difflib.get_close_matches(key.lower().replace("-", "_"), list(cls.model_fields), n=1, cutoff=0.8)
                    if near:
                        raise ValueError(f"unknown key {key!r} in the server's config: did you mean {near[0]!r}?")
        return data


class SeedRequest(BaseSeedSessionRequest):
    model_config = ConfigDict(extra="allow")  # the row's other fields (responses_create_params, agent_ref, ...)
    task_id: str


class VerifyRequest(BaseVerifyRequest):
    model_config = ConfigDict(extra="allow")  # the row's fields, its task_id among them


class VerifyResponse(BaseVerifyResponse):
    model_config = ConfigDict(extra="allow")
    task_id: str
    finish_reason: str | None
    verdict: dict[str, Any]


@dataclass
class _Session:
    """One NeMo Gym session: its attempt, and once verified the answer (given again to a verify repeated)."""

    episode: SteppedEpisode
    agent: str | None
    calls: int = 0  # tool calls handed to the episode: each one's id
    used: float = field(default_factory=time.monotonic)  # when a request last came or went
    busy: int = 0  # requests in flight, a body still arriving included: the reaper leaves a busy session alone
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one start, call, verify or close at a time
    closed: bool = False  # abandoned (seeded over, idle, the server stopping): a request waiting on the lock finds it so
    answer: dict[str, Any] | None = None  # what the verify added to the request it echoed (kept small: no echo)

    @contextlib.asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        self.busy, self.used = self.busy + 1, time.monotonic()
        try:
            yield
        finally:
            self.busy, self.used = self.busy - 1, time.monotonic()


class SessionGone(Exception):
    """The session has no attempt to take this request (never seeded, or closed while it waited)."""


class GroundstateResourcesServer(SimpleResourcesServer):
    """One graded attempt per NeMo Gym session; see the module docstring."""

    config: GroundstateResourcesServerConfig
    _by_id: dict[str, tuple[Task, Domain]] = PrivateAttr(default_factory=dict)
    _backend: Backend | None = PrivateAttr(default=None)
    _limits: EpisodeLimits = PrivateAttr(default_factory=EpisodeLimits)
    _records: ServedEpisodes | None = PrivateAttr(default=None)
    _user: UserSpec | None = PrivateAttr(default=None)
    _sessions: dict[str, _Session] = PrivateAttr(default_factory=dict)
    _reaper: asyncio.Task[None] | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        from groundstate.worlds.selectors import select_tasks

        if self.config.num_workers and self.config.num_workers > 1:
            raise ValueError("num_workers: a groundstate resources server keeps its sessions in one process; leave num_workers unset")
        try:
            pairs, rubric_tasks = servable(select_tasks(self.config.tasks))
        except (ValueError, TaskFileError, KeyError) as e:
            raise ValueError(f"tasks: {e}") from None
        if rubric_tasks:
            log.warning("%d selected tasks with reply rubrics are not served: NeMo Gym's reward is a number, theirs needs a judge", rubric_tasks)
        self._by_id = {t.id: (t, d) for t, d in pairs}
        self._limits = EpisodeLimits(
            max_turns=self.config.max_turns, timeout=self.config.attempt_timeout, max_result_chars=self.config.max_result_chars
        )
        try:
            self._user = parse_user(self.config.user)  # a malformed one stops the server before it serves
            if self._user.is_llm:  # as does an endpoint this environment has no openai client to call
                from groundstate.agents.openai_compat import require_openai

                require_openai()
        except ValueError as e:
            raise ValueError(f"user: {e}") from None
        backend = self.config.backend
        try:
            self._backend = make_backend(backend, self.config.pg_dsn, **({} if backend == "sqlite" else {"max_open": self.config.max_sessions + 1}))
        except ValueError as e:
            raise ValueError(f"backend, pg_dsn: {e}") from None
        prepare_domains([d for _, d in pairs], self._backend)
        if self.config.out is not None:
            self._records = ServedEpisodes(self.config.out, "nemo-gym", pairs, self.config.user, self._limits)

    # -- the web server ----------------------------------------------------------------------------------

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        # after NeMo Gym's own routes: every other POST is a tool call (an unknown tool's too, answered as `run` answers it)
        app.post("/{tool}", include_in_schema=False)(self.call_tool)
        serving = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(app: FastAPI):
            async with serving(app) as state:
                yield state
            await self._shut()

        app.router.lifespan_context = lifespan
        return app

    async def seed_session(self, request: Request, body: SeedRequest) -> BaseSeedSessionResponse:
        if body.task_id not in self._by_id:
            raise HTTPException(422, f"seed_session: task_id {_shown(body.task_id)} is not one of this server's tasks")
        session_id = request.session[SESSION_ID_KEY]
        held = self._sessions.get(session_id)
        if held is not None:  # NeMo Gym seeds each rollout in a session of its own: this is a repeat, or a model's call
            if held.episode.task.id == body.task_id and held.calls == 0 and held.answer is None and not held.closed:
                return BaseSeedSessionResponse()  # the same seed again, nothing played yet: the same attempt
            raise HTTPException(
                409, f"seed_session: this session already holds an attempt of task {held.episode.task.id}; a new rollout is a new session"
            )
        if sum(1 for s in self._sessions.values() if s.answer is None) >= self.config.max_sessions:
            raise HTTPException(503, f"every sandbox is in use ({self.config.max_sessions} attempts at once): retry later")
        task, domain = self._by_id[body.task_id]
        episode = SteppedEpisode(task, domain, self._backend, make_user(self._user, task), self._limits, blame=self._records is not None)
        session = self._sessions[session_id] = _Session(episode, _agent_name(body.model_extra))
        self._start_reaper()
        async with session.request(), session.lock:  # a call or verify arriving meanwhile waits for the sandbox
            await episode.start()  # a sandbox that could not open ends the attempt with a system error, which /verify reports
        return BaseSeedSessionResponse()

    async def call_tool(self, request: Request, tool: str) -> PlainTextResponse:
        """One tool call of the session's attempt: its result as text; an error text (409) where there is no attempt."""
        session = self._sessions.get(request.session.get(SESSION_ID_KEY, ""))
        if session is None:
            return PlainTextResponse(f"error: no attempt in this session: /seed_session first (tool {_shown(tool)} not run)", 409)
        async with session.request():
            try:
                arguments: Any = await request.json()
            except (ValueError, RecursionError):  # not JSON, or nested past what the parser takes: the environment answers it
                arguments = (await request.body()).decode("utf-8", "replace")
            async with session.lock:
                if session.closed or session.answer is not None or session.episode.outcome is not None:
                    why = "closed" if session.closed else f"over ({_finish(session.episode)}): reply to end it"
                    return PlainTextResponse(f"error: the attempt is {why} (tool {_shown(tool)} not run)", 409)
                session.calls += 1
                call_id = f"call_{session.calls}"
                step = await session.episode.step(AgentTurn(tool_calls=[ToolCallRequest(call_id, tool, arguments)]))
        result = next((m["content"] for m in step.messages if m.get("role") == "tool" and m.get("tool_call_id") == call_id), None)
        return PlainTextResponse(result if result is not None else f"error: the attempt ended ({_finish(session.episode)}) before the call ran")

    async def verify(self, request: Request, body: VerifyRequest) -> VerifyResponse:
        session_id = request.session.get(SESSION_ID_KEY, "")
        session = self._sessions.get(session_id)
        if session is None:
            raise HTTPException(409, "verify: no attempt in this session (/seed_session first, or it was closed idle)")
        row_task = (body.model_extra or {}).get("task_id")
        if row_task is not None and row_task != session.episode.task.id:
            raise HTTPException(409, f"verify: the row is task {_shown(row_task)}, this session's attempt is task {session.episode.task.id}")
        async with session.request(), session.lock:
            if session.closed:
                raise HTTPException(409, "verify: the attempt was closed before it was verified (seeded over, or idle)")
            if session.answer is None:  # the first verify grades; one repeated (or raced) gets the same answer
                session.answer = await self._grade(session, body)
        return VerifyResponse.model_validate(_writable(body.model_dump(mode="json")) | session.answer)

    async def _grade(self, session: _Session, body: VerifyRequest) -> dict[str, Any]:
        """End the attempt with the agent's closing message, grade it, record it and close its sandbox: what the answer
        adds to the request it echoes (reward, task, finish reason, verdict; NeMo Gym's failure mark on a system error)."""
        episode = session.episode
        if episode.outcome is None:
            await episode.step(AgentTurn(text=_closing_text(body), done=True))
        outcome = episode.outcome
        assert outcome is not None
        await episode.close()
        verdict = outcome.verdict
        failed = verdict.system_error is not None or verdict.reward is None
        if failed:
            log.warning("task %s: system error: %s", episode.task.id, verdict.system_error)
        answer: dict[str, Any] = {
            "reward": 0.0 if failed else float(verdict.reward),
            "task_id": episode.task.id,
            "finish_reason": _finish(episode),
            "verdict": verdict.to_json() if self.config.reveal_verdict else verdict_summary(verdict),
        }
        if failed:
            answer[NG_FAILURE_CLASS_KEY] = SYSTEM_ERROR
        if self._records is not None:
            self._records.record(episode.task, verdict, outcome.trajectory, outcome.timings, session.agent)
        return answer

    # -- sessions ----------------------------------------------------------------------------------------

    async def _shut(self) -> None:
        """When the server stops: every open attempt closed, the records file and the backend released."""
        for session_id in list(self._sessions):
            await self._close(session_id, "the server stopped")
        if self._records is not None:
            self._records.close()
            print(f"[groundstate nemo-gym] records written to {self._records.path}", flush=True)
        if self._backend is not None:
            self._backend.close()

    async def _close(self, session_id: str, why: str) -> None:
        """Forget a session; an attempt not verified is abandoned (after the request it is serving) and its sandbox closed."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        async with session.lock:
            if session.answer is not None:  # verified (perhaps by a request that held the lock until now): nothing is open
                return
            session.closed = True
            log.warning("task %s: attempt abandoned (%s), not graded", session.episode.task.id, why)
            await session.episode.close()

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        """Close the sessions that went `idle_timeout` seconds with no request in flight (an agent that never verified),
        and forget verified ones as long after their last request."""
        while self._sessions:
            await asyncio.sleep(min(self.config.idle_timeout, 5.0))
            now = time.monotonic()
            for session_id, session in list(self._sessions.items()):
                if session.busy == 0 and now - session.used > self.config.idle_timeout:
                    await self._close(session_id, f"idle for {self.config.idle_timeout:g} s")


def _closing_text(body: VerifyRequest) -> str:
    """The agent's last message, if the response ends with one (else, e.g. NeMo Gym's `max_steps` ran out: none): its
    text, or its refusal."""
    output = body.response.output
    last = output[-1] if output else None
    if last is None or getattr(last, "type", None) != "message" or getattr(last, "role", None) != "assistant":
        return ""
    content = last.content
    if isinstance(content, str):
        return valid_text(content)
    parts = [getattr(c, "text", None) or getattr(c, "refusal", None) for c in content]
    return valid_text("".join(p for p in parts if isinstance(p, str)))


def _writable(value: Any) -> Any:
    """`value` (JSON) with every text made valid (a lone surrogate becomes U+FFFD), so that the answer can be written."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list):
        return [_writable(v) for v in value]
    if isinstance(value, dict):
        return {valid_text(k): _writable(v) for k, v in value.items()}
    return value


def _agent_name(extra: dict[str, Any] | None) -> str | None:
    """The row's `agent_ref` name, as records name the agent: one printable line of at most `MAX_NAME` characters."""
    ref = (extra or {}).get("agent_ref")
    name = ref.get("name") if isinstance(ref, dict) else None
    return name if isinstance(name, str) and 0 < len(name) <= MAX_NAME and name.isprintable() and valid_text(name) == name else None


def _finish(episode: SteppedEpisode) -> str | None:
    outcome = episode.outcome
    return outcome.trajectory.finish_reason if outcome is not None and outcome.trajectory is not None else None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
