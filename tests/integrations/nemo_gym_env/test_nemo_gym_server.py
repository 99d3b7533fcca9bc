"""The groundstate resources server as NeMo Gym builds it (`SimpleResourcesServer`, its session middleware and
routes), driven over HTTP in process, a session per client (its cookie), as NeMo Gym's agents call it: careless and
hostile calls get a one-line error, never a traceback or a reward; a system error is NeMo Gym's failed rollout."""

from __future__ import annotations

import json
import sys
import time

import pytest
from fastapi.testclient import TestClient
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.rollout_collection import NG_FAILURE_CLASS_KEY as NEMO_GYM_FAILURE_KEY
from nemo_gym.server_utils import ServerClient
from omegaconf import OmegaConf

from groundstate.integrations import nemo_gym
from groundstate.integrations.nemo_gym import GroundstateResourcesServer, GroundstateResourcesServerConfig
from groundstate.records import read_records
from groundstate.worlds.domain import Domain

TASK = "kiosk-cancel-001"  # gold: cancel_kiosk_order(order_id=1014)


def _server(**options) -> GroundstateResourcesServer:
    config = GroundstateResourcesServerConfig(host="127.0.0.1", port=1, entrypoint="app.py", name="gs", **({"tasks": "kiosk"} | options))
    client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=1), global_config_dict=OmegaConf.create({}))
    return GroundstateResourcesServer(config=config, server_client=client)


@pytest.fixture
def app():
    return _server().setup_webserver()


def _row(task_id: str = TASK, agent: object = "my_agent") -> dict:
    return {"task_id": task_id, "responses_create_params": {"input": "hi"}, "agent_ref": {"type": "responses_api_agents", "name": agent}}


