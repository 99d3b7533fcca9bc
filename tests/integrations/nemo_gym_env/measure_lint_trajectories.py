"""A measurement, not part of `make test` (seven minutes): every lint trajectory of every state-graded bundled task —
gold, no-op and every mutant of gold (`conformance.trajectories`) — through NeMo Gym's own rollout collection, each
whole verdict compared with `play`'s. Run it by naming it (pytest collects a file it is given):

    .venv-nemogym/bin/python -m pytest -q -s tests/integrations/nemo_gym_env/measure_lint_trajectories.py

benchmarks/RESULTS.md has its figures."""

from __future__ import annotations

import json
import time

from test_nemo_gym_rollouts import SUITE, _collect, stack  # noqa: F401 - stack: the fixture, a stack of this module's own

from groundstate.agents.scripted import scripted_agent, scripted_user
from groundstate.integrations.conformance import trajectories
from groundstate.integrations.loop import run_sync
from groundstate.state import make_backend
from groundstate.worlds.attempt import play, prepare_domains
from groundstate.worlds.selectors import select_tasks, state_graded_only


def test_every_lint_trajectory_of_the_bundled_suite_gets_plays_verdict(stack):  # noqa: F811 - the imported fixture
    pairs = state_graded_only(select_tasks(SUITE))
    rows = [json.loads(line) for line in (stack / "resources_servers/gs/data/all.jsonl").read_text().splitlines()]
    by_task = {r["task_id"]: r for r in rows}
    plan, batch = {}, []
    for task, domain in pairs:
        for i, (_name, calls) in enumerate(trajectories(task, domain)):
            key = f"{task.id}#{i}"
            plan[key] = (task, domain, calls)
            row = json.loads(json.dumps(by_task[task.id]))
            row["responses_create_params"]["metadata"] = {"script": json.dumps(calls), "kind": key}
            batch.append(row)
    started = time.monotonic()
    rollouts = _collect(stack, batch, "lint")
    collected = time.monotonic() - started
    backend = make_backend("sqlite")
    prepare_domains([d for _, d in pairs], backend)

    async def reference(task, domain, calls):
        agent = scripted_agent(calls, task, "Done.")
        return (await play(task, domain, agent, scripted_user(task), backend=backend, blame=True)).verdict.to_json()

    got = {r["responses_create_params"]["metadata"]["kind"]: r["verdict"] for r in rollouts}
    assert sorted(got) == sorted(plan)  # every trajectory played once
    mismatched = [key for key, (task, domain, calls) in plan.items() if got[key] != run_sync(reference(task, domain, calls))]
    print(f"\ntasks={len(pairs)} trajectories={len(plan)} mismatches={len(mismatched)} collection={collected:.0f} s")
    assert not mismatched, mismatched[:10]
