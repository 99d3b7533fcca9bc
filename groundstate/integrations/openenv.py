"""OpenEnv 0.10: groundstate tasks served through `openenv` (reset / step / state over its WebSocket protocol), so
OpenEnv's clients (`MCPToolClient`, `GenericEnvClient`) and the trainers built on them can train on them.

    groundstate serve --protocol openenv --domain kiosk --port 8000

    from openenv.core.mcp_client import MCPToolClient
    from groundstate.integrations.openenv import ReplyAction

    async with MCPToolClient(base_url="http://127.0.0.1:8000") as env:
        first = await env.reset(task_id="kiosk-cancel-001")   # or seed=N: a task drawn from the domain
        tools = await env.list_tools()
        result = await env.call_tool("cancel_kiosk_order", order_id=1014)
        final = await env.step(ReplyAction(content="Order 1014 is cancelled."))
        final.done, final.reward                             # True, 1.0

What goes where:

- `reset(task_id=..., seed=..., episode_id=...)` opens a fresh sandbox for the task (`task_id`, or `split` and
  `index` of the Task API, else one drawn with `seed`, else the next in order); the observation (`GroundstateObservation`) has `task_id`, `messages`
  (the domain's policy, the instruction) and `tool_schemas` (OpenAI format);
- `list_tools` and `call_tool` are OpenEnv's MCP actions; the domain's tools are the only tools (never reset,
  step, state or close). A call is one agent turn of the episode; a call the agent got wrong (bad arguments,
  an unknown tool) is a result holding the error text, as `groundstate run` shows it;
- `ReplyAction(content=...)` (an OpenEnv `Action`) is a message to the user: the task's user replies (in
  `observation["messages"]`) or ends the conversation;
- the reward comes only with `done`: 1.0 or 0.0, or None for a system error or an unjudged rubric task, with
  `observation["verdict"]`: the reward and the reasons by check name (`verdict_summary`), or, served with
  `reveal_verdict`, the whole verdict (golden-state diff, each failed check's SQL and expected rows: the answer
  to a task the client can reset to again); every observation before it has reward None. `GenericEnvClient`
  returns every field; `MCPToolClient` calls tools over HTTP `/mcp` in a session its WebSocket joins
  (`EpisodeTools`: the calls are the episode's own steps);
- the Task API (`list_splits`, `list_tasks`, `num_tasks`, `get_task`, `get_task_range`) lists the served splits
  (`integrations.splits.TaskSplits`).

The episode is `groundstate run`'s (`attempt.play` through `SteppedEpisode`): same user, limits, finish
reasons and grader. Each WebSocket session has its own environment and sandbox; sessions share the server's
backend. At most `max_sessions` sandboxes are open at once (`SandboxSlots`), the stateless HTTP `/reset`'s
included: a reset that finds every one held is refused (503 over HTTP), never queued. An HTTP session
(`openenv/session/create`) with no WebSocket attached is closed after `idle_timeout` seconds without a request
(OpenEnv's reaper), so one a client forgot frees its slot. A request a session
cannot take (a step before reset, a reset naming no task) is the client's error: an error message over
WebSocket, one line of 409 or 422 over HTTP, never a logged traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import uuid
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal

from openenv.core.env_server.interfaces import Environment as OpenEnvEnvironment
from openenv.core.env_server.mcp_types import CallToolObservation, ListToolsObservation, Tool
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field
from starlette.requests import Request

from groundstate.agents import make_user
from groundstate.agents.base import valid_text
from groundstate.integrations.loop import run_sync
from groundstate.integrations.splits import SplitError, TaskSplits
from groundstate.integrations.stepped import Step, SteppedEpisode
from groundstate.integrations.verdict_view import verdict_summary
from groundstate.jsontext import finite
from groundstate.pipeline.served import ServedEpisodes
from groundstate.specs import UserSpec, parse_user
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import AgentTurn, AttemptObserver, Domain, EpisodeLimits, ToolCallRequest
from groundstate.worlds.attempt import prepare_domains

log = logging.getLogger(__name__)
MAX_NAME = 200  # characters of a client's declared name or an episode id
DEFAULT_IDLE_TIMEOUT = 5 * 60.0  # seconds an HTTP session with no WebSocket attached may go without a request


class EpisodeRequestError(ValueError):
    """A request this session cannot take: a reset naming no task of the server, a step with no episode running,
    a session OpenEnv closed. The client's mistake: an error message over WebSocket, `status` and one line over
    HTTP."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class SandboxSlots:
    """The sandboxes one server's environments may hold at once: `size` (`max_sessions`). An environment takes a
    slot at its first reset, or the reset is refused with 503 (over WebSocket, an error message) when none is free:
    never queued, so a flood of stateless HTTP resets costs answers, not a sandbox (a database clone) each, nor
    the threads that would wait for one. The environment keeps its slot across its resets and gives it back once
    it is closed and its sandbox with it (a WebSocket session's as it ends, an HTTP reset's just after it answers).
    Thread-safe."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"max_sessions must be at least 1, got {size}")
        self.size, self.held = size, 0
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            if self.held >= self.size:
                message = f"at capacity: this server keeps at most {self.size} sandboxes open and sessions hold every one; retry once one ends"
                raise EpisodeRequestError(message, 503)
            self.held += 1

    def give(self) -> None:
        with self._lock:
            self.held -= 1


class ReplyAction(Action):
    """A message to the user (what a model writes when it does not call a tool)."""

    type: Literal["reply"] = "reply"
    content: str = Field(description="The message to the user")


class GroundstateAction(Action):
    """Every action the server takes: OpenEnv's `list_tools` and `call_tool` payloads, and `reply`."""

    type: Literal["list_tools", "call_tool", "reply"]
    tool_name: str | None = Field(default=None, description="call_tool: the tool")
    arguments: dict[str, Any] = Field(default_factory=dict, description="call_tool: its arguments")
    content: str | None = Field(default=None, description="reply: the message to the user")


