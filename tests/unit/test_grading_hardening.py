"""Hardening of grading, model output and domain files (issue #15 items 6, 7, 9; issue #20 item 7).

- a rubric task whose final state failed is a 0, with or without a judge, and the judge is not asked;
- whatever the model emits (lone surrogates in a tool name, arguments or reply) is the agent's doing:
  a tool-call error or a failed attempt, never a system error;
- a broken domain folder fails before any attempt, naming the file, and leaves no database behind;
- `async def` and `*args`/`**kwargs` tools are refused when the domain loads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from openai_stub import OpenAIStub, text, tool_call
from typer.testing import CliRunner

from groundstate.agents.scripted import make_scripted_agent
from groundstate.cli import app
from groundstate.grading.grader import grade, replay
from groundstate.pipeline.runner import RunConfig, run
from groundstate.records import read_records
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.domain import Domain, load_domain

FIXTURES = Path(__file__).parents[1] / "fixtures"
RUBRIC = "Does the reply confirm that order 1 was cancelled?"


def named_copy(tmp_path: Path, name: str) -> Path:
    """A private copy of the shop fixture domain under another name (its files may then be broken one at a time)."""
    folder = tmp_path / name
    shutil.copytree(FIXTURES / "shop", folder)
    cfg = folder / "domain.yaml"
    cfg.write_text(cfg.read_text().replace("name: shop", f"name: {name}"))
    return folder


def with_rubric_task(folder: Path) -> Path:
    """The shop's cancel task, with a reply rubric, as the folder's only task file."""
    (folder / "tasks" / "basic.yaml").write_text(
        yaml.safe_dump(
            {
                "tasks": [
                    {
                        "id": "shop-cancel-told",
                        "instruction": "Please cancel order 1.",
                        "patch": {"orders": [{"id": 1, "customer_id": 1, "status": "pending", "total": 10.0}]},
                        "gold": [{"tool": "cancel_order", "args": {"order_id": 1}}],
                        "rubrics": [RUBRIC],
                    }
                ]
            }
        )
    )
    return folder


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


# -- #15.6: a failed state check is a 0 whatever the rubrics say ------------------------------------------


class CountingJudge:
    """A judge that answers yes and counts how often it was asked."""

    def __init__(self):
        self.asked = 0

    def apply(self, task, trajectory, verdict):
        self.asked += 1
        verdict.reward = 1
        return verdict


def test_rubric_task_with_failed_state_is_zero_with_or_without_judge(backend, shop):
    task = shop.task("shop-cancel").model_copy(update={"rubrics": [RUBRIC]})
    for judge in (None, CountingJudge()):
        with backend.open(backend.prepare(shop, task.patch)) as sandbox:  # nothing done: the state check fails
            v = grade(task, sandbox, None, judge)
        assert (v.reward, v.state_reward, v.unjudged, v.system_error) == (0, 0, False, None)
        assert "not judged: the final state failed" in v.reasons[-1]
        assert judge is None or judge.asked == 0
    with backend.open(backend.prepare(shop, task.patch)) as sandbox:  # gold: the rubric decides, so without a judge it is unjudged
        replay(sandbox, [c.model_dump() for c in task.gold])
        v = grade(task, sandbox)
    assert (v.reward, v.state_reward, v.unjudged) == (None, 1, True)


def test_run_of_own_rubric_tasks_records_noop_as_failed_not_unjudged(tmp_path):
    folder = with_rubric_task(named_copy(tmp_path, "shop_rubric"))
    records = {}
    for agent in ("noop", "gold"):
        out = tmp_path / f"{agent}.jsonl"
        r = cli("run", "--agent", f"scripted:{agent}", "--tasks", str(folder), "--k", "2", "--out", str(out))
        assert r.exit_code == 0, r.output
        records[agent] = read_records(out)
    assert [(x.reward, x.unjudged, x.system_error) for x in records["noop"]] == [(0, False, None)] * 2
    assert [(x.reward, x.unjudged) for x in records["gold"]] == [(None, True)] * 2
    m = cli("metrics", str(tmp_path / "noop.jsonl"), "--json")
    assert m.exit_code == 0, m.output
    assert '"clean_attempts": 2' in m.stdout and '"unjudged": 0' in m.stdout


def test_thinkingbox_rubric_case_with_failed_hash_is_zero_and_judge_not_asked(tb):
    from tb_standin import tb_pairs, tb_play

    (_, _), (task, domain) = tb_pairs(tb)  # test_ticket: a ticket must be opened, and the reply judged
    assert task.rubrics
    for judge in (None, CountingJudge()):
        out = tb_play(task, domain, make_scripted_agent("scripted:noop", task, domain), judge=judge)
        v = out.verdict
        assert (v.reward, v.state_reward, v.unjudged, v.system_error) == (0, 0, False, None), v.reasons
        assert judge is None or judge.asked == 0


# -- #15.7: malformed model output is the agent's doing, never a system error ---------------------------

LONE = "\udc80"  # a lone surrogate: a model's JSON may carry it as the escape \\udc80


def test_lone_surrogates_from_the_model_are_tool_errors_or_text_never_system_errors(shop, tmp_path):
    """An OpenAI-compatible agent emits a lone surrogate in a tool name, in arguments and in its reply, which goes
    to an LLM user and to the judge: the calls are refused with errors the agent sees, the attempt is graded on
    its state and reply, and the record is written and readable."""
    task = shop.task("shop-cancel").model_copy(update={"rubrics": [RUBRIC]})
    with (
        OpenAIStub(
            [
                tool_call("cancel" + LONE, {"order_id": 1}),
                tool_call("find_customer", {"email": f"c1{LONE}@example.com"}),
                tool_call("cancel_order", {"order_id": 1}),
                text(f"Order 1 is cancelled {LONE}"),
            ]
        ) as agent,
        OpenAIStub([text("###STOP###")]) as user,
        OpenAIStub([text("Yes")]) as judge,
    ):
        cfg = RunConfig(
            agent=f"openai:agent-model@{agent.base_url}", user=f"openai:user-model@{user.base_url}", judge=f"openai:judge-model@{judge.base_url}"
        )
        out = tmp_path / "results.jsonl"
        summary = run([(task, shop)], cfg, SqliteBackend(), out)
        shown_to_agent = [m for m in agent.bodies()[-1]["messages"] if m["role"] == "tool"]
        shown_to_user = [m for b in user.bodies() for m in b["messages"]]
        judged = " ".join(b["messages"][-1]["content"] for b in judge.bodies())
    (record,) = read_records(out)
    assert summary.system_errors == 0 and record.system_error is None, record.verdict
    assert (record.reward, record.unjudged, record.finish_reason) == (1, False, "user_done")
    calls = record.trajectory.tool_calls
    assert [c.ok for c in calls] == [False, False, True]
    assert "name is not valid Unicode" in calls[0].result and "arguments are not valid Unicode" in calls[1].result
    assert [m["content"] for m in shown_to_agent[:2]] == [c.result for c in calls[:2]]  # the agent saw both errors
    assert calls[0].name == "cancel\ufffd" and "\ufffd" in str(calls[1].arguments)
    assert any("Order 1 is cancelled \ufffd" in str(m.get("content")) for m in shown_to_user)
    assert "Order 1 is cancelled \ufffd" in judged


def test_a_lone_surrogate_in_a_final_reply_fails_the_rubric_not_the_harness(shop, tmp_path):
    """The same reply judged "no" is a plain 0: the reply is the agent's, whatever it holds."""
    task = shop.task("shop-cancel").model_copy(update={"rubrics": [RUBRIC]})
    with OpenAIStub([tool_call("cancel_order", {"order_id": 1}), text(LONE * 3)]) as agent, OpenAIStub([text("No")]) as judge:
        cfg = RunConfig(agent=f"openai:agent-model@{agent.base_url}", judge=f"openai:judge-model@{judge.base_url}")
        run([(task, shop)], cfg, SqliteBackend(), tmp_path / "r.jsonl")
    (record,) = read_records(tmp_path / "r.jsonl")
    assert (record.reward, record.system_error, record.verdict.state_reward) == (0, None, 1), record.verdict
    assert record.trajectory.messages[-1]["content"] == "\ufffd" * 3


