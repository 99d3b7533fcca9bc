"""`groundstate conformance`: gold, no-op and every lint mutant give the same verdict and change set through TRL's
environment and Gymnasium's as through `groundstate run`; a diverging adapter is caught and named. OpenEnv's adapter
is checked in OpenEnv 0.10's own environment (`tests/integrations/openenv_env/test_openenv_conformance.py`): here it
is reported as skipped."""

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser
from groundstate.cli import app
from groundstate.integrations.conformance import ADAPTERS, NO_REPLY, _Paths, conformance, trajectories
from groundstate.state.changes import ChangeSet
from groundstate.state.sqlite import SqliteBackend
from groundstate.tasks import Task
from groundstate.types import EpisodeLimits, Trajectory, Verdict
from groundstate.worlds.attempt import play
from groundstate.worlds.domain import Domain, bundled_domains, iter_tasks

SHOP = str(Path(__file__).parents[1] / "fixtures" / "shop")
HERE = ["trl", "gymnasium"]  # the adapters whose frameworks the main environment has
SKIPPED = {"openenv": "openenv is not installed"}


def test_every_adapter_agrees_with_run_on_a_sample_of_every_domain():
    pairs = [p for name in bundled_domains() for p in iter_tasks([name])[:2]]
    report = conformance(pairs, SqliteBackend())
    assert report.skipped == SKIPPED and report.adapters == HERE
    assert report.tasks == len(pairs) and report.trajectories > 3 * len(pairs)  # gold, no-op and mutants
    rubric = [(t, d) for t, d in pairs if t.rubrics]  # hr's first template asks the reply for a date
    assert rubric and report.refused == {"trl": {"tasks": len(rubric), "reason": NO_REPLY["trl"]}}
    refused = sum(len(trajectories(t, d)) for t, d in rubric)
    assert report.checked == {"trl": report.trajectories - refused, "gymnasium": report.trajectories}
    assert report.mismatches == []


@pytest.mark.slow
def test_the_whole_bundled_suite_conforms_through_every_adapter(tmp_path):
    """Issue #17's promise, as a user runs it: `groundstate conformance --tasks all --json` over every bundled task
    (gold, no-op and every lint mutant through `run`'s path and each adapter), 0 mismatches."""
    out = tmp_path / "conformance.json"
    r = CliRunner().invoke(app, ["conformance", "--tasks", "all", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output[-3000:]
    data = json.loads(out.read_text())
    assert data["adapters"] == HERE and data["skipped"] == SKIPPED
    assert data["tasks"] == len(iter_tasks()) >= 1019
    assert data["trajectories"] > 3 * data["tasks"] and data["checked"]["gymnasium"] == data["trajectories"]
    # TRL refuses the 48 rubric tasks (its environment never sees the final reply); Gymnasium's compares them
    assert data["refused"] == {"trl": {"tasks": 48, "reason": "TRL's environment_factory gives the environment no final reply to judge"}}
    assert 0 < data["trajectories"] - data["checked"]["trl"] < 48 * 30
    assert data["mismatches"] == []


def test_an_adapter_that_diverges_is_caught_naming_it(monkeypatch):
    from groundstate.integrations import gymnasium

    real = gymnasium.parse_response

    def drops_the_second_argument(text, tools=None, id_offset=0):  # an adapter bug: one argument lost on the way
        parsed = real(text, tools, id_offset)
        for call in parsed.tool_calls:
            if isinstance(call.arguments, dict) and len(call.arguments) > 1:
                call.arguments.pop(sorted(call.arguments)[-1])
        return parsed

    monkeypatch.setattr(gymnasium, "parse_response", drops_the_second_argument)
    from groundstate.worlds.domain import Domain

    shop = Domain(Path(SHOP))
    report = conformance([(shop.task("shop-multi"), shop)], SqliteBackend(), ["gymnasium", "trl"])
    assert report.checked == {"gymnasium": report.trajectories, "trl": report.trajectories}
    assert report.mismatches and {m.adapter for m in report.mismatches} == {"gymnasium"}
    assert {m.task_id for m in report.mismatches} == {"shop-multi"} and "gold" in {m.trajectory for m in report.mismatches}


def test_the_command_prints_the_json_report_and_refuses_unknown_adapters(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["conformance", "--tasks", "kiosk-cancel-00[12]", "--json", "--out", str(tmp_path / "c.json")])
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "c.json").read_text())
    assert set(data) >= {"adapters", "tasks", "trajectories", "mismatches"}
    assert data["tasks"] == 2 and data["mismatches"] == [] and data["adapters"] == HERE
    r = runner.invoke(app, ["conformance", "--tasks", "kiosk-cancel-001", "--adapters", "trl,nosuch"])
    assert r.exit_code == 2 and "unknown adapter(s) nosuch" in r.output


