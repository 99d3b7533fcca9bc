"""The online sampler for a trainer of your own: a dataset sampler that draws each step's tasks by expected signal and
learns from the rewards your environments hand back.

`SignalSampler` is a `torch.utils.data.Sampler` over a dataset whose rows name a task (`task_id`, as `trl_dataset`
writes them, or any list of ids). Each step it draws `tasks_per_step` tasks from an `online.OnlineSampler` and yields
each one's row index G times in a row, the layout GRPO trainers expect of a group (TRL's `RepeatSampler`:
`mini_repeat_count = num_generations`), and the step's block `repeat` times (`RepeatSampler`'s `repeat_count`: TRL's
`num_iterations × steps_per_generation`; `tasks_per_step × G` is then TRL's `generation_batch_size`). Rewards come back through `record(task_id, reward)` or, for the adapters,
`on_episode(task, trajectory, verdict)`, the shape of `integrations.trl.environment_factory`'s `on_episode` hook: every
G rewards of one task are a group, and the group updates the task's posterior (a system error or an unjudged rollout is
None, or NaN as Gymnasium's `TextEnv` gives it: not evidence, never a 0).

    sampler = SignalSampler([row["task_id"] for row in dataset], group_size=8, tasks_per_step=8, steps=50)
    factory = environment_factory(pairs, on_episode=sampler.on_episode)

    class Trainer(GRPOTrainer):  # TRL 1.16 builds its train sampler in this (private) method; give it this one
        def _get_train_sampler(self, dataset=None):
            return sampler

With Gymnasium or OpenEnv, draw with `next_step()` (the step's task ids, each once), play G episodes of each
(`env.reset(options={"task_id": t})`) and hand each episode's reward to `record(t, reward)`.

Contract:
- a step's draw happens when its first index is asked for. A data loader that fetches one batch ahead (accelerate's
  does) draws step t + 1 before step t's rewards are in, so the draw sees the rewards up to step t − 1: one step behind,
  the same for the same seed every time;
- draws depend only on the seed, the step, the draws before them in the step and the groups recorded before them
  (`online.OnlineSampler`), and for `draw` on which groups are still open;
- one process: a trainer split over several processes must record every process's rewards in each (they would
  otherwise draw different tasks), which this class does not do;
- a group recorded incompletely (fewer than G rewards of a task when the run ends) is not evidence; `pending()` says
  which. A group `draw` handed out stops keeping its task from being drawn once its step and the next are over, so a
  rollout whose reward never comes back costs that group, not the task.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import Sampler

from groundstate.tasks import Task
from groundstate.train.online import OnlineConfig, OnlineSampler
from groundstate.types import Trajectory, Verdict


class SignalSampler(Sampler[int]):
    """Row indices of `task_ids` (a dataset's `task_id` column, in row order), G at a time per task, `tasks_per_step`
    tasks a step for `steps` steps, drawn by the online sampler (see the module's docstring)."""

    def __init__(
        self,
        task_ids: Sequence[str],
        group_size: int,
        tasks_per_step: int,
        steps: int,
        probe: Mapping[str, tuple[int, int]] | None = None,
        config: OnlineConfig | None = None,
        seed: int = 0,
        repeat: int = 1,
    ):
        if tasks_per_step < 1 or steps < 1 or repeat < 1:
            raise ValueError(f"tasks_per_step, steps and repeat must be at least 1, got {tasks_per_step}, {steps} and {repeat}")
        self.rows: dict[str, int] = {}
        for i, t in enumerate(task_ids):
            if not isinstance(t, str):
                raise ValueError(f"row {i}: task_id must be a string, got {type(t).__name__}")
            self.rows.setdefault(t, i)  # a task in several rows: its first row
        self.online = OnlineSampler(list(self.rows), group_size, probe, config, seed)
        self.G, self.tasks_per_step, self.steps, self.repeat = group_size, tasks_per_step, steps, repeat
        self._pending: dict[str, list[float | None]] = {}
        self._step_ids: list[str] = []  # `draw`'s current step
        self._open: dict[str, list[int]] = {}  # `draw`: the steps of each task's groups drawn and not yet closed
        self.recorded = 0  # groups recorded

    def __len__(self) -> int:
        return self.steps * self.tasks_per_step * self.G * self.repeat

    def __iter__(self) -> Iterator[int]:
        for _ in range(self.steps):
            block = [self.rows[t] for t in self.next_step() for _ in range(self.G)]
            for _ in range(self.repeat):
                yield from block

    def next_step(self) -> list[str]:
        """Open the next step and draw its tasks (each once; the trainer runs G rollouts of each)."""
        return self.online.next_tasks(self.tasks_per_step)

    def draw(self) -> str:
        """One task, for a trainer that fetches one prompt at a time (verl under group filtering does, refills
        included): every `tasks_per_step` draws make a step, and a task drawn in the current step, or whose group drawn
        in the step before is still open, is not drawn again while the pool has others (an older open group has lost a
        rollout: it no longer holds its task back)."""
        if len(self._step_ids) % self.tasks_per_step == 0:
            self.online.open_step()
            self._step_ids = []
        step = self.online.step
        busy = set(self._step_ids) | {t for t, opened in self._open.items() if any(s >= step - 1 for s in opened)}
        (task_id,) = self.online.draw(1, exclude=busy)
        self._step_ids.append(task_id)
        self._open.setdefault(task_id, []).append(step)
        return task_id

    def record(self, task_id: str, reward: float | None) -> None:
        """One rollout's reward (None: a system error or an unjudged rollout). The G-th reward of a task closes its
        group, which updates the task's posterior. NaN is None (Gymnasium's reward where there is no verdict). `KeyError`
        for a task the sampler does not draw, `ValueError` for a reward that is not a number in [0, 1]."""
        if task_id not in self.rows:
            raise KeyError(f"task {task_id!r} is not one this sampler draws")
        number = isinstance(reward, numbers.Real) and not isinstance(reward, bool)
        if reward is not None and not (number and (math.isnan(reward) or 0.0 <= reward <= 1.0)):
            raise ValueError(f"task {task_id}: a reward is 1, 0, something between or None, got {reward!r}")
        group = self._pending.setdefault(task_id, [])
        group.append(None if reward is None or math.isnan(reward) else float(reward))
        if len(group) == self.G:
            del self._pending[task_id]
            if self._open.get(task_id):
                self._open[task_id].pop(0)  # the oldest group of the task drawn is the one its rewards close
            self.online.observe(task_id, group)
            self.recorded += 1

    def on_episode(self, task: Task, trajectory: Trajectory, verdict: Verdict) -> None:
        """`record` of a finished episode, in the adapters' `on_episode` shape."""
        self.record(task.id, None if verdict.system_error is not None or verdict.reward is None else float(verdict.reward))

    def pending(self) -> dict[str, int]:
        """Tasks with a group begun and not complete: how many rewards each has."""
        return {t: len(g) for t, g in self._pending.items()}

    def state(self) -> dict[str, Any]:
        """The online sampler's state (`OnlineSampler.to_json`), to save beside a checkpoint; `resume` reads it back.
        Groups begun and not closed are not in it (`pending`): their rewards are lost. Behind a loader that fetches one
        batch ahead, the state's step counts one step drawn and not yet played."""
        return self.online.to_json()

    @classmethod
    def resume(cls, state: Mapping[str, Any], task_ids: Sequence[str], tasks_per_step: int, steps: int) -> SignalSampler:
        """The sampler `state()` described, over the dataset rows `task_ids` (a task the state lacks starts from
        Jeffreys), drawing `steps` more steps; `SamplerStateError` naming the field for a state that cannot be resumed."""
        online = OnlineSampler.from_json(state, list(dict.fromkeys(task_ids)))
        with warnings.catch_warnings():  # the sampler made here is replaced at once: its warnings were said for `online`
            warnings.simplefilter("ignore")
            sampler = cls(task_ids, online.G, tasks_per_step, steps, config=online.config, seed=online.seed)
        sampler.online = online
        return sampler
