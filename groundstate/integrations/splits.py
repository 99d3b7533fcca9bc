"""The named task splits a server offers (OpenEnv's Task API): each an ordered list of served tasks, addressed by
index, so a client's sampler or eval harness can count, list and pick tasks (`reset(split=, index=)`).

A split's type is what OpenEnv's clients group by: `train` and `pool` are "train", `validation` and `val`
"validation", `test`, `bench` and `benchmark` "test"; any other name gets OpenEnv's own default for a name it does not
know ("validation"). By default a server offers `all` (every served task, in served order) and, where its tasks carry
one, their own split: `pool` (candidates for training) and `bench` (the benchmark). A task spec is the task's
identity and what its agent is shown at reset (id, domain, family, tags, instruction): never its gold, checks or
rubrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from groundstate.tasks import Task

TYPES = {"train": "train", "pool": "train", "validation": "validation", "val": "validation", "test": "test", "bench": "test", "benchmark": "test"}
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
MAX_NAME = 64


class SplitError(ValueError):
    """A split or an index this server does not have (the client's mistake)."""


@dataclass(frozen=True)
class Split:
    name: str
    type: str
    tasks: tuple[Task, ...]


class TaskSplits:
    """Named, ordered splits over a server's tasks. Immutable; shared by every session."""

    def __init__(self, splits: dict[str, list[Task]]):
        if not splits:
            raise ValueError("no split to serve")
        for name, tasks in splits.items():
            if not (0 < len(name) <= MAX_NAME and set(name) <= NAME_CHARS):
                raise ValueError(f"split name {name!r}: use 1 to {MAX_NAME} letters, digits, '_', '-' or '.'")
            if not tasks:
                raise ValueError(f"split {name!r} has no task")
            ids = [t.id for t in tasks]
            if len(set(ids)) != len(ids):
                raise ValueError(f"split {name!r} names a task twice: {next(i for i in ids if ids.count(i) > 1)}")
        self._splits = {name: Split(name, TYPES.get(name, "validation"), tuple(tasks)) for name, tasks in splits.items()}

    @classmethod
    def default(cls, tasks: list[Task]) -> TaskSplits:
        """`all`, then `pool` and `bench` where the tasks carry them."""
        splits: dict[str, list[Task]] = {"all": list(tasks)}
        for own in ("pool", "bench"):
            if chosen := [t for t in tasks if t.split == own]:
                splits[own] = chosen
        return cls(splits)

    def describe(self) -> list[dict[str, Any]]:
        """What `list_splits` answers: each split's name, type and number of tasks."""
        return [{"name": s.name, "type": s.type, "num_tasks": len(s.tasks)} for s in self._splits.values()]

    def split(self, name: Any) -> Split:
        if not isinstance(name, str) or name not in self._splits:
            shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
            raise SplitError(f"split {shown} is not served here: this server has {', '.join(self._splits)}")
        return self._splits[name]

    def task(self, name: Any, index: Any) -> Task:
        """The task at `index` of split `name`; `IndexError` for an index outside it (no negative indexing)."""
        split = self.split(name)
        if not isinstance(index, int) or isinstance(index, bool):
            raise SplitError(f"index must be an integer, got {type(index).__name__}")
        if not 0 <= index < len(split.tasks):
            raise IndexError(f"index {index} is outside split {split.name!r} (0 to {len(split.tasks) - 1})")
        return split.tasks[index]

    def spec(self, name: Any, index: Any) -> dict[str, Any]:
        task = self.task(name, index)
        return {
            "id": task.id,
            "index": index,
            "split": name,
            "domain": task.domain,
            "family": task.family,
            "tags": list(task.tags),
            "instruction": task.instruction,
        }

    def specs(self, name: Any, start: Any = None, stop: Any = None) -> list[dict[str, Any]]:
        """The specs of `[start, stop)` of split `name` (None: its beginning or end); bounds past the end are cut to it,
        as a slice is; a negative bound is an `IndexError`."""
        split = self.split(name)
        bounds = [0 if start is None else start, len(split.tasks) if stop is None else stop]
        for b in bounds:
            if not isinstance(b, int) or isinstance(b, bool):
                raise SplitError(f"start and stop must be integers, got {type(b).__name__}")
            if b < 0:
                raise IndexError(f"a negative bound ({b}) in split {split.name!r}")
        return [self.spec(name, i) for i in range(bounds[0], min(bounds[1], len(split.tasks)))]
