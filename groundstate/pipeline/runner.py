"""The runner: tasks × k attempts, concurrent, resumable, one results line per attempt.

`run` does what every run needs, once, whatever executes the attempts: it takes the results file (one writer per
file: another run on it stops with `ResultsInUseError` before it reads or writes anything), plans what to run
from what the file already holds, writes the manifest, and writes and tallies each record as it comes. An
*executor* only turns planned attempts into records: `LocalExecutor` (asyncio on this machine, the default) or
`groundstate.pipeline.ray_executor.RayExecutor` (actors across a cluster).

An LLM user (`--user openai:...`) is audited (`agents.user_audit`: a reply that invents or contradicts one of its
facts, walks away when asked for one, or floods, is a system error when every message the agent sent it was plain, so
`--repair` plays it again; the record that replaces it keeps the fault in `user_faults`). A finding the agent's own
message may have provoked is never a system error but a graded attempt with a note, so `--repair`, which re-runs system errors only, cannot re-roll a failure the agent caused (the
rules and why: `agents.user_audit`). With `user_cache` its replies are replayed from a cache folder
(`agents.user_cache`; each record counts its `user_replies` cached and generated, and bad rows evicted). The cache is
opened before anything is written, and is not part of the run's identity: a run resumed with or without it is the same
run.

A run's settings and their checks are `config`'s; how it continues its results file (identity, plan, manifest) is
`resume`'s; attempts across a Ray cluster are `ray_executor`'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from groundstate.agents import AgentSource, make_user
from groundstate.agents.toolcall_format import looks_like_tool_call
from groundstate.agents.user_cache import UserCache
from groundstate.pipeline.config import Planned, RecordSink, RunConfig, check_config, endpoint_specs
from groundstate.pipeline.resume import ResumeRefused, manifest_path, run_identity, take_results_file
from groundstate.records import RECORD_VERSION, AttemptRecord, RunIdentity, UserReplies, attempt_record
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import Agent, Domain, Judge, Trajectory, Usage, UserSimulator, Verdict
from groundstate.worlds.attempt import crashed, play, prepare_domains, task_fingerprint

# what callers of a run import from here: this module's own names, and those of its settings and results file
__all__ = [
    "EndpointsDown",
    "Executor",
    "LocalExecutor",
    "ResumeRefused",
    "RunConfig",
    "RunSummary",
    "check_config",
    "endpoint_specs",
    "make_record",
    "manifest_path",
    "progress_status",
    "run",
    "run_identity",
]


@dataclass
class RunSummary:
    path: Path
    manifest: Path
    planned: int
    skipped: int
    ran: int
    passed: int
    failed: int
    system_errors: int
    unjudged: int
    seconds: float
    notes: list[str] = field(default_factory=list)  # what resuming changed in the file (superseded duplicates, changed tasks re-run)
    unread_tool_calls: int = 0  # attempts whose replies look like tool calls but that executed none (`unread_tool_calls`)
    user_replies: dict[str, int] = field(default_factory=dict)  # with a user cache: LLM-user replies `cached` and `generated`
    user_faults: int = 0  # attempts run that a user-simulator fault ended (system errors of kind user_fault)
    first_error: str = ""  # the first system error of the attempts run, as recorded ("" if none)


class Executor(Protocol):
    """Turns planned attempts into records: `execute` hands each record to `record` as it is made (in any order)
    and returns when every planned attempt has its record. `record` raising (the results file failed) stops it:
    attempts in flight are abandoned, their keys left for the next run."""

    def describe(self) -> dict[str, Any]:
        """What the manifest records of the executor."""
        ...

    def execute(self, todo: list[Planned], cfg: RunConfig, record: RecordSink) -> None: ...


class RunAgents:
    """The agents, users and judge of one run's attempts, each made on first use (agents from one `AgentSource`, so
    models are shared; the user cache opened once); a spec that cannot be built fails the attempts that need it, as
    system errors. `close` closes the user cache."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self._agents: AgentSource | None = None
        self._judge: Judge | None = None
        self._user_cache: UserCache | None = None

    def agent(self, task: Task, domain: Domain, attempt: int) -> Agent:
        if self._agents is None:
            self._agents = AgentSource(self.cfg.agent, self.cfg.sampling, self.cfg.seed, self.cfg.tool_call_format)
        return self._agents.for_attempt(task, domain, attempt)

    def user(self, task: Task, attempt: int) -> tuple[UserSimulator, UserReplies | None]:
        """The attempt's user, and with a user cache the count of how its replies are made (None without one)."""
        if self.cfg.user_cache is not None and self._user_cache is None:
            self._user_cache = UserCache(self.cfg.user_cache)
        replies = UserReplies() if self._user_cache is not None else None
        cfg = self.cfg
        return make_user(cfg.user, task, attempt, sampling=cfg.user_sampling, cache=self._user_cache, replies=replies, audit=cfg.user_audit), replies

    def close(self) -> None:
        if self._user_cache is not None:
            self._user_cache.close()
            self._user_cache = None

    def judge(self) -> Judge | None:
        if self.cfg.judge is None:
            return None
        if self._judge is None:
            from groundstate.grading.judge import make_judge

            self._judge = make_judge(self.cfg.judge)
        return self._judge


