"""What a selection gives: one row per probed task, its counts and band histogram, and the bytes of its four files
(train.yaml, val.yaml, selection.jsonl, manifest.json), the same bytes for the same inputs and seed."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from groundstate import __version__
from groundstate.jsontext import dumps
from groundstate.pipeline.selection_rules import DECISIONS, SelectionParams, params_json
from groundstate.stats.difficulty import BANDS


@dataclass
class SelectionResult:
    rows: list[dict[str, Any]]
    params: SelectionParams
    inputs: dict[str, Any] = field(default_factory=dict)  # name -> {file, sha256} and set digests, for the manifest
    notes: list[str] = field(default_factory=list)

    def ids(self, decision: str) -> list[str]:
        return [r["task_id"] for r in self.rows if r["decision"] == decision]

    @property
    def train(self) -> list[str]:
        return self.ids("train")

    @property
    def val(self) -> list[str]:
        return self.ids("val")

    def banded(self, row: dict[str, Any]) -> bool:
        """Whether the probe banded `row`'s task: enough clean runs and no judge awaited, whatever its decision (an
        excluded task short of runs is not banded; one the reference's missing judge set apart is). The one rule of
        `counts()["bands"]` and `histogram()`."""
        return row["clean_runs"] >= self.params.min_clean_runs and not row["awaits_judge"]

    def counts(self) -> dict[str, Any]:
        """Tasks per decision and per band (`banded` ones), and the others by why they were not banded."""
        dec = Counter(r["decision"] for r in self.rows)
        bands = Counter(r["band"] for r in self.rows if self.banded(r))
        waiting = sum(1 for r in self.rows if r["awaits_judge"])
        return {
            "tasks": len(self.rows),
            "decisions": {d: dec.get(d, 0) for d in DECISIONS},
            "bands": {b: bands.get(b, 0) for b in BANDS},
            # bands + these = tasks: the probe's own judge awaited, or fewer than min_clean_runs clean runs
            "not_banded": {"awaits_judge": waiting, "insufficient_runs": len(self.rows) - sum(bands.values()) - waiting},
            "unresolved": sum(1 for r in self.rows if not r["resolved"]),
            "not_content_checked": sum(1 for r in self.rows if not r["content_checked"]),
            "group_fallbacks": sum(1 for r in self.rows if r["group_fallback"] and r["decision"] in ("train", "val")),
        }

    def histogram(self) -> list[dict[str, Any]]:
        """Per band: its interval, its `banded` tasks (those `counts()["bands"]` counts), and how many went to train, val
        or were set aside."""
        cuts = [0.0, *self.params.edges, 1.0]
        out = []
        for i, b in enumerate(BANDS):
            rows = [r for r in self.rows if r["band"] == b and self.banded(r)]
            d = Counter(r["decision"] for r in rows)
            out.append(
                {
                    "band": b,
                    "interval": [cuts[i], cuts[i + 1]],
                    "tasks": len(rows),
                    "train": d["train"],
                    "val": d["val"],
                    "set_aside": len(rows) - d["train"] - d["val"],
                    "kept_band": b in self.params.keep_bands,
                }
            )
        return out

    def summary(self) -> dict[str, Any]:
        c = self.counts()
        return {
            **c,
            "train": c["decisions"]["train"],
            "val": c["decisions"]["val"],
            "histogram": self.histogram(),
            "parameters": params_json(self.params),
            "notes": self.notes,
        }

    def render(self) -> dict[str, bytes]:
        """The output files' bytes, by name."""

        def header(side: str, n: int) -> str:
            return (
                f"# {side} split from `groundstate select` (seed {self.params.seed}, group by {self.params.group_by}): {n} tasks; usable as --tasks\n"
            )

        files = {
            "train.yaml": (header("train", len(self.train)) + yaml.safe_dump(self.train, default_flow_style=False)).encode(),
            "val.yaml": (header("validation", len(self.val)) + yaml.safe_dump(self.val, default_flow_style=False)).encode(),
            "selection.jsonl": "".join(dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in self.rows).encode(),
        }
        manifest = {
            "groundstate": __version__,
            "inputs": self.inputs,
            "parameters": params_json(self.params),
            "counts": self.counts(),
            "histogram": self.histogram(),
            "notes": self.notes,
            "outputs": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
        }
        files["manifest.json"] = (dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
        return files

    def write(self, out_dir: Path | str) -> dict[str, Path]:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name, data in self.render().items():
            (out_dir / name).write_bytes(data)
            paths[name] = out_dir / name
        return paths
