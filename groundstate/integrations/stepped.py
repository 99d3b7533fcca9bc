"""An attempt whose agent is outside: `attempt.play` runs as ever, and each agent turn is handed in by a caller.

Protocols that step an environment (Gymnasium's `step(action)`, OpenEnv's `step`) invert groundstate's loop,
where the episode asks the agent for its turn. `SteppedEpisode` runs `play` in a task whose agent waits for
`step(turn)`: so the episode loop, the limits and finish reasons, the user simulator, the grading bound and
the system-error rules are exactly those of `groundstate run`, and so is the verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import AgentTurn, AttemptObserver, Domain, EpisodeLimits, Judge, UserSimulator
from groundstate.worlds.attempt import Outcome, play


@dataclass
class Step:
    """The messages added to the conversation since the agent was last asked: its own turn as the episode
    recorded it (the first, an assistant message in the OpenAI format, its tool calls with their ids), then what
    came back (tool results, the user's reply); at the start, the opening conversation. Once the attempt has
    ended, also its outcome."""

    messages: list[dict[str, Any]]
    outcome: Outcome | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)  # the tools on offer (OpenAI format)

    @property
    def done(self) -> bool:
        return self.outcome is not None


class _Asked:
    """The episode's request for the agent's next turn: the conversation so far, and where to put the turn."""

    def __init__(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]):
        self.conversation, self.tools = conversation, tools
        self.turn: asyncio.Future[AgentTurn] = asyncio.get_running_loop().create_future()


class _OutsideAgent:
    def __init__(self) -> None:
        self.asked: asyncio.Queue[_Asked] = asyncio.Queue()

    async def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        request = _Asked(conversation, tools)
        await self.asked.put(request)
        return await request.turn


class SteppedEpisode:
    """One attempt of `task`, played by `attempt.play`, its agent's turns given by `step`. Not thread-safe: one
    caller at a time, on one event loop.

    `start()` returns the opening conversation (or, if the attempt ended before the agent was asked, e.g. the
    sandbox could not be opened, its outcome); `step(turn)` the messages the turn produced and, at the end, the
    outcome (trajectory and verdict); `close()` abandons an unfinished attempt (its environment is closed).
    `observer` sees the grading, as `play`'s does; `blame`: a failed verdict says where it went wrong, as records do."""

    def __init__(
        self,
        task: Task,
        domain: Domain,
        backend: Backend,
        user: UserSimulator | None,
        limits: EpisodeLimits = EpisodeLimits(),
        judge: Judge | None = None,
        observer: AttemptObserver | None = None,
        blame: bool = False,
    ):
        self.task = task
        self._agent = _OutsideAgent()
        self._args = (task, domain, self._agent, user, limits)
        self._kw = {"backend": backend, "judge": judge, "observer": observer, "blame": blame}
        self._play: asyncio.Task[Outcome] | None = None
        self._pending: _Asked | None = None
        self._seen = 0  # messages of the conversation the agent has been shown
        self.tools: list[dict[str, Any]] = []
        self.outcome: Outcome | None = None

    async def start(self) -> Step:
        if self._play is not None:
            raise RuntimeError("the episode has already started")
        self._play = asyncio.create_task(play(*self._args, **self._kw))
        return await self._next()

    async def step(self, turn: AgentTurn) -> Step:
        if self.outcome is not None:
            raise RuntimeError("the episode is over")
        if self._pending is None:
            raise RuntimeError("step before start")
        pending, self._pending = self._pending, None
        if not pending.turn.done():  # done: the attempt's time limit ran out while the agent was thinking (its wait
            pending.turn.set_result(turn)  # was cancelled); the turn is too late and the episode is graded as it is
        return await self._next()

    async def _next(self) -> Step:
        assert self._play is not None
        asked = asyncio.ensure_future(self._agent.asked.get())
        await asyncio.wait({asked, self._play}, return_when=asyncio.FIRST_COMPLETED)
        if asked.done():
            request = asked.result()
            self._pending, self.tools = request, request.tools
            messages = request.conversation
        else:
            asked.cancel()
            self.outcome = self._play.result()
            messages = self.outcome.trajectory.messages if self.outcome.trajectory is not None else []
        new = [dict(m) for m in messages[self._seen :]]
        self._seen = len(messages)
        return Step(new, self.outcome, self.tools)

    async def close(self) -> None:
        """Abandon the attempt if it is still running (play closes its environment as it unwinds); idempotent."""
        if self._play is not None and not self._play.done():
            self._play.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # abandoned: its result no longer matters
                await self._play
