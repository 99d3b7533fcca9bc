"""The results store: one typed JSON record per attempt, appended as attempts finish.

Every later tool (metrics, report, compare, selection, export, training) reads only these records, so runs
from any source can be analysed. A record is keyed by (task_id, attempt); a crash loses at most the attempts
in flight, and a half-written last line is ignored and cut off on the next run.

Records are `AttemptRecord`s, validated on every read: a line that is not one (`null`, `[]`, a reward of 7, an
attempt of "zero", a negative or NaN token count, a trajectory whose messages are not objects or whose tool calls are not
`types.ToolCallRecord`s) is a `RecordError` naming the file, the line and the field.
Version 2 records (`record_version: 2`, written since runs carry their identity) also hold `run`, the
`RunIdentity` of the run that wrote them (agent, user, judge, seed, sampling, an LLM user's sampling and audit, the
limits that change verdicts, the selected task ids), and `task_fingerprint`, the version of the task they attempted. Records
without them (version 1, older files or other tools) stay readable: each file of them counts as the run of its
records' own `agent`/`user`/`seed` fields (`run_key`), and `groundstate run` refuses to resume onto them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import socket
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_serializer, model_validator

from groundstate.jsontext import dumps
from groundstate.tasks import Task
from groundstate.types import FAULT_KINDS, ErrorKind, FaultKind, Trajectory, Usage, Verdict

Key = tuple[str, int]
RECORD_VERSION = 2
OUTCOMES = ("pass", "fail", "system_error", "unjudged")

Count = Annotated[int, Field(strict=True, ge=0)]
# tokens of one attempt: a trillion is beyond any context, and keeps every cost a finite float
TokenCount = Annotated[int, Field(strict=True, ge=0, lt=10**12)]
# attempts per task a run may make (`run --k`, `probe --n`), so an attempt index is below it: a record claiming
# attempt 10**15 would otherwise make every reader lay out 10**15 attempts per task
MAX_ATTEMPTS = 100_000


class RecordError(ValueError):
    """A results file, or one of its lines, is not what a reader can use; the message names the file and line."""


class UserReplies(BaseModel):
    """An attempt's LLM-user replies with a user cache (`agents.user_cache`): replayed, generated, bad rows evicted."""

    model_config = ConfigDict(extra="forbid")
    cached: Count = 0
    generated: Count = 0
    evicted: Count = 0

    @model_serializer
    def to_json(self) -> dict[str, int]:
        return {"cached": self.cached, "generated": self.generated, **({"evicted": self.evicted} if self.evicted else {})}


class RecordUsage(BaseModel):
    """Agent tokens of one attempt: whole, non-negative numbers (a NaN or negative count would skew every cost)."""

    model_config = ConfigDict(extra="forbid")
    input_tokens: TokenCount = 0
    output_tokens: TokenCount = 0
    cached_input_tokens: TokenCount = 0


