"""The runner: tasks × k attempts, concurrent, resumable, one results line per attempt.

`run` does what every run needs, once, whatever executes the attempts: it takes the results file (one writer per
file: another run on it stops with `ResultsInUseError` before it reads or writes anything), plans what to run
from what the file already holds, writes the manifest, and writes and tallies each record as it comes. An
*executor* only turns planned attempts into records: `LocalExecutor` (asyncio on this machine, the default) or
`groundstate.pipeline.ray_executor.RayExecutor` (actors across a cluster).

Each attempt is keyed (task id, attempt index) and appended to a JSONL file as it finishes, stamped with the
run's identity and its task's fingerprint (`groundstate.records`). Running the same command again resumes:
finished keys are skipped, and system-error keys are retried (`repair=True` retries only those). Resuming is
refused (`ResumeRefused`, naming what differs) when the file holds another run (another agent, user, judge,
seed, sampling, an LLM user's sampling or audit, limit or task set), attempts beyond this run's k (a larger k
only adds attempts), or records without a run identity (older files: start a new file), and when a task changed
since its attempts were recorded, unless `rerun_changed` (then those attempts run again). A key recorded more
than once keeps its last clean record (`results.latest_per_key`); the summary says so. If the results file cannot
be written (disk full, permission denied) the run stops with `ResultsWriteError`: attempts in flight are
cancelled, never half-recorded.

An LLM user (`--user openai:...`) is audited (`agents.user_audit`: a reply that invents or contradicts one of its
facts, walks away when asked for one, or floods, is a system error when every message the agent sent it was plain, so
`--repair` plays it again; the record that replaces it keeps the fault in `user_faults`). A finding the agent's own
message may have provoked is never a system error but a graded attempt with a note, so `--repair`, which re-runs system errors only, cannot re-roll a failure the agent caused (the
rules and why: `agents.user_audit`). With `user_cache` its replies are replayed from a cache folder
(`agents.user_cache`; each record counts its `user_replies` cached and generated, and bad rows evicted). The cache is
opened before anything is written, and is not part of the run's identity: a run resumed with or without it is the same
run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Protocol

from groundstate import __version__
from groundstate.agents import AgentSource, make_user
from groundstate.agents.toolcall_format import looks_like_tool_call
from groundstate.agents.user_cache import CachedUser, UserCache, UserCacheError
from groundstate.records import (
    RECORD_VERSION,
    AttemptRecord,
    ResultsWriteError,
    ResultsWriter,
    RunIdentity,
    latest_per_key,
    read_records,
    repair_file_tail,
    task_set_hash,
)
from groundstate.specs import AgentSpec, JudgeSpec, UserSpec, parse_agent, parse_judge, parse_user
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import Agent, Domain, EpisodeLimits, FaultKind, Judge, Trajectory, UserSimulator, Verdict
from groundstate.worlds.attempt import crashed, play, prepare_domains, task_fingerprint

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


class ResumeRefused(ValueError):
    """The results file cannot be resumed by this run (another run's records, or changed tasks): nothing was written."""


class Executor(Protocol):
    """Turns planned attempts into records: `execute` hands each record to `record` as it is made (in any order)
    and returns when every planned attempt has its record. `record` raising (the results file failed) stops it:
    attempts in flight are abandoned, their keys left for the next run."""

    def describe(self) -> dict[str, Any]:
        """What the manifest records of the executor."""
        ...

    def execute(self, todo: list[Planned], cfg: RunConfig, record: RecordSink) -> None: ...


def run_identity(cfg: RunConfig, tasks: list[tuple[Task, Domain]]) -> RunIdentity:
    """The identity every record of this run carries (see `RunIdentity`)."""
    lim = cfg.limits
    llm_user = cfg.user.is_llm
    limits = {
        "max_turns": lim.max_turns,
        "max_tool_calls": lim.max_tool_calls,
        "attempt_timeout": lim.timeout,
        "max_result_chars": lim.max_result_chars,
        "max_attempt_tokens": lim.max_tokens,
    }
    return RunIdentity(
        agent=str(cfg.agent),
        tool_call_format=cfg.tool_call_format if cfg.agent.kind == "openai" else None,
        user=str(cfg.user),
        # the default (temperature 0) given explicitly is the same run as not giving it
        user_sampling=dict(cfg.user_sampling) if llm_user and cfg.user_sampling and cfg.user_sampling != {"temperature": 0.0} else None,
        user_audit=cfg.user_audit if llm_user else None,
        judge=None if cfg.judge is None else str(cfg.judge),
        seed=cfg.seed,
        sampling=dict(cfg.sampling),
        limits=limits,
        tasks=task_set_hash([t.id for t, _ in tasks]),
    )


def task_list_hash(tasks: list[tuple[Task, Domain]]) -> str:
    h = hashlib.sha256()
    for t, d in tasks:
        h.update(f"{t.id}:{t.fingerprint()}:{d.content_hash}\n".encode())
    return h.hexdigest()[:16]


def _git_revision() -> str | None:
    try:
        return (
            subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent).stdout.strip() or None
        )
    except (OSError, subprocess.SubprocessError):
        return None


