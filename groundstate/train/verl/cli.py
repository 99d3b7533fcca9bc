"""Command-line glue for the verl engine: `groundstate train --engine verl` and `groundstate merge`.

`groundstate.cli` keeps the options; this module turns them into a checked recipe, prints it
(`--dry-run`) or writes the run files and launches verl's trainer, and merges checkpoints.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from groundstate.train.verl.recipe import RecipeError, VerlRecipe, agent_loop_entries, check, check_prompts, command, render, shell, write_run_files

INSTALL_HINT = ("verl is not installed in this environment: install the verl extra in its own environment "
                "(pip install 'groundstate[verl]', plus verl's vllm or sglang extra on GPU machines; see docs/SCALE_OUT.md)")


def plan(recipe: VerlRecipe, pairs: list | None = None) -> dict[str, Any]:
    """The checked recipe as one document: derived topology, agent-loop registration, verl config, launch command."""
    topology = check(recipe)
    topology["prompts"] = check_prompts(recipe, pairs or []) or "not checked (no local tokenizer)"
    cfg = render(recipe)
    return {"topology": topology, "agent_loop_config": agent_loop_entries(recipe), "config": cfg, "command": command(cfg)}


def dry_run_text(p: dict[str, Any]) -> str:
    doc = {k: p[k] for k in ("topology", "agent_loop_config", "config")}
    return (yaml.safe_dump(doc, sort_keys=False) + "\n# launch command (run on the Ray head node, in the verl environment):\n"
            + "\n".join("# " + line for line in shell(p["command"]).splitlines()))


def launch(recipe: VerlRecipe, pairs: list, val_pairs: list | None, log: Any) -> int:
    """Write the datasets and run files, then run verl's trainer in this interpreter's environment; returns its exit code."""
    from groundstate.train.verl.dataset import write_parquet

    if importlib.util.find_spec("verl") is None:
        raise RecipeError([INSTALL_HINT])
    write_parquet(pairs, recipe.train_file, "train")
    if val_pairs:
        write_parquet(val_pairs, recipe.val_file, "val")
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
