"""What every command shares: its two consoles, the progress bar, and turning selectors and files into what the
library takes, or into one error line and an exit status."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from typer.core import TyperCommand, TyperGroup, TyperOption

from groundstate.cli._vendor_compat import NoArgsIsHelpError, UsageError
from groundstate.records import AttemptRecord, read_records
from groundstate.tasks import Task, TaskFileError
from groundstate.types import Domain

if TYPE_CHECKING:
    from groundstate.state.base import Backend

# soft_wrap: printed lines are never broken by rich (a path or an id stays whole; the terminal wraps what is too long),
# while tables still fit the width
console = Console(stderr=True, soft_wrap=True)  # progress, notes, errors and where outputs went
out = Console(soft_wrap=True)  # the command's answer (tables, JSON)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: message` (escaped: paths and ids may hold markup) and exit with `code`."""
    console.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(code)


def print_set_apart(rows: list[dict], what: str) -> None:
    """The tasks `what` leaves out (`stats.basis`, compare's left out, power's set apart), the first ten with their
    reasons: said on stderr, also with --json, since a figure's task set is part of the figure."""
    if not rows:
        return
    console.print(f"[yellow]{len(rows)} tasks left out of {what}:[/yellow]")
    for row in rows[:10]:
        console.print(f"  {row['task_id']}: {row['reason']}", markup=False)
    if len(rows) > 10:
        console.print(f"  ... and {len(rows) - 10} more (see --json)")


@contextmanager
def open_backend(name: str, pg_dsn: str | None = None, *, label: str = "--backend", suffix: str = "", **options: Any) -> Iterator[Backend]:
    """The backend `--backend NAME` names (`state.make_backend(name, pg_dsn, **options)`), closed when the block ends,
    however it ends (an error line's exit included). One that cannot be made (a misspelled name, an unreachable server)
    ends the command before the block runs: `error: LABEL: WHY` and `suffix` (e.g. "; nothing was run or written."), exit 2."""
    from groundstate.state import make_backend

    try:
        backend = make_backend(name, pg_dsn, **options)
    except ValueError as e:
        fail(f"{label}: {e}{suffix}")
    try:
        yield backend
    finally:
        backend.close()