async def run_attempt(task: Task, domain: Domain, attempt: int, backend: Backend, agents: RunAgents, cfg: RunConfig) -> AttemptRecord:
    """One attempt to one results record. Anything that is not the agent's doing becomes a system error."""
    try:
        agent = agents.agent(task, domain, attempt)
        user, replies = agents.user(task, attempt)
        judge = agents.judge()
    except Exception as e:  # a bad endpoint spec or a model that fails to load: not the agent's failure
        verdict = crashed(e)
        return make_record(task, attempt, cfg, verdict, None, {"total_s": 0.0})
    out = await play(task, domain, agent, user, cfg.limits, backend=backend, judge=judge, blame=True)
    return make_record(
        task, attempt, cfg, out.verdict, out.trajectory, out.timings, user_replies=replies.to_json() if replies else None, usage=out.usage
    )


def make_record(
    task: Task,
    attempt: int,
    cfg: RunConfig,
    verdict: Verdict,
    traj: Trajectory | None,
    timings: dict[str, float],
    *,
    user_replies: dict[str, int] | None = None,
    usage: Usage | None = None,
) -> AttemptRecord:
    """The record of one attempt, before the run stamps its identity (`stamp`). `user_replies`: with a user cache, how
    many of the attempt's LLM-user replies were `cached` and how many `generated` (recorded as the record's field);
    `usage`: the tokens it billed (`attempt.Outcome.usage`: a system error's too)."""
    return attempt_record(
        task,
        attempt,
        verdict,
        traj,
        timings,
        agent=str(cfg.agent),
        model=cfg.agent.model_name,
        user=str(cfg.user),
        seed=cfg.seed,
        user_replies=user_replies,
        usage=usage,
    )


def stamp(record: AttemptRecord, identity: RunIdentity, fingerprint: str, replaced: AttemptRecord | None = None) -> AttemptRecord:
    """A record as written: the attempt's record with the run's identity and the task's fingerprint, and what the earlier
    tries of its key that it replaces (`replaced`, the latest of them, which carries the ones before) left to count:
    the user-simulator faults that ended them (`user_faults`) and the tokens they spent (`replaced_usage`)."""
    update: dict[str, Any] = {"record_version": RECORD_VERSION, "run": identity, "task_fingerprint": fingerprint}
    if replaced is not None:
        if faults := replaced.user_faults + ([replaced.fault] if replaced.fault else []):
            update["user_faults"] = faults  # so that `metrics` counts a user model's faults also after `--repair`
        if spent := replaced.replaced_usage + ([replaced.usage] if any(replaced.usage.model_dump().values()) else []):
            update["replaced_usage"] = spent  # so that tokens and cost count what the repaired tries spent
    return record.model_copy(update=update)


class LocalExecutor:
    """Attempts on this machine's event loop: at most `cfg.concurrency` at once, and at most the backend's open-sandbox
    limit (every slot may be held by an attempt: attempts compute their task's golden state, which needs a sandbox of
    its own, before taking theirs, so no attempt ever waits for a second one; `groundstate.worlds.environment`)."""

    def __init__(self, backend: Backend):
        self.backend = backend

    def describe(self) -> dict[str, Any]:
        return {"executor": "local"}

    def execute(self, todo: list[Planned], cfg: RunConfig, record: RecordSink) -> None:
        asyncio.run(self._execute(todo, cfg, record))

    async def _execute(self, todo: list[Planned], cfg: RunConfig, record: RecordSink) -> None:
        agents = RunAgents(cfg)
        limit = min(cfg.concurrency, self.backend.max_open or cfg.concurrency)
        slots = asyncio.Semaphore(max(1, limit))

        async def one(t: Task, d: Domain, a: int) -> None:
            async with slots:
                r = await run_attempt(t, d, a, self.backend, agents, cfg)
            record(r)

        running = [asyncio.ensure_future(one(t, d, a)) for t, d, a in todo]
        try:
            await asyncio.gather(*running)
        except BaseException:
            # the results file failed (or the run was interrupted): stop every attempt still in flight; their
            # keys stay unfinished and the next run plays them, so nothing is lost or written twice
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            raise
        finally:
            agents.close()


