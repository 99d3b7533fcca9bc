"""Gymnasium: groundstate tasks as a text environment, registered as `groundstate/Text-v0`.

    import gymnasium as gym
    import groundstate.integrations.gymnasium  # registers the id (or gym.make("groundstate.integrations.gymnasium:groundstate/Text-v0"))

    env = gym.make("groundstate/Text-v0", tasks="kiosk")
    obs, info = env.reset(seed=0)                      # or options={"task_id": "kiosk-cancel-001"}
    obs, reward, terminated, truncated, info = env.step('<tool_call>{"name": "cancel_order", "arguments": {"order_id": 1014}}</tool_call>')

- `reset` opens a fresh sandbox for a task (drawn with the environment's seeded generator from the selected
  tasks, or `options["task_id"]`); the observation is the opening conversation as text (the domain's policy,
  then the instruction), and `info` has `task_id`, `messages` (the same, as chat messages) and `tools` (the
  tool schemas, OpenAI format). `options` that name no task (not a dict, a `task_id` that is not one of the
  tasks or not text) are refused before anything else, and the running episode goes on.
- an episode holds its sandbox until it ends, the next `reset`, `close()`, or, for an environment dropped without
  `close()`, until it is garbage-collected or the process exits. Environments stepped side by side (a vector of
  them) each hold one: a PostgreSQL backend's pool grows to them, and when the server has no connection left,
  `reset` says so and what to set, where it would otherwise wait forever.
- an action is the assistant's message as a model writes it: text, with tool calls in `<tool_call>` blocks
  (Hermes JSON or Qwen3-Coder XML, as `hf:` models are read); a message without calls goes to the user.
  The observation is what came back (tool results, the user's reply); `info["messages"]` is everything the
  turn added to the conversation as chat messages: the assistant's message as it was read (OpenAI format, its
  tool calls with the ids the tool results answer), then what came back.
- the episode is `groundstate run`'s (`attempt.play`, through `SteppedEpisode`): the same user (the task's
  scripted user by default), limits, finish reasons and grader. The reward is 0.0 until the episode ends,
  then the verdict: 1.0 or 0.0, and NaN (never 0) for a system error or an unjudged rubric task, with
  `info["verdict"]` in full. `terminated` when the agent or the user ended it, `truncated` when a limit did.
"""

from __future__ import annotations

import math
import string
import weakref
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from groundstate.agents import make_user
from groundstate.agents.toolcall_format import parse_response
from groundstate.integrations.loop import close_quietly, run_sync
from groundstate.integrations.stepped import Step, SteppedEpisode
from groundstate.integrations.watch import NoToolCalls
from groundstate.specs import UserSpec, parse_user
from groundstate.state import make_backend
from groundstate.state.base import Backend
from groundstate.state.postgres import PoolExhausted, PostgresBackend
from groundstate.tasks import Task
from groundstate.types import AgentTurn, AttemptObserver, Domain, EpisodeLimits
from groundstate.worlds.attempt import prepare_domains

ENV_ID = "groundstate/Text-v0"
_no_tool_calls = NoToolCalls(
    "Gymnasium",
    "An action's tool calls are read from <tool_call> blocks (Hermes JSON or Qwen3-Coder XML): check that the model is shown "
    "the tools (info['tools']) and writes its calls in one of those forms.",
)
LIMIT_REASONS = frozenset({"max_turns", "max_tool_calls", "max_tokens", "timeout"})


class UnicodeText(spaces.Text):
    """Text of any Unicode characters up to `max_length`; `sample()` draws printable ASCII (gymnasium's `Text`
    samples from a finite charset, which the text of tasks and tool results is not)."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | None = None):
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


def render_messages(messages: list[dict[str, Any]]) -> str:
    """Messages other than the assistant's as plain text, one block each, headed by its role (and a tool
    result's tool)."""
    blocks = []
    for m in messages:
        if m["role"] == "assistant":
            continue
        head = f"[tool {m.get('name', '')}]" if m["role"] == "tool" else f"[{m['role']}]"
        blocks.append(f"{head}\n{m.get('content') or ''}")
    return "\n\n".join(blocks)


def _as_text(message: dict[str, Any]) -> str:
    calls = "".join(f"\n<tool_call>{c['function']['name']} {c['function']['arguments']}</tool_call>" for c in message.get("tool_calls", []))
    return (message.get("content") or "") + calls