class GroundstateObservation(Observation):
    """What `reset` and a reply return (`done` and `reward` travel beside it, as in every OpenEnv observation)."""

    task_id: str | None = Field(default=None, description="The task of this episode")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="Chat messages added since the agent last acted")
    tool_schemas: list[dict[str, Any]] = Field(default_factory=list, description="reset: the tools on offer (OpenAI format)")
    verdict: dict[str, Any] | None = Field(
        default=None, description="When done: the reward and reasons by check name (the whole verdict if served so)"
    )
    finish_reason: str | None = Field(default=None, description="When done: why the episode ended")


class GroundstateToolObservation(CallToolObservation):
    """What a `call_tool` returns: OpenEnv's tool observation (`result` is what the agent reads), with the same
    episode fields as `GroundstateObservation`."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="Chat messages the call added")
    verdict: dict[str, Any] | None = Field(default=None, description="When the call ended the episode: as GroundstateObservation's")
    finish_reason: str | None = Field(default=None, description="When done: why the episode ended")


class GroundstateOpenEnv(OpenEnvEnvironment[GroundstateAction, GroundstateObservation, State]):
    """One session's environment (see the module docstring); `environment_factory` makes the class a server
    instantiates per session, all sharing the read-only `tasks` and `by_id` (the same tasks by id). Async throughout: the server awaits `reset_async` and `step_async` on its loop,
    where the episode runs; the sync `reset` and `step` run them on the adapters' loop instead (for use in
    process, without a server), so one instance is driven one way or the other, not both. `reveal_verdict`:
    the `done` observation carries the whole verdict, not `verdict_summary`'s. `slots`: shared by a server's
    instances, each taking one at its first reset (see `SandboxSlots`). Once closed, an instance opens no sandbox
    again, and gives its slot back once the sandbox it had is closed. `observer` sees each episode's grading
    (`AttemptObserver`)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        tasks: Sequence[tuple[Task, Domain]],
        by_id: Mapping[str, tuple[Task, Domain]],
        backend: Backend,
        limits: EpisodeLimits,
        user: UserSpec | str,
        name: str,
        reveal_verdict: bool = False,
        slots: SandboxSlots | None = None,
        observer: AttemptObserver | None = None,
        records: ServedEpisodes | None = None,
        splits: TaskSplits | None = None,
    ):
        super().__init__()
        self._tasks, self._by_id = tasks, by_id
        self._splits = splits if splits is not None else TaskSplits.default([t for t, _ in tasks])
        self._backend, self._limits, self._user, self._name = backend, limits, parse_user(user), name
        self._reveal, self._observer, self._records = reveal_verdict, observer, records
        self._agent: str | None = None  # the name the client declared at its last reset
        self._slots, self._slot, self._slot_lock = slots, False, threading.Lock()
        self._episode: SteppedEpisode | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resets = 0  # resets in flight: the last of them, not a close meanwhile, gives the slot back
        self._state = State()
        self._next_task = 0
        self._closed = False
        self._stepping: asyncio.Lock | None = None  # `_serial`: one reset or step at a time

    # -- the OpenEnv API ------------------------------------------------------------------------------

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        agent: str | None = None,
        split: str | None = None,
        index: int | None = None,
        **_: Any,
    ) -> Observation:
        if task_id is not None and (not isinstance(task_id, str) or task_id not in self._by_id):
            raise EpisodeRequestError(f"reset: task_id {_shown(task_id)} is not one of this server's tasks", 422)  # the running episode goes on
        if (split is None) != (index is None) or (split is not None and task_id is not None):
            raise EpisodeRequestError("reset: give split and index together (the Task API's address of a task), or task_id, not both", 422)
        if split is not None:
            try:
                task_id = self._splits.task(split, index).id
            except (SplitError, IndexError) as e:
                raise EpisodeRequestError(f"reset: {e}", 422) from None
        if seed is not None and not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
            raise EpisodeRequestError(f"reset: seed must be a non-negative integer, got {_shown(seed)}", 422)  # as OpenEnv's HTTP /reset
        if episode_id is not None and not (isinstance(episode_id, str) and 0 < len(episode_id) <= MAX_NAME and valid_text(episode_id) == episode_id):
            raise EpisodeRequestError(f"reset: episode_id must be text of 1 to {MAX_NAME} characters, got {_shown(episode_id)}", 422)
        if agent is not None and not (isinstance(agent, str) and 0 < len(agent) <= MAX_NAME and valid_text(agent) == agent):
            raise EpisodeRequestError(f"reset: agent (the client's name) must be text of 1 to {MAX_NAME} characters, got {_shown(agent)}", 422)
        self._refuse_if_closed()
        self._loop = asyncio.get_running_loop()
        async with self._serial():  # a step in flight (an HTTP /mcp call beside the WebSocket) ends before this reset starts
            return await self._reset(task_id, seed, episode_id, agent)

    async def _reset(self, task_id: str | None, seed: int | None, episode_id: str | None, agent: str | None) -> Observation:
        self._resets += 1
        try:
            await self._abandon()
            self._refuse_if_closed()
            if not self._slot and self._slots is not None:
                self._slots.take()
                self._slot = True
            if task_id is not None:
                task, domain = self._by_id[task_id]
            elif seed is not None:
                task, domain = self._tasks[random.Random(seed).randrange(len(self._tasks))]
            else:
                task, domain = self._tasks[self._next_task % len(self._tasks)]
                self._next_task += 1
            self._episode = episode = SteppedEpisode(
                task, domain, self._backend, make_user(self._user, task), self._limits, observer=self._observer, blame=self._records is not None
            )
            self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0, task_id=task.id)
            self._agent = agent
            step = await episode.start()
            self._refuse_if_closed()  # OpenEnv closed the session (from its thread) while the sandbox opened
        finally:
            self._resets -= 1
            if self._closed and self._resets == 0:  # the sandbox must not outlive the session, nor its slot the sandbox
                await self._shut()
        observation = GroundstateObservation(task_id=task.id, messages=step.messages, tool_schemas=step.tools)
        return self._final(task, step, observation) if step.done else observation

    async def step_async(self, action: Action, timeout_s: float | None = None, **_: Any) -> Observation:
        act = action if isinstance(action, GroundstateAction) else GroundstateAction.model_validate(action.model_dump())
        async with self._serial():  # a reset in flight ends first: the step is the episode's it started
            episode = self._episode  # a local: OpenEnv may close the session from its thread while this step runs
            if episode is None:
                # OpenEnv's HTTP /step makes a new environment for every request: over HTTP this is every step
                raise EpisodeRequestError(
                    "step before reset: this session has no episode (reset first, over the WebSocket /ws or in the session it joins: "
                    "HTTP /step and a /mcp call outside a session have none)",
                    409,
                )
            if act.type == "list_tools":
                return ListToolsObservation(tools=[_tool(s) for s in episode.tools])
            return await self._step(episode, act)

    async def _step(self, episode: SteppedEpisode, act: GroundstateAction) -> Observation:
        if episode.outcome is not None:
            raise EpisodeRequestError("the episode is over: reset to start another", 409)
        self._state.step_count += 1
        observation: GroundstateObservation | GroundstateToolObservation
        if act.type == "call_tool":
            name, call_id = act.tool_name or "", f"call_{self._state.step_count}"
            step = await episode.step(AgentTurn(tool_calls=[ToolCallRequest(call_id, name, dict(act.arguments))]))
            result = next((m["content"] for m in step.messages if m["role"] == "tool" and m.get("tool_call_id") == call_id), None)
            observation = GroundstateToolObservation(tool_name=name, result=result, messages=step.messages)
        else:
            step = await episode.step(AgentTurn(text=act.content or ""))
            observation = GroundstateObservation(task_id=episode.task.id, messages=step.messages)
        return self._final(episode.task, step, observation) if step.done else observation

    def _serial(self) -> asyncio.Lock:
        """One reset or step at a time: the WebSocket's and HTTP /mcp's share the session's episode."""
        if self._stepping is None:
            self._stepping = asyncio.Lock()
        return self._stepping

    # -- OpenEnv's Task API (`TaskProvider`): the served splits, for its samplers and eval harness ----------------

    def list_splits(self) -> list[dict[str, Any]]:
        return self._splits.describe()

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return self._task_api(self._splits.specs, split)

    def num_tasks(self, split: str) -> int:
        return len(self._task_api(self._splits.split, split).tasks)

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        return self._task_api(self._splits.spec, split, index)

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        return self._task_api(self._splits.specs, split, start, stop)

    @staticmethod
    def _task_api(method: Any, *args: Any) -> Any:
        """An unknown split is the client's mistake (422); an index outside one stays an `IndexError` (OpenEnv: 400)."""
        try:
            return method(*args)
        except SplitError as e:
            raise EpisodeRequestError(str(e), 422) from None

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None, **kw: Any) -> Observation:
        return run_sync(self.reset_async(seed, episode_id, task_id, **kw))

    def step(self, action: Action, timeout_s: float | None = None, **kw: Any) -> Observation:
        return run_sync(self.step_async(action, timeout_s, **kw))

    @property
    def state(self) -> State:
        return self._state

    @property
    def mcp_client(self) -> EpisodeTools:
        """What OpenEnv's HTTP /mcp asks of a session for `tools/list` and `tools/call` (`MCPToolClient` calls tools
        there, in the HTTP session its WebSocket is attached to)."""
        return EpisodeTools(self)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=self._name, description=f"groundstate tasks of {self._name}, graded on their final database state")

    def close(self) -> None:
        """Abandon a running episode (its sandbox is closed), give the sandbox slot back after it, and refuse any
        later reset: OpenEnv frees the session's slot as it closes it, while a WebSocket connection may still hold
        the instance (another client's `openenv/session/close` names it). The server calls this from a worker
        thread, or on its loop for the stateless HTTP requests (the close then finishes after the answer)."""
        self._closed = True
        loop = self._loop
        if loop is None or loop.is_closed() or (self._episode is None and self._resets == 0):  # no sandbox open, none opening
            self._give_slot()
            return
        if _on_thread_of(loop):
            closing = loop.create_task(self._shut())
            _closing.add(closing)  # the loop keeps only a weak reference: a task nobody holds may vanish mid-close
            closing.add_done_callback(_closing.discard)
        else:  # on the loop, where the episode lives: a reset in flight there sees the close at its next step
            asyncio.run_coroutine_threadsafe(self._shut(), loop).result(timeout=60)

    # -- helpers --------------------------------------------------------------------------------------

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise EpisodeRequestError("this session was closed: connect again for a new one", 409)

    async def _abandon(self) -> None:
        episode, self._episode = self._episode, None
        if episode is not None:
            await episode.close()

    async def _shut(self) -> None:
        """After `close`, on the loop: close the episode (its sandbox with it), then give the slot back, unless a
        reset is in flight (it does both as it leaves)."""
        await self._abandon()
        if self._resets == 0:
            self._give_slot()

    def _give_slot(self) -> None:
        with self._slot_lock:  # `close` may give it from OpenEnv's thread as a reset leaving on the loop does
            held, self._slot = self._slot, False
        if held:
            assert self._slots is not None
            self._slots.give()

    def _final(self, task: Task, step: Step, observation: GroundstateObservation | GroundstateToolObservation) -> Observation:
        assert step.outcome is not None
        verdict, trajectory = step.outcome.verdict, step.outcome.trajectory
        if verdict.system_error is not None:  # the client may be told no more than that: the operator reads it here
            log.warning("task %s: system error: %s", task.id, verdict.system_error)
        if self._records is not None:
            self._records.record(task, verdict, trajectory, step.outcome.timings, self._agent)
        observation.done = True
        observation.reward = None if verdict.reward is None else float(verdict.reward)
        observation.verdict = verdict.to_json() if self._reveal else verdict_summary(verdict)
        observation.finish_reason = trajectory.finish_reason if trajectory is not None else None
        return observation


