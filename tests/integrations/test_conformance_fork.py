"""`groundstate conformance --fork`: each trajectory's second half played on a fork taken at its middle call gets the
verdict and change set of the same calls played straight through, on both backends; a fork that loses the prefix is
caught and named."""

import json
from pathlib import Path

from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.integrations.conformance import conformance, trajectories
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.domain import Domain

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"


def test_continuations_from_forks_agree_with_straight_through_on_both_backends(backend):
    shop = Domain(SHOP)
    pairs = [(shop.task(t), shop) for t in ("shop-cancel", "shop-multi", "shop-refuse")]
    report = conformance(pairs, backend, [], fork=True)
    assert report.adapters == [] and report.checked == {}
    assert report.forked == report.trajectories == sum(len(trajectories(t, d)) for t, d in pairs) > 3 * len(pairs)
    assert report.mismatches == [] and report.to_json()["forked"] == report.forked
    assert backend.in_use == 0


def test_a_fork_that_loses_the_prefix_is_caught(monkeypatch):
    def amnesiac(self, sandbox):  # a broken fork: the template's state, not the sandbox's
        return self.open(sandbox.template)

    monkeypatch.setattr(SqliteBackend, "fork", amnesiac)
    shop = Domain(SHOP)
    report = conformance([(shop.task("shop-multi"), shop)], SqliteBackend(), [], fork=True)
    assert report.forked == report.trajectories
    assert report.mismatches and {m.adapter for m in report.mismatches} == {"fork"}
    assert {m.field for m in report.mismatches} == {"verdict", "changes"}


def test_the_command_reports_forked_in_its_json(tmp_path):
    out = tmp_path / "c.json"
    r = CliRunner().invoke(app, ["conformance", "--tasks", "kiosk-cancel-001", "--adapters", "none", "--fork", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["adapters"] == [] and data["forked"] == data["trajectories"] > 0 and data["mismatches"] == []
    r = CliRunner().invoke(app, ["conformance", "--tasks", "kiosk-cancel-001", "--adapters", "trl", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["forked"] == 0
