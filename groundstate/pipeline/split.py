"""The train/validation split of a selection: deterministic, grouped, stratified by difficulty band."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from groundstate.stats.difficulty import BANDS


def _seeded(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\x00{key}".encode()).digest()[:8], "big")


@dataclass(frozen=True)
class SplitItem:
    task_id: str
    band: str
    group: str


def split(items: Sequence[SplitItem], test_fraction: float = 0.2, seed: int = 42) -> dict[str, str]:
    """Task id → 'train' or 'val'. Deterministic, no global random state.

    Groups stay whole. Each group is stratified by its most common band (ties: the harder band); within a
    stratum, groups are taken in seeded-hash order into validation while that brings the validation task
    count closer to test_fraction × the stratum's tasks.
    """
    if not 0 <= test_fraction <= 1:
        raise ValueError(f"test fraction must be in [0, 1], got {test_fraction}")
    members: dict[str, list[SplitItem]] = defaultdict(list)
    for it in items:
        members[it.group].append(it)
    strata: dict[str, list[str]] = defaultdict(list)
    for g, its in members.items():
        counts = Counter(it.band for it in its)
        order = {b: i for i, b in enumerate(BANDS)}
        strata[max(counts, key=lambda b: (counts[b], -order.get(b, len(BANDS)), b))].append(g)
    out: dict[str, str] = {}
    for stratum in sorted(strata):
        groups = sorted(strata[stratum], key=lambda g: (_seeded(seed, g), g))
        target = test_fraction * sum(len(members[g]) for g in groups)
        val = 0
        for g in groups:
            size = len(members[g])
            side = "val" if abs(val + size - target) < abs(val - target) else "train"
            val += size if side == "val" else 0
            for it in members[g]:
                out[it.task_id] = side
    return out
