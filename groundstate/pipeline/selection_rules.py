"""The rules of a selection: its parameters, and the decision each probed task gets (first rule that applies)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from groundstate.stats.difficulty import BANDS, DEFAULT_EDGES, check_edges

DEFAULT_KEEP = ("hard", "medium", "easy")
DECISIONS = ("train", "val", "excluded", "dropped_band", "dropped_signal", "insufficient_runs", "failed_reference_gate", "awaits_judge")
GROUP_BY = ("template", "family", "domain", "none")


@dataclass(frozen=True)
class SelectionParams:
    edges: tuple[float, ...] = DEFAULT_EDGES
    keep_bands: tuple[str, ...] = DEFAULT_KEEP
    min_clean_runs: int = 3
    min_signal: float = 0.0
    reference_min_runs: int = 1
    near_dup_threshold: float = 0.7
    num_perm: int = 128
    group_by: str = "template"
    test_fraction: float = 0.2
    seed: int = 42
    require_content_check: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "edges", check_edges(self.edges))
        object.__setattr__(self, "keep_bands", tuple(self.keep_bands))
        unknown = [b for b in self.keep_bands if b not in BANDS]
        if unknown:
            raise ValueError(f"unknown bands {unknown}: choose from {', '.join(BANDS)}")
        if self.group_by not in GROUP_BY:
            raise ValueError(f"group-by must be one of {', '.join(GROUP_BY)}, got {self.group_by!r}")
        if not 0 <= self.test_fraction <= 1:
            raise ValueError(f"test fraction must be in [0, 1], got {self.test_fraction}")
        if self.min_clean_runs < 1 or self.reference_min_runs < 1:
            raise ValueError("minimum run counts must be at least 1")
        if not 0 < self.near_dup_threshold <= 1:
            raise ValueError(f"near-duplicate threshold must be in (0, 1], got {self.near_dup_threshold}")


def group_key(group_by: str, task_id: str, meta: Mapping[str, Any]) -> tuple[str, bool]:
    """The grouping value, and whether it fell back to the task id (no such attribute)."""
    if group_by == "none":
        return task_id, False
    value = meta.get(group_by)
    if value in (None, "", "unspecified"):
        return f"task:{task_id}", True
    return f"{group_by}:{value}", False


def params_json(p: SelectionParams) -> dict[str, Any]:
    """The parameters as written in the manifest and the summary (tuples as lists)."""
    d = asdict(p)
    d["edges"], d["keep_bands"] = list(p.edges), list(p.keep_bands)
    return d


_RULE_TEXT = {
    "id": "same task id as excluded task {task_id}",
    "patch_gold": "same data patch and gold solution as excluded task {task_id} (rule patch_gold)",
    "instruction": "same normalised instruction as excluded task {task_id} (rule instruction)",
    "near_duplicate_instruction": "instruction near-duplicate of excluded task {task_id} (rule near_duplicate_instruction, Jaccard {jaccard:.2f})",
}


def decide(row: dict[str, Any], p: SelectionParams, gated: bool) -> tuple[str, str]:
    """(decision, reason) of one row, by the first rule that applies; "eligible" (with a reason suffix) goes to the split.
    `gated`: a reference run was given (the row then has `reference`)."""
    if row["exclusions"]:
        first = row["exclusions"][0]
        text = _RULE_TEXT[first["rule"]].format(**first)
        more = len(row["exclusions"]) - 1
        return "excluded", "benchmark overlap: " + text + (f" (+{more} more matches)" if more else "")
    if p.require_content_check and not row["content_checked"]:
        return "excluded", "task definition not found, so it could not be content-checked against the exclude set (--require-content-check)"
    if row["awaits_judge"]:  # the one rule of every figure (`stats.basis`): its rate would count only the state's failures
        return "awaits_judge", (
            f"reply rubrics probed without a judge: {row['unjudged']} unjudged attempts (state passed), "
            f"{row['clean_runs'] - row['successes']} failed on state; probe with --judge to band it"
        )
    if row["clean_runs"] < p.min_clean_runs:
        return "insufficient_runs", (
            f"{row['clean_runs']} clean runs < {p.min_clean_runs} ({row['system_errors']} system errors, {row['unjudged']} unjudged not counted)"
        )
    if gated:
        ref = row["reference"]
        if ref["awaits_judge"]:  # the one rule again: its state failures alone would say "never solved"
            return "awaits_judge", "the reference run has this task's reply rubrics and no judge: give the reference run a --judge to gate it"
        if ref["clean_runs"] == 0:
            return "failed_reference_gate", "no clean reference runs of this task"
        if ref["clean_runs"] < p.reference_min_runs:
            return "failed_reference_gate", f"only {ref['clean_runs']} clean reference runs < {p.reference_min_runs}"
        if ref["successes"] == 0:
            return "failed_reference_gate", f"the reference never solved it (0/{ref['clean_runs']} clean runs)"
    if row["band"] not in p.keep_bands:
        return "dropped_band", (
            f"band {row['band']} (posterior mass {row['band_masses'][row['band']]:.2f}, "
            f"{row['successes']}/{row['clean_runs']}) not in kept bands {','.join(p.keep_bands)}"
        )
    if row["signal"] < p.min_signal:
        return "dropped_signal", f"signal {row['signal']:.4f} < minimum {p.min_signal}"
    suffix = "" if row["content_checked"] else "; not content-checked (task definition not found)"
    return "eligible", suffix
