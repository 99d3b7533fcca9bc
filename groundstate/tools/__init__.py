"""Tool specs from plain typed functions.

A domain's tool is a function whose first parameter is the sandbox `Db`; the rest of the signature
becomes the JSON schema (through pydantic), the docstring the description. `@tool(write=True)`
marks tools that change state. Calls are validated, run atomically, and every failure comes back
to the agent as an error result: the episode goes on. Arguments that the two backends would treat
differently (text with NUL or lone surrogates or over `MAX_TEXT_CHARS`, NaN and infinities) are refused
up front, so a call has the same outcome on SQLite and PostgreSQL.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pydantic

from groundstate.types import ToolResult

__all__ = ["tool", "ToolError", "ToolSpec", "ToolResult", "Toolset"]


class ToolError(Exception):
    """A refusal the agent should read (business rule, missing record); never a crash."""


def tool(fn: Callable | None = None, *, write: bool = False):
    """Mark a function as a domain tool; `write=True` if it may change the database."""

    def mark(f: Callable) -> Callable:
        f.__gs_tool__ = {"write": write}
        return f

    return mark(fn) if fn is not None else mark


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_SECTION = re.compile(r"^(Returns|Return|Raises|Yields|Examples?|Notes?|Attributes):\s*$")
_ARG_LINE = re.compile(r"^\s+(\w+)\s*(\([^)]*\))?:\s*(.*)$")


def _split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Google-style docstring -> (description: the prose before any section, {param: description})."""
    lines = inspect.cleandoc(doc or "").splitlines()
    desc, params, current, in_args, in_other = [], {}, None, False, False
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args, in_other = True, False
            continue
        if _SECTION.match(line):
            in_args, in_other = False, True
            continue
        if in_other:
            continue
        if in_args:
            m = _ARG_LINE.match(line)
            if m:
                current = m.group(1)
                params[current] = m.group(3).strip()
            elif current and line.strip():
                params[current] += " " + line.strip()
            continue
        desc.append(line)
    return "\n".join(desc).strip(), params


def _shape_problem(fn: Callable, sig: inspect.Signature) -> str | None:
    """Why `fn` cannot be called as a tool, or None.

    A tool is called synchronously inside the sandbox transaction (`Db.atomic`): an `async def` or generator
    function would return an un-run coroutine or generator, "succeed" with its repr, and do its writes never
    (or after the transaction). The JSON schema is the signature, so `*args`/`**kwargs` would accept
    anything while saying nothing; a call passes arguments by name after the `Db`, so positional-only ones
    cannot be passed.
    """
    inner = inspect.unwrap(fn)  # a `functools.wraps` decorator makes an `async def` look like a plain one
    if any(inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in (fn, inner)):
        return "is `async def`; tools run inside the sandbox's transaction and must be plain `def` functions"
    if any(inspect.isgeneratorfunction(f) for f in (fn, inner)):
        return "is a generator (it uses `yield`); a tool must return its result"
    params = list(sig.parameters.values())
    for p in params:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            star = "*" if p.kind is inspect.Parameter.VAR_POSITIONAL else "**"
            return f"takes {star}{p.name}; every argument must be a named, typed parameter (the signature is the tool's JSON schema)"
    if not params or params[0].kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        return "its first parameter must receive the sandbox `Db`"
    for p in params[1:]:
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            return f"parameter {p.name} is positional-only; arguments are passed by name"
    return None


@dataclass
class ToolSpec:
    name: str
    description: str
    fn: Callable
    args_model: type[pydantic.BaseModel]
    write: bool
    params: dict[str, Any] = field(default_factory=dict)  # parameter name -> annotation

    @classmethod
    def from_function(cls, fn: Callable) -> ToolSpec:
        """The spec of a tool function; `ValueError` naming the function when it cannot be one (see `_shape_problem`)."""
        meta = getattr(fn, "__gs_tool__", {"write": False})
        sig = inspect.signature(fn)
        problem = _shape_problem(fn, sig)
        if problem:
            raise ValueError(f"tool {fn.__name__}: {problem}")
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as e:  # an annotation that names nothing importable
            raise ValueError(f"tool {fn.__name__}: its type annotations do not resolve: {type(e).__name__}: {e}") from None
        description, param_docs = _split_docstring(fn.__doc__ or "")
        if not description:
            raise ValueError(f"tool {fn.__name__} has no docstring: the docstring is its description")
        fields: dict[str, Any] = {}
        params: dict[str, Any] = {}
        for i, (name, p) in enumerate(sig.parameters.items()):
            if i == 0:
                continue  # the Db
            ann = hints.get(name, Any)
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[name] = (ann, pydantic.Field(default, description=param_docs.get(name)))
            params[name] = ann
        try:  # the schema is built now, so a parameter type JSON cannot describe is a load error, not an episode's
            model = pydantic.create_model(
                f"{fn.__name__}_args", __config__=pydantic.ConfigDict(extra="forbid", strict=False, allow_inf_nan=False), **fields
            )
            model.model_json_schema()
        except pydantic.PydanticUserError as e:
            raise ValueError(f"tool {fn.__name__}: its parameters have no JSON schema: {str(e).splitlines()[0]}") from None
        return cls(fn.__name__, description, fn, model, bool(meta["write"]), params)

    def json_schema(self) -> dict[str, Any]:
        """The arguments' JSON schema (a fresh copy: callers may edit it)."""
        return json.loads(self._schema_text)  # a sixth of `copy.deepcopy`'s time, and every episode asks for it

    @functools.cached_property
    def _schema_text(self) -> str:
        # pydantic builds a schema in milliseconds, and every episode asks for its tools': build it once per tool
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return json.dumps(schema)

    def openai_schema(self) -> dict[str, Any]:
        """The tool in the OpenAI / Hugging Face chat-template `tools` format."""
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": self.json_schema()}}

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Validated keyword arguments, or `ToolError` with a message the agent can act on."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                raise ToolError(f"arguments of {self.name} are not valid JSON: {e.msg}") from None
        if not isinstance(arguments, dict):
            raise ToolError(f"arguments of {self.name} must be a JSON object, got {type(arguments).__name__}")
        problem = _argument_problem(arguments, "")
        if problem:
            raise ToolError(f"invalid arguments for {self.name}: {problem}")
        for name, value in arguments.items():
            # lenient coercion accepts "3" for 3, but true/false are never numbers
            if isinstance(value, bool) and _strip_optional(self.params.get(name)) in (int, float):
                raise ToolError(f"invalid arguments for {self.name}: {name}: expected a number, got a boolean")
        try:
            parsed = self.args_model.model_validate(arguments)
        except pydantic.ValidationError as e:
            problems = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or '(arguments)'}: {err['msg']}" for err in e.errors())
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from None
        return {k: getattr(parsed, k) for k in self.args_model.model_fields}


