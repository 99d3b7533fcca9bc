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


def iter_records(path: Path | str) -> Iterator[Record]:
    yield from read_records(path)


def rewrite_atomically(path: Path, records: list[Record]) -> None:
    """Replace the file's content in one step (write a temporary file, then rename over it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class ResultsWriter:
    """Appends records, one line each, flushed as they come."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = path.open("a", encoding="utf-8")

    def write(self, record: Record) -> None:
        self._f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()