# -- #15.9: a broken domain folder fails before any attempt, naming the file -----------------------------


def squash(s: str) -> str:
    """Text without whitespace: rich wraps long error lines (paths included) at the terminal width."""
    return "".join(s.split())


def assert_refused(folder: Path, culprit: str, words: str, tmp_path: Path, backend: str = "sqlite") -> None:
    """`run`, `probe` and `tasks lint` stop before any attempt with an error naming the file; nothing is written."""
    out = tmp_path / "results" / "results.jsonl"
    for args in (
        ["run", "--agent", "scripted:gold", "--tasks", str(folder), "--out", str(out), "--backend", backend],
        ["probe", "--agent", "scripted:gold", "--tasks", str(folder), "--k", "1", "--out", str(out), "--backend", backend],
        ["tasks", "lint", "--tasks", str(folder), "--backend", backend],
    ):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert squash(f"{folder / culprit}: {words}") in squash(r.output), r.output
        assert squash(r.output).count(squash(str(folder / culprit))) == 1, r.output  # named once, not "tools.py: tools.py: …"
        assert "Traceback" not in r.output and "--repair" not in r.output
    assert not out.parent.exists()  # no results file, no manifest


@pytest.mark.parametrize(
    "culprit, breakage, words",
    [
        (
            "seed.py",
            lambda f: f.write_text("def generate(rng, scale=1.0):\n    raise RuntimeError('no seed today')\n"),
            "generate() failed: RuntimeError: no seed today",
        ),
        (
            "seed.py",
            lambda f: f.write_text("def generate(rng, scale=1.0):\n    return {'customers': [{'id': 1, 'nick': 'x'}]}\n"),
            "generate() yields unknown column customers.nick (row 0)",
        ),
        (
            "seed.py",
            lambda f: f.write_text(
                "def generate(rng, scale=1.0):\n    return {'customers': [{'id': 1, 'name': 'a', 'email': 'a@x', 'tier': 'basic'},"
                " {'id': 2, 'name': 'b', 'email': 'a@x', 'tier': 'basic'}]}\n"
            ),
            "the seed rows do not load: UNIQUE constraint failed: customers.email",
        ),
        ("tools.py", lambda f: f.unlink(), "is missing"),
        ("schema.sql", lambda f: f.unlink(), "is missing"),
        ("tools.py", lambda f: f.write_text(f.read_text() + "\ndef broken(:\n"), "does not compile: invalid syntax"),
        ("tools.py", lambda f: f.write_text("import no_such_module_here\n"), "fails when imported: ModuleNotFoundError"),
    ],
)
def test_a_broken_domain_file_fails_before_any_attempt_naming_the_file(tmp_path, culprit, breakage, words):
    folder = named_copy(tmp_path, "shop_broken")
    breakage(folder / culprit)
    assert_refused(folder, culprit, words, tmp_path)