class RunIdentity(BaseModel):
    """What makes two attempts of one task comparable: records of different identities are different runs.

    Everything that changes an attempt's verdict or its sampling is here; what only changes speed
    (concurrency, backend, Ray) is not. `tasks` is a hash of the sorted selected task ids. k is not: attempt
    i is the same whatever k was asked (its seed depends on task, i and seed), so a run may grow from k=4 to 8."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    agent: str
    user: str
    judge: str | None = None
    seed: int
    sampling: dict[str, Any] = Field(default_factory=dict)
    limits: dict[str, Any] = Field(default_factory=dict)
    tasks: str
    tool_call_format: str | None = None  # where an `openai:` agent read tool calls; None for other agents
    # an LLM user's sampling settings as given (None: its defaults), and whether its replies were audited
    # (`agents.user_audit`: a fault is a system error, not a verdict); None for the scripted user
    user_sampling: dict[str, Any] | None = None
    user_audit: bool | None = None

    @property
    def id(self) -> str:
        data = self.model_dump()
        for name in ("tool_call_format", "user_sampling", "user_audit"):
            if data[name] is None:  # not part of the identity of runs before it existed, nor where it does not apply
                del data[name]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def differences(self, other: RunIdentity) -> list[str]:
        """`field: this → other` for every field that differs (the task set is named, not its hash)."""
        a, b = self.model_dump(), other.model_dump()
        return [("selected tasks" if f == "tasks" else f) + ("" if f == "tasks" else f": {a[f]!r} → {b[f]!r}") for f in a if a[f] != b[f]]


def task_set_hash(task_ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(set(task_ids))).encode()).hexdigest()[:16]


class AttemptRecord(BaseModel):
    """One attempt's record, validated wherever it is read or made, and immutable. Fields beyond these are kept as they
    are (other tools may add their own). A record read from a file keeps its line, so a rewritten file keeps it byte for
    byte; a copy with changed fields (`model_copy(update=...)`) is written from its fields."""

    model_config = ConfigDict(extra="allow", frozen=True)
    task_id: Annotated[str, Field(strict=True, min_length=1)]
    attempt: Annotated[int, Field(strict=True, ge=0, lt=MAX_ATTEMPTS)]
    domain: str | None = None
    split: str | None = None
    family: str | None = None
    template: str | None = None
    source_id: str | None = None  # the attempted task's id in the benchmark it comes from (τ²'s), where it has one
    reward: Annotated[int, Field(strict=True)] | None  # 1 or 0; None for a system error or an unjudged attempt
    system_error: str | None = None
    unjudged: Annotated[bool, Field(strict=True)] = False
    finish_reason: str | None = None
    agent: str | None = None
    model: str | None = None
    user: str | None = None
    seed: Annotated[int, Field(strict=True)] | None = None
    usage: RecordUsage = Field(default_factory=RecordUsage)
    verdict: Verdict | None = None
    trajectory: Trajectory | None = None
    timings: dict[str, Any] = Field(default_factory=dict)
    record_version: Annotated[int, Field(strict=True, ge=1, le=RECORD_VERSION)] = 1
    run: RunIdentity | None = None
    task_fingerprint: str | None = None
    # how many reply rubrics the attempted task has (0: graded on its final state alone); None in records made before
    # it was written. A rubric task of a run without a judge is set apart by every figure (`stats.basis`)
    rubrics: Annotated[int, Field(strict=True, ge=0)] | None = None
    # with a user cache: how many of the attempt's LLM-user replies were replayed, generated, evicted as bad rows
    user_replies: UserReplies | None = None
    # the user-simulator faults that ended the earlier tries of this key, which `--repair` replaced (`pipeline.runner`)
    user_faults: list[FaultKind] = Field(default_factory=list)
    # the tokens of those earlier tries, one entry a try that spent any: counted with this record (`spent`)
    replaced_usage: list[RecordUsage] = Field(default_factory=list)
    _line: str | None = PrivateAttr(default=None)  # the line it was read from, if it was

    @model_validator(mode="before")
    @classmethod
    def _before_kinds(cls, data: Any) -> Any:
        """Records written before system errors had a kind: their kind read once, here, from the text the harness wrote
        (`_legacy_error`); a newer record says it (`Verdict.error_kind`), and nothing else reads an error's text."""
        if not isinstance(data, dict):
            return data
        verdict = data.get("verdict")
        if isinstance(verdict, dict) and isinstance(verdict.get("system_error"), str) and "error_kind" not in verdict:
            kind, fault = _legacy_error(verdict["system_error"])
            data = {**data, "verdict": {**verdict, "error_kind": kind, **({"fault": fault} if fault else {})}}
        faults = data.get("user_faults")
        if isinstance(faults, list):  # older records kept any string here; only fault kinds ever counted
            data = {**data, "user_faults": [f for f in faults if f in FAULT_KINDS]}
        return data

    @field_validator("usage", mode="before")
    @classmethod
    def _null_usage_means_no_tokens(cls, v: Any) -> Any:  # a record of an attempt that never reached the agent
        return {} if v is None else v

    @model_validator(mode="after")
    def _consistent(self) -> AttemptRecord:
        if self.reward is None and not (self.system_error or self.unjudged):
            raise ValueError("reward is null, but the record is neither a system error nor unjudged")
        if self.reward is not None and self.reward not in (0, 1):
            raise ValueError(f"reward must be 1 or 0, got {self.reward}")
        if self.record_version >= 2 and (self.run is None or not self.task_fingerprint):
            raise ValueError(f"a version {self.record_version} record needs `run` and `task_fingerprint`")
        return self

    @model_serializer(mode="wrap")
    def _as_written(self, handler: Any) -> dict[str, Any]:
        """The fields a record is written with: source_id (tasks from another benchmark), user_replies, user_faults and
        replaced_usage only where there is something to say, so every other record reads as records always did. (One
        serializer: a class takes only the last it defines.)"""
        data = handler(self)
        for name, empty in (("source_id", None), ("user_replies", None), ("user_faults", []), ("replaced_usage", [])):
            if data.get(name) == empty:
                del data[name]
        return data

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> AttemptRecord:
        """A copy; with `update`, a record validated anew from its fields and the update (a verdict given as a dict is a
        `Verdict` again), whose old line no longer says what it holds."""
        if not update:
            return super().model_copy(deep=deep)
        return type(self).model_validate({**self.model_dump(), **update})

    @property
    def key(self) -> Key:
        return (self.task_id, self.attempt)

    @property
    def spent(self) -> RecordUsage:
        """The tokens this key cost: the attempt's and those of the earlier tries it replaced (`replaced_usage`). What
        every token count and cost figure adds up, so a repair never makes a run look cheaper than it was."""
        parts = [self.usage, *self.replaced_usage]
        return RecordUsage(**{f: sum(getattr(u, f) for u in parts) for f in RecordUsage.model_fields})

    @property
    def outcome(self) -> str:
        """pass, fail, system_error or unjudged (`OUTCOMES`): how the record counts. A system error and an unjudged
        attempt are neither a pass nor a fail."""
        if self.system_error:
            return "system_error"
        if self.unjudged:
            return "unjudged"
        return "pass" if self.reward == 1 else "fail"

    @property
    def error_kind(self) -> ErrorKind | None:
        """Which party failed, for a system error (`types.ErrorKind`); None otherwise."""
        if self.verdict is not None and self.verdict.error_kind is not None:
            return self.verdict.error_kind
        return _legacy_error(self.system_error)[0] if self.system_error else None  # a record without a verdict (other tools)

    @property
    def fault(self) -> FaultKind | None:
        """How an LLM user broke its persona, for a user-simulator fault; None otherwise."""
        if self.verdict is not None and self.verdict.error_kind is not None:
            return self.verdict.fault
        return _legacy_error(self.system_error)[1] if self.system_error else None

    @property
    def awaits_judge(self) -> bool:
        """Whether the attempt's verdict waits on a judge nobody gave: it is unjudged, or its task has reply rubrics and
        its run had no judge (a state that failed is a 0 either way, but which attempts fail depends on the judge-less
        run's luck alone: keeping those and setting the passes apart would bias every figure down)."""
        if self.unjudged:
            return True
        rubrics = self.rubrics if self.rubrics is not None else _legacy_rubrics(self.verdict)
        # a record without its run's identity does not say whether a judge was given: set apart (never biased)
        return bool(rubrics) and (self.run is None or self.run.judge is None)

    @property
    def run_key(self) -> str:
        """The run the record belongs to: its identity's id, or for a version 1 record its own agent, user and seed."""
        if self.run is not None:
            return self.run.id
        return f"v1:{self.agent}:{self.user}:{self.seed}"

    def describe_run(self) -> str:
        r = self.run
        if r is None:
            return f"agent {self.agent}, user {self.user}, seed {self.seed} (a record without run identity)"
        return f"agent {r.agent}, seed {r.seed}, sampling {r.sampling or 'default'}, run {self.run_key}"

    def to_line(self) -> str:
        """The record as one JSONL line (with its newline): the line it was read from, else its fields in order (a
        non-finite float a model's arguments held, which JSON cannot say, as null: `jsontext`).
        Readable UTF-8 where possible; a record holding text UTF-8 cannot encode (a lone surrogate, e.g. a model's tool
        arguments with an escaped `\\ud800`) is written with ASCII escapes instead, which JSON reads back to the same
        string, rather than losing the record."""
        if self._line is not None:
            return self._line + "\n"
        data = self.model_dump()
        line = dumps(data, ensure_ascii=False, default=str) + "\n"
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            return dumps(data, ensure_ascii=True, default=str) + "\n"
        return line


