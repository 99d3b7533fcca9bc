"""Served episodes on record (`groundstate serve --out FILE`): every episode a server finishes, graded or not, as one
results record (a failure's blame in its verdict), so that `metrics`, `report` and `regrade` read what a trainer or
an outside evaluator played.

A file holds one run, as every results file does. Its identity (`RunIdentity`): the agent `served:<protocol>` (the
policy is the client's, unknown to the server), the user as served, seed 0, no sampling (the client's own), the
limits and the served task set. Each record's own `agent` is the name the client declared (OpenEnv: `reset(agent=...)`;
MCP: `clientInfo.name` of its `initialize`), `client` where it declared none. A task's attempts are numbered in the
order its episodes finish, after those the file already holds; a file holding another run's records, or records of a
task whose definition changed since, is refused before the server starts (`ResumeRefused`), writing nothing.
"""

from __future__ import annotations

import threading
from pathlib import Path

from groundstate.pipeline.resume import ResumeRefused, limits_identity
from groundstate.pipeline.runner import stamp
from groundstate.records import AttemptRecord, ResultsWriter, RunIdentity, attempt_record, read_records, task_set_hash
from groundstate.tasks import Task
from groundstate.types import Domain, EpisodeLimits, Trajectory, Verdict
from groundstate.worlds.attempt import task_fingerprint

__all__ = ["DEFAULT_CLIENT", "ServedEpisodes"]

DEFAULT_CLIENT = "client"  # a record's agent where the client declared no name


class ServedEpisodes:
    """The results file of one server: `record` writes each finished episode (from any thread), `close` releases it."""

    def __init__(self, path: Path | str, protocol: str, tasks: list[tuple[Task, Domain]], user: str, limits: EpisodeLimits):
        self.path = Path(path)
        self.identity = RunIdentity(
            agent=f"served:{protocol}",
            user=user,
            seed=0,
            limits=limits_identity(limits),
            tasks=task_set_hash([t.id for t, _ in tasks]),
        )
        self._fingerprints = {t.id: task_fingerprint(t, d) for t, d in tasks}
        self._writer = ResultsWriter(self.path)  # the file's lock first: no other writer changes it under the check
        try:
            self._next = self._attempts_so_far(read_records(self.path, repair_tail=True, missing_ok=True))
        except BaseException:
            self._writer.close()
            raise
        self._lock = threading.Lock()

    def _attempts_so_far(self, existing: list[AttemptRecord]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in existing:
            if r.run is None or r.run.id != self.identity.id:
                differs = ", ".join(r.run.differences(self.identity)) if r.run is not None else "it has no run identity"
                raise ResumeRefused(f"{self.path} holds records of another run ({differs}): a results file holds one run; give --out another file")
            if r.task_fingerprint != self._fingerprints.get(r.task_id, r.task_fingerprint):
                raise ResumeRefused(f"{self.path}: task {r.task_id} changed since its records there were written; give --out another file")
            counts[r.task_id] = max(counts.get(r.task_id, 0), r.attempt + 1)
        return counts

    def record(self, task: Task, verdict: Verdict, trajectory: Trajectory | None, timings: dict[str, float], agent: str | None) -> None:
        """Write the finished episode of `task` as the task's next attempt; `agent`: the client's declared name."""
        with self._lock:
            attempt = self._next.get(task.id, 0)
            self._next[task.id] = attempt + 1
            record = attempt_record(
                task, attempt, verdict, trajectory, timings, agent=agent or DEFAULT_CLIENT, model=None, user=self.identity.user, seed=0
            )
            self._writer.write(stamp(record, self.identity, self._fingerprints[task.id]))

    def close(self) -> None:
        self._writer.close()
