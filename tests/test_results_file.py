"""The results file: one writer at a time, rewrites that orphan no writer, the file's mode kept, the manifest
named after the whole file name, and command-line options checked before anything runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from openai_stub import text

from groundstate.results import ResultsWriter, read_records
from groundstate.runner import RunConfig, run
from groundstate.state.sqlite import SqliteBackend

SHOP = str(Path(__file__).parent / "fixtures" / "shop")


def keys(records):
    return sorted((r["task_id"], r["attempt"]) for r in records)


class GatedServer:
    """An OpenAI-compatible endpoint that answers every request with a final text reply, except request
    number `hold`, which it keeps open until `release` is set: a run that is provably still in flight."""

    def __init__(self, hold: int):
        self.reached, self.release = threading.Event(), threading.Event()
        self.count = 0
        lock, server = threading.Lock(), self
        payload = json.dumps(text("Done.").body).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server naming
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    server.count += 1
                    n = server.count
                if n == hold:
                    server.reached.set()
                    server.release.wait(300)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def close(self) -> None:
        self.release.set()
        self.http.shutdown()
        self.http.server_close()


# -- one writer per results file (#15 item 4) ---------------------------------------------------------------


def test_a_second_run_on_the_same_out_is_refused_naming_the_first_and_loses_nothing(tmp_path):
    """Two real `groundstate run` processes on one --out: the second is refused, naming the first one's pid, and
    writes nothing; the first finishes with every key exactly once and its earlier records unchanged."""
    path = tmp_path / "results.jsonl"
    server = GatedServer(hold=4)
    cmd = [sys.executable, "-m", "groundstate.cli", "run", "--agent", f"openai:m@{server.url}", "--tasks", SHOP, "--k", "2",
           "--concurrency", "1", "--out", str(path)]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert server.reached.wait(120), "the first run never reached the held request"
        before = read_records(path)
        content = path.read_bytes()
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        message = " ".join(second.stderr.split())
        assert second.returncode == 3, second.stdout + second.stderr
        assert f"results file {path} is in use by another run (pid {first.pid} on " in message
        assert "Traceback" not in second.stderr
        assert path.read_bytes() == content  # the refused run wrote nothing
        server.release.set()
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0, out + err
    finally:
        server.close()
        if first.poll() is None:
            first.kill()
            first.wait()
    after = read_records(path)
    assert keys(after) == sorted((t, a) for t in ("shop-cancel", "shop-refuse", "shop-multi") for a in range(2))
    assert all(r in after for r in before)
    assert not path.with_name(path.name + ".lock").exists()  # released with the run


def test_a_run_cannot_rewrite_a_file_another_writer_holds(tmp_path, shop):
    """The issue's loss: a run that drops a system error rewrites the file while another writer appends to it.
    Now the run is refused before it reads the file, and the holder's records all land in the file."""
    path = tmp_path / "results.jsonl"
    pairs = [(t, shop) for t in shop.tasks]
    run(pairs, RunConfig(agent="scripted:gold", k=1), SqliteBackend(), path)
    broken = {**read_records(path)[0], "attempt": 1, "reward": None, "system_error": "db down"}
    holder = ResultsWriter(path)
    holder.write(broken)  # the holder's own record: a run would drop it (a system error) by rewriting the file
    content = path.read_bytes()
    with pytest.raises(Exception, match=rf"in use by another run \(pid {os.getpid()} on ") as refused:
        run(pairs, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), path)
    assert type(refused.value).__name__ == "ResultsInUseError"
    assert path.read_bytes() == content
    late = {**broken, "task_id": "shop-refuse"}
    holder.write(late)
    holder.close()
    assert read_records(path)[-2:] == [broken, late]  # both reached the file, none went to a replaced copy
    s = run(pairs, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), path)  # released: the next run resumes
    assert (s.ran, s.skipped) == (3, 3)
    assert keys(read_records(path)) == sorted((t.id, a) for t in shop.tasks for a in range(2))


def test_a_rewrite_through_the_writer_keeps_appending_to_the_new_file(tmp_path):
    path = tmp_path / "r.jsonl"
    with ResultsWriter(path) as writer:
        writer.write({"task_id": "t", "attempt": 0, "system_error": "x"})
        writer.rewrite([{"task_id": "t", "attempt": 1}])
        writer.write({"task_id": "t", "attempt": 2})
    assert [r["attempt"] for r in read_records(path)] == [1, 2]


def test_a_killed_holder_leaves_the_file_free(tmp_path):
    """The kernel drops a flock when its holder dies, however it dies: a stale lock file never blocks a run."""
    path = tmp_path / "r.jsonl"
    script = ("import sys, time; from pathlib import Path; from groundstate.results import ResultsWriter; "
              "w = ResultsWriter(Path(sys.argv[1])); print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(Exception, match=f"pid {proc.pid} on "):
            ResultsWriter(path)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert path.with_name(path.name + ".lock").exists()  # left behind by the killed holder
    with ResultsWriter(path) as writer:
        writer.write({"task_id": "t", "attempt": 0})
    assert [r["attempt"] for r in read_records(path)] == [0]
