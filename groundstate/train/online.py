"""Online policy-relative difficulty: which pool tasks to train on next, judged from the current policy's own groups.

Each pool task keeps a Beta(a, b) posterior of the current policy's pass rate p. It starts from the probe where there
is one (c successes in n clean runs: Beta(½ + c, ½ + n − c), the Jeffreys posterior `groundstate select` bands by,
`stats.difficulty.posterior`) and from Jeffreys Beta(½, ½) where not. Every group observed updates it: each clean
rollout adds its reward to a and 1 − reward to b (a system error, or a rollout nobody scored, is not evidence and is
never a 0); before it does, the pseudo-counts above the prior are multiplied by the forgetting factor λ, so the
posterior follows a policy that changes (λ = 1 never forgets; an old observation's weight halves after
log ½ / log λ updates of its task, about 3 at the default 0.8, and a task's evidence tops out near G / (1 − λ)
rollouts).

A task's *expected signal* is the chance that a group of G of its rollouts is mixed, the only kind a group-relative
policy gradient learns from: P(signal) = 1 − E[p^G] − E[(1 − p)^G], exact under Beta(a, b) since
E[p^G] = B(a + G, b) / B(a, b).

`OnlineSampler` draws a step's tasks from it, deterministically for its seed and step:

- a share ε of the slots (each slot with probability ε) is drawn uniformly from the rest of the pool, retired and
  resting tasks included: exploration, which also re-checks retired tasks;
- *retired* (mastered) tasks, P(p > 0.9) ≥ 0.9, leave the signal draw; an exploration draw that fails them brings
  them back (the flags are recomputed at every update);
- *resting* (too hard) tasks, P(p < 0.1) ≥ 0.9, leave it too, but are not dropped for good: `revisit` steps after
  their last observation they are due, and due tasks take the step's first slots (the longest-unseen first, at most
  a quarter of the slots, at least one) so the policy is tried on them again while they stay too hard;
- the rest of the slots go to the remaining tasks without replacement, each next one with probability proportional
  to its expected signal raised to the power κ (`sharpness`, default 3; Efraimidis–Spirakis keys). κ = 0 is uniform,
  κ → ∞ the top n; with κ = 1 a task at signal 0.3 still gets a third of the draws of one at 0.9 (1/27 at κ = 3). On
  the drifting pool of tests/unit/test_online_sampler.py (40 tasks, 8 a step, G = 8, 60 steps, 6 seeds) the share of
  mixed groups was 0.59 uniform, 0.64 at κ = 1, 0.69 at κ = 3 and 0.76 for the top n, which however trained on half
  as many distinct tasks (an effective 17 of 40, against 30 at κ = 3).

With about 13 consecutive passes and no failures (forgetting aside) the posterior says mastered; the probe alone
(n = 4) never retires or rests a task. The state is JSON (`to_json`, `from_json`): per task a, b, its last seen step,
its retired and too-hard flags, plus the step and the settings, so a run writes it beside its checkpoints and resumes
from it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass

from groundstate.jsontext import dumps

PRIOR = 0.5  # Jeffreys: Beta(½, ½), the prior `stats.difficulty.posterior` starts from
STATE_VERSION = 1


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class OnlineConfig:
    """The sampler's settings; these defaults are `TrainConfig`'s (`forget`, `explore`) and the module's."""

    forget: float = 0.8  # λ: the pseudo-counts above the prior are multiplied by this at each update of the task
    explore: float = 0.05  # ε: the share of slots drawn uniformly from the whole pool
    master: float = 0.9  # a task is mastered (retired) when P(p > master) ≥ confidence
    too_hard: float = 0.1  # ... and too hard (resting) when P(p < too_hard) ≥ confidence
    confidence: float = 0.9
    revisit: int = 20  # steps after its last observation at which a resting task is due again
    sharpness: float = 3.0  # κ: tasks are drawn with probability ∝ expected signal ** κ

    def __post_init__(self) -> None:
        if not 0 < self.forget <= 1:
            raise ValueError(f"forget must be in (0, 1], got {self.forget}")
        if not 0 <= self.explore <= 1:
            raise ValueError(f"explore must be in [0, 1], got {self.explore}")
        if not 0 < self.too_hard < self.master < 1 or not 0 < self.confidence < 1:
            raise ValueError("need 0 < too_hard < master < 1 and 0 < confidence < 1")
        if self.sharpness < 0:
            raise ValueError(f"sharpness must be at least 0, got {self.sharpness}")
        if self.revisit < 1:
            raise ValueError(f"revisit must be at least 1 step, got {self.revisit}")


