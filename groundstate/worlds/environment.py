"""The environment of a SQL domain's attempt: a private sandbox of the task's template, the domain's tools called
in-process, graded against the golden change set.

Execution policy, owned here: on SQLite a tool call runs on the event loop (it is in-process and fast); on other
backends (PostgreSQL, whose calls wait on the network) in a worker thread; with an attempt time limit in a daemon
thread, so that a call that alone outlasts the limit can be abandoned: its query is interrupted and the attempt
ends with `EpisodeHang` (a hang of the harness, a system error). A call that fails because the sandbox's
connection died (a server restart) raises `SandboxLost`: the agent is never shown a dead database.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from typing import Any

from groundstate.deadlines import bounded, in_daemon_thread, within
from groundstate.grading.grader import Grader, grader_for
from groundstate.state.base import Backend, Sandbox, World
from groundstate.state.changes import ChangeSet
from groundstate.tasks import Task
from groundstate.types import EpisodeHang, EpisodeLimits, Judge, SandboxLost, ToolResult, Trajectory, Verdict


class SqlEnvironment:
    """One attempt's sandbox of a SQL domain (see the module docstring); `open` builds one from a task.

    Made directly from an open sandbox (`SqlEnvironment(task, sandbox)`), it grades with that sandbox's backend's
    grader and closes the sandbox when it is closed.
    """

    def __init__(self, task: Task, sandbox: Sandbox, limits: EpisodeLimits = EpisodeLimits(), grader: Grader | None = None):
        if sandbox.template.owner is None:
            raise ValueError("the sandbox has no backend to replay the gold solution on")
        self.task, self.sandbox, self.limits = task, sandbox, limits
        self.domain: World = sandbox.template.domain
        self.grader = grader or grader_for(sandbox.template.owner)
        self.offload = sandbox.template.backend != "sqlite"

    @classmethod
    async def open(cls, task: Task, domain: World, backend: Backend, limits: EpisodeLimits = EpisodeLimits()) -> SqlEnvironment:
        """A fresh sandbox of the task's template, its golden state computed first.

        The golden state (cached per task) is computed before the attempt takes its sandbox: replaying gold needs
        a sandbox of its own, and an attempt that held one while waiting for another could deadlock a bounded
        pool (every slot held by an attempt waiting to grade). It is grading, so it runs under the grading bound,
        in a thread so that the bound can fire (a replay past it finishes there, unawaited); once cached, it costs
        nothing and no thread.
        """
        grader = grader_for(backend)
        offload = backend.name != "sqlite"  # PostgreSQL calls block on the network: keep them off the event loop
        template = await asyncio.to_thread(backend.prepare, domain, task.patch) if offload else backend.prepare(domain, task.patch)
        if grader.cached(task, template) is None:
            await bounded(asyncio.to_thread(grader.golden, task, template), limits.grade_timeout, f"the golden replay of {task.id}")
        sandbox = await _open_or_release(backend.open, template) if offload else backend.open(template)
        return cls(task, sandbox, limits, grader)

    def initial_messages(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.domain.system_prompt()}, {"role": "user", "content": self.task.instruction}]

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.domain.tools.openai_schemas()

    def _call(self, name: str, arguments: Any) -> ToolResult:
        """One in-process tool call from a worker thread, holding the sandbox open until the call returns."""
        with self.sandbox.in_use():
            return self.domain.tools.call(self.sandbox.connection, name, arguments)

    async def call_tool(self, name: str, arguments: Any) -> ToolResult:
        timeout = self.limits.timeout
        if timeout is not None:
            result = await within(
                in_daemon_thread(self._call, name, arguments),
                timeout,
                lambda: EpisodeHang(f"tool {name} did not return within the attempt time limit ({timeout:g} s)"),
                on_timeout=self.sandbox.interrupt,
            )  # a tool stuck in a query: ask the database to abandon it
        elif self.offload:
            result = await asyncio.to_thread(self._call, name, arguments)
        else:
            result = self.domain.tools.call(self.sandbox.connection, name, arguments)
        if not result.ok and self.sandbox.connection.broken:  # not the agent's doing: stop rather than show it a dead database
            raise SandboxLost(f"the sandbox's database connection was lost during tool {name}: {result.content}")
        return result

    async def grade(self, trajectory: Trajectory | None, judge: Judge | None = None) -> Verdict:
        # in a thread on every backend, so that the attempt's grading bound can fire while the grader works; the grader
        # holds the sandbox (`in_use`), so a close at the bound interrupts it and releases the sandbox only after it
        return await asyncio.to_thread(self._grade, trajectory, judge)

    def _grade(self, trajectory: Trajectory | None, judge: Judge | None) -> Verdict:
        with self.sandbox.in_use():
            return self.grader.grade(self.task, self.sandbox, trajectory, judge)

    def user_tools(self) -> None:
        """None: the user of this world has no tools of its own."""
        return None

    async def changes(self) -> ChangeSet:
        if self.offload:
            return await asyncio.to_thread(self._changes)
        return self.sandbox.changes()

    def _changes(self) -> ChangeSet:
        with self.sandbox.in_use():
            return self.sandbox.changes()

    async def state_digest(self) -> str:
        """The hash of the change set so far (the rows the attempt changed, as `changes()` gives them)."""
        return hashlib.sha256(json.dumps((await self.changes()).to_json(), sort_keys=True, default=str).encode()).hexdigest()

    async def fork(self) -> SqlEnvironment:
        """A new environment of the same task on a fork of this one's sandbox (`Backend.fork`: its rows, change log and
        sequences), graded by the same grader against the same golden state, under the same limits; see
        `Environment.fork`. Closing either leaves the other as it is."""
        owner = self.sandbox.template.owner
        assert owner is not None  # checked at construction
        if self.offload:  # PostgreSQL: a CREATE DATABASE, off the event loop
            sandbox = await _open_or_release(self._fork, owner)
        else:
            sandbox = self._fork(owner)
        return SqlEnvironment(self.task, sandbox, self.limits, self.grader)

    def _fork(self, owner: Backend) -> Sandbox:
        with self.sandbox.in_use():
            return owner.fork(self.sandbox)

    async def close(self) -> None:
        if self.offload:
            await asyncio.to_thread(self.sandbox.close)
        else:
            self.sandbox.close()


async def _open_or_release(opener: Callable[..., Sandbox], *args: Any) -> Sandbox:
    """`opener(*args)` (`backend.open`, a fork) in a thread. If the caller is cancelled while the thread opens it (a
    rollout's deadline, a time limit), the thread still finishes: the sandbox it opened is then closed, since nobody will
    ever hold it."""
    opening = asyncio.ensure_future(asyncio.to_thread(opener, *args))
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(_close_if_opened)
        raise


def _close_if_opened(done: asyncio.Future[Any]) -> None:
    if not done.cancelled() and done.exception() is None:
        done.result().close()
