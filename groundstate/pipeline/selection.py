"""Training-pool selection: from probe runs to a clean, banded, leak-free train/validation split.

Input: a results file of N attempts per candidate task (a *probe*, `groundstate probe`). Per task, its clean runs
give a difficulty band and a learning signal (`stats.difficulty`); each task is checked against the exclude set by id
and by content (`audits.overlap`); the rules of `selection_rules` decide, first rule that applies (too few clean runs,
benchmark copies, a reference-model gate, bands, signal); the survivors are split into train and validation,
stratified by band and grouped (by template by default) so that instances of one template never straddle the split
(`split`). `selection_result` holds the rows and writes the four files.

Everything here is a pure function of its inputs: the same inputs and seed give byte-identical outputs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groundstate.audits.near_duplicates import near_duplicate_method
from groundstate.audits.overlap import ExcludeSet, build_exclude_set, canonical_json, content_matches, task_universe
from groundstate.pipeline.selection_result import SelectionResult
from groundstate.pipeline.selection_rules import SelectionParams, decide, group_key
from groundstate.pipeline.split import SplitItem, split
from groundstate.records import AttemptRecord, check_one_run, latest_per_key, read_records
from groundstate.stats.basis import TaskCounts, task_counts
from groundstate.stats.difficulty import BANDS, band_masses, signal
from groundstate.stats.estimators import jeffreys_interval
from groundstate.tasks import Task


def _r(x: float) -> float:
    return round(float(x), 6)


def select(
    probe_records: Iterable[AttemptRecord],
    tasks: Mapping[str, Task] | None = None,
    exclude: ExcludeSet | None = None,
    reference_records: Iterable[AttemptRecord] | None = None,
    params: SelectionParams | None = None,
    inputs: dict[str, Any] | None = None,
) -> SelectionResult:
    """Band, score, filter and split the tasks of a probe run.

    `tasks` maps task ids to their definitions (template, family, instruction, patch, gold); probe tasks
    missing from it are banded from their records' metadata but cannot be content-checked against the
    exclude set. Decisions, first rule that applies: excluded (benchmark id or content), awaits_judge (a rubric task
    probed without a judge: set apart as every figure sets it apart, `stats.basis`), insufficient_runs,
    failed_reference_gate, dropped_band, dropped_signal, then train or val.
    """
    params = params or SelectionParams()
    tasks = dict(tasks or {})
    exclude = exclude or ExcludeSet()
    probe_records = list(probe_records)
    records = list(latest_per_key(probe_records).values())
    duplicates = len(probe_records) - len(records)
    if not records:
        raise ValueError("the probe file holds no records")
    counts = task_counts(records)
    meta_from_records = _meta_from_records(records)
    ref_counts: dict[str, TaskCounts] | None = None
    if reference_records is not None:
        ref_counts = task_counts(reference_records)

    resolved = {tid: tasks[tid] for tid in counts if tid in tasks}
    matches = content_matches(resolved, exclude, params.near_dup_threshold, params.num_perm)
    for tid in counts:  # unresolved tasks can still be excluded by id
        if tid not in resolved and tid in exclude.ids:
            matches[tid] = [{"rule": "id", "task_id": tid}]

    rows: list[dict[str, Any]] = []
    eligible: list[SplitItem] = []
    for tid in sorted(counts):
        task = resolved.get(tid)
        meta = {"domain": task.domain, "family": task.family, "template": task.template} if task is not None else meta_from_records.get(tid, {})
        row = _row(tid, counts[tid], task, meta, params, matches.get(tid, []), ref_counts)
        rows.append(row)
        if row["decision"] == "eligible":
            eligible.append(SplitItem(tid, row["band"], row["group"]))

    sides = split(eligible, params.test_fraction, params.seed)
    for row in rows:
        if row["decision"] == "eligible":
            side = sides[row["task_id"]]
            row["decision"] = side
            row["reason"] = (
                f"{row['band']} (posterior mass {row['band_masses'][row['band']]:.2f}), signal {row['signal']:.3f}; "
                f"{'validation' if side == 'val' else 'train'} side with its group {row['group']}" + row["reason"]
            )

    notes = _notes(rows, duplicates, exclude, params)
    return SelectionResult(
        rows,
        params,
        {
            **(inputs or {}),
            "exclude_set_sha256": exclude.digest(),
            "exclude_ids": len(exclude.ids),
            "exclude_tasks_content_checked": len(exclude.tasks),
            "near_duplicate_method": near_duplicate_method(),
        },
        notes,
    )


def _meta_from_records(records: list[AttemptRecord]) -> dict[str, dict[str, Any]]:
    """Each task's domain, family and template as its records say them (the first record that says one wins)."""
    meta: dict[str, dict[str, Any]] = {}
    for r in records:
        m = meta.setdefault(r.task_id, {})
        for k, v in (("domain", r.domain), ("family", r.family), ("template", r.template)):
            if v is not None:
                m.setdefault(k, v)
    return meta


