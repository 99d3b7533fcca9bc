"""Tasks: what an agent must do in a world, as data, and the one bounded reader of every YAML or JSON file.

A *task* is validated with pydantic when it is loaded (by its domain, `groundstate.worlds.domain`): a malformed
file fails with its path, the task id and the field. `read_data_file` reads every data file groundstate
takes as input (task files, `domain.yaml`, selections, price tables, ThinkingBox files) within fixed limits.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_serializer


class TaskFileError(ValueError):
    """A task or domain file is malformed; the message names the file, the task and the field."""

    def __init__(self, path: Path | str, message: str, task_id: str | None = None, field: str | None = None):
        self.path, self.task_id, self.field = str(path), task_id, field
        where = str(path)
        if task_id:
            where += f": task {task_id!r}"
        if field:
            where += f": field {field!r}"
        super().__init__(f"{where}: {message}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCall(_Strict):
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class SqlCheck(_Strict):
    """An extra check: the query's rows (as lists, in order) must equal `expect`."""

    sql: str
    expect: list[list[Any]]


class UserSpec(_Strict):
    persona: str | None = None  # who the simulated user is (for an LLM user)
    context: str | None = None  # facts the user knows and reveals when asked
    script: list[str] = Field(default_factory=list)  # scripted replies, in order
    # the user's own gold calls, on the user's side (a world whose users have tools: τ²'s telecom phone); the scripted
    # user makes them in its first reply, where the world gives it those tools (`types.UserTools`)
    actions: list[ToolCall] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _actions_only_where_there_are_some(self, handler: Any) -> dict[str, Any]:
        """`actions` is dumped only where the user has some: every other task's dump (and version hash) is unchanged."""
        data = handler(self)
        if isinstance(data, dict) and not data.get("actions"):
            data.pop("actions", None)
        return data


class Limits(_Strict):
    max_turns: int = Field(30, ge=1)  # agent turns
    max_tool_calls: int = Field(40, ge=0)


class Task(_Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9_.:\-]+$")
    domain: str
    instruction: str = Field(min_length=1)
    user: UserSpec = Field(default_factory=UserSpec)
    patch: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    gold: list[ToolCall]
    checks: list[SqlCheck] = Field(default_factory=list)
    rubrics: list[str] = Field(default_factory=list)  # yes/no questions about the final reply, for an LLM judge
    gold_reply: str | None = Field(None, min_length=1)  # a final reply the rubrics accept (the scripted gold agent's last message)
    tags: list[str] = Field(default_factory=list)
    family: str = "unspecified"
    template: str | None = None
    split: Literal["pool", "bench"] | None = None
    limits: Limits = Field(default_factory=Limits)
    source_id: str | None = None  # the task's own id in the benchmark it comes from, unchanged (τ²'s), where that is another

    @model_serializer(mode="wrap")
    def _source_id_only_where_there_is_one(self, handler: Any) -> dict[str, Any]:
        """`source_id` is dumped only for a task from another benchmark: every other task's dump (and every version hash
        made of one: `worlds.attempt.task_fingerprint`) is what it was before the field existed."""
        data = handler(self)
        if isinstance(data, dict) and data.get("source_id") is None:
            data.pop("source_id", None)
        return data

    def fingerprint(self) -> str:
        """Hash of what defines the task's outcome (domain, patch, gold), independent of id and wording."""
        body = json.dumps({"d": self.domain, "p": self.patch, "g": [c.model_dump() for c in self.gold]}, sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()[:16]


def _pydantic_error(path: Path, e: pydantic.ValidationError, task_id: str | None, prefix: str = "") -> TaskFileError:
    err = e.errors()[0]
    field = prefix + "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"]).lstrip(".")
    more = f" (and {len(e.errors()) - 1} more problems)" if len(e.errors()) > 1 else ""
    return TaskFileError(path, f"{err['msg']}{more}", task_id, field or None)


# Limits of every YAML/JSON file groundstate reads (task files, domain.yaml, selection, price, ThinkingBox and servers files).
# The largest bundled task file is 0.3 MB and 17,500 nodes: the limits leave room and stop hostile files.
MAX_FILE_BYTES = 32 * 2**20
MAX_YAML_NODES = 2_000_000  # nodes after expanding aliases: a "billion laughs" file is refused, not expanded
MAX_NESTING = 64


# libyaml's parser when present (ThinkingBox-Bench files hold megabytes of YAML), else PyYAML's; both are safe loaders
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str, name: str = "<yaml>") -> Any:
    """YAML text to plain data with the safe loader (tags such as `!!python/object/apply` are errors, never calls),
    within the limits above; `yaml.YAMLError` otherwise.

    Nesting is measured on the parser's events before anything is composed (so a hostile depth never reaches a
    recursive composer). Aliases are shared references when loaded, but every consumer (pydantic, JSON,
    hashing) walks them expanded, and a few lines of anchors can stand for 10**9 nodes: the composed node graph
    is measured, expanded, before anything is constructed; an alias to a node that contains it is refused too.
    """
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_SAFE_LOADER):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_NESTING:
                    raise yaml.YAMLError(f"{name}: nested deeper than {MAX_NESTING} levels (line {event.start_mark.line + 1})")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.MarkedYAMLError as e:  # libyaml's scanner refuses 1,000 levels before its parser yields the 65th
        if "maximum nesting depth" not in str(e.problem):
            raise
        raise yaml.YAMLError(f"{name}: nested deeper than {MAX_NESTING} levels (line {e.problem_mark.line + 1})") from None
    loader = _SAFE_LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, {}, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise yaml.YAMLError(f"an alias refers to a node that contains it (line {node.start_mark.line + 1})")
    open_.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes, open_) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, sizes, open_) + _expanded_size(v, sizes, open_) for k, v in node.value)
    open_.discard(key)
    if size > MAX_YAML_NODES:
        raise yaml.YAMLError(f"expands to more than {MAX_YAML_NODES:,} nodes (aliases included)")
    sizes[key] = size
    return size


def read_data_file(path: Path | str) -> Any:
    """Parse a YAML or JSON file within the limits above; a bad file raises `TaskFileError` naming it.

    YAML is read with the safe loader only: tags such as `!!python/object/apply` are errors, never calls.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise TaskFileError(path, f"is {size:,} bytes; the limit is {MAX_FILE_BYTES:,}")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TaskFileError(path, f"cannot be read: {e}") from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskFileError(path, f"not valid JSON: {e}") from None
        except RecursionError:
            raise TaskFileError(path, "not valid JSON: nested too deeply") from None
    try:
        return parse_yaml(text, str(path))
    except yaml.YAMLError as e:
        raise TaskFileError(path, f"not valid YAML: {e}") from None
    except RecursionError:
        raise TaskFileError(path, f"not valid YAML: nested deeper than {MAX_NESTING} levels") from None