def _drop_left_by_earlier_runs(pg_backend, pattern: str) -> None:
    """A run killed between its last two lines leaves the fixed folder's template behind; the server outlives runs."""
    for (name,) in pg_backend._admin_execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (f"gs\\_%{pattern}%",)):
        pg_backend._admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_schema_postgres_rejects_fails_early_and_leaves_no_database(pg_backend, tmp_path):
    folder = named_copy(tmp_path, "shop_pg_rejects")
    schema = folder / "schema.sql"  # SQLite accepts AUTOINCREMENT; PostgreSQL has no such keyword
    schema.write_text(
        schema.read_text().replace("CREATE TABLE notes (\n  id INTEGER PRIMARY KEY,", "CREATE TABLE notes (\n  id INTEGER PRIMARY KEY AUTOINCREMENT,")
    )
    assert "AUTOINCREMENT" in schema.read_text()
    _drop_left_by_earlier_runs(pg_backend, "shop\\_pg\\_rejects")
    Domain(folder)  # loads: SQLite accepts it
    assert_refused(folder, "schema.sql", "PostgreSQL rejects the schema: syntax error", tmp_path, backend="postgres")
    left = pg_backend._admin_execute("SELECT datname FROM pg_database WHERE datname LIKE %s", ("gs\\_%shop\\_pg\\_rejects%",))
    assert left == []
    # the same folder with its schema fixed runs: no stale half-built template is in the way
    schema.write_text(schema.read_text().replace(" AUTOINCREMENT", ""))
    out = tmp_path / "fixed.jsonl"
    r = cli("run", "--agent", "scripted:gold", "--tasks", str(folder), "--out", str(out), "--backend", "postgres")
    assert r.exit_code == 0, r.output
    assert all(x.reward == 1 for x in read_records(out))
    pg_backend.drop_templates(Domain(folder))


def test_seed_rows_postgres_rejects_fail_early_and_leave_no_database(pg_backend, tmp_path):
    folder = named_copy(tmp_path, "shop_pg_seed")
    _drop_left_by_earlier_runs(pg_backend, "shop\\_pg\\_seed")
    (folder / "seed.py").write_text(
        "def generate(rng, scale=1.0):\n    return {'customers': [{'id': 1, 'name': 'a', 'email': 'a@x', 'tier': 'basic'},"
        " {'id': 2, 'name': 'b', 'email': 'a@x', 'tier': 'basic'}]}\n"
    )
    assert_refused(folder, "seed.py", "PostgreSQL rejects the seed rows of table customers: duplicate key value", tmp_path, backend="postgres")
    assert pg_backend._admin_execute("SELECT datname FROM pg_database WHERE datname LIKE %s", ("gs\\_%shop\\_pg\\_seed%",)) == []


# -- #20.7: async and *args/**kwargs tools are refused when the domain loads -----------------------------

ASYNC_CANCEL = '''

@tool(write=True)
async def cancel_later(db, order_id: int) -> dict:
    """Cancel a pending order, asynchronously."""
    db.execute("UPDATE orders SET status = 'cancelled' WHERE id = ?", order_id)
    return {"order_id": order_id}
'''


