"""OpenEnv: `groundstate serve --protocol openenv` driven by OpenEnv's own clients (`MCPToolClient`,
`GenericEnvClient`) over its WebSocket protocol; verdicts equal `groundstate run`'s, sessions stay isolated."""

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from server_wait import wait_until_serving
from typer.testing import CliRunner

from groundstate.agents import ScriptedUser
from groundstate.agents.scripted import make_scripted_agent
from groundstate.cli import app
from groundstate.integrations.openenv import ReplyAction
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.attempt import play
from groundstate.worlds.selectors import select_tasks

SHOP = str(Path(__file__).parents[2] / "fixtures" / "shop")
SELECTION = f"{SHOP},kiosk-cancel-00*,retail-*-001"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("openenv") / "server.log"
    # --reveal-verdict: the whole verdict, compared with `play`'s (the default, reasons by check name: test_openenv_careless_clients.py)
    command = ["serve", "--protocol", "openenv", "--tasks", SELECTION, "--port", str(port), "--max-sessions", "32", "--reveal-verdict"]
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "groundstate.cli", *command], stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_until_serving(url, proc, log)
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]  # sessions that end, or leave, are no errors


def _ours(task_id: str, agent_spec: str):
    [(task, domain)] = [p for p in select_tasks(SELECTION) if p[0].id == task_id]
    agent = make_scripted_agent(agent_spec, task, domain)
    return asyncio.run(play(task, domain, agent, ScriptedUser(task.user.script), backend=SqliteBackend())).verdict.to_json()


def test_openenvs_tool_client_plays_an_episode_and_is_rewarded_only_at_the_end(server):
    async def episode():
        async with MCPToolClient(base_url=server) as env:
            first = await env.reset(task_id="shop-cancel")
            tools = await env.list_tools()
            result = await env.call_tool("cancel_order", order_id=1)
            mid = await env.step(ReplyAction(content="Cancelled."))  # the scripted user has nothing to add: done
            return first, tools, result, mid

    first, tools, result, final = asyncio.run(episode())
    assert first.done is False and first.reward is None
    names = {t.name for t in tools}
    assert names == {"get_order", "find_customer", "cancel_order", "set_total", "set_tier", "add_note", "tag_customer", "broken_tool"}
    assert not names & {"reset", "step", "state", "close"}
    assert '"status": "cancelled"' in result
    assert final.done is True and final.reward == 1.0


def test_every_field_reaches_the_generic_client_and_the_verdict_is_groundstate_runs(server):
    async def episode(task_id, calls, reply):
        async with GenericEnvClient(base_url=server) as env:
            first = await env.reset(task_id=task_id)
            rewards = []
            for call in calls:
                step = await env.step({"type": "call_tool", "tool_name": call.tool, "arguments": call.args})
                rewards.append(step.reward)
                assert not step.done and step.observation["result"] is not None
            while True:
                step = await env.step({"type": "reply", "content": reply})
                if step.done:
                    return first.observation, rewards, step

    for task, _ in select_tasks(SELECTION):
        opening, rewards, final = asyncio.run(episode(task.id, task.gold, "Done."))
        assert opening["task_id"] == task.id and opening["messages"][-1] == {"role": "user", "content": task.instruction}
        assert {s["function"]["name"] for s in opening["tool_schemas"]} >= {c.tool for c in task.gold}
        assert rewards == [None] * len(task.gold)  # never a reward mid-episode
        assert final.reward == (None if task.rubrics else 1.0) and final.observation["verdict"] == _ours(task.id, "scripted:gold"), task.id
        _, _, noop = asyncio.run(episode(task.id, [], "I cannot help."))
        assert noop.reward == 0.0 and noop.observation["verdict"] == _ours(task.id, "scripted:noop"), task.id


def test_concurrent_sessions_each_have_their_own_sandbox(server):
    # 24 sessions at once on the same task: the even ones cancel the order, the odd ones only read it. A session
    # that saw another's write would read "cancelled" or be graded on it.
    async def session(i):
        async with GenericEnvClient(base_url=server) as env:
            await env.reset(task_id="shop-cancel")
            before = await env.step({"type": "call_tool", "tool_name": "get_order", "arguments": {"order_id": 1}})
            if i % 2 == 0:
                await env.step({"type": "call_tool", "tool_name": "cancel_order", "arguments": {"order_id": 1}})
            await asyncio.sleep(0.05)  # all sessions are open at once
            final = await env.step({"type": "reply", "content": "Done."})
            return before.observation["result"], final.reward

    async def all_sessions():
        return await asyncio.gather(*(session(i) for i in range(24)))

    results = asyncio.run(all_sessions())
    assert all('"status": "pending"' in before for before, _ in results)
    assert [reward for _, reward in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(24)]


