"""Validation at checkpoints: the hook `trl_engine.train_trl(validate=...)` calls with the base (step 0) and each saved
checkpoint, running the validation tasks through the evaluator every run uses (`pipeline.runner.run`, agent
`hf:CHECKPOINT`) into a results file of its own, and returning pass@1 with its 95% bootstrap-over-tasks interval
(`stats.metrics.compute`), the row `metrics.jsonl` gets as `kind: "validation"`.

Each validation loads the checkpoint beside the model being trained: on a large model that is a second copy in memory
and a run's worth of time per checkpoint, so it is opt-in (`val_checkpoints: true` in `groundstate train --config JOB.yaml`, with `--val`); the
offline quickstart turns it on (three validations of its 0.5M model add seconds, not minutes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import Domain, EpisodeLimits

VALIDATION_DIR = "validation"  # under the training folder: one results file per validated step, `step-N.jsonl`


@dataclass
class CheckpointValidator:
    """`validator(model_dir, step)`: `pairs` × `k` attempts of `hf:model_dir` with these sampling settings and limits
    into `out_dir/validation/step-{step}.jsonl` (resumed if it is there), and the row: `pass_at_1`, `ci_95`, `tasks`
    (the covered tasks the figure is over), `k`, `attempts`, `input_tokens`, `output_tokens` and `file`.

    `reuse` maps a step to a results file that already holds this validation (e.g. the quickstart's evaluation of the
    base, with the same model, tasks, k, seed, sampling and limits): that file is resumed instead (`run` adds only what
    it lacks, and refuses one of another run) and named as the row's `file`, so the ledger counts its attempts once."""

    pairs: list[tuple[Task, Domain]]
    backend: Backend
    out_dir: Path
    k: int = 8
    seed: int = 0
    sampling: dict[str, Any] = field(default_factory=dict)
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    concurrency: int = 256
    reuse: dict[int, Path] = field(default_factory=dict)

    def __call__(self, model_dir: Path, step: int) -> dict[str, Any]:
        from groundstate.pipeline.runner import RunConfig, run
        from groundstate.records import read_records
        from groundstate.stats.metrics import compute

        path = Path(self.reuse.get(step) or Path(self.out_dir) / VALIDATION_DIR / f"step-{step}.jsonl")
        cfg = RunConfig(agent=f"hf:{model_dir}", k=self.k, seed=self.seed, sampling=self.sampling, concurrency=self.concurrency, limits=self.limits)
        run(self.pairs, cfg, self.backend, path)
        records = read_records(path)
        m = compute(records, prices={}, allow_incomplete=True, bootstrap_reps=1000)
        return {
            "pass_at_1": m["pass_at_1"],
            "ci_95": m["intervals"].get("pass_at_1"),
            "tasks": m["tasks_covered"],
            "k": m["k"],
            "attempts": m["attempts"],
            "input_tokens": m["tokens"]["input"],
            "output_tokens": m["tokens"]["output"],
            "file": str(path),
        }
