"""Stderr for servers whose supervisor may keep the pipe and never read it (`groundstate serve --protocol openenv`,
`groundstate serve-mcp`): every line is written by a thread of its own, so a full pipe blocks that thread, never the
event loop, and the server goes on answering and stops on SIGTERM.

- `StderrLines`: the writer, a queue and a thread. Bounded, a line the full queue cannot take is dropped and counted
  (the log); unbounded, every line is kept until it is written (a server's output, e.g. serve-mcp's verdict lines).
- `DroppingStderrHandler`: the log (uvicorn's, the SDKs', warnings) through a bounded `StderrLines`.
- `logging_to_stderr()`: one installed on the root logger for a server's lifetime. Run uvicorn with `log_config=None`,
  so that its loggers keep no handler of their own (one writing to stderr on the event loop stalled the server once
  the pipe was full) and reach the root logger's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator

DROPPED_NOTICE = "[groundstate] {n} log line(s) dropped: stderr was not read\n"


FINISH_S = 5.0  # what a server's log writer may take to finish once the server has stopped


class StderrLines:
    """Lines written to a file descriptor (stderr) in order by a daemon thread, from a queue of `capacity` lines
    (None: unbounded). `put` never blocks: with a bound, a line the full queue cannot take is dropped, and the count
    is written after the next line that gets through; without one, no line is ever dropped."""

    def __init__(self, fd: int = 2, capacity: int | None = None, name: str = "groundstate-stderr"):
        self._fd, self._dropped, self._closed = fd, 0, False
        self._count = threading.Lock()
        self._lines: queue.Queue[str | None] = queue.Queue(capacity or 0)
        self._writer = threading.Thread(target=self._write, name=name, daemon=True)
        self._writer.start()

    def put(self, line: str) -> bool:
        """Queue `line` (its own newline included); False if it was dropped, or came after `close`."""
        if self._closed:
            return False
        try:
            self._lines.put_nowait(line)
            return True
        except queue.Full:
            with self._count:
                self._dropped += 1
            return False

    def close(self, wait: float = 1.0) -> bool:
        """Stop the writer once it has written what it holds, waiting at most `wait` seconds in all; whether every
        line was written (False: the reader took too little, and the daemon writer is left behind, holding no lock
        anyone needs)."""
        deadline = time.monotonic() + wait
        if not self._closed:
            self._closed = True
            try:
                self._lines.put(None, timeout=wait)
            except queue.Full:
                return False
        self._writer.join(timeout=max(0.0, deadline - time.monotonic()))
        return not self._writer.is_alive()

    def _write(self) -> None:
        while True:
            line = self._lines.get()
            if line is not None:
                self._put(line)
            with self._count:
                dropped, self._dropped = self._dropped, 0
            if dropped:
                self._put(DROPPED_NOTICE.format(n=dropped))
            if line is None:
                return

    def _put(self, text: str) -> None:
        data = text.encode(errors="replace")
        try:
            while data:
                data = data[os.write(self._fd, data) :]  # one write per line: whole lines, between other writers' too
        except OSError:
            pass  # stderr closed: there is nowhere to write, and nothing to stop for


class DroppingStderrHandler(logging.Handler):
    """Log records as lines on `fd` through a bounded `StderrLines`: a reader that never drains the pipe costs lines
    (counted, see `StderrLines`), never a blocked caller."""

    def __init__(self, fd: int = 2, capacity: int = 1000):
        super().__init__()
        self._lines = StderrLines(fd, capacity, name="groundstate-log")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception as e:  # noqa: BLE001 - a bad log call must neither raise into the server nor write to stderr itself
            line = f"{record.levelname} {record.name}: a log record that could not be formatted ({type(e).__name__}: {e})"
        self._lines.put(line + "\n")

    def close(self, wait: float = 1.0) -> None:
        """Stop the writer after what it holds, waiting at most `wait` seconds (`logging.shutdown` calls it too)."""
        self._lines.close(wait)
        super().close()


@contextlib.contextmanager
def logging_to_stderr(fd: int | None = None) -> Iterator[DroppingStderrHandler]:
    """Every log record (the root logger's, warnings included) to stderr (`fd`) through a `DroppingStderrHandler`,
    for the duration; the writer gets `FINISH_S` seconds to finish at the end (a reader that reads only once the server
    stops, on a loaded machine, still gets every line or the count of those dropped)."""
    handler = DroppingStderrHandler(sys.stderr.fileno() if fd is None else fd)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    logging.captureWarnings(True)
    try:
        yield handler
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        handler.close(FINISH_S)
