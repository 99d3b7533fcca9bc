"""Without τ²-bench installed (the main environment), a `tau2:` selector says how to get it, never a traceback. The τ²
world itself is tested in its own environment (`tests/integrations/tau2_env`, `make test-tau2`)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.worlds.selectors import select_tasks
from groundstate.worlds.tau2.runtime import Tau2Unavailable, installed_version

pytestmark = pytest.mark.skipif(installed_version() is not None, reason="τ²-bench is installed here")


def test_a_tau2_selector_without_tau2_says_how_to_install_it():
    with pytest.raises(Tau2Unavailable, match="make tau2-env"):
        select_tasks("tau2:airline")


def test_the_command_line_says_it_in_one_line(tmp_path):
    r = CliRunner().invoke(app, ["run", "--agent", "scripted:gold", "--tasks", "tau2:retail", "--out", str(tmp_path / "r.jsonl")])
    assert r.exit_code != 0 and "make tau2-env" in r.output and "Traceback" not in r.output


def test_telecom_and_unknown_domains_are_refused_before_anything_is_imported():
    for selector, says in (("tau2:telecom", "not supported yet"), ("tau2:banking", "use tau2:DOMAIN")):
        with pytest.raises(ValueError, match=says):
            select_tasks(selector)
