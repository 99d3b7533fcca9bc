"""SQL domains: a folder that *is* a backend world, loaded and validated, and the tasks that run in it.

A domain folder holds `domain.yaml`, `schema.sql`, `seed.py`, `tools.py`, `policy.md` and `tasks/*.yaml`
(docs/DOMAINS.md is the contract). Loading validates everything an attempt will meet: unknown tools, tables
or columns, seed rows or patch values the backends would store differently, and task checks that are not one
read-only query both SQLite and PostgreSQL read alike are load errors naming the file, the task and the field.
A `Domain` implements `groundstate.types.Domain`: each attempt opens its own `SqlEnvironment`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import hashlib
import importlib.util
import json
import math
import os
import random
import sqlite3
import sys
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import Field

from groundstate.state.base import Backend
from groundstate.state.sqlite import check_authorizer
from groundstate.tasks import Task, TaskFileError, _pydantic_error, _Strict, read_data_file
from groundstate.tools import ToolError, Toolset
from groundstate.types import Blame, EpisodeLimits, Equivalences, Trajectory
from groundstate.worlds.environment import SqlEnvironment

DOMAINS_DIR = Path(__file__).parents[1] / "domains"


class DomainConfig(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    description: str = ""
    split: Literal["pool", "bench"] = "pool"
    today: dt.date = dt.date(2026, 1, 1)
    seed: int = 0
    volatile: dict[str, list[str]] = Field(default_factory=dict)  # masked before comparison (timestamps)
    free_text: dict[str, list[str]] = Field(default_factory=dict)  # compared by presence, not wording
    json_columns: dict[str, list[str]] = Field(default_factory=dict)  # canonicalised as JSON
    # argument values the tools read alike (parameter -> variations): the false-negative audit requires them to pass
    equivalent_args: dict[str, list[Literal["upper", "padded"]]] = Field(default_factory=dict)


def _read_domain_file(path: Path) -> str:
    """The text of a required domain file; `TaskFileError` naming it when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskFileError(path, "is missing: a domain folder needs domain.yaml, schema.sql, seed.py and tools.py") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TaskFileError(path, f"cannot be read: {e}") from None


