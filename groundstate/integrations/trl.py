"""TRL's `environment_factory`: groundstate tasks as TRL environments, rewarded by their final-state verdicts.

    from groundstate.integrations.trl import environment_factory, trl_dataset
    from groundstate.worlds.selectors import select_tasks

    pairs = select_tasks("kiosk")
    trainer = GRPOTrainer(model, args=GRPOConfig(...), train_dataset=trl_dataset(pairs),
                          environment_factory=environment_factory(pairs))

What goes where (docs/INTEGRATIONS.md says when to prefer the token-exact `rollout_func` engine instead):

- the dataset has a row per task: `prompt` (the domain's policy as the system message, an empty user message),
  `environment` (the domain's name) and `task_id`. The factory is a dict of one class per domain, so TRL
  shows each row only its domain's tools, and several domains mix in one run;
- `reset(**row)` closes the previous attempt's sandbox, opens a fresh one for the row's task
  (`Domain.open_environment`) and returns the task's instruction, which TRL appends to the user message. TRL
  resets every rollout of a generation batch before it grades any, so all of them hold a sandbox at once: a
  PostgreSQL backend's pool grows to the batch (`PostgresBackend.reserve`), and a batch the server has no
  connections for stops at its first reset, saying what to set, where the pool would otherwise wait forever;
- the domain's tools are the class's public methods, typed and documented from each tool's JSON schema (TRL
  renders them with `transformers.utils.get_json_schema`); a call goes to `Environment.call_tool`, which
  validates the arguments against the real schema, and its result is what the model reads. Arguments are what a
  model's JSON can hold: a value of any other Python type is refused with an error result and not run; the record
  keeps arguments as given when they are strict JSON, else as JSON text (NaN and Infinity as written), so a
  trajectory can always be written;
- `get_reward()` grades the final state (`Environment.grade` under the grading bound, as `groundstate run`
  does) and closes the sandbox: 1.0 or 0.0, or None for a system error (the backend failed, a tool hung, the
  grader ran out of time) and for a task with a reply rubric (unjudged: TRL does not give the environment the
  reply), which TRL leaves out of the group's baseline.

The classes pickle (TRL's `AsyncGRPOTrainer` ships `environment_factory` to a spawned rollout process): a class
travels as what rebuilds it — its domain's reference (`Domain.ref`), task ids, the backend's name and DSN, the
limits, `on_episode` and `observer` (which must pickle themselves: module-level functions, not lambdas) — and the
receiving process loads the domain (checking its content hash against the sender's), makes the backend once and
builds the class again, with the same tools.

Limits: the task's tool-call limit and `EpisodeLimits.max_tool_calls` hold (a call past them is answered with
an error and not executed), as do the per-call time limit and `max_result_chars`; turns and tokens are TRL's
(`max_tool_calling_iterations`, `max_completion_length`).
"""

from __future__ import annotations

import copyreg
import inspect
import json
import keyword
import re
import threading
import typing
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from groundstate.agents.base import valid_text
from groundstate.integrations.loop import close_quietly, run_sync
from groundstate.integrations.watch import NoToolCalls
from groundstate.state import make_backend
from groundstate.state.base import Backend
from groundstate.state.postgres import PoolExhausted, PostgresBackend
from groundstate.tasks import Task
from groundstate.types import AttemptObserver, Environment, EpisodeLimits, ToolCallRecord, ToolResult, Trajectory, Verdict, system_error
from groundstate.worlds.attempt import grade_bounded, prepare_domains
from groundstate.worlds.domain import Domain
from groundstate.worlds.episode import truncate_result
from groundstate.worlds.refs import TaskResolver

OnEpisode = Callable[[Task, Trajectory, Verdict], None]
# TRL's names on an environment and the attributes a rollout exposes: never a tool's
RESERVED = ("reset", "get_reward", "task", "trajectory", "verdict")
_DOC_MARKERS = re.compile(r"\b(Args|Returns|Raises|choices)\s*:", re.IGNORECASE)

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict, "null": type(None)}


