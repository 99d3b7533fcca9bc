"""Past the grading bound the grader's thread may still be reading the sandbox: `play` must not read it again from
the event loop (SQLite's connection is shared by both threads, and two readers on it can deadlock: this hung a CI run
in `test_conformance.py::test_play_shows_the_observer_each_graded_attempt_once`)."""

from __future__ import annotations

import asyncio
import threading
import time

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser
from groundstate.grading.grader import Grader
from groundstate.state.sqlite import SqliteBackend
from groundstate.types import EpisodeLimits
from groundstate.worlds.attempt import play
from groundstate.worlds.environment import SqlEnvironment


def test_past_the_grading_bound_the_sandbox_is_not_read_again(shop, monkeypatch):
    task = shop.task("shop-cancel")
    finished = threading.Event()
    real_grade, real_changes = Grader.grade, SqlEnvironment.changes

    def slow_grade(self, *args, **kwargs):
        time.sleep(0.3)  # still reading the sandbox long after the bound
        try:
            return real_grade(self, *args, **kwargs)
        finally:
            finished.set()

    reads: list[bool] = []

    async def spy(self):
        reads.append(finished.is_set())  # False: a read while the grader's thread still held the sandbox
        return await real_changes(self)

    monkeypatch.setattr(Grader, "grade", slow_grade)
    monkeypatch.setattr(SqlEnvironment, "changes", spy)
    agent, user = ScriptedAgent([c.model_dump() for c in task.gold]), ScriptedUser(task.user.script)
    out = asyncio.run(play(task, shop, agent, user, EpisodeLimits(grade_timeout=0.05), backend=SqliteBackend(), keep_changes=True))
    assert out.verdict.error_kind == "time_limit" and out.changes is None
    assert reads == []
    finished.wait(5)
