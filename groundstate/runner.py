"""The runner: tasks × k attempts, concurrent, resumable, one results line per attempt.

Each attempt is keyed (task id, attempt index) and appended to a JSONL file as it finishes. Running
the same command again resumes: finished keys are skipped, and system-error keys are retried
(`repair=True` retries only those). Blocking database work runs off the event loop on PostgreSQL;
concurrency is bounded by `concurrency` and by the backend's open-sandbox limit (less one, kept for
the grader's golden replays). If the results file cannot be written (disk full, permission denied)
the run stops with `ResultsWriteError`: attempts in flight are cancelled, never half-recorded.
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
from groundstate.attempt import DEFAULT_GRADE_TIMEOUT_S, play
from groundstate.grading import Grader, Verdict, grader_for, system_error
from groundstate.results import Record, ResultsWriteError, ResultsWriter, key_of, read_records, rewrite_atomically
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


def write_manifest(path: Path, cfg: RunConfig, tasks: list[tuple[Task, Domain]], backend: Backend, extra: dict[str, Any] | None = None) -> Path:
    manifest = path.with_suffix(".manifest.json")
    previous = json.loads(manifest.read_text()) if manifest.exists() else {}
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
        "resumed": previous.get("resumed", -1) + 1,
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


async def run_async(
    tasks: list[tuple[Task, Domain]],
    cfg: RunConfig,
    backend: Backend,
    results_path: Path,
    repair: bool = False,
    on_result: Callable[[Record], None] | None = None,
) -> RunSummary:
    start = time.perf_counter()
    results_path = Path(results_path)
    try:
        results_path.parent.mkdir(parents=True, exist_ok=True)
        existing = read_records(results_path, repair_tail=True)
        todo, kept = plan(tasks, cfg.k, existing, repair)
        if len(kept) != len(existing):
            rewrite_atomically(results_path, kept)  # drop superseded system errors before their retries are appended
        manifest = write_manifest(results_path, cfg, tasks, backend)
        writer = ResultsWriter(results_path)  # opened before any attempt runs: an unwritable file stops the run at once
    except ResultsWriteError:
        raise
    except OSError as e:  # a read-only file or folder, a full disk
        raise ResultsWriteError(results_path, e) from e
    grader = grader_for(backend)
    agents = AgentPool(cfg)
    # every slot may be held by an attempt: attempts compute their task's golden state (which needs a sandbox
    # of its own) before taking theirs, so no attempt ever waits for a second one (groundstate.attempt)
    limit = min(cfg.concurrency, backend.max_open or cfg.concurrency)
    slots = asyncio.Semaphore(max(1, limit))
    counts = {"passed": 0, "failed": 0, "system_errors": 0, "unjudged": 0}

    async def one(t: Task, d: Domain, a: int) -> None:
        async with slots:
            record = await run_attempt(t, d, a, backend, grader, agents, cfg)
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
                      counts["passed"], counts["failed"], counts["system_errors"], counts["unjudged"], time.perf_counter() - start)


def run(tasks: list[tuple[Task, Domain]], cfg: RunConfig, backend: Backend, results_path: Path, repair: bool = False,
        on_result: Callable[[Record], None] | None = None) -> RunSummary:
    """Run (or resume) tasks × k attempts into `results_path`."""
    return asyncio.run(run_async(tasks, cfg, backend, results_path, repair, on_result))


def run_here_or_on_ray(tasks: list[tuple[Task, Domain]], cfg: RunConfig, backend: Backend, backend_spec: tuple[str, str | None],
                       results_path: Path, *, ray_address: str | None = None, ray_cpus: int | None = None, repair: bool = False,
                       on_result: Callable[[Record], None] | None = None) -> RunSummary:
    """`run` on this machine, or `ray_runner.run_ray` when `ray_address` is given (`local` starts a private instance;
    `auto`, `HOST:PORT` or `ray://HOST:10001` join a cluster). Same results file, same resume semantics."""
    if not ray_address:
        return run(tasks, cfg, backend, results_path, repair, on_result)
    from groundstate.ray_runner import run_ray

    return run_ray(tasks, cfg, backend_spec, results_path, address=None if ray_address == "local" else ray_address,
                   repair=repair, on_result=on_result, num_cpus=ray_cpus)


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

