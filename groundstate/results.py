"""The results store: one JSON object per attempt, appended as attempts finish.

Every later tool (metrics, report, selection, training) reads only these records, so runs from any
source can be analysed. A record is keyed by (task_id, attempt); a crash loses at most the attempts in
flight, and a half-written last line is ignored and cut off on the next run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterator

Record = dict[str, Any]
Key = tuple[str, int]


def key_of(record: Record) -> Key:
    return (record["task_id"], int(record["attempt"]))


def read_records(path: Path | str, repair_tail: bool = False) -> list[Record]:
    """All complete records of a results file; a truncated last line (a crash mid-write) is skipped.

    With `repair_tail`, the truncated tail is cut off the file so appends start on a fresh line.
    """
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    records = []
    end = data.rfind(b"\n") + 1  # everything after the last newline is an incomplete write
    for lineno, line in enumerate(data[:end].splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: not a JSON record ({e.msg})") from None
    if repair_tail and end < len(data):
        with path.open("r+b") as f:
            f.truncate(end)
    return records


def dump_line(record: Record) -> str:
    """One JSONL line. Readable UTF-8 where possible; a record holding text that UTF-8 cannot encode (a lone
    surrogate, e.g. a model's tool arguments with an escaped `\\ud800`) is written with ASCII escapes instead,
    which JSON reads back to the same string, rather than losing the record."""
    line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(record, ensure_ascii=True, default=str) + "\n"
    return line


def iter_records(path: Path | str) -> Iterator[Record]:
    yield from read_records(path)


def refuse_read_only(path: Path) -> None:
    """Raise `PermissionError` (EACCES) if `path` exists and is read-only: not writable by this user, or without any
    write bit (which binds root too, whom permissions do not stop: a file marked read-only is never changed)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    if not os.access(path, os.W_OK) or not mode & 0o222:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def rewrite_atomically(path: Path, records: list[Record]) -> None:
    """Replace the file's content in one step (write a temporary file, then rename over it).

    The new file keeps the old one's permission bits (and owner, where allowed). A read-only file is refused
    with `ResultsWriteError` rather than replaced (a rename needs only the folder's permission, not the file's).
    Call it only while holding the file's `ResultsLock` (`ResultsWriter.rewrite` does): a writer appending
    through an open descriptor would otherwise go on writing to the replaced copy, and its records would be lost.
    """
    try:
        refuse_read_only(path)
        old = path.stat() if path.exists() else None
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    except OSError as e:
        raise ResultsWriteError(path, e) from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for r in records:
                f.write(dump_line(r))
            f.flush()
            if old is not None:
                with contextlib.suppress(OSError):  # only root may give a file away; anyone else keeps it as theirs
                    os.fchown(f.fileno(), old.st_uid, old.st_gid)
                os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))  # mkstemp creates 0600: keep the file's own mode
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ResultsWriteError(path, e) from e


class ResultsInUseError(RuntimeError):
    """Another writer holds the results file: two runs appending to one file (and rewriting it) lose records."""

    def __init__(self, path: Path, holder: str):
        super().__init__(f"results file {path} is in use by another run ({holder or 'holder unknown'}); "
                         "wait for it to finish, or write to another file")
        self.path = path
        self.holder = holder


class ResultsLock:
    """One writer per results file: an exclusive `flock` on the sibling `<file>.lock`, which names its holder.

    The lock is on a sibling, not on the results file, because a rewrite renames a new file over the results
    file, and a lock held on the replaced inode would no longer exclude anyone. The holder writes
    `pid <pid> on <host>` into the lock file so a refused run can say who holds it; the kernel drops the lock
    when the holder exits, however it exits, so a crashed run never leaves the file locked.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
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

    def __enter__(self) -> "ResultsLock":
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

    def rewrite(self, records: list[Record]) -> None:
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
            view = view[os.write(self._fd, view):]

    def write(self, record: Record) -> None:
        if self._failed is not None:
            raise self._failed
        if self._fd is None:
            raise ValueError(f"results writer for {self.path} is closed")
        line = dump_line(record).encode("utf-8")
        size = os.fstat(self._fd).st_size
        try:
            self._append(line)
        except OSError as e:
            try:
                os.ftruncate(self._fd, size)  # drop the partial line: the file keeps only whole records
            except OSError:
                pass  # the next run's read cuts an unterminated tail anyway
            self._failed = ResultsWriteError(self.path, e)
            raise self._failed from e

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._lock.release()

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
