"""Tests that need verifiers 0.4 (`verifiers.v1`). They run in the separate `.venv-verifiers` environment
(`make test-verifiers`): verifiers pins `mcp==2.0.0`, below the `mcp>=2.3` of groundstate's MCP server, so the
main environment cannot hold both; there this folder is not collected. Presence is asked of the installed
distributions, as for verl."""

from importlib.metadata import PackageNotFoundError, version

try:
    HAVE_VERIFIERS = version("verifiers").startswith("0.4.")
except PackageNotFoundError:
    HAVE_VERIFIERS = False

collect_ignore_glob = [] if HAVE_VERIFIERS else ["test_*.py"]
