"""One attempt's ThinkingBox environment: the scenario's MCP servers, each its own stdio process.

`TbEnvironment.open` starts one process per server of the case (from `servers.yaml`) with the official MCP
SDK, calls `__reserved__init(config)` with the case's merged init configuration, and exposes to the agent
only the scenario's tools, routed to the server that serves each. `grade` reads `__reserved__geteffects`
from every server and turns the effects into a verdict (`groundstate.worlds.thinkingbox.grading`); `close` calls
`__reserved__teardown` where a server has one (as ThinkingBox does before stopping a server: the benchmark
servers drop their knowledge-base collections there; a failure is only logged), then ends the MCP
sessions, which stops every process: stdin is closed, and then the server's whole process group is terminated,
whatever it spawned included (`groundstate.tools.stdio_transport`).

Processes are never shared between attempts: the benchmark servers keep their database in module globals
and `__reserved__init` applies the data patch on top of what is there, so re-initialising does not reset
them. Each attempt's server is a fresh process, forked from a zygote that paid the server's imports once
where the servers file allows (`start: fork`, the default; `groundstate.worlds.thinkingbox.servers`). Anything that goes wrong with a server — it does not start, `__reserved__init` reports an error, it
dies mid-episode, a request times out — raises `TbServerError` (or the SDK's `McpToolsetError`), which
`groundstate.worlds.attempt.play` records as a system error, never as the agent's failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import tempfile
from pathlib import Path
from typing import Any, TextIO

from groundstate.deadlines import within
from groundstate.state.base import ForkUnsupported
from groundstate.tasks import Task
from groundstate.tools.mcp_client import McpToolset, McpToolsetError
from groundstate.types import EpisodeHang, EpisodeLimits, Judge, ToolResult, Trajectory, Verdict
from groundstate.worlds.thinkingbox.case import TbCase
from groundstate.worlds.thinkingbox.servers import ServerSpec

INIT_TOOL = "__reserved__init"
EFFECTS_TOOL = "__reserved__geteffects"
TEARDOWN_TOOL = "__reserved__teardown"
TEARDOWN_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


class TbServerError(RuntimeError):
    """A ThinkingBox server failed (start, init, effects): infrastructure, never the agent's doing."""


def _tail(log: TextIO, limit: int = 2000) -> str:
    try:
        log.flush()
        log.seek(0)
        text = log.read()
    except (OSError, ValueError):
        return ""
    return text[-limit:].strip()