def _row(
    tid: str,
    tc: TaskCounts,
    task: Task | None,
    meta: dict[str, Any],
    params: SelectionParams,
    exclusions: list[dict[str, Any]],
    ref_counts: dict[str, TaskCounts] | None,
) -> dict[str, Any]:
    """One task's row: its counts, band and signal, and its decision (`decide`; "eligible" until the split)."""
    masses = band_masses(tc.n, tc.c, params.edges)
    band = max(BANDS, key=lambda b: (masses[b], -BANDS.index(b)))
    group, fallback = group_key(params.group_by, tid, meta)
    row: dict[str, Any] = {
        "task_id": tid,
        "domain": meta.get("domain"),
        "family": meta.get("family"),
        "template": meta.get("template"),
        "group": group,
        "group_fallback": fallback,
        "clean_runs": tc.n,
        "successes": tc.c,
        "system_errors": tc.system_errors,
        "unjudged": tc.unjudged,
        "awaits_judge": tc.awaits_judge,
        "rate": _r(tc.c / tc.n) if tc.n else None,
        "jeffreys_95": [_r(x) for x in jeffreys_interval(tc.n, tc.c)] if tc.n else None,
        "band": band,
        "band_masses": {b: _r(v) for b, v in masses.items()},
        "signal": _r(signal(tc.n, tc.c)),
        "resolved": task is not None,
        "content_checked": task is not None,
        "exclusions": exclusions,
    }
    if ref_counts is not None:
        rc = ref_counts.get(tid)
        row["reference"] = {"clean_runs": rc.n if rc else 0, "successes": rc.c if rc else 0, "awaits_judge": bool(rc and rc.awaits_judge)}
    row["decision"], row["reason"] = decide(row, params, ref_counts is not None)
    return row


def _notes(rows: list[dict[str, Any]], duplicates: int, exclude: ExcludeSet, params: SelectionParams) -> list[str]:
    """What the reader of a selection must know about its inputs: collapsed repeats, tasks without a definition, no
    exclude set, groups that fell back to the task, tasks short of clean runs."""
    notes: list[str] = []
    if duplicates:
        notes.append(f"{duplicates} repeated (task, attempt) records in the probe file were collapsed (last clean record kept)")
    unresolved = [r["task_id"] for r in rows if not r["resolved"]]
    if unresolved:
        notes.append(
            f"{len(unresolved)} probe tasks have no loadable definition (e.g. {', '.join(unresolved[:3])}): banded from their "
            "records, checked against the exclude set by id only, not by content"
        )
    if not exclude.ids:
        notes.append("no exclude set given: nothing was checked for benchmark overlap (use --exclude bench)")
    if params.group_by != "none":
        fb = [r["task_id"] for r in rows if r["group_fallback"] and r["decision"] in ("train", "val")]
        if fb:
            notes.append(f"{len(fb)} selected tasks have no {params.group_by} and were split as their own groups")
    insufficient = [r["task_id"] for r in rows if r["decision"] == "insufficient_runs"]
    if insufficient:
        notes.append(
            f"{len(insufficient)} tasks have fewer than {params.min_clean_runs} clean runs (e.g. "
            f"{', '.join(insufficient[:3])}): re-run the probe to resume them"
        )
    return notes


