"""The Ray executor: the same results file as the local executor, resume, and crashed actors (one local Ray per module)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from groundstate.pipeline.ray_executor import AttemptWorker, RayExecutor, ray_session  # noqa: E402
from groundstate.pipeline.runner import RunConfig, run  # noqa: E402
from groundstate.records import read_records  # noqa: E402
from groundstate.state import make_backend  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.worlds.domain import Domain  # noqa: E402

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parents[1] / "fixtures" / "shop"
K = 6
CFG = RunConfig(agent="scripted:noisy:0.3", k=K)
SQLITE = ("sqlite", None)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One private two-CPU Ray instance for the module (through the executor's own start-up path); the executor reuses it."""
    with ray_session(num_cpus=2):
        assert ray.cluster_resources()["CPU"] == 2
        yield
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def pairs():
    d = Domain(FIXTURE)
    return [(t, d) for t in d.tasks]


@pytest.fixture(scope="module")
def plain(pairs, tmp_path_factory):
    path = tmp_path_factory.mktemp("plain") / "results.jsonl"
    run(pairs, CFG, SqliteBackend(), path)
    return {r.key: r for r in read_records(path)}


def _essence(r):
    return r.reward, r.task_id, r.attempt, r.verdict


def run_ray(pairs, cfg, spec, path, worker_cls=AttemptWorker, **kw):
    """`runner.run` with the Ray executor on the module's Ray instance, on the backend `spec` names."""
    backend = make_backend(*spec)
    try:
        return run(pairs, cfg, backend, path, executor=RayExecutor(backend, worker_cls=worker_cls), **kw)
    finally:
        backend.close()


def test_ray_run_matches_the_asyncio_runner_and_resumes(pairs, plain, tmp_path):
    path = tmp_path / "results.jsonl"
    seen = []
    summary = run_ray(pairs, CFG, SQLITE, path, on_result=seen.append)
    records = read_records(path)
    assert len(records) == len({r.key for r in records}) == len(pairs) * K == summary.ran == len(seen)
    assert {r.key: _essence(r) for r in records} == {k: _essence(r) for k, r in plain.items()}
    assert summary.system_errors == 0 and summary.passed == sum(r.reward == 1 for r in plain.values())
    assert 0 < summary.passed < summary.ran
    manifest = json.loads(summary.manifest.read_text())
    assert manifest["executor"] == "ray" and manifest["backend"] == "sqlite" and manifest["config"]["k"] == K

    again = run_ray(pairs, CFG, SQLITE, path)  # everything finished: nothing runs
    assert (again.ran, again.skipped) == (0, len(pairs) * K) and read_records(path) == records

    lines = path.read_text().splitlines(keepends=True)  # a crash lost the last three and left half a line
    path.write_text("".join(lines[:-3]) + lines[-3][:20])
    resumed = run_ray(pairs, CFG, SQLITE, path)
    assert (resumed.ran, resumed.skipped) == (3, len(pairs) * K - 3)
    after = read_records(path)
    assert len(after) == len({r.key for r in after}) == len(pairs) * K
    assert {r.key: _essence(r) for r in after} == {k: _essence(r) for k, r in plain.items()}


class CrashingWorker(AttemptWorker):
    """Its process dies on a batch holding shop-multi attempt 0 (as a segfault or an OOM kill would)."""

    async def run(self, items):
        if any((task_id, attempt) == ("shop-multi", 0) for task_id, _, attempt, _, _ in items):
            os._exit(1)
        return await super().run(items)


class FailingWorker(AttemptWorker):
    """Its own code raises on every batch; the process lives on."""

    async def run(self, items):
        raise RuntimeError("worker bug")


