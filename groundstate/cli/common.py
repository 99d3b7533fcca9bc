"""What every command shares: its two consoles, the progress bar, and turning selectors and files into what the
library takes, or into one error line and an exit status."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from groundstate.results import AttemptRecord, read_records
from groundstate.tasks import Task, TaskFileError
from groundstate.types import Domain

console = Console(stderr=True)  # progress, notes, errors and where outputs went
out = Console()  # the command's answer (tables, JSON)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: message` (escaped: paths and ids may hold markup) and exit with `code`."""
    console.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(code)


def progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[:60]


def select(selector: str, tb_servers: Path | None = None, tb_no_sources: bool = False, run: bool = True) -> list[tuple[Task, Domain]]:
    """Resolve a task selector for a command; commands that run attempts (`run`) also need the servers of ThinkingBox tasks."""
    from groundstate.selectors import select_tasks

    try:
        pairs = select_tasks(selector, tb_servers=tb_servers, tb_no_sources=tb_no_sources)
        if run and any(p.strip().startswith("thinkingbox:") for p in selector.split(",")):
            from groundstate.thinkingbox import require_servers

            require_servers(pairs)
    except (ValueError, TaskFileError, KeyError) as e:
        fail(str(e))
    return pairs


def load_domains(domains: list[str] | None, split: str | None = None) -> list[tuple[Task, Domain]]:
    """The tasks of the named domains (default: every bundled one), optionally of one split."""
    from groundstate.domain import iter_tasks

    try:
        return iter_tasks(domains or None, split)
    except (TaskFileError, KeyError) as e:
        fail(str(e))


def read_run(path: Path) -> list[AttemptRecord]:
    """The records of a results file, or the command stops naming the file and the line at fault."""
    try:
        return read_records(path)
    except (OSError, ValueError) as e:
        fail(str(e))
