"""The README's first run, executed as a fresh clone's user types it (#21, Must show): every `$ groundstate …` line of
its console block runs in an empty folder, through the installed `groundstate` command, at 80 columns and without a
terminal, and prints each line the README shows under it, in order (`…` matches what varies; table borders and runs
of spaces are ignored, since a table's column widths depend on the terminal)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
GROUNDSTATE = Path(sys.executable).with_name("groundstate")


def walkthrough() -> list[tuple[str, list[str]]]:
    """(command, the lines the README says it prints) of the console block under "A first run"."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## A first run", 1)[1]
    block = section.split("```console\n", 1)[1].split("\n```", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip():
            steps[-1][1].append(line)
    return steps


def flat(line: str) -> str:
    return " ".join(re.sub(r"[│┃]", " ", line).split())


def pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*?".join(re.escape(part) for part in flat(expected).split("…")))


def test_the_readme_shows_a_walkthrough_of_the_first_run():
    steps = walkthrough()
    assert len(steps) >= 8 and all(cmd.startswith("groundstate ") and said for cmd, said in steps[:-1]), steps


@pytest.mark.slow
def test_every_command_of_the_readme_walkthrough_prints_what_the_readme_says(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GROUNDSTATE_", "OPENAI_"))}
    env |= {"COLUMNS": "80", "TERM": "dumb", "PYTHONUNBUFFERED": "1", "PATH": f"{GROUNDSTATE.parent}{os.pathsep}{env.get('PATH', '')}"}
    for command, said in walkthrough():
        r = subprocess.run(
            shlex.split(command),
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
        )
        # one stream, unbuffered: the lines in the order a person sees them
        printed = [flat(line) for line in r.stdout.splitlines()]
        assert r.returncode == 0 and "Traceback" not in r.stdout, f"$ {command}\n{r.stdout}"
        at = 0
        for expected in said:
            want = pattern(expected)
            hit = next((i for i in range(at, len(printed)) if want.fullmatch(printed[i])), None)
            assert hit is not None, f"$ {command}\nthe README says it prints\n  {expected}\nafter line {at}, but it printed\n" + "\n".join(printed)
            at = hit + 1
