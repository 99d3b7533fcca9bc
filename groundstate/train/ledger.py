"""The whole cost of a run of the method, and its training curve, read from the files its stages write.

`Ledger`: rollouts (attempts), tokens and seconds spent on probing, training and evaluation, training split into
informative and wasted rollouts by reason (all_pass, all_fail, unjudged, system_error: `grpo.waste_reason`). One reader per
source, each number by one rule:

- probing and evaluation (`results_spend`): results files, every line an attempt that ran; tokens are the records'
  `usage` (what `metrics` sums as `tokens`), `attempt_seconds` the records' `timings.total_s`;
- training (`training_spend`): the training folder's `metrics.jsonl` (`trl_engine`), every `kind: "rollouts"` row a
  step's rollouts, refills and dropped groups included (`grpo.StepStats`): tokens and `attempt_seconds` by the same
  rule as a record's, counted by the rollout (`grpo.rollout`);
- the validation runs at checkpoints (`train.validation`) are results files too, and count as evaluation.

`attempt_seconds` is the sum of each attempt's own duration (attempts run together, so it exceeds the wall time);
`wall_seconds` is the wall time, where it is recorded: training's is the sum of its steps' (`kind: "step"` rows: the
rollouts and the update, not loading or saving), probing's and evaluation's are what the caller measured (the
quickstart times its stages), else None.

`read_curve` is the one reader of `metrics.jsonl` as a curve: per step the sampled reward, the informative share (of
the step's first groups, before refill: those whose rollouts disagree, the tasks that gave a signal), the wasted
share and rollouts by reason, tokens and seconds; and validation pass@1 with its interval at step 0 and each
checkpoint. A resumed run may hold a step twice (it ran twice): the curve shows its last row, the ledger counts both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from groundstate.jsontext import dumps
from groundstate.records import AttemptRecord, Count, read_records
from groundstate.stats.cost import is_scripted, price_key, tokens_cost

WASTE_REASONS = ("all_pass", "all_fail", "unjudged", "system_error")  # why a group carries no gradient (`grpo.waste_reason`)
PHASES = ("probing", "training", "evaluation")
Seconds = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
Share = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]  # a pass rate or a reward's mean
# a phase's tokens: far beyond any run, and below it every cost is a finite float (a larger int cannot be one)
Tokens = Annotated[int, Field(strict=True, ge=0, lt=10**18)]


class Spend(BaseModel):
    """Rollouts (attempts), their agent tokens and the sum of their own durations: whole counts ≥ 0, tokens below 10**18
    and finite seconds ≥ 0 where one is read or built from its fields (a negative or NaN count in a `ledger.json` would
    make every cost wrong); a sum of spends (`+`) is not bounded again."""

    model_config = ConfigDict(extra="forbid")
    rollouts: Count = 0
    input_tokens: Tokens = 0
    cached_input_tokens: Tokens = 0
    output_tokens: Tokens = 0
    attempt_seconds: Seconds = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend.model_construct(**{k: getattr(self, k) + getattr(other, k) for k in Spend.model_fields})

    def cost(self, price: dict[str, float]) -> float:
        """USD at `price` (USD per million `input`, `cached_input`, `output` tokens), as a record is costed."""
        return tokens_cost(self.input_tokens, self.cached_input_tokens, self.output_tokens, price)


class Phase(Spend):
    """A phase's spend, its wall time where recorded (None where not), and the files it was read from."""

    wall_seconds: Seconds | None = None
    sources: list[str] = Field(default_factory=list)


class TrainingPhase(Phase):
    """Training's spend: `informative` + the `wasted` parts (by reason) = the whole, rollouts, tokens and attempt seconds."""

    steps: Count = 0
    informative: Spend = Field(default_factory=Spend)
    wasted: dict[str, Spend] = Field(default_factory=lambda: {r: Spend() for r in WASTE_REASONS})


class Ledger(BaseModel):
    """What a run of the method spent, by phase (`ledger.json` beside the quickstart's outputs)."""

    model_config = ConfigDict(extra="forbid")
    probing: Phase = Field(default_factory=Phase)
    training: TrainingPhase = Field(default_factory=TrainingPhase)
    evaluation: Phase = Field(default_factory=Phase)

    def total(self) -> Spend:
        return Spend() + self.probing + self.training + self.evaluation

    def wasted(self) -> Spend:
        return sum(self.training.wasted.values(), Spend())


