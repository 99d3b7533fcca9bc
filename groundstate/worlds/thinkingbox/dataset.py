"""ThinkingBox datasets as groundstate tasks: parse, merge and hydrate, without executing any test file.

A ThinkingBox *dataset directory* holds `scenario/<name>.yaml`, `test_case/**/*.py` and `agent/<name>.yaml`.
A test-case file is Python whose YAML lives in string literals starting with `!`: module-level ones hold
defaults (e.g. `scenario: NAME`), and a function whose first statement is such a literal is a test case
(`query`, `user_context`, `init`, `tags`, turn limits). We read them with `ast` and `yaml.safe_load`, as
ThinkingBox's own loader does (`thinkingbox.common.python_test_file`), and never import the file.

Each case becomes a real `groundstate.tasks.Task` (so results, metrics, compare, select and train treat it
like any other): id `file.py:test_name`, the query as instruction, `user_context` as the simulated user's
persona, the gold `tool_interactions` as `gold`, `rubrics_yesno` as `rubrics`, and the merged `data_patch`
as `patch` (keyed `server/table`, so content fingerprints tell cases apart). What only the bridge needs —
the init configuration per server, the scenario's tools, how the case is checked — stays in a `TbCase`
held by the case's `TbDomain`, which is what `groundstate.worlds.attempt.play` opens environments from.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
import yaml

from groundstate.tasks import Limits, Task, TaskFileError, ToolCall, UserSpec, parse_yaml, read_data_file
from groundstate.worlds.thinkingbox.case import TbCase, merge_init
from groundstate.worlds.thinkingbox.domain import TbDomain

CONFIG_FIELDS = (
    "scenario",
    "query",
    "user_context",
    "max_user_sim_turns",
    "max_agent_sim_turns",
    "bot_instructions",
    "history",
    "init",
    "format_query",
    "tags",
)
DEFAULT_AGENT = "think"
RESERVED_PREFIX = "__reserved__"
# The benchmark's checks: a test body made only of calls to these module helpers (recognised by what they read)
HASH_HELPER = "validate_database"
YESNO_HELPER = "validate_rubrics_yesno"


# -- parsing test files with ast -------------------------------------------------------------------


@dataclass
class _TestFunction:
    name: str
    config: dict[str, Any]
    node: ast.FunctionDef
    lineno: int
    end_lineno: int


@dataclass
class _ParsedFile:
    path: Path
    source: str
    functions: dict[str, _TestFunction] = field(default_factory=dict)
    helpers: dict[str, ast.FunctionDef] = field(default_factory=dict)  # module-level non-test functions
    bindings: dict[str, int] = field(default_factory=dict)  # name -> times bound anywhere in the file
    runs_code: str | None = None  # the first module-level statement that could change what a helper does, if any


def _misplaced_tests(tree: ast.Module) -> list[tuple[str, int, str]]:
    """Functions that carry a test's `!` YAML but are not plain module-level `def`s: (name, line, why)."""
    out: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, where: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                is_test = bool(child.body) and _yaml_literal(child.body[0]) is not None
                why = "is an `async def`" if isinstance(child, ast.AsyncFunctionDef) else where
                if is_test and why:
                    out.append((child.name, child.lineno, why))
                visit(child, f"is nested in function {child.name}")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"is a method of class {child.name}")
            elif isinstance(child, ast.stmt):
                visit(child, where or f"is defined inside a `{type(child).__name__.lower()}` block (line {child.lineno})")
            else:
                visit(child, where)

    visit(tree, None)
    return out