def _root_cause(e: BaseException) -> BaseException:
    """The first leaf of an exception group (the SDK's task groups wrap a failed start in one)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def parse_reserved(server: str, tool: str, result: ToolResult) -> dict[str, Any]:
    """The JSON object a reserved tool returned; an error result or `{"status": "error"}` raises `TbServerError`."""
    if not result.ok:
        raise TbServerError(f"{tool} of server {server!r} failed: {result.content[:2000]}")
    try:
        body = json.loads(result.content) if result.content.strip() else {}
    except json.JSONDecodeError as e:
        raise TbServerError(f"{tool} of server {server!r} returned no JSON object ({e.msg}): {result.content[:300]!r}") from None
    if not isinstance(body, dict):
        raise TbServerError(f"{tool} of server {server!r} returned {type(body).__name__}, not a JSON object")
    if body.get("status") == "error":
        raise TbServerError(f"{tool} of server {server!r} reported an error: {body.get('message', '')}\n{body.get('traceback', '')}".strip())
    return body


def refused(result: ToolResult) -> ToolResult:
    """`result`, marked not ok where the server refused the call: the benchmark servers answer a call they refuse with
    the text of a JSON object that has an `error` key (`{"error": "...", "tool": ...}`), not with an MCP error."""
    if not result.ok or not result.content.lstrip().startswith("{"):
        return result
    try:
        body = json.loads(result.content)
    except json.JSONDecodeError:
        return result
    return ToolResult(False, result.content, result.write) if isinstance(body, dict) and "error" in body else result


class ScenarioToolset:
    """The tools the agent may use: the scenario's, each routed to its server; reserved tools never appear.

    A call the agent got wrong is an error result (also a call the server refused with an `{"error": ...}` object:
    `refused`); a server that died or timed out raises `TbServerError`
    with the tail of its stderr (`logs`), for the attempt to end as a system error.
    """

    def __init__(
        self,
        routes: dict[str, tuple[str, McpToolset]],
        logs: dict[str, TextIO] | None = None,
        overrides: dict[str, tuple[str | None, dict[str, str]]] | None = None,
    ):
        self.routes = routes
        self.logs = logs or {}
        self.overrides = overrides or {}

    def openai_schemas(self) -> list[dict[str, Any]]:
        """The tools' schemas, with the scenario's description overrides (ThinkingBox's `update_tools_with_client_config`)."""
        out = []
        for name, (_, server) in self.routes.items():
            for schema in copy.deepcopy(server.openai_schemas([name])):
                description, args = self.overrides.get(name, (None, {}))
                fn = schema["function"]
                if description is not None:
                    fn["description"] = description
                for arg, text in args.items():
                    if arg in fn["parameters"].get("properties", {}):
                        fn["parameters"]["properties"][arg]["description"] = text
                out.append(schema)
        return out

    async def acall(self, name: str, arguments: Any) -> ToolResult:
        route = self.routes.get(name)
        if route is None:
            return ToolResult(False, f"error: unknown tool {name!r}; available tools: {', '.join(self.routes)}")
        server, client = route
        try:
            return refused(await client.acall(name, arguments))
        except McpToolsetError as e:
            log = self.logs.get(server)
            raise TbServerError(f"server {server!r} failed during {name}: {e}\nstderr: {(_tail(log) if log else '') or '(empty)'}") from None


class TbEnvironment:
    """The servers of one attempt of one ThinkingBox case (see the module docstring); a `groundstate.types.Environment`.

    A tool call that alone outlasts the attempt's time limit (`limits.timeout`) ends the attempt with `EpisodeHang`.
    """

    def __init__(
        self,
        task: Task,
        case: TbCase,
        servers: dict[str, ServerSpec],
        servers_file: Path | None,
        no_sources: bool,
        system_prompt: str,
        limits: EpisodeLimits = EpisodeLimits(),
    ):
        self.task, self.case, self.limits = task, case, limits
        self.specs, self.servers_file, self.no_sources, self.system_prompt = servers, servers_file, no_sources, system_prompt
        self.servers: dict[str, McpToolset] = {}
        self.logs: dict[str, TextIO] = {}
        self.init_results: dict[str, dict[str, Any]] = {}  # what `__reserved__init` returned (ThinkingBox's `x.init_result`)
        self.toolset: ScenarioToolset = ScenarioToolset({})
        self._stack = contextlib.AsyncExitStack()

    @classmethod
    async def open(
        cls,
        task: Task,
        case: TbCase,
        servers: dict[str, ServerSpec],
        servers_file: Path | None,
        no_sources: bool,
        system_prompt: str,
        limits: EpisodeLimits = EpisodeLimits(),
    ) -> TbEnvironment:
        """Start the case's servers (from `servers`, read from `servers_file`) and initialise them; closed again on failure."""
        env = cls(task, case, servers, servers_file, no_sources, system_prompt, limits)
        try:
            await env.start()
        except BaseException:
            await env.close()
            raise
        return env

    async def start(self) -> None:
        """Start the case's servers and initialise each (`__reserved__init`), then route the scenario's tools; once per
        environment (what `open` does after making it). A failure raises `TbServerError`; `close` stops what started."""
        specs = self.specs
        missing = [s for s in self.case.init if s not in specs]
        if missing:
            raise TbServerError(
                f"scenario {self.case.scenario} needs server(s) {', '.join(missing)}, which "
                f"{self.servers_file} does not define (it has: {', '.join(specs)})"
            )
        for name in self.case.init:
            spec = specs[name]
            log = self._stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))  # noqa: SIM115 - the stack closes it
            self.logs[name] = log
            try:
                self.servers[name] = await self._stack.enter_async_context(
                    McpToolset.stdio(
                        spec.command[0],
                        spec.command[1:],
                        spec.env,
                        cwd=spec.cwd,
                        errlog=log,
                        read_timeout_seconds=spec.call_timeout,
                        startup_timeout=spec.startup_timeout,
                        fork=spec.fork,
                    )
                )
            except Exception as e:  # noqa: BLE001 - any failure to start is the server's, reported with its stderr
                cause = _root_cause(e)
                raise TbServerError(
                    f"server {name!r} did not start ({' '.join(spec.command)}): {type(cause).__name__}: {cause}\nstderr: {_tail(log) or '(empty)'}"
                ) from None
            server = self.servers[name]
            for reserved in (INIT_TOOL, EFFECTS_TOOL):
                if reserved not in server:
                    raise TbServerError(f"server {name!r} has no {reserved} tool: it does not follow the ThinkingBox convention")
            config = self.case.init_config(name, self.no_sources)
            self.init_results[name] = await self._reserved(name, INIT_TOOL, {"config": config})
        routes: dict[str, tuple[str, McpToolset]] = {}
        for tool in self.case.tools:
            owner = next((n for n, s in self.servers.items() if tool in s), None)
            if owner is None:
                raise TbServerError(f"scenario tool {tool!r} is served by none of the servers {', '.join(self.servers)}")
            routes[tool] = (owner, self.servers[owner])
        self.toolset = ScenarioToolset(routes, self.logs, self.case.overrides)

    async def _reserved(self, server: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call a reserved tool and parse its JSON; any failure is a `TbServerError` carrying the server's stderr."""
        try:
            return parse_reserved(server, tool, await self.servers[server].acall(tool, arguments))
        except (McpToolsetError, TbServerError) as e:
            raise TbServerError(f"server {server!r} failed during {tool}: {e}\nstderr: {_tail(self.logs[server]) or '(empty)'}") from None

    async def effects(self) -> dict[str, dict[str, Any]]:
        """`__reserved__geteffects` of every server, by server name (ThinkingBox's `x.effects`)."""
        return {name: await self._reserved(name, EFFECTS_TOOL, {}) for name in self.servers}

    def initial_messages(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": self.task.instruction}]

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.toolset.openai_schemas()

    async def call_tool(self, name: str, arguments: Any) -> ToolResult:
        timeout = self.limits.timeout
        return await within(
            self.toolset.acall(name, arguments),
            timeout,
            lambda: EpisodeHang(f"tool {name} did not return within the attempt time limit ({timeout:g} s)"),
        )

    async def grade(self, trajectory: Trajectory | None, judge: Judge | None = None) -> Verdict:
        from groundstate.worlds.thinkingbox.grading import grade_case

        return await grade_case(self.task, self.case, await self.effects(), trajectory, judge, self.init_results)

    def user_tools(self) -> None:
        """None: the user of this world has no tools of its own."""
        return None

    async def changes(self) -> None:
        """None: the servers own their state; only their effects (hashes) are seen."""
        return None

    async def state_digest(self) -> str:
        """Every server's `result_db_hash` (from `__reserved__geteffects`): the servers' own digest of their database."""
        effects = await self.effects()
        return json.dumps({name: eff.get("result_db_hash") for name, eff in sorted(effects.items())}, sort_keys=True, default=str)

    async def fork(self) -> TbEnvironment:
        """Refused: the case's state lives in its MCP server processes, which offer no copy of a live state."""
        raise ForkUnsupported(f"TbEnvironment (ThinkingBox scenario {self.case.scenario}) cannot fork: its state is in its MCP servers' processes")

    async def close(self) -> None:
        """Tear down and stop every server process of the attempt (always; also after a failed start)."""
        servers, self.servers = self.servers, {}
        for name, server in servers.items():
            if TEARDOWN_TOOL in server:
                try:
                    await asyncio.wait_for(server.acall(TEARDOWN_TOOL, {}), TEARDOWN_TIMEOUT_S)
                except Exception as e:  # noqa: BLE001 - as in ThinkingBox, a failed teardown is only a warning
                    log.warning("%s of server %r failed: %s", TEARDOWN_TOOL, name, e)
        stack, self._stack = self._stack, contextlib.AsyncExitStack()
        with contextlib.suppress(Exception):  # a server that died already has nothing left to stop
            await stack.aclose()
