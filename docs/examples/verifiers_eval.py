"""Evaluate a model on groundstate tasks with verifiers' own evaluation loop (docs/INTEGRATIONS.md).

    OPENAI_BASE_URL=http://localhost:8000/v1 MODEL=Qwen/Qwen2.5-7B-Instruct python docs/examples/verifiers_eval.py

The same as `vf-eval groundstate-verifiers ...` from Python: the taskset `groundstate-verifiers`, its harness (groundstate's
attempt path), a local runtime, nothing uploaded. Needs `pip install "groundstate[verifiers]"`.
"""

import asyncio
import os

from pydantic_config import cli
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.cli.resolve import narrow_config, with_positional_taskset
from verifiers.v1.configs.cli.eval import EvalConfig

os.environ.setdefault("OPENAI_API_KEY", "none")
argv = with_positional_taskset(
    [
        "groundstate-verifiers",
        "--env.taskset.tasks", os.environ.get("TASKS", "kiosk-cancel-001"),
        "--model", os.environ.get("MODEL", "Qwen/Qwen2.5-7B-Instruct"),
        "--client.base-url", os.environ.get("OPENAI_BASE_URL", "http://localhost:8000/v1"),
        "--client.api-key-var", "OPENAI_API_KEY",
        "--env.agent.runtime.type", "subprocess",  # the harness runs in process: no remote sandbox
        "-r", os.environ.get("ROLLOUTS", "1"),
        "--no-push", "--no-rich",
        "--output-dir", os.environ.get("OUT", "runs/verifiers"),
    ]
)  # fmt: skip
episodes = asyncio.run(run_eval(cli(narrow_config(EvalConfig, argv), args=argv)))
for episode in episodes:
    for trace in episode.traces:
        task = trace.task.data.task_id
        if trace.ok:  # a rollout that is not ok had a system error: it has no score (verifiers' `reward` reads 0)
            print(f"{task}: reward {trace.rewards['final_state'].score}, {trace.info['groundstate']['finish_reason']}")
        else:
            print(f"{task}: system error: {trace.errors[0].message}")
print(f"traces written under {os.environ.get('OUT', 'runs/verifiers')}")
