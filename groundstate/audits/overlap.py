"""Benchmark overlap: the exclude set (tasks never to train on) and which candidate tasks match it.

A candidate matches an excluded task by id, or by content: fingerprints of the normalised instruction and of the data
patch + gold solution, which ignore the domain name and the id, and near-duplicate instructions
(`audits.near_duplicates`). The exclude set is built from task selectors (e.g. `bench`) and files of task ids; ids
without a loadable definition are checked by id only.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from groundstate.audits.near_duplicates import near_duplicates, normalise_instruction
from groundstate.tasks import Task


def _canonical(value: Any) -> Any:
    """JSON-ready value with integral floats as ints (YAML `10.0` and `10` are one value) and sorted keys."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, BaseModel):
        return _canonical(value.model_dump())
    return str(value)


def canonical_json(value: Any) -> str:
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    """Content hashes of a task that ignore its id and domain name.

    `patch_gold` is None for a task with neither patch nor gold (nothing to tell it from other such tasks).
    """

    instruction: str
    patch_gold: str | None


def fingerprint(task: Task) -> Fingerprint:
    """sha256 of the normalised instruction, and of the canonical JSON of the data patch + gold calls together."""
    gold = [{"tool": c.tool, "args": c.args} for c in task.gold]
    body = None if not task.patch and not gold else _sha(canonical_json({"patch": task.patch, "gold": gold}))
    return Fingerprint(_sha(normalise_instruction(task.instruction)), body)


@dataclass
class ExcludeSet:
    """What must not be trained on: ids (all of them id-checked) and task definitions (content-checked)."""

    ids: set[str] = field(default_factory=set)
    tasks: list[Task] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # selectors and files, for the manifest

    def add(self, tasks: Iterable[Task] = (), ids: Iterable[str] = (), source: str | None = None) -> None:
        known = {t.id for t in self.tasks}
        for t in tasks:
            self.ids.add(t.id)
            if t.id not in known:
                self.tasks.append(t)
                known.add(t.id)
        self.ids.update(ids)
        if source:
            self.sources.append(source)

    def digest(self) -> str:
        """sha256 over the excluded ids and the content fingerprints of the excluded tasks."""
        fps = {t.id: asdict(fingerprint(t)) for t in self.tasks}
        return _sha(canonical_json({"ids": sorted(self.ids), "fingerprints": fps}))


def content_matches(
    candidates: Mapping[str, Task], exclude: ExcludeSet, threshold: float = 0.7, num_perm: int = 128
) -> dict[str, list[dict[str, Any]]]:
    """Candidate id → matches against the exclude set, each {rule, task_id[, jaccard]}, strongest rule first.

    Rules: `id` (the same id), `patch_gold` (identical data patch and gold calls), `instruction` (identical
    normalised instruction), `near_duplicate_instruction` (word-3-shingle Jaccard ≥ threshold).
    """
    by_pg: dict[str, list[str]] = defaultdict(list)
    by_instr: dict[str, list[str]] = defaultdict(list)
    for t in exclude.tasks:
        fp = fingerprint(t)
        if fp.patch_gold is not None:
            by_pg[fp.patch_gold].append(t.id)
        by_instr[fp.instruction].append(t.id)
    near = near_duplicates({i: t.instruction for i, t in candidates.items()}, {t.id: t.instruction for t in exclude.tasks}, threshold, num_perm)
    out: dict[str, list[dict[str, Any]]] = {}
    for cid, task in candidates.items():
        fp = fingerprint(task)
        m: list[dict[str, Any]] = []
        if cid in exclude.ids:
            m.append({"rule": "id", "task_id": cid})
        if fp.patch_gold is not None:
            m += [{"rule": "patch_gold", "task_id": x} for x in sorted(by_pg.get(fp.patch_gold, []))]
        m += [{"rule": "instruction", "task_id": x} for x in sorted(by_instr.get(fp.instruction, []))]
        m += [{"rule": "near_duplicate_instruction", "task_id": x, "jaccard": j} for x, j in near.get(cid, [])]
        if m:
            out[cid] = m
    return out


# -- building the set from selectors and files ------------------------------------------------------


def read_id_list(path: Path | str) -> list[str]:
    """A YAML (or JSON) list of task ids, or a mapping with a `tasks` / `task_ids` list (read within the file limits)."""
    from groundstate.tasks import TaskFileError, read_data_file

    path = Path(path)
    ids = read_data_file(path)
    if isinstance(ids, dict):
        ids = ids.get("tasks", ids.get("task_ids"))
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise TaskFileError(path, "an exclude list must be a YAML list of task ids", field="tasks")
    return ids


SOURCE_PREFIXES = ("thinkingbox:", "tau2:")  # task sources of other benchmarks, resolved by `select_tasks`


def _split_domain_paths(domain_paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """(domain folders, other benchmarks' sources: `thinkingbox:DIR[::LIST]`, `tau2:DOMAIN[:SPLIT]`) of `select --domain` values."""
    tb = [d for d in domain_paths if d.strip().startswith(SOURCE_PREFIXES)]
    return [d for d in domain_paths if d not in tb], tb


def task_universe(domain_paths: Sequence[str] = ()) -> dict[str, Task]:
    """Every task of the bundled domains and of the given domain folders, `thinkingbox:` datasets or `tau2:` domains (an id found
    in a given path wins), so that probed tasks can be checked against the benchmark by content, not only by id."""
    from groundstate.worlds.domain import bundled_domains, iter_tasks
    from groundstate.worlds.selectors import select_tasks

    folders, tb = _split_domain_paths(domain_paths)
    out: dict[str, Task] = {}
    for source in tb:  # hydrated without servers: selection reads definitions, it runs nothing
        for t, _ in select_tasks(source):
            out.setdefault(t.id, t)
    for t, _ in iter_tasks([*folders, *bundled_domains()]):
        out.setdefault(t.id, t)
    return out


def build_exclude_set(
    selectors: Sequence[str] = (), id_lists: Sequence[Path | str] = (), domain_paths: Sequence[str] = (), universe: Mapping[str, Task] | None = None
) -> ExcludeSet:
    """Resolve `--exclude SELECTOR` with select_tasks and `--exclude-list FILE` id lists (unknown ids are id-checked only)."""
    from groundstate.worlds.domain import bundled_domains
    from groundstate.worlds.selectors import select_tasks

    ex = ExcludeSet()
    folders, _ = _split_domain_paths(domain_paths)
    domains = [*folders, *bundled_domains()] if folders else None
    for sel in selectors:
        ex.add([t for t, _ in select_tasks(sel, domains)], source=f"selector:{sel}")
    if id_lists:
        universe = universe if universe is not None else task_universe(domain_paths)
        for f in id_lists:
            ids = read_id_list(f)
            ex.add([universe[i] for i in ids if i in universe], ids, source=f"list:{Path(f).name}")
    return ex