def rename_options(
    args: list[str], renamed: dict[str, str], takes_value: set[str], once: dict[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """`args` with each old option spelling (`--n`, `--n=8`, `-o`, `-oFILE`) replaced by its new one, and the old
    spellings met. Only tokens before `--` are options, and not the token after an option in `takes_value` (that is
    its value: `--tasks --n` keeps `--n` as the selector it names). `once` maps each spelling of an option that is not
    repeatable to that option's name: one given under two spellings, one of them old (`--k 2 --n 4`, `-o a --output
    b`), is a `UsageError`, where click would keep the last without a word."""
    once = once or {}
    new, met, i = [], [], 0
    spelled: dict[str, set[str]] = {}  # per option of `once`: the spellings it was given under
    while i < len(args):
        token = args[i]
        if token == "--":
            new += args[i:]
            break
        name, sep, value = token.partition("=") if token.startswith("--") else (token, "", "")
        glued = next((o for o in renamed if len(o) == 2 and token.startswith(o) and len(token) > 2 and not token.startswith("--")), None)
        given = name
        if name in renamed:
            met.append(name)
            name = renamed[name]
            new.append(name + sep + value)
        elif glued:
            given = glued
            met.append(glued)
            name = renamed[glued]
            new += [name, token[2:]]
            sep = "="  # its value was glued to it
        else:
            new.append(token)
        if name in once:
            spelled.setdefault(once[name], set()).add(given)
        if name in takes_value and not sep and i + 1 < len(args):
            new.append(args[i + 1])
            i += 1
        i += 1
    for option, spellings in spelled.items():
        if len(spellings) > 1 and spellings & renamed.keys():
            raise UsageError(f"{option} is given twice, as {' and as '.join(sorted(spellings))} (an old spelling of it): give it once")
    return new, met


class Commands(TyperGroup):
    """The app's command group: a usage error anywhere below it (an unknown option or command, a bad or missing value)
    is one `error:` line naming the option and where its help is, not typer's box, which breaks paths at the width of
    the terminal. A group called without a command still prints its help."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        try:  # the group's own options (`groundstate --bogus`)
            return super().parse_args(ctx, args)
        except NoArgsIsHelpError:
            raise
        except UsageError as e:
            _usage_error(e, ctx)

    def invoke(self, ctx: typer.Context) -> Any:
        try:  # every command's and subgroup's
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise
        except UsageError as e:
            _usage_error(e, ctx)


def _usage_error(e: UsageError, ctx: typer.Context) -> NoReturn:
    """One `error:` line for a usage error, with where the help of the command it concerns is."""
    fail(f"{e.format_message()} (see {(e.ctx or ctx).command_path} --help)", e.exit_code)


def renamed(old_to_new: dict[str, str]) -> type[TyperCommand]:
    """A command class that still takes the old spellings of renamed options (kept, hidden from help, for a release):
    each is read as its new name, with one note on stderr saying the new name."""

    class Renamed(TyperCommand):
        def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
            options = [p for p in self.params if isinstance(p, TyperOption)]
            takes_value = {o for p in options if not p.is_flag and not p.count for o in p.opts}
            once = {o: p.opts[0] for p in options if not p.multiple for o in p.opts}
            try:
                args, met = rename_options(args, old_to_new, takes_value, once)
            except UsageError as e:
                raise UsageError(e.message, ctx) from None
            for old in dict.fromkeys(met):
                console.print(f"note: {old} is now {old_to_new[old]} (the old spelling goes in a later release)", markup=False, highlight=False)
            return super().parse_args(ctx, args)

    return Renamed


class LineProgress(Progress):
    """A progress bar on a terminal; elsewhere (a log file, CI, a pipe), plain lines: one each time a task passes another
    tenth of its total or `every_s` seconds have gone by, and one when it is done (rich alone prints nothing until the end)."""

    def __init__(self, *columns: Any, every_s: float = 30.0, **kw: Any):
        plain = not kw["console"].is_terminal
        super().__init__(*columns, disable=plain, **kw)
        self.plain, self.every_s = plain, every_s
        self._said: dict[TaskID, tuple[int, float]] = {}  # per task: the last tenth said, and when
        self._finished: set[TaskID] = set()

    def update(self, task_id: TaskID, **kw: Any) -> None:
        super().update(task_id, **kw)
        if self.plain:
            self._say(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        if self.plain:
            self._say(task_id)

    def _say(self, task_id: TaskID) -> None:
        with self._lock:
            task = self._tasks[task_id]
            total, done, status, elapsed = task.total, task.completed, task.fields.get("status", ""), task.elapsed or 0.0
        if task_id in self._finished:
            return
        tenth = int(10 * done / total) if total else 0
        last_tenth, last_at = self._said.get(task_id, (0, 0.0))
        finished = bool(total) and done >= total
        if tenth > last_tenth or elapsed - last_at >= self.every_s or finished:
            self._said[task_id] = (tenth, elapsed)
            if finished:
                self._finished.add(task_id)
            share = f" ({done / total:.0%})" if total else ""
            self.console.print(f"{task.description}: {done:g}/{total:g}{share} {status} · {elapsed:.0f} s", markup=False, highlight=False)


def progress() -> Progress:
    return LineProgress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def select(selector: str, tb_servers: Path | None = None, tb_no_sources: bool = False, run: bool = True) -> list[tuple[Task, Domain]]:
    """Resolve a task selector for a command; commands that run attempts (`run`) also need the servers of ThinkingBox tasks."""
    from groundstate.worlds.selectors import select_tasks

    try:
        pairs = select_tasks(selector, tb_servers=tb_servers, tb_no_sources=tb_no_sources)
        if run and any(p.strip().startswith("thinkingbox:") for p in selector.split(",")):
            from groundstate.worlds.thinkingbox import require_servers

            require_servers(pairs)
    except (ValueError, TaskFileError, KeyError) as e:
        fail(str(e))
    return pairs


def load_domains(domains: list[str] | None, split: str | None = None) -> list[tuple[Task, Domain]]:
    """The tasks of the named domains (default: every bundled one), optionally of one split."""
    from groundstate.worlds.domain import iter_tasks

    try:
        return iter_tasks(domains or None, split)
    except (TaskFileError, KeyError) as e:
        fail(message_of(e))


def load_one_domain(name_or_folder: str) -> Domain:
    """The domain that `--domain` names (a bundled domain's name or any domain folder), or one error line."""
    from groundstate.worlds.domain import load_domain

    try:
        return load_domain(name_or_folder)
    except (TaskFileError, KeyError) as e:
        fail(message_of(e))


def message_of(e: Exception) -> str:
    """An exception's message (a KeyError's str() quotes it)."""
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)


def read_run(path: Path) -> list[AttemptRecord]:
    """The records of a results file, or the command stops naming the file and the line at fault, or naming a
    file that holds no records (every reader says it in the same words)."""
    try:
        records = read_records(path)
    except (OSError, ValueError) as e:
        fail(str(e))
    if not records:
        fail(f"{path}: holds no records (an empty results file, or one whose only line was cut off mid-write: nothing to read)")
    return records
