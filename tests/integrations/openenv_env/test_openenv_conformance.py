"""`groundstate conformance` through OpenEnv 0.10's adapter: gold, no-op and every lint mutant of every bundled task
give the same verdict and change set through OpenEnv's environment as through `groundstate run` (TRL's and
Gymnasium's adapters are checked in the main environment: `tests/integrations/test_conformance.py`)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.integrations.conformance import _Paths
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.domain import Domain, iter_tasks

SHOP = Path(__file__).parents[2] / "fixtures" / "shop"


@pytest.mark.slow
def test_the_whole_bundled_suite_conforms_through_openenvs_adapter(tmp_path):
    out = tmp_path / "conformance.json"
    r = CliRunner().invoke(app, ["conformance", "--tasks", "all", "--adapters", "openenv", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output[-3000:]
    data = json.loads(out.read_text())
    assert data["adapters"] == ["openenv"] and data["skipped"] == {} and data["refused"] == {}
    assert data["tasks"] == len(iter_tasks()) >= 1019
    assert data["trajectories"] > 3 * data["tasks"] and data["checked"]["openenv"] == data["trajectories"]
    assert data["mismatches"] == []


def test_an_adapter_run_without_openenv_says_it_was_skipped(tmp_path):
    out = tmp_path / "c.json"
    r = CliRunner().invoke(app, ["conformance", "--tasks", "kiosk-cancel-00[12]", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())  # this environment has no TRL nor Gymnasium: only OpenEnv's adapter is compared
    assert data["adapters"] == ["openenv"] and set(data["skipped"]) == {"trl", "gymnasium"} and data["mismatches"] == []


def test_openenvs_path_hands_the_state_its_verdict_judged_to_the_observer():
    shop = Domain(SHOP)
    task = shop.task("shop-cancel")
    paths = _Paths(task, shop, SqliteBackend(), ["openenv"])
    gold = [c.model_dump() for c in task.gold]
    expected = paths.run(gold)
    assert expected.verdict["reward"] == 1 and any(c["table"] == "orders" for c in expected.changes)
    assert paths.drivers["openenv"](gold) == expected and paths.judged.changes is None
