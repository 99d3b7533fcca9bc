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

from groundstate.pipeline.runner import RunConfig, run
from groundstate.records import AttemptRecord, ResultsWriter, read_records
from groundstate.state.sqlite import SqliteBackend

SHOP = str(Path(__file__).parents[1] / "fixtures" / "shop")


def flat(output: str) -> str:
    """A command's output as one line, without the frame of typer's error panel."""
    return " ".join(output.translate({ord(c): " " for c in "│╭╮╰╯─"}).split())


def keys(records):
    return sorted((r.task_id, r.attempt) for r in records)


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
    cmd = [
        sys.executable,
        "-m",
        "groundstate.cli",
        "run",
        "--agent",
        f"openai:m@{server.url}",
        "--tasks",
        SHOP,
        "--k",
        "2",
        "--concurrency",
        "1",
        "--out",
        str(path),
    ]
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
    first = {r.task_id: r for r in read_records(path)}
    broken = first["shop-cancel"].model_copy(update={"attempt": 1, "reward": None, "system_error": "db down"})
    holder = ResultsWriter(path)
    holder.write(broken)  # the holder's own record: a run would drop it (a system error) by rewriting the file
    content = path.read_bytes()
    with pytest.raises(Exception, match=rf"in use by another run \(pid {os.getpid()} on ") as refused:
        run(pairs, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), path)
    assert type(refused.value).__name__ == "ResultsInUseError"
    assert path.read_bytes() == content
    late = first["shop-refuse"].model_copy(update={"attempt": 1, "reward": None, "system_error": "db down"})  # stamped as that task's own record
    holder.write(late)
    holder.close()
    assert [r.model_dump() for r in read_records(path)[-2:]] == [broken.model_dump(), late.model_dump()]  # both reached the file
    s = run(pairs, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), path)  # released: the next run resumes
    assert (s.ran, s.skipped) == (3, 3)
    assert keys(read_records(path)) == sorted((t.id, a) for t in shop.tasks for a in range(2))


def test_a_rewrite_through_the_writer_keeps_appending_to_the_new_file(tmp_path):
    path = tmp_path / "r.jsonl"
    with ResultsWriter(path) as writer:
        writer.write(AttemptRecord.model_validate({"task_id": "t", "attempt": 0, "reward": None, "system_error": "x"}))
        writer.rewrite([AttemptRecord.model_validate({"task_id": "t", "attempt": 1, "reward": 1})])
        writer.write(AttemptRecord.model_validate({"task_id": "t", "attempt": 2, "reward": 1}))
    assert [r.attempt for r in read_records(path)] == [1, 2]


def test_a_killed_holder_leaves_the_file_free(tmp_path):
    """The kernel drops a flock when its holder dies, however it dies: a stale lock file never blocks a run."""
    path = tmp_path / "r.jsonl"
    script = (
        "import sys, time; from pathlib import Path; from groundstate.records import ResultsWriter; "
        "w = ResultsWriter(Path(sys.argv[1])); print('held', flush=True); time.sleep(600)"
    )
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
        writer.write(AttemptRecord.model_validate({"task_id": "t", "attempt": 0, "reward": 1}))
    assert [r.attempt for r in read_records(path)] == [0]


# -- options checked where they are parsed (#15 item 11) ----------------------------------------------------


def _numeric_options():
    """(command, parameter) for every int or float option of every command of the app."""
    import typer
    from typer.core import TyperGroup

    from groundstate.cli import app

    def walk(cmd, path):
        if isinstance(cmd, TyperGroup):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path), cmd

    for path, cmd in walk(typer.main.get_command(app), []):
        for p in cmd.params:
            kind = p.type_descriptor.annotation
            if p.param_type_name == "option" and kind in (int, float) and p.name != "seed":  # any integer is a seed
                yield pytest.param(cmd, p, kind, id=f"{path} {p.opts[-1]}")


@pytest.mark.parametrize("cmd,param,kind", list(_numeric_options()))
def test_every_numeric_option_refuses_nonsense_where_it_is_parsed(cmd, param, kind):
    """Every limit, count and sampling option of every command refuses a negative value (ints) or NaN and infinity
    (floats, which a plain range check lets through), with a message naming the value."""
    import typer

    for value in ["-1000000"] if kind is int else ["nan", "inf", "-inf"]:
        with pytest.raises(typer.BadParameter):
            param.process_value(cmd.context_class(cmd), value)


