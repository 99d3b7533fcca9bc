"""One `serve --protocol {mcp,openenv}` (#33 item 3): `serve --protocol mcp` is the MCP server `serve-mcp` was, and
`serve-mcp` stays, hidden from help, as its old spelling with a note naming the new one. The protocols share their
options where they mean the same; an option only the other protocol takes is refused."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.integrations.serving import McpServe

ROOT = Path(__file__).resolve().parents[2]
SHOP = str(ROOT / "tests" / "fixtures" / "shop")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_serve_protocol_mcp_serves_a_task_and_grades_its_session(tmp_path):
    """The SDK's own client over stdio against `groundstate serve --protocol mcp`: the gold calls, then the session's
    verdict line on stderr as the server winds down."""
    pytest.importorskip("mcp")
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from groundstate.worlds.domain import load_domain

    task = load_domain(SHOP).task("shop-cancel")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "groundstate.cli", "serve", "--protocol", "mcp", "--domain", SHOP, "--task", task.id],
        env={"PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )
    log = tmp_path / "stderr.log"

    async def main():
        with anyio.fail_after(60), open(log, "w") as err:
            async with stdio_client(params, errlog=err) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                for call in task.gold:
                    assert not (await s.call_tool(call.tool, dict(call.args))).is_error

    anyio.run(main)
    deadline = time.monotonic() + 10  # the verdict is written as the process winds down
    while " ended: " not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "[groundstate mcp] session 1 ended: task shop-cancel reward=1" in log.read_text(), log.read_text()
    assert "serve-mcp" not in log.read_text()  # the new spelling has no note


def test_serve_protocol_mcp_out_records_each_session_with_the_clients_name(tmp_path):
    """`--out` with `--task`: every session the SDK's own client ends is a record (its tool calls, verdict, blame, the
    name the client gave in `initialize`) that `metrics` reads; a second server continues the file."""
    pytest.importorskip("mcp")
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.types import Implementation

    from groundstate.records import read_records
    from groundstate.worlds.domain import load_domain

    task = load_domain(SHOP).task("shop-cancel")
    out = tmp_path / "sessions.jsonl"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "groundstate.cli", "serve", "--protocol", "mcp", "--domain", SHOP, "--task", task.id, "--out", str(out)],
        env={"PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )

    async def session(calls, name):
        with anyio.fail_after(120), open(tmp_path / "stderr.log", "a") as err:
            async with stdio_client(params, errlog=err) as (r, w), ClientSession(r, w, client_info=Implementation(name=name, version="1")) as s:
                await s.initialize()
                await s.list_tools()
                for call in calls:
                    await s.call_tool(call.tool, dict(call.args))

    anyio.run(session, task.gold, "trainer-a")
    long_name = "evaluator-b" + "x" * 5000  # a client's name is its own to choose: kept as 200 characters of text
    anyio.run(session, [], long_name)
    deadline = time.monotonic() + 30  # each server writes its record as it winds down
    while len(read_records(out, missing_ok=True)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    records = read_records(out)
    assert [(r.attempt, r.reward, r.agent) for r in records] == [(0, 1, "trainer-a"), (1, 0, long_name[:200])]
    assert [c.name for c in records[0].trajectory.tool_calls] == [c.tool for c in task.gold] and records[0].run.agent == "served:mcp"
    assert records[1].verdict.blame is not None and records[1].verdict.blame.kind == "never_acted"
    shown = invoke("metrics", str(out), "--allow-incomplete", "--json")
    assert shown.exit_code == 0 and '"pass_at_1": 0.5' in shown.output, shown.output
    assert "records written to" in (tmp_path / "stderr.log").read_text()
    refused = invoke("serve", "--protocol", "mcp", "--domain", SHOP, "--out", str(out))
    assert refused.exit_code == 2 and "give --task too" in refused.output


def test_serve_mcp_is_hidden_from_help_and_says_its_new_spelling():
    shown = invoke("--help").stdout
    assert re.search(r"\bserve\b", shown) and "serve-mcp" not in shown
    assert "mcp" in invoke("serve", "--help").stdout
    r = invoke("serve-mcp", "--domain", SHOP, "--transport", "carrier-pigeon")  # the same command: refused as before, after the note
    assert r.exit_code == 2 and "note: serve-mcp is now serve --protocol mcp" in r.stderr and "unknown transport 'carrier-pigeon'" in r.stderr
    r = invoke("serve", "--protocol", "mcp", "--domain", SHOP, "--transport", "carrier-pigeon")
    assert r.exit_code == 2 and "note:" not in r.stderr and "unknown transport 'carrier-pigeon'" in r.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (["--protocol", "openenv", "--domain", "kiosk", "--token", "t"], "--token is for --protocol mcp, not openenv"),
        (["--protocol", "openenv", "--domain", "kiosk", "--task", "kiosk-credit-001"], "--task is for --protocol mcp, not openenv"),
        (["--protocol", "mcp", "--domain", SHOP, "--reveal-verdict"], "--reveal-verdict is for --protocol openenv, not mcp"),
        (["--protocol", "mcp", "--tasks", "kiosk"], "--tasks is for --protocol openenv, not mcp"),
        (["--protocol", "mcp", "--domain", SHOP, "--max-turns", "3"], "--max-turns is for --protocol openenv, not mcp"),
        (["--protocol", "mcp"], "give --domain: the domain whose tools to serve"),
        (["--protocol", "mcp", "--domain", SHOP, "--backend", "oracle"], "--backend: unknown backend 'oracle'"),
        (["--protocol", "openenv", "--domain", "kiosk", "--backend", "oracle"], "--backend: unknown backend 'oracle'"),
        (["--protocol", "openenv"], "give --domain or --tasks (one of them), or --split"),
        (["--protocol", "openenv", "--domain", "kiosk", "--split", "train"], "--split 'train': give NAME=SELECTOR"),
        (["--protocol", "openenv", "--split", "a=kiosk", "--split", "a=retail"], "--split: split 'a' is given twice"),
        (["--protocol", "openenv", "--split", "a b=kiosk"], "--split: split name 'a b': use 1 to 64 letters"),
        (["--protocol", "openenv", "--split", "a=no-such-task-*"], "--split a: task selector 'no-such-task-*' matched no task"),
        (["--protocol", "openenv", "--split", "train=runs/nowhere/train.yaml"], "--split train: no such file: runs/nowhere/train.yaml"),
        (["--protocol", "mcp", "--domain", SHOP, "--split", "a=kiosk"], "--split is for --protocol openenv, not mcp"),
    ],
)
def test_an_option_the_protocol_does_not_take_is_one_line(args, says):
    r = invoke("serve", *args)
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], r.output


def test_each_protocols_defaults_are_its_servers():
    mcp_server = pytest.importorskip("groundstate.tools.mcp_server")
    assert (McpServe.port, McpServe.max_sessions, McpServe.session_wait, McpServe.idle_timeout, McpServe.max_pending) == (
        mcp_server.DEFAULT_PORT,
        mcp_server.DEFAULT_MAX_SESSIONS,
        mcp_server.DEFAULT_SESSION_WAIT,
        mcp_server.DEFAULT_IDLE_TIMEOUT,
        mcp_server.DEFAULT_MAX_PENDING,
    )
    # --protocol openenv's: tests/integrations/openenv_env/test_openenv.py (OpenEnv 0.10 has an environment of its own)


def test_a_split_naming_another_task_under_a_served_tasks_id_is_refused(tmp_path):
    """`--split` may select tasks of a domain folder beside the served one: a task there with a served task's id but
    another definition would be served under the first one's (a reset by split and index would play the wrong task)."""
    import shutil

    twin = tmp_path / "shop-twin"
    shutil.copytree(SHOP, twin)
    tasks = twin / "tasks" / "basic.yaml"
    tasks.write_text(tasks.read_text().replace("Please cancel order 1.", "Please cancel order 1 today."))
    r = invoke("serve", "--protocol", "openenv", "--domain", SHOP, "--split", f"train={twin}")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "task id 'shop-cancel' names two different tasks" in lines[0], r.output
