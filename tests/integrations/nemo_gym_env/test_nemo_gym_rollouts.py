"""NeMo Gym's own rollout collection plays groundstate tasks: `groundstate new nemo-gym` writes the resources server,
`gym env start` runs it beside NeMo Gym's `simple_agent` and a scripted model server (NeMo Gym's model-server base
class; `scripted_model/`), and `gym eval run` plays gold and no-op of every state-graded bundled task. Each verdict
must equal `groundstate run`'s (`attempt.play` with the scripted agent and user) on the same calls, whole."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from groundstate.agents.scripted import scripted_agent, scripted_user
from groundstate.cli import app
from groundstate.integrations.loop import run_sync
from groundstate.records import read_records
from groundstate.state import make_backend
from groundstate.worlds.attempt import play, prepare_domains
from groundstate.worlds.selectors import select_tasks, state_graded_only

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
SUITE = "all"  # every bundled domain; the server leaves out the tasks with reply rubrics
READY = re.compile(r"All (\d+) / \1 servers ready")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gym(args: list[str], cwd: Path, log: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    return subprocess.Popen([str(BIN / "gym"), *args], cwd=cwd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, **kw)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A NeMo Gym working folder with the groundstate server (whole verdicts, records kept), the scripted model and
    NeMo Gym's simple_agent, started by `gym env start`; every server runs in this environment (NeMo Gym's
    `skip_venv_if_present`, each server's venv a link to it). Stopped as NeMo Gym stops: SIGINT, then SIGKILL."""
    work = tmp_path_factory.mktemp("gym")
    made = subprocess.run(
        [str(BIN / "groundstate"), "new", "nemo-gym", "gs", "--tasks", SUITE, "--dir", str(work)], capture_output=True, text=True, timeout=300
    )
    assert made.returncode == 0, made.stderr
    assert "left out: " in made.stdout  # the bundled suite's rubric tasks, said
    config_path = work / "resources_servers/gs/configs/gs.yaml"
    config = yaml.safe_load(config_path.read_text())
    server = config["gs_resources_server"]["resources_servers"]["gs"]
    server |= {"reveal_verdict": True, "out": str(work / "served.jsonl")}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.copytree(HERE / "scripted_model", work / "responses_api_models/scripted_model")
    for kind in ("resources_servers/gs", "responses_api_models/scripted_model", "responses_api_agents/simple_agent"):
        (work / "venvs" / kind).mkdir(parents=True)
        (work / "venvs" / kind / ".venv").symlink_to(sys.prefix)
    port = _free_port()
    (work / "env.yaml").write_text(
        yaml.safe_dump({"head_server": {"host": "127.0.0.1", "port": port}, "uv_venv_dir": str(work / "venvs"), "skip_venv_if_present": True})
    )
    log = work / "env_start.log"
    configs = "resources_servers/gs/configs/gs.yaml,responses_api_models/scripted_model/configs/scripted_model.yaml"
    proc = _gym(["env", "start", f"+config_paths=[{configs}]"], work, log, start_new_session=True)
    deadline = time.monotonic() + 240
    while not READY.search(log.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"gym env start did not get its servers ready:\n{log.read_text()[-4000:]}")
        time.sleep(1)
    yield work
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _collect(work: Path, rows: list[dict], name: str) -> list[dict]:
    """`gym eval run --no-serve` over `rows`: the rollouts it wrote (its failures file must stay empty)."""
    (work / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["eval", "run", "--no-serve", f"+input_jsonl_fpath={name}.jsonl", f"+output_jsonl_fpath={name}_rollouts.jsonl"]
    args += ["+num_samples_in_parallel=16", "+upload_rollouts_to_wandb=false"]
    log = work / f"{name}.log"
    proc = _gym(args, work, log)
    assert proc.wait(900) == 0, log.read_text()[-4000:]
    failures = work / f"{name}_rollouts_failures.jsonl"
    assert not failures.exists() or failures.read_text() == "", failures.read_text()[:2000]
    return [json.loads(line) for line in (work / f"{name}_rollouts.jsonl").read_text().splitlines()]


def _scripted(rows: list[dict], kind: str, calls_of) -> list[dict]:
    """The rows, each telling the scripted model its calls (`responses_create_params.metadata.script`) and their kind."""
    out = []
    for row in rows:
        row = json.loads(json.dumps(row))
        row["responses_create_params"]["metadata"] = {"script": json.dumps(calls_of(row["task_id"])), "kind": kind}
        out.append(row)
    return out


def _reference(pairs, backend, calls_of) -> dict[str, dict]:
    """`groundstate run`'s verdict of each task on the calls `calls_of` names: the scripted agent makes them, then says
    "Done." (as the scripted model does), the task's scripted user answers; a failure says where it went wrong, as
    the server's does when it keeps records."""

    async def one(task, domain):
        agent = scripted_agent(calls_of(task.id), task, "Done.")
        return (await play(task, domain, agent, scripted_user(task), backend=backend, blame=True)).verdict.to_json()

    return {task.id: run_sync(one(task, domain)) for task, domain in pairs}


def test_gold_and_noop_of_the_bundled_suite_get_plays_verdicts(stack):
    pairs = state_graded_only(select_tasks(SUITE))
    gold = {t.id: [c.model_dump() for c in t.gold] for t, _ in pairs}
    scripts = {"gold": gold.__getitem__, "noop": lambda _: []}
    rows = [json.loads(line) for line in (stack / "resources_servers/gs/data/all.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == [t.id for t, _ in pairs]
    rollouts = _collect(stack, [row for kind, calls_of in scripts.items() for row in _scripted(rows, kind, calls_of)], "scripted")
    backend = make_backend("sqlite")
    prepare_domains([d for _, d in pairs], backend)
    for kind, calls_of in scripts.items():
        played = [r for r in rollouts if r["responses_create_params"]["metadata"]["kind"] == kind]
        assert sorted(r["task_id"] for r in played) == sorted(gold)  # every row played once, none lost
        expected = _reference(pairs, backend, calls_of)
        mismatched = [r["task_id"] for r in played if r["verdict"] != expected[r["task_id"]]]
        assert not mismatched, f"{kind}: {len(mismatched)} verdicts differ from play's, e.g. {mismatched[:5]}"
        assert {r["reward"] for r in played} == {1.0 if kind == "gold" else 0.0}
        assert {r["finish_reason"] for r in played} == {"agent_done"}  # NeMo Gym's agent ends at its reply
        called = [o for o in played[0]["response"]["output"] if o["type"] == "function_call"]
        assert len(called) == len(calls_of(played[0]["task_id"]))  # the calls went through NeMo Gym's agent
    records = read_records(stack / "served.jsonl")  # every episode on record, with the verdict it was given
    assert len(records) == 2 * len(pairs)
    assert {r.agent for r in records} == {"gs_simple_agent"}
    assert sorted(r.verdict.reward for r in records) == [0] * len(pairs) + [1] * len(pairs)
    metrics = CliRunner().invoke(app, ["metrics", str(stack / "served.jsonl"), "--allow-incomplete", "--json"])
    assert metrics.exit_code == 0, metrics.output
    assert json.loads(metrics.stdout)["pass_at_1"] == 0.5  # each task once passed, once failed