@pytest.mark.parametrize(
    "args,option",
    [
        (["--max-turns", "-1"], "--max-turns"),  # before: the gold agent scored 0%
        (["--max-turns", "0"], "--max-turns"),  # before: ignored, while the manifest recorded 0
        (["--max-tokens", "-5"], "--max-tokens"),
        (["--temperature", "nan"], "--temperature"),
        (["--temperature", "inf"], "--temperature"),
        (["--top-p", "0"], "--top-p"),
        (["--top-p", "1.5"], "--top-p"),
        (["--top-k", "-1"], "--top-k"),
        (["--attempt-timeout", "nan"], "--attempt-timeout"),
        (["--max-result-chars", "0"], "--max-result-chars"),
        (["--concurrency", "0"], "--concurrency"),
    ],
)
@pytest.mark.parametrize("command", ["run", "probe"])
def test_run_and_probe_refuse_bad_limits_and_sampling_before_anything_runs(tmp_path, command, args, option):
    from typer.testing import CliRunner

    from groundstate.cli import app

    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(app, [command, "--agent", "scripted:gold", "--tasks", SHOP, "--out", str(out), *args])
    text_out = flat(result.output)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in text_out and "is not" in text_out
    assert isinstance(result.exception, SystemExit)  # a usage message, not a traceback
    assert not out.exists() and list(tmp_path.iterdir()) == []  # nothing ran, nothing was written


def test_an_out_path_of_the_wrong_kind_is_a_usage_error_not_a_traceback(tmp_path, shop):
    """`--out` naming a folder where a results file is meant (run, probe, lint, report), or a file where an output
    folder is meant (export, select): exit 2 naming the option; nothing written."""
    from typer.testing import CliRunner

    from groundstate.cli import app

    folder = tmp_path / "folder"
    folder.mkdir()
    results = tmp_path / "r.jsonl"
    run([(t, shop) for t in shop.tasks], RunConfig(agent="scripted:gold", k=1), SqliteBackend(), results)
    before = sorted(p.name for p in tmp_path.iterdir())
    cases = [
        (["run", "--agent", "scripted:gold", "--tasks", SHOP, "--out", str(folder)], "--out", "is a directory"),
        (["probe", "--agent", "scripted:gold", "--tasks", SHOP, "--out", str(folder)], "--out", "is a directory"),
        (["tasks", "lint", "--domain", SHOP, "--out", str(folder)], "--out", "is a directory"),
        (["report", str(results), "--out", str(folder)], "--out", "is a directory"),
        (["export", str(results), "--format", "sft-jsonl", "--out", str(results)], "--out", "is a file"),
        (["select", str(results), "--out", str(results)], "--out", "is a file"),
    ]
    for args, option, why in cases:
        result = CliRunner().invoke(app, args)
        text_out = flat(result.output)
        assert result.exit_code == 2 and isinstance(result.exception, SystemExit), (args, result.output, result.exception)
        assert f"Invalid value for '{option}" in text_out and why in text_out, (args, text_out)
    assert sorted(p.name for p in tmp_path.iterdir()) == before and list(folder.iterdir()) == []


# -- one manifest per results file; the file's mode kept; read-only files refused (#15 item 11) --------------


def test_x_json_and_x_jsonl_have_a_manifest_each(tmp_path, shop):
    pairs = [(t, shop) for t in shop.tasks]
    a = run(pairs, RunConfig(agent="scripted:gold", k=1), SqliteBackend(), tmp_path / "x.json")
    b = run(pairs, RunConfig(agent="scripted:noop", k=2), SqliteBackend(), tmp_path / "x.jsonl")
    assert (a.manifest, b.manifest) == (tmp_path / "x.json.manifest.json", tmp_path / "x.jsonl.manifest.json")
    assert json.loads(a.manifest.read_text())["config"]["agent"] == "scripted:gold"
    assert json.loads(b.manifest.read_text())["config"]["agent"] == "scripted:noop"
    assert not (tmp_path / "x.manifest.json").exists()


def test_resuming_a_file_with_a_legacy_manifest_continues_its_history(tmp_path, shop):
    pairs = [(t, shop) for t in shop.tasks]
    path = tmp_path / "results.jsonl"
    run(pairs, RunConfig(agent="scripted:gold", k=1), SqliteBackend(), path)
    legacy = tmp_path / "results.manifest.json"  # as written before manifests took the whole file name
    (tmp_path / "results.jsonl.manifest.json").rename(legacy)
    old = json.loads(legacy.read_text())
    s = run(pairs, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), path)
    new = json.loads(s.manifest.read_text())
    assert s.manifest.name == "results.jsonl.manifest.json"
    assert (new["started"], new["resumed"]) == (old["started"], old["resumed"] + 1)
    fresh = run(pairs, RunConfig(agent="scripted:gold", k=1), SqliteBackend(), tmp_path / "results.json")  # a new file:
    assert json.loads(fresh.manifest.read_text())["resumed"] == 0  # never takes over the legacy manifest's history


