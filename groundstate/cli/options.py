"""Command-line options checked where they are parsed, and the option groups commands share.

A bad value stops the command before anything runs, with typer's usage message naming the option
("Invalid value for '--max-turns': -1 is not an integer >= 1"), never a traceback and never a value silently
ignored. Numbers must be finite (`nan` and `inf` pass a plain range check: every comparison with NaN is false);
an unset option (None) means "the default" and is not checked. Paths: a file the command writes must not be an
existing folder, a folder it writes into must not be an existing file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import typer

from groundstate.agents.toolcall_format import TOOL_CALL_FORMATS
from groundstate.types import DEFAULT_GRADE_TIMEOUT_S, EpisodeLimits


def in_range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False) -> Callable[[Any], Any]:
    """A typer callback accepting None or a finite number with lo ≤ value ≤ hi (lo < value with `lo_open`, value < hi
    with `hi_open`)."""

    def check(value: Any) -> Any:
        if value is None:
            return None
        kind = "a number" if isinstance(value, float) else "an integer"
        if isinstance(value, float) and not math.isfinite(value):
            raise typer.BadParameter(f"{value} is not a finite number")
        low = lo is not None and (value <= lo if lo_open else value < lo)
        high = hi is not None and (value >= hi if hi_open else value > hi)
        if low or high:
            bounds = [f"{'>' if lo_open else '>='} {lo:g}"] if lo is not None else []
            bounds += [f"{'<' if hi_open else '<='} {hi:g}"] if hi is not None else []
            raise typer.BadParameter(f"{value} is not {kind} {' and '.join(bounds)}")
        return value

    return check


def number(
    default: Any, *decls: str, lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False, **kw: Any
) -> Any:
    """A numeric option (int or float, by the parameter's annotation) checked by `in_range`."""
    return typer.Option(default, *decls, callback=in_range(lo, hi, lo_open=lo_open, hi_open=hi_open), **kw)


def count(default: Any, *decls: str, lo: int = 1, **kw: Any) -> Any:
    """A whole-number option that counts something (attempts, steps, tokens): at least `lo` (1 unless told)."""
    return number(default, *decls, lo=lo, **kw)


def file_out(default: Any, *decls: str, **kw: Any) -> Any:
    """A file the command writes: an existing folder of that name is refused."""
    return typer.Option(default, *decls, dir_okay=False, **kw)


def folder_out(default: Any, *decls: str, **kw: Any) -> Any:
    """A folder the command writes into: an existing file of that name is refused."""
    return typer.Option(default, *decls, file_okay=False, **kw)


# -- where worlds live: the backend, and the servers of ThinkingBox tasks -------------------------------------

Backend = typer.Option("sqlite", "--backend", help="sqlite (embedded default) or postgres.")
PgDsn = typer.Option(
    None, "--pg-dsn", help="PostgreSQL DSN (default: $GROUNDSTATE_PG_DSN, else database postgres on 127.0.0.1:5432 as user postgres)."
)
TbServers = typer.Option(None, "--tb-servers", help="ThinkingBox servers.yaml: how to start the MCP servers of thinkingbox: tasks.")
TbNoSources = typer.Option(
    False, "--tb-no-sources", help="ThinkingBox tasks: drop the init configuration's knowledge-base `sources` (no Typesense needed)."
)


# -- what an attempt may do, shared by `run` and `probe` -----------------------------------------------------


def temperature(help: str = "Sampling temperature (0: greedy).") -> Any:
    return number(None, "--temperature", lo=0.0, help=help)


TopP = number(None, "--top-p", lo=0.0, hi=1.0, lo_open=True, help="Nucleus sampling, in (0, 1].")
TopK = count(None, "--top-k", lo=0, help="Top-k sampling (where the server accepts it; 0: off).")
MaxTokens = count(None, "--max-tokens", help="Max new tokens per agent turn.")
MaxTurns = count(None, "--max-turns", help="Override the tasks' agent-turn limit.")
Concurrency = count(8, "--concurrency", "-c", help="Attempts in flight.")
AttemptTimeout = number(
    None,
    "--attempt-timeout",
    lo=0.0,
    lo_open=True,
    help="Wall-clock seconds per attempt; the agent running out ends it with finish reason timeout (graded), a hung tool is a system error.",
)
GradeTimeout = number(
    None,
    "--grade-timeout",
    lo=0.0,
    lo_open=True,
    help="Wall-clock seconds to grade an attempt (golden replay, state comparison, checks, rubric judge; "
    "ThinkingBox effects and test functions; default 300); running out is a system error.",
)
MaxResultChars = count(
    None,
    "--max-result-chars",
    help="Characters of a tool result shown to the agent (the rest is cut with a visible marker; the trajectory keeps all).",
)
MaxAttemptTokens = count(
    None, "--max-attempt-tokens", help="Agent tokens (input + output) per attempt; crossing it ends the attempt with finish reason max_tokens."
)
RayCpus = count(None, "--ray-cpus", help="With --ray: number of actors (and CPUs of a local instance).")


def sampling(temperature: float | None, top_p: float | None, top_k: int | None, max_tokens: int | None) -> dict[str, Any]:
    """The sampling options that were given (an unset one keeps the agent's default)."""
    given = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "max_tokens": max_tokens}
    return {k: v for k, v in given.items() if v is not None}


def limits(
    max_turns: int | None, attempt_timeout: float | None, grade_timeout: float | None, max_result_chars: int | None, max_attempt_tokens: int | None
) -> EpisodeLimits:
    """The attempt's limits from the options of the limits group (an unset grading bound keeps its default)."""
    return EpisodeLimits(
        max_turns=max_turns,
        timeout=attempt_timeout,
        max_result_chars=max_result_chars,
        max_tokens=max_attempt_tokens,
        grade_timeout=DEFAULT_GRADE_TIMEOUT_S if grade_timeout is None else grade_timeout,
    )


ToolCallFormat: Any = typer.Option(
    "auto",
    "--tool-call-format",
    callback=lambda v: v if v in TOOL_CALL_FORMATS else _bad_choice(v, TOOL_CALL_FORMATS),
    help="Where an openai: agent's tool calls are read: native (the server's tool_calls only), or also from the reply's text "
    'when it has none: json (fenced or bare), hermes (<tool_call> tags), qwen (<function=...>), xml (<tool_name arg="..."/>), '
    "auto (the first of these that finds a call). Each executed call records its parser.",
)


def _bad_choice(value: str, choices: tuple[str, ...]) -> Any:
    raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}")


def choice(default: Any, *decls: str, choices: tuple[str, ...], **kw: Any) -> Any:
    """An option whose value must be one of `choices` (or the default None): anything else is a usage error, exit 2."""
    return typer.Option(default, *decls, callback=lambda v: v if v is None or v in choices else _bad_choice(v, choices), **kw)