def manifest_path(results: Path) -> Path:
    """The manifest beside a results file, named after its whole file name: `x.jsonl` and `x.json` get two."""
    return results.with_name(results.name + ".manifest.json")


def _previous_manifest(results: Path, manifest: Path) -> dict[str, Any]:
    """The manifest this run continues: its own, or, for a results file started before manifests were named after
    the whole file name, the legacy `x.manifest.json` (read only when resuming a non-empty results file, so a new results
    file never takes over a sibling's history; the legacy file is left in place, it may be that sibling's)."""
    legacy = results.with_suffix(".manifest.json")
    for candidate in (manifest, legacy if legacy != manifest and results.exists() and results.stat().st_size else None):
        if candidate is not None and candidate.is_file():
            try:
                previous = json.loads(candidate.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError):  # a damaged manifest is rewritten whole, not a reason to stop the run
                return {}
            return previous if isinstance(previous, dict) else {}
    return {}


def write_manifest(path: Path, cfg: RunConfig, tasks: list[tuple[Task, Domain]], backend: Backend, extra: dict[str, Any] | None = None) -> Path:
    """Write (or update, on resume) the manifest of the results file `path`; returns its path (`manifest_path`)."""
    manifest = manifest_path(path)
    previous = _previous_manifest(path, manifest)
    body = {
        "command": sys.argv,
        "groundstate": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_revision": _git_revision(),
        "backend": backend.name,
        "tasks": len(tasks),
        "task_list_hash": task_list_hash(tasks),
        "config": cfg.to_json(),
        "started": previous.get("started") or datetime.now(timezone.utc).isoformat(),
        "updated": datetime.now(timezone.utc).isoformat(),
        "resumed": previous["resumed"] + 1 if isinstance(previous.get("resumed"), int) else 0,
        **(extra or {}),
    }
    if previous.get("task_list_hash") not in (None, body["task_list_hash"]):
        body["warning"] = "the task list changed since this results file was started"
    manifest.write_text(json.dumps(body, indent=1, default=str))
    return manifest


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

    def user(self, task: Task, attempt: int) -> UserSimulator:
        if self.cfg.user_cache is not None and self._user_cache is None:
            self._user_cache = UserCache(self.cfg.user_cache)
        return make_user(self.cfg.user, task, attempt, sampling=self.cfg.user_sampling, cache=self._user_cache, audit=self.cfg.user_audit)

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
        user = agents.user(task, attempt)
        judge = agents.judge()
    except Exception as e:  # a bad endpoint spec or a model that fails to load: not the agent's failure
        verdict = crashed(e)
        return make_record(task, attempt, cfg, verdict, None, {"total_s": 0.0})
    out = await play(task, domain, agent, user, cfg.limits, backend=backend, judge=judge, blame=True)
    replies = user.count.to_json() if isinstance(user, CachedUser) else None
    return make_record(task, attempt, cfg, out.verdict, out.trajectory, out.timings, user_replies=replies)


def make_record(
    task: Task,
    attempt: int,
    cfg: RunConfig,
    verdict: Verdict,
    traj: Trajectory | None,
    timings: dict[str, float],
    *,
    user_replies: dict[str, int] | None = None,
) -> AttemptRecord:
    """The record of one attempt, before the run stamps its identity (`stamp`). `user_replies`: with a user cache, how
    many of the attempt's LLM-user replies were `cached` and how many `generated` (recorded as the record's field)."""
    return AttemptRecord.model_validate(
        {
            "task_id": task.id,
            "attempt": attempt,
            "domain": task.domain,
            "split": task.split,
            "family": task.family,
            "template": task.template,
            "reward": verdict.reward,
            "system_error": verdict.system_error,
            "unjudged": verdict.unjudged,
            "finish_reason": traj.finish_reason if traj is not None else None,
            "agent": str(cfg.agent),
            "model": cfg.agent.model_name,
            "user": str(cfg.user),
            "seed": cfg.seed,
            "usage": traj.usage.to_json() if traj is not None else {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0},
            "verdict": verdict.to_json(),
            "trajectory": traj.to_json() if traj is not None else None,
            "timings": {k: round(v, 6) for k, v in timings.items()},
            "rubrics": len(task.rubrics),
            **({"user_replies": user_replies} if user_replies is not None else {}),
        }
    )