# what `grading.with_rubrics` has always written into a rubric task's reasons: how a record made before `rubrics` was a
# field says that its task has rubrics (only such records are read this way; newer ones carry the count)
_LEGACY_RUBRIC_REASONS = ("reply rubric(s) not judged", "reply rubric(s) unjudged")


def attempt_record(
    task: Task,
    attempt: int,
    verdict: Verdict,
    traj: Trajectory | None,
    timings: dict[str, float],
    *,
    agent: str,
    model: str | None,
    user: str,
    seed: int,
    user_replies: dict[str, int] | None = None,
    usage: Usage | None = None,
) -> AttemptRecord:
    """The record of one attempt of `task`, before a run stamps its identity and the task's fingerprint on it. `usage`:
    the tokens the attempt billed, where it has no trajectory (a system error's, `attempt.Outcome.usage`); else the
    trajectory's."""
    billed = usage if usage is not None else traj.usage if traj is not None else Usage()
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
            "agent": agent,
            "model": model,
            "user": user,
            "seed": seed,
            "usage": billed.to_json(),
            "verdict": verdict.to_json(),
            "trajectory": traj.to_json() if traj is not None else None,
            "timings": {k: round(v, 6) for k, v in timings.items()},
            "rubrics": len(task.rubrics),
            **({"source_id": task.source_id} if task.source_id is not None else {}),
            **({"user_replies": user_replies} if user_replies is not None else {}),
        }
    )


