"""The docs name only what exists: every repository path they give, and every flag of every `groundstate` command line
they show (in code blocks and in backticks), checked against the command line itself."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
import typer.main
from typer.core import TyperGroup

from groundstate.cli import app

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "benchmarks").glob("*.md"))]
PATH = re.compile(r"(?<![\w./-])((?:groundstate|tests|benchmarks|scripts|docs)/[\w./-]*\w)")
PLACEHOLDER = re.compile(r"[<>{}*…]|NAME|name/|/\.\.\.|^groundstate/[A-Z]")  # `groundstate/Text-v0` is a Gymnasium id
ELSEWHERE = {"scripts/install_typesense.sh"}  # a path in microsoft/thinkingbox, named as such


def _texts() -> list[tuple[str, str]]:
    return [(doc.name, doc.read_text(encoding="utf-8")) for doc in DOCS]


def _command_lines(text: str, commands: list[str]) -> list[str]:
    """`groundstate …` command lines: whole lines of code blocks (continuations joined) and inline code spans, a span
    such as `run --repair` read as `groundstate run --repair`; a prompt (`$ `), variables set before the command and
    the folder of its interpreter (`.venv-tau2/bin/`) are taken off."""
    lines = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        lines += [line.strip() for line in block.replace("\\\n", " ").splitlines()]
    spans = re.findall(r"`([^`\n]+)`", text)
    lines += [f"groundstate {span}" if span.split()[0] in commands and " --" in span else span for span in spans]
    shown = [re.sub(r"^(\$ )?(\S+=\S+\s+)*(\S*/bin/)?(?=groundstate\s)", "", line.strip()) for line in lines]
    return [line for line in shown if line.startswith("groundstate ")]


@pytest.mark.parametrize("doc,text", _texts(), ids=[d.name for d in DOCS])
def test_every_repository_path_the_docs_give_exists(doc, text):
    named = {p.rstrip(".") for p in PATH.findall(text) if not PLACEHOLDER.search(p)}
    ghosts = sorted(p for p in named - ELSEWHERE if not (REPO / p).exists())
    assert not ghosts, f"{doc} names paths that do not exist: {ghosts}"


@pytest.mark.parametrize("doc,text", _texts(), ids=[d.name for d in DOCS])
def test_every_flag_of_every_command_line_the_docs_show_exists(doc, text):
    root = typer.main.get_command(app)
    context = typer.Context(root)
    unknown = []
    for line in _command_lines(text, root.list_commands(context)):
        try:
            words = shlex.split(line.split("|")[0].split("&&")[0].split(";")[0], comments=True)
        except ValueError:
            continue  # a fragment cut inside quotes: nothing to check
        command = root
        for word in words[1:]:
            sub = command.get_command(context, word) if isinstance(command, TyperGroup) else None
            if sub is None:
                break
            command = sub
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}
        unknown += [f"{line!r}: {w.split('=')[0]}" for w in words if w.startswith("--") and w.split("=")[0] not in known]
    assert not unknown, f"{doc} shows flags its commands do not have: {unknown}"
