"""Online sampling in verl: every prompt verl fetches for training is a task the online sampler draws, and every
rollout's reward goes back to it.

verl 0.9.1's v1 trainer builds its prompt sampler itself (random or sequential: `verl.trainer.ppo.utils.
create_rl_sampler`) and has no setting for another; what a recipe can replace is the dataset class
(`data.custom_cls`). So online sampling in verl is three pieces, set up by the recipe (`sampling="online"`):

- `sampler_actor(settings, task_ids)`: a named Ray actor holding the run's `curriculum.SignalSampler` (one per run,
  `settings["actor"]` its name), started by the training dataset in verl's trainer process;
- `OnlineTaskDataset`, the training dataset: `__getitem__` ignores the index verl's sampler chose and returns the row
  of the task the actor draws next (`SignalSampler.draw`: one at a time, as verl fetches prompts under group filtering,
  refills included; a step every `tasks_per_step` draws), marked as a draw (`extra_info.online_draw`). The
  validation dataset (`data.val_files`) reads rows as verl's own does;
- the agent loop (`online_sampler` in its settings: the actor's name) records the reward of each rollout of a marked
  row with the actor — None for a system error, an unjudged rollout or an episode that failed before it was graded
  (not evidence, never a 0); every G rewards of a task close a group. Rows not drawn (validation) are not evidence.

verl still refills zero-variance groups itself (`algorithm.filter_groups`), without an upper bound; with online
sampling its refills are the sampler's draws too. Limits: the posteriors live in the actor, so a resumed run starts them
again from the probe; the data loader must fetch in the trainer's own process (`data.dataloader_num_workers=0`, set by
the recipe), where the actor is reachable.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from verl.utils.dataset.rl_dataset import RLHFDataset

from groundstate.train.curriculum import SignalSampler
from groundstate.train.online import OnlineConfig, probe_counts
from groundstate.train.verl import ONLINE_DRAW, ONLINE_SETTINGS_KEY

log = logging.getLogger(__name__)


def sampler_actor(settings: dict[str, Any], task_ids: list[str]) -> Any:
    """The run's sampler actor, named `settings["actor"]`: started here with `task_ids` as its pool, or the running one
    of that name."""
    import ray

    probe = probe_counts(settings["probe"]) if settings.get("probe") else None
    cfg = OnlineConfig(forget=settings["forget"], explore=settings["explore"])
    actor = ray.remote(num_cpus=0)(SignalSampler).options(name=settings["actor"], get_if_exists=True)
    # steps: the iterator is unused here (`draw` is); one step's worth keeps `len` meaningful
    return actor.remote(task_ids, settings["group_size"], settings["tasks_per_step"], 1, probe, cfg, settings["seed"])


def load_settings(path: str | Path) -> dict[str, Any]:
    """The settings file the recipe wrote; `ValueError` naming the file and the key for one that lacks a setting."""
    try:
        settings = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read the online sampler's settings: {e}") from None
    need = ("actor", "group_size", "tasks_per_step", "seed", "forget", "explore", "probe")
    missing = [k for k in need if not isinstance(settings, dict) or k not in settings]
    if missing:
        raise ValueError(f"{path}: the online sampler's settings lack {', '.join(missing)}")
    return settings


class OnlineTaskDataset(RLHFDataset):
    """verl's RL dataset whose training rows are the online sampler's draws (see the module's docstring). A dataset of
    other files than `data.train_files` (validation) is verl's own."""

    def __init__(self, data_files: Any, tokenizer: Any, config: Any, processor: Any = None, max_samples: int = -1):
        super().__init__(data_files, tokenizer, config, processor=processor, max_samples=max_samples)
        files = [str(f) for f in (data_files if not isinstance(data_files, str) else [data_files])]
        train = config.get("train_files")
        train = [str(f) for f in ([train] if isinstance(train, str) else list(train or []))]
        self.actor = None
        path = config.get(ONLINE_SETTINGS_KEY)
        if path is None or files != train:
            return
        ids = []
        for i, row in enumerate(self.dataframe):
            extra = row.get("extra_info")
            if not isinstance(extra, dict) or not isinstance(extra.get("task_id"), str):
                raise ValueError(f"{', '.join(files)}: row {i}: extra_info.task_id is missing (rows of `groundstate train --engine verl`)")
            ids.append(extra["task_id"])
        self.rows: dict[str, int] = {}
        for i, t in enumerate(ids):
            self.rows.setdefault(t, i)  # a task in several rows: its first (and the pool in row order)
        self.actor = sampler_actor(load_settings(path), list(self.rows))

    def __getitem__(self, item: int) -> dict:
        if self.actor is None:
            return super().__getitem__(item)
        import ray

        row = super().__getitem__(self.rows[ray.get(self.actor.draw.remote())])
        row["extra_info"] = {**row["extra_info"], ONLINE_DRAW: True}  # the agent loop reports this row's rewards
        return row


def record(actor_name: str, task_id: str, reward: float | None) -> None:
    """Hand one rollout's reward to the run's sampler actor, looked up by name each time (one lookup per episode; a
    handle kept would outlive its actor). The call is not awaited. An actor that cannot be found costs the sampler the
    evidence, never the rollout: one warning, and the lookup is tried again `RETRY_S` later, not at every rollout."""
    import ray

    if time.monotonic() < _missing.get(actor_name, -math.inf) + RETRY_S:
        return
    try:
        handle = ray.get_actor(actor_name)
    except Exception as e:  # noqa: BLE001 - the rollout is the policy's; the sampler's bookkeeping must not fail it
        if actor_name not in _missing:
            log.warning("online sampler %s: cannot be reached, rewards are not recorded (%s)", actor_name, e)
        _missing[actor_name] = time.monotonic()
        return
    _missing.pop(actor_name, None)
    handle.record.remote(task_id, reward)


RETRY_S = 60.0
_missing: dict[str, float] = {}  # actor name -> when it was last looked for in vain
