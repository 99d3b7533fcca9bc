"""The groundstate domain of ThinkingBox cases: a `groundstate.types.Domain` whose environments are MCP server processes."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import EpisodeLimits, Equivalences, Trajectory
from groundstate.worlds.thinkingbox.case import TbCase
from groundstate.worlds.thinkingbox.servers import ServerSpec

if TYPE_CHECKING:  # the environment needs the MCP SDK (the `mcp` extra): loading and listing cases does not
    from groundstate.worlds.thinkingbox.env import TbEnvironment

TB_REF = "thinkingbox-ref:"


class TbDomain:
    """The groundstate domain of ThinkingBox cases sharing one scenario and one system prompt.

    `play` opens an environment per attempt through `open_environment` (one server process per server of
    the scenario, per attempt). `tools` describes the scenario's tools for the scripted noisy agent and
    lint's mutants: argument types are not known before a server runs, so alternatives follow the gold
    values, and every tool counts as one that may write.
    """

    def __init__(self, scenario_path: Path, scenario: str, system_prompt: str, tool_names: tuple[str, ...]):
        self.scenario_path = scenario_path
        self.name = scenario
        self._system_prompt = system_prompt
        self.tools = GoldToolSpecs(tool_names)
        self.equivalences = Equivalences()  # the servers grade by their own tests: no columns or values declared alike
        self.cases: dict[str, TbCase] = {}
        self.servers: dict[str, ServerSpec] | None = None
        self.servers_file: Path | None = None
        self.no_sources = False
        # how this domain was loaded (dataset dir, test list, agent, allow_python), so that another process — a Ray
        # actor — can load the very same cases (`TbDomain.ref()` sends it with the servers file, never pickled objects)
        self.source: dict[str, Any] | None = None

    def system_prompt(self) -> str:
        return self._system_prompt

    @functools.cached_property
    def content_hash(self) -> str:
        """Changes with the scenario, the agent prompt or any of this domain's test files."""
        h = hashlib.sha256(self._system_prompt.encode())
        files = {self.scenario_path} | {c.file for c in self.cases.values()}
        for f in sorted(files):
            h.update(f.read_bytes())
        return h.hexdigest()[:16]

    def configure(self, servers: dict[str, ServerSpec] | None, servers_file: Path | None, no_sources: bool) -> None:
        self.servers, self.servers_file, self.no_sources = servers, servers_file, no_sources

    # -- the Domain interface (groundstate.types.Domain) ---------------------------------------
    def ref(self) -> str:
        """`thinkingbox-ref:` + JSON of how the cases were loaded (dataset directory, test list, agent, servers file,
        `--tb-no-sources`; absolute paths), which `groundstate.worlds.refs` loads again in another process."""
        if self.source is None:
            raise ValueError(f"domain {self.name!r} cannot be sent to another process: load it with select_tasks or load_thinkingbox")
        servers = str(self.servers_file) if self.servers_file else None
        return TB_REF + json.dumps({**self.source, "servers": servers, "no_sources": bool(self.no_sources)}, sort_keys=True)

    def prepare(self, backend: Backend) -> None:
        """Nothing to build: every attempt starts its own server processes."""

    async def blame(self, task: Task, backend: Backend, trajectory: Trajectory, limits: EpisodeLimits = EpisodeLimits()) -> None:
        """None: replaying an attempt's prefixes would start the case's server processes once per prefix."""
        return None

    async def open_environment(self, task: Task, backend: Backend, limits: EpisodeLimits = EpisodeLimits()) -> TbEnvironment:
        """The case's servers, started for one attempt (`backend` is not used: the servers hold the state)."""
        from groundstate.worlds.thinkingbox.env import TbEnvironment, TbServerError

        case = self.cases.get(task.id)
        if case is None:
            raise TbServerError(f"task {task.id} is not a case of ThinkingBox scenario {self.name}")
        if self.servers is None:
            raise TbServerError(f"no servers file for ThinkingBox task {task.id}: pass --tb-servers servers.yaml")
        return await TbEnvironment.open(task, case, self.servers, self.servers_file, self.no_sources, self._system_prompt, limits)


@dataclass
class _GoldSpec:
    name: str
    write: bool = True
    params: dict[str, Any] = field(default_factory=dict)  # unknown types: `alternative` follows the value


class GoldToolSpecs:
    """The `Toolset` surface that the noisy agent and lint's mutants read: `specs[name].write/.params`."""

    def __init__(self, names: tuple[str, ...]):
        self.specs = {n: _GoldSpec(n) for n in names}