class TextEnv(gym.Env[str, str]):
    """The environment of `groundstate/Text-v0` (see the module docstring). `tasks` is a `--tasks` selector or
    a list of (task, domain) pairs; `backend` a `Backend` or a name; `user` a `--user` spec; `observer` sees each
    episode's grading (`AttemptObserver`)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # a transcript has no frame rate; gymnasium asks for one

    def __init__(
        self,
        tasks: str | list[tuple[Task, Domain]] = "kiosk",
        backend: Backend | str = "sqlite",
        limits: EpisodeLimits = EpisodeLimits(),
        user: UserSpec | str = "scripted",
        render_mode: str | None = None,
        max_action_chars: int = 32_768,
        max_observation_chars: int = 10_000_000,
        observer: AttemptObserver | None = None,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        user = parse_user(user)
        if isinstance(tasks, str):
            from groundstate.worlds.selectors import select_tasks

            tasks = select_tasks(tasks)
        if not tasks:
            raise ValueError("no tasks selected")
        self.tasks = list(tasks)
        self._by_id = {t.id: (t, d) for t, d in self.tasks}
        self.backend = make_backend(backend) if isinstance(backend, str) else backend
        prepare_domains([d for _, d in self.tasks], self.backend)
        self.limits, self.user, self.render_mode = limits, user, render_mode
        self.observer = observer
        self.action_space = UnicodeText(max_action_chars)
        self.observation_space = UnicodeText(max_observation_chars)
        self._episode: SteppedEpisode | None = None
        self._release: weakref.finalize | None = None  # closes the running episode once, even if `close()` is never called
        self._transcript: list[dict[str, Any]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        task_id = (options or {}).get("task_id")
        if task_id is not None and not isinstance(task_id, str):
            raise TypeError(f"options['task_id'] must be a task id (text), got {type(task_id).__name__}")
        if task_id is not None and task_id not in self._by_id:
            raise ValueError(f"options['task_id']: {task_id!r} is not one of this environment's tasks")
        super().reset(seed=seed)
        self._abandon()
        task, domain = self._by_id[task_id] if task_id is not None else self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self._make_room()
        episode = self._episode = SteppedEpisode(task, domain, self.backend, make_user(self.user, task), self.limits, observer=self.observer)
        # a dropped environment's episode would wait for its next step forever, holding its sandbox: the finaliser ends it
        self._release = weakref.finalize(self, close_quietly, episode.close)
        step = run_sync(episode.start())
        if step.done:  # the sandbox could not be opened: nothing to play, and no verdict on an agent
            assert step.outcome is not None
            raise RuntimeError(f"task {task.id}: the attempt could not start: {step.outcome.verdict.system_error}")
        self._transcript = list(step.messages)
        return render_messages(step.messages), {"task_id": task.id, "messages": step.messages, "tools": step.tools}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._episode is None or self._episode.outcome is not None:
            raise RuntimeError("step() needs a running episode: call reset() first")
        if not isinstance(action, str):
            raise TypeError(f"an action is the assistant's message as text, got {type(action).__name__}")
        parsed = parse_response(action, self._episode.tools, id_offset=sum(len(m.get("tool_calls", [])) for m in self._transcript))
        turn = AgentTurn(text=parsed.content, tool_calls=parsed.tool_calls)
        step: Step = run_sync(self._episode.step(turn))
        self._transcript.extend(step.messages)
        info: dict[str, Any] = {"task_id": self._episode.task.id, "messages": step.messages}
        if not step.done:
            return render_messages(step.messages), 0.0, False, False, info
        assert step.outcome is not None
        verdict = step.outcome.verdict
        info["verdict"] = verdict.to_json()
        trajectory = step.outcome.trajectory
        _no_tool_calls.episode(len(trajectory.tool_calls) if trajectory is not None else 0)
        info["finish_reason"] = trajectory.finish_reason if trajectory is not None else None
        reward = math.nan if verdict.reward is None else float(verdict.reward)
        truncated = info["finish_reason"] in LIMIT_REASONS
        return render_messages(step.messages), reward, not truncated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n\n".join(render_messages([m]) if m["role"] != "assistant" else f"[assistant]\n{_as_text(m)}" for m in self._transcript)

    def _make_room(self) -> None:
        """Room in a PostgreSQL pool for this episode's sandbox (and a new task's golden replay): the episodes of other
        environments release theirs only when they are stepped to the end, so a full pool must grow, or reset says so."""
        backend = self.backend
        if not isinstance(backend, PostgresBackend):
            return
        try:
            backend.reserve(backend.in_use + 1)
        except PoolExhausted as e:
            raise RuntimeError(
                f"every running episode holds a PostgreSQL sandbox until it ends or its environment is closed: {e}. Run at most "
                f"{e.most} episodes at once on this server (close environments you are done with), or raise its max_connections"
            ) from None

    def _abandon(self) -> None:
        self._episode = None
        release, self._release = self._release, None
        if release is not None:
            release()  # closes the episode (its sandbox), once

    def close(self) -> None:
        self._abandon()


def register() -> None:
    """Register `groundstate/Text-v0` with gymnasium (done when this module is imported; idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=TextEnv, nondeterministic=False)


register()
