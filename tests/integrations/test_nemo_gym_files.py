"""`groundstate new nemo-gym`: the folder NeMo Gym starts the groundstate resources server from, written without NeMo
Gym. Its rows show the agent what `groundstate run` shows it at the start; NeMo Gym driving the folder is
tests/integrations/nemo_gym_env (NeMo Gym 0.4 has an environment of its own, `make test-nemo-gym`)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.integrations.loop import run_sync
from groundstate.integrations.nemo_gym_files import ROUTES, responses_tool, servable
from groundstate.state import make_backend
from groundstate.types import EpisodeLimits
from groundstate.worlds.selectors import select_tasks, state_graded_only


def _new(*args: str):
    return CliRunner().invoke(app, ["new", "nemo-gym", *args])


def test_the_folder_holds_app_config_and_a_dataset_per_split(tmp_path):
    result = _new("gs", "--tasks", "kiosk,retail,bench", "--dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    pairs = [(t, d) for t, d in select_tasks("kiosk,retail,bench") if not t.rubrics]
    rubric_tasks = len(select_tasks("kiosk,retail,bench")) - len(pairs)
    assert f"{len(pairs)} tasks" in result.output and f"left out: {rubric_tasks} tasks with reply rubrics" in result.output
    folder = tmp_path / "resources_servers" / "gs"
    assert "GroundstateResourcesServer.run_webserver()" in (folder / "app.py").read_text()
    assert (folder / "requirements.txt").read_text().startswith(("-e ", "groundstate=="))
    config = yaml.safe_load((folder / "configs" / "gs.yaml").read_text())
    server = config["gs_resources_server"]["resources_servers"]["gs"]
    assert server["entrypoint"] == "app.py" and server["tasks"] == "kiosk,retail,bench" and server["backend"] == "sqlite"
    agent = config["gs_simple_agent"]["responses_api_agents"]["simple_agent"]
    assert agent["resources_server"] == {"type": "resources_servers", "name": "gs_resources_server"}
    assert agent["max_steps"] == max(EpisodeLimits().turns_for(t) for t, _ in pairs) + 1
    kinds = {d["name"]: d["type"] for d in agent["datasets"]}
    assert kinds == {"all": "validation", "pool": "train", "bench": "validation", "example": "example"}
    assert all(d.get("license") == "Apache 2.0" for d in agent["datasets"] if d["type"] != "example")  # NeMo Gym asks one
    rows = [json.loads(line) for line in (folder / "data" / "all.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == [t.id for t, _ in pairs]
    assert len((folder / "data" / "example.jsonl").read_text().splitlines()) == 5
    bench = [json.loads(line)["task_id"] for line in (folder / "data" / "bench.jsonl").read_text().splitlines()]
    assert bench == [t.id for t, _ in pairs if t.split == "bench"]


def test_each_row_shows_what_run_shows_the_agent_at_the_start(tmp_path):
    assert _new("gs", "--tasks", "kiosk-cancel-001,hr", "--dir", str(tmp_path)).exit_code == 0
    rows = [json.loads(line) for line in (tmp_path / "resources_servers/gs/data/all.jsonl").read_text().splitlines()]
    backend = make_backend("sqlite")
    for row, (task, domain) in zip(rows, state_graded_only(select_tasks("kiosk-cancel-001,hr")), strict=True):

        async def opened(task=task, domain=domain):
            env = await domain.open_environment(task, backend, EpisodeLimits())
            try:
                return env.initial_messages(), env.tool_schemas()
            finally:
                await env.close()

        messages, tools = run_sync(opened())
        assert row["responses_create_params"]["input"] == messages
        assert row["responses_create_params"]["tools"] == [responses_tool(s) for s in tools]
        assert row["agent_ref"] == {"type": "responses_api_agents", "name": "gs_simple_agent"}
        assert row["responses_create_params"]["parallel_tool_calls"] is False  # one call, one turn, as `run` counts


def test_a_domain_folder_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    assert CliRunner().invoke(app, ["new", "domain", "shop", "--dir", str(tmp_path)]).exit_code == 0
    monkeypatch.chdir(tmp_path)  # the selector as a user types it, relative; the server runs in its own folder
    assert _new("gs", "--tasks", "shop", "--dir", "gym").exit_code == 0
    config = yaml.safe_load((tmp_path / "gym/resources_servers/gs/configs/gs.yaml").read_text())
    assert config["gs_resources_server"]["resources_servers"]["gs"]["tasks"] == str((tmp_path / "shop").resolve())
    agent = config["gs_simple_agent"]["responses_api_agents"]["simple_agent"]
    assert {d.get("license") for d in agent["datasets"] if d["type"] != "example"} == {"TBD"}  # not ours to license


def test_a_folder_that_only_shares_a_bundled_domains_name_is_not_made_a_path(tmp_path, monkeypatch):
    (tmp_path / "kiosk").mkdir()  # no domain.yaml: `kiosk` still selects the bundled domain, and must say so in the config
    monkeypatch.chdir(tmp_path)
    assert _new("gs", "--tasks", "kiosk", "--dir", "gym").exit_code == 0
    config = yaml.safe_load((tmp_path / "gym/resources_servers/gs/configs/gs.yaml").read_text())
    assert config["gs_resources_server"]["resources_servers"]["gs"]["tasks"] == "kiosk"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["Bad-Name", "--tasks", "kiosk"], "name 'Bad-Name': use lower-case letters"),
        (["gs", "--tasks", "retail-damaged-refund-001"], "all 1 selected tasks have reply rubrics"),
        (["gs", "--tasks", "no-such-task-*"], "matched no task"),
        (["gs", "--tasks", "kiosk", "--backend", "oracle"], "--backend 'oracle': use sqlite or postgres"),
    ],
)
def test_what_cannot_be_written_is_said(tmp_path, args, error):
    result = _new(*args, "--dir", str(tmp_path))
    assert result.exit_code != 0 and error in result.output, result.output
    assert not (tmp_path / "resources_servers").exists()


def test_a_dir_that_is_a_file_is_said_in_one_line(tmp_path):
    (tmp_path / "afile").write_text("")
    result = _new("gs", "--tasks", "kiosk", "--dir", str(tmp_path / "afile"))
    assert result.exit_code != 0 and "Traceback" not in result.output and "afile" in result.output, result.output


def test_an_existing_folder_is_never_overwritten(tmp_path):
    assert _new("gs", "--tasks", "kiosk", "--dir", str(tmp_path)).exit_code == 0
    (tmp_path / "resources_servers/gs/app.py").write_text("# mine")
    again = _new("gs", "--tasks", "kiosk", "--dir", str(tmp_path))
    assert again.exit_code != 0 and "exists" in again.output
    assert (tmp_path / "resources_servers/gs/app.py").read_text() == "# mine"


def test_a_tool_named_as_a_route_of_the_server_is_refused():
    (task, domain), *_ = select_tasks("kiosk")
    schema = domain.tools.openai_schemas()[0]
    assert schema["function"]["name"] not in ROUTES
    servable([(task, domain)])  # as it is
    original = domain.tools.openai_schemas
    try:
        domain.tools.openai_schemas = lambda: [{"type": "function", "function": {**schema["function"], "name": "verify"}}]
        with pytest.raises(ValueError, match="tool 'verify' would shadow the server's own route"):
            servable([(task, domain)])
    finally:
        domain.tools.openai_schemas = original
