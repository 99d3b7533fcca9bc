"""What the stdio transport writes itself instead of the MCP SDK's private helpers: a server's environment, and the end
of its whole process group (the round trip through a real server: `test_thinkingbox.py`'s spawning and noisy servers)."""

from __future__ import annotations

import signal
import sys
import time

import anyio
import psutil

from groundstate.tools.stdio_transport import server_environment, terminate_group


def test_a_server_inherits_what_a_program_needs_never_this_process_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("GROUNDSTATE_PG_DSN", "postgresql://postgres:pw@db/x")
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("SHELL", "() { :; }; echo pwned")  # a shell function's form: never passed on
    env = server_environment({"TB_MODE": "x", "PATH": "/opt/server/bin"})
    assert env["HOME"] == "/home/someone" and env["TB_MODE"] == "x" and env["PATH"] == "/opt/server/bin"  # the server's own wins
    assert not {"OPENAI_API_KEY", "GROUNDSTATE_PG_DSN", "SHELL"} & set(env)
    assert server_environment()["PATH"] == "/usr/bin:/bin"


LEADER = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ignored, and so for the child it starts too
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def _dies(pid: int, bound_s: float = 30.0) -> bool:
    """Whether the process dies (SIGKILL is delivered as the kernel schedules it), waiting at most `bound_s` for it."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:  # dead: an orphan's zombie is init's to reap
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def test_a_process_group_that_ignores_sigterm_is_killed_whole():
    async def main() -> tuple[int, int]:
        async with await anyio.open_process([sys.executable, "-c", LEADER], start_new_session=True) as process:
            assert process.stdout is not None
            child = int((await process.stdout.receive()).decode().split()[0])
            await terminate_group(process.pid, 0.5)
            return await process.wait(), child

    status, child = anyio.run(main)
    assert status == -signal.SIGKILL and _dies(child)


def test_a_group_already_gone_is_left_alone():
    async def main() -> None:
        async with await anyio.open_process([sys.executable, "-c", "pass"], start_new_session=True) as process:
            await process.wait()
            await terminate_group(process.pid, 0.5)  # no such group: returns at once, raises nothing

    anyio.run(main)