def _verify(client: TestClient, text: str = "Done.", status: int = 200, **row) -> dict:
    response = {
        "id": "resp_1",
        "created_at": 0,
        "model": "m",
        "object": "response",
        "output": [
            {
                "type": "message",
                "id": "m1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
    }
    body = json.dumps({"responses_create_params": {"input": "hi"}, "response": response, **row})  # ASCII: a lone surrogate travels as an escape
    answer = client.post("/verify", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == status, answer.text
    return answer.json()


def test_gold_then_the_session_is_closed(app):
    with TestClient(app) as client:
        assert client.post("/seed_session", json=_row()).status_code == 200
        answer = client.post("/cancel_kiosk_order", json={"order_id": 1014})
        assert answer.status_code == 200 and "error" not in answer.text.lower()
        result = _verify(client)
        assert result["reward"] == 1.0 and result["task_id"] == TASK and result["finish_reason"] == "agent_done"
        assert result["verdict"]["reasons"] == ["final state matches the golden state"]
        assert "diff" not in result["verdict"]  # the default summary names what failed, never the golden rows
        late = client.post("/cancel_kiosk_order", json={"order_id": 1014})
        assert late.status_code == 409 and "the attempt is over" in late.text and "not run" in late.text
        assert _verify(client) == result  # a verify repeated (a retry, a race) gets the same answer


def test_careless_calls_are_answered_not_crashed(app):
    with TestClient(app) as client:
        before = client.post("/cancel_kiosk_order", json={"order_id": 1014})
        assert before.status_code == 409 and "/seed_session first" in before.text
        assert client.post("/verify", json={"responses_create_params": {}, "response": {}}).status_code in (409, 422)
        unknown = client.post("/seed_session", json=_row("no-such-task"))
        assert unknown.status_code == 422 and "not one of this server's tasks" in unknown.text
        assert client.post("/seed_session", json={"responses_create_params": {"input": "hi"}}).status_code == 422  # no task_id
        assert client.post("/seed_session", json=_row()).status_code == 200
        deep = b"[" * 5000 + b"]" * 5000  # past what the JSON parser takes
        for body in (b"[1, 2]", b"not json", b'"text"', b'{"order_id": "1014; DROP TABLE kiosk_orders"}', deep):
            answer = client.post("/cancel_kiosk_order", content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 200 and "error" in answer.text.lower(), (body, answer.text)
        result = _verify(client)
        assert result["reward"] == 0.0 and NEMO_GYM_FAILURE_KEY not in result  # the agent's failure, graded


def test_a_model_cannot_swap_its_task_by_calling_the_servers_routes(app):
    """NeMo Gym's agent posts any function call the model makes to `/{name}` with the session's cookie: a call named
    `seed_session` or `verify` reaches those routes. Neither swaps the attempt, nor is a rollout graded twice."""
    with TestClient(app) as client:
        assert client.post("/seed_session", json=_row()).status_code == 200
        assert client.post("/seed_session", json=_row()).status_code == 200  # the same seed again, nothing played: the same attempt
        client.post("/cancel_kiosk_order", json={"order_id": 1014})
        swapped = client.post("/seed_session", json=_row("kiosk-cancel-002"))
        assert swapped.status_code == 409 and "already holds an attempt of task kiosk-cancel-001" in swapped.text
        _verify(client, status=409, task_id="kiosk-cancel-002")  # the row NeMo Gym verifies names another task
        result = _verify(client)
        assert result["reward"] == 1.0 and result["task_id"] == TASK


def test_an_unknown_tool_is_answered_as_run_answers_it(app):
    with TestClient(app) as client:
        client.post("/seed_session", json=_row())
        answer = client.post("/no_such_tool", json={})
        assert answer.status_code == 200 and "unknown tool" in answer.text.lower()


def test_a_verify_repeated_or_raced_is_graded_and_recorded_once(tmp_path):
    app = _server(out=str(tmp_path / "served.jsonl")).setup_webserver()
    with TestClient(app) as client:
        client.post("/seed_session", json=_row())
        client.post("/cancel_kiosk_order", json={"order_id": 1014})
        first, second = _verify(client, "Done \ud800 here", task_id=TASK), _verify(client)  # a lone surrogate in the reply: written
        assert first["reward"] == second["reward"] == 1.0 and first["verdict"] == second["verdict"]
    assert len(read_records(tmp_path / "served.jsonl")) == 1


def test_sandboxes_are_bounded_and_freed():
    app = _server(max_sessions=1).setup_webserver()
    with TestClient(app) as first, TestClient(app) as second:
        assert first.post("/seed_session", json=_row()).status_code == 200
        full = second.post("/seed_session", json=_row())
        assert full.status_code == 503 and "every sandbox is in use" in full.text
        _verify(first)
        assert second.post("/seed_session", json=_row()).status_code == 200


def test_an_idle_session_is_closed():
    app = _server(idle_timeout=0.2).setup_webserver()
    with TestClient(app) as client:
        client.post("/seed_session", json=_row())
        time.sleep(1.5)
        assert client.post("/cancel_kiosk_order", json={"order_id": 1014}).status_code == 409


def test_a_system_error_is_nemo_gyms_failed_rollout_not_a_reward(monkeypatch, tmp_path):
    async def broken(*_args, **_kw):
        raise ConnectionError("the database went away")

    assert nemo_gym.NG_FAILURE_CLASS_KEY == NEMO_GYM_FAILURE_KEY  # NeMo Gym's own mark, spelled as it spells it
    app = _server(out=str(tmp_path / "served.jsonl")).setup_webserver()
    monkeypatch.setattr(Domain, "open_environment", broken)
    with TestClient(app) as client:
        assert client.post("/seed_session", json=_row(agent="x" * 10_000)).status_code == 200
        result = _verify(client)
        assert result[NEMO_GYM_FAILURE_KEY] == nemo_gym.SYSTEM_ERROR
        assert result["verdict"]["system_error"] is not None and "database went away" not in str(result["verdict"])
    (record,) = read_records(tmp_path / "served.jsonl")
    assert record.verdict.system_error is not None and record.verdict.reward is None
    assert record.agent != "x" * 10_000  # a name no record holds: the client's default


def test_records_name_the_agent(tmp_path):
    app = _server(out=str(tmp_path / "served.jsonl")).setup_webserver()
    with TestClient(app) as client:
        client.post("/seed_session", json=_row(agent="my_agent"))
        client.post("/cancel_kiosk_order", json={"order_id": 1014})
        _verify(client)
    (record,) = read_records(tmp_path / "served.jsonl")
    assert record.agent == "my_agent" and record.verdict.reward == 1 and record.task_id == TASK


def test_what_cannot_be_served_stops_the_server_first():
    with pytest.raises(ValueError, match="reply rubrics"):
        _server(tasks="retail-damaged-refund-001")  # its only task is judged on the reply
    with pytest.raises(ValueError, match="num_workers"):
        _server(num_workers=2)


def test_an_llm_user_without_the_openai_client_stops_the_server_first(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # an install without the openai extra
    with pytest.raises(ValueError, match="user: needs the openai package"):
        _server(user="openai:m@http://127.0.0.1:1/v1")


def test_a_misspelt_key_of_the_servers_config_is_an_error_naming_the_key_it_meant():
    for key, meant in (("max_session", "max_sessions"), ("idle-timeout", "idle_timeout"), ("reveal_verdicts", "reveal_verdict")):
        with pytest.raises(ValueError, match=f"unknown key '{key}'.*did you mean '{meant}'"):
            _server(**{key: 1})
    served = _server(datasets=[], verified=False, description="NeMo Gym's own keys")  # neither ours nor near one: let through
    assert served.config.max_sessions == 64
