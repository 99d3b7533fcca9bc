import os
from pathlib import Path

# Wide enough that rich never wraps a message: tests match messages that hold long temporary paths, which a
# parallel run (pytest -n, one temporary folder per worker) makes longer still. Set before any console exists.
os.environ["COLUMNS"] = "400"

import psycopg
import pytest

from groundstate.state.postgres import PostgresBackend, default_dsn
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.domain import Domain

FIXTURES = Path(__file__).parent / "fixtures"


def _pg_available() -> bool:
    try:
        psycopg.connect(default_dsn(), connect_timeout=3).close()
        return True
    except psycopg.Error:
        return False


PG_AVAILABLE = _pg_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files that hold a slow test first, the rest after them, each group in collection order: a run of the whole suite
    hands whole files to its two workers in this order (`--dist loadfile --no-loadscope-reorder`), so the long files
    start first and short ones fill in behind them, instead of a long file starting last while the other worker idles.
    `make test` deselects the slow tests and `make test-slow` keeps only them, so in either the order is the files'."""
    slow = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in slow)


@pytest.fixture(scope="module")
def tb(tmp_path_factory) -> dict[str, Path]:
    """A ThinkingBox-format dataset directory, test lists and servers files (tests/tb_standin.py), per module."""
    from tb_standin import write_dataset

    return write_dataset(tmp_path_factory.mktemp("tb"))


@pytest.fixture(scope="session")
def shop() -> Domain:
    return Domain(FIXTURES / "shop")


@pytest.fixture(scope="session")
def tiny_shop_model(shop, tmp_path_factory) -> Path:
    """A tiny random Qwen2 folder with a tokenizer trained on the shop fixture's text, prompts without tools or system
    message (what forced-decision policies over the shop fixture run on; needs torch and transformers)."""
    import json

    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from groundstate.agents.local import PROMPT_FLAGS
    from groundstate.train.tiny import domain_corpus, save_tiny

    d = tmp_path_factory.mktemp("tiny-shop")
    save_tiny(d, domain_corpus(shop, repeat=1), vocab_size=400, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    (d / PROMPT_FLAGS).write_text(json.dumps({"tools_in_prompt": False, "system_in_prompt": False}))
    return d


@pytest.fixture(scope="session")
def pg_backend():
    if not PG_AVAILABLE:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required in CI but {default_dsn()} is not reachable")
        pytest.skip("PostgreSQL not reachable")
    backend = PostgresBackend()
    backend.cleanup_stale()  # sandbox databases of processes that were killed
    yield backend
    backend.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    if request.param == "sqlite":
        return SqliteBackend()
    return request.getfixturevalue("pg_backend")
