"""Prices and cost: USD per million tokens from the bundled `prices.yaml` (or `--prices FILE`), the price key of a
record's model, the cost of an attempt; a model without a price is named, never costed at 0."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from groundstate.records import AttemptRecord
from groundstate.specs import parse_agent

DEFAULT_PRICES = Path(__file__).parent / "prices.yaml"


# USD per million tokens: a thousand times the dearest model's price, and far enough below float's range that no run's
# tokens can turn a cost into Infinity (which no JSON reader can read back)
MAX_PRICE = 1_000_000


def load_prices(path: Path | None = None) -> dict[str, dict[str, float]]:
    """Model → USD per million tokens (`input`, `cached_input`, `output`); an override file extends the bundled table.

    A malformed file fails naming the file and the field (a wrong price would silently skew every cost figure).
    """
    from groundstate.tasks import TaskFileError, read_data_file

    prices: dict[str, dict[str, float]] = {}
    for f in [DEFAULT_PRICES] + ([Path(path)] if path is not None else []):
        table = read_data_file(f) or {}
        if not isinstance(table, dict):
            raise TaskFileError(f, "must map model names to prices")
        for model, p in table.items():
            if not isinstance(p, dict):
                raise TaskFileError(f, "must map input/cached_input/output to USD per million tokens", field=str(model))
            for key, usd in p.items():
                if key not in ("input", "cached_input", "output"):
                    raise TaskFileError(f, f"unknown price {key!r}: use input, cached_input or output", field=f"{model}.{key}")
                if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or not 0 <= usd <= MAX_PRICE:
                    raise TaskFileError(
                        f, f"a price must be a number from 0 to {MAX_PRICE:,.0f} USD per million tokens, got {usd!r:.60}", field=f"{model}.{key}"
                    )
            prices[str(model)] = {k: float(v) for k, v in p.items()}
    return prices


# a snapshot's date (`gpt-4.1-mini-2025-04-14`, `claude-3-5-sonnet-20241022`): the same model at the undated name's
# price. Nothing looser: `gpt-4.1-mini` is not `gpt-4.1`, and a fine-tune (`ft:gpt-4o-mini:...`) has prices of its own
_SNAPSHOT_DATE = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|20\d{6})$")


_ROUTER_PREFIX = "openai/"  # how OpenAI-compatible routers (OpenRouter, LiteLLM) name OpenAI's models


def record_model(r: AttemptRecord) -> str:
    """The model a record was made with, as a price table names it: its `model` field, else the MODEL of its agent spec
    (`openai:MODEL[@URL]`, `hf:PATH`), else the spec itself."""
    if r.model:
        return r.model
    spec = r.agent or (r.run.agent if r.run is not None else "") or ""
    try:
        return parse_agent(spec).model_name
    except ValueError:  # another tool's spec, or one that does not parse: its text is the name
        return spec


def price_key(r: AttemptRecord, prices: dict[str, dict[str, float]]) -> str | None:
    """The entry of `prices` that prices `r`'s model: its name (`record_model`), then its agent spec, exactly; else
    the name without a snapshot date or an `openai/` router prefix, also ignoring case. None when no entry fits."""
    names = [n for n in dict.fromkeys([record_model(r), r.agent or "", r.run.agent if r.run is not None else ""]) if n]
    for n in names:
        if n in prices:
            return n
    folded = {k.casefold(): k for k in prices}
    for n in names:
        base = _SNAPSHOT_DATE.sub("", n.removeprefix(_ROUTER_PREFIX)).casefold()
        if base in folded:
            return folded[base]
    return None


def is_scripted(r: AttemptRecord) -> bool:
    return (r.agent or (r.run.agent if r.run is not None else "") or "").startswith("scripted:")


def unpriced_models(records: Iterable[AttemptRecord], prices: dict[str, dict[str, float]]) -> dict[str, int]:
    """Attempts per model that `prices` has no price for (`price_key`), by the name a price table would use."""
    return dict(Counter(record_model(r) or "unknown" for r in records if not is_scripted(r) and price_key(r, prices) is None))


def cost_note(unpriced: dict[str, int]) -> str | None:
    """What a person reads where a cost would be: which models have no price, and how to give one."""
    if not unpriced:
        return None
    names = ", ".join(f"{m} ({n} attempts)" for m, n in sorted(unpriced.items()))
    example = next(iter(sorted(unpriced)))
    return (
        f"no price for {names}: cost not counted for them; give prices with --prices FILE, a YAML table such as "
        f"`{example}: {{input: X, cached_input: Y, output: Z}}` (USD per million input, cached input and output tokens)"
    )


def record_cost(r: AttemptRecord, prices: dict[str, dict[str, float]]) -> float | None:
    """USD of one attempt's tokens, those of the earlier tries it replaced included (`AttemptRecord.spent`), or None when
    its model has no price (`price_key`; scripted agents cost nothing)."""
    if is_scripted(r):
        return 0.0
    key = price_key(r, prices)
    if key is None:
        return None
    spent = r.spent
    return tokens_cost(spent.input_tokens, spent.cached_input_tokens, spent.output_tokens, prices[key])


def tokens_cost(input_tokens: int, cached_input_tokens: int, output_tokens: int, price: dict[str, float]) -> float:
    """USD of these tokens at `price` (USD per million `input`, `cached_input` — `input`'s where unset — and `output`
    tokens); cached input tokens are part of the input tokens and priced at the cached rate."""
    fresh = max(0, input_tokens - cached_input_tokens)
    cached = price.get("cached_input", price.get("input", 0))
    return (fresh * price.get("input", 0) + cached_input_tokens * cached + output_tokens * price.get("output", 0)) / 1e6