class EpisodeTools:
    """A session's tools as OpenEnv's HTTP /mcp calls them: `list_tools` and `call_tool` are the episode's own steps
    (a call is one agent turn, as over the WebSocket). A call answers `{"data": the tool's result, "done", "reward",
    "verdict", "finish_reason"}`: `MCPToolClient.call_tool` returns `data`, a raw JSON-RPC client sees the rest. A
    stateless /mcp request (no session) has no episode: a JSON-RPC error saying so."""

    def __init__(self, env: GroundstateOpenEnv):
        self._env = env

    def is_connected(self) -> bool:
        return True  # nothing to connect: the tools are the episode's

    async def __aenter__(self) -> EpisodeTools:
        return self

    async def __aexit__(self, *_: Any) -> None:
        return None

    async def list_tools(self) -> list[Tool]:
        observation = await self._env.step_async(GroundstateAction(type="list_tools"))
        assert isinstance(observation, ListToolsObservation)
        return observation.tools

    async def call_tool(self, name: Any, arguments: Any = None) -> dict[str, Any]:
        if not isinstance(name, str) or not isinstance(arguments, dict | None):
            raise EpisodeRequestError("tools/call: name must be text and arguments an object", 422)
        observation = await self._env.step_async(GroundstateAction(type="call_tool", tool_name=name, arguments=arguments or {}))
        assert isinstance(observation, GroundstateToolObservation)
        return {
            "data": observation.result,
            "done": observation.done,
            "reward": observation.reward,
            "verdict": observation.verdict,
            "finish_reason": observation.finish_reason,
        }


