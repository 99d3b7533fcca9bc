"""Training-pool selection: from probe runs to a clean, banded, leak-free train/validation split.

Input: a results file of N attempts per candidate task (a *probe*, `groundstate probe`). Per task, the clean
runs n and successes c (system errors and unjudged attempts are not runs) give the Jeffreys posterior
Beta(c + ½, n − c + ½) of its success rate p. From it:

- a *difficulty band*: the interval of fixed edges (default too_hard < 0.08 ≤ hard < 0.40 ≤ medium < 0.60
  ≤ easy < 0.90 ≤ too_easy) holding the largest posterior mass;
- a *learning signal*: the posterior expectation of p(1 − p) = ab / ((a + b)(a + b + 1)) for Beta(a, b),
  the expected reward variance, which is what a group-relative policy gradient learns from.

Tasks are then filtered (too few clean runs, benchmark copies, a reference-model gate, bands, signal) and
the survivors split into train and validation, stratified by band and grouped (by template by default) so
that instances of one template never straddle the split. Benchmark exclusion works by task id and by
content: fingerprints of the normalised instruction and of the data patch + gold solution, which ignore
the domain name and the id, and MinHash near-duplicate detection of instructions.

Everything here is a pure function of its inputs: the same inputs and seed give byte-identical outputs.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml
from pydantic import BaseModel
from scipy import stats

from groundstate import __version__
from groundstate.jsontext import dumps
from groundstate.records import AttemptRecord, check_one_run, latest_per_key, read_records
from groundstate.stats.metrics import TaskCounts, jeffreys_interval, task_counts
from groundstate.tasks import Task

BANDS = ("too_hard", "hard", "medium", "easy", "too_easy")
DEFAULT_EDGES = (0.08, 0.40, 0.60, 0.90)
DEFAULT_KEEP = ("hard", "medium", "easy")
DECISIONS = ("train", "val", "excluded", "dropped_band", "dropped_signal", "insufficient_runs", "failed_reference_gate", "awaits_judge")
GROUP_BY = ("template", "family", "domain", "none")


# -- posterior, band and signal ---------------------------------------------------------------------


def posterior(n: int, c: int) -> tuple[float, float]:
    """Jeffreys posterior Beta(a, b) of a success rate after c successes in n clean runs."""
    if n < 0 or not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n (n={n}, c={c})")
    return c + 0.5, n - c + 0.5


def check_edges(edges: Sequence[float]) -> tuple[float, ...]:
    edges = tuple(float(e) for e in edges)
    if len(edges) != len(BANDS) - 1:
        raise ValueError(f"need {len(BANDS) - 1} band edges (between {', '.join(BANDS)}), got {len(edges)}")
    if not all(0 < a < b < 1 for a, b in zip(edges, edges[1:])) or not 0 < edges[0] < 1:
        raise ValueError(f"band edges must rise strictly inside (0, 1), got {list(edges)}")
    return edges


def band_masses(n: int, c: int, edges: Sequence[float] = DEFAULT_EDGES) -> dict[str, float]:
    """Posterior mass of each band: Beta CDF differences over [0, e1), [e1, e2), ..., [e4, 1]."""
    a, b = posterior(n, c)
    cuts = [0.0, *check_edges(edges), 1.0]
    cdf = [0.0] + [float(stats.beta.cdf(x, a, b)) for x in cuts[1:-1]] + [1.0]
    return {name: max(0.0, hi - lo) for name, lo, hi in zip(BANDS, cdf, cdf[1:])}


def band_of(n: int, c: int, edges: Sequence[float] = DEFAULT_EDGES) -> str:
    """The band holding the largest posterior mass (a tie goes to the harder band)."""
    masses = band_masses(n, c, edges)
    return max(BANDS, key=lambda b: (masses[b], -BANDS.index(b)))


def signal(n: int, c: int) -> float:
    """Posterior expectation of p(1 − p) under Beta(c + ½, n − c + ½): ab / ((a + b)(a + b + 1)); at most ¼."""
    a, b = posterior(n, c)
    return a * b / ((a + b) * (a + b + 1))


# -- content fingerprints and near duplicates -------------------------------------------------------

_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")


def normalise_instruction(text: str) -> str:
    """Lowercase, punctuation stripped, whitespace collapsed (unicode NFKC first)."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = _PUNCT.sub(" ", text).replace("_", " ")
    return _SPACE.sub(" ", text).strip()


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