def test_hostile_and_careless_clients_get_errors_and_the_server_stays_up(server):
    async def misuse():
        out = {}
        async with GenericEnvClient(base_url=server) as env:
            with pytest.raises(Exception, match="step before reset"):
                await env.step({"type": "reply", "content": "hi"})
        async with GenericEnvClient(base_url=server) as env:
            with pytest.raises(Exception, match="not one of this server's tasks"):
                await env.reset(task_id="../../etc/passwd")
        async with GenericEnvClient(base_url=server) as env:
            await env.reset(task_id="shop-cancel")
            with pytest.raises(RuntimeError, match="Invalid message"):
                await env.step({"type": "exec", "code": "import os"})  # not an action of this server
            bad = await env.step({"type": "call_tool", "tool_name": "cancel_order", "arguments": {"order_id": "1; DROP TABLE orders"}})
            out["bad"] = bad
            unknown = await env.step({"type": "call_tool", "tool_name": "reset", "arguments": {}})
            out["unknown"] = unknown
        async with GenericEnvClient(base_url=server) as env:  # a client that leaves mid-episode, then a fresh one
            await env.reset(task_id="shop-cancel")
            await env.step({"type": "call_tool", "tool_name": "cancel_order", "arguments": {"order_id": 1}})
        async with GenericEnvClient(base_url=server) as env:
            await env.reset(task_id="shop-cancel")
            out["fresh"] = await env.step({"type": "call_tool", "tool_name": "get_order", "arguments": {"order_id": 1}})
        return out

    out = asyncio.run(misuse())
    assert "invalid arguments" in out["bad"].observation["result"] and not out["bad"].done
    assert "unknown tool 'reset'" in out["unknown"].observation["result"]
    assert '"status": "pending"' in out["fresh"].observation["result"]  # the abandoned session's write is gone


def test_nan_and_infinity_in_a_request_are_a_422_not_a_500(server):
    """JSON as Python reads it has NaN and Infinity: a field that refuses one is FastAPI's 422 (or OpenEnv's, for an
    action), whose error echoes the input; echoed as a number it could not be written, and the answer was a 500 with a
    traceback in the log."""
    import httpx

    for route, body in (
        ("reset", '{"seed": NaN}'),
        ("reset", '{"episode_id": Infinity}'),
        ("reset", '{"seed": -Infinity, "episode_id": NaN}'),
        ("step", '{"action": {"type": NaN}}'),  # OpenEnv's own 422 for an action, its errors in the detail
        ("step", '{"action": {"type": "call_tool", "tool_name": NaN, "arguments": NaN}}'),
    ):
        answer = httpx.post(f"{server}/{route}", content=body, headers={"content-type": "application/json"}, timeout=30)
        assert answer.status_code == 422, (body, answer.text)
        assert all(error["input"] is None for error in answer.json()["detail"]), answer.text
    assert httpx.get(f"{server}/health", timeout=30).status_code == 200


def test_the_command_refuses_what_it_cannot_serve():
    runner = CliRunner()
    r = runner.invoke(app, ["serve", "--protocol", "gopher", "--domain", "kiosk"])
    assert r.exit_code == 2 and "unknown protocol 'gopher'" in r.output
    r = runner.invoke(app, ["serve", "--protocol", "openenv"])
    assert r.exit_code == 2 and "give --domain or --tasks" in r.output
    r = runner.invoke(app, ["serve", "--protocol", "openenv", "--domain", "kiosk", "--host", "0.0.0.0"])
    assert r.exit_code == 2 and "non-loopback host" in r.output


def test_an_llm_user_without_the_openai_client_is_refused_before_serving(monkeypatch):
    """Every session's user would call the endpoint: without the openai client the server started, and each episode
    failed at the agent's first reply."""
    monkeypatch.setitem(sys.modules, "openai", None)  # an install without the openai extra
    r = CliRunner().invoke(app, ["serve", "--protocol", "openenv", "--domain", "kiosk", "--user", "openai:m@http://127.0.0.1:1/v1"])
    assert r.exit_code == 2 and "--user openai:m@http://127.0.0.1:1/v1: needs the openai package" in r.output, r.output


def _docs_blocks() -> tuple[list[str], str]:
    """docs/INTEGRATIONS.md's OpenEnv section: its serve command (as argv) and its client block."""
    section = (Path(__file__).parents[3] / "docs" / "INTEGRATIONS.md").read_text().split("\n## OpenEnv\n", 1)[1]
    command = section.split("```bash\n", 1)[1].split("\n```", 1)[0].split("#", 1)[0].split()
    client = section.split("```python\n", 1)[1].split("\n```", 1)[0]
    return command, client