def _module_bindings(tree: ast.Module) -> dict[str, int]:
    """How many times each name is bound anywhere in the file (def, class, assignment, import, del, global, ...)."""
    counts: dict[str, int] = {}

    def bind(name: str | None) -> None:
        if name:
            counts[name] = counts.get(name, 0) + 1

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bind(node.id)
        elif isinstance(node, ast.alias):
            bind(node.asname or node.name.split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bind(name)
        elif isinstance(node, ast.arg):
            bind(node.arg)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
            bind(node.name)
    return counts


def _yaml_literal(node: ast.stmt) -> str | None:
    """The YAML text of a `"!..."` string-expression statement, else None."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        text = node.value.value
        if text.startswith("!"):
            return textwrap.dedent(text[1:])
    return None


def _load_yaml_literal(path: Path, text: str, where: str, uid: str | None) -> dict[str, Any]:
    try:
        obj = parse_yaml(text, f"{path}: {where}")
    except yaml.YAMLError as e:
        raise TaskFileError(path, f"the YAML of {where} is not valid: {e}", uid) from None
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise TaskFileError(path, f"the YAML of {where} must be a mapping, got {type(obj).__name__}", uid)
    return obj


@functools.lru_cache(maxsize=256)
def _parse_file_cached(path: Path, mtime_ns: int) -> _ParsedFile:
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
    except (OSError, UnicodeDecodeError) as e:
        raise TaskFileError(path, f"cannot be read: {e}") from None
    except SyntaxError as e:
        raise TaskFileError(path, f"is not valid Python (line {e.lineno}): {e.msg}") from None
    parsed = _ParsedFile(path, source)
    misplaced = _misplaced_tests(tree)
    if misplaced:
        name, line, why = misplaced[0]
        raise TaskFileError(
            path,
            f"test {name} (line {line}) {why}: ThinkingBox collects only plain module-level `def` test "
            "functions, so the bridge cannot grade it as ThinkingBox would; make it one or remove its `!` YAML",
            f"{path.name}:{name}",
        )
    parsed.bindings = _module_bindings(tree)
    parsed.runs_code = _module_code(tree)
    module_cfg: dict[str, Any] = {}
    for node in tree.body:
        text = _yaml_literal(node)
        if text is not None:
            module_cfg.update(_load_yaml_literal(path, text, "the module-level `!` string", None))
        elif isinstance(node, ast.FunctionDef):
            first = _yaml_literal(node.body[0]) if node.body else None
            if first is None:
                parsed.helpers[node.name] = node
                continue
            uid = f"{path.name}:{node.name}"
            local = _load_yaml_literal(path, first, f"test {node.name}", uid)
            unknown = [k for k in local if k not in CONFIG_FIELDS]
            if unknown:
                raise TaskFileError(path, f"unknown key {unknown[0]!r} (allowed: {', '.join(CONFIG_FIELDS)})", uid, unknown[0])
            cfg = {**module_cfg, **local}
            if isinstance(module_cfg.get("tags"), list) and isinstance(local.get("tags"), list):
                cfg["tags"] = module_cfg["tags"] + local["tags"]
            parsed.functions[node.name] = _TestFunction(node.name, cfg, node, node.lineno, node.end_lineno or node.lineno)
    return parsed


def parse_test_file(path: Path) -> _ParsedFile:
    """The test functions of a ThinkingBox test-case file (cached while the file is unchanged)."""
    path = Path(path).resolve()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as e:
        raise TaskFileError(path, f"cannot be read: {e}") from None
    return _parse_file_cached(path, mtime)


def _test_code(parsed: _ParsedFile, fn: _TestFunction) -> str:
    """ThinkingBox's `test_code`: the file with every other test function blanked (line numbers kept)."""
    lines = parsed.source.split("\n")
    for other in parsed.functions.values():
        if other.name != fn.name:
            for k in range(other.lineno - 1, other.end_lineno):
                lines[k] = ""
    return "\n".join(lines + [f"__tb_test_fn = {fn.name}", ""])


def _module_code(tree: ast.Module) -> str | None:
    """The first module-level statement that runs code which could change what the helpers do, else None.

    The benchmark's files hold only docstrings and `!` YAML strings, imports, constants (`SERVER_NAME = "..."`) and
    `def`s. Anything else — `validate_database.__code__ = ...`, `globals()[...] = ...`, a call, an `if` — runs when
    ThinkingBox executes the file; so does importing a module outside the standard library and `thinkingbox`."""
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.decorator_list:
            continue
        if (
            isinstance(node, (ast.Assign, ast.AnnAssign))
            and isinstance(node.value, ast.Constant)
            and all(isinstance(t, ast.Name) for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
        ):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if not getattr(node, "level", 0) and all(m.split(".")[0] in sys.stdlib_module_names | {"thinkingbox"} for m in modules):
                continue
        return f"line {node.lineno} runs code at module level ({type(node).__name__.lower()})"
    return None


def _effects_key(node: ast.AST, x: str, key: str) -> bool:
    """Whether `node` is `x.effects[<server>][key]`."""
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == key
        and isinstance(node.value, ast.Subscript)
        and isinstance(node.value.value, ast.Attribute)
        and node.value.value.attr == "effects"
        and isinstance(node.value.value.value, ast.Name)
        and node.value.value.value.id == x
    )


def _body(fn: ast.FunctionDef) -> list[ast.stmt]:
    """The function's statements without a leading docstring."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]
    return body


# Inside the failing branch of the hash check: what could skip its `assert False` (or loop without end) is not the benchmark's
_ESCAPES = (
    ast.Return,
    ast.Try,
    ast.Raise,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Lambda,
    ast.Global,
    ast.Nonlocal,
    ast.Delete,
    ast.Yield,
    ast.YieldFrom,
    ast.Await,
    ast.Break,
    ast.Continue,
    ast.NamedExpr,
)


def _is_hash_helper(fn: ast.FunctionDef) -> bool:
    """The benchmark's `validate_database(x)`: read the two hashes from `x.effects[server]`, and `assert False` if they differ.

    Its failing branch may build a message (the benchmark formats the diff) but nothing that could skip the assertion."""
    args = fn.args
    if len(args.args) != 1 or args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg or args.defaults:
        return False
    x, body = args.args[0].arg, _body(fn)
    if len(body) != 3 or not all(isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name) for b in body[:2]):
        return False
    names = {}
    for b in body[:2]:
        key = next((k for k in ("result_db_hash", "golden_db_hash") if _effects_key(b.value, x, k)), None)
        if key is None or key in names:
            return False
        names[key] = b.targets[0].id
    check = body[2]
    if not (
        isinstance(check, ast.If)
        and not check.orelse
        and isinstance(check.test, ast.Compare)
        and len(check.test.ops) == 1
        and isinstance(check.test.ops[0], ast.NotEq)
        and isinstance(check.test.left, ast.Name)
        and isinstance(check.test.comparators[0], ast.Name)
        and {check.test.left.id, check.test.comparators[0].id} == set(names.values())
        and len(set(names.values())) == 2
    ):
        return False
    last = check.body[-1]
    if not (isinstance(last, ast.Assert) and isinstance(last.test, ast.Constant) and last.test.value is False):
        return False
    return not any(isinstance(n, _ESCAPES) for n in ast.walk(ast.Module(body=check.body, type_ignores=[])))


def _is_yesno_helper(fn: ast.FunctionDef) -> bool:
    """The benchmark's `validate_rubrics_yesno(x, judge)`: for each of `x.effects[server].get("rubrics_yesno", [])`,
    `assert judge.text_yesno(x.response, rubric)` (with any message)."""
    args = fn.args
    if len(args.args) != 2 or args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg or args.defaults:
        return False
    x, judge = (a.arg for a in args.args)
    body = _body(fn)
    if len(body) != 2 or not (isinstance(body[0], ast.Assign) and len(body[0].targets) == 1 and isinstance(body[0].targets[0], ast.Name)):
        return False
    get = body[0].value
    if not (
        isinstance(get, ast.Call)
        and isinstance(get.func, ast.Attribute)
        and get.func.attr == "get"
        and not get.keywords
        and isinstance(get.func.value, ast.Subscript)
        and isinstance(get.func.value.value, ast.Attribute)
        and get.func.value.value.attr == "effects"
        and isinstance(get.func.value.value.value, ast.Name)
        and get.func.value.value.value.id == x
        and len(get.args) == 2
        and isinstance(get.args[0], ast.Constant)
        and get.args[0].value == "rubrics_yesno"
        and isinstance(get.args[1], ast.List)
        and not get.args[1].elts
    ):
        return False
    loop = body[1]
    if not (
        isinstance(loop, ast.For)
        and not loop.orelse
        and isinstance(loop.target, ast.Name)
        and isinstance(loop.iter, ast.Name)
        and loop.iter.id == body[0].targets[0].id
        and len(loop.body) == 1
        and isinstance(loop.body[0], ast.Assert)
    ):
        return False
    ask = loop.body[0].test
    return (
        isinstance(ask, ast.Call)
        and isinstance(ask.func, ast.Attribute)
        and ask.func.attr == "text_yesno"
        and not ask.keywords
        and isinstance(ask.func.value, ast.Name)
        and ask.func.value.id == judge
        and len(ask.args) == 2
        and isinstance(ask.args[0], ast.Attribute)
        and ask.args[0].attr == "response"
        and isinstance(ask.args[0].value, ast.Name)
        and ask.args[0].value.id == x
        and isinstance(ask.args[1], ast.Name)
        and ask.args[1].id == loop.target.id
    )


_HELPER_SHAPES = {HASH_HELPER: _is_hash_helper, YESNO_HELPER: _is_yesno_helper}


def classify_check(parsed: _ParsedFile, fn: _TestFunction) -> tuple[str, bool, str]:
    """("benchmark", uses_yesno, "") when the test body only calls the benchmark's hash (and yes/no rubric)
    helpers, each defined once by a plain `def` of the benchmark's shape and never rebound, in a file that runs no
    other module-level code (so calling it does what the hash check does); ("python", False, why) for any other
    test code, which only ThinkingBox itself can run faithfully."""
    if fn.node.decorator_list:
        return "python", False, "the test function is decorated"
    called: list[str] = []
    for stmt in fn.node.body[1:]:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.keywords):
            return "python", False, f"line {stmt.lineno} is not a call of a benchmark helper"
        name = call.func.id
        helper = parsed.helpers.get(name)
        if helper is not None and (helper.decorator_list or parsed.bindings.get(name, 0) != 1):
            return "python", False, f"helper {name} is decorated or bound more than once in the file (e.g. reassigned)"
        if helper is None or name not in _HELPER_SHAPES:
            return "python", False, f"{name} (line {stmt.lineno}) is not a benchmark helper"
        if not _HELPER_SHAPES[name](helper):
            return (
                "python",
                False,
                (
                    f"helper {name} (line {helper.lineno}) is not written as the benchmark's "
                    f"{'hash comparison' if name == HASH_HELPER else 'yes/no rubric check'}: it may check something else"
                ),
            )
        called.append(name)
    if HASH_HELPER not in called:
        return "python", False, f"it does not call {HASH_HELPER}"
    if parsed.runs_code:
        return "python", False, f"the file {parsed.runs_code}, which could change what its helpers do"
    return "benchmark", YESNO_HELPER in called, ""


# -- scenarios and agents ----------------------------------------------------------------------------


class _ToolRef(pydantic.BaseModel):
    """A scenario tool (ThinkingBox's `ToolDefOverride`): description overrides apply; behaviour overrides are refused."""

    model_config = pydantic.ConfigDict(extra="ignore")
    name: str
    override_description: str | None = None
    override_arg_description: dict[str, str] | None = None
    direct_response: str | None = None
    is_end_turn: bool = False


class _Scenario(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    world_state: dict[str, dict[str, Any] | None]
    tools: list[_ToolRef]
    bot_instructions: str | None = None
    tags: list[str] = pydantic.Field(default_factory=list)


class _Agent(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    system_instructions: str


def _validated(model: type[pydantic.BaseModel], path: Path, raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise TaskFileError(path, "must be a YAML mapping")
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"]).lstrip(".")
        raise TaskFileError(path, err["msg"], field=where or None) from None


# -- the dataset -----------------------------------------------------------------------------------


class TbDataset:
    """One ThinkingBox dataset directory: its scenarios, agent prompt and test files."""

    def __init__(self, root: Path | str, agent: str = DEFAULT_AGENT):
        self.root = Path(root).resolve()
        for sub in ("scenario", "test_case"):
            if not (self.root / sub).is_dir():
                raise TaskFileError(self.root, f"not a ThinkingBox dataset directory: it has no {sub}/ folder")
        self.agent_path = self.root / "agent" / f"{agent}.yaml"
        if not self.agent_path.resolve().is_relative_to((self.root / "agent").resolve()):  # refused unread, as test files are
            raise TaskFileError(
                self.agent_path, f"resolves outside {self.root / 'agent'}: the agent file must lie inside the dataset's agent/ folder"
            )
        if not self.agent_path.is_file():
            raise TaskFileError(self.agent_path, f"agent {agent!r} not found (a dataset holds agent/<name>.yaml)")
        self.agent = _validated(_Agent, self.agent_path, read_data_file(self.agent_path))
        self._scenarios: dict[str, _Scenario] = {}

    def scenario_path(self, name: str) -> Path:
        return self.root / "scenario" / f"{name}.yaml"

    def scenario(self, name: str, referrer: Path, uid: str) -> _Scenario:
        if name not in self._scenarios:
            path = self.scenario_path(name)
            if not path.resolve().is_relative_to((self.root / "scenario").resolve()):
                raise TaskFileError(referrer, f"scenario {name!r} is not a file inside {self.root / 'scenario'}", uid, "scenario")
            if not path.is_file():
                raise TaskFileError(referrer, f"scenario {name!r} not found: no {path}", uid, "scenario")
            scenario = _validated(_Scenario, path, read_data_file(path))
            for i, tool in enumerate(scenario.tools):
                for key in ("direct_response", "is_end_turn"):
                    if getattr(tool, key):
                        raise TaskFileError(path, f"tool {tool.name!r}: {key} is not supported by groundstate's bridge", field=f"tools[{i}].{key}")
            self._scenarios[name] = scenario
        return self._scenarios[name]

    @property
    def test_root(self) -> Path:
        return self.root / "test_case"

    def inside_tests(self, path: Path) -> Path | None:
        """`path` with every symlink resolved, if it lies inside test_case/ (itself resolved), else None."""
        resolved = path.resolve()
        return resolved if resolved.is_relative_to(self.test_root.resolve()) else None

    def test_files(self) -> list[Path]:
        """Every test file whose resolved path lies inside test_case/ (a symlink out of it is refused)."""
        files = sorted(self.test_root.rglob("*.py"))
        for f in files:
            if self.inside_tests(f) is None:
                raise TaskFileError(f, f"resolves outside {self.test_root}: test files must lie inside the dataset's test_case/ folder")
        return files

    def find_test_file(self, filename: str) -> Path | None:
        """ThinkingBox's lookup of `file.py`: test_case/file.py, then test_case/<prefix>/file.py, longest prefix first.

        `filename` may also be a path relative to test_case/ (`a/dup.py`). A name that
        is absolute, or resolves (symlinks followed) outside test_case/, raises ValueError before any file is
        read or even looked for, so the answer never tells whether a file outside exists.
        """
        base = self.test_root
        if Path(filename).is_absolute() or not filename.endswith(".py") or self.inside_tests(base / filename) is None:
            raise ValueError(f"{filename!r} is not a .py file inside {base}")
        candidates = [base / filename]
        parts = filename.split("_")
        candidates += [base / "_".join(parts[:k]) / filename for k in range(len(parts) - 1, 0, -1)]
        for p in candidates:
            if self.inside_tests(p) is not None and p.is_file():
                return p
        return None


def read_test_list(path: Path) -> list[tuple[str, str]]:
    """A test list: a YAML list of `file.py:test_name` selectors."""
    raw = read_data_file(path)
    if not isinstance(raw, list):
        raise TaskFileError(path, "a test list must be a YAML list of 'file.py:test_name' selectors")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, str) or item.count(":") != 1 or not all(item.split(":")):
            raise TaskFileError(path, f"entry {item!r} is not a 'file.py:test_name' selector", field=f"[{i}]")
        f, t = item.split(":")
        out.append((f, t))
    return out


def _system_prompt(dataset: TbDataset, scenario: _Scenario, bot_instructions: str | None) -> str:
    """ThinkingBox's agent prompt in one system message: the agent's instructions, then (its second system message)
    the scenario's and the test's bot instructions joined by a newline, as its `merge_bot_instructions` does."""
    bot = "\n".join(s for s in (scenario.bot_instructions, bot_instructions) if s is not None)
    return dataset.agent.system_instructions.rstrip() + (f"\n\n{bot}" if bot else "")


def framework_available() -> bool:
    """Whether ThinkingBox itself is importable (needed to run test cases whose checks are arbitrary Python)."""
    return importlib.util.find_spec("thinkingbox") is not None


def _limits(cfg: dict[str, Any], gold: int, path: Path, uid: str) -> Limits:
    """groundstate limits for a case: always room for its gold replay (one call per turn); ThinkingBox's per-user-message
    decode limit `max_agent_sim_turns` becomes a total of max_agent_sim_turns × (max_user_sim_turns + 1) turns."""
    turns, calls = max(30, gold + 2), max(40, 2 * gold)
    agent_turns = cfg.get("max_agent_sim_turns")
    if agent_turns is not None:
        user_turns = cfg.get("max_user_sim_turns", 10)
        if not isinstance(agent_turns, int) or not isinstance(user_turns, int) or agent_turns < 1 or user_turns < 0:
            raise TaskFileError(path, "turn limits must be non-negative integers", uid, "max_agent_sim_turns")
        turns = max(gold + 2, agent_turns * (user_turns + 1))
    return Limits(max_turns=turns, max_tool_calls=calls)


def _str_field(value: Any, path: Path, uid: str, name: str, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise TaskFileError(path, f"must be {'a non-empty' if required else 'a'} string", uid, name)
    return value


def _servers_side(merged: dict[str, dict[str, Any]], path: Path, uid: str) -> tuple[list[ToolCall], dict[str, list[dict[str, Any]]], list[str]]:
    """What the servers' init says of a case: the gold steps in server order, the data patch (tables named
    `server/table`), the yes/no reply rubrics."""
    gold: list[ToolCall] = []
    patch: dict[str, list[dict[str, Any]]] = {}
    rubrics: list[str] = []
    for server, sc in merged.items():
        steps = (sc.get("golden_test_case") or {}).get("tool_interactions") or []
        where = f"init.{server}.golden_test_case.tool_interactions"
        if not isinstance(steps, list):
            raise TaskFileError(path, "must be a list of {tool, parameters}", uid, where)
        for j, step in enumerate(steps):
            if not isinstance(step, dict) or not isinstance(step.get("tool"), str) or not isinstance(step.get("parameters") or {}, dict):
                raise TaskFileError(path, "each step needs a tool name and a parameters mapping", uid, f"{where}[{j}]")
            gold.append(ToolCall(tool=step["tool"], args=step.get("parameters") or {}))
        data_patch = sc.get("data_patch") or {}
        if not isinstance(data_patch, dict) or not all(isinstance(r, list) for r in data_patch.values()):
            raise TaskFileError(path, "data_patch must map table names to lists of rows", uid, f"init.{server}.data_patch")
        patch.update({f"{server}/{table}": rows for table, rows in data_patch.items()})
        yesno = sc.get("rubrics_yesno") or []
        if not isinstance(yesno, list) or not all(isinstance(r, str) for r in yesno):
            raise TaskFileError(path, "rubrics_yesno must be a list of strings", uid, f"init.{server}.rubrics_yesno")
        rubrics += yesno
    return gold, patch, rubrics


def hydrate(
    dataset: TbDataset, parsed: _ParsedFile, fn: _TestFunction, domains: dict[tuple[str, str], TbDomain], allow_python: bool
) -> tuple[Task, TbDomain] | None:
    """One test case as (Task, its TbDomain); None for a case tagged `skip` (here or in its scenario)."""
    path, cfg = parsed.path, fn.config
    uid = f"{path.name}:{fn.name}"
    scenario_name = _str_field(cfg.get("scenario"), path, uid, "scenario", required=True)
    scenario = dataset.scenario(scenario_name, path, uid)
    tags = cfg.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise TaskFileError(path, "tags must be a list of strings", uid, "tags")
    if any(t.lower() == "skip" for t in [*tags, *scenario.tags]):
        return None
    query = _str_field(cfg.get("query"), path, uid, "query", required=True)
    user_context = _str_field(cfg.get("user_context"), path, uid, "user_context")
    bot_instructions = _str_field(cfg.get("bot_instructions"), path, uid, "bot_instructions")
    if cfg.get("history") is not None or cfg.get("format_query"):
        key = "history" if cfg.get("history") is not None else "format_query"
        raise TaskFileError(path, f"{key!r} is not supported by groundstate's bridge", uid, key)
    init = cfg.get("init") or {}
    if not isinstance(init, dict) or not all(isinstance(v, dict) for v in init.values()):
        raise TaskFileError(path, "init must map server names to mappings", uid, "init")
    merged = merge_init({k: v or {} for k, v in scenario.world_state.items()}, init)
    if not merged:  # no server would start, no effects would come back: a free pass for every agent
        raise TaskFileError(
            path,
            f"neither scenario {scenario_name!r} (world_state) nor the test (init) names a server: the case has no final state to check",
            uid,
            "init",
        )

    gold, patch, rubrics = _servers_side(merged, path, uid)

    check, uses_yesno, why = classify_check(parsed, fn)
    if check == "python" and not allow_python:
        raise TaskFileError(
            path,
            f"its checks are arbitrary Python ({why}), which only the ThinkingBox framework can run: "
            "install `thinkingbox` in this environment, or leave the case out with a test list",
            uid,
        )
    fixtures = [a.arg for a in fn.node.args.args + fn.node.args.kwonlyargs if a.arg not in ("x", "judge")]
    if fixtures:
        raise TaskFileError(path, f"the test function takes ThinkingBox fixtures ({', '.join(fixtures)}), which the bridge does not provide", uid)
    tool_names = tuple(t.name for t in scenario.tools if not t.name.startswith(RESERVED_PREFIX))
    prompt = _system_prompt(dataset, scenario, bot_instructions)
    key = (scenario_name, prompt)
    if key not in domains:
        domains[key] = TbDomain(dataset.scenario_path(scenario_name), scenario_name, prompt, tool_names)
    domain = domains[key]
    try:
        task = Task(
            id=uid,
            domain=scenario_name,
            instruction=query,
            user=UserSpec(persona=user_context),
            patch=patch,
            gold=gold,
            rubrics=rubrics if uses_yesno else [],
            tags=tags,
            family=scenario_name,
            template=path.stem,
            limits=_limits(cfg, len(gold), path, uid),
        )
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        raise TaskFileError(path, err["msg"], uid, ".".join(str(x) for x in err["loc"])) from None
    overrides = {
        t.name: (t.override_description, t.override_arg_description or {})
        for t in scenario.tools
        if t.override_description is not None or t.override_arg_description
    }
    domain.cases[uid] = TbCase(
        uid, path, fn.name, scenario_name, merged, tool_names, overrides, check, _test_code(parsed, fn) if check == "python" else ""
    )
    return task, domain


def load_thinkingbox(
    dataset_dir: Path | str, test_list: Path | str | None = None, *, agent: str = DEFAULT_AGENT, allow_python: bool | None = None
) -> list[tuple[Task, TbDomain]]:
    """Hydrate a dataset's cases (all of them, or those of a test list, in its order) into (Task, TbDomain) pairs.

    Cases tagged `skip` are left out (a test list naming one is an error). Cases whose checks are arbitrary
    Python are refused unless the ThinkingBox framework is importable (`allow_python` overrides the probe).
    """
    dataset = TbDataset(dataset_dir, agent)
    allow = framework_available() if allow_python is None else allow_python
    domains: dict[tuple[str, str], TbDomain] = {}
    out: list[tuple[Task, TbDomain]] = []
    if test_list is None:
        first: dict[str, Path] = {}
        for f in dataset.test_files():
            parsed = parse_test_file(f)
            for fn in parsed.functions.values():
                pair = hydrate(dataset, parsed, fn, domains, allow)
                if pair is None:
                    continue
                if pair[0].id in first:
                    raise TaskFileError(f, f"duplicate test case id (also defined in {first[pair[0].id]})", pair[0].id)
                first[pair[0].id] = f
                out.append(pair)
    else:
        list_path = Path(test_list)
        seen: dict[str, tuple[Path, str]] = {}  # id -> (file, entry): an id names one case, from one file
        for i, (filename, test) in enumerate(read_test_list(list_path)):
            try:
                f = dataset.find_test_file(filename)
            except ValueError as e:
                raise TaskFileError(list_path, f"entry {filename}:{test}: {e}", field=f"[{i}]") from None
            if f is None:
                raise TaskFileError(list_path, f"no test file {filename!r} under {dataset.root / 'test_case'}", field=f"[{i}]")
            parsed = parse_test_file(f)
            fn = parsed.functions.get(test)
            if fn is None:
                raise TaskFileError(list_path, f"{f} has no test case {test!r}", field=f"[{i}]")
            pair = hydrate(dataset, parsed, fn, domains, allow)
            if pair is None:
                raise TaskFileError(list_path, f"test case {filename}:{test} is tagged skip", field=f"[{i}]")
            if pair[0].id in seen and seen[pair[0].id][0] != parsed.path:
                raise TaskFileError(
                    list_path,
                    f"entry {filename}:{test} and entry {seen[pair[0].id][1]} are two cases with the same "
                    f"id {pair[0].id} ({parsed.path} and {seen[pair[0].id][0]}): rename one of the files",
                    field=f"[{i}]",
                )
            if pair[0].id not in seen:
                seen[pair[0].id] = (parsed.path, f"{filename}:{test}")
                out.append(pair)
    source = {
        "dataset": str(dataset.root),
        "test_list": str(Path(test_list).resolve()) if test_list is not None else None,
        "agent": agent,
        "allow_python": allow_python,
    }
    for d in domains.values():
        d.source = source
    return out