def stamp(record: AttemptRecord, identity: RunIdentity, fingerprint: str, user_faults: list[FaultKind] | None = None) -> AttemptRecord:
    """A record as written: the attempt's record with the run's identity and the task's fingerprint, and `user_faults`,
    the user-simulator faults (kinds) that ended the earlier tries of its key (`earlier_user_faults`), where there were."""
    update: dict[str, Any] = {"record_version": RECORD_VERSION, "run": identity, "task_fingerprint": fingerprint}
    if user_faults:
        update["user_faults"] = user_faults
    return record.model_copy(update=update)


def earlier_user_faults(replaced: AttemptRecord | None) -> list[FaultKind]:
    """The user-simulator faults of the tries a new record of a key replaces: the replaced record's own fault and
    those it carried. Kept so that `metrics` counts a user model's faults also after `--repair` replaced them."""
    if replaced is None:
        return []
    return replaced.user_faults + ([replaced.fault] if replaced.fault else [])


@dataclass
class Resume:
    """What a run does with an existing results file: attempts to run, records to keep, and what changed."""

    todo: list[Planned]
    kept: list[AttemptRecord]
    notes: list[str]
    replaced: dict[tuple[str, int], AttemptRecord] = field(default_factory=dict)  # the system-error record of each key retried


def plan(tasks: list[tuple[Task, Domain]], k: int, existing: list[AttemptRecord], repair: bool) -> tuple[list[Planned], list[AttemptRecord]]:
    """Which attempts to run, and which existing records to keep (the records that count, less the system errors)."""
    latest = latest_per_key(existing)
    retry = {key for key, r in latest.items() if r.system_error is not None}
    kept = [r for key, r in latest.items() if key not in retry]
    done = {r.key for r in kept}
    todo = []
    for t, d in tasks:
        for a in range(k):
            key = (t.id, a)
            if key in done:
                continue
            if repair and key not in retry:
                continue
            todo.append((t, d, a))
    return todo, kept


def resume(
    tasks: list[tuple[Task, Domain]], cfg: RunConfig, existing: list[AttemptRecord], repair: bool = False, rerun_changed: bool = False
) -> Resume:
    """`plan` for this run after checking that `existing` records are its own (`ResumeRefused` otherwise)."""
    if not existing:
        return Resume(*plan(tasks, cfg.k, existing, repair), [])
    legacy = [r for r in existing if r.run is None]
    if legacy:
        raise ResumeRefused(
            f"{len(legacy)} of the file's {len(existing)} records carry no run identity (written by an older groundstate or "
            "another tool), so this run cannot tell whether they are its own: write to a new --out"
        )
    identity = run_identity(cfg, tasks)
    others: dict[str, RunIdentity] = {}
    for r in existing:
        if r.run != identity:
            others.setdefault(r.run.id, r.run)
    if others:
        what = "; ".join(", ".join(o.differences(identity)) for o in others.values())
        raise ResumeRefused(
            f"the file holds another run's records ({what}): resuming would mix two runs; write to a new --out or re-run with the file's settings"
        )
    beyond = max(r.attempt for r in existing) + 1
    if beyond > cfg.k:
        raise ResumeRefused(
            f"the file holds {beyond} attempts per task, more than this run's k={cfg.k}: re-run with --k {beyond} "
            "(a larger k adds attempts), or write to a new --out"
        )
    fingerprints = {t.id: task_fingerprint(t, d) for t, d in tasks}
    changed = sorted({r.task_id for r in existing if r.task_fingerprint != fingerprints.get(r.task_id)})
    notes = []
    if changed:
        if not rerun_changed:
            raise ResumeRefused(
                f"{len(changed)} tasks changed since their attempts were recorded ({', '.join(changed[:5])}"
                f"{' ...' if len(changed) > 5 else ''}): their old verdicts are not this task's; "
                "--rerun-changed drops them and runs those attempts again"
            )
        dropped = [r for r in existing if r.task_id in set(changed)]
        existing = [r for r in existing if r.task_id not in set(changed)]
        notes.append(f"{len(changed)} changed tasks: their {len(dropped)} old records were dropped and their attempts run again")
    counts: dict[tuple[str, int], int] = {}
    for r in existing:
        counts[r.key] = counts.get(r.key, 0) + 1
    twice = sorted(key for key, n in counts.items() if n > 1)
    if twice:
        notes.append(
            f"{len(twice)} keys were recorded more than once (e.g. {twice[:3]}): the last clean record of each was kept, "
            "the others were removed from the file"
        )
    todo, kept = plan(tasks, cfg.k, existing, repair)
    retried = {(t.id, a) for t, _, a in todo}
    replaced = {key: r for key, r in latest_per_key(existing).items() if key in retried and r.system_error is not None}
    return Resume(todo, kept, notes, replaced)