def _legacy_rubrics(verdict: Verdict | None) -> int:
    reasons = verdict.reasons if verdict is not None else []
    return int(any(any(m in r for m in _LEGACY_RUBRIC_REASONS) for r in reasons))


# How the harness began the text of each kind of system error before records said the kind: read only for such records.
_LEGACY_FAULT = re.compile(r"^user-simulator fault \(([a-z_]+)\):")
_LEGACY_PREFIXES: tuple[tuple[str, ErrorKind], ...] = (
    ("EndpointError: chat completion on", "endpoint"),
    ("EndpointError:", "endpoint"),
    ("judge failed", "judge"),
    ("JudgeError:", "judge"),
    ("GradingTimeout:", "time_limit"),
    ("EpisodeHang:", "time_limit"),
    ("grader failed", "grader"),
)


def _legacy_error(text: str | None) -> tuple[ErrorKind, FaultKind | None]:
    """The kind (and fault) of a system error recorded before kinds were fields, from the text the harness wrote."""
    text = text or ""
    m = _LEGACY_FAULT.match(text)
    if m and m.group(1) in FAULT_KINDS:
        return "user_fault", m.group(1)  # type: ignore[return-value]
    if text.startswith("EndpointError:") and ("malformed response" in text or "has no choices" in text):
        return "malformed_response", None
    for prefix, kind in _LEGACY_PREFIXES:
        if text.startswith(prefix):
            return kind, None
    if "within the attempt time limit" in text or "ran out of" in text:
        return "time_limit", None
    return "infrastructure", None


