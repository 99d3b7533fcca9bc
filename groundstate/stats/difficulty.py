"""A task's difficulty from its clean runs: the Jeffreys posterior of its success rate, its difficulty band and its
learning signal.

After c successes in n clean runs (system errors and unjudged attempts are not runs) the success rate p of a task has
the Jeffreys posterior Beta(c + ½, n − c + ½). From it:

- a *difficulty band*: the interval of fixed edges (default too_hard < 0.08 ≤ hard < 0.40 ≤ medium < 0.60
  ≤ easy < 0.90 ≤ too_easy) holding the largest posterior mass;
- a *learning signal*: the posterior expectation of p(1 − p) = ab / ((a + b)(a + b + 1)) for Beta(a, b),
  the expected reward variance, which is what a group-relative policy gradient learns from.
"""

from __future__ import annotations

from collections.abc import Sequence

BANDS = ("too_hard", "hard", "medium", "easy", "too_easy")
DEFAULT_EDGES = (0.08, 0.40, 0.60, 0.90)


def posterior(n: int, c: int) -> tuple[float, float]:
    """Jeffreys posterior Beta(a, b) of a success rate after c successes in n clean runs."""
    if n < 0 or not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n (n={n}, c={c})")
    return c + 0.5, n - c + 0.5


def check_edges(edges: Sequence[float]) -> tuple[float, ...]:
    edges = tuple(float(e) for e in edges)
    if len(edges) != len(BANDS) - 1:
        raise ValueError(f"need {len(BANDS) - 1} band edges (between {', '.join(BANDS)}), got {len(edges)}")
    if not all(0 < a < b < 1 for a, b in zip(edges, edges[1:], strict=False)) or not 0 < edges[0] < 1:
        raise ValueError(f"band edges must rise strictly inside (0, 1), got {list(edges)}")
    return edges


def band_masses(n: int, c: int, edges: Sequence[float] = DEFAULT_EDGES) -> dict[str, float]:
    """Posterior mass of each band: Beta CDF differences over [0, e1), [e1, e2), ..., [e4, 1]."""
    from scipy import stats  # imported here: 0.5 s that a process which never asks for it does not pay

    a, b = posterior(n, c)
    cuts = [0.0, *check_edges(edges), 1.0]
    cdf = [0.0] + [float(stats.beta.cdf(x, a, b)) for x in cuts[1:-1]] + [1.0]
    # cdf has one entry more than BANDS: each band takes the consecutive pair (lo, hi) that bounds it
    return {name: max(0.0, hi - lo) for name, lo, hi in zip(BANDS, cdf, cdf[1:], strict=False)}


def band_of(n: int, c: int, edges: Sequence[float] = DEFAULT_EDGES) -> str:
    """The band holding the largest posterior mass (a tie goes to the harder band)."""
    masses = band_masses(n, c, edges)
    return max(BANDS, key=lambda b: (masses[b], -BANDS.index(b)))


def signal(n: int, c: int) -> float:
    """Posterior expectation of p(1 − p) under Beta(c + ½, n − c + ½): ab / ((a + b)(a + b + 1)); at most ¼."""
    a, b = posterior(n, c)
    return a * b / ((a + b) * (a + b + 1))
