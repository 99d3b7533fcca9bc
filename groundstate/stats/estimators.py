"""The estimators behind every figure, per task from n clean attempts with c successes: pass@k (unbiased),
pass^k (unbiased, and the plug-in (c/n)^k some harnesses report), Jeffreys intervals; the labels and the choice of k."""

from __future__ import annotations

import math
from collections.abc import Iterable


def metric_label(name: str, k: int, n: int | None = None) -> str:
    """How every table names a metric key of `compute`/`compare` (`pass_at_k` → `pass@5`): one naming everywhere.
    Observed is named by n, the attempts it observed (default k)."""
    n = k if n is None else n
    labels = {"pass_at_1": "pass@1", "pass_at_k": f"pass@{k}", "pass_hat_k": f"pass^{k}", "observed_k_of_k_rate": f"Observed {n}/{n}"}
    return labels.get(name, name)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k: 1 − C(n−c, k)/C(n, k)."""
    _check(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k: C(c, k)/C(n, k)."""
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def pass_hat_k_plugin(n: int, c: int, k: int) -> float:
    """Plug-in pass^k: (c/n)^k (biased for small n; kept for comparison with published numbers)."""
    _check(n, c, k)
    return (c / n) ** k


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n) or n < 1:
        raise ValueError(f"need 0 <= c <= n and n >= 1 (n={n}, c={c})")
    if not 1 <= k <= n:
        raise ValueError(f"k={k} is outside 1..n={n}: pass@k needs at least k clean attempts")


def jeffreys_interval(n: int, c: int, level: float = 0.95) -> tuple[float, float]:
    """Jeffreys interval for a binomial rate: quantiles of Beta(c + ½, n − c + ½); ends pinned at 0 and 1."""
    from scipy import stats  # imported here: 0.5 s that a process which never asks for it does not pay

    a = (1 - level) / 2
    lo = 0.0 if c == 0 else float(stats.beta.ppf(a, c + 0.5, n - c + 0.5))
    hi = 1.0 if c == n else float(stats.beta.ppf(1 - a, c + 0.5, n - c + 0.5))
    return lo, hi


def parse_ks(text: str) -> list[int]:
    """`--k` text: one or more whole numbers >= 1, comma-separated (`5`, `1,5,20`); ValueError naming the bad one."""
    ks = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()) or len(part) > 9 or int(part) < 1:  # ² and 5,000 digits are digits to isdigit
            raise ValueError(
                f"--k {text!r}: {part!r} is not a whole number from 1 to 999999999 (give one k or several, comma-separated, e.g. 1,5,20)"
            )
        ks.append(int(part))
    return sorted(set(ks))


def check_ks(ks: Iterable[int] | int | None, n: int) -> list[int]:
    """The k to report, ascending (default: n); ValueError for a k outside 1..n (pass@k needs k clean attempts)."""
    ks = [n] if ks is None else [ks] if isinstance(ks, int) else sorted(set(ks))
    if not ks:
        raise ValueError("no k given")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k={k!r} is not a whole number >= 1")
        if k > n:
            raise ValueError(f"k={k} exceeds n={n}, the attempts per task: pass@k and pass^k are defined for k <= n")
    return ks