def latest_per_key(records: Iterable[AttemptRecord]) -> dict[Key, AttemptRecord]:
    """Which record counts for each (task, attempt): the last clean one (not a system error), else the last one; in the
    order of the records that count (a key recorded again takes its later place)."""
    keep: dict[Key, AttemptRecord] = {}
    for r in records:
        held = keep.get(r.key)
        if held is None or r.system_error is None or held.system_error is not None:
            keep.pop(r.key, None)
            keep[r.key] = r
    return keep


def check_one_run(records: list[AttemptRecord], source: str = "the records") -> None:
    """Raise `RecordError` when `records` come from more than one run, or hold records of two versions of one task
    (`task_fingerprint`): figures over a blend mean nothing."""
    runs: dict[str, list[AttemptRecord]] = {}
    for r in records:
        runs.setdefault(r.run_key, []).append(r)
    if len(runs) > 1:
        parts = "; ".join(f"{len(rs)} records of {rs[0].describe_run()}" for rs in runs.values())
        first, second = (rs[0].run for rs in list(runs.values())[:2])
        diff = ""
        if first is not None and second is not None:
            diff = " — they differ in " + ", ".join(first.differences(second))
        raise RecordError(f"{source} mixes {len(runs)} runs: {parts}{diff}. Figures over a blend of runs mean nothing: keep one run per results file")
    versions: dict[str, dict[str, int]] = {}
    for r in records:
        if r.task_fingerprint is not None:
            seen = versions.setdefault(r.task_id, {})
            seen[r.task_fingerprint] = seen.get(r.task_fingerprint, 0) + 1
    blended = {tid: v for tid, v in sorted(versions.items()) if len(v) > 1}
    if blended:
        tid, v = next(iter(blended.items()))
        counts = ", ".join(f"{n} records of version {fp}" for fp, n in sorted(v.items()))
        more = f" (and {len(blended) - 1} more tasks)" if len(blended) > 1 else ""
        raise RecordError(
            f"{len(v)} versions of task {tid}{more} are blended in {source}: {counts}. The task changed between its attempts, so "
            "a figure over them would blend two tasks: re-run it with --rerun-changed, or keep each version's records apart"
        )


def validate_record(data: Any, where: str, line: str | None = None) -> AttemptRecord:
    """`data` as a record (`line`: the text it was read from, kept for rewrites); a `RecordError` starting with `where`."""
    if not isinstance(data, dict):
        raise RecordError(f"{where}: not a record (a JSON object), got {_kind(data)}")
    try:
        record = AttemptRecord.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        message = err["msg"].removeprefix("Value error, ")
        raise RecordError(f"{where}: " + (f"field {field!r}: " if field else "") + message + more) from None
    record._line = line
    return record


def _kind(v: Any) -> str:
    return "null" if v is None else "an array" if isinstance(v, list) else f"{type(v).__name__} {json.dumps(v)[:40]}"


def read_records(path: Path | str, repair_tail: bool = False, missing_ok: bool = False) -> list[AttemptRecord]:
    """All records of a results file, each validated (`validate_record`); `RecordError` names the file and line.

    A last line without its newline is a crash mid-write and is skipped, unless it holds a complete record
    (then it is kept). With `repair_tail`, the file's tail is then repaired (`repair_tail`). A missing file is
    a `RecordError` unless `missing_ok` (then: no records).
    """
    path = Path(path)
    if not path.exists():
        if missing_ok:
            return []
        raise RecordError(f"{path}: no such results file")
    if path.is_dir():
        raise RecordError(f"{path}: is a folder, not a results file")
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1  # everything after the last newline is an incomplete write, or a last record without its newline
    lines = data[:end].splitlines()
    tail = data[end:]
    if _complete(tail):
        lines.append(tail)
    records = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        value = _parse(line)
        if value is None:
            raise RecordError(f"{path}:{lineno}: not a JSON record ({_json_error(line)})")
        records.append(validate_record(value[0], f"{path}:{lineno}", _text(line)))
    if repair_tail:
        repair_file_tail(path)
    return records


