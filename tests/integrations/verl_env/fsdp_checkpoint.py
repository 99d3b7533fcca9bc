"""Write a real 2-rank FSDP2 checkpoint of a model directory with verl's own checkpoint manager (gloo, CPU).

    python fsdp_checkpoint.py MODEL_DIR ACTOR_DIR

Each rank shards the model with `fully_shard`, takes one optimiser step (so the weights differ from the
base), and `FSDPCheckpointManager.save_checkpoint` writes the layout verl's trainer writes
(`model_world_size_2_rank_R.pt`, `fsdp_config.json`, `huggingface/`). Rank 0 also saves the full
state dict it expects a merge to reproduce, as `ACTOR_DIR/../expected_state_dict.pt`.
"""

import os
import socket
import sys
from pathlib import Path


def _rank(rank: int, world: int, model_dir: str, actor_dir: str, port: int) -> None:
    import torch
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        tok = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))  # the mesh name verl's FSDP workers use
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        ids = torch.tensor([tok("Cancel order 1, please.")["input_ids"]])
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        sched.step()
        manager = FSDPCheckpointManager(
            model,
            opt,
            lr_scheduler=sched,
            processing_class=tok,
            checkpoint_config=OmegaConf.create({"save_contents": ["model", "optimizer", "extra"], "load_contents": ["model", "optimizer", "extra"]}),
        )
        manager.save_checkpoint(local_path=actor_dir, global_step=1)
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            torch.save(full, Path(actor_dir).parent / "expected_state_dict.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    model_dir, actor_dir = sys.argv[1], sys.argv[2]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(2, model_dir, actor_dir, port), nprocs=2, join=True)


if __name__ == "__main__":
    main()
