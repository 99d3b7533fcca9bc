"""verl's parquet dataset from a groundstate pool: one row per task, routed to the groundstate agent loop.

A row names its task, not its data: `extra_info` carries the task id and the domain reference
(`groundstate.worlds.refs`: a bundled name, the folder of any other domain, or a ThinkingBox dataset with its
test list and servers file), and the agent loop rebuilds the episode from them, so the
sandbox, the tools, the simulated user and the grader are exactly those of `groundstate run`. The
`prompt` column holds the episode's opening messages (the domain policy as system message where the
model's prompt carries it, then the instruction): verl's dataset uses it to filter over-long prompts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from groundstate.tasks import Task
from groundstate.train.verl import AGENT_NAME
from groundstate.worlds.domain import Domain

DATA_SOURCE_PREFIX = "groundstate/"


def task_rows(pairs: list[tuple[Task, Domain]], split: str = "train", system_in_prompt: bool = True) -> list[dict[str, Any]]:
    """verl dataset rows (`data_source`, `agent_name`, `prompt`, `ability`, `reward_model`, `extra_info`) for tasks."""
    if not pairs:
        raise ValueError("no tasks to write: the pool is empty")
    rows = []
    for index, (task, domain) in enumerate(pairs):
        prompt = ([{"role": "system", "content": domain.system_prompt()}] if system_in_prompt else []) + [
            {"role": "user", "content": task.instruction}
        ]
        rows.append(
            {
                "data_source": DATA_SOURCE_PREFIX + domain.name,
                "agent_name": AGENT_NAME,
                "prompt": prompt,
                "ability": "tool-use",
                # the reward is the final-state verdict computed by the agent loop; verl's reward code reads this key
                "reward_model": {"style": "groundstate-final-state", "ground_truth": task.id},
                "extra_info": {"index": index, "split": split, "task_id": task.id, "domain": domain.ref()},
            }
        )
    return rows


def write_parquet(pairs: list[tuple[Task, Domain]], path: str | Path, split: str = "train", system_in_prompt: bool = True) -> Path:
    """Write the rows of `pairs` to a parquet file (pyarrow) and return its path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(task_rows(pairs, split, system_in_prompt)), path)
    return path


def build_dataset(pool: str, path: str | Path, split: str = "train", system_in_prompt: bool = True) -> Path:
    """A pool file (`groundstate select`'s train.yaml or val.yaml) — or any `--tasks` selector — to verl's parquet."""
    from groundstate.worlds.selectors import select_tasks

    return write_parquet(select_tasks(pool), path, split, system_in_prompt)