def shingles(text: str, k: int = 3) -> set[str]:
    """Word k-shingles of the normalised text (the whole text when it has fewer than k words)."""
    words = normalise_instruction(text).split()
    if len(words) < k:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i : i + k]) for i in range(len(words) - k + 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def lsh_params(threshold: float, num_perm: int = 128, miss: float = 1e-6) -> tuple[int, int]:
    """(bands, rows) for MinHash LSH: the most selective banding whose chance of missing a pair at exactly
    `threshold` Jaccard, 1 − (1 − J^r)^b, is at most `miss` (pairs above the threshold are missed even less)."""
    best = (num_perm, 1)
    for r in range(1, num_perm + 1):
        b = num_perm // r
        if (1 - threshold**r) ** b <= miss:
            best = (b, r)
    return best


def near_duplicates(
    candidates: Mapping[str, str], references: Mapping[str, str], threshold: float = 0.7, num_perm: int = 128, seed: int = 1, method: str = "auto"
) -> dict[str, list[tuple[str, float]]]:
    """Candidate id → [(reference id, Jaccard)] for instructions with word-3-shingle Jaccard ≥ threshold.

    `minhash`: MinHash LSH (datasketch, fixed seed, so deterministic) proposes pairs, banded so that a pair at
    the threshold is missed with probability ≤ 1e-6; `exact`: every pair. Either way each pair is confirmed
    with the exact Jaccard of the shingle sets. `auto`: minhash when datasketch is installed, else exact.
    Matches are sorted by Jaccard (highest first), then reference id.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"near-duplicate threshold must be in (0, 1], got {threshold}")
    ref_sh = {rid: shingles(t) for rid, t in references.items()}
    cand_sh = {cid: shingles(t) for cid, t in candidates.items()}
    out: dict[str, list[tuple[str, float]]] = {}
    if not ref_sh or not cand_sh:
        return out
    if method == "auto":
        method = "minhash" if near_duplicate_method() == "minhash" else "exact"
    if method == "minhash":
        from datasketch import MinHash, MinHashLSH

        def minhash(sh: set[str]) -> MinHash:
            m = MinHash(num_perm=num_perm, seed=seed)
            m.update_batch(sorted(s.encode("utf-8") for s in sh))
            return m

        lsh = MinHashLSH(num_perm=num_perm, params=lsh_params(threshold, num_perm))
        for rid in sorted(ref_sh):
            if ref_sh[rid]:
                lsh.insert(rid, minhash(ref_sh[rid]))
        proposals = {cid: lsh.query(minhash(sh)) if sh else [] for cid, sh in cand_sh.items()}
    elif method == "exact":
        proposals = {cid: list(ref_sh) for cid in cand_sh}
    else:
        raise ValueError(f"unknown near-duplicate method {method!r}: auto, minhash or exact")
    for cid in sorted(cand_sh):
        hits = []
        for rid in proposals[cid]:
            j = jaccard(cand_sh[cid], ref_sh[rid])
            if j >= threshold and cand_sh[cid]:
                hits.append((rid, round(j, 6)))
        if hits:
            out[cid] = sorted(hits, key=lambda h: (-h[1], h[0]))
    return out


def near_duplicate_method() -> str:
    """minhash when datasketch is importable, else exact (all pairs)."""
    import importlib.util

    return "minhash" if importlib.util.find_spec("datasketch") is not None else "exact"


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


# -- split ------------------------------------------------------------------------------------------


def _seeded(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\x00{key}".encode()).digest()[:8], "big")


@dataclass(frozen=True)
class SplitItem:
    task_id: str
    band: str
    group: str


def split(items: Sequence[SplitItem], test_fraction: float = 0.2, seed: int = 42) -> dict[str, str]:
    """Task id → 'train' or 'val'. Deterministic, no global random state.

    Groups stay whole. Each group is stratified by its most common band (ties: the harder band); within a
    stratum, groups are taken in seeded-hash order into validation while that brings the validation task
    count closer to test_fraction × the stratum's tasks.
    """
    if not 0 <= test_fraction <= 1:
        raise ValueError(f"test fraction must be in [0, 1], got {test_fraction}")
    members: dict[str, list[SplitItem]] = defaultdict(list)
    for it in items:
        members[it.group].append(it)
    strata: dict[str, list[str]] = defaultdict(list)
    for g, its in members.items():
        counts = Counter(it.band for it in its)
        order = {b: i for i, b in enumerate(BANDS)}
        strata[max(counts, key=lambda b: (counts[b], -order.get(b, len(BANDS)), b))].append(g)
    out: dict[str, str] = {}
    for stratum in sorted(strata):
        groups = sorted(strata[stratum], key=lambda g: (_seeded(seed, g), g))
        target = test_fraction * sum(len(members[g]) for g in groups)
        val = 0
        for g in groups:
            size = len(members[g])
            side = "val" if abs(val + size - target) < abs(val - target) else "train"
            val += size if side == "val" else 0
            for it in members[g]:
                out[it.task_id] = side
    return out


# -- selection --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelectionParams:
    edges: tuple[float, ...] = DEFAULT_EDGES
    keep_bands: tuple[str, ...] = DEFAULT_KEEP
    min_clean_runs: int = 3
    min_signal: float = 0.0
    reference_min_runs: int = 1
    near_dup_threshold: float = 0.7
    num_perm: int = 128
    group_by: str = "template"
    test_fraction: float = 0.2
    seed: int = 42
    require_content_check: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "edges", check_edges(self.edges))
        object.__setattr__(self, "keep_bands", tuple(self.keep_bands))
        unknown = [b for b in self.keep_bands if b not in BANDS]
        if unknown:
            raise ValueError(f"unknown bands {unknown}: choose from {', '.join(BANDS)}")
        if self.group_by not in GROUP_BY:
            raise ValueError(f"group-by must be one of {', '.join(GROUP_BY)}, got {self.group_by!r}")
        if not 0 <= self.test_fraction <= 1:
            raise ValueError(f"test fraction must be in [0, 1], got {self.test_fraction}")
        if self.min_clean_runs < 1 or self.reference_min_runs < 1:
            raise ValueError("minimum run counts must be at least 1")
        if not 0 < self.near_dup_threshold <= 1:
            raise ValueError(f"near-duplicate threshold must be in (0, 1], got {self.near_dup_threshold}")


def _group_key(group_by: str, task_id: str, meta: Mapping[str, Any]) -> tuple[str, bool]:
    """The grouping value, and whether it fell back to the task id (no such attribute)."""
    if group_by == "none":
        return task_id, False
    value = meta.get(group_by)
    if value in (None, "", "unspecified"):
        return f"task:{task_id}", True
    return f"{group_by}:{value}", False


@dataclass
class SelectionResult:
    rows: list[dict[str, Any]]
    params: SelectionParams
    inputs: dict[str, Any] = field(default_factory=dict)  # name -> {file, sha256} and set digests, for the manifest
    notes: list[str] = field(default_factory=list)

    def ids(self, decision: str) -> list[str]:
        return [r["task_id"] for r in self.rows if r["decision"] == decision]

    @property
    def train(self) -> list[str]:
        return self.ids("train")

    @property
    def val(self) -> list[str]:
        return self.ids("val")

    def counts(self) -> dict[str, Any]:
        dec = Counter(r["decision"] for r in self.rows)
        bands = Counter(r["band"] for r in self.rows if r["clean_runs"] >= self.params.min_clean_runs and not r["awaits_judge"])
        return {
            "tasks": len(self.rows),
            "decisions": {d: dec.get(d, 0) for d in DECISIONS},
            "bands": {b: bands.get(b, 0) for b in BANDS},
            "unresolved": sum(1 for r in self.rows if not r["resolved"]),
            "not_content_checked": sum(1 for r in self.rows if not r["content_checked"]),
            "group_fallbacks": sum(1 for r in self.rows if r["group_fallback"] and r["decision"] in ("train", "val")),
        }

    def histogram(self) -> list[dict[str, Any]]:
        """Per band: its interval, tasks with enough runs, and how many went to train, val or were set aside."""
        cuts = [0.0, *self.params.edges, 1.0]
        out = []
        for i, b in enumerate(BANDS):
            rows = [r for r in self.rows if r["band"] == b and r["decision"] not in ("insufficient_runs", "awaits_judge")]
            d = Counter(r["decision"] for r in rows)
            out.append(
                {
                    "band": b,
                    "interval": [cuts[i], cuts[i + 1]],
                    "tasks": len(rows),
                    "train": d["train"],
                    "val": d["val"],
                    "set_aside": len(rows) - d["train"] - d["val"],
                    "kept_band": b in self.params.keep_bands,
                }
            )
        return out

    def summary(self) -> dict[str, Any]:
        c = self.counts()
        return {
            **c,
            "train": c["decisions"]["train"],
            "val": c["decisions"]["val"],
            "histogram": self.histogram(),
            "parameters": _params_json(self.params),
            "notes": self.notes,
        }

    def render(self) -> dict[str, bytes]:
        """The output files' bytes, by name."""

        def header(side: str, n: int) -> str:
            return (
                f"# {side} split from `groundstate select` (seed {self.params.seed}, group by {self.params.group_by}): {n} tasks; usable as --tasks\n"
            )

        files = {
            "train.yaml": (header("train", len(self.train)) + yaml.safe_dump(self.train, default_flow_style=False)).encode(),
            "val.yaml": (header("validation", len(self.val)) + yaml.safe_dump(self.val, default_flow_style=False)).encode(),
            "selection.jsonl": "".join(dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in self.rows).encode(),
        }
        manifest = {
            "groundstate": __version__,
            "inputs": self.inputs,
            "parameters": _params_json(self.params),
            "counts": self.counts(),
            "histogram": self.histogram(),
            "notes": self.notes,
            "outputs": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
        }
        files["manifest.json"] = (dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
        return files

    def write(self, out_dir: Path | str) -> dict[str, Path]:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name, data in self.render().items():
            (out_dir / name).write_bytes(data)
            paths[name] = out_dir / name
        return paths


def _params_json(p: SelectionParams) -> dict[str, Any]:
    d = asdict(p)
    d["edges"], d["keep_bands"] = list(p.edges), list(p.keep_bands)
    return d


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
    probed without a judge: set apart as every figure sets it apart, `metrics.basis`), insufficient_runs,
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
    meta_from_records: dict[str, dict[str, Any]] = {}
    for r in records:
        m = meta_from_records.setdefault(r.task_id, {})
        for k, v in (("domain", r.domain), ("family", r.family), ("template", r.template)):
            if v is not None:
                m.setdefault(k, v)
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
        tc = counts[tid]
        task = resolved.get(tid)
        meta = {"domain": task.domain, "family": task.family, "template": task.template} if task is not None else meta_from_records.get(tid, {})
        masses = band_masses(tc.n, tc.c, params.edges)
        band = max(BANDS, key=lambda b: (masses[b], -BANDS.index(b)))
        sig = signal(tc.n, tc.c)
        group, fallback = _group_key(params.group_by, tid, meta)
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
            "signal": _r(sig),
            "resolved": task is not None,
            "content_checked": task is not None,
            "exclusions": matches.get(tid, []),
        }
        if ref_counts is not None:
            rc = ref_counts.get(tid)
            row["reference"] = {"clean_runs": rc.n if rc else 0, "successes": rc.c if rc else 0, "awaits_judge": bool(rc and rc.awaits_judge)}
        decision, reason = _decide(row, params, ref_counts is not None)
        row["decision"], row["reason"] = decision, reason
        rows.append(row)
        if decision == "eligible":
            eligible.append(SplitItem(tid, band, group))

    sides = split(eligible, params.test_fraction, params.seed)
    for row in rows:
        if row["decision"] == "eligible":
            side = sides[row["task_id"]]
            row["decision"] = side
            row["reason"] = (
                f"{row['band']} (posterior mass {row['band_masses'][row['band']]:.2f}), signal {row['signal']:.3f}; "
                f"{'validation' if side == 'val' else 'train'} side with its group {row['group']}" + row["reason"]
            )

    notes = []
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


