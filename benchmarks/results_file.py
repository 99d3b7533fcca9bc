"""The benchmarks' shared results file: each script merges its own keys into benchmarks/results.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_JSON = Path(__file__).resolve().parent / "results.json"


def merge(values: dict[str, Any]) -> Path:
    """Add or replace `values`' keys in results.json, keeping every other script's keys; returns its path."""
    merged = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    merged.update(values)
    RESULTS_JSON.write_text(json.dumps(merged, indent=1, ensure_ascii=False) + "\n")
    return RESULTS_JSON