def run(
    tasks: list[tuple[Task, Domain]],
    cfg: RunConfig,
    backend: Backend,
    results_path: Path,
    repair: bool = False,
    on_result: RecordSink | None = None,
    rerun_changed: bool = False,
    *,
    executor: Executor | None = None,
    on_plan: Callable[[int, int], None] | None = None,
) -> RunSummary:
    """Run (or resume) tasks × k attempts into `results_path` (see the module docstring).

    `executor` runs the attempts (default: `LocalExecutor(backend)`); `backend` also names the run's backend in the
    manifest and builds every domain's base first (a broken domain fails here, naming its file, before anything is
    written). `on_plan(planned, already_done)` is called once the plan is known; `on_result(record)` for each record
    as it is written.
    """
    start = time.perf_counter()
    results_path = Path(results_path)
    executor = executor or LocalExecutor(backend)
    check_config(cfg)
    prepare_domains((d for _, d in tasks), backend)
    identity = run_identity(cfg, tasks)
    fingerprints = {t.id: task_fingerprint(t, d) for t, d in tasks}
    writer, resumed, manifest = take_results_file(results_path, tasks, cfg, backend, repair, rerun_changed, executor.describe())
    planned = len(tasks) * cfg.k
    if on_plan:
        on_plan(planned, planned - len(resumed.todo))
    tally = {"pass": 0, "fail": 0, "system_error": 0, "unjudged": 0, "unread_tool_calls": 0, "user_faults": 0}
    first_error = ""
    user_replies = {"cached": 0, "generated": 0} if cfg.user_cache is not None else {}
    tool_names = {t.id: frozenset(d.tools.specs) for t, d in tasks}

    in_a_row = {"endpoint_failures": 0}

    def record(r: AttemptRecord) -> None:
        nonlocal first_error
        r = stamp(r, identity, fingerprints[r.task_id], resumed.replaced.get(r.key))
        writer.write(r)
        ended_by_endpoint = r.error_kind in ("endpoint", "malformed_response")
        in_a_row["endpoint_failures"] = in_a_row["endpoint_failures"] + 1 if ended_by_endpoint else 0
        tally[r.outcome] += 1
        tally["unread_tool_calls"] += unread_tool_calls(r, tool_names[r.task_id])
        tally["user_faults"] += r.error_kind == "user_fault"
        first_error = first_error or r.system_error or ""
        for how, n in (r.user_replies.to_json() if r.user_replies is not None else {}).items():
            user_replies[how] = user_replies.get(how, 0) + n
        if on_result:
            on_result(r)
        if cfg.max_endpoint_failures and in_a_row["endpoint_failures"] >= cfg.max_endpoint_failures:
            raise EndpointsDown(in_a_row["endpoint_failures"], (r.system_error or "").splitlines()[0][:300])

    try:
        if resumed.todo:
            executor.execute(resumed.todo, cfg, record)
    finally:
        writer.close()
    return RunSummary(
        results_path,
        manifest,
        planned,
        planned - len(resumed.todo),
        len(resumed.todo),
        tally["pass"],
        tally["fail"],
        tally["system_error"],
        tally["unjudged"],
        time.perf_counter() - start,
        resumed.notes,
        tally["unread_tool_calls"],
        user_replies,
        tally["user_faults"],
        first_error,
    )


class EndpointsDown(RuntimeError):
    """`max_endpoint_failures` attempts in a row were ended by their model endpoint: the run stopped, every record
    written so far is intact and the attempts not run are unfinished keys (re-run the command to resume)."""

    def __init__(self, failures: int, last: str):
        super().__init__(f"{failures} attempts in a row failed on their model endpoint; the last: {last}")
        self.failures, self.last = failures, last


def unread_tool_calls(record: AttemptRecord, tool_names: frozenset[str]) -> bool:
    """Whether an attempt wrote replies that read as tool calls (`toolcall_format.looks_like_tool_call`) and executed
    none: what a server that returns a model's calls as text (and a format that cannot read them) looks like."""
    traj = record.trajectory
    if traj is None or any(c.ok for c in traj.tool_calls):
        return False
    replies = [m.get("content") for m in traj.messages if m.get("role") == "assistant" and not m.get("tool_calls")]
    return any(isinstance(t, str) and looks_like_tool_call(t, tool_names) for t in replies)


def progress_status(tally: dict[str, int]) -> str:
    """The progress-bar line of a run or probe from its outcome counts (`AttemptRecord.outcome`)."""
    line = f"pass {tally.get('pass', 0)} · fail {tally.get('fail', 0)} · system errors {tally.get('system_error', 0)}"
    return line + (f" · unjudged {tally['unjudged']}" if tally.get("unjudged") else "")
