"""The recipe's overrides compose with verl's own `ppo_trainer.yaml` and pass verl's own `validate_config`:
every key exists in verl's schema, and the values land where verl reads them."""

from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

from groundstate.train.verl.recipe import VerlRecipe, check, overrides, render

CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"


def composed(recipe: VerlRecipe):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides(render(recipe)))


@pytest.mark.parametrize("beta", [0.0, 0.01])
def test_reference_recipe_composes_and_validates_in_verl(beta, tmp_path):
    recipe = VerlRecipe(
        model=str(tmp_path / "model"),
        train_file=str(tmp_path / "train.parquet"),
        val_file=str(tmp_path / "val.parquet"),
        out_dir=str(tmp_path / "run"),
        nodes=3,
        gpus_per_node=8,
        sp=4,
        rollout_tp=4,
        beta=beta,
    )
    check(recipe)
    cfg = composed(recipe)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert need_critic(cfg) is False  # GRPO: no value model
    assert need_reference_policy(cfg) is (beta > 0)  # KL-free: no reference model at all
    r = cfg.actor_rollout_ref
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node, cfg.trainer.total_training_steps) == (3, 8, 50)
    assert (cfg.data.train_batch_size, r.rollout.n, r.actor.ppo_mini_batch_size) == (18, 8, 18)
    assert (r.rollout.temperature, r.rollout.top_k, r.rollout.top_p) == (1.0, 20, 0.95)
    assert (r.actor.optim.lr, r.actor.use_kl_loss, cfg.algorithm.use_kl_in_reward) == (1e-6, beta > 0, False)
    assert (r.actor.ulysses_sequence_parallel_size, r.rollout.tensor_model_parallel_size) == (4, 4)
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.algorithm.filter_groups.enable and cfg.algorithm.filter_groups.metric == "reward"
    assert cfg.trainer.v1.trainer_mode == "sync" and cfg.trainer.v1.sampler.sync_refill_failed_groups
    assert r.rollout.agent.default_agent_loop == "groundstate"
    assert r.rollout.agent.agent_loop_config_path == str(tmp_path / "run" / "agent_loop.yaml")
    omega_conf_to_dataclass(r.rollout)  # verl's typed rollout config accepts the section
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves


def test_a_recipe_verl_would_refuse_is_refused_first(tmp_path):
    """verl's own check and ours agree on a batch that does not split over the GPUs."""
    from groundstate.train.verl.recipe import RecipeError

    recipe = VerlRecipe(model="m", train_file="t.parquet", out_dir=str(tmp_path), nodes=1, gpus_per_node=8, tasks_per_step=3, group_size=2)
    with pytest.raises(RecipeError, match="do not split evenly over 8 GPUs"):
        check(recipe)
    cfg = composed(recipe)
    with pytest.raises(AssertionError, match="real_train_batch_size"):
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