_closing: set[asyncio.Task[None]] = set()


def _tool(schema: dict[str, Any]) -> Tool:
    fn = schema["function"]
    return Tool(name=fn["name"], description=fn.get("description", ""), input_schema=fn.get("parameters", {}))


def _shown(value: Any) -> str:
    """A client's value as an error message quotes it: one line, and short whatever was sent."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _on_thread_of(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def environment_factory(
    tasks: list[tuple[Task, Domain]],
    backend: Backend,
    limits: EpisodeLimits = EpisodeLimits(),
    user: UserSpec | str = "scripted",
    name: str = "groundstate",
    reveal_verdict: bool = False,
    max_sessions: int | None = None,
    observer: AttemptObserver | None = None,
    records: ServedEpisodes | None = None,
    splits: TaskSplits | None = None,
):
    """The per-session factory `openenv.core.env_server.create_app` takes: every session gets its own
    `GroundstateOpenEnv` over `tasks`, all on `backend` (each domain prepared on it once, here), all sharing
    `max_sessions` sandbox slots (None: no bound), `observer`, `records` (each finished episode written there) and
    `splits` (the Task API's; None: `TaskSplits.default`, whose tasks must all be among `tasks`)."""
    if not tasks:
        raise ValueError("no tasks to serve")
    served = {t.id for t, _ in tasks}
    splits = splits if splits is not None else TaskSplits.default([t for t, _ in tasks])
    for info in splits.describe():
        if missing := [t.id for t in splits.split(info["name"]).tasks if t.id not in served]:
            raise ValueError(f"split {info['name']!r} names tasks this server does not serve: {', '.join(missing[:3])}")
    user = parse_user(user)  # once, for every session
    slots = SandboxSlots(max_sessions) if max_sessions is not None else None
    prepare_domains([d for _, d in tasks], backend)
    lock = threading.Lock()  # the server may build sessions from several threads
    catalog = tuple(tasks)  # read-only, shared by every session: a session costs nothing per served task
    by_id = MappingProxyType({t.id: (t, d) for t, d in catalog})

    def make() -> GroundstateOpenEnv:
        with lock:
            return GroundstateOpenEnv(catalog, by_id, backend, limits, user, name, reveal_verdict, slots, observer, records, splits)

    return make


def create_app(
    tasks: list[tuple[Task, Domain]],
    backend: Backend,
    limits: EpisodeLimits = EpisodeLimits(),
    user: UserSpec | str = "scripted",
    max_sessions: int = 64,
    name: str = "groundstate",
    reveal_verdict: bool = False,
    records: ServedEpisodes | None = None,
    splits: TaskSplits | None = None,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
):
    """The OpenEnv FastAPI app serving `tasks` (what `groundstate serve --protocol openenv` runs with uvicorn): at most
    `max_sessions` sessions (OpenEnv's bound) and as many sandboxes open, HTTP resets included; the Task API at
    `/{name}/splits`, `/{name}/tasks`, ... over `splits`; an HTTP session (`openenv/session/create`, what
    `MCPToolClient` opens) with no WebSocket attached closed after `idle_timeout` seconds without a request; every
    finished episode written to `records` where given."""
    from fastapi.encoders import jsonable_encoder
    from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.types import ConcurrencyConfig
    from starlette.exceptions import HTTPException
    from starlette.websockets import WebSocketDisconnect

    factory = environment_factory(tasks, backend, limits, user, name, reveal_verdict, max_sessions, records=records, splits=splits)
    concurrency = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout)
    app = create_fastapi_app(factory, GroundstateAction, GroundstateObservation, concurrency_config=concurrency, env_name=name)

    async def refused(request: Request, error: EpisodeRequestError) -> JSONResponse:
        # a client's mistake over HTTP (a /step, which has no episode there), or a reset at capacity: one line, nothing logged
        return JSONResponse({"detail": str(error)}, status_code=error.status)

    # FastAPI's own answers to a request it refuses, but with the client's NaN or Infinity (JSON as Python reads it)
    # written as null where they echo it (a field's `input`; OpenEnv's 422 for an action, which holds its validation
    # errors): written as numbers they could not be, and the answer was a 500 with a traceback in the log
    async def invalid(request: Request, error: RequestValidationError) -> Response:
        return await request_validation_exception_handler(request, RequestValidationError(finite(jsonable_encoder(error.errors()))))

    async def http_error(request: Request, error: HTTPException) -> Response:
        return await http_exception_handler(request, HTTPException(error.status_code, finite(jsonable_encoder(error.detail)), error.headers))

    app.add_exception_handler(EpisodeRequestError, refused)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    _session_ids_checked(app)

    async def quiet_on_departed_clients(scope: Any, receive: Any, send: Any) -> None:
        # OpenEnv's WebSocket endpoint may close, after the session is torn down, a socket the client has already
        # closed (openenv-core 0.3 did, for every session), and the ASGI server logs a traceback: a client that left
        # is no error
        try:
            await app(scope, receive, send)
        except WebSocketDisconnect:
            if scope.get("type") != "websocket":
                raise

    return quiet_on_departed_clients


