"""One hydrated ThinkingBox test case as the bridge needs it beside its `Task`, and ThinkingBox's merge rules."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TbCase:
    """What the bridge needs of one hydrated ThinkingBox test case, beside its `Task`."""

    uid: str
    file: Path
    function: str
    scenario: str
    init: dict[str, dict[str, Any]]  # per server: the scenario's world_state merged with the test's init
    tools: tuple[str, ...]  # the scenario's tools: the only ones the agent sees
    overrides: dict[str, tuple[str | None, dict[str, str]]] = field(default_factory=dict)  # tool -> (description, argument descriptions)
    check: str = "benchmark"  # "benchmark" (hash equality, + yes/no rubrics) or "python" (arbitrary test code)
    test_code: str = ""  # the file with other test functions blanked (ThinkingBox's convention), for the framework path

    def init_config(self, server: str, no_sources: bool = False) -> dict[str, Any]:
        """The configuration `__reserved__init` gets; `no_sources` drops the knowledge-base `sources`."""
        cfg = copy.deepcopy(self.init.get(server) or {})
        if no_sources:
            cfg.pop("sources", None)
        return cfg


# -- merging ---------------------------------------------------------------------------------------


def deep_merge(a: Any, b: Any) -> Any:
    """ThinkingBox's recursive merge: mappings merge key by key (b wins), lists concatenate, else b replaces a."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = copy.deepcopy(a)
        for k, v in b.items():
            out[k] = deep_merge(out[k], v) if k in out else copy.deepcopy(v)
        return out
    if isinstance(a, list) and isinstance(b, list):
        return copy.deepcopy(a) + copy.deepcopy(b)
    return copy.deepcopy(b)


def merge_init(world_state: dict[str, Any], init: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per server: the scenario's world_state merged with the test's init (ThinkingBox's `merge_init_config`)."""
    out = {k: copy.deepcopy(v) for k, v in world_state.items()}
    for server, cfg in init.items():
        out[server] = deep_merge(out[server], cfg) if out.get(server) else copy.deepcopy(cfg)
    return out