class CurveStep(BaseModel):
    """One training step as `read_curve` reads it: the step's `kind: "rollouts"` row (`grpo.StepStats`) and the wall
    `seconds` of its `kind: "step"` row (None where the step has none)."""

    step: int
    sampled_reward: float
    informative_share: float  # of the step's first groups: (groups − all-pass, all-fail, unjudged and system-error groups) / groups
    wasted_share: float  # wasted / rollouts, refills included
    groups: int
    rollouts: int
    wasted: int
    wasted_all_pass: int
    wasted_all_fail: int
    wasted_unjudged: int = 0  # a rollout nobody scored (a rubric task without a judge); rows before it had none
    wasted_system_error: int
    input_tokens: int
    output_tokens: int
    rollout_seconds: float
    seconds: float | None = None


class CurveValidation(BaseModel):
    """Validation pass@1 at a step (0: the base) with its 95% bootstrap-over-tasks interval (`train.validation`): pass@1 in
    [0, 1], a finite interval, whole non-negative counts and finite non-negative seconds, as `metrics.jsonl` rows are
    validated."""

    model_config = ConfigDict(extra="ignore")
    step: Annotated[int, Field(strict=True)]
    pass_at_1: Share | None
    ci_95: list[Annotated[float, Field(strict=True, allow_inf_nan=False)]] | None = None
    tasks: Count = 0
    k: Count = 0
    seconds: Seconds = 0.0
    file: str | None = None
    error: str | None = None  # the validation failed (pass_at_1 is None): training went on


class Curve(BaseModel):
    steps: list[CurveStep] = Field(default_factory=list)
    validation: list[CurveValidation] = Field(default_factory=list)


class MetricsFileError(ValueError):
    """A `metrics.jsonl` line that is not a row of the curve, in one line naming the file and line."""


class RowUsage(BaseModel):
    """What a step's wasted groups of one reason spent (`grpo.StepStats.wasted_usage`)."""

    model_config = ConfigDict(extra="ignore")
    input_tokens: Tokens = 0
    output_tokens: Tokens = 0
    attempt_seconds: Seconds = 0.0


class RolloutsRow(BaseModel):
    """A `kind: "rollouts"` row as the readers use it (`grpo.StepStats` and the step's `rollout_seconds`): whole,
    non-negative counts, finite non-negative seconds, a sampled reward in [0, 1], silent groups at most the step's
    groups and wasted rollouts and tokens at most the step's. Other fields of the row are not read."""

    model_config = ConfigDict(extra="ignore")
    step: Annotated[int, Field(strict=True)]
    groups: Count = 0
    all_pass: Count = 0
    all_fail: Count = 0
    unjudged_groups: Count = 0
    system_error_groups: Count = 0
    sampled_reward: Share = 0.0
    rollouts: Count = 0
    wasted: Count = 0
    wasted_all_pass: Count = 0
    wasted_all_fail: Count = 0
    wasted_unjudged: Count = 0  # rows before it had none
    wasted_system_error: Count = 0
    input_tokens: Tokens = 0
    output_tokens: Tokens = 0
    attempt_seconds: Seconds = 0.0
    rollout_seconds: Seconds = 0.0
    wasted_usage: dict[str, RowUsage] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _parts_within_the_whole(self) -> RolloutsRow:
        silent = self.all_pass + self.all_fail + self.unjudged_groups + self.system_error_groups
        if silent > self.groups:
            raise ValueError(f"{silent} all-pass, all-fail, unjudged and system-error groups of {self.groups} groups")
        by_reason = sum(getattr(self, f"wasted_{r}") for r in WASTE_REASONS)
        if max(self.wasted, by_reason) > self.rollouts:
            raise ValueError(f"{max(self.wasted, by_reason)} wasted rollouts of {self.rollouts} rollouts")
        for key in ("input_tokens", "output_tokens", "attempt_seconds"):
            wasted = sum(getattr(u, key) for u in self.wasted_usage.values())
            slack = 1e-3 if key == "attempt_seconds" else 0  # each reason's seconds are rounded apart (`StepStats.to_json`)
            if wasted > getattr(self, key) + slack:
                raise ValueError(f"{wasted} wasted {key} (wasted_usage) of {getattr(self, key)}")
        return self


class StepRow(BaseModel):
    """A `kind: "step"` row: the step's wall `seconds` (None where the row has none)."""

    model_config = ConfigDict(extra="ignore")
    step: Annotated[int, Field(strict=True)]
    seconds: Seconds | None = None


def _numbered_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """`metrics_rows`, each with its line number."""
    if not path.is_file():
        return []
    lines = path.read_bytes().split(b"\n")
    rows = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            if n == len(lines):  # no newline after it: the last write was cut short
                continue
            why = f"not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1})" if isinstance(e, UnicodeDecodeError) else f"not JSON: {e.msg}"
            raise MetricsFileError(f"{path}:{n}: {why}") from None
        if not isinstance(row, dict) or not isinstance(row.get("kind"), str) or type(row.get("step")) is not int:
            raise MetricsFileError(f"{path}:{n}: expected a JSON object with a kind and an integer step")
        rows.append((n, row))
    return rows


