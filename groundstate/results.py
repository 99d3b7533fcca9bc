"""The results store: one JSON object per attempt, appended as attempts finish.

Every later tool (metrics, report, selection, training) reads only these records, so runs from any
source can be analysed. A record is keyed by (task_id, attempt); a crash loses at most the attempts in
flight, and a half-written last line is ignored and cut off on the next run.
"""

from __future__ import annotations

import json
import os
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


def rewrite_atomically(path: Path, records: list[Record]) -> None:
    """Replace the file's content in one step (write a temporary file, then rename over it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for r in records:
            f.write(dump_line(r))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class ResultsWriteError(OSError):
    """The results file cannot be written (disk full, permission denied, ...): the run must stop.

    Raised with the file's name and the system's reason; every record written before it is intact.
    """

    def __init__(self, path: Path, error: OSError):
        where = f" ({error.filename})" if error.filename and str(error.filename) != str(path) else ""
        super().__init__(error.errno, f"cannot write results file {path}: {error.strerror or error}{where}")
        self.path = path


class ResultsWriter:
    """Appends records, one line each, written through to the file as they come.

    A line is written with unbuffered appends; if a write fails part-way (ENOSPC) the partial line is
    cut off again, so the file only ever holds whole records, and the writer refuses further writes.
    """

    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as e:
            raise ResultsWriteError(path, e) from e
        self._failed: ResultsWriteError | None = None

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