def test_the_documented_client_example_and_the_docs_blocks_run(tmp_path):
    """docs/examples/openenv_client.py, and docs/INTEGRATIONS.md's client block as it stands (its top-level awaits run
    in a coroutine, the URL its port's), against a server started by the docs' own command (on a free port)."""
    command, client = _docs_blocks()
    assert command[:2] == ["groundstate", "serve"] and command[-2] == "--port", command
    port = _free_port()
    log = tmp_path / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "groundstate.cli", *command[1:-1], str(port)], stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", proc, log)
        script = Path(__file__).parents[3] / "docs" / "examples" / "openenv_client.py"
        env = {**os.environ, "URL": f"http://127.0.0.1:{port}"}
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        body = client.replace("http://127.0.0.1:8000", f"http://127.0.0.1:{port}")
        lines = [line for line in body.splitlines() if not line.startswith(("from ", "import "))]
        source = "\n".join(line for line in body.splitlines() if line.startswith(("from ", "import ")))
        source += "\nasync def _block():\n" + "\n".join("    " + line for line in lines) + "\n    return final\n"
        scope: dict = {}
        exec(compile(source, "docs/INTEGRATIONS.md (OpenEnv)", "exec"), scope)
        final = asyncio.run(scope["_block"]())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cancel_kiosk_order" in done.stdout and "done True, reward 1.0" in done.stdout
    assert (final.done, final.reward) == (True, 1.0)  # what the block's last line says it shows


def test_a_refused_reset_leaves_the_running_episode_alone_and_the_time_limit_ends_an_idle_one():
    from groundstate.integrations.openenv import GroundstateAction, environment_factory
    from groundstate.types import EpisodeLimits
    from groundstate.worlds.domain import Domain

    shop = Domain(Path(SHOP))
    pairs = [(t, shop) for t in shop.tasks]

    async def scenario():
        env = environment_factory(pairs, SqliteBackend())()
        await env.reset_async(task_id="shop-cancel")
        await env.step_async(GroundstateAction(type="call_tool", tool_name="cancel_order", arguments={"order_id": 1}))
        for bad in ({"task_id": "nope"}, {"task_id": ["shop-cancel"]}, {"seed": "abc"}):
            with pytest.raises(ValueError, match="task_id|seed"):
                await env.reset_async(**bad)
        final = await env.step_async(GroundstateAction(type="reply", content="Done."))  # the episode went on
        slow = environment_factory(pairs, SqliteBackend(), EpisodeLimits(timeout=0.5))()
        await slow.reset_async(task_id="shop-cancel")
        await asyncio.sleep(1.0)
        late = await slow.step_async(GroundstateAction(type="call_tool", tool_name="cancel_order", arguments={"order_id": 1}))
        return final, late

    final, late = asyncio.run(scenario())
    assert final.done and final.reward == 1.0
    assert late.done and late.reward == 0.0 and late.finish_reason == "timeout"


def test_the_command_lines_defaults_are_the_servers():
    import inspect

    from groundstate.integrations import openenv
    from groundstate.integrations.serving import OpenEnvServe

    defaults = {k: p.default for k, p in inspect.signature(openenv.serve).parameters.items()}
    assert (OpenEnvServe.port, OpenEnvServe.max_sessions, OpenEnvServe.user, OpenEnvServe.host, OpenEnvServe.idle_timeout) == (
        defaults["port"],
        defaults["max_sessions"],
        defaults["user"],
        defaults["host"],
        defaults["idle_timeout"],
    )


def test_sessions_share_one_read_only_catalog_of_the_served_tasks():
    """A session costs nothing per served task: the factory builds the catalog once, every session reads it, none can
    change it, and a caller's list changed after the factory was made changes nothing that is served."""
    from groundstate.integrations.openenv import GroundstateAction, environment_factory
    from groundstate.worlds.domain import Domain

    shop = Domain(Path(SHOP))
    pairs = [(t, shop) for t in shop.tasks]
    make = environment_factory(pairs, SqliteBackend())
    first, second = make(), make()
    assert first._by_id is second._by_id and first._tasks is second._tasks
    with pytest.raises(TypeError):
        first._by_id["extra"] = pairs[0]  # type: ignore[index]
    pairs.clear()

    async def play(env):
        await env.reset_async(task_id="shop-cancel")
        await env.step_async(GroundstateAction(type="call_tool", tool_name="cancel_order", arguments={"order_id": 1}))
        return await env.step_async(GroundstateAction(type="reply", content="Done."))

    assert asyncio.run(play(first)).reward == 1.0
    first.close()
    second.close()