def take_results_file(
    path: Path,
    tasks: list[tuple[Task, Domain]],
    cfg: RunConfig,
    backend: Backend,
    repair: bool,
    rerun_changed: bool = False,
    manifest_extra: dict[str, Any] | None = None,
) -> tuple[ResultsWriter, Resume, Path]:
    """Become the results file's one writer, then decide what to resume (`resume`), repair the file's tail, drop
    what the run replaces and write the manifest: the writer, the resume plan and the manifest's path.

    The lock is taken before the file is read, so no other run can append between the plan and the rewrite, or
    hold the replaced file open. Raises `ResultsInUseError` (another run holds the file), `ResumeRefused` (the file
    holds another run's records or changed tasks: left exactly as it was) or `ResultsWriteError` (it cannot be
    written) before any attempt runs.
    """
    writer = ResultsWriter(path)
    try:
        existing = read_records(path, missing_ok=True)
        try:
            r = resume(tasks, cfg, existing, repair, rerun_changed)
        except ResumeRefused as e:
            raise ResumeRefused(f"cannot resume {path}: {e}") from None
        repair_file_tail(path)
        if len(r.kept) != len(existing):
            writer.rewrite(r.kept)  # drop superseded records before their replacements are appended
        manifest = write_manifest(path, cfg, tasks, backend, manifest_extra)
    except ResultsWriteError:
        writer.close()
        raise
    except OSError as e:  # a read-only manifest or folder, a full disk
        writer.close()
        raise ResultsWriteError(path, e) from e
    except BaseException:
        writer.close()
        raise
    return writer, r, manifest


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
    tally = {"pass": 0, "fail": 0, "system_error": 0, "unjudged": 0, "unread_tool_calls": 0}
    user_replies = {"cached": 0, "generated": 0} if cfg.user_cache is not None else {}
    tool_names = {t.id: frozenset(d.tools.specs) for t, d in tasks}

    in_a_row = {"endpoint_failures": 0}

    def record(r: AttemptRecord) -> None:
        r = stamp(r, identity, fingerprints[r.task_id], earlier_user_faults(resumed.replaced.get(r.key)))
        writer.write(r)
        ended_by_endpoint = r.error_kind in ("endpoint", "malformed_response")
        in_a_row["endpoint_failures"] = in_a_row["endpoint_failures"] + 1 if ended_by_endpoint else 0
        tally[r.outcome] += 1
        tally["unread_tool_calls"] += unread_tool_calls(r, tool_names[r.task_id])
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
    )


class EndpointsDown(RuntimeError):
    """`max_endpoint_failures` attempts in a row were ended by their model endpoint: the run stopped, every record
    written so far is intact and the attempts not run are unfinished keys (re-run the command to resume)."""

    def __init__(self, failures: int, last: str):
        super().__init__(f"{failures} attempts in a row failed on their model endpoint; the last: {last}")
        self.failures, self.last = failures, last


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


def unread_tool_calls(record: AttemptRecord, tool_names: frozenset[str]) -> bool:
    """Whether an attempt wrote replies that read as tool calls (`toolcall_format.looks_like_tool_call`) and executed
    none: what a server that returns a model's calls as text (and a format that cannot read them) looks like."""
    traj = record.trajectory or {}
    if any(c.get("ok") for c in traj.get("tool_calls") or [] if isinstance(c, dict)):
        return False
    replies = [
        m.get("content") for m in traj.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant" and not m.get("tool_calls")
    ]
    return any(isinstance(t, str) and looks_like_tool_call(t, tool_names) for t in replies)


def progress_status(tally: dict[str, int]) -> str:
    """The progress-bar line of a run or probe from its outcome counts (`AttemptRecord.outcome`)."""
    line = f"pass {tally.get('pass', 0)} · fail {tally.get('fail', 0)} · system errors {tally.get('system_error', 0)}"
    return line + (f" · unjudged {tally['unjudged']}" if tally.get("unjudged") else "")
