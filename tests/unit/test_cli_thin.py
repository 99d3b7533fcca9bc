"""The command line is thin (#33 item 3): a command function parses its options, calls one library function and
prints; none is over 60 lines. Measured with `ast` on every function typer registers as a command in
`groundstate.cli` (subgroups included), from its `def` line to its last line: signature, docstring and body."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import typer

from groundstate.cli import app

LIMIT = 60


def registered(t: typer.Typer, path: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """(command path, callback) of every command `t` registers, its subgroups' included."""
    found = [(" ".join((*path, c.name or c.callback.__name__)), c.callback) for c in t.registered_commands]
    for g in t.registered_groups:
        found += registered(g.typer_instance, (*path, g.name))
    return found


def length(fn: object) -> int:
    """Lines of `fn`'s definition, from `def` to its end (decorators not counted), read from its file with `ast`."""
    fn = inspect.unwrap(fn)
    path = Path(inspect.getsourcefile(fn))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    [node] = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == fn.__name__]
    return node.end_lineno - node.lineno + 1


COMMANDS = registered(app)


def test_every_command_is_measured():
    names = {name for name, _ in COMMANDS}
    assert {"run", "probe", "train", "serve", "tasks lint", "tasks certify", "tiny build", "new domain", "quickstart", "regrade"} <= names
    assert all(Path(inspect.getsourcefile(inspect.unwrap(fn))).parent.name == "cli" for _, fn in COMMANDS)


@pytest.mark.parametrize("name, fn", [pytest.param(name, fn, id=name) for name, fn in COMMANDS])
def test_no_command_function_is_over_60_lines(name, fn):
    n = length(fn)
    assert n <= LIMIT, f"groundstate {name}: {fn.__module__}.{fn.__name__} is {n} lines (at most {LIMIT}): move what it orchestrates into the library"


def test_the_command_line_starts_without_the_heavy_libraries():
    """`groundstate --help`, and every command until it needs one, starts without scipy, the OpenAI client, torch or
    transformers: each is imported where it is used (scipy and openai alone took 1.2 s of a `run`'s start)."""
    import subprocess
    import sys

    heavy = ("scipy", "openai", "torch", "transformers", "trl", "tau2")
    code = f"import sys, groundstate.cli; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", (done.stdout, done.stderr[-2000:])