def expected_signal(a: Any, b: Any, group_size: int) -> Any:
    """P(a group of `group_size` is mixed) = 1 − E[p^G] − E[(1 − p)^G] for p ~ Beta(a, b), exact (elementwise on arrays)."""
    from scipy import special  # imported here: 0.5 s that a process which never samples does not pay

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    base = special.betaln(a, b)
    out = 1.0 - np.exp(special.betaln(a + group_size, b) - base) - np.exp(special.betaln(a, b + group_size) - base)
    return np.clip(out, 0.0, 1.0)


def probe_counts(selection_jsonl: Path | str) -> dict[str, tuple[int, int]]:
    """Per task, (clean runs, successes) of the probe, as a selection's `selection.jsonl` (`groundstate select`) holds
    them; `ValueError` naming the file and line for a row without a task id and counts 0 <= successes <= clean runs."""
    counts = {}
    for n, line in enumerate(Path(selection_jsonl).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{selection_jsonl}:{n}: not JSON: {e.msg}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{selection_jsonl}:{n}: expected a JSON object (a selection row)")
        tid, runs, wins = row.get("task_id"), row.get("clean_runs"), row.get("successes")
        if not isinstance(tid, str) or type(runs) is not int or type(wins) is not int or not 0 <= wins <= runs:
            raise ValueError(f"{selection_jsonl}:{n}: expected a task_id and integer counts 0 <= successes <= clean_runs")
        counts[tid] = (runs, wins)
    return counts


class OnlineSampler:
    """Beta posteriors of the current policy's pass rate per pool task, and the draw of a step's tasks from them.

    `next_tasks(n)` opens a new step and draws its n tasks; `draw(n, exclude)` draws more within the step (refill);
    `observe(task_id, rewards)` updates a task from one group (None rewards are not evidence). Draws depend only on the
    seed, the step, the draws before them in that step and the posteriors: the same calls give the same tasks."""

    def __init__(
        self,
        task_ids: Sequence[str],
        group_size: int,
        probe: Mapping[str, tuple[int, int]] | None = None,
        config: OnlineConfig | None = None,
        seed: int = 0,
    ):
        if not task_ids:
            raise ValueError("the online sampler needs at least one task")
        if len(set(task_ids)) != len(task_ids):
            raise ValueError("task ids must be distinct")
        if group_size < 2:
            raise ValueError(f"group_size must be at least 2, got {group_size}")
        self.ids = list(task_ids)
        self.index = {t: i for i, t in enumerate(self.ids)}
        self.G = group_size
        self.config = config or OnlineConfig()
        self.seed = seed
        self.step = 0
        self._draws = 0  # draws made in the current step (each gets its own random stream)
        self.explored = 0  # exploration draws in the current step
        self.a = np.full(len(self.ids), PRIOR)
        self.b = np.full(len(self.ids), PRIOR)
        for tid, (n, c) in (probe or {}).items():
            if tid in self.index:
                if n < 0 or not 0 <= c <= n:
                    raise ValueError(f"probe counts of {tid}: need 0 <= c <= n (n={n}, c={c})")
                self.a[self.index[tid]] += c
                self.b[self.index[tid]] += n - c
        self.last_seen = np.full(len(self.ids), -1)  # -1: never observed in training (the probe is step 0)
        self.retired = np.zeros(len(self.ids), dtype=bool)
        self.too_hard = np.zeros(len(self.ids), dtype=bool)
        self._flag(np.arange(len(self.ids)))
        from scipy import stats  # imported here: 0.5 s that a process which never samples does not pay

        cap = PRIOR + group_size / (1 - self.config.forget) if self.config.forget < 1 else math.inf
        if cap < math.inf and stats.beta.sf(self.config.master, cap, PRIOR) < self.config.confidence:
            warnings.warn(
                f"with groups of {group_size} and forget {self.config.forget:g}, the evidence training gives a task tops out near "
                f"{cap - PRIOR:.0f} rollouts, too few to retire it as mastered or rest it as too hard: raise forget or the group size",
                stacklevel=2,
            )

    # the posterior

    def _flag(self, idx: Any) -> None:
        from scipy import stats  # imported here: 0.5 s that a process which never samples does not pay

        cfg = self.config
        self.retired[idx] = stats.beta.sf(cfg.master, self.a[idx], self.b[idx]) >= cfg.confidence
        self.too_hard[idx] = stats.beta.cdf(cfg.too_hard, self.a[idx], self.b[idx]) >= cfg.confidence

    def observe(self, task_id: str, rewards: Iterable[float | None]) -> None:
        """Update the task's posterior from one group's rewards (None: a system error or an unscored rollout, not
        evidence): the evidence so far is multiplied by λ, then each reward r adds r to a and 1 − r to b."""
        i = self.index[task_id]
        clean = [float(r) for r in rewards if r is not None]
        if not clean:  # no evidence at all (every rollout a system error): nothing to forget, nothing learnt, not seen
            return
        lam = self.config.forget
        self.a[i] = PRIOR + lam * (self.a[i] - PRIOR) + sum(clean)
        self.b[i] = PRIOR + lam * (self.b[i] - PRIOR) + sum(1.0 - r for r in clean)
        self.last_seen[i] = self.step
        self._flag(i)

    def posterior(self, task_id: str) -> tuple[float, float]:
        i = self.index[task_id]
        return float(self.a[i]), float(self.b[i])

    def signal(self) -> np.ndarray:
        """Every task's expected signal, in `ids` order."""
        return expected_signal(self.a, self.b, self.G)

    # the draw

    def _rng(self) -> np.random.Generator:
        self._draws += 1
        return np.random.default_rng([self.seed % 2**63, self.step, self._draws])

    def open_step(self) -> None:
        """Start the next step (`next_tasks` does; call it where a step's tasks are chosen elsewhere)."""
        self.step += 1
        self._draws = 0
        self.explored = 0

    def next_tasks(self, n: int) -> list[str]:
        """Open the next step and draw its n tasks (see the module's docstring)."""
        self.open_step()
        return self.draw(n)

    def due(self) -> list[str]:
        """Resting tasks whose rest is over, the longest-unseen first."""
        rest_over = self.step - np.maximum(self.last_seen, 0) >= self.config.revisit
        idx = np.flatnonzero(self.too_hard & ~self.retired & rest_over)
        return [self.ids[i] for i in sorted(idx, key=lambda i: (self.last_seen[i], self.ids[i]))]

    def draw(self, n: int, exclude: Iterable[str] = ()) -> list[str]:
        """n tasks for the current step, distinct and outside `exclude` while the pool has enough of them (beyond that,
        any pool task by expected signal, repeats allowed: there are always n): due revisits first, then by expected
        signal, with each slot an exploration draw with probability ε."""
        rng = self._rng()
        explore = int(rng.binomial(n, self.config.explore)) if n else 0
        self.explored += explore
        taken: list[int] = []
        free = np.ones(len(self.ids), dtype=bool)
        free[[self.index[t] for t in exclude if t in self.index]] = False
        due = [self.index[t] for t in self.due() if free[self.index[t]]][: max(1, (n - explore) // 4)]
        taken += due[: n - explore]
        free[taken] = False
        w = self.signal() ** self.config.sharpness
        eligible = free & ~self.retired & ~self.too_hard
        taken += _weighted(rng, np.flatnonzero(eligible), w, n - explore - len(taken))
        free[taken] = False
        taken += list(rng.permutation(np.flatnonzero(free))[: n - len(taken)])  # exploration (and too few eligible)
        while len(taken) < n:  # the pool (outside `exclude`) is smaller than n: repeat, by signal
            taken += _weighted(rng, np.arange(len(self.ids)), w, n - len(taken))
        return [self.ids[i] for i in taken]

    # state

    def summary(self) -> dict[str, Any]:
        """The posteriors in a few numbers, for a step's metrics row."""
        s = self.signal()
        return {
            "online_retired": int(self.retired.sum()),
            "online_resting": int((self.too_hard & ~self.retired).sum()),
            "online_mean_signal": round(float(s.mean()), 4),
            "online_explored": self.explored,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "step": self.step,
            "seed": self.seed,
            "group_size": self.G,
            "config": asdict(self.config),
            "tasks": {
                t: {
                    "a": float(self.a[i]),
                    "b": float(self.b[i]),
                    "last_seen": None if self.last_seen[i] < 0 else int(self.last_seen[i]),
                    "retired": bool(self.retired[i]),
                    "too_hard": bool(self.too_hard[i]),
                }
                for i, t in enumerate(self.ids)
            },
        }

    @classmethod
    def from_json(cls, state: Mapping[str, Any], task_ids: Sequence[str] | None = None, source: str = "online sampler state") -> OnlineSampler:
        """The sampler `to_json` wrote. With `task_ids`, the pool is those tasks: a task the state lacks starts from
        Jeffreys, a task the pool lacks is left out. A state that is not one `to_json` could have written (a missing or
        unknown field, a count that is not a finite positive number, a step before the task was seen) is a
        `SamplerStateError` naming `source` and the field."""
        try:
            st = _State.model_validate(state)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "(the state)"
            raise SamplerStateError(f"{source}: {where}: {err['msg']}") from None
        for t, row in st.tasks.items():
            if row.last_seen is not None and row.last_seen > st.step:
                raise SamplerStateError(f"{source}: tasks.{t}.last_seen: {row.last_seen} is after the state's step {st.step}")
        s = cls(list(task_ids if task_ids is not None else st.tasks), st.group_size, config=st.config, seed=st.seed)
        s.step = st.step
        for t, row in st.tasks.items():
            if t in s.index:
                i = s.index[t]
                s.a[i], s.b[i] = row.a, row.b
                s.last_seen[i] = -1 if row.last_seen is None else row.last_seen
        s._flag(np.arange(len(s.ids)))
        return s

    @classmethod
    def load(cls, path: Path | str, task_ids: Sequence[str] | None = None) -> OnlineSampler:
        """`from_json` of a state file `save` wrote; `SamplerStateError` naming the file for one that cannot be read."""
        try:
            state = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise SamplerStateError(f"{path}: cannot read the online sampler's state: {e}") from None
        if not isinstance(state, dict):
            raise SamplerStateError(f"{path}: expected a JSON object (the online sampler's state), got {type(state).__name__}")
        return cls.from_json(state, task_ids, source=str(path))

    def save(self, path: Path | str) -> None:
        """Write the state whole or not at all (a temporary file renamed over `path`): a crash never leaves half of one."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(dumps(self.to_json(), indent=1) + "\n")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


class SamplerStateError(ValueError):
    """An online sampler state that cannot be resumed from, in one line naming the file and the field."""


Count = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _TaskState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: Count
    b: Count
    last_seen: Annotated[int, Field(strict=True, ge=0)] | None
    retired: bool  # recomputed from a and b on load; kept in the file for whoever reads it
    too_hard: bool


class _State(BaseModel):
    """What `OnlineSampler.to_json` writes (version 1)."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    step: Annotated[int, Field(strict=True, ge=0)]
    seed: Annotated[int, Field(strict=True)]
    group_size: Annotated[int, Field(strict=True, ge=2)]
    config: OnlineConfig
    tasks: dict[str, _TaskState]


def _weighted(rng: np.random.Generator, idx: np.ndarray, w: np.ndarray, k: int) -> list[int]:
    """k of `idx` without replacement, each next one with probability proportional to its weight (Efraimidis–Spirakis:
    the k largest u^(1/w)); a zero weight is drawn only after every positive one."""
    if k <= 0 or not len(idx):
        return []
    u = rng.random(len(idx))
    wi = np.maximum(w[idx], 1e-12)
    keys = np.log(u) / wi
    return [int(i) for i in idx[np.argsort(-keys, kind="stable")[:k]]]