def repair_file_tail(path: Path) -> None:
    """Make appends start on a fresh line: an incomplete last line (a crash mid-write) is cut off; a complete
    last record without its newline gets one. Reads only the file's last line."""
    with Path(path).open("r+b") as f:
        pos, tail = f.seek(0, os.SEEK_END), b""
        while pos > 0:
            step = min(1 << 16, pos)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                tail, pos = chunk[newline + 1 :] + tail, pos + newline + 1
                break
            tail = chunk + tail
        if not tail:
            return
        if _complete(tail):
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
        else:
            f.truncate(pos)


def _text(line: bytes) -> str | None:
    """The line as text, to be written back as it was; None when it is not UTF-8 (JSON also reads UTF-16 and -32)."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _complete(tail: bytes) -> bool:
    """Whether the bytes after the last newline are a whole JSON line (a record written without its newline)."""
    return bool(tail.strip()) and _parse(tail) is not None


def _parse(line: bytes) -> tuple[Any] | None:
    """(value,) of a JSON line, or None when it is not JSON."""
    try:
        return (json.loads(line),)
    except (ValueError, UnicodeDecodeError):
        return None


def _json_error(line: bytes) -> str:
    try:
        json.loads(line)
    except json.JSONDecodeError as e:
        return e.msg
    except (ValueError, UnicodeDecodeError) as e:
        return str(e)
    return "unreadable"


def refuse_read_only(path: Path) -> None:
    """Raise `PermissionError` (EACCES) if `path` exists and is read-only: not writable by this user, or without any
    write bit (which binds root too, whom permissions do not stop: a file marked read-only is never changed)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    if not os.access(path, os.W_OK) or not mode & 0o222:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def real_path(path: Path | str) -> Path:
    """The results file a path names, symbolic links followed: one file has one lock, whichever link names it."""
    return Path(os.path.realpath(path))


def rewrite_atomically(path: Path, records: list[AttemptRecord]) -> None:
    """Replace the file's content in one step (write a temporary file, then rename over it).

    The new file keeps the old one's permission bits (and owner, where allowed). A read-only file is refused
    with `ResultsWriteError` rather than replaced (a rename needs only the folder's permission, not the file's).
    Call it only while holding the file's `ResultsLock` (`ResultsWriter.rewrite` does): a writer appending
    through an open descriptor would otherwise go on writing to the replaced copy, and its records would be lost.
    A symbolic link is followed: the file it names is replaced and the link stays a link.
    """
    target = real_path(path)
    try:
        refuse_read_only(target)
        old = target.stat() if target.exists() else None
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    except OSError as e:
        raise ResultsWriteError(path, e) from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for r in records:
                f.write(r.to_line())
            f.flush()
            if old is not None:
                with contextlib.suppress(OSError):  # only root may give a file away; anyone else keeps it as theirs
                    os.fchown(f.fileno(), old.st_uid, old.st_gid)
                os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))  # mkstemp creates 0600: keep the file's own mode
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ResultsWriteError(path, e) from e


class ResultsInUseError(RuntimeError):
    """Another writer holds the results file: two runs appending to one file (and rewriting it) lose records."""

    def __init__(self, path: Path, holder: str):
        super().__init__(
            f"results file {path} is in use by another run ({holder or 'holder unknown'}); wait for it to finish, or write to another file"
        )
        self.path = path
        self.holder = holder