@pytest.mark.slow
def test_gpu_check_recipe_composes_and_validates(tmp_path):
    """scripts/gpu_check.sh without a GPU: its model and pool build, and the recipe it would launch is one verl accepts."""
    import os
    import subprocess
    import sys

    import yaml

    script = Path(__file__).parents[3] / "scripts" / "gpu_check.sh"
    env = {**os.environ, "PYTHON": sys.executable}
    res = subprocess.run(["bash", str(script), "--prepare-only", str(tmp_path / "check")], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = yaml.safe_load(res.stdout[res.stdout.index("topology:") : res.stdout.index("# launch command")])
    assert doc["topology"]["trajectories_per_step"] == 8 and doc["topology"]["verl_validated"] is True  # verl's validate_config passed
    assert (tmp_path / "check" / "model" / "model.safetensors").is_file()
    cfg = doc["config"]  # verl's whole resolved config
    assert cfg["algorithm"]["filter_groups"]["enable"] is False and cfg["trainer"]["total_training_steps"] == 1
    assert cfg["actor_rollout_ref"]["rollout"]["enforce_eager"] is True and cfg["actor_rollout_ref"]["rollout"]["name"] == "vllm"


def test_launch_writes_the_run_and_starts_verls_trainer_with_the_checked_overrides(tmp_path, monkeypatch):
    """Up to the process boundary: datasets, agent-loop file, config and run info are written, and the command
    started is verl's PPO entry point with overrides verl composes and validates. (Training itself needs GPUs.)"""
    import json
    import subprocess
    import sys

    from typer.testing import CliRunner

    from groundstate.cli import app
    from groundstate.train.verl.recipe import RUN_INFO
    from groundstate.worlds.domain import iter_tasks

    pool = tmp_path / "train.yaml"
    pool.write_text("".join(f"- {t.id}\n" for t, _ in iter_tasks(["kiosk"], "pool")[:8]))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "groundstate.json").write_text(json.dumps({"tools_in_prompt": False, "system_in_prompt": False}))
    started = []

    class Done:
        returncode = 0

    monkeypatch.setattr(subprocess, "run", lambda cmd, check=False: started.append(cmd) or Done())
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--engine",
            "verl",
            "--nodes",
            "1",
            "--gpus-per-node",
            "4",
            "--tasks-per-step",
            "4",
            "--group-size",
            "4",
            "--model",
            str(tmp_path / "model"),
            "--train",
            str(pool),
            "--val",
            str(pool),
            "--out",
            str(out),
            "--backend",
            "postgres",
        ],
    )
    assert res.exit_code == 0, res.output
    (cmd,) = started
    assert cmd[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    for name in ("data/train.parquet", "data/val.parquet", "agent_loop.yaml", "verl_config.yaml", RUN_INFO):
        assert (out / name).is_file(), name
    assert json.loads((out / RUN_INFO).read_text())["model"] == str(tmp_path / "model")
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "data" / "train.parquet").to_pylist()
    assert len(rows) == 8 and [m["role"] for m in rows[0]["prompt"]] == ["user"]  # prompted as the model's flags say
    entry = OmegaConf.load(out / "agent_loop.yaml")[0]
    assert entry.name == "groundstate" and entry.backend == "postgres"
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=cmd[3:])
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert cfg.data.train_files == str(out / "data" / "train.parquet") and cfg.data.val_files == str(out / "data" / "val.parquet")
    assert cfg.trainer.val_before_train is True and cfg.trainer.default_local_dir == str(out / "checkpoints")


def _dry_run(tmp_path, monkeypatch, *extra):
    from typer.testing import CliRunner

    from groundstate.cli import app
    from groundstate.worlds.domain import iter_tasks

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.yaml").write_text("".join(f"- {t.id}\n" for t, _ in iter_tasks(["kiosk"], "pool")[:20]))
    return CliRunner().invoke(
        app,
        [
            "train",
            "--engine",
            "verl",
            "--dry-run",
            "--nodes",
            "3",
            "--gpus-per-node",
            "8",
            "--sp",
            "4",
            "--rollout-tp",
            "4",
            "--tasks-per-step",
            "18",
            "--group-size",
            "8",
            "--model",
            "m",
            "--train",
            "train.yaml",
            *extra,
        ],
    )


def test_with_verl_installed_the_dry_run_prints_verls_full_resolved_config(tmp_path, monkeypatch):
    import yaml

    res = _dry_run(tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(res.stdout.split("# launch command")[0])
    assert doc["topology"]["verl_validated"] is True
    cfg = doc["config"]
    assert {"actor_rollout_ref", "critic", "reward", "algorithm", "trainer", "data"} <= set(cfg)  # verl's whole config, not the overrides
    assert cfg["actor_rollout_ref"]["rollout"]["prompt_length"] == 4096  # interpolations resolved
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 8 and cfg["algorithm"]["adv_estimator"] == "grpo"


def test_with_verl_installed_the_dry_run_relays_verls_own_refusals(tmp_path, monkeypatch):
    res = _dry_run(tmp_path, monkeypatch, "--verl-set", "actor_rollout_ref.actor.ppo_micro_batch_size=4")
    flat = " ".join(res.output.split())
    assert res.exit_code == 2 and "verl's own validation refused the config" in flat and "ppo_micro_batch_size" in flat
