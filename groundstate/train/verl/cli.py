"""Command-line glue for the verl engine: `groundstate train --engine verl` and `groundstate merge`.

`groundstate.cli` keeps the options; this module turns them into a checked recipe, prints it
(`--dry-run`) or writes the run files and launches verl's trainer, and merges checkpoints.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from groundstate.train.verl.recipe import (
    RecipeError,
    VerlRecipe,
    agent_loop_entries,
    check,
    check_prompts,
    command,
    overrides,
    render,
    shell,
    write_run_files,
)

INSTALL_HINT = (
    "verl is not installed in this environment: install the verl extra in its own environment "
    "(pip install 'groundstate[verl]', plus verl's vllm or sglang extra on GPU machines; see docs/SCALE_OUT.md)"
)


def plan(recipe: VerlRecipe, pairs: list | None = None) -> dict[str, Any]:
    """The checked recipe as one document: derived topology, agent-loop registration, verl config, launch command.

    Where verl is installed, the overrides are also composed over verl's own `ppo_trainer.yaml` and checked
    by verl's `validate_config`; `resolved` is then verl's complete config as the trainer will see it."""
    topology = check(recipe)
    topology["prompts"] = check_prompts(recipe, pairs or []) or "not checked (no local tokenizer)"
    cfg = render(recipe)
    resolved = verl_resolved(cfg)
    topology["verl_validated"] = resolved is not None
    return {"topology": topology, "agent_loop_config": agent_loop_entries(recipe), "config": cfg, "resolved": resolved, "command": command(cfg)}


def verl_resolved(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """verl's full config with these overrides, after verl's own validation; None where verl is not installed."""
    if importlib.util.find_spec("verl") is None:
        return None
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
            composed = compose(config_name="ppo_trainer", overrides=overrides(cfg))
        with contextlib.redirect_stdout(sys.stderr):  # verl prints notices; stdout carries the YAML
            validate_config(composed, use_reference_policy=need_reference_policy(composed), use_critic=need_critic(composed))
        return OmegaConf.to_container(composed, resolve=True)
    except (AssertionError, ValueError, HydraException, OmegaConfBaseException) as e:  # verl validates with asserts and typed configs
        raise RecipeError([f"verl's own validation refused the config: {' '.join(str(e).split())}"]) from None


def dry_run_text(p: dict[str, Any]) -> str:
    doc = {k: p[k] for k in ("topology", "agent_loop_config")}
    doc["config"] = p["resolved"] if p["resolved"] is not None else p["config"]
    return (
        yaml.safe_dump(doc, sort_keys=False)
        + "\n# launch command (run on the Ray head node, in the verl environment):\n"
        + "\n".join("# " + line for line in shell(p["command"]).splitlines())
    )


def launch(recipe: VerlRecipe, pairs: list, val_pairs: list | None, log: Any) -> int:
    """Write the datasets and run files, then run verl's trainer in this interpreter's environment; returns its exit code."""
    from groundstate.agents.local import prompt_flags
    from groundstate.train.verl.dataset import write_parquet

    if importlib.util.find_spec("verl") is None:
        raise RecipeError([INSTALL_HINT])
    # the rows' prompt is what verl's length filter measures: open it the way the model will be prompted
    system = prompt_flags(recipe.model)["system_in_prompt"]
    write_parquet(pairs, recipe.train_file, "train", system_in_prompt=system)
    if val_pairs:
        write_parquet(val_pairs, recipe.val_file, "val", system_in_prompt=system)
    cfg = render(recipe)
    files = write_run_files(recipe, cfg)
    log(f"datasets: {recipe.train_file}" + (f", {recipe.val_file}" if val_pairs else "") + f"; config: {files['config']}")
    return subprocess.run(command(cfg), check=False).returncode


def merge_report(checkpoint: Path, out_dir: Path, base: Path | None) -> dict[str, Any]:
    if importlib.util.find_spec("verl") is None:
        raise RecipeError([INSTALL_HINT])
    from groundstate.train.verl.merge import merge

    return merge(checkpoint, out_dir, base)


def report_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=1, default=str)
