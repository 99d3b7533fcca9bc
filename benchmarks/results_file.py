"""The benchmarks' shared results: each script merges its own keys into benchmarks/results.json and refreshes its own
sections of benchmarks/RESULTS.md (each between its start and end markers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_JSON = Path(__file__).resolve().parent / "results.json"
RESULTS_MD = Path(__file__).resolve().parent / "RESULTS.md"


def merge(values: dict[str, Any]) -> Path:
    """Add or replace `values`' keys in results.json, keeping every other script's keys; returns its path."""
    merged = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    merged.update(values)
    RESULTS_JSON.write_text(json.dumps(merged, indent=1, ensure_ascii=False) + "\n")
    return RESULTS_JSON


def write_section(section: str, start: str, end: str, after: str | None = None) -> Path:
    """Put `section` (which begins with the marker `start` and ends with `end`) into RESULTS.md in place of the one
    between those markers; where there is none yet, after the marker `after` (if present), else at the end. Returns
    the file's path."""
    text = RESULTS_MD.read_text() if RESULTS_MD.exists() else "# Measured results\n"
    if start in text:
        head = text[: text.index(start)]
        tail = text[text.index(end) + len(end) :].lstrip("\n") if end in text else ""
        text = head + section.rstrip("\n") + "\n" + ("\n" + tail if tail else "")
    else:
        at = text.index(after) + len(after) if after is not None and after in text else len(text)
        text = text[:at].rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n" + ("\n" + text[at:].lstrip("\n") if text[at:].strip() else "")
    RESULTS_MD.write_text(text)
    return RESULTS_MD