def _session_ids_checked(app: Any) -> None:
    """POST /mcp refuses a `session_id` that is not text with JSON-RPC's invalid-params error: OpenEnv 0.10's handler
    looks it up as a dict key, and a list or an object there was a 500 and a traceback in the log. Everything else
    goes on to OpenEnv's handler (the body is kept for it)."""
    from fastapi.routing import APIRoute
    from openenv.core.env_server.mcp_types import JsonRpcErrorCode, JsonRpcResponse

    index, route = next((i, r) for i, r in enumerate(app.router.routes) if isinstance(r, APIRoute) and r.path == "/mcp" and "POST" in r.methods)
    openenv_mcp = route.endpoint

    async def mcp(request: Request) -> Any:
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None  # OpenEnv's handler answers it
        params = body.get("params") if isinstance(body, dict) else None
        session_id = params.get("session_id") if isinstance(params, dict) else None
        if session_id is not None and not isinstance(session_id, str):
            rid = body.get("id") if isinstance(body.get("id"), str | int) and not isinstance(body.get("id"), bool) else None
            return JsonRpcResponse.error_response(JsonRpcErrorCode.INVALID_PARAMS, "session_id must be text", request_id=rid).model_dump()
        return await openenv_mcp(request)

    app.router.routes[index] = APIRoute("/mcp", mcp, methods=["POST"])


