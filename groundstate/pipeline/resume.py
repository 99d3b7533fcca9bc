"""How a run continues its results file: its identity, what to run and keep (`resume`), and the manifest.

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
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from groundstate import __version__
from groundstate.pipeline.config import Planned, RunConfig
from groundstate.records import (
    AttemptRecord,
    ResultsWriteError,
    ResultsWriter,
    RunIdentity,
    latest_per_key,
    read_records,
    repair_file_tail,
    task_set_hash,
)
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import Domain, EpisodeLimits
from groundstate.worlds.attempt import task_fingerprint


class ResumeRefused(ValueError):
    """The results file cannot be resumed by this run (another run's records, or changed tasks): nothing was written."""


def limits_identity(lim: EpisodeLimits) -> dict[str, Any]:
    """The limits as a run's identity names them (`RunIdentity.limits`): those that change an attempt's verdict."""
    return {
        "max_turns": lim.max_turns,
        "max_tool_calls": lim.max_tool_calls,
        "attempt_timeout": lim.timeout,
        "max_result_chars": lim.max_result_chars,
        "max_attempt_tokens": lim.max_tokens,
    }


def run_identity(cfg: RunConfig, tasks: list[tuple[Task, Domain]]) -> RunIdentity:
    """The identity every record of this run carries (see `RunIdentity`)."""
    llm_user = cfg.user.is_llm
    limits = limits_identity(cfg.limits)
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
        "started": previous.get("started") or datetime.now(UTC).isoformat(),
        "updated": datetime.now(UTC).isoformat(),
        "resumed": previous["resumed"] + 1 if isinstance(previous.get("resumed"), int) else 0,
        **(extra or {}),
    }
    if previous.get("task_list_hash") not in (None, body["task_list_hash"]):
        body["warning"] = "the task list changed since this results file was started"
    manifest.write_text(json.dumps(body, indent=1, default=str))
    return manifest
