"""`groundstate run` and `groundstate probe` as one library job: `evaluate` plays a task set's attempts under one
`EvaluateConfig` and returns the run's summary.

A probe is a run of the policy to be trained over candidate tasks, written where `groundstate select` looks for it; the
two differ only in what they take when not told (`RUN`, `PROBE`). Before anything is written, `evaluate` checks the
config (`config.check_config`), asks each OpenAI-compatible endpoint once whether it can serve the run
(`openai_compat.probe_endpoint`), and checks that Ray is there when asked for: whatever would fail every attempt is one
`CannotStart`. Then it removes the sandboxes of killed runs and hands the attempts to `runner.run`, on this machine or
on Ray actors (`ray_executor`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from groundstate.pipeline.config import RecordSink, RunConfig, check_config, endpoint_specs
from groundstate.pipeline.runner import Executor, LocalExecutor, RunSummary, run
from groundstate.state.base import Backend
from groundstate.tasks import Task
from groundstate.types import Domain


@dataclass(frozen=True)
class Purpose:
    """What a run or a probe takes when not told: its task selector and attempts per task, and how its results file is
    named (a folder under runs/ named after the agent, the tasks and k)."""

    tasks: str
    k: int
    folder: str
    file: str


RUN = Purpose("bench", 1, "{agent}_{tasks}_k{k}", "results.jsonl")  # the benchmark, measured once
PROBE = Purpose("pool", 8, "probe_{agent}_{tasks}_n{k}", "probes.jsonl")  # the training pool, sampled as training will


class CannotStart(ValueError):
    """The job cannot start: an agent that cannot be built, an endpoint that cannot serve it, Ray missing. The message
    says what and how to fix it; nothing was run or written."""


@dataclass
class EvaluateConfig(RunConfig):
    """One `run` or `probe`: a run's settings (`RunConfig`, whose defaults are these too) and what the job adds: its
    task selector, where its records go, whether it repairs or reruns, and its executor. `tasks`, `k` and `out` left
    None are the purpose's (`RUN`, or `PROBE` when `probe`), resolved here; `defaulted` names the settings so taken
    (`{"tasks": "bench", "k": 1}`), for a caller to say."""

    k: int | None = None  # attempts per task
    tasks: str | None = None  # a task selector (`worlds.selectors`): what the results file is named after
    probe: bool = False
    out: Path | None = None  # the results file (JSONL); running again resumes it
    repair: bool = False  # run again only the attempts that ended in a system error
    rerun_changed: bool = False  # resuming: run again the attempts of tasks that changed since they were recorded
    ray: str | None = None  # play the attempts on Ray actors: local (a private instance), auto, HOST:PORT or ray://HOST:10001
    ray_cpus: int | None = None  # with `ray`: the actors (and the CPUs of a local instance)
    defaulted: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        purpose = PROBE if self.probe else RUN
        if not self.tasks:
            self.tasks = self.defaulted["tasks"] = purpose.tasks
        if not self.k:
            self.k = self.defaulted["k"] = purpose.k
        if self.out is None:
            folder = purpose.folder.format(agent=slug(str(self.agent)), tasks=slug(self.tasks), k=self.k)
            self.out = Path("runs") / folder / purpose.file

    def run_config(self) -> RunConfig:
        """The run's own settings, as `runner.run` takes them (and the manifest records them)."""
        return RunConfig(**{f.name: getattr(self, f.name) for f in fields(RunConfig)})


def slug(text: str) -> str:
    """`text` as one part of a folder name: letters, digits and dots, the rest one dash, at most 60 characters."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[:60]


def evaluate(
    cfg: EvaluateConfig,
    tasks: list[tuple[Task, Domain]],
    backend: Backend,
    *,
    on_warning: Callable[[str], None] | None = None,
    on_ready: Callable[[], None] | None = None,
    on_plan: Callable[[int, int], None] | None = None,
    on_result: RecordSink | None = None,
) -> RunSummary:
    """Play (or resume) `tasks` × k attempts into `cfg.out` on `backend` (which the caller opens and closes).

    `CannotStart` before anything is written for a job that could only fail (see the module docstring); `on_warning`
    hears an endpoint that answers but may not serve (a model it does not list), `on_ready()` that the checks passed
    and the job starts. Then as `runner.run`: `on_plan(planned, already_done)`, `on_result(record)` for each record
    written, and its errors (`ResultsInUseError`, `ResumeRefused`, `ResultsWriteError`, `EndpointsDown`, ...)."""
    from groundstate.agents.openai_compat import probe_endpoint

    run_cfg = cfg.run_config()
    try:  # a spec that could only fail every attempt
        check_config(run_cfg)
    except ValueError as e:
        raise CannotStart(str(e)) from None
    for role, spec in endpoint_specs(run_cfg).items():  # one request each, before the first attempt
        found = probe_endpoint(spec.endpoint)
        if found.problem:
            raise CannotStart(f"--{role} {spec}: {found.problem}")
        if found.warning and on_warning:
            on_warning(f"--{role} {spec}: {found.warning}")
    acting = sum(bool(t.user.actions) for t, _ in tasks)
    if acting and not (run_cfg.user.is_llm or run_cfg.user.gold) and on_warning:
        on_warning(
            f"{acting} of these tasks need the user to act on its own side (τ²'s telecom: its phone), which the scripted "
            "user never does: --user scripted:gold makes the user's gold calls when the agent hands it the turn (for "
            "scripted agents: it would pass an agent that only says it is done), --user openai:MODEL[@URL] lets an LLM user act"
        )
    if on_ready:
        on_ready()
    if cfg.ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise CannotStart("--ray needs Ray: pip install 'groundstate[ray]'") from None
    backend.cleanup_stale()  # the sandboxes of runs that were killed
    return run(tasks, run_cfg, backend, cfg.out, cfg.repair, on_result, cfg.rerun_changed, executor=_executor(cfg, backend), on_plan=on_plan)


def _executor(cfg: EvaluateConfig, backend: Backend) -> Executor:
    """Ray actors when `cfg.ray` names a cluster, else this machine's event loop."""
    if not cfg.ray:
        return LocalExecutor(backend)
    from groundstate.pipeline.ray_executor import RayExecutor

    return RayExecutor(backend, address=None if cfg.ray == "local" else cfg.ray, num_cpus=cfg.ray_cpus)
