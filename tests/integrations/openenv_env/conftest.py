"""Tests that need OpenEnv 0.10 (`openenv`, its Task API and RFC 008 validation). They run in the separate
`.venv-openenv` environment (`make test-openenv`): openenv 0.10 pulls fastmcp 3, which pins `mcp` 1.x, below the
`mcp>=2.3` of groundstate's MCP server, so the main environment cannot hold both; there this folder is not collected.
Presence is asked of the installed distributions, as for verifiers."""

from importlib.metadata import PackageNotFoundError, version

try:
    HAVE_OPENENV = version("openenv").startswith("0.10.")
except PackageNotFoundError:
    HAVE_OPENENV = False

collect_ignore_glob = [] if HAVE_OPENENV else ["test_*.py"]