def _hint(schema: Any) -> Any:
    """A Python annotation that `transformers.utils.get_json_schema` turns back into (a coarser form of) `schema`:
    scalar types, enums (as `Literal`), arrays of a type, objects, unions and nullables; anything else is `Any`."""
    if not isinstance(schema, dict):
        return Any
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, (str, int, float, bool)) for v in enum):
        return Literal.__getitem__(tuple(enum))
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return _union([_hint(s) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union([_hint({**schema, "type": k}) for k in kind])
    if kind == "array":
        items = schema.get("items")
        return list if items is None else list[_hint(items)]  # type: ignore[misc]
    return _JSON_TYPES.get(kind, Any) if isinstance(kind, str) else Any


def _union(hints: list[Any]) -> Any:
    if Any in hints:
        return Any
    unique = list(dict.fromkeys(hints))
    return unique[0] if len(unique) == 1 else typing.Union.__getitem__(tuple(unique))


def _one_line(text: Any) -> str:
    """Text for one docstring line: whitespace collapsed, so a description cannot open an argument of its own,
    and the words transformers' docstring parser reads as section or enum markers (`Returns:`, `(choices: …)`)
    set off with a space, so they stay text."""
    return _DOC_MARKERS.sub(lambda m: f"{m.group(1)} :", " ".join(str(text).split()))


def _tool_method(domain: str, schema: dict[str, Any]) -> Callable[..., str]:
    """The method TRL exposes for one tool: keyword arguments with the schema's names and types, a Google-style
    docstring, and a body that hands whatever the model passed to the environment (which validates it)."""
    fn_schema = schema.get("function", {})
    name = fn_schema.get("name")
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_") or name in RESERVED:
        raise ValueError(
            f"domain {domain}: tool {name!r} cannot be a TRL environment method (it must be a Python identifier, "
            f"not a keyword, not start with '_' and not be one of {', '.join(RESERVED)})"
        )
    params = fn_schema.get("parameters") or {}
    properties: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])
    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    doc_args = []
    for pname, pschema in properties.items():
        if not pname.isidentifier() or keyword.iskeyword(pname) or pname == "self":
            raise ValueError(f"domain {domain}: tool {name} has a parameter {pname!r} that cannot be a keyword argument of a method")
        hint = _hint(pschema)
        default = inspect.Parameter.empty if pname in required else None
        signature.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        annotations[pname] = hint
        description = pschema.get("description") if isinstance(pschema, dict) else None
        doc_args.append(f"    {pname}: {_one_line(description or pname)}")
    doc = _one_line(fn_schema.get("description") or name)
    if doc_args:
        doc += "\n\nArgs:\n" + "\n".join(doc_args)

    def method(self: TrlEnvironment, **arguments: Any) -> str:
        return self._call(name, arguments)

    method.__name__ = name
    method.__qualname__ = f"{domain}.{name}"
    method.__doc__ = doc
    method.__signature__ = inspect.Signature(signature, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**annotations, "return": str}
    _check_rendering(domain, method, doc.partition("\n\nArgs:")[0], {p: line.split(": ", 1)[1] for p, line in zip(properties, doc_args, strict=True)})
    return method


def _check_rendering(domain: str, method: Callable[..., str], description: str, arg_docs: dict[str, str]) -> None:
    """The schema TRL will render for `method` (`transformers.utils.get_json_schema`, as TRL calls it) says what
    the tool's says; else `ValueError` now, naming the domain and the tool, rather than at the first prompt."""
    from transformers.utils import get_json_schema

    try:
        rendered = get_json_schema(method)["function"]
    except Exception as e:  # noqa: BLE001 - whatever transformers refuses, say which tool
        raise ValueError(f"domain {domain}: tool {method.__name__}: transformers cannot render its schema: {e}") from None
    props = rendered["parameters"].get("properties", {})
    if rendered.get("description") != description or {p: props.get(p, {}).get("description") for p in arg_docs} != arg_docs:
        raise ValueError(f"domain {domain}: tool {method.__name__}: transformers would render its descriptions differently: {rendered}")