@pytest.mark.parametrize(
    "extra, words",
    [
        (ASYNC_CANCEL, "tool cancel_later: is `async def`"),
        (ASYNC_CANCEL.replace("return {", "yield {").replace("async def", "def"), "tool cancel_later: is a generator"),
        (
            "\n\nimport functools\n\n\ndef plain_looking(f):\n    @functools.wraps(f)\n    def call(*args, **kwargs):\n        return f(*args, **kwargs)\n"
            "    return call\n" + ASYNC_CANCEL.replace("@tool(write=True)\n", "@tool(write=True)\n@plain_looking\n"),
            "tool cancel_later: is `async def`",
        ),
        ('\n\n@tool\ndef lookup(db, *ids: int) -> list:\n    """Look up orders."""\n    return []\n', "tool lookup: takes *ids"),
        ('\n\n@tool\ndef lookup(db, order_id: int, **filters) -> list:\n    """Look up orders."""\n    return []\n', "tool lookup: takes **filters"),
        (
            '\n\n@tool\ndef lookup(db, order_id: int, /) -> list:\n    """Look up orders."""\n    return []\n',
            "tool lookup: parameter order_id is positional-only",
        ),
        (
            '\n\n@tool\ndef lookup() -> list:\n    """Look up orders."""\n    return []\n',
            "tool lookup: its first parameter must receive the sandbox `Db`",
        ),
        (
            '\n\n@tool\ndef lookup(db, order_id: "OrderId") -> list:\n    """Look up orders."""\n    return []\n',
            "tool lookup: its type annotations do not resolve: NameError",
        ),
        (
            '\n\nclass Opaque:\n    pass\n\n\n@tool\ndef lookup(db, order: Opaque) -> list:\n    """Look up orders."""\n    return []\n',
            "tool lookup: its parameters have no JSON schema",
        ),
    ],
)
def test_a_tool_that_cannot_be_called_as_declared_is_refused_at_load(tmp_path, extra, words):
    folder = named_copy(tmp_path, "shop_tools")
    tools = folder / "tools.py"
    tools.write_text(tools.read_text() + extra)
    if "cancel_later" in extra:  # the gold solution uses it: today that gold "passes" without ever running the tool
        task_file = folder / "tasks" / "basic.yaml"
        task_file.write_text(task_file.read_text().replace("{tool: cancel_order, args: {order_id: 1}}", "{tool: cancel_later, args: {order_id: 1}}"))
    assert_refused(folder, "tools.py", words, tmp_path)


@pytest.mark.parametrize("body", ["return _cancel(db, order_id)", "return (x for x in [_cancel])"])
def test_a_tool_that_returns_an_unrun_coroutine_or_generator_fails_the_call_never_succeeds(tmp_path, body):
    """A plain `def` tool that returns an async helper's coroutine (or a generator) passes every load check; its work never
    runs. Before: the call "succeeded" with `<coroutine object …>`, nothing was written, and gold and no-op both scored 1.
    Now the call fails (rolled back): the gold replay is a system error, never a free pass."""
    from groundstate.records import read_records

    folder = named_copy(tmp_path, "shop_unrun")
    tools = folder / "tools.py"
    tools.write_text(
        tools.read_text()
        + f'''

async def _cancel(db, order_id):
    db.execute("UPDATE orders SET status = 'cancelled' WHERE id = ?", order_id)
    return {{"order_id": order_id}}


@tool(write=True)
def cancel_later(db, order_id: int) -> dict:
    """Cancel a pending order, later."""
    {body}
'''
    )
    task_file = folder / "tasks" / "basic.yaml"
    task_file.write_text(task_file.read_text().replace("{tool: cancel_order, args: {order_id: 1}}", "{tool: cancel_later, args: {order_id: 1}}"))
    for agent in ("scripted:gold", "scripted:noop"):
        out = tmp_path / f"{agent.split(':')[1]}.jsonl"
        r = cli("run", "--agent", agent, "--tasks", str(folder), "--out", str(out))
        (record,) = [x for x in read_records(out) if x.task_id == "shop-cancel"]
        assert record.reward is None and "returned a" in record.system_error and "its work never ran" in record.system_error, r.output
    from groundstate.state import make_backend

    domain = load_domain(str(folder))
    backend = make_backend("sqlite")
    with backend.open(backend.prepare(domain, {"orders": [{"id": 1, "customer_id": 1, "status": "pending", "total": 10.0}]})) as sandbox:
        result = domain.tools.call(sandbox.connection, "cancel_later", {"order_id": 1})
        assert not result.ok and "cancel_later returned a" in result.content and "coroutine object" not in result.content
        assert len(sandbox.changes()) == 0
