"""JSON every reader can parse: never NaN or Infinity, which Python writes by default but JSON does not have.

Figures without a value (a rate over no task) are None in the first place; `finite` is the last guard of every JSON
file or line groundstate writes, turning any non-finite float left into null.

Tool-call arguments nested more than `MAX_DEPTH` levels deep are a malformed call (`too_deep`): Python's recursion
stops at about 1,000 frames, and the readers and writers a call passes through recurse once or twice per level.
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


MAX_DEPTH = 64  # levels of nested objects and arrays a tool call's arguments may have


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` nests dicts, lists and tuples more than `limit` levels deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def json_object(raw: str) -> dict[str, Any] | None:
    """`raw` parsed as a JSON object no deeper than `MAX_DEPTH`; None for anything else (not JSON, not an object, too
    deep, or past the parser's own recursion)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and not too_deep(value) else None


def dumps(value: Any, **kw: Any) -> str:
    """`json.dumps` of `finite(value)`, refusing anything non-finite left (a `default=` hook could still return one)."""
    return json.dumps(finite(value), allow_nan=False, **kw)
