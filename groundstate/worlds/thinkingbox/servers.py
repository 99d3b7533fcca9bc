"""ThinkingBox's `servers.yaml`: how to start each MCP server of a scenario.

    servers:                      # (or the server mapping at the top level)
      sandbox_neobank_support_v1:
        type: mcp-process
        command: ["{python}", "-m", "tb_business_ops_servers_202606.mcp_sandbox_neobank_support_v1"]
        env: {TYPESENSE_API_KEY: Fake}
        startup_timeout: 30       # optional, seconds: spawn + MCP initialize + tools/list (default 30)
        call_timeout: 300         # optional, seconds: each tool call, the reserved ones included (default 300)
        start: fork               # optional: fork (default) or process

`{python}` in a command stands for the interpreter running groundstate; a server installed in its own
environment names that environment's interpreter instead. Commands run in the folder of the servers file,
so relative paths in them are relative to it. Other keys of the file (e.g. `use_internal_servers`) are ignored.
A server that does not finish start-up within `startup_timeout`, or leaves a call unanswered for `call_timeout`,
ends the attempt as a system error; every process the server started is stopped with it.

Every attempt gets a fresh server. With `start: fork` (the default) a Python server (`{python} -m MODULE …` or
`{python} PATH.py …`) is forked from a zygote that imported its dependencies once (`groundstate.tools.fork_pool`):
the server's own code and module state start anew in each child, without paying for its imports again. A server
of another shape, or one whose imports start threads or open sockets, starts as a process, with one warning line;
`start: process` asks for that always.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groundstate.tasks import TaskFileError, read_data_file

DEFAULT_STARTUP_TIMEOUT_S = 30.0  # spawn + initialize + tools/list; the benchmark's servers take 3-4 s
DEFAULT_CALL_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ServerSpec:
    name: str
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S
    call_timeout: float = DEFAULT_CALL_TIMEOUT_S
    fork: bool = True  # `start: fork`: forked from a zygote where the command allows


def _spec(path: Path, name: str, raw: Any) -> ServerSpec:
    where = f"servers.{name}"
    if not isinstance(raw, dict):
        raise TaskFileError(path, "must be a mapping with type, command and optional env", field=where)
    kind = raw.get("type", "mcp-process")
    if kind != "mcp-process":
        raise TaskFileError(path, f"unsupported server type {kind!r}: only mcp-process (a stdio MCP server) is supported", field=f"{where}.type")
    command = raw.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command):
        raise TaskFileError(path, "must be a non-empty list of strings", field=f"{where}.command")
    env = raw.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) for k in env):
        raise TaskFileError(path, "must map variable names to values", field=f"{where}.env")
    bounds = {}
    for key, default in (("startup_timeout", DEFAULT_STARTUP_TIMEOUT_S), ("call_timeout", DEFAULT_CALL_TIMEOUT_S)):
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise TaskFileError(path, f"must be a positive number of seconds, got {value!r}", field=f"{where}.{key}")
        bounds[key] = float(value)
    start = raw.get("start", "fork")
    if start not in ("fork", "process"):
        raise TaskFileError(path, f"must be fork or process, got {start!r}", field=f"{where}.start")
    return ServerSpec(
        name,
        tuple(c.replace("{python}", sys.executable) for c in command),
        {k: str(v) for k, v in env.items()},
        str(path.parent),
        **bounds,
        fork=start == "fork",
    )


def load_servers(path: Path | str) -> dict[str, ServerSpec]:
    """Server specs by name; a malformed file fails naming the file and the field."""
    path = Path(path).resolve()
    raw = read_data_file(path)
    if isinstance(raw, dict) and isinstance(raw.get("servers"), dict):
        raw = raw["servers"]
    if not isinstance(raw, dict) or not raw:
        raise TaskFileError(path, "must map server names to {type: mcp-process, command: [...], env: {...}}", field="servers")
    return {name: _spec(path, str(name), spec) for name, spec in raw.items()}
