"""Tests that need NeMo Gym 0.4 (`nemo-gym`). They run in the separate `.venv-nemogym` environment on Python 3.12
(`make test-nemo-gym`): NeMo Gym needs Python >= 3.12 and pins `mcp<2`, below the `mcp>=2.3` of groundstate's MCP
server, so the main environment (3.11) holds neither; there this folder is not collected. Presence is asked of the
installed distributions, as for verifiers and OpenEnv."""

from importlib.metadata import PackageNotFoundError, version

try:
    HAVE_NEMO_GYM = version("nemo-gym").startswith("0.4.")
except PackageNotFoundError:
    HAVE_NEMO_GYM = False

collect_ignore_glob = [] if HAVE_NEMO_GYM else ["test_*.py"]
