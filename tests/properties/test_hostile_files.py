"""Hostile task and configuration files: every one is a clear error naming the file (and the field), and
nothing runs outside the task's sandbox.

Covers YAML bombs (alias expansion, self-reference, deep nesting, oversized files), python-object tags,
unknown keys and wrong types, data patches aimed at other tables or at the SQL itself, patch values
only one backend would accept, absurd patch sizes, DDL in checks, and malformed `domain.yaml`,
selector / pool lists, price tables and `train.yaml` selections.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.audits.overlap import read_id_list
from groundstate.cli import app
from groundstate.state.base import apply_patch
from groundstate.state.sqlite import SqliteBackend
from groundstate.stats.cost import load_prices
from groundstate.tasks import MAX_FILE_BYTES, MAX_NESTING, TaskFileError
from groundstate.worlds.domain import MAX_PATCH_ROWS, Domain, load_domain
from groundstate.worlds.selectors import select_tasks

FIXTURES = Path(__file__).parents[1] / "fixtures"

BILLION_LAUGHS = (
    "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
    + "tasks: [*i]\n"
)  # 10**9 strings once expanded
BOMB_IN_ARGS = BILLION_LAUGHS.replace(  # a well-formed task whose gold arguments and patch would expand to 10**9 values
    "tasks: [*i]", "tasks: [{id: t, instruction: x, gold: [{tool: find_member, args: {email: *i}}], patch: {kiosk_notes: *i}}]"
)
SELF_REFERENCE = "tasks: &t [*t]\n"
DEEP = "tasks: " + "[" * 5000 + "]" * 5000 + "\n"
PYTHON_TAGS = [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!!python/object/apply:subprocess.check_call [[touch, '{marker}']]",
    "!!python/object/new:subprocess.Popen [[touch, '{marker}']]",
    "!!python/name:os.system",
    "!!python/module:os",
]


@pytest.fixture
def shop_copy(tmp_path: Path) -> Path:
    """A private copy of the shop fixture domain, free to break."""
    dst = tmp_path / "shop"
    shutil.copytree(FIXTURES / "shop", dst)
    return dst


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _base_digest(domain: Domain) -> str:
    """Digest of the domain's seeded base database (what every template is built from)."""
    return hashlib.sha256(SqliteBackend().prepare(domain, {}).handle).hexdigest()


# -- YAML bombs and tags -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        (BILLION_LAUGHS, "expands to more than"),
        (BOMB_IN_ARGS, "expands to more than"),
        (SELF_REFERENCE, "contains it"),
        (DEEP, f"deeper than {MAX_NESTING}"),
    ],
)
def test_yaml_bombs_are_refused_before_expansion(tmp_path, text, message):
    domain = load_domain("kiosk")
    path = _write(tmp_path / "bomb.yaml", text)
    with pytest.raises(TaskFileError, match=message) as e:
        domain.load_task_file(path)
    assert e.value.path == str(path)


