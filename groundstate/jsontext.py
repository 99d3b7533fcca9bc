"""JSON every reader can parse: never NaN or Infinity, which Python writes by default but JSON does not have.

Figures without a value (a rate over no task) are None in the first place; `finite` is the last guard of every JSON
file or line groundstate writes, turning any non-finite float left into null.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """`value` with every non-finite float (NaN, ±Infinity) replaced by None, in dicts, lists and tuples at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kw: Any) -> str:
    """`json.dumps` of `finite(value)`, refusing anything non-finite left (a `default=` hook could still return one)."""
    return json.dumps(finite(value), allow_nan=False, **kw)
