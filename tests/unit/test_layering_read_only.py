"""The layering tests pass on a read-only copy of the repository (a checkout in a read-only image or volume): they read
the package and write nothing into it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Run in the copy: first make sure this process cannot write there (else the check proves nothing), then the tests.
DRIVER = """
import sys
import pytest

try:
    open(sys.argv[1] + "/groundstate/__write_probe__", "w")
except PermissionError:
    pass
else:
    sys.exit("the copy is writable by this process: the check would prove nothing")
sys.exit(pytest.main(sys.argv[2:]))
"""
# root writes whatever the modes say: without these capabilities it meets them like any other owner
ROOT_CAPABILITIES = "-dac_override,-dac_read_search,-fowner"


def _set_writable(tree: Path, writable: bool) -> None:
    for path in [tree, *tree.rglob("*")]:
        mode = path.lstat().st_mode
        path.chmod(mode | stat.S_IWUSR if writable else mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def test_the_layering_tests_pass_on_a_read_only_copy_of_the_repository(tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "groundstate", copy / "groundstate", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tests" / "unit").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "unit" / "test_layering.py", copy / "tests" / "unit")
    command = [sys.executable, "-c", DRIVER, str(copy), "-q", "-p", "no:cacheprovider", "--rootdir", str(copy), "tests/unit/test_layering.py"]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv is not None, "running as root, this check needs setpriv (util-linux) to give up writing past file modes"
        command = [setpriv, f"--bounding-set={ROOT_CAPABILITIES}", "--", *command]
    _set_writable(copy, False)
    try:
        r = subprocess.run(command, cwd=copy, capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    finally:
        _set_writable(copy, True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert " passed" in r.stdout and "failed" not in r.stdout
