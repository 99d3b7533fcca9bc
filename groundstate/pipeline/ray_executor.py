"""The Ray executor: a run's attempts played by actors across a cluster (`groundstate.pipeline.runner.run(..., executor=RayExecutor(...))`).

Everything else about the run stays `runner.run`'s: the plan (finished keys are skipped, system-error keys retried,
`repair=True` retries only those), the manifest, and one results line per attempt appended by the driver as
results arrive, so an interrupted run resumes with the same command, with or without Ray.

What Ray adds: a pool of `AttemptWorker` actors (one per CPU of the cluster by default), each holding its
own backend (built inside the actor from the driver backend's `spec()`: backends hold connections and do not
serialise), grader (with its cache of golden states), agents, and one event loop for its whole life
(shared model-backed agents keep their async clients between batches). The driver sends batches of
`(task id, domain reference, attempt)`, never pickled tasks: the actor resolves the reference
(`groundstate.worlds.refs`: a bundled name, a folder, or a ThinkingBox dataset with its test list and servers file)
and checks that the task and domain files match the driver's. The driver keeps two batches
queued per actor and writes each batch's records as it returns. Every planned attempt ends as a record:
an actor that dies turns its batches into system-error records (retried by the next run, or `--repair`)
and is replaced.

Concurrency: `cfg.concurrency` is spread over the actors, at least one attempt in flight per actor. Each
actor's sandbox pool lives on its node and is sized to its share (on PostgreSQL a pooled clone is a
connection, so the cluster holds at most `cfg.concurrency` of them: keep that below the server's
`max_connections`). Sandbox databases are named `gs_sb_<host tag>_<pid>_o<key>_…`, so the nodes of a cluster can
share one PostgreSQL server; their owner holds an advisory lock on its key, so `cleanup_stale()`, from any node, drops
the sandboxes of dead owners anywhere and never a live one's.

Using a cluster (every node needs the same Python environment with groundstate installed; bundled domains
travel by name, other domain folders by absolute path, which must exist on every node):
    ray start --head --port=6379                 # on the head node
    ray start --address=HEAD_IP:6379             # on each other node
    groundstate run --agent openai:MODEL@URL --tasks bench --k 8 --ray auto          # on a node of the cluster
    groundstate run --agent openai:MODEL@URL --tasks bench --k 8 --ray HEAD_IP:6379  # or ray://HEAD_IP:10001 (Ray Client)
    ray stop                                     # on each node when done
From Python: `run(pairs, cfg, backend, path, executor=RayExecutor(backend, address="auto"))`. Without a cluster,
`--ray local` (`address=None`) starts a private Ray instance on this machine and shuts it down at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import shutil
import tempfile
import traceback
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from groundstate.pipeline.config import Planned, RecordSink, RunConfig
from groundstate.pipeline.runner import RunAgents, make_record, run_attempt
from groundstate.records import AttemptRecord
from groundstate.state import make_backend
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import Domain, system_error
from groundstate.worlds.refs import TaskResolver

CLOSE_TIMEOUT_S = 180
Item = tuple[str, str, int, str, str]  # task id, domain reference, attempt, task fingerprint, domain content hash
Outcome = tuple[str, int, "AttemptRecord | None", "str | None"]  # task id, attempt, record, or the error that prevented one


class AttemptWorker:
    """Runs batches of attempts in one process; wrapped with `ray.remote` by `RayExecutor` (a plain class here,
    so that importing this module needs no Ray, and a subclass can take its place).

    `run` is a coroutine, so Ray makes this an async actor: batches run on the actor's one event loop for
    its whole life (shared model-backed agents keep their async clients), up to `in_flight` attempts at once.
    """

    def __init__(self, backend_spec: tuple[str, str | None], cfg: RunConfig, in_flight: int = 1):
        self.cfg = cfg
        # each actor keeps its own sandbox pool on its node, sized to the attempts it runs at once: the
        # actors of a cluster together hold at most `cfg.concurrency` sandboxes (a PostgreSQL clone is a connection)
        self.backend = make_backend(*backend_spec, **({"max_open": max(1, in_flight)} if backend_spec[0] != "sqlite" else {}))
        self.agents = RunAgents(cfg)
        self.slots = asyncio.Semaphore(max(1, min(in_flight, self.backend.max_open or in_flight)))
        self.tasks = TaskResolver()

    async def run(self, items: list[Item]) -> list[Outcome]:
        async def one(item: Item) -> Outcome:
            task_id, ref, attempt, fingerprint, content_hash = item
            try:
                task, domain = self._task(task_id, ref, fingerprint, content_hash)
            except Exception as e:  # noqa: BLE001 - the driver turns it into a system-error record
                return task_id, attempt, None, f"{type(e).__name__}: {e}"
            async with self.slots:
                return task_id, attempt, await run_attempt(task, domain, attempt, self.backend, self.agents, self.cfg), None

        return list(await asyncio.gather(*(one(i) for i in items)))

    def _task(self, task_id: str, ref: str, fingerprint: str, content_hash: str) -> tuple[Task, Domain]:
        task, domain = self.tasks.resolve(ref, task_id)
        if domain.content_hash != content_hash or task.fingerprint() != fingerprint:
            raise RuntimeError(f"task {task_id} or domain {domain.name} on this worker ({os.uname().nodename}) differs from the driver's")
        return task, domain

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.agents.close()
        self.backend.close()


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[None]:
    """Ray for the duration of the block: an already initialised Ray is used as it is; otherwise connect to
    `address` ("auto", "HOST:PORT", "ray://HOST:10001") or, with None, start a private local instance with
    `num_cpus` CPUs (default: all). Whatever is started here is shut down at the end."""
    import ray

    if ray.is_initialized():
        yield
        return
    temp_dir = None
    if address is None:
        # a short private folder: Ray's socket paths must fit in 107 bytes, and tests must not share /tmp/ray
        temp_dir = tempfile.mkdtemp(prefix="gsray", dir="/tmp" if os.path.isdir("/tmp") else None)
        ray.init(num_cpus=num_cpus, include_dashboard=False, _temp_dir=temp_dir, logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)


class RayExecutor:
    """Runs planned attempts on Ray actors (see the module docstring).

    `address`: None starts a private local instance (`--ray local`); "auto", "HOST:PORT" or "ray://HOST:10001" join a
    cluster. `num_cpus`: the CPUs of a local instance and the number of actors (default: the cluster's CPUs);
    `actor_options`: Ray options for each actor (e.g. `{"num_gpus": 0.5}` for local models; default 1 CPU).
    """

    def __init__(
        self,
        backend: Backend,
        address: str | None = None,
        num_cpus: int | None = None,
        actor_options: dict[str, Any] | None = None,
        worker_cls: type = AttemptWorker,
    ):
        self.backend_spec = backend.spec()
        self.address, self.num_cpus, self.actor_options, self.worker_cls = address, num_cpus, actor_options, worker_cls

    def describe(self) -> dict[str, Any]:
        return {"executor": "ray", "ray_address": self.address}

    def execute(self, todo: list[Planned], cfg: RunConfig, record: RecordSink) -> None:
        import ray

        by_key = {(t.id, a): t for t, _, a in todo}

        def failed(task_id: str, attempt: int, message: str) -> AttemptRecord:
            return make_record(by_key[(task_id, attempt)], attempt, cfg, system_error(message, "infrastructure"), None, {})

        with ray_session(self.address, self.num_cpus):
            _drive(ray, todo, cfg, self.backend_spec, self.num_cpus, self.actor_options, self.worker_cls, record, failed)


def _drive(
    ray: Any,
    todo: list[Planned],
    cfg: RunConfig,
    backend_spec: tuple[str, str | None],
    num_cpus: int | None,
    actor_options: dict[str, Any] | None,
    worker_cls: type,
    record: RecordSink,
    failed: Callable[[str, int, str], AttemptRecord],
) -> None:
    """Feed batches to the actors, two queued per actor so none waits on the driver, and record each batch as it returns."""
    actors_n = max(1, min(num_cpus or int(ray.cluster_resources().get("CPU", 1)), len(todo)))
    in_flight = max(1, math.ceil(cfg.concurrency / actors_n))
    batch = max(1, min(in_flight, math.ceil(len(todo) / (actors_n * 2))))
    refs = {id(d): d.ref() for _, d, _ in todo}
    items = [(t.id, refs[id(d)], a, t.fingerprint(), d.content_hash) for t, d, a in todo]
    pending = deque(items[i : i + batch] for i in range(0, len(items), batch))
    Actor = ray.remote(worker_cls).options(**({"num_cpus": 1} | (actor_options or {})))

    def spawn():
        return Actor.remote(backend_spec, cfg, in_flight)

    actors: list[Any] = [spawn() for _ in range(actors_n)]
    replacements_left = 2 * actors_n + 2  # a worker that cannot even start (bad DSN, missing package) must not spin forever
    inflight: dict[Any, tuple[int, Any, list[Item]]] = {}

    def top_up(slot: int) -> None:
        while pending and actors[slot] is not None and sum(1 for s, _, _ in inflight.values() if s == slot) < 2:
            b = pending.popleft()
            inflight[actors[slot].run.remote(b)] = (slot, actors[slot], b)

    try:
        for slot in range(actors_n):
            top_up(slot)
        while inflight:
            [ref], _ = ray.wait(list(inflight), num_returns=1)
            slot, actor, b = inflight.pop(ref)
            outcomes, died = _outcomes(ray, ref, b)
            if died and actors[slot] is actor:  # the first failed batch of this actor replaces it; its other batches fail alike
                with contextlib.suppress(Exception):
                    ray.kill(actor)
                actors[slot] = spawn() if replacements_left > 0 else None
                replacements_left -= 1
            for task_id, attempt, r, error in outcomes:
                record(r if r is not None else failed(task_id, attempt, error))
            top_up(slot)
            if not inflight and pending:  # every actor is gone: what is left becomes system errors, for --repair
                while pending:
                    for task_id, _, attempt, _, _ in pending.popleft():
                        record(failed(task_id, attempt, "no Ray worker left to run this attempt"))
    finally:
        _release(ray, list(inflight), [a for a in actors if a is not None])


def _outcomes(ray: Any, ref: Any, batch: list[Item]) -> tuple[list[tuple[str, int, AttemptRecord | None, str | None]], bool]:
    """A returned batch's outcomes, and whether its actor died: a lost batch's keys come back as errors, never lost."""
    try:
        return ray.get(ref), False
    except ray.exceptions.RayActorError as e:  # the actor's process died: its batches are lost, never its keys
        return [(t, a, None, f"Ray worker died: {_first_line(e)}") for t, _, a, _, _ in batch], True
    except Exception as e:  # noqa: BLE001 - an error in the worker's own code: the actor lives on
        return [(t, a, None, f"Ray worker failed: {_first_line(e)}") for t, _, a, _, _ in batch], False


def _release(ray: Any, inflight: list[Any], live: list[Any]) -> None:
    """Cancel what is still queued (its keys stay unfinished for the next run), close the actors' pooled sandboxes, kill them."""
    for ref in inflight:
        with contextlib.suppress(Exception):
            ray.cancel(ref)
    try:  # drop pooled sandbox databases before the processes go (a busy PostgreSQL takes seconds per DROP)
        ray.get([a.close.remote() for a in live], timeout=CLOSE_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - the results are safe; only cleanup is left
        warnings.warn(
            f"Ray workers did not close cleanly ({_first_line(e)}): sandbox databases may be left; "
            "the next PostgreSQL backend to start (or PostgresBackend.cleanup_stale(), from any machine) drops them",
            RuntimeWarning,
            stacklevel=3,
        )
    for a in live:
        with contextlib.suppress(Exception):
            ray.kill(a)


def _first_line(e: BaseException) -> str:
    cause = getattr(e, "cause", None) or e  # a RayTaskError wraps the worker's exception
    lines = [line for line in "".join(traceback.format_exception_only(type(cause), cause)).splitlines() if line.strip()]
    return (lines[0] if lines else type(cause).__name__)[:300]
