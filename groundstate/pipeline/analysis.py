"""The jobs of the commands that read a run's results file (and never run anything a record names): `compare` with its
detectable range, `report` and `export`. (`metrics` and `power` are one call each: `stats.metrics.compute`,
`stats.power.plan`.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from groundstate.pipeline.export import ExportCounts
from groundstate.records import AttemptRecord


def compare_runs(
    base: list[AttemptRecord],
    candidate: list[AttemptRecord],
    k: int | None = None,
    prices: dict[str, dict[str, float]] | None = None,
    allow_incomplete: bool = False,
) -> dict[str, Any]:
    """`stats.compare`'s comparison of two runs, with `power`: whether its pass@1 lift is one this design
    detects with 80% power (`stats.power.detectable_range`). `ValueError` as `compare`."""
    from groundstate.stats.compare import compare
    from groundstate.stats.power import detectable_range

    c = compare(base, candidate, k, prices, allow_incomplete=allow_incomplete)
    p1 = c["metrics"]["pass_at_1"]
    excludes_zero = p1["ci_95"][0] > 0 or p1["ci_95"][1] < 0
    c["power"] = asdict(detectable_range(base, candidate, p1["lift"], ci_excludes_zero=excludes_zero, k=c["k"]))
    return c


@dataclass(frozen=True)
class ReportJob:
    """What `groundstate report` asks of `write_run_report`; these defaults are the command's."""

    out: Path | None = None  # None: RESULTS.report.html beside the results file (never ./report.html, overwritten run after run)
    allow_incomplete: bool = False  # report runs with missing, duplicated or system-error keys (said in the report)
    training: Path | None = None  # a TRL training folder: its curve drawn (`train.ledger.read_curve`)
    ledger: Path | None = None  # a ledger.json (`train.ledger.Ledger`): the whole cost drawn, and cost with training and probing


def write_run_report(
    results: Path,
    records: list[AttemptRecord],
    baseline: list[AttemptRecord] | None,
    job: ReportJob = ReportJob(),
    prices: dict[str, dict[str, float]] | None = None,
    on_incomplete: Callable[[str], None] | None = None,
) -> Path:
    """Write the HTML report of the run read from `results` (against `baseline`) and return its path. Each incomplete
    run reported anyway (with `allow_incomplete`) is said through `on_incomplete(name)` ("" for the run, "baseline");
    `ValueError` for an incomplete run not allowed, records of several runs, or a baseline that cannot be compared."""
    from groundstate.pipeline.report import write_report
    from groundstate.stats.basis import require_complete

    for name, recs in (("", records), ("baseline", baseline or [])):
        if recs and require_complete(recs, "report", job.allow_incomplete, name) and on_incomplete:
            on_incomplete(name)
    out = job.out or results.parent / f"{results.stem}.report.html"
    if job.training is not None and not (job.training / "metrics.jsonl").is_file():
        raise ValueError(f"{job.training}: no metrics.jsonl in it (a training folder is what `groundstate train --engine trl --out` wrote)")
    ledger = None
    if job.ledger is not None:
        from groundstate.train.ledger import read_ledger

        ledger = read_ledger(job.ledger)
    return write_report(
        records,
        out,
        f"groundstate report · {results}",
        baseline,
        prices=prices,
        allow_incomplete=job.allow_incomplete,
        training=job.training,
        ledger=ledger,
    )


@dataclass(frozen=True)
class ExportJob:
    """What `groundstate export` asks of `export_run`; these defaults are the command's."""

    fmt: str  # hf-dataset (a datasets folder), parquet or sft-jsonl (`pipeline.export.FORMATS`)
    out: Path  # the folder to write
    passed_only: bool | None = None  # None: passed only for sft-jsonl (imitated), every attempt with its reward for the others
    domains: tuple[str, ...] = ()  # domain names or folders to take tool schemas from, besides the bundled ones


@dataclass
class Exported:
    """What `export_run` wrote: the data's path, the counts (also in `out/export.json`), and whether it kept passed
    attempts only (`chosen`: by the format's default)."""

    path: Path
    counts: ExportCounts
    passed_only: bool
    chosen: bool


def export_run(results: Path, records: list[AttemptRecord], job: ExportJob) -> Exported:
    """The run's trajectories as chat training data in the job's format; system errors are skipped. `OSError`,
    `ValueError` or `KeyError` for a domain whose tool schemas cannot be read; `RecordError` (naming `results`, the
    record and the field) for an exported attempt whose messages cannot be read, before anything is written."""
    from groundstate.pipeline.export import to_examples, write_examples

    passed_only = job.fmt == "sft-jsonl" if job.passed_only is None else job.passed_only
    examples, counts = to_examples(records, passed_only, job.domains, str(results))
    info = {"source": str(results), "passed_only": passed_only, "counts": asdict(counts)}
    return Exported(write_examples(examples, job.fmt, job.out, info), counts, passed_only, job.passed_only is None)