def test_a_rubric_task_is_compared_where_a_reply_is_seen_and_refused_by_trl():
    from groundstate.worlds.domain import Domain

    shop = Domain(Path(SHOP))
    task = shop.task("shop-cancel").model_copy(update={"rubrics": ["Was the user told?"]})
    report = conformance([(task, shop)], SqliteBackend())
    assert report.refused == {"trl": {"tasks": 1, "reason": NO_REPLY["trl"]}} and report.checked["trl"] == 0
    assert report.checked["gymnasium"] == report.trajectories > 0 and report.mismatches == []


class Seen:
    """An `AttemptObserver` that keeps every grading it is shown."""

    def __init__(self) -> None:
        self.gradings: list[tuple[str, Trajectory, Verdict, ChangeSet | None]] = []

    def graded(self, task: Task, trajectory: Trajectory, verdict: Verdict, changes: ChangeSet | None) -> None:
        self.gradings.append((task.id, trajectory, verdict, changes))


def test_every_path_hands_the_state_its_verdict_judged_to_the_observer():
    """Conformance reads each path's change set through the observer each one takes in its own API: the gold's write
    reaches it through `play`, TRL's environment_factory and Gymnasium's TextEnv (OpenEnv's: in its environment)."""
    shop = Domain(Path(SHOP))
    task = shop.task("shop-cancel")
    paths = _Paths(task, shop, SqliteBackend(), HERE)
    gold = [c.model_dump() for c in task.gold]
    expected = paths.run(gold)
    assert expected.verdict["reward"] == 1 and expected.changes and any(c["table"] == "orders" for c in expected.changes)
    assert sorted(paths.drivers) == sorted(HERE) and set(ADAPTERS) == {*HERE, *SKIPPED}
    for adapter, drive in paths.drivers.items():
        assert drive(gold) == expected, adapter
        assert paths.judged.changes is None  # taken by the comparison: the next attempt starts with none


def test_play_shows_the_observer_each_graded_attempt_once():
    shop = Domain(Path(SHOP))
    task = shop.task("shop-cancel")
    gold = [c.model_dump() for c in task.gold]
    backend = SqliteBackend()

    def attempt(observer, limits=None):
        agent, user = ScriptedAgent(gold), ScriptedUser(task.user.script)
        return asyncio.run(play(task, shop, agent, user, limits or EpisodeLimits(), backend=backend, keep_changes=True, observer=observer))

    seen = Seen()
    out = attempt(seen)
    assert [(t, traj, v) for t, traj, v, _ in seen.gradings] == [(task.id, out.trajectory, out.verdict)]
    assert out.verdict.reward == 1 and seen.gradings[0][3].to_json() == out.changes.to_json()  # gold's write, as graded

    seen = Seen()
    out = attempt(seen, EpisodeLimits(grade_timeout=1e-6))  # grading cannot finish: a system error, and nothing graded to see
    assert out.verdict.system_error is not None and seen.gradings == []

    class Raises:
        def graded(self, task, trajectory, verdict, changes):
            raise RuntimeError("the observer broke")

    out = attempt(Raises())  # the observer is part of grading: its failure is the attempt's system error, never a 0
    assert out.verdict.reward is None and "the observer broke" in out.verdict.system_error