class ResultsLock:
    """One writer per results file: an exclusive `flock` on the sibling `<file>.lock`, which names its holder.

    The lock is on a sibling, not on the results file, because a rewrite renames a new file over the results
    file, and a lock held on the replaced inode would no longer exclude anyone. The holder writes
    `pid <pid> on <host>` into the lock file so a refused run can say who holds it; the kernel drops the lock
    when the holder exits, however it exits, so a crashed run never leaves the file locked. The lock belongs to
    the file a symbolic link names, so two runs cannot each hold a lock of their own through two names.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        real = real_path(self.path)
        self.lock_path = real.with_name(real.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise `ResultsInUseError` naming the holder (never waits); `OSError` if it cannot be created."""
        while True:
            try:
                fd, writable = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666), True
            except PermissionError as denied:  # left by a crashed run of another user? Reading it is enough to lock it
                try:
                    fd, writable = os.open(self.lock_path, os.O_RDONLY), False
                except OSError:
                    raise denied from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 200).decode("utf-8", "replace").strip()
                os.close(fd)
                raise ResultsInUseError(self.path, holder) from None
            except BaseException:
                os.close(fd)
                raise
            # a holder removes the lock file as it releases: if it did so between our open and our flock, we hold a
            # lock on a file no one else will open, so take the lock again on the file that is there now
            try:
                here, there = os.fstat(fd), os.stat(self.lock_path)
                current = (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
            except FileNotFoundError:
                current = False
            if current and writable:
                break
            if current:  # a stale file we may not write: remove it while holding its lock, then create our own
                try:
                    os.unlink(self.lock_path)
                except OSError:
                    os.close(fd)
                    raise
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):  # removed while still held, so no one can lock the file being removed
            os.unlink(self.lock_path)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> ResultsLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ResultsWriteError(OSError):
    """The results file cannot be written (disk full, permission denied, ...): the run must stop.

    Raised with the file's name and the system's reason; every record written before it is intact.
    """

    def __init__(self, path: Path, error: OSError):
        where = f" ({error.filename})" if error.filename and str(error.filename) != str(path) else ""
        super().__init__(error.errno, f"cannot write results file {path}: {error.strerror or error}{where}")
        self.path = path


class ResultsWriter:
    """The one writer of a results file: holds its `ResultsLock` from construction to `close`, and appends records,
    one line each, written through to the file as they come.

    A line is written with unbuffered appends; if a write fails part-way (ENOSPC) the partial line is
    cut off again, so the file only ever holds whole records, and the writer refuses further writes.
    Raises `ResultsInUseError` when another writer holds the file, `ResultsWriteError` when it cannot be written.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = ResultsLock(self.path)
        self._fd: int | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock.acquire()
            refuse_read_only(self.path)
            self._fd = self._open()
        except OSError as e:
            self._lock.release()
            raise ResultsWriteError(self.path, e) from e
        self._failed: ResultsWriteError | None = None

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def rewrite(self, records: list[AttemptRecord]) -> None:
        """Replace the file's records with `records` (`rewrite_atomically`, under this writer's lock); later
        writes append to the new file."""
        if self._fd is None:
            raise ValueError(f"results writer for {self.path} is closed")
        rewrite_atomically(self.path, records)
        os.close(self._fd)
        self._fd = None
        try:
            self._fd = self._open()
        except OSError as e:
            self._failed = ResultsWriteError(self.path, e)
            raise self._failed from e

    def _append(self, data: bytes) -> None:
        """Append `data`; a short write is continued (O_APPEND: every write lands at the end)."""
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def write(self, record: AttemptRecord) -> None:
        if self._failed is not None:
            raise self._failed
        if self._fd is None:
            raise ValueError(f"results writer for {self.path} is closed")
        line = record.to_line().encode("utf-8")
        size = os.fstat(self._fd).st_size
        try:
            self._append(line)
        except OSError as e:
            # drop the partial line: the file keeps only whole records (failing that, the next read cuts the tail)
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)
            self._failed = ResultsWriteError(self.path, e)
            raise self._failed from e

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._lock.release()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