def metrics_rows(train_dir: Path) -> list[dict[str, Any]]:
    """Every row of a training folder's `metrics.jsonl` (none where there is no file). A torn last line (a run stopped
    mid-write) is skipped; any other line that is not a UTF-8 JSON object with a `kind` and an integer `step` is a
    `MetricsFileError` naming the file and line."""
    return [row for _, row in _numbered_rows(Path(train_dir) / "metrics.jsonl")]


def _typed_rows(train_dir: Path) -> tuple[list[RolloutsRow], list[StepRow], list[CurveValidation]]:
    """The `rollouts`, `step` and `validation` rows of a training folder's `metrics.jsonl`, each validated by its model
    before any reader does arithmetic on it: a `MetricsFileError` naming the file, the line and the field."""
    path = Path(train_dir) / "metrics.jsonl"
    models: dict[str, type[BaseModel]] = {"rollouts": RolloutsRow, "step": StepRow, "validation": CurveValidation}
    typed: dict[str, list[Any]] = {kind: [] for kind in models}
    for n, row in _numbered_rows(path):
        model = models.get(row["kind"])
        if model is None:
            continue
        try:
            typed[row["kind"]].append(model.model_validate(row))
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            raise MetricsFileError(f"{path}:{n}: " + (f"field {field!r}: " if field else "") + message) from None
    return typed["rollouts"], typed["step"], typed["validation"]


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one row to a `metrics.jsonl` (or `rollouts.jsonl`): whole lines only. A torn last line that a stopped
    run left is cut off first, so a resumed run's rows never join it (the torn row was never whole, so nothing is lost)."""
    path = Path(path)
    line = (dumps(row, default=str) + "\n").encode()
    with path.open("ab+") as f:
        end = f.seek(0, os.SEEK_END)
        if end:
            f.seek(end - 1)
            if f.read(1) != b"\n":
                f.seek(0)
                f.truncate(f.read().rfind(b"\n") + 1)
        f.write(line)


def _curve_step(row: RolloutsRow, seconds: float | None) -> CurveStep:
    silent = row.all_pass + row.all_fail + row.unjudged_groups + row.system_error_groups
    return CurveStep(
        step=row.step,
        sampled_reward=row.sampled_reward,
        informative_share=(row.groups - silent) / row.groups if row.groups else 0.0,
        wasted_share=row.wasted / row.rollouts if row.rollouts else 0.0,
        groups=row.groups,
        rollouts=row.rollouts,
        wasted=row.wasted,
        **{f"wasted_{r}": getattr(row, f"wasted_{r}") for r in WASTE_REASONS},
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        rollout_seconds=row.rollout_seconds,
        seconds=seconds,
    )


def read_curve(train_dir: Path) -> Curve:
    """The curve of a training folder (see the module's docstring): steps in order, the last row of each step. A row
    the curve cannot use is a `MetricsFileError` naming the file, the line and the field (`_typed_rows`)."""
    rollouts, step_rows, validations = _typed_rows(train_dir)
    seconds = {r.step: r.seconds for r in step_rows}
    steps = {r.step: r for r in rollouts}
    validation = {v.step: v for v in validations}
    return Curve(
        steps=[_curve_step(steps[s], seconds.get(s)) for s in sorted(steps)],
        validation=[validation[s] for s in sorted(validation)],
    )


def results_spend(paths: Iterable[Path], wall_seconds: float | None = None) -> Phase:
    """What the results files' attempts spent: every line an attempt (`metrics`' `attempts`), its `usage` and its
    `timings.total_s`. A file that is not there counts nothing and is not named; a file named twice (the same file
    by another path included) counts once."""
    phase = Phase(wall_seconds=wall_seconds)
    seen: set[Path] = set()
    for path in paths:
        if Path(path).resolve() in seen:
            continue
        seen.add(Path(path).resolve())
        records = read_records(path, missing_ok=True)
        if not records:
            continue
        phase.sources.append(str(path))
        for r in records:
            phase.rollouts += 1
            spent = r.spent  # the repaired tries' tokens too
            phase.input_tokens += spent.input_tokens
            phase.cached_input_tokens += spent.cached_input_tokens
            phase.output_tokens += spent.output_tokens
            phase.attempt_seconds += float(r.timings.get("total_s", 0.0))
    return phase


def _row_spend(row: RolloutsRow) -> Spend:
    return Spend(rollouts=row.rollouts, input_tokens=row.input_tokens, output_tokens=row.output_tokens, attempt_seconds=row.attempt_seconds)