def serve(
    tasks: list[tuple[Task, Domain]],
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: EpisodeLimits = EpisodeLimits(),
    user: UserSpec | str = "scripted",
    max_sessions: int = 64,
    allow_remote: bool = False,
    name: str = "groundstate",
    reveal_verdict: bool = False,
    records: ServedEpisodes | None = None,
    splits: TaskSplits | None = None,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> None:
    """Serve `tasks` over OpenEnv's protocol with uvicorn until interrupted (loopback only unless `allow_remote`:
    OpenEnv's protocol has no authentication), each finished episode written to `records` where given. The log
    (uvicorn's, OpenEnv's, warnings) goes to stderr through `logging_to_stderr`: a stderr nobody reads never stops
    the server."""
    import sys

    import uvicorn

    from groundstate.tools.listen import check_host
    from groundstate.tools.stderr_log import logging_to_stderr

    check_host(host.strip("[]"), allow_remote)
    app = create_app(tasks, backend, limits, user, max_sessions, name, reveal_verdict, records, splits, idle_timeout)
    print(f"[groundstate openenv] serving {len(tasks)} tasks of {name} at http://{host}:{port} (WebSocket /ws)", file=sys.stderr, flush=True)
    if records is not None:
        print(f"[groundstate openenv] every finished episode is recorded in {records.path}", file=sys.stderr, flush=True)
    with logging_to_stderr():
        # log_config None: uvicorn's loggers keep no handler of their own and reach the root logger's. No per-message
        # deflate: an episode's messages are a few kB of JSON, and compressing them cost more server CPU per session
        # than it saved (benchmarks/protocols.py); the client's offer of it is declined, as the protocol allows.
        uvicorn.run(
            app,
            host=host.strip("[]"),
            port=port,
            log_level="warning",
            log_config=None,
            ws_max_size=16 * 1024 * 1024,
            ws_per_message_deflate=False,
        )