def test_deeply_nested_json_is_a_file_error(tmp_path):
    path = _write(tmp_path / "deep.json", '{"tasks": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(TaskFileError, match="nested too deeply") as e:
        load_domain("kiosk").load_task_file(path)
    assert e.value.path == str(path)


def test_oversized_files_are_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: no disk used, and it is never read
    with pytest.raises(TaskFileError, match="the limit is"):
        load_domain("kiosk").load_task_file(path)


def test_legitimate_anchors_still_load(tmp_path):
    """Anchors and aliases are YAML; only their blow-up is refused."""
    text = """\
common: &gold [{tool: find_member, args: {email: nobody@example.com}}]
tasks:
  - {id: t-1, instruction: Find me., gold: *gold}
  - {id: t-2, instruction: Find me again., gold: *gold}
"""
    tasks = load_domain("kiosk").load_task_file(_write(tmp_path / "anchors.yaml", text.replace("common:", "x-common:")))
    assert [t.id for t in tasks] == ["t-1", "t-2"]


@pytest.mark.parametrize("tag", PYTHON_TAGS)
def test_python_tags_never_execute(tmp_path, tag):
    marker = tmp_path / "executed"
    bad = tag.format(marker=marker)
    files = {
        "task file": (_write(tmp_path / "tasks.yaml", f"tasks:\n  - {bad}\n"), lambda p: load_domain("kiosk").load_task_file(p)),
        "selector list": (_write(tmp_path / "ids.yaml", f"- {bad}\n"), lambda p: select_tasks(str(p))),
        "pool list": (_write(tmp_path / "pool.yaml", f"tasks: {bad}\n"), read_id_list),
        "prices": (_write(tmp_path / "prices.yaml", f"gpt-x: {bad}\n"), load_prices),
    }
    for what, (path, load) in files.items():
        with pytest.raises(TaskFileError, match="not valid YAML") as e:
            load(path)
        assert e.value.path == str(path), what
        assert not marker.exists(), f"{what}: a python tag ran"


def test_python_tag_in_domain_yaml_never_executes(shop_copy, tmp_path):
    marker = tmp_path / "executed"
    _write(shop_copy / "domain.yaml", f"name: shop\nseed: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(TaskFileError, match="domain.yaml: not valid YAML"):
        Domain(shop_copy)
    assert not marker.exists()


# -- tasks: unknown keys, wrong types ------------------------------------------------------------------


@pytest.mark.parametrize(
    "task, field",
    [
        ({"id": "t", "instruction": "x", "gold": [], "reward_hack": True}, "reward_hack"),
        ({"id": "t", "instruction": "x", "gold": "cancel everything"}, "gold"),
        ({"id": "t", "instruction": ["x"], "gold": []}, "instruction"),
        ({"id": "t", "instruction": "", "gold": []}, "instruction"),
        ({"id": "t; DROP TABLE orders", "instruction": "x", "gold": []}, "id"),
        ({"id": "t", "instruction": "x", "gold": [{"tool": "cancel_order", "args": {"order_id": 1}, "sudo": 1}]}, "gold[0].sudo"),
        ({"id": "t", "instruction": "x", "gold": [{"tool": "os.system", "args": {}}]}, "gold[0].tool"),
        ({"id": "t", "instruction": "x", "gold": [{"tool": "cancel_order", "args": {"order_id": "\x00"}}]}, "gold[0].args"),
        ({"id": "t", "instruction": "x", "gold": [], "limits": {"max_turns": -1}}, "limits.max_turns"),
        ({"id": "t", "instruction": "x", "gold": [], "limits": {"max_turns": 10**30}}, None),
        ({"id": "t", "instruction": "x", "gold": [], "split": "train"}, "split"),
        ({"id": "t", "instruction": "x", "gold": [], "domain": "kiosk"}, "domain"),
        ({"id": "t", "instruction": "x", "gold": [], "user": {"script": "hello"}}, "user.script"),
        ({"id": "t", "instruction": "x", "gold": [], "checks": [{"sql": "SELECT 1"}]}, "checks[0].expect"),
    ],
    ids=lambda v: str(v)[:40],
)
def test_malformed_tasks_name_file_task_and_field(shop, tmp_path, task, field):
    path = _write(tmp_path / "t.json", json.dumps({"tasks": [task]}))
    if field is None:  # absurd but harmless numbers load: a limit is a ceiling, not an allocation
        assert shop.load_task_file(path)[0].limits.max_turns == 10**30
        return
    with pytest.raises(TaskFileError) as e:
        shop.load_task_file(path)
    assert e.value.path == str(path) and e.value.field == field, str(e.value)
    assert str(path) in str(e.value) and field in str(e.value)


@pytest.mark.parametrize("raw", ["42", "just text", "[1, 2]", "{tasks: 7}", "null", ""])
def test_task_files_of_the_wrong_shape(shop, tmp_path, raw):
    path = _write(tmp_path / "t.yaml", raw)
    with pytest.raises(TaskFileError) as e:
        shop.load_task_file(path)
    assert e.value.path == str(path)


# -- data patches aimed at other tables or at the SQL itself --------------------------------------------

ROW = {"id": 1, "customer_id": 1, "status": "pending", "total": 1.0}


@pytest.mark.parametrize(
    "patch, field, message",
    [
        ({"sqlite_master": [{"type": "table"}]}, "patch.sqlite_master", "unknown table"),
        ({"_gs_log": [{"tbl": "orders", "pk": "[1]"}]}, "patch._gs_log", "unknown table"),
        ({"pg_catalog.pg_authid": [{"rolname": "x"}]}, "patch.pg_catalog.pg_authid", "unknown table"),
        ({"orders; DROP TABLE customers": [ROW]}, "patch.orders; DROP TABLE customers", "unknown table"),
        ({"kiosk_members": [{"id": 1}]}, "patch.kiosk_members", "unknown table"),  # another domain's table
        ({"orders": [{**ROW, 'status" = 1; DROP TABLE customers; --': "x"}]}, None, "unknown column"),
        ({"orders": [{**ROW, "status'": "x"}]}, "patch.orders[0].status'", "unknown column"),
        ({"orders": [{"status": "pending"}]}, "patch.orders[0]", "primary key"),
        ({"orders": [{**ROW, "status": {"$ne": None}}]}, "patch.orders[0].status", "single text, number or null"),
        ({"orders": [{**ROW, "status": ["a", "b"]}]}, "patch.orders[0].status", "single text, number or null"),
        ({"orders": [{**ROW, "id": 2**40}]}, "patch.orders[0].id", "4-byte INTEGER"),
        ({"orders": [{**ROW, "id": True}]}, "patch.orders[0].id", "expected an integer"),
        ({"orders": [{**ROW, "id": "1; DROP TABLE orders"}]}, "patch.orders[0].id", "expected an integer"),
        ({"orders": [{**ROW, "total": float("nan")}]}, "patch.orders[0].total", "finite number"),
        ({"orders": [{**ROW, "status": 7}]}, "patch.orders[0].status", "expected text"),
        ({"orders": [{**ROW, "status": "a\x00b"}]}, "patch.orders[0].status", "NUL"),
        ({"orders": [{**ROW, "id": i} for i in range(MAX_PATCH_ROWS + 1)]}, "patch", "the limit is"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_hostile_patches_are_load_errors_and_touch_nothing(shop, tmp_path, patch, field, message):
    before = _base_digest(shop)
    task = {"id": "hostile", "instruction": "x", "gold": [], "patch": patch}
    path = _write(tmp_path / "t.json", json.dumps({"tasks": [task]}))
    with pytest.raises(TaskFileError, match=message) as e:
        shop.load_task_file(path)
    assert e.value.path == str(path) and e.value.task_id == "hostile"
    if field is not None:
        assert e.value.field == field
    assert _base_digest(shop) == before


@pytest.mark.parametrize(
    "table, row",
    [
        ("sqlite_master", {"name": "x"}),
        ("orders; DROP TABLE customers", ROW),
        ("orders", {**ROW, "status = 'x'; DROP TABLE customers; --": 1}),
    ],
)
def test_apply_patch_refuses_identifiers_even_without_validation(shop, backend, table, row):
    """Defence in depth: identifiers never reach SQL unchecked, even if a caller skipped task validation."""
    template = backend.prepare(shop, {})
    with backend.open(template) as sandbox:
        tables = sorted(shop.tables)
        with pytest.raises((KeyError, ValueError)):
            apply_patch(sandbox.connection, shop, {table: [row]})
        assert sandbox.connection.scalar("SELECT COUNT(*) AS n FROM customers") > 0
        assert len(sandbox.changes()) == 0
        assert sorted(shop.tables) == tables


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE orders",
        "DELETE FROM orders",
        "SELECT 1; DROP TABLE orders",
        "WITH gone AS (DELETE FROM orders RETURNING id) SELECT * FROM gone",
        "SELECT pg_read_file('/etc/passwd')",
        "SELECT * FROM orders; ATTACH DATABASE '/tmp/gs_pwned.db' AS p",
    ],
)
def test_checks_that_write_or_escape_are_load_errors(shop, tmp_path, sql):
    task = {"id": "c", "instruction": "x", "gold": [], "checks": [{"sql": sql, "expect": []}]}
    path = _write(tmp_path / "t.json", json.dumps({"tasks": [task]}))
    with pytest.raises(TaskFileError) as e:
        shop.load_task_file(path)
    assert e.value.field == "checks[0].sql"
    assert not Path("/tmp/gs_pwned.db").exists()


# -- domain.yaml ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, field",
    [
        ("name: shop\nplugins: [evil]\n", "plugins"),
        ("name: shop\nseed: many\n", "seed"),
        ("name: 'shop; DROP TABLE orders'\n", "name"),
        ("name: shop\ntoday: yesterday\n", "today"),
        ("name: shop\nvolatile: {orders: [secret_column]}\n", "volatile.orders"),
        ("name: shop\nvolatile: {sqlite_master: [sql]}\n", "volatile.sqlite_master"),
        ("name: shop\nsplit: everything\n", "split"),
        ("- name: shop\n", None),
        (BILLION_LAUGHS.replace("tasks:", "name:"), None),
    ],
)
def test_malformed_domain_yaml(shop_copy, text, field):
    path = _write(shop_copy / "domain.yaml", text)
    with pytest.raises(TaskFileError) as e:
        Domain(shop_copy)
    assert e.value.path == str(path) and e.value.field == field, str(e.value)


# -- selector and pool lists, train.yaml, prices -----------------------------------------------------------


@pytest.mark.parametrize("text", [BILLION_LAUGHS, SELF_REFERENCE, DEEP, "[1, 2, 3]", "tasks: {a: b}", "- [kiosk-001]"])
def test_malformed_task_lists(tmp_path, text):
    path = _write(tmp_path / "train.yaml", text)
    for load in (lambda p: select_tasks(str(p)), read_id_list):
        with pytest.raises(TaskFileError) as e:
            load(path)
        assert e.value.path == str(path)


def test_cli_reports_a_hostile_selection_file_and_runs_nothing(tmp_path):
    path = _write(tmp_path / "train.yaml", BILLION_LAUGHS)
    out = tmp_path / "run.jsonl"
    r = CliRunner().invoke(app, ["run", "--agent", "scripted:gold", "--tasks", str(path), "--out", str(out)])
    assert r.exit_code == 2 and "expands to more than" in r.output and "train.yaml" in r.output.replace("\n", "")
    assert not out.exists()


def test_train_reports_a_hostile_train_yaml_and_trains_nothing(tmp_path):
    path = _write(tmp_path / "train.yaml", f"- kiosk-001\n- !!python/object/apply:os.system ['touch {tmp_path / 'executed'}']\n")
    out = tmp_path / "train_out"
    r = CliRunner().invoke(app, ["train", "--model", str(tmp_path / "no-model"), "--train", str(path), "--out", str(out)])
    assert r.exit_code == 2 and "not valid YAML" in " ".join(r.output.split())
    assert not out.exists() and not (tmp_path / "executed").exists()


@pytest.mark.parametrize(
    "text, field, message",
    [
        ("gpt-x: 3\n", "gpt-x", "must map"),
        ("gpt-x: {input: -1}\n", "gpt-x.input", "from 0 to 1,000,000"),
        ("gpt-x: {input: .nan}\n", "gpt-x.input", "from 0 to 1,000,000"),
        ("gpt-x: {input: '1; DROP'}\n", "gpt-x.input", "from 0 to 1,000,000"),
        ("gpt-x: {input: 1e308}\n", "gpt-x.input", "from 0 to 1,000,000"),
        ("gpt-x: {inptu: 1}\n", "gpt-x.inptu", "unknown price"),
        ("[1, 2]\n", None, "must map"),
        (BILLION_LAUGHS, None, "expands to more than"),
    ],
)
def test_malformed_price_tables(tmp_path, text, field, message):
    path = _write(tmp_path / "prices.yaml", text)
    with pytest.raises(TaskFileError, match=message) as e:
        load_prices(path)
    assert e.value.path == str(path) and e.value.field == field


def test_price_override_still_extends_the_bundled_table(tmp_path):
    prices = load_prices(_write(tmp_path / "prices.yaml", "my-model: {input: 1, output: 2.5}\n"))
    assert prices["my-model"] == {"input": 1.0, "output": 2.5} and "gpt-4o" in prices


def test_unreadable_files_are_file_errors(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TaskFileError, match="cannot be read"):
        load_domain("kiosk").load_task_file(path)
    if os.geteuid() != 0:  # root reads anything
        locked = _write(tmp_path / "locked.yaml", "tasks: []")
        locked.chmod(0)
        with pytest.raises(TaskFileError, match="cannot be read"):
            load_domain("kiosk").load_task_file(locked)
