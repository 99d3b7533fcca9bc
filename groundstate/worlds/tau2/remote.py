"""τ² in a process of its own: τ²'s domains run in one worker process (`worlds.tau2.worker`) of τ²'s interpreter (the one
`GROUNDSTATE_TAU2_PYTHON` names, a venv with τ² and groundstate's core made by `make tau2-env`; else this one), and
this process holds proxies:
`RemoteTau2Domain` and `RemoteTau2Environment` are the `Domain` and `Environment` of a τ² domain, each operation one
request to the worker. The verdict before rubrics, tools, user tools and blame are computed there by the same code
that runs in one process; rubrics are judged here (`grading.rubrics`), with this process's judge.

The worker answers one request at a time, in order (`Tau2Bridge`). A τ² tool past the attempt's time limit is
`EpisodeHang` from the worker, which goes on; one that holds Python's lock for good (retail's `calculate` on
`9**9**9**9`) stops the worker answering: past the attempt's limit (`BOUND_S` where it has none) and `GRACE_S`, it is
killed and the request is `SandboxLost`, a system error. The next request starts another worker; the environments the
old one held are gone (`SandboxLost` too).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import subprocess
import threading
from typing import Any

from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import (
    Blame,
    EpisodeHang,
    EpisodeLimits,
    Equivalences,
    Judge,
    SandboxLost,
    ToolCallRecord,
    ToolCallRequest,
    ToolResult,
    Trajectory,
    Verdict,
)
from groundstate.worlds.tau2.domain import TAU2_REF, Tau2ToolCatalog, listed
from groundstate.worlds.tau2.grading import rubrics
from groundstate.worlds.tau2.runtime import Tau2Unavailable

PYTHON_VAR = "GROUNDSTATE_TAU2_PYTHON"
BOUND_S = 300.0  # how long a request may take where the attempt has no time limit (a domain's first load: seconds)
GRACE_S = 10.0  # what a request may take beyond the attempt's own limit


class Tau2Bridge:
    """The worker process of one interpreter, and the one lock its requests take turns on."""

    def __init__(self, python: str):
        self.python = python
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[str] | None = None
        self.generation = 0  # counts the workers started: an environment of an earlier one is gone
        self.answered = 0

    def _start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != PYTHON_VAR}  # the worker runs τ² in its own process
        try:
            self.proc = subprocess.Popen(
                [self.python, "-m", "groundstate.worlds.tau2.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                env=env,
            )
        except OSError as e:
            raise Tau2Unavailable(f"{PYTHON_VAR}={self.python}: cannot start τ²'s worker there: {e}") from None
        self.generation += 1
        self.answered = 0  # requests this worker answered

    def request(self, op: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        """One request answered by the worker (started here the first time, and again after one died)."""
        return self.answer(op, args, timeout)[0]

    def answer(self, op: str, args: dict[str, Any], timeout: float | None = None, worker: int | None = None) -> tuple[Any, int]:
        """`op`'s answer and the generation of the worker that gave it. `worker`: the generation the request belongs
        to (an environment's handle means something only to the worker that opened it): checked under the lock, so a
        worker killed or replaced while the request waited for its turn makes it `SandboxLost`, never another
        attempt's environment of the same number in the next worker. None: any worker, started if none runs."""
        with self.lock:
            running = self.proc is not None and self.proc.poll() is None
            if worker is not None and (worker != self.generation or not running):
                raise SandboxLost(f"τ²'s worker ({self.python}) was restarted: the environment this {op} was for is gone")
            if not running:
                self._start()
            proc, generation = self.proc, self.generation
            assert proc is not None and proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps({"op": op, "args": args}) + "\n")  # ASCII: a lone surrogate travels escaped
                proc.stdin.flush()
                line = _readline(proc, (timeout if timeout is not None else BOUND_S) + GRACE_S)
            except (OSError, TimeoutError) as e:
                proc.kill()
                proc.wait()
                raise SandboxLost(f"τ²'s worker ({self.python}) stopped answering: {type(e).__name__}: {e}") from None
            if not line:
                code = proc.wait()
                if not self.answered:  # it never got going: that interpreter cannot run it
                    raise Tau2Unavailable(f"{PYTHON_VAR}={self.python}: τ²'s worker exited ({code}); its errors are above")
                raise SandboxLost(f"τ²'s worker ({self.python}) exited ({code}) while answering {op}")
            self.answered += 1
        answer = json.loads(line)
        if "ok" in answer:
            return answer["ok"], generation
        if answer["error"] == "hang":
            raise EpisodeHang(answer["message"])
        if answer["error"] == "task":
            raise KeyError(answer["message"])
        if answer["error"] == "unavailable":
            raise Tau2Unavailable(f"{PYTHON_VAR}={self.python}: {answer['message']}")
        raise RuntimeError(f"τ²'s worker ({self.python}): {answer['message']}")

    async def ask(self, op: str, args: dict[str, Any], timeout: float | None = None, worker: int | None = None) -> Any:
        return (await asyncio.to_thread(self.answer, op, args, timeout, worker))[0]


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    done: list[str] = []
    reader = threading.Thread(target=lambda: done.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        raise TimeoutError(f"no answer within {timeout:g} s")
    return done[0]


@functools.cache
def bridge(python: str) -> Tau2Bridge:
    return Tau2Bridge(python)


class RemoteTau2Domain:
    """A τ² domain running in τ²'s own interpreter (see the module docstring): the `Domain` surface `Tau2Domain` has."""

    def __init__(self, domain: str, python: str):
        self.bridge = bridge(python)
        self.tau2_domain, self.name = domain, f"tau2-{domain}"
        found = self.bridge.request("domain", {"domain": domain})  # its first load: importing τ² takes seconds
        self.tasks = [Task.model_validate(t) for t in found["tasks"]]
        self.lists: dict[str, list[str]] = found["lists"]
        self.tools = Tau2ToolCatalog(found["writes"], json.dumps(found["schemas"]))
        self.content_hash: str = found["content_hash"]
        self._system_prompt: str = found["system_prompt"]
        self.equivalences = Equivalences()

    def listed(self, name: str | None) -> list[Task]:
        """As `Tau2Domain.listed`."""
        return listed(self.tau2_domain, self.tasks, self.lists, name)

    def system_prompt(self) -> str:
        return self._system_prompt

    def ref(self) -> str:
        return TAU2_REF + self.tau2_domain

    def prepare(self, backend: Backend) -> None:
        """Nothing to build here: the worker holds τ²'s databases."""

    async def blame(self, task: Task, backend: Backend, trajectory: Trajectory, limits: EpisodeLimits = EpisodeLimits()) -> Blame:
        calls = [c.to_json() for c in trajectory.tool_calls]
        return Blame.model_validate(await self.bridge.ask("blame", {"domain": self.tau2_domain, "task": task.id, "calls": calls}))

    async def open_environment(self, task: Task, backend: Backend, limits: EpisodeLimits = EpisodeLimits()) -> RemoteTau2Environment:
        args = {"domain": self.tau2_domain, "task": task.id, "timeout": limits.timeout}
        opened, generation = await asyncio.to_thread(self.bridge.answer, "open", args, limits.timeout)
        return RemoteTau2Environment(task, self.bridge, limits, opened, generation)


class RemoteTau2Environment:
    """One attempt's τ² environment in τ²'s own interpreter: the `Environment` surface `Tau2Environment` has."""

    def __init__(self, task: Task, bridge: Tau2Bridge, limits: EpisodeLimits, opened: dict[str, Any], generation: int):
        self.task, self.bridge, self.limits = task, bridge, limits
        self.handle: int | None = opened["env"]
        self.generation = generation  # of the worker that opened it: the only one its handle means anything to
        self._initial: list[dict[str, Any]] = opened["initial_messages"]
        self._tools: list[dict[str, Any]] = opened["tool_schemas"]
        self._user_tools: list[dict[str, Any]] | None = opened["user_tool_schemas"]

    async def _ask(self, op: str, **args: Any) -> Any:
        if self.handle is None:
            raise SandboxLost(f"the environment of this attempt of {self.task.id} was closed")
        try:
            return await self.bridge.ask(op, {"env": self.handle, **args}, self.limits.timeout, self.generation)
        except SandboxLost as e:
            raise SandboxLost(f"{e} (an attempt of {self.task.id})") from None

    def initial_messages(self) -> list[dict[str, Any]]:
        return json.loads(json.dumps(self._initial))  # the caller's to extend

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self._tools

    async def call_tool(self, name: str, arguments: Any) -> ToolResult:
        r = await self._ask("call", name=name, arguments=arguments)
        return ToolResult(r["ok"], r["content"], write=r["write"])

    def user_tools(self) -> RemoteUserTools | None:
        return RemoteUserTools(self, self._user_tools) if self._user_tools is not None else None

    async def grade(self, trajectory: Trajectory | None, judge: Judge | None = None) -> Verdict:
        if trajectory is None:
            from groundstate.types import system_error

            return system_error("a τ² attempt is graded on its conversation: no trajectory was given", "grader")
        verdict = Verdict.model_validate(await self._ask("grade", trajectory=trajectory.to_json()))
        return await rubrics(self.task, trajectory, verdict, judge)

    async def changes(self) -> None:
        return None

    async def state_digest(self) -> None:
        """None: the τ² process behind this bridge answers no digest request."""
        return None

    async def fork(self) -> RemoteTau2Environment:
        handle = await self._ask("fork")
        opened = {"env": handle, "initial_messages": self._initial, "tool_schemas": self._tools, "user_tool_schemas": self._user_tools}
        return RemoteTau2Environment(self.task, self.bridge, self.limits, opened, self.generation)

    async def close(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            with contextlib.suppress(SandboxLost):  # its worker is gone, and the environment with it
                await self.bridge.ask("close", {"env": handle}, worker=self.generation)


class RemoteUserTools:
    """The user's own τ² tools of a `RemoteTau2Environment` (`types.UserTools`)."""

    def __init__(self, env: RemoteTau2Environment, schemas: list[dict[str, Any]]):
        self.env, self._schemas = env, schemas

    def schemas(self) -> list[dict[str, Any]]:
        return self._schemas

    async def act(self, calls: list[ToolCallRequest]) -> list[ToolCallRecord]:
        sent = [{"id": c.id, "name": c.name, "arguments": c.arguments, "parse_error": c.parse_error} for c in calls]
        return [ToolCallRecord.model_validate(r) for r in await self.env._ask("user_act", calls=sent)]