_RULE_TEXT = {
    "id": "same task id as excluded task {task_id}",
    "patch_gold": "same data patch and gold solution as excluded task {task_id} (rule patch_gold)",
    "instruction": "same normalised instruction as excluded task {task_id} (rule instruction)",
    "near_duplicate_instruction": "instruction near-duplicate of excluded task {task_id} (rule near_duplicate_instruction, Jaccard {jaccard:.2f})",
}


def _decide(row: dict[str, Any], p: SelectionParams, gated: bool) -> tuple[str, str]:
    if row["exclusions"]:
        first = row["exclusions"][0]
        text = _RULE_TEXT[first["rule"]].format(**first)
        more = len(row["exclusions"]) - 1
        return "excluded", "benchmark overlap: " + text + (f" (+{more} more matches)" if more else "")
    if p.require_content_check and not row["content_checked"]:
        return "excluded", "task definition not found, so it could not be content-checked against the exclude set (--require-content-check)"
    if row["awaits_judge"]:  # the one rule of every figure (`metrics.basis`): its rate would count only the state's failures
        return "awaits_judge", (
            f"reply rubrics probed without a judge: {row['unjudged']} unjudged attempts (state passed), "
            f"{row['clean_runs'] - row['successes']} failed on state; probe with --judge to band it"
        )
    if row["clean_runs"] < p.min_clean_runs:
        return "insufficient_runs", (
            f"{row['clean_runs']} clean runs < {p.min_clean_runs} ({row['system_errors']} system errors, {row['unjudged']} unjudged not counted)"
        )
    if gated:
        ref = row["reference"]
        if ref["awaits_judge"]:  # the one rule again: its state failures alone would say "never solved"
            return "awaits_judge", "the reference run has this task's reply rubrics and no judge: give the reference run a --judge to gate it"
        if ref["clean_runs"] == 0:
            return "failed_reference_gate", "no clean reference runs of this task"
        if ref["clean_runs"] < p.reference_min_runs:
            return "failed_reference_gate", f"only {ref['clean_runs']} clean reference runs < {p.reference_min_runs}"
        if ref["successes"] == 0:
            return "failed_reference_gate", f"the reference never solved it (0/{ref['clean_runs']} clean runs)"
    if row["band"] not in p.keep_bands:
        return "dropped_band", (
            f"band {row['band']} (posterior mass {row['band_masses'][row['band']]:.2f}, "
            f"{row['successes']}/{row['clean_runs']}) not in kept bands {','.join(p.keep_bands)}"
        )
    if row["signal"] < p.min_signal:
        return "dropped_signal", f"signal {row['signal']:.4f} < minimum {p.min_signal}"
    suffix = "" if row["content_checked"] else "; not content-checked (task definition not found)"
    return "eligible", suffix


