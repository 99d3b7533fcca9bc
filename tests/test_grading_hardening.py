"""Hardening of grading, model output and domain files (issue #15 items 6, 7, 9; issue #20 item 7).

- a rubric task whose final state failed is a 0, with or without a judge, and the judge is not asked;
- whatever the model emits (lone surrogates in a tool name, arguments or reply) is the agent's doing:
  a tool-call error or a failed attempt, never a system error;
- a broken domain folder fails before any attempt, naming the file, and leaves no database behind;
- `async def` and `*args`/`**kwargs` tools are refused when the domain loads.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
import yaml
from openai_stub import OpenAIStub, text
from typer.testing import CliRunner

from groundstate.agents.scripted import make_scripted_agent
from groundstate.cli import app
from groundstate.grading import grade, replay
from groundstate.results import read_records
from groundstate.tasks import Domain
from test_thinkingbox import tb  # noqa: F401 - the ThinkingBox dataset fixture

FIXTURES = Path(__file__).parent / "fixtures"
RUBRIC = "Does the reply confirm that order 1 was cancelled?"


def shop_copy(tmp_path: Path, name: str = "shop") -> Path:
    """A private copy of the shop fixture domain (its files may then be broken one at a time)."""
    folder = tmp_path / name
    shutil.copytree(FIXTURES / "shop", folder)
    return folder


def with_rubric_task(folder: Path) -> Path:
    """The shop's cancel task, with a reply rubric, as the folder's only task file."""
    (folder / "tasks" / "basic.yaml").write_text(yaml.safe_dump({"tasks": [{
        "id": "shop-cancel-told", "instruction": "Please cancel order 1.",
        "patch": {"orders": [{"id": 1, "customer_id": 1, "status": "pending", "total": 10.0}]},
        "gold": [{"tool": "cancel_order", "args": {"order_id": 1}}], "rubrics": [RUBRIC]}]}))
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
    folder = with_rubric_task(shop_copy(tmp_path))
    records = {}
    for agent in ("noop", "gold"):
        out = tmp_path / f"{agent}.jsonl"
        r = cli("run", "--agent", f"scripted:{agent}", "--tasks", str(folder), "--k", "2", "--out", str(out))
        assert r.exit_code == 0, r.output
        records[agent] = read_records(out)
    assert [(x["reward"], x["unjudged"], x["system_error"]) for x in records["noop"]] == [(0, False, None)] * 2
    assert [(x["reward"], x["unjudged"]) for x in records["gold"]] == [(None, True)] * 2
    m = cli("metrics", str(tmp_path / "noop.jsonl"), "--json")
    assert m.exit_code == 0, m.output
    assert '"clean_attempts": 2' in m.stdout and '"unjudged": 0' in m.stdout


def test_thinkingbox_rubric_case_with_failed_hash_is_zero_and_judge_not_asked(tb):
    from test_thinkingbox import _pairs, _play

    (_, _), (task, domain) = _pairs(tb)  # test_ticket: a ticket must be opened, and the reply judged
    assert task.rubrics
    for judge in (None, CountingJudge()):
        out = _play(task, domain, make_scripted_agent("scripted:noop", task, domain), judge=judge)
        v = out.verdict
        assert (v.reward, v.state_reward, v.unjudged, v.system_error) == (0, 0, False, None), v.reasons
        assert judge is None or judge.asked == 0