class TrlEnvironment:
    """One rollout's environment for TRL (see the module docstring); `environment_factory` makes one subclass per
    domain, whose public methods are the domain's tools. Helpers are private: TRL takes every public method of
    the class for a tool.

    After `get_reward`, `task`, `trajectory` (the instruction, every executed tool call and its full result) and
    `verdict` describe the rollout; `on_episode(task, trajectory, verdict)` is called with them.
    """

    _domain: Domain
    _tasks: dict[str, Task]
    _backend: Backend
    _limits: EpisodeLimits
    _on_episode: OnEpisode | None
    _observer: AttemptObserver | None

    def __init__(self) -> None:
        self.task: Task | None = None
        self.trajectory: Trajectory | None = None
        self.verdict: Verdict | None = None
        self._env: Environment | None = None
        self._failure: str | None = None  # the system error that ended this rollout, if any
        self._finish = "agent_done"
        self._release: weakref.finalize | None = None

    def reset(self, **row: Any) -> str:
        task_id = row.get("task_id")
        task = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            raise ValueError(f"dataset row: task_id {task_id!r} is not a task of domain {self._domain.name} given to environment_factory")
        self._close()
        self.task, self.verdict, self._failure, self._finish = task, None, None, "agent_done"
        messages = [{"role": "system", "content": self._domain.system_prompt()}, {"role": "user", "content": task.instruction}]
        self._make_room()
        try:
            self._env = run_sync(self._domain.open_environment(task, self._backend, self._limits))
            # a rollout dropped without get_reward or another reset (an aborted batch) still releases its sandbox
            self._release = weakref.finalize(self, close_quietly, self._env.close)
            messages = self._env.initial_messages()
        except Exception as e:  # noqa: BLE001 - the backend's failure, not the policy's: this rollout's reward is None
            self._failure = f"{type(e).__name__}: {e}"
        self.trajectory = Trajectory(messages=messages)  # the messages copied: the rollout's own
        return messages[-1]["content"]

    def _make_room(self) -> None:
        """Room for one more sandbox than are open now (a new task's golden replay, then the rollout's own, one after the
        other): TRL releases none of a batch's until all are reset, so a full PostgreSQL pool must grow, or the reset says
        what to set."""
        backend = self._backend
        if not isinstance(backend, PostgresBackend):
            return
        try:
            backend.reserve(backend.in_use + 1)
        except PoolExhausted as e:
            raise ValueError(
                f"TRL resets every rollout of a generation batch before it grades any, and each holds a PostgreSQL sandbox until "
                f"get_reward: {e}. Keep each process's share of a generation batch at {e.most} rollouts or fewer "
                "(GRPOConfig.generation_batch_size over the number of processes; by default per_device_train_batch_size × "
                "gradient_accumulation_steps), or raise the server's max_connections"
            ) from None

    def get_reward(self) -> float | None:
        if self.task is None or self.trajectory is None:
            raise RuntimeError("get_reward was called before reset")
        if self.verdict is None:
            self.verdict = self._grade()
            self._close()
            _no_tool_calls.episode(len(self.trajectory.tool_calls))
            if self._on_episode is not None:
                self._on_episode(self.task, self.trajectory, self.verdict)
        return None if self.verdict.reward is None else float(self.verdict.reward)

    def _grade(self) -> Verdict:
        assert self.task is not None and self.trajectory is not None
        if self._failure is not None or self._env is None:
            return system_error(self._failure or "the environment was not opened", "infrastructure")
        self.trajectory.finish_reason = self._finish
        return run_sync(grade_bounded(self._env, self.trajectory, self._limits, observer=self._observer))

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self.task is None or self.trajectory is None:
            raise RuntimeError(f"tool {name} was called before reset")
        if self.verdict is not None:
            return "error: the episode is graded; call not executed"
        if self._failure is not None or self._env is None:
            return "error: the environment is unavailable (a system error, not yours); call not executed"
        if len(self.trajectory.tool_calls) >= self._limits.tool_calls_for(self.task):
            self._finish = "max_tool_calls"
            return "error: tool-call limit reached; call not executed"
        # the record is always writable JSON: the arguments as given, or their JSON text where they are not strict JSON
        recorded: dict[str, Any] | str = arguments
        problem = _not_json(arguments)
        if problem is not None:  # what no model's JSON holds: refused here, as the tool layer refuses a bad value
            recorded = _as_text(arguments)
            result = ToolResult(False, f"error: invalid arguments for {name}: {problem}")
        else:
            if not _strict_json(arguments):  # NaN, ±Infinity or a lone surrogate: the tool layer refuses the call
                recorded = valid_text(json.dumps(arguments, ensure_ascii=False))
            try:  # validated as every adapter's calls are (NaN, ±Infinity, NUL, lone surrogates, text too long)
                result = run_sync(self._env.call_tool(name, arguments))
            except Exception as e:  # noqa: BLE001 - a hang or a lost sandbox: the harness's failure, the reward is None
                self._failure = f"{type(e).__name__}: {e}"
                return "error: the environment failed (a system error, not yours); call not executed"
        max_chars = self._limits.max_result_chars
        truncated = max_chars is not None and len(result.content) > max_chars
        self.trajectory.tool_calls.append(
            ToolCallRecord(name=name, arguments=recorded, ok=result.ok, result=result.content, write=result.write, truncated=truncated)
        )
        return truncate_result(result.content, max_chars)

    def _close(self) -> None:
        self._env = None
        release, self._release = self._release, None
        if release is not None:
            release()  # closes the sandbox, once