# -- files --------------------------------------------------------------------------------------------


def file_sha256(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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


def _split_domain_paths(domain_paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """(domain folders, `thinkingbox:DIR[::LIST]` sources) of `select --domain` values."""
    tb = [d for d in domain_paths if d.strip().startswith("thinkingbox:")]
    return [d for d in domain_paths if d not in tb], tb


def task_universe(domain_paths: Sequence[str] = ()) -> dict[str, Task]:
    """Every task of the bundled domains and of the given domain folders or `thinkingbox:` datasets (an id found
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
        "task_definitions_sha256": _sha(canonical_json({i: universe[i].model_dump() for i in ids if i in universe})),
    }
    if reference is not None:
        inputs["reference"] = {"file": Path(reference).name, "sha256": file_sha256(reference), "records": len(ref or [])}
    return select(records, universe, ex, ref, params, inputs)


__all__ = [
    "BANDS",
    "DEFAULT_EDGES",
    "DECISIONS",
    "ExcludeSet",
    "Fingerprint",
    "SelectionParams",
    "SelectionResult",
    "SplitItem",
    "band_masses",
    "band_of",
    "build_exclude_set",
    "content_matches",
    "fingerprint",
    "lsh_params",
    "near_duplicate_method",
    "near_duplicates",
    "normalise_instruction",
    "posterior",
    "select",
    "select_files",
    "shingles",
    "signal",
    "split",
    "task_universe",
]
