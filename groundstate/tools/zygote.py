"""The zygote of a forking MCP server pool: a server's imports paid once, one fresh server forked per attempt.

    python zygote.py CONTROL_FD module PACKAGE.MODULE [ARG...]    # the server is `python -m PACKAGE.MODULE ARG...`
    python zygote.py CONTROL_FD script PATH.py [ARG...]           # the server is `python PATH.py ARG...`

Run by the server's own interpreter, in the server's environment and folder (`groundstate.tools.fork_pool` starts
it), with the standard library only: the server's environment need not have groundstate. Contract:

- **Preload**: the zygote reads the server's source and imports what its module level imports (the `import`
  statements of its body, also inside `if`, `try` and `with`; its package first, as `python -m` does; for `from
  a import b` also `a.b`, the attribute or the submodule, so that a package's lazy attributes load), never
  running the server's own code. A dependency that fails to import is skipped: the server meets it for real.
- **Safety**: forking is safe only when the zygote is one thread with no socket open besides its control socket
  after the preload; otherwise it answers `{"ready": false, "why": ...}` and exits, and the pool starts fresh
  processes instead. Else it answers `{"ready": true}` (one JSON line on the control socket).
- **Forks**: each request is the byte `f` with two descriptors (SCM_RIGHTS): the attempt's stdio socket and its
  stderr log. The answer is `{"pid": N}`. The child leads a session of its own (its pid is its process group, as
  a server started by `stdio_transport` does), takes the socket as stdin and stdout and the log as stderr,
  reseeds `random` and runs the server as `python -m` or `python PATH.py` would: the server's module state is
  created in the child, from the same imported dependencies a fresh process would have.
- **Lifetime**: EOF on the control socket ends the zygote. SIGCHLD is ignored, so the kernel reaps its children;
  a child's own stdin EOF ends it, and the pool's transport stops its process group, as for a fresh process.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import importlib
import importlib.util
import json
import os
import runpy
import signal
import socket
import sys
import traceback

REQUEST = b"f"


def _imports(tree: ast.Module, package: str) -> list[tuple[str, tuple[str, ...]]]:
    """What `tree`'s module level imports, in order: (module, names taken from it) — `import a.b` is ("a.b", ()),
    `from a import b, c` is ("a", ("b", "c")), a relative module resolved against `package`."""
    found: list[tuple[str, tuple[str, ...]]] = []
    blocks = (ast.If, ast.Try, ast.With, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend((alias.name, ()) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                try:
                    base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level else node.module
                except ImportError:
                    continue  # a relative import outside a package: the server meets it for real
                if base:
                    found.append((base, tuple(alias.name for alias in node.names if alias.name != "*")))
            elif isinstance(node, blocks):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []) or [])
                for handler in getattr(node, "handlers", []) or []:
                    visit(handler.body)

    visit(tree.body)
    return found


def _server_source(mode: str, target: str) -> tuple[str, str, str]:
    """(source, file name, package) of the server, as `python -m` or `python PATH` would find it."""
    if mode == "script":
        with open(target, "rb") as f:
            return f.read().decode("utf-8", errors="replace"), target, ""
    spec = importlib.util.find_spec(target)
    if spec is None:
        raise ImportError(f"no module named {target!r}")
    if spec.submodule_search_locations is not None:  # `python -m package` runs package.__main__
        return _server_source(mode, target + ".__main__")
    source = spec.loader.get_source(target) if spec.loader is not None else None  # type: ignore[attr-defined]
    if source is None:
        raise ImportError(f"module {target!r} has no source to read its imports from")
    return source, spec.origin or target, target.rpartition(".")[0]


def preload(mode: str, target: str) -> None:
    """Import the server's module-level imports (see the module docstring); nothing of the server's own code runs."""
    try:
        source, filename, package = _server_source(mode, target)
        tree = ast.parse(source, filename)
    except (OSError, SyntaxError, ImportError, ValueError):
        return  # the server fails for real in its child, where its error reaches the attempt's log
    for module, names in ([(package, ())] if package else []) + _imports(tree, package):
        with contextlib.suppress(Exception, SystemExit):  # a dependency that cannot load now fails in the child, for real
            _import_from(module, names)


def _import_from(module: str, names: tuple[str, ...]) -> None:
    """Do what `import module` or `from module import names` does: import the module, then take each name from it (a
    package's lazy attributes load their modules then) or, where it has none, import the submodule of that name."""
    found = importlib.import_module(module)
    for name in names:
        try:
            getattr(found, name)
        except AttributeError:
            with contextlib.suppress(Exception, SystemExit):
                importlib.import_module(f"{module}.{name}")


def unsafe(control: socket.socket) -> str | None:
    """Why forking this process now would not give a clean server, or None when it would."""
    if os.path.isdir("/proc/self/task") and len(os.listdir("/proc/self/task")) > 1:
        return f"the server's imports started {len(os.listdir('/proc/self/task')) - 1} thread(s)"
    fds = "/proc/self/fd"
    if os.path.isdir(fds):
        for fd in os.listdir(fds):
            try:
                link = os.readlink(os.path.join(fds, fd))
            except OSError:
                continue
            if link.startswith("socket:") and int(fd) != control.fileno():
                return f"the server's imports opened a socket (descriptor {fd})"
    return None


def _send(control: socket.socket, message: dict) -> None:
    control.sendall(json.dumps(message).encode() + b"\n")


def serve(control: socket.socket) -> tuple[int, int] | None:
    """Fork one child per request until EOF; returns (stdio, stderr) descriptors in a child, None in the zygote at EOF."""
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 1, 2)
        except OSError:
            return None
        if not data:
            return None
        if data != REQUEST or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            return None  # not our client: stop rather than guess
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            control.close()
            return fds[0], fds[1]
        for fd in fds:
            os.close(fd)
        _send(control, {"pid": pid})