def file_sha256(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def select_files(
    probes: Path | str,
    *,
    exclude: Sequence[str] = (),
    exclude_lists: Sequence[Path | str] = (),
    reference: Path | str | None = None,
    domain_paths: Sequence[str] = (),
    params: SelectionParams | None = None,
) -> SelectionResult:
    """`select` over files: reads the probe (and reference) results, resolves task definitions and the exclude set.

    Each results file must hold one run (`results.check_one_run`); a blend is a ValueError naming the file."""
    probes = Path(probes)
    records = read_records(probes)
    check_one_run(records, str(probes))  # difficulty from a blend of policies or temperatures describes neither
    universe = task_universe(domain_paths)
    ex = build_exclude_set(exclude, exclude_lists, domain_paths, universe)
    ref = read_records(reference) if reference is not None else None
    if ref:
        check_one_run(ref, str(reference))
    ids = sorted({r.task_id for r in records})
    inputs: dict[str, Any] = {
        "probes": {"file": probes.name, "sha256": file_sha256(probes), "records": len(records)},
        "exclude_selectors": list(exclude),
        "exclude_lists": [{"file": Path(f).name, "sha256": file_sha256(f)} for f in exclude_lists],
        "domain_paths": [Path(d).name for d in domain_paths],
        "task_definitions_sha256": hashlib.sha256(
            canonical_json({i: universe[i].model_dump() for i in ids if i in universe}).encode("utf-8")
        ).hexdigest(),
    }
    if reference is not None:
        inputs["reference"] = {"file": Path(reference).name, "sha256": file_sha256(reference), "records": len(ref or [])}
    return select(records, universe, ex, ref, params, inputs)


@dataclass(frozen=True)
class SelectJob:
    """What `groundstate select` asks of `select_pool`; these defaults (and `SelectionParams`') are the command's."""

    out: Path  # where train.yaml, val.yaml, selection.jsonl and manifest.json go
    params: SelectionParams = SelectionParams()
    exclude: tuple[str, ...] = ()  # task selectors never to train on (checked by id and by content)
    exclude_lists: tuple[Path, ...] = ()  # YAML lists of task ids never to train on
    reference: Path | None = None  # a stronger policy's results: keep only tasks it solved
    domain_paths: tuple[str, ...] = ()  # domains (names, folders, thinkingbox:DIR[::LIST]) whose definitions to load
    allow_incomplete: bool = False  # select from probes with missing, duplicated or system-error keys


def select_pool(
    probes: Path, records: list[AttemptRecord], job: SelectJob, on_incomplete: Callable[[list[str]], None] | None = None
) -> tuple[SelectionResult, dict[str, Path]]:
    """The selection from the probe file `probes` (its `records` already read) and the paths of the four files written
    to `job.out`. Probes with missing, duplicated or system-error keys are `stats.basis.IncompleteRun`, or with
    `allow_incomplete` said through `on_incomplete(problems)` and selected from anyway; `ValueError`, `TaskFileError`,
    `KeyError` or `OSError` for an input that cannot be read or used."""
    from groundstate.stats.basis import require_complete

    incomplete = require_complete(records, "select", job.allow_incomplete)
    if incomplete and on_incomplete:
        on_incomplete(incomplete)
    result = select_files(
        probes, exclude=job.exclude, exclude_lists=job.exclude_lists, reference=job.reference, domain_paths=job.domain_paths, params=job.params
    )
    return result, result.write(job.out)
