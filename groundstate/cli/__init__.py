"""The `groundstate` command line: a thin typer app over the library, one module per command group.

`run` / `probe` (cli.run), `tasks ...` (cli.tasks), `metrics` / `compare` / `report` / `export` (cli.analysis),
`power` (cli.power), `select` (cli.select), `train` / `merge` / `tiny build` (cli.train), `serve --protocol mcp|openenv`
(cli.serve; `serve-mcp`, its old spelling, cli.mcp), `quickstart` (cli.quickstart), `new domain` (cli.new), `conformance`
(cli.conformance), `regrade` (cli.regrade). Each command parses its options, calls one library function and prints.
Shared options and option groups are in cli.options, consoles and error exits in cli.common.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import typer

from groundstate.cli import analysis, new, quickstart, tasks, train
from groundstate.cli.common import Commands, renamed
from groundstate.cli.conformance import conformance_command
from groundstate.cli.mcp import OldSpelling, serve_mcp
from groundstate.cli.power import power_command
from groundstate.cli.regrade import regrade_command
from groundstate.cli.run import PROBE_HELP, RUN_HELP, attempts_command
from groundstate.cli.select import select_command
from groundstate.cli.serve import serve
from groundstate.train import hide_transformers_deprecations

app = typer.Typer(
    cls=Commands, help="Train and evaluate tool-using LLM agents with rewards read from the final state of a real database.", no_args_is_help=True
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"groundstate {version('groundstate')}")
        raise typer.Exit()


@app.callback()
def _stop_on_sigterm(
    _version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
) -> None:
    # SIGTERM (`timeout`, a scheduler, `kill`) ends a command the way Ctrl-C does: Python's default would end the process at
    # once, skipping the clean-up that stops the process groups of MCP servers and ThinkingBox test workers, which then
    # run on for good (a worker in `while True`, whatever a server spawned). Only in the main thread of a process whose
    # SIGTERM is still the default, so an embedding program keeps its own handler.
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _as_interrupt)


def _as_interrupt(signum: int, frame: object) -> None:
    """Handle a signal as SIGINT's handler would (asyncio's runner cancels its main task); KeyboardInterrupt when
    SIGINT has none (a background job's SIGINT is ignored, which must not make SIGTERM ignored too)."""
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        raise KeyboardInterrupt
    handler(signal.SIGINT, frame)


app.add_typer(tasks.app, name="tasks")
app.add_typer(train.tiny_app, name="tiny")
app.add_typer(new.app, name="new")
# old spellings of renamed options, each read as its new name for a release (one name per concept: attempts per task
# are --k, what a command writes is --out, a domain name or folder is --domain)
ATTEMPTS_RENAMED = {"--n": "--k"}
app.command("run", help=RUN_HELP, cls=renamed(ATTEMPTS_RENAMED))(attempts_command)
app.command("probe", help=PROBE_HELP, cls=renamed(ATTEMPTS_RENAMED))(attempts_command)
app.command("metrics")(analysis.metrics)
app.command("compare")(analysis.compare)
app.command("power")(power_command)
app.command("report", cls=renamed({"-o": "--out", "--output": "--out"}))(analysis.report)
app.command("export")(analysis.export_command)
app.command("select", cls=renamed({"--out-dir": "--out", "--domain-path": "--domain"}))(select_command)
app.command("train")(train.train)
app.command("merge")(train.merge)
app.command("quickstart")(quickstart.quickstart)
app.command("serve")(serve)
app.command("serve-mcp", hidden=True, cls=OldSpelling)(serve_mcp)  # the old spelling of `serve --protocol mcp`, for a release
app.command("conformance")(conformance_command)
app.command("regrade")(regrade_command)


def quiet_libraries() -> None:
    """For the `groundstate` command. Without a terminal (a log file, CI, a pipe), Hugging Face's progress bars are off
    (each redraw would be a line of the log; `HF_HUB_DISABLE_PROGRESS_BARS=0` turns them back on); on a terminal they
    stay, so a model download still shows its progress. transformers' FutureWarnings are not shown anywhere
    (`train.hide_transformers_deprecations`). Environment and warning filters only: nothing heavy is imported, and a
    program that embeds `app` keeps its own settings."""
    if not sys.stderr.isatty():
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' loading and saving bars follow the hub's
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    hide_transformers_deprecations()


def main() -> None:  # pragma: no cover
    quiet_libraries()
    app()