def become_server(stdio: int, stderr: int) -> None:
    """In a child: a session of its own, the attempt's descriptors as 0, 1 and 2, default signals, fresh random state."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(stdio, 0)
    os.dup2(stdio, 1)
    os.dup2(stderr, 2)
    for fd in {stdio, stderr} - {0, 1, 2}:
        os.close(fd)
    _reopen_stdio()
    if "random" in sys.modules:
        sys.modules["random"].seed()


def _reopen_stdio() -> None:
    """New `sys.stdin`, `sys.stdout` and `sys.stderr` over descriptors 0-2, made as a starting interpreter makes them
    (the zygote's were made over other files: a buffer that found /dev/null seekable would `tell()` on the socket)."""
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        old = getattr(sys, name)
        buffering = 1 if getattr(old, "line_buffering", False) else -1
        new = open(fd, mode, buffering, encoding=old.encoding, errors=old.errors, closefd=False)  # noqa: SIM115 - the process's own
        setattr(sys, name, new)
        setattr(sys, f"__{name}__", new)


def main(argv: list[str]) -> int:
    control = socket.socket(fileno=int(argv[1]))
    mode, target, args = argv[2], argv[3], argv[4:]
    if mode not in ("module", "script"):
        _send(control, {"ready": False, "why": f"unknown mode {mode!r}"})
        return 2
    sys.path[0] = os.getcwd() if mode == "module" else os.path.dirname(os.path.abspath(target))
    sys.argv = [target, *args]
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    preload(mode, target)
    why = unsafe(control)
    _send(control, {"ready": why is None, "why": why})
    if why is not None:
        return 0
    fds = serve(control)
    if fds is None:
        return 0
    become_server(*fds)
    code = 0
    try:
        if mode == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    _exit(code)
    return code


def _exit(code: int) -> None:
    """End a child as a forked worker ends (multiprocessing's way): exit handlers run and output is flushed, but the
    interpreter's teardown of every module is skipped — the zygote's imports are not this server's to finalise."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