def _not_json(arguments: dict[str, Any]) -> str | None:
    """Which argument holds what JSON cannot (an object of another type, a key that is not text, a cycle), or None."""

    def refuse(value: Any) -> Any:
        raise TypeError(f"a value of type {type(value).__name__} is not JSON (text, a number, true or false, null, a list or an object)")

    for key, value in arguments.items():
        try:
            json.dumps(value, default=refuse)
        except (TypeError, ValueError) as e:
            return f"{key}: {e}"
    return None


def _as_text(arguments: dict[str, Any]) -> str:
    """JSON-like text of arguments that are not JSON, for the record: other objects as `<type>`, a cycle as Python writes it."""
    try:
        return valid_text(json.dumps(arguments, ensure_ascii=False, default=lambda v: f"<{type(v).__name__}>", skipkeys=True))
    except ValueError:
        return valid_text(repr(arguments))


def _strict_json(arguments: dict[str, Any]) -> bool:
    """Whether JSON `arguments` are strict JSON a file can hold: no NaN or ±Infinity, no lone surrogate."""
    try:
        text = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return False
    return valid_text(text) == text


def _by_domain(pairs: Iterable[tuple[Task, Domain]]) -> dict[str, tuple[Domain, dict[str, Task]]]:
    grouped: dict[str, tuple[Domain, dict[str, Task]]] = {}
    for task, domain in pairs:
        if not isinstance(domain, Domain):
            raise TypeError(f"task {task.id}: TRL environments serve SQL domains; {type(domain).__name__} is not one")
        known, tasks = grouped.setdefault(domain.name, (domain, {}))
        if known is not domain:
            raise ValueError(f"two different domains are both named {domain.name!r}")
        if task.id in tasks and tasks[task.id] is not task:
            raise ValueError(f"domain {domain.name}: two different tasks have the id {task.id!r}")
        if task.rubrics:
            raise ValueError(
                f"task {task.id} has reply rubrics, which this path cannot judge (TRL does not give the environment the "
                "reply): its passes would be None and its failures 0. Leave rubric tasks out "
                "(`groundstate.worlds.selectors.state_graded_only(pairs)`), or train them with `groundstate train --engine trl`"
            )
        tasks[task.id] = task
    if not grouped:
        raise ValueError("no tasks given")
    return grouped


def environment_factory(
    pairs: Iterable[tuple[Task, Domain]],
    backend: Backend | str = "sqlite",
    limits: EpisodeLimits = EpisodeLimits(),
    on_episode: OnEpisode | None = None,
    observer: AttemptObserver | None = None,
) -> dict[str, type[TrlEnvironment]]:
    """TRL's `environment_factory` for these tasks: `{domain name: environment class}` (a class is a factory).

    `backend` is a `Backend` or a name for `groundstate.state.make_backend` (made here, once); every domain is
    prepared on it here, and every tool's schema checked as TRL will render it, so a broken domain fails now,
    naming the file or the tool. `observer` sees each rollout's grading (`AttemptObserver`), in `get_reward`."""
    grouped = _by_domain(pairs)
    the_backend = backend if isinstance(backend, Backend) else make_backend(backend)
    prepare_domains([d for d, _ in grouped.values()], the_backend)
    classes: dict[str, type[TrlEnvironment]] = {}
    for name, (domain, tasks) in grouped.items():
        spec = ClassSpec(name, domain.ref(), domain.content_hash, tuple(tasks), the_backend.spec(), limits, on_episode, observer)
        classes[name] = _environment_class(spec, domain, tasks, the_backend)
    return classes


@dataclass(frozen=True)
class ClassSpec:
    """What rebuilds one domain's environment class in another process (what the class pickles as)."""

    name: str
    domain_ref: str
    content_hash: str
    task_ids: tuple[str, ...]
    backend: tuple[str, str | None]
    limits: EpisodeLimits
    on_episode: OnEpisode | None
    observer: AttemptObserver | None


class _EnvironmentClass(type):
    """The metaclass of `environment_factory`'s classes, so that pickle calls `_pickle_class` for them."""

    _spec: ClassSpec


