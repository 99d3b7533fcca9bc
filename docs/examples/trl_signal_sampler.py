"""Online sampling by expected signal inside TRL's own GRPOTrainer (docs/INTEGRATIONS.md).

    python docs/examples/trl_signal_sampler.py                  # Qwen2.5-0.5B-Instruct, the kiosk tasks, 50 steps
    MODEL=path/to/model TASKS=retail G=8 TASKS_PER_STEP=8 STEPS=20 python docs/examples/trl_signal_sampler.py

Each step's tasks are drawn by the chance that a group of G rollouts is mixed (some pass, some fail) under what the
episodes so far say of the policy's pass rate on each task; every graded rollout teaches the sampler.
"""

import os

import torch
from trl import GRPOConfig, GRPOTrainer

from groundstate.integrations.trl import environment_factory, trl_dataset
from groundstate.train.curriculum import SignalSampler
from groundstate.worlds.selectors import select_tasks, state_graded_only

G, TASKS_PER_STEP, STEPS = (int(os.environ.get(k, d)) for k, d in (("G", "8"), ("TASKS_PER_STEP", "8"), ("STEPS", "50")))
pairs = state_graded_only(select_tasks(os.environ.get("TASKS", "kiosk")))
dataset = trl_dataset(pairs)
sampler = SignalSampler(dataset["task_id"], group_size=G, tasks_per_step=TASKS_PER_STEP, steps=STEPS)  # probe={id: (runs, passes)}


class Trainer(GRPOTrainer):  # TRL 1.16 builds its train sampler in this private method (a test checks it still does)
    def _get_train_sampler(self, dataset=None):
        return sampler


trainer = Trainer(
    model=os.environ.get("MODEL", "Qwen/Qwen2.5-0.5B-Instruct"),
    args=GRPOConfig(
        output_dir=os.environ.get("OUT", "runs/trl-signal"),
        num_generations=G,
        per_device_train_batch_size=G * TASKS_PER_STEP,  # one step's draw: its tasks, G rollouts of each
        max_steps=STEPS,
        max_completion_length=2048,
        max_tool_calling_iterations=20,
        learning_rate=1e-6,
        beta=0.0,
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(),
    ),
    train_dataset=dataset,
    environment_factory=environment_factory(pairs, on_episode=sampler.on_episode),  # every graded rollout teaches it
)
trainer.train()
trainer.save_model()
print(f"groups recorded: {sampler.recorded}; checkpoint: {trainer.args.output_dir}")
