"""Tests that need verl 0.9.x. They run in the separate `.venv-verl` environment (`make test-verl`); the main
environment pins a newer transformers than verl accepts, so there this folder is not collected."""

try:
    import verl  # noqa: F401

    HAVE_VERL = True
except ImportError:
    HAVE_VERL = False

collect_ignore_glob = [] if HAVE_VERL else ["test_*.py"]
