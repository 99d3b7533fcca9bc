"""OpenEnv 0.10's Task API on `groundstate serve --protocol openenv`: the splits a server offers (`--split NAME=SELECTOR`,
else `all` and the tasks' own pool and bench) over OpenEnv's own routes (`/{env}/splits`, `tasks`, `num_tasks`, `task`,
`task_range`), and `reset(split=, index=)` through OpenEnv's own clients, graded as `groundstate run` grades."""

import asyncio
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from server_wait import wait_until_serving

from groundstate.integrations.openenv import ReplyAction
from groundstate.worlds.selectors import select_tasks

SHOP = str(Path(__file__).parents[2] / "fixtures" / "shop")
SPEC_KEYS = {"id", "index", "split", "domain", "family", "tags", "instruction"}


@contextmanager
def _server(tmp_path: Path, *options: str):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / f"server-{port}.log"
    command = [sys.executable, "-m", "groundstate.cli", "serve", "--protocol", "openenv", "--port", str(port), *options]
    with log.open("w") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(url, proc, log)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tasks")
    train = tmp / "train.yaml"
    train.write_text("- shop-multi\n- shop-cancel\n")  # a selection's train.yaml: task ids, in this order
    with _server(tmp, "--tasks", SHOP, "--split", f"train={train}", "--split", "bench=kiosk-cancel-00*") as url:
        yield url


def test_the_splits_are_the_ones_given_with_their_types_and_counts(served):
    bench = [t.id for t, _ in select_tasks("kiosk-cancel-00*")]
    assert httpx.get(f"{served}/groundstate/splits").json() == [
        {"name": "train", "type": "train", "num_tasks": 2},
        {"name": "bench", "type": "test", "num_tasks": len(bench)},
    ]
    assert httpx.post(f"{served}/groundstate/num_tasks", json={"split": "bench"}).json() == {"num_tasks": len(bench)}
    listed = httpx.post(f"{served}/groundstate/tasks", json={"split": "train"}).json()["tasks"]
    assert [t["id"] for t in listed] == ["shop-multi", "shop-cancel"] and all(set(t) == SPEC_KEYS for t in listed)
    ranged = httpx.post(f"{served}/groundstate/task_range", json={"split": "bench", "start": 1, "stop": 1000}).json()["tasks"]
    assert [t["id"] for t in ranged] == bench[1:] and [t["index"] for t in ranged] == list(range(1, len(bench)))
    one = httpx.post(f"{served}/groundstate/task", json={"split": "bench", "index": 0}).json()["task"]
    assert one["id"] == bench[0] and one["split"] == "bench"


def test_a_spec_shows_what_the_agent_is_shown_and_nothing_of_the_answer(served):
    specs = httpx.post(f"{served}/groundstate/tasks", json={"split": "train"}).json()["tasks"]
    text = str(specs)
    for task, _ in select_tasks(SHOP):
        if task.id in ("shop-multi", "shop-cancel"):
            for check in task.checks:
                assert check.sql not in text
            for call in task.gold:
                assert call.tool not in text or call.tool in task.instruction


def test_what_the_client_gets_wrong_is_one_line_of_4xx(served):
    unknown = httpx.post(f"{served}/groundstate/num_tasks", json={"split": "validation"})
    assert unknown.status_code == 422 and unknown.json()["detail"] == "split 'validation' is not served here: this server has train, bench"
    for index in (2, -1):
        outside = httpx.post(f"{served}/groundstate/task", json={"split": "train", "index": index})
        assert outside.status_code == 400, (index, outside.text)
    assert httpx.post(f"{served}/groundstate/task_range", json={"split": "train", "start": -3}).status_code == 400
    assert httpx.post(f"{served}/groundstate/task", json={"split": "train", "index": "x"}).status_code == 422
    assert httpx.get(f"{served}/elsewhere/splits").status_code == 404

    async def reset(**kwargs):
        async with GenericEnvClient(base_url=served) as env:
            await env.reset(**kwargs)

    for kwargs, message in (
        ({"split": "train"}, "give split and index together"),
        ({"split": "train", "index": 0, "task_id": "shop-cancel"}, "give split and index together"),
        ({"split": "train", "index": 9}, "index 9 is outside split 'train'"),
        ({"split": "nope", "index": 0}, "split 'nope' is not served here"),
    ):
        with pytest.raises(Exception, match=message):
            asyncio.run(reset(**kwargs))


def test_openenvs_clients_reset_to_a_task_by_split_and_index_and_are_graded_on_it(served):
    async def generic(split, index):
        async with GenericEnvClient(base_url=served) as env:
            first = await env.reset(split=split, index=index)
            step = await env.step({"type": "call_tool", "tool_name": "cancel_order", "arguments": {"order_id": 1}})
            while not step.done:
                step = await env.step({"type": "reply", "content": "Done."})
            return first.observation["task_id"], step.reward

    assert asyncio.run(generic("train", 1)) == ("shop-cancel", 1.0)
    assert asyncio.run(generic("train", 0)) == ("shop-multi", 0.0)  # another task: cancelling order 1 is not its answer

    async def tool_client():
        async with MCPToolClient(base_url=served) as env:  # OpenEnv 0.10: tools over an HTTP session the WebSocket joins
            first = await env.reset(split="train", index=1)
            await env.call_tool("cancel_order", order_id=1)
            final = await env.step(ReplyAction(content="Cancelled."))
            return first.observation.task_id, final.done, final.reward

    assert asyncio.run(tool_client()) == ("shop-cancel", True, 1.0)


def test_by_default_the_splits_are_all_and_the_tasks_own(tmp_path):
    kiosk = [t.id for t, _ in select_tasks("kiosk")]
    with _server(tmp_path, "--domain", "kiosk") as url:
        splits = httpx.get(f"{url}/kiosk/splits").json()
        assert splits == [{"name": "all", "type": "validation", "num_tasks": len(kiosk)}, {"name": "pool", "type": "train", "num_tasks": len(kiosk)}]
        listed = httpx.post(f"{url}/kiosk/task_range", json={"split": "all"}).json()["tasks"]
        assert [t["id"] for t in listed] == kiosk
