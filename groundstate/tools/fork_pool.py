"""Forked MCP server processes: one zygote per server command pays the imports once, each attempt forks a fresh server.

    zygote = zygote_for(params, startup_timeout)     # None: this command cannot fork (warned once); start a process
    pid, sock = zygote.fork(errlog_fd)               # a new server, its stdin and stdout on `sock`

A server command forks when it runs a Python interpreter as `PYTHON -m MODULE ARG...` or `PYTHON PATH.py ARG...`;
the zygote (`groundstate.tools.zygote`, run by that interpreter in the server's environment and folder) imports
the server's dependencies and checks that forking is safe. A command of another shape, a zygote that does not come
up within the start-up bound, or one whose imports started threads or opened sockets, is not forked: one warning
line says why, and that command's servers start as fresh processes. Zygotes are kept per command, environment and
folder, at most `MAX_ZYGOTES` at a time (the least recently used is closed; servers it forked live on), and are
closed when this process exits; a zygote also ends on its own when this process goes away (its control socket
closes).

Blocking calls (`zygote_for` may wait for a zygote's imports, `fork` for its answer) are meant for a worker thread.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import socket
import subprocess
import threading
import time
from collections import OrderedDict
from pathlib import Path

from mcp import StdioServerParameters

__all__ = ["MAX_ZYGOTES", "Zygote", "ZygoteError", "close_all", "fork_shape", "zygote_for", "zygote_pids"]

log = logging.getLogger(__name__)

ZYGOTE = Path(__file__).with_name("zygote.py")
MAX_ZYGOTES = 8
FORK_ANSWER_TIMEOUT_S = 30.0
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?$")


class ZygoteError(RuntimeError):
    """A zygote did not answer a fork request: the attempt's server did not start (a system error)."""


def fork_shape(command: str, args: list[str]) -> tuple[str, str, list[str]] | None:
    """(mode, target, args) when `command args` is `PYTHON -m MODULE …` or `PYTHON PATH.py …`; else None."""
    if not _PYTHON.match(Path(command).name):
        return None
    if len(args) >= 2 and args[0] == "-m" and args[1] and not args[1].startswith("-"):
        return "module", args[1], list(args[2:])
    if args and args[0].endswith(".py") and not args[0].startswith("-"):
        return "script", args[0], list(args[1:])
    return None


def _read_line(sock: socket.socket, deadline: float) -> dict:
    """One JSON line from `sock` before `deadline` (time.monotonic); ZygoteError when none comes."""
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left)[0]:
            raise ZygoteError("the zygote did not answer in time")
        chunk = sock.recv(4096)
        if not chunk:
            raise ZygoteError("the zygote exited")
        data += chunk
    try:
        message = json.loads(data)
    except json.JSONDecodeError:
        raise ZygoteError(f"the zygote answered {data[:200]!r}") from None
    if not isinstance(message, dict):
        raise ZygoteError(f"the zygote answered {data[:200]!r}")
    return message


class Zygote:
    """One running zygote (client side): `fork` makes a server; thread-safe."""

    def __init__(self, process: subprocess.Popen, control: socket.socket):
        self.process, self.control = process, control
        self._lock = threading.Lock()

    @classmethod
    def start(cls, python: str, mode: str, target: str, args: list[str], env: dict[str, str], cwd: str | None, timeout: float) -> Zygote:
        """Start a zygote and wait (at most `timeout` s) for its imports; ZygoteError says why it cannot serve forks."""
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(
                [python, str(ZYGOTE), str(theirs.fileno()), mode, target, *args],
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        except OSError as e:
            ours.close()
            raise ZygoteError(f"the zygote did not start: {e}") from None
        finally:
            theirs.close()
        zygote = cls(process, ours)
        try:
            ready = _read_line(ours, time.monotonic() + timeout)
        except ZygoteError:
            zygote.close()
            raise
        if ready.get("ready") is not True:
            zygote.close()
            raise ZygoteError(str(ready.get("why") or "the zygote refused"))
        return zygote

    def fork(self, stderr_fd: int) -> tuple[int, socket.socket]:
        """A fresh server: its pid (leader of its own session) and the socket that is its stdin and stdout."""
        ours, theirs = socket.socketpair()
        try:
            with self._lock:
                try:
                    socket.send_fds(self.control, [b"f"], [theirs.fileno(), stderr_fd])
                    answer = _read_line(self.control, time.monotonic() + FORK_ANSWER_TIMEOUT_S)
                except OSError as e:
                    raise ZygoteError(f"the zygote is gone: {e}") from None
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        pid = answer.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
            ours.close()
            raise ZygoteError(f"the zygote answered {answer!r}")
        return pid, ours

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Stop the zygote (its forked servers live on until their attempts end)."""
        self.control.close()
        try:
            self.process.wait(2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_lock = threading.Lock()  # guards `_zygotes` and `_starting`; never held while a zygote starts
_zygotes: OrderedDict[tuple, Zygote | str] = OrderedDict()  # key -> zygote, or why this command is not forked
_starting: dict[tuple, threading.Lock] = {}  # key -> held while that command's zygote starts (one start per command)


def zygote_for(params: StdioServerParameters, env: dict[str, str], timeout: float) -> Zygote | None:
    """The zygote for `params` run in environment `env` (started on first use, within `timeout` s), or None when
    that command cannot fork — said once per command in a warning, and its servers then start as processes. A zygote
    starting holds up only the attempts of its own command."""
    shape = fork_shape(params.command, list(params.args))
    key = (params.command, tuple(params.args), tuple(sorted(env.items())), str(params.cwd))
    with _lock:
        starting = _starting.setdefault(key, threading.Lock())
    with starting:
        with _lock:
            found = _zygotes.get(key)
            if isinstance(found, Zygote) and not found.alive():
                del _zygotes[key]
                found = None
            if found is not None:
                _zygotes.move_to_end(key)
                return found if isinstance(found, Zygote) else None
        if shape is None:
            found = "it is not `PYTHON -m MODULE` or `PYTHON SCRIPT.py`"
        else:
            try:
                found = Zygote.start(params.command, *shape, env, None if params.cwd is None else str(params.cwd), timeout)
            except ZygoteError as e:
                found = str(e)
        if isinstance(found, str):
            log.warning(
                "MCP server %s: not forked from a zygote (%s); each attempt starts a fresh process", " ".join([params.command, *params.args]), found
            )
        evicted: list[Zygote] = []
        with _lock:
            _zygotes[key] = found
            while sum(isinstance(z, Zygote) for z in _zygotes.values()) > MAX_ZYGOTES:
                oldest = next(k for k, z in _zygotes.items() if isinstance(z, Zygote))
                evicted.append(_zygotes.pop(oldest))  # type: ignore[arg-type]
        for zygote in evicted:  # outside the lock: closing waits for the zygote to exit
            zygote.close()
        return found if isinstance(found, Zygote) else None


def zygote_pids() -> set[int]:
    """The process ids of the live zygotes (servers forked from them are their children)."""
    with _lock:
        return {z.process.pid for z in _zygotes.values() if isinstance(z, Zygote) and z.alive()}


def close_all() -> None:
    """Close every zygote (at exit; also for tests)."""
    with _lock:
        zygotes = [z for z in _zygotes.values() if isinstance(z, Zygote)]
        _zygotes.clear()
    for zygote in zygotes:
        zygote.close()


def _forget_in_child() -> None:
    """In a forked copy of this process: no zygotes shared with the parent, and a lock nobody holds."""
    global _lock
    _lock = threading.Lock()
    _zygotes.clear()


atexit.register(close_all)
os.register_at_fork(after_in_child=_forget_in_child)
