"""The runner: tasks × k attempts, concurrent, resumable, one results line per attempt.

Each attempt is keyed (task id, attempt index) and appended to a JSONL file as it finishes, stamped with the
run's identity and its task's fingerprint (`groundstate.results`). Running the same command again resumes:
finished keys are skipped, and system-error keys are retried (`repair=True` retries only those). Resuming is
refused (`ResumeRefused`, naming what differs) when the file holds another run (another agent, user, judge,
seed, sampling, limit or task set), attempts beyond this run's k (a larger k only adds attempts), or records
without a run identity (older files: start a new file), and when a task changed since its attempts were
recorded, unless `rerun_changed` (then those attempts run again). A key recorded more than once keeps its
last clean record; the summary says so. Blocking database work runs off the event loop on PostgreSQL;
concurrency is bounded by `concurrency` and by the backend's open-sandbox limit (less one, kept for
the grader's golden replays). If the results file cannot be written (disk full, permission denied)
the run stops with `ResultsWriteError`: attempts in flight are cancelled, never half-recorded. One run
writes a results file at a time: another run on the same file stops with `ResultsInUseError` before it
reads or writes anything.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from groundstate import __version__
from groundstate.agents import make_agent, make_user
from groundstate.agents.scripted import attempt_seed
from groundstate.attempt import DEFAULT_GRADE_TIMEOUT_S, play, prepare_domains
from groundstate.grading import Grader, Verdict, grader_for, system_error
from groundstate.results import (RECORD_VERSION, Record, ResultsWriteError, ResultsWriter, RunIdentity, key_of, read_records,
                                 repair_file_tail, task_set_hash)
from groundstate.state.base import Backend
from groundstate.tasks import Domain, Task


@dataclass
class RunConfig:
    agent: str = "scripted:gold"
    user: str = "scripted"
    judge: str | None = None
    k: int = 1
    concurrency: int = 8
    seed: int = 0
    sampling: dict[str, Any] = field(default_factory=dict)  # temperature, top_p, top_k, max_tokens
    max_turns: int | None = None
    max_tool_calls: int | None = None
    attempt_timeout: float | None = None  # seconds of wall clock per attempt (finish reason `timeout`)
    max_result_chars: int | None = None  # tool-result characters shown to the agent
    max_attempt_tokens: int | None = None  # agent tokens (input + output) per attempt (finish reason `max_tokens`)
    grade_timeout: float = DEFAULT_GRADE_TIMEOUT_S  # seconds to grade an attempt; running out is a system error


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


class ResumeRefused(ValueError):
    """The results file cannot be resumed by this run (another run's records, or changed tasks): nothing was written."""


def run_identity(cfg: RunConfig, tasks: list[tuple[Task, Domain]]) -> RunIdentity:
    """The identity every record of this run carries (see `RunIdentity`)."""
    limits = {"max_turns": cfg.max_turns, "max_tool_calls": cfg.max_tool_calls, "attempt_timeout": cfg.attempt_timeout,
              "max_result_chars": cfg.max_result_chars, "max_attempt_tokens": cfg.max_attempt_tokens}
    return RunIdentity(agent=cfg.agent, user=cfg.user, judge=cfg.judge, seed=cfg.seed, sampling=dict(cfg.sampling),
                       limits=limits, tasks=task_set_hash([t.id for t, _ in tasks]))


def task_fingerprint(task: Task, domain: Domain) -> str:
    """The version of a task as an attempt meets it: everything of the task that the agent sees or the grader uses
    (instruction, user, patch, gold, checks, rubrics, limits), its domain's content and the domain's system prompt (the
    policy the agent is told to follow); not tags or grouping labels."""
    body = json.dumps({"task": task.model_dump(mode="json", exclude={"tags", "family", "template", "split"}), "domain": domain.content_hash,
                       "system_prompt": domain.system_prompt()}, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def stamp(record: Record, identity: RunIdentity, fingerprint: str) -> Record:
    """A record as written: the attempt's record with the run's identity and the task's fingerprint."""
    return {**record, "record_version": RECORD_VERSION, "run": identity.model_dump(), "task_fingerprint": fingerprint}


def task_list_hash(tasks: list[tuple[Task, Domain]]) -> str:
    h = hashlib.sha256()
    for t, d in tasks:
        h.update(f"{t.id}:{t.fingerprint()}:{d.content_hash}\n".encode())
    return h.hexdigest()[:16]


def _git_revision() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def manifest_path(results: Path) -> Path:
    """The manifest beside a results file, named after its whole file name: `x.jsonl` and `x.json` get two."""
    return results.with_name(results.name + ".manifest.json")


def _previous_manifest(results: Path, manifest: Path) -> dict[str, Any]:
    """The manifest this run continues: its own, or, for a results file started before manifests were named after
    the whole file name, the legacy `x.manifest.json` (read only when resuming a non-empty file, so a new results
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
        "config": asdict(cfg),
        "started": previous.get("started") or datetime.now(timezone.utc).isoformat(),
        "updated": datetime.now(timezone.utc).isoformat(),
        "resumed": previous["resumed"] + 1 if isinstance(previous.get("resumed"), int) else 0,
        **(extra or {}),
    }
    if previous.get("task_list_hash") not in (None, body["task_list_hash"]):
        body["warning"] = "the task list changed since this results file was started"
    manifest.write_text(json.dumps(body, indent=1, default=str))
    return manifest


class AgentPool:
    """Agents for attempts: scripted agents are per attempt; model-backed agents are built once and shared."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self._shared: dict[str, Any] = {}

    def agent(self, task: Task, domain: Domain, attempt: int):
        spec = self.cfg.agent
        if spec.startswith("scripted:"):
            return make_agent(spec, task, domain, attempt, self.cfg.seed)
        if spec.startswith("hf:"):  # one model, batched across the attempts in flight; each attempt its own token record
            if spec not in self._shared:
                self._shared[spec] = local_policy(spec.removeprefix("hf:"), self.cfg)
            return self._shared[spec].agent()
        if spec not in self._shared:
            self._shared[spec] = make_agent(spec, task, domain, attempt, self.cfg.seed, sampling=self.cfg.sampling)
        shared = self._shared[spec]
        if hasattr(shared, "with_seed"):  # local models: the same weights, an independent seed per attempt
            return shared.with_seed(attempt_seed(task.id, attempt, self.cfg.seed))
        return shared

    def user(self, task: Task):
        return make_user(self.cfg.user, task)

    def judge(self):
        if self.cfg.judge is None:
            return None
        if "judge" not in self._shared:
            from groundstate.judge import make_judge

            self._shared["judge"] = make_judge(self.cfg.judge)
        return self._shared["judge"]


def local_policy(path: str, cfg: RunConfig):
    """A batched local policy for `hf:PATH` runs (generation is shared across concurrent attempts)."""
    from groundstate.train.policy import BatchedPolicy, SamplingParams

    s = dict(cfg.sampling)
    params = SamplingParams(
        temperature=s.get("temperature", 1.0),
        top_p=s.get("top_p", 1.0),
        top_k=s.get("top_k", 0),
        max_new_tokens=s.get("max_tokens", SamplingParams.max_new_tokens),
    )
    return BatchedPolicy.from_pretrained(path, params, seed=cfg.seed)


def model_name(spec: str) -> str:
    kind, _, rest = spec.partition(":")
    if kind == "openai":
        from groundstate.agents.openai_compat import parse_endpoint

        return parse_endpoint(spec)[0]
    return rest if kind == "hf" else spec


async def run_attempt(task: Task, domain: Domain, attempt: int, backend: Backend, grader: Grader, agents: AgentPool, cfg: RunConfig) -> Record:
    """One attempt to one results record. Anything that is not the agent's doing becomes a system error."""
    try:
        agent = agents.agent(task, domain, attempt)
        user = agents.user(task)
        judge = agents.judge()
    except Exception as e:  # a bad endpoint spec or a model that fails to load: not the agent's failure
        verdict = system_error(f"{type(e).__name__}: {e}")
        verdict.reasons.append(traceback.format_exc(limit=4))
        return make_record(task, attempt, cfg, verdict, None, {"total_s": 0.0})
    out = await play(task, domain, agent, user, backend=backend, grader=grader, judge=judge,
                     max_turns=cfg.max_turns, max_tool_calls=cfg.max_tool_calls, timeout=cfg.attempt_timeout,
                     max_result_chars=cfg.max_result_chars, max_tokens=cfg.max_attempt_tokens, grade_timeout=cfg.grade_timeout)
    return make_record(task, attempt, cfg, out.verdict, out.trajectory, out.timings)


def make_record(task: Task, attempt: int, cfg: RunConfig, verdict: Verdict, traj: Any, timings: dict[str, float]) -> Record:
    return {
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
        "agent": cfg.agent,
        "model": model_name(cfg.agent),
        "user": cfg.user,
        "seed": cfg.seed,
        "usage": traj.usage.to_json() if traj is not None else {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0},
        "verdict": verdict.to_json(),
        "trajectory": traj.to_json() if traj is not None else None,
        "timings": {k: round(v, 6) for k, v in timings.items()},
    }


@dataclass
class Resume:
    """What a run does with an existing results file: attempts to run, records to keep, and what changed."""

    todo: list[tuple[Task, Domain, int]]
    kept: list[Record]
    notes: list[str]


def plan(tasks: list[tuple[Task, Domain]], k: int, existing: list[Record], repair: bool) -> tuple[list[tuple[Task, Domain, int]], list[Record]]:
    """Which attempts to run, and which existing records to keep (the last clean record per key wins)."""
    keep: dict[tuple[str, int], Record] = {}
    for r in existing:
        keep[key_of(r)] = r if (key_of(r) not in keep or r.get("system_error") is None) else keep[key_of(r)]
    retry = {key for key, r in keep.items() if r.get("system_error") is not None}
    kept = [r for key, r in keep.items() if key not in retry]
    done = {key_of(r) for r in kept}
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


def resume(tasks: list[tuple[Task, Domain]], cfg: RunConfig, existing: list[Record], repair: bool = False,
           rerun_changed: bool = False) -> Resume:
    """`plan` for this run after checking that `existing` records are its own (`ResumeRefused` otherwise)."""
    if not existing:
        return Resume(*plan(tasks, cfg.k, existing, repair), [])
    legacy = [r for r in existing if r.get("run") is None]
    if legacy:
        raise ResumeRefused(f"{len(legacy)} of the file's {len(existing)} records carry no run identity (written by an older groundstate or "
                            "another tool), so this run cannot tell whether they are its own: write to a new --out")
    identity = run_identity(cfg, tasks)
    others: dict[str, RunIdentity] = {}
    for r in existing:
        theirs = RunIdentity.model_validate(r["run"])
        if theirs != identity:
            others.setdefault(theirs.id, theirs)
    if others:
        what = "; ".join(", ".join(o.differences(identity)) for o in others.values())
        raise ResumeRefused(f"the file holds another run's records ({what}): resuming would mix two runs; write to a new --out "
                            "or re-run with the file's settings")
    beyond = max(r["attempt"] for r in existing) + 1
    if beyond > cfg.k:
        raise ResumeRefused(f"the file holds {beyond} attempts per task, more than this run's k={cfg.k}: re-run with --k {beyond} "
                            "(a larger k adds attempts), or write to a new --out")
    fingerprints = {t.id: task_fingerprint(t, d) for t, d in tasks}
    changed = sorted({r["task_id"] for r in existing if r["task_fingerprint"] != fingerprints.get(r["task_id"])})
    notes = []
    if changed:
        if not rerun_changed:
            raise ResumeRefused(f"{len(changed)} tasks changed since their attempts were recorded ({', '.join(changed[:5])}"
                                f"{' ...' if len(changed) > 5 else ''}): their old verdicts are not this task's; "
                                "--rerun-changed drops them and runs those attempts again")
        dropped = [r for r in existing if r["task_id"] in set(changed)]
        existing = [r for r in existing if r["task_id"] not in set(changed)]
        notes.append(f"{len(changed)} changed tasks: their {len(dropped)} old records were dropped and their attempts run again")
    counts: dict[tuple[str, int], int] = {}
    for r in existing:
        counts[key_of(r)] = counts.get(key_of(r), 0) + 1
    twice = sorted(key for key, n in counts.items() if n > 1)
    if twice:
        notes.append(f"{len(twice)} keys were recorded more than once (e.g. {twice[:3]}): the last clean record of each was kept, "
                     "the others were removed from the file")
    todo, kept = plan(tasks, cfg.k, existing, repair)
    return Resume(todo, kept, notes)


def take_results_file(path: Path, tasks: list[tuple[Task, Domain]], cfg: RunConfig, backend: Backend, repair: bool,
                      rerun_changed: bool = False, manifest_extra: dict[str, Any] | None = None) -> tuple[ResultsWriter, Resume, Path]:
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


async def run_async(
    tasks: list[tuple[Task, Domain]],
    cfg: RunConfig,
    backend: Backend,
    results_path: Path,
    repair: bool = False,
    on_result: Callable[[Record], None] | None = None,
    rerun_changed: bool = False,
) -> RunSummary:
    start = time.perf_counter()
    results_path = Path(results_path)
    prepare_domains(tasks, backend)  # a broken domain stops the run here, naming its file, before anything is written
    identity = run_identity(cfg, tasks)
    fingerprints = {t.id: task_fingerprint(t, d) for t, d in tasks}
    grader = grader_for(backend)
    agents = AgentPool(cfg)
    writer, resumed, manifest = take_results_file(results_path, tasks, cfg, backend, repair, rerun_changed)
    todo = resumed.todo
    # every slot may be held by an attempt: attempts compute their task's golden state (which needs a sandbox
    # of its own) before taking theirs, so no attempt ever waits for a second one (groundstate.attempt)
    limit = min(cfg.concurrency, backend.max_open or cfg.concurrency)
    slots = asyncio.Semaphore(max(1, limit))
    counts = {"passed": 0, "failed": 0, "system_errors": 0, "unjudged": 0}

    async def one(t: Task, d: Domain, a: int) -> None:
        async with slots:
            record = stamp(await run_attempt(t, d, a, backend, grader, agents, cfg), identity, fingerprints[t.id])
        writer.write(record)
        if record["system_error"]:
            counts["system_errors"] += 1
        elif record["unjudged"]:
            counts["unjudged"] += 1
        elif record["reward"] == 1:
            counts["passed"] += 1
        else:
            counts["failed"] += 1
        if on_result:
            on_result(record)

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
        writer.close()
    return RunSummary(results_path, manifest, len(tasks) * cfg.k, len(tasks) * cfg.k - len(todo), len(todo),
                      counts["passed"], counts["failed"], counts["system_errors"], counts["unjudged"], time.perf_counter() - start,
                      resumed.notes)


def run(tasks: list[tuple[Task, Domain]], cfg: RunConfig, backend: Backend, results_path: Path, repair: bool = False,
        on_result: Callable[[Record], None] | None = None, rerun_changed: bool = False) -> RunSummary:
    """Run (or resume) tasks × k attempts into `results_path` (`ResumeRefused` when the file is another run's)."""
    return asyncio.run(run_async(tasks, cfg, backend, results_path, repair, on_result, rerun_changed))


def run_here_or_on_ray(tasks: list[tuple[Task, Domain]], cfg: RunConfig, backend: Backend, backend_spec: tuple[str, str | None],
                       results_path: Path, *, ray_address: str | None = None, ray_cpus: int | None = None, repair: bool = False,
                       on_result: Callable[[Record], None] | None = None, rerun_changed: bool = False) -> RunSummary:
    """`run` on this machine, or `ray_runner.run_ray` when `ray_address` is given (`local` starts a private instance;
    `auto`, `HOST:PORT` or `ray://HOST:10001` join a cluster). Same results file, same resume semantics."""
    if not ray_address:
        return run(tasks, cfg, backend, results_path, repair, on_result, rerun_changed)
    from groundstate.ray_runner import run_ray

    prepare_domains(tasks, backend)  # as `run` does: a broken domain fails here, not on every actor
    return run_ray(tasks, cfg, backend_spec, results_path, address=None if ray_address == "local" else ray_address,
                   repair=repair, on_result=on_result, num_cpus=ray_cpus, rerun_changed=rerun_changed)


def outcome(record: Record) -> str:
    """pass, fail, system_error or unjudged: how a record counts (unjudged and system errors are neither)."""
    if record.get("system_error"):
        return "system_error"
    if record.get("unjudged"):
        return "unjudged"
    return "pass" if record.get("reward") == 1 else "fail"


def progress_status(tally: dict[str, int]) -> str:
    """The progress-bar line of a run or probe from its `outcome` counts."""
    line = f"pass {tally.get('pass', 0)} · fail {tally.get('fail', 0)} · system errors {tally.get('system_error', 0)}"
    return line + (f" · unjudged {tally['unjudged']}" if tally.get("unjudged") else "")