def _environment_class(spec: ClassSpec, domain: Domain, tasks: dict[str, Task], backend: Backend) -> type[TrlEnvironment]:
    methods: dict[str, Any] = {s["function"]["name"]: _tool_method(spec.name, s) for s in domain.tools.openai_schemas()}
    attrs = {
        **methods,
        "_domain": domain,
        "_tasks": tasks,
        "_backend": backend,
        "_limits": spec.limits,
        "_on_episode": staticmethod(spec.on_episode) if spec.on_episode is not None else None,
        "_observer": spec.observer,
        "_spec": spec,
        "__doc__": f"The {spec.name} domain as a TRL environment (groundstate.integrations.trl).",
    }
    return _EnvironmentClass(spec.name, (TrlEnvironment,), attrs)  # TRL logs its reward as rewards/<class name>


_resolver = TaskResolver()
_no_tool_calls = NoToolCalls(
    "TRL environment",
    "TRL reads tool calls only where it knows the chat template's format (its bundled templates: Qwen, Llama 3, GPT-OSS, "
    "Gemma 4, ...): check that the template renders the tools and that TRL parses what the model writes (docs/INTEGRATIONS.md).",
)
_backends: dict[tuple[str, str | None], Backend] = {}  # made once per process by the classes unpickled here
_backends_lock = threading.Lock()


def rebuild_class(spec: ClassSpec) -> type[TrlEnvironment]:
    """The environment class `spec` describes, built in this process: its domain loaded by reference (and refused if
    its content hash is not the sender's), its backend made once per process and the domain prepared on it."""
    pairs = [_resolver.resolve(spec.domain_ref, task_id) for task_id in spec.task_ids]
    domain = pairs[0][1]
    if not isinstance(domain, Domain):
        raise TypeError(f"{spec.domain_ref}: TRL environments serve SQL domains; {type(domain).__name__} is not one")
    if domain.content_hash != spec.content_hash:
        raise ValueError(
            f"domain {spec.domain_ref}: its definition here (content hash {domain.content_hash}) is not the one the environment "
            f"classes were made from ({spec.content_hash}): every process must load the same domain files"
        )
    with _backends_lock:
        backend = _backends.get(spec.backend)
        if backend is None:
            backend = _backends[spec.backend] = make_backend(*spec.backend)
    prepare_domains([domain], backend)
    return _environment_class(spec, domain, {task.id: task for task, _ in pairs}, backend)


def _pickle_class(cls: _EnvironmentClass) -> tuple[Callable[[ClassSpec], type[TrlEnvironment]], tuple[ClassSpec]]:
    return rebuild_class, (cls._spec,)


copyreg.pickle(_EnvironmentClass, _pickle_class)


def trl_dataset(pairs: Iterable[tuple[Task, Domain]]):
    """A `datasets.Dataset` with one row per task, for `GRPOTrainer(train_dataset=...)` with `environment_factory`
    of the same tasks: `prompt` (the domain's policy as system message, then an empty user message that `reset`
    fills with the instruction), `environment` (the domain) and `task_id`."""
    from datasets import Dataset

    pairs = list(pairs)
    _by_domain(pairs)  # the same checks as the factory's
    rows, seen = [], set()
    for task, domain in pairs:  # in the order given, each task once
        if (domain.name, task.id) not in seen:
            seen.add((domain.name, task.id))
            prompt = [{"role": "system", "content": domain.system_prompt()}, {"role": "user", "content": ""}]
            rows.append({"prompt": prompt, "environment": domain.name, "task_id": task.id})
    return Dataset.from_list(rows)


def graded_only(reward_func: Callable[..., list[float | None]]) -> Callable[..., list[float | None]]:
    """`reward_func` (a TRL reward function) made None wherever the rollout's environment has no verdict.

    TRL leaves a rollout out of its group's baseline only when *every* reward function returns None for it; a
    second reward function (a format bonus, say) would otherwise score a system error's rollout on its own, like
    a failure. Wrap every other reward function with this to keep system errors out.
    """

    def wrapped(*args: Any, environments: list[TrlEnvironment] | None = None, **kwargs: Any) -> list[float | None]:
        rewards = reward_func(*args, environments=environments, **kwargs)
        if environments is None:
            return rewards
        ungraded = [isinstance(env, TrlEnvironment) and env.get_reward() is None for env in environments]
        return [None if no else r for no, r in zip(ungraded, rewards, strict=True)]

    wrapped.__name__ = getattr(reward_func, "__name__", "reward")
    return wrapped
