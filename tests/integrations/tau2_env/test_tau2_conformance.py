"""τ²'s tasks through every adapter the main environment has (and forks) against `groundstate run`'s path;
OpenEnv's adapter is checked in its own environment (`tests/integrations/openenv_env/test_tau2_serve.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SELECTION = "tau2:telecom:small,tau2:mock"
CLI = str(Path(sys.executable).parent / "groundstate")


def test_conformance_of_taus_tasks_through_every_adapter_that_serves_them(tmp_path):
    done = subprocess.run(
        [CLI, "conformance", "--tasks", SELECTION, "--fork", "--out", "conformance.json"], cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "conformance.json").read_text())
    assert report["mismatches"] == [] and report["tasks"] == 29 and report["forked"] == report["trajectories"] > 100
    assert report["checked"]["gymnasium"] == report["trajectories"] and "openenv" in report["skipped"]  # its own environment: openenv_env
    assert report["refused"]["trl"]["tasks"] == 29 and "SQL domain" in report["refused"]["trl"]["reason"]