MAX_TEXT_CHARS = 10_000  # longest text argument: SQLite refuses LIKE patterns over 50,000 bytes, PostgreSQL does not


def _argument_problem(value: Any, where: str) -> str | None:
    """Why `value` (walked through lists and objects) would not behave alike on every backend, or None.

    PostgreSQL refuses NUL in text and SQLite keeps it; a lone surrogate cannot be encoded as UTF-8 (nor
    written to a results file); SQLite stores NaN as NULL and PostgreSQL as NaN; SQLite refuses very long
    LIKE patterns. Refusing these up front keeps a call's outcome, and so the verdict, the same on both
    backends, and the agent's error message printable.
    """
    if isinstance(value, str):
        if len(value) > MAX_TEXT_CHARS:
            return f"{where or '(arguments)'}: text is longer than {MAX_TEXT_CHARS:,} characters ({len(value):,})"
        if "\x00" in value:
            return f"{where or '(arguments)'}: text may not contain NUL characters"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{where or '(arguments)'}: text is not valid Unicode (lone surrogate)"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{where or '(arguments)'}: numbers must be finite, got {value}"
    elif isinstance(value, dict):
        for k, v in value.items():
            key = str(k)
            if _argument_problem(key, "field name") is not None:
                return f"{where or '(arguments)'}: field name {key!r} is not valid text"
            problem = _argument_problem(v, f"{where}.{key}" if where else key)
            if problem:
                return problem
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            problem = _argument_problem(v, f"{where}[{i}]")
            if problem:
                return problem
    return None


def _strip_optional(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1 else annotation


def _result(name: str, value: Any) -> Any:
    """`value`, unless it is an un-run coroutine, generator or other awaitable: its work never happened (a plain
    `def` that returns an async helper's coroutine passes every load check), so the call fails, and its
    transaction rolls back, instead of "succeeding" with the object's repr."""
    if inspect.isawaitable(value) or inspect.isgenerator(value) or inspect.isasyncgen(value):
        if inspect.iscoroutine(value) or inspect.isgenerator(value):
            value.close()  # never run: no "was never awaited" warning
        raise TypeError(
            f"tool {name} returned a {type(value).__name__} instead of its result, so its work never ran: "
            "a tool must be a plain `def` that does its work and returns the result"
        )
    return value


def _to_json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)


class Toolset:
    """A domain's tools by name. `call` never raises for anything the agent did."""

    def __init__(self, specs: list[ToolSpec]):
        self.specs = {s.name: s for s in specs}

    @classmethod
    def from_module(cls, module: Any) -> Toolset:
        fns = [obj for name, obj in vars(module).items() if callable(obj) and hasattr(obj, "__gs_tool__") and not name.startswith("_")]
        return cls([ToolSpec.from_function(f) for f in fns])

    def __contains__(self, name: str) -> bool:
        return name in self.specs

    def __getitem__(self, name: str) -> ToolSpec:
        return self.specs[name]

    def names(self) -> list[str]:
        return list(self.specs)

    def openai_schemas(self, allowed: list[str] | None = None) -> list[dict[str, Any]]:
        return [s.openai_schema() for n, s in self.specs.items() if allowed is None or n in allowed]

    def call(self, db: Any, name: str, arguments: Any) -> ToolResult:
        spec = self.specs.get(name)
        if spec is None:
            return ToolResult(False, f"error: unknown tool {name!r}; available tools: {', '.join(self.specs)}")
        try:
            kwargs = spec.validate(arguments)
            with db.atomic():
                value = _result(name, spec.fn(db, **kwargs))
        except ToolError as e:
            return ToolResult(False, f"error: {e}", spec.write)
        except Exception as e:  # a bug or a database error inside the tool: the agent sees it, the run goes on
            return ToolResult(False, f"error: {name} failed: {type(e).__name__}: {e}", spec.write)
        return ToolResult(True, _to_json(value), spec.write)
