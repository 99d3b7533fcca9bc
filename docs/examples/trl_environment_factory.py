"""GRPO with TRL's `environment_factory` on groundstate tasks (docs/INTEGRATIONS.md).

    python docs/examples/trl_environment_factory.py            # Qwen2.5-0.5B-Instruct, the kiosk pool
    MODEL=path/to/model TASKS=retail STEPS=20 python docs/examples/trl_environment_factory.py

Every rollout gets its own sandbox; its reward is the final-state verdict (None for a system error).
"""

import os

import torch
from trl import GRPOConfig, GRPOTrainer

from groundstate.integrations.trl import environment_factory, trl_dataset
from groundstate.worlds.selectors import select_tasks, state_graded_only

# rubric tasks need the reply judged, which TRL does not give the environment: they are left out
pairs = state_graded_only(select_tasks(os.environ.get("TASKS", "kiosk")))
trainer = GRPOTrainer(
    model=os.environ.get("MODEL", "Qwen/Qwen2.5-0.5B-Instruct"),
    args=GRPOConfig(
        output_dir=os.environ.get("OUT", "runs/trl-env"),
        max_steps=int(os.environ.get("STEPS", "50")),
        per_device_train_batch_size=8,
        num_generations=8,
        max_completion_length=2048,
        max_tool_calling_iterations=20,
        learning_rate=1e-6,
        beta=0.0,
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(),
    ),
    train_dataset=trl_dataset(pairs),
    environment_factory=environment_factory(pairs, backend=os.environ.get("BACKEND", "sqlite")),
)
trainer.train()
trainer.save_model()
print(f"checkpoint: {trainer.args.output_dir}")