def training_spend(train_dir: Path) -> TrainingPhase:
    """What a training folder's steps spent: the sum of every `kind: "rollouts"` row, wasted parts by reason from their
    `wasted_{reason}` counts and `wasted_usage`, the informative part the rest; wall seconds the sum of its step rows
    (those with `seconds`). A row it cannot use is a `MetricsFileError` naming the file, the line and the field."""
    step_rows, steps, _ = _typed_rows(train_dir)
    phase = TrainingPhase()
    if not step_rows:
        return phase
    phase.sources.append(str(Path(train_dir) / "metrics.jsonl"))
    whole = sum((_row_spend(r) for r in step_rows), Spend())
    for reason in WASTE_REASONS:
        part = Spend()
        for r in step_rows:
            usage = r.wasted_usage.get(reason, RowUsage())
            part = part + Spend(rollouts=getattr(r, f"wasted_{reason}"), **usage.model_dump())
        phase.wasted[reason] = part
    wasted = sum(phase.wasted.values(), Spend())
    informative_seconds = max(0.0, whole.attempt_seconds - wasted.attempt_seconds)  # not below 0 by the reasons' rounding
    # each row's wasted parts are within its whole (`RolloutsRow`), so the rest is ≥ 0: a sum, not bounded again
    phase.informative = Spend.model_construct(
        **{k: getattr(whole, k) - getattr(wasted, k) for k in Spend.model_fields} | {"attempt_seconds": informative_seconds}
    )
    for k in Spend.model_fields:
        setattr(phase, k, getattr(whole, k))
    phase.steps = len({r.step for r in step_rows})
    step_seconds = [r.seconds for r in steps if r.seconds is not None]
    phase.wall_seconds = round(sum(step_seconds), 3) if step_seconds else None
    return phase


def build_ledger(
    probes: Iterable[Path] = (),
    train_dir: Path | None = None,
    evaluations: Iterable[Path] = (),
    wall_seconds: dict[str, float] | None = None,
) -> Ledger:
    """The ledger of a run: `probes` and `evaluations` are results files, `train_dir` a TRL training folder (its
    validation runs at checkpoints join the evaluation files). `wall_seconds` gives probing's and evaluation's wall
    time where the caller measured it (evaluation's then gains the checkpoint validations' own, from their rows)."""
    wall = wall_seconds or {}
    validation = read_curve(train_dir).validation if train_dir is not None else []
    evaluation_wall = wall.get("evaluation")
    if evaluation_wall is not None:
        evaluation_wall = round(evaluation_wall + sum(v.seconds for v in validation), 3)
    files = [*evaluations, *(Path(v.file) for v in validation if v.file)]
    return Ledger(
        probing=results_spend(probes, wall.get("probing")),
        training=training_spend(train_dir) if train_dir is not None else TrainingPhase(),
        evaluation=results_spend(files, evaluation_wall),
    )


def whole_cost_per_dependable_task(
    records: list[AttemptRecord], m: dict[str, Any], ledger: Ledger, prices: dict[str, dict[str, float]]
) -> tuple[float | None, str]:
    """Cost per dependable task including what training and probing spent: (this run's covered attempts' cost, the
    numerator of `m["cost_per_dependable_task"]`, + probing's and training's tokens at the price of this run's model) /
    the tasks solved n/n. None, with the reason, where the inference-only figure is undefined or the model has no price."""
    inference = m.get("cost_per_dependable_task")
    kk = m.get("observed_k_of_k") or 0
    if inference is None or kk == 0:
        return None, "undefined where the inference-only figure is"
    priced = next((r for r in records if not is_scripted(r)), None)
    key = price_key(priced, prices) if priced is not None else None
    if key is None:
        return None, "no price for this run's model: training and probing tokens cannot be costed"
    spent = ledger.probing + ledger.training
    value = (inference * kk + spent.cost(prices[key])) / kk
    return value, (
        f"(this run's cost + probing's {ledger.probing.rollouts} and training's {ledger.training.rollouts} rollouts, "
        f"{spent.input_tokens + spent.output_tokens:,} tokens at {key}'s price) / {kk} tasks solved {m['n']}/{m['n']}"
    )


class LedgerError(ValueError):
    """A ledger file that cannot be read, in one line naming it (and the field at fault, where one is)."""


def read_ledger(path: Path) -> Ledger:
    """The ledger a `ledger.json` holds: `LedgerError` naming the file where it holds none, and the field where one is
    not what a ledger holds (a negative count, a string, NaN: `Spend`)."""
    try:
        return Ledger.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise LedgerError(f"{path}: " + (f"field {field!r}: " if field else "not a ledger: ") + err["msg"] + more) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise LedgerError(f"{path}: not a ledger ({' '.join(str(e).split())[:300]})") from None


def write_ledger(ledger: Ledger, path: Path) -> Path:
    path = Path(path)
    path.write_text(ledger.model_dump_json(indent=1), encoding="utf-8")
    return path
