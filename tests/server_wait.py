"""Waiting for a server a test started: its `/health` answers, or the test fails saying why (the process ended, or
two minutes passed), with the tail of its log where there is one; the process is killed then."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path


def wait_until_serving(url: str, proc: subprocess.Popen, log: Path | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"the server did not start: {log.read_text()[-3000:] if log else ''}") from None
            time.sleep(0.3)
