"""Served episodes on record: `groundstate serve --protocol openenv --out FILE` writes every episode OpenEnv's own client
finishes as a results record (its agent: the name the client gave `reset(agent=...)`, a failure's blame with it),
and `metrics`, `report` and `regrade` read the file as they read a `run`'s; a restart continues it, another run's file is refused."""

import asyncio
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from openenv.core.generic_client import GenericEnvClient
from server_wait import wait_until_serving

from groundstate.records import read_records
from groundstate.worlds.domain import load_domain

SHOP = str(Path(__file__).parents[2] / "fixtures" / "shop")
CLI = [sys.executable, "-m", "groundstate.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serving(out: Path, log: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    command = [*CLI, "serve", "--protocol", "openenv", "--domain", SHOP, "--port", str(port), "--out", str(out), *extra]
    proc = subprocess.Popen(command, stdout=log.open("a"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_until_serving(url, proc, log)
    return proc, url


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


async def _episode(url: str, task_id: str, calls: list, agent: str | None) -> tuple[str | None, float | None]:
    async with GenericEnvClient(base_url=url) as env:
        await env.reset(task_id=task_id, **({"agent": agent} if agent else {}))
        episode_id = (await env.state())["episode_id"]
        for call in calls:
            await env.step({"type": "call_tool", "tool_name": call.tool, "arguments": call.args})
        while True:
            step = await env.step({"type": "reply", "content": "Done."})
            if step.done:
                return episode_id, step.reward


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_every_finished_episode_is_a_record_that_metrics_report_and_regrade_read(tmp_path):
    task = load_domain(SHOP).task("shop-cancel")
    out, log = tmp_path / "served.jsonl", tmp_path / "server.log"
    proc, url = _serving(out, log)
    try:
        gold_id, gold = asyncio.run(_episode(url, task.id, task.gold, "trainer-a"))
        _, noop = asyncio.run(_episode(url, task.id, [], None))

        async def refused():  # a name that is not short text is refused at reset, and no episode starts
            async with GenericEnvClient(base_url=url) as env:
                with pytest.raises(Exception, match="agent"):
                    await env.reset(task_id=task.id, agent="x" * 201)

        asyncio.run(refused())
    finally:
        _stop(proc)
    assert (gold, noop) == (1.0, 0.0) and gold_id  # the server names every episode
    assert f"every finished episode is recorded in {out}" in log.read_text()
    records = read_records(out)
    assert [(r.task_id, r.attempt, r.reward, r.agent) for r in records] == [(task.id, 0, 1, "trainer-a"), (task.id, 1, 0, "client")]
    assert records[0].run.agent == "served:openenv" and records[0].trajectory.tool_calls[0].name == "cancel_order"

    # the clients chose which of the served tasks to play, and how often: a run like any other, so figures over the tasks
    # played come with --allow-incomplete, which says what the run lacks
    refused = subprocess.run([*CLI, "metrics", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "the file's tasks are not the run's selected task set" in refused.stdout + refused.stderr
    metrics = json.loads(_cli("metrics", str(out), "--json", "--allow-incomplete", cwd=tmp_path).stdout)
    assert (metrics["tasks"], metrics["pass_at_1"]) == (1, 0.5), metrics
    _cli("report", str(out), "--out", str(tmp_path / "report.html"), "--allow-incomplete", cwd=tmp_path)
    assert "shop-cancel" in (tmp_path / "report.html").read_text()
    _cli("regrade", str(out), "--out", str(tmp_path / "regraded.jsonl"), cwd=tmp_path)
    assert [r.reward for r in read_records(tmp_path / "regraded.jsonl")] == [1, 0]
    assert records[1].verdict.blame is not None and records[1].verdict.blame.kind == "never_acted"  # what `metrics` counts per family

    # a restart continues the file; a server of another run (another user) is refused before it serves
    proc, url = _serving(out, log)
    try:
        asyncio.run(_episode(url, task.id, task.gold, "trainer-b"))
    finally:
        _stop(proc)
    assert [(r.attempt, r.agent) for r in read_records(out)][-1] == (2, "trainer-b")
    other = subprocess.run(
        [*CLI, "serve", "--protocol", "openenv", "--domain", SHOP, "--out", str(out), "--user", "scripted:gold"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert other.returncode == 2 and "holds records of another run" in other.stderr + other.stdout
    assert len(read_records(out)) == 3  # nothing written