def _with_a_system_error(path: Path, shop) -> bytes:
    """A results file whose next run drops a superseded system error, i.e. rewrites the file."""
    run([(t, shop) for t in shop.tasks], RunConfig(agent="scripted:gold", k=1), SqliteBackend(), path)
    records = read_records(path)
    with path.open("a") as f:
        f.write(records[0].model_copy(update={"attempt": 1, "reward": None, "system_error": "db down"}).to_line())
    return path.read_bytes()


def test_a_rewrite_keeps_the_results_files_mode(tmp_path, shop):
    path = tmp_path / "results.jsonl"
    _with_a_system_error(path, shop)
    path.chmod(0o640)
    s = run([(t, shop) for t in shop.tasks], RunConfig(agent="scripted:gold", k=2), SqliteBackend(), path)
    assert s.ran == 3 and len(read_records(path)) == 6  # the system error was dropped: the file was rewritten
    assert stat_mode(path) == 0o640  # before: 0600, mkstemp's mode


def test_a_read_only_results_file_is_refused_not_replaced(tmp_path, shop):
    """A read-only results file (even for root, whom permissions do not bind) is neither appended to nor replaced
    by a rewrite: the run stops naming the file, before any attempt runs."""
    from typer.testing import CliRunner

    from groundstate.cli import app

    path = tmp_path / "results.jsonl"
    content = _with_a_system_error(path, shop)
    path.chmod(0o444)
    inode = path.stat().st_ino
    result = CliRunner().invoke(app, ["run", "--agent", "scripted:gold", "--tasks", SHOP, "--k", "2", "--out", str(path)])
    assert result.exit_code == 3, result.output
    assert f"cannot write results file {path}: Permission denied" in flat(result.output)
    assert (path.read_bytes(), path.stat().st_ino, stat_mode(path)) == (content, inode, 0o444)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl", "results.jsonl.manifest.json"]


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


STALE_LOCK = """
import os, pwd, sys
from pathlib import Path
from groundstate.records import AttemptRecord, ResultsWriter
if os.geteuid() == 0:
    nobody = pwd.getpwnam("nobody")
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)
with ResultsWriter(Path(sys.argv[1])) as w:
    w.write(AttemptRecord.model_validate({"task_id": "t", "attempt": 0, "reward": 1}))
print("ok")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a second user: the test plays the other one by dropping to nobody")
def test_a_stale_lock_file_of_another_user_does_not_block_the_next_run():
    """A run killed as one user leaves `<file>.lock` behind, which another user may not write: the next run locks
    it read-only (no one holds it), replaces it with its own, and writes."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="gs_lock_"))
    try:
        folder.chmod(0o777)
        path = folder / "r.jsonl"
        stale = folder / "r.jsonl.lock"
        stale.write_text("pid 1 on elsewhere\n")
        stale.chmod(0o644)  # root's, not writable by nobody
        proc = subprocess.run([sys.executable, "-c", STALE_LOCK, str(path)], capture_output=True, text=True, timeout=60, cwd=folder)
        assert proc.stdout.strip() == "ok", proc.stderr[-2000:]
        assert [r.attempt for r in read_records(path)] == [0] and not stale.exists()
    finally:
        shutil.rmtree(folder)


def test_a_symlink_to_a_results_file_is_the_same_file_to_lock_and_rewrite(tmp_path, shop):
    """A link (`latest.jsonl -> runs/x/results.jsonl`) names the same file: a second run through it is refused, and
    a rewrite through it replaces the file the link points to, leaving the link a link."""
    (tmp_path / "runs").mkdir()
    real = tmp_path / "runs" / "results.jsonl"
    link = tmp_path / "latest.jsonl"
    link.symlink_to(Path("runs") / "results.jsonl")
    pairs = [(t, shop) for t in shop.tasks]
    run(pairs, RunConfig(agent="scripted:gold", k=1), SqliteBackend(), real)
    content = real.read_bytes()
    with ResultsWriter(real):
        with pytest.raises(Exception, match=rf"in use by another run \(pid {os.getpid()} on ") as refused:
            run(pairs, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), link)
        assert type(refused.value).__name__ == "ResultsInUseError"
    assert real.read_bytes() == content
    records = read_records(link)
    with ResultsWriter(link) as writer:
        writer.rewrite(records[:2])
        writer.write(records[2])
    assert link.is_symlink() and len(read_records(real)) == 3
