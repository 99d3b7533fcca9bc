"""Tests that need verl 0.9.x. They run in the separate `.venv-verl` environment (`make test-verl`); the main
environment pins a newer transformers than verl accepts, so there this folder is not collected.

Whether verl is here is asked of the installed distributions, not of `import verl`: with the test folders on
`sys.path`, an import could find a folder named `verl` (a namespace package) instead of the library."""

from importlib.metadata import PackageNotFoundError, version

try:
    version("verl")
    HAVE_VERL = True
except PackageNotFoundError:
    HAVE_VERL = False

collect_ignore_glob = [] if HAVE_VERL else ["test_*.py"]