def _import_file(path: Path, name: str) -> Any:
    """Import a domain's Python file; `TaskFileError` naming it when it is missing, does not compile or fails to run."""
    _read_domain_file(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskFileError(path, "cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(name, None)
        raise TaskFileError(path, f"does not compile: {e.msg} (line {e.lineno})") from None
    except (Exception, SystemExit) as e:  # the file's own code failed: a broken domain, not a crash of the command
        sys.modules.pop(name, None)
        raise TaskFileError(path, f"fails when imported: {type(e).__name__}: {e}") from None
    return module


class Domain:
    """A backend world: schema, deterministic seed, toolset, policy and its tasks (see the module docstring)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        cfg_path = self.path / "domain.yaml"
        raw = read_data_file(cfg_path)
        if not isinstance(raw, dict):
            raise TaskFileError(cfg_path, "must be a mapping")
        try:
            self.config = DomainConfig.model_validate(raw)
        except pydantic.ValidationError as e:
            raise _pydantic_error(cfg_path, e, None) from None
        self.name = self.config.name
        self.schema_sql = _read_domain_file(self.path / "schema.sql")
        self.policy = _read_domain_file(self.path / "policy.md") if (self.path / "policy.md").exists() else ""
        tools_path = self.path / "tools.py"
        try:
            self.tools = Toolset.from_module(_import_file(tools_path, f"groundstate_domain_{self.name}_tools"))
        except TaskFileError:  # missing, does not compile, fails when imported: it names the file already
            raise
        except ValueError as e:  # a function that cannot be a tool (async, *args, no docstring, ...)
            raise TaskFileError(tools_path, str(e)) from None
        if not self.tools.names():
            raise TaskFileError(tools_path, "defines no tools (functions marked with @tool)")
        self._seed_module = _import_file(self.path / "seed.py", f"groundstate_domain_{self.name}_seed")
        self.columns, self.primary_keys = _introspect_schema(self.schema_sql, self.path / "schema.sql")
        self.references = _references(self.schema_sql, self.primary_keys)
        self.column_types = {  # declared type of every column, upper case ("INTEGER", "REAL", "TEXT", ...)
            t: {r[1]: (r[2] or "").upper() for r in _schema_connection(self.schema_sql).execute(f"PRAGMA table_info({t})")} for t in self.columns
        }
        for kind in ("volatile", "free_text", "json_columns"):
            for table, cols in getattr(self.config, kind).items():
                for c in cols:
                    if table not in self.columns or c not in self.columns[table]:
                        raise TaskFileError(cfg_path, f"unknown column {table}.{c}", field=f"{kind}.{table}")
        params = {p for spec in self.tools.specs.values() for p in spec.params}
        for p in self.config.equivalent_args:
            if p not in params:
                raise TaskFileError(cfg_path, f"no tool has a parameter {p!r}", field=f"equivalent_args.{p}")
        self.equivalences = Equivalences(
            {t: frozenset(c) for t, c in self.config.free_text.items()}, {p: tuple(v) for p, v in self.config.equivalent_args.items()}
        )
        self.seed_rows()  # a seed that fails or yields rows the schema cannot hold is a load error, before any attempt
        self._tasks: list[Task] | None = None

    @functools.cached_property
    def content_hash(self) -> str:
        """Changes whenever domain.yaml, the schema, the tools or the seed's rows change: keys cached templates, golden
        states, task fingerprints and certificates.

        The seed counts by what it produces (`seed_rows()`, tables, rows and columns in order), not by seed.py's text:
        a seed rewritten to give the same rows leaves every task the same version.
        """
        h = hashlib.sha256()
        for f in ("domain.yaml", "schema.sql", "tools.py"):
            h.update((self.path / f).read_bytes())
        h.update(json.dumps(self.seed_rows(), ensure_ascii=False, allow_nan=False).encode())
        return h.hexdigest()[:16]

    def seed_rows(self, scale: float = 1.0) -> dict[str, list[dict[str, Any]]]:
        """The deterministic seed: the same rows on every call and every machine.

        Raises `TaskFileError` naming seed.py when `generate` fails or yields rows the schema cannot hold.
        """
        if scale == 1.0:
            return self._seed_cached
        return self._generate_seed(scale)

    @functools.cached_property
    def _seed_cached(self) -> dict[str, list[dict[str, Any]]]:
        return self._generate_seed(1.0)

    def _generate_seed(self, scale: float) -> dict[str, list[dict[str, Any]]]:
        path = self.path / "seed.py"
        generate = getattr(self._seed_module, "generate", None)
        if not callable(generate):
            raise TaskFileError(path, "defines no generate(rng, scale) function")
        try:
            rows = generate(random.Random(self.config.seed), scale=scale)
        except Exception as e:  # the domain's own code failed: name the file, not a traceback
            raise TaskFileError(path, f"generate() failed: {type(e).__name__}: {e}") from None
        problem = self._seed_problem(rows)
        if problem:
            raise TaskFileError(path, f"generate() {problem}")
        return rows

    def _seed_problem(self, rows: Any) -> str | None:
        """Why seed rows cannot be loaded alike on every backend, or None (the rules of a task's patch)."""
        if not isinstance(rows, dict):
            return f"must return a mapping of table name to rows, got {type(rows).__name__}"
        for table, table_rows in rows.items():
            if table not in self.columns:
                return f"yields rows for unknown table {table!r}"
            if not isinstance(table_rows, list) or not all(isinstance(r, dict) for r in table_rows):
                return f"must yield a list of rows (mappings) for table {table}"
            first = set(table_rows[0]) if table_rows else set()
            for j, row in enumerate(table_rows):
                for col, value in row.items():
                    if col not in self.columns[table]:
                        return f"yields unknown column {table}.{col} (row {j})"
                    value_problem = _patch_value_problem(self.column_types[table][col], value)
                    if value_problem:
                        return f"yields a bad value in {table}.{col} (row {j}): {value_problem}"
                if set(row) != first:  # rows are inserted with the first row's columns
                    return f"yields rows of table {table} with different columns (row {j} has {sorted(row)}, row 0 {sorted(first)})"
        return None

    @property
    def tables(self) -> list[str]:
        return list(self.columns)

    def system_prompt(self) -> str:
        return self.policy

    # -- the Domain interface (groundstate.types.Domain) ---------------------------------------
    def ref(self) -> str:
        """Its name when it is the bundled domain of that name (each machine has its own install), else the absolute
        path of its folder (which must exist wherever the reference is resolved)."""
        if self.name in bundled_domains() and load_domain(self.name).path.resolve() == self.path.resolve():
            return self.name
        return str(self.path.resolve())

    def prepare(self, backend: Backend) -> None:
        """Build the domain's base on `backend` (a schema or seed the server rejects is a `TaskFileError` naming the file)."""
        backend.prepare(self)

    async def open_environment(self, task: Task, backend: Backend, limits: EpisodeLimits = EpisodeLimits()) -> SqlEnvironment:
        """A private sandbox of the task's start state on `backend`, for one attempt."""
        return await SqlEnvironment.open(task, self, backend, limits)

    async def blame(self, task: Task, backend: Backend, trajectory: Trajectory, limits: EpisodeLimits = EpisodeLimits()) -> Blame:
        """`groundstate.grading.blame.blame` of the attempt's executed calls, on a fresh sandbox of the task's start state, under
        the grading bound (in a worker thread where the backend blocks on the network)."""
        from groundstate.deadlines import bounded
        from groundstate.grading.blame import blame
        from groundstate.grading.grader import grader_for

        def run() -> Blame:
            return blame(task, backend.prepare(self, task.patch), grader_for(backend), trajectory.tool_calls)

        if backend.name == "sqlite":
            return run()
        return await bounded(asyncio.to_thread(run), limits.grade_timeout, f"the blame replay of {task.id}")

    # -- tasks ---------------------------------------------------------------------------------
    @property
    def tasks(self) -> list[Task]:
        if self._tasks is None:
            tasks: list[Task] = []
            seen: dict[str, Path] = {}
            folder = self.path / "tasks"
            files = sorted(f for f in folder.iterdir() if f.suffix in (".yaml", ".yml", ".json")) if folder.is_dir() else []
            for f in files:
                for t in self.load_task_file(f):
                    if t.id in seen:
                        raise TaskFileError(f, f"duplicate task id (first defined in {seen[t.id]})", t.id, "id")
                    seen[t.id] = f
                    tasks.append(t)
            self._tasks = tasks
        return self._tasks

    def load_task_file(self, path: Path) -> list[Task]:
        """Load and validate one YAML or JSON file holding `tasks: [...]` (or a bare list)."""
        path = Path(path)
        raw = read_data_file(path)
        if isinstance(raw, dict) and "tasks" in raw:
            raw = raw["tasks"]
        if not isinstance(raw, list):
            raise TaskFileError(path, "must hold a list of tasks (or a mapping with a 'tasks' list)", field="tasks")
        return [self.validate_task(path, i, item) for i, item in enumerate(raw)]

    def validate_task(self, path: Path, index: int, item: Any) -> Task:
        if not isinstance(item, dict):
            raise TaskFileError(path, f"task #{index} must be a mapping", field=f"tasks[{index}]")
        task_id = str(item.get("id", f"#{index}"))
        item = {"domain": self.name, "split": self.config.split, **item}
        try:
            task = Task.model_validate(item)
        except pydantic.ValidationError as e:
            raise _pydantic_error(path, e, task_id) from None
        if task.domain != self.name:
            raise TaskFileError(path, f"belongs to domain {task.domain!r}, found in {self.name!r}", task_id, "domain")
        n_rows = sum(len(rows) for rows in task.patch.values())
        if n_rows > MAX_PATCH_ROWS:
            raise TaskFileError(path, f"the patch has {n_rows:,} rows; the limit is {MAX_PATCH_ROWS:,}", task_id, "patch")
        self._check_patch(path, task_id, task)
        self._check_gold(path, task_id, task)
        for j, check in enumerate(task.checks):
            self._check_check(path, task_id, j, check.sql)
        return task

    def _check_patch(self, path: Path, task_id: str, task: Task) -> None:
        """Every patch row names known columns with storable values and carries its primary key."""
        for table, rows in task.patch.items():
            if table not in self.columns:
                raise TaskFileError(path, f"unknown table {table!r}", task_id, f"patch.{table}")
            for j, row in enumerate(rows):
                for col in row:
                    if col not in self.columns[table]:
                        raise TaskFileError(path, f"unknown column {table}.{col}", task_id, f"patch.{table}[{j}].{col}")
                    problem = _patch_value_problem(self.column_types[table][col], row[col])
                    if problem:
                        raise TaskFileError(path, f"{table}.{col}: {problem}", task_id, f"patch.{table}[{j}].{col}")
                missing = [k for k in self.primary_keys[table] if k not in row]
                if missing:
                    raise TaskFileError(path, f"patch row lacks primary key {missing}", task_id, f"patch.{table}[{j}]")

    def _check_gold(self, path: Path, task_id: str, task: Task) -> None:
        """Every gold call names a tool of the domain with arguments it accepts."""
        for j, call in enumerate(task.gold):
            if call.tool not in self.tools:
                raise TaskFileError(path, f"unknown tool {call.tool!r}", task_id, f"gold[{j}].tool")
            try:
                self.tools[call.tool].validate(call.args)
            except ToolError as e:
                raise TaskFileError(path, str(e), task_id, f"gold[{j}].args") from None

    def _check_check(self, path: Path, task_id: str, j: int, sql: str) -> None:
        """A check is one read-only query that compiles against the schema and reads the same on SQLite and PostgreSQL."""
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
            raise TaskFileError(path, "a check must be a read-only query (SELECT or WITH)", task_id, f"checks[{j}].sql")
        try:
            _schema_connection(self.schema_sql).execute("EXPLAIN " + sql)
        except sqlite3.Error as e:
            raise TaskFileError(
                path,
                f"check query does not compile against the schema as one read-only query (no writes, "
                f"settings, schema changes, attachments or extensions): {e}",
                task_id,
                f"checks[{j}].sql",
            ) from None
        nested = _comment_nested_at(sql)
        if nested is not None:
            raise TaskFileError(
                path,
                f"a block comment holds another '/*' (character {nested}): SQLite ends the comment at the "
                f"first '*/' and PostgreSQL does not, so the two would not run the same query",
                task_id,
                f"checks[{j}].sql",
            )
        prefixed = _prefixed_literal_at(sql)
        if prefixed is not None:
            raise TaskFileError(
                path,
                f"a prefixed string literal (character {prefixed}): E'…', X'…', B'…', N'…' and U&'…' "
                f"read differently in SQLite and PostgreSQL (a backslash escapes a quote only in "
                f"PostgreSQL's E'…'); separate the name from the string",
                task_id,
                f"checks[{j}].sql",
            )
        quoted = _sqlite_only_quote_at(sql)
        if quoted is not None:
            raise TaskFileError(
                path,
                f"a name quoted with a backtick or a bracket (character {quoted}): only SQLite reads "
                f'them as quotes (PostgreSQL: an operator, a subscript); quote names with "…"',
                task_id,
                f"checks[{j}].sql",
            )

    def task(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(f"no task {task_id!r} in domain {self.name!r}")


MAX_PATCH_ROWS = 5_000  # rows one task's patch may upsert (the bundled tasks use at most 17)
_INT32 = (-(2**31), 2**31 - 1)  # a portable INTEGER column is PostgreSQL's 4-byte integer


def _patch_value_problem(declared: str, value: Any) -> str | None:
    """Why `value` cannot be stored alike in a column of this declared type on every backend, or None.

    SQLite stores almost anything anywhere (type affinity) where PostgreSQL refuses: a patch that only
    one backend accepts would make the same task a system error on the other, so it is a load error.
    """
    if value is None:
        return None
    if isinstance(value, (dict, list)) or not isinstance(value, (str, int, float)):
        return f"a patch value must be a single text, number or null, got {type(value).__name__}"
    if declared == "INTEGER" and (isinstance(value, bool) or not isinstance(value, int)):
        return f"expected an integer, got {value!r:.60}"
    if declared == "INTEGER" and not _INT32[0] <= value <= _INT32[1]:
        return f"{value} does not fit a 4-byte INTEGER (PostgreSQL's INTEGER)"
    if declared == "REAL" and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
        return f"expected a finite number, got {value!r:.60}"
    if declared == "TEXT" and not isinstance(value, str):
        return f"expected text, got {value!r:.60}"
    if isinstance(value, str):
        if "\x00" in value:
            return "text may not contain NUL characters (PostgreSQL refuses them)"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "text is not valid Unicode (lone surrogate)"
    return None


def _comment_nested_at(sql: str) -> int | None:
    """Where a `/*` opens inside a block comment as SQLite reads it, or None.

    SQLite ends a block comment at the first `*/`, PostgreSQL nests them: what follows is comment to one and SQL to
    the other. SQLite's own tokenizer tells the state before each `/*`: inside a block comment, `*/;` completes
    the text and `;` alone does not (inside a string, an identifier or a line comment, neither does)."""
    at = sql.find("/*")
    while at != -1:
        head = sql[:at]
        if not sqlite3.complete_statement(head + ";") and sqlite3.complete_statement(head + "*/;"):
            return at
        at = sql.find("/*", at + 1)
    return None


def _prefixed_literal_at(sql: str) -> int | None:
    """Where a string literal, as SQLite reads it, opens right after a name (`e'…'`, `x'…'`, `u&'…'`), or None.

    PostgreSQL reads such a prefix as part of the literal (an escape string, bit string, national or Unicode
    string), SQLite as a separate name or a blob: the two would not run the same query. The state before each `'`
    comes from SQLite's own tokenizer, as in `_comment_nested_at`."""
    at = sql.find("'")
    while at != -1:
        head = sql[:at]
        before = head[-1:]
        prefix = before.isalnum() or before in ("_", "$") or (before == "&" and head[-2:-1].isalpha())
        if prefix and sqlite3.complete_statement(head + ";"):
            return at
        at = sql.find("'", at + 1)
    return None


def _sqlite_only_quote_at(sql: str) -> int | None:
    """Where a backtick or `[` opens a quoted name as SQLite reads it (outside strings, names and comments), or None."""
    for at, c in enumerate(sql):
        if c in "`[" and sqlite3.complete_statement(sql[:at] + ";"):
            return at
    return None


@functools.lru_cache(maxsize=32)
def _schema_connection(schema_sql: str) -> sqlite3.Connection:
    """An empty database with the domain's schema, for introspection and for compiling task checks.

    It carries the task checks' authorizer, so a check that would write rows (a DML CTE too), attach files, set
    pragmas, change the schema or load an extension does not even compile: it is a load error, not a
    grading-time surprise.
    """
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.executescript(schema_sql)
    conn.set_authorizer(check_authorizer)
    return conn


def _introspect_schema(schema_sql: str, path: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    try:
        conn = _schema_connection(schema_sql)
    except sqlite3.Error as e:
        raise TaskFileError(path, f"schema does not load: {e}") from None
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
    columns, pks = {}, {}
    for t in tables:
        info = conn.execute(f"PRAGMA table_info({t})").fetchall()
        columns[t] = [r[1] for r in info]
        pks[t] = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
        if not pks[t]:
            raise TaskFileError(path, f"table {t} has no primary key (the grader keys rows by it)")
    return columns, pks


def _references(schema_sql: str, primary_keys: dict[str, list[str]]) -> dict[str, list[tuple[str, str]]]:
    """Table -> the (table, column) pairs whose foreign key refers to its single-column primary key."""
    conn = _schema_connection(schema_sql)
    out: dict[str, list[tuple[str, str]]] = {}
    for child in primary_keys:
        fks = conn.execute(f"PRAGMA foreign_key_list({child})").fetchall()  # (id, seq, table, from, to, ...)
        for fk_id in sorted({r[0] for r in fks}):
            parts = [r for r in fks if r[0] == fk_id]
            parent, to = parts[0][2], parts[0][4]
            if len(parts) == 1 and parent in primary_keys and primary_keys[parent] == [to or primary_keys[parent][0]]:
                out.setdefault(parent, []).append((child, parts[0][3]))
    return out


def load_domain(name_or_path: str) -> Domain:
    """A bundled domain by name, or any domain folder by path: loaded once, and again after any of its files changed
    (a long-lived process, a notebook or `regrade` after a task fix, never sees a stale definition)."""
    p = Path(name_or_path)
    if not (p / "domain.yaml").exists():
        p = DOMAINS_DIR / name_or_path
    if not (p / "domain.yaml").exists():
        known = ", ".join(bundled_domains())
        if os.sep in name_or_path or Path(name_or_path).exists():
            raise KeyError(f"{name_or_path} is not a domain folder (it holds no domain.yaml); bundled domains: {known}")
        raise KeyError(f"unknown domain {name_or_path!r}; bundled: {known}")
    return _load_domain(str(p), _files_stamp(p))


def _files_stamp(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """Every file of a domain folder with its size and modification time (bytecode caches aside)."""
    out = []
    for f in sorted(folder.rglob("*")):
        if "__pycache__" in f.parts or not f.is_file():
            continue
        st = f.stat()
        out.append((str(f.relative_to(folder)), st.st_size, st.st_mtime_ns))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _load_domain(path: str, stamp: tuple[tuple[str, int, int], ...]) -> Domain:
    return Domain(Path(path))


def bundled_domains() -> list[str]:
    return sorted(p.name for p in DOMAINS_DIR.iterdir() if (p / "domain.yaml").exists())


def iter_tasks(domains: list[str] | None = None, split: str | None = None) -> list[tuple[Task, Domain]]:
    """(task, domain) pairs of the given domains (default: every bundled one), optionally of one split."""
    out = []
    for name in domains or bundled_domains():
        d = load_domain(name)
        out += [(t, d) for t in d.tasks if split is None or t.split == split]
    return out


def render_generated_tasks(domain: Domain) -> tuple[Path, str]:
    """Run the domain's seeded task generator (`taskgen.generate(world, today, rng)`) and render its YAML file.

    The output depends only on the domain's files, so regenerating reproduces the checked-in file byte for byte.
    """
    gen = domain.path / "taskgen.py"
    if not gen.exists():
        raise TaskFileError(gen, "this domain has no task generator")
    module = _import_file(gen, f"groundstate_domain_{domain.name}_taskgen")
    tasks = module.generate(domain.seed_rows(), domain.config.today, random.Random(domain.config.seed))
    header = (
        f"# Generated by `groundstate tasks generate --domain {domain.name}` from taskgen.py; do not edit by hand:\n"
        "# change the generator and regenerate (a test checks that this file is reproduced exactly).\n"
    )
    body = yaml.safe_dump({"tasks": tasks}, sort_keys=False, allow_unicode=True, width=100)
    return domain.path / "tasks" / f"{domain.name}.yaml", header + body