def test_a_crashed_actor_turns_its_attempts_into_system_errors_that_the_next_run_retries(pairs, plain, tmp_path):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actor processes cannot import this test module
    path = tmp_path / "results.jsonl"
    summary = run_ray(pairs, CFG, SQLITE, path, worker_cls=CrashingWorker)
    records = read_records(path)
    assert len(records) == len({r.key for r in records}) == len(pairs) * K  # no key lost
    errors = {r.key: r.system_error for r in records if r.system_error}
    assert ("shop-multi", 0) in errors and summary.system_errors == len(errors)
    assert all(e.startswith("Ray worker died") for e in errors.values())
    assert all(r.reward is None and r.trajectory is None for r in records if r.system_error)
    assert len(errors) < len(records)  # the replaced actors ran the rest

    retried = run_ray(pairs, CFG, SQLITE, path, repair=True)  # plain workers: the system-error keys run again
    assert retried.ran == len(errors) and retried.system_errors == 0
    after = read_records(path)
    assert len(after) == len({r.key for r in after}) == len(pairs) * K
    assert {r.key: _essence(r) for r in after} == {k: _essence(r) for k, r in plain.items()}


def test_a_failing_worker_records_system_errors_and_the_task_mismatch_check(pairs, tmp_path):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    summary = run_ray(pairs[:1], RunConfig(agent="scripted:gold", k=2), SQLITE, tmp_path / "a.jsonl", worker_cls=FailingWorker)
    assert summary.system_errors == 2
    assert all("Ray worker failed: RuntimeError: worker bug" in r.system_error for r in read_records(tmp_path / "a.jsonl"))

    task, domain = pairs[0]
    edited = task.model_copy(update={"gold": task.gold[:-1]})  # the driver's task differs from the worker's file
    summary = run_ray([(edited, domain)], RunConfig(agent="scripted:gold", k=1), SQLITE, tmp_path / "b.jsonl")
    [r] = read_records(tmp_path / "b.jsonl")
    assert summary.system_errors == 1 and "differs from the driver's" in r.system_error


@pytest.mark.postgres
def test_actors_build_their_own_postgres_backend(pairs, plain, pg_backend, tmp_path):
    """Actors get only (name, dsn); verdicts on PostgreSQL match the SQLite run key for key."""
    path = tmp_path / "results.jsonl"
    cfg = RunConfig(agent="scripted:noisy:0.3", k=2)
    summary = run_ray(pairs, cfg, ("postgres", pg_backend.dsn), path)
    for _ in range(2):  # a shared, busy server may refuse connections: that is a system error, and --repair's job
        if not summary.system_errors:
            break
        summary = run_ray(pairs, cfg, ("postgres", pg_backend.dsn), path, repair=True)
    records = read_records(path)
    assert len(records) == len({r.key for r in records}) == len(pairs) * 2
    assert {r.key: _essence(r) for r in records} == {k: _essence(r) for k, r in plain.items() if k[1] < 2}


@pytest.mark.postgres
def test_each_actor_pools_only_as_many_sandboxes_as_it_runs_at_once(pg_backend):
    """Per-node pools: an actor's PostgreSQL backend holds at most its share of the run's concurrency."""
    worker = AttemptWorker(("postgres", pg_backend.dsn), RunConfig(agent="scripted:gold", k=1, concurrency=12), in_flight=3)
    try:
        assert worker.backend.max_open == 3 and worker.slots._value == 3
    finally:
        worker.close()
    assert AttemptWorker(SQLITE, CFG, in_flight=3).backend.max_open is None  # in-memory SQLite copies hold no connection


def test_probe_spreads_attempts_over_ray(pairs, plain, tmp_path):
    """`groundstate probe --ray` runs the same attempts as a local run, into a resumable probe file."""
    from typer.testing import CliRunner

    from groundstate.cli import app

    path = tmp_path / "probes.jsonl"
    args = ["probe", "--agent", "scripted:noisy:0.3", "--tasks", str(FIXTURE), "--k", "2", "--out", str(path), "--ray", "local"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    records = read_records(path)
    assert len(records) == len({r.key for r in records}) == len(pairs) * 2
    assert {r.key: _essence(r) for r in records} == {k: _essence(r) for k, r in plain.items() if k[1] < 2}
    assert "probes written to" in result.output
    again = CliRunner().invoke(app, args)  # resumes: nothing left to run
    assert again.exit_code == 0 and "0 attempts run" in again.output and len(read_records(path)) == len(records)
