"""The ThinkingBox bridge: run ThinkingBox-format tasks and their MCP tool servers in groundstate.

`load_thinkingbox(DATASET_DIR, TEST_LIST)` hydrates test cases into `(Task, TbDomain)` pairs; configure the
domains with a `servers.yaml` (`configure_servers`) and every groundstate tool — runner, lint, metrics,
selection, GRPO — runs them through `groundstate.worlds.attempt.play`, a fresh server per attempt (forked from a
zygote that paid the server's imports once, `groundstate.tools.fork_pool`).
See docs/THINKINGBOX.md.
"""

from __future__ import annotations

from pathlib import Path

from groundstate.tasks import Task
from groundstate.worlds.thinkingbox.case import TbCase, deep_merge, merge_init
from groundstate.worlds.thinkingbox.dataset import TbDataset, load_thinkingbox
from groundstate.worlds.thinkingbox.domain import TbDomain
from groundstate.worlds.thinkingbox.servers import ServerSpec, load_servers

__all__ = [
    "ServerSpec",
    "TbCase",
    "TbDataset",
    "TbDomain",
    "configure_servers",
    "deep_merge",
    "load_servers",
    "load_thinkingbox",
    "merge_init",
    "parse_selector",
    "require_servers",
]

SELECTOR_PREFIX = "thinkingbox:"


def parse_selector(selector: str) -> tuple[Path, Path | None]:
    """`thinkingbox:DATASET_DIR[::TEST_LIST]` -> (dataset dir, test list or None)."""
    body = selector.removeprefix(SELECTOR_PREFIX)
    dataset, _, test_list = body.partition("::")
    if not dataset:
        raise ValueError(f"task selector {selector!r}: use thinkingbox:DATASET_DIR[::TEST_LIST]")
    return Path(dataset), Path(test_list) if test_list else None


def configure_servers(pairs: list[tuple[Task, object]], servers_file: Path | str | None, no_sources: bool = False) -> None:
    """Give the ThinkingBox domains among `pairs` their servers (from `servers_file`) and the `--tb-no-sources` choice."""
    servers = load_servers(servers_file) if servers_file is not None else None
    for _, domain in pairs:
        if isinstance(domain, TbDomain):
            domain.configure(servers, Path(servers_file).resolve() if servers_file is not None else None, no_sources)


def require_servers(pairs: list[tuple[Task, object]]) -> None:
    """Raise ValueError when ThinkingBox tasks are to be run without a servers file."""
    tb = [t.id for t, d in pairs if isinstance(d, TbDomain) and d.servers is None]
    if tb:
        raise ValueError(f"{len(tb)} ThinkingBox task(s) (e.g. {tb[0]}) need --tb-servers servers.yaml: how to start their MCP servers")
