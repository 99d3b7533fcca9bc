"""`groundstate merge` on a real 2-rank FSDP checkpoint written by verl's checkpoint manager (gloo on CPU);
the merged directory loads with groundstate's `hf:` agent and plays a task."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.records import read_records
from groundstate.train.tiny import domain_corpus, save_tiny
from groundstate.train.verl.recipe import VerlRecipe, write_run_files
from groundstate.worlds.domain import iter_tasks, load_domain

HERE = Path(__file__).parent
FLAGS = {"tools_in_prompt": False, "system_in_prompt": False}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A recipe run folder (as `train --engine verl` leaves it) holding one 2-rank FSDP checkpoint."""
    root = tmp_path_factory.mktemp("verl")
    base = save_tiny(root / "base", domain_corpus(load_domain("kiosk"), repeat=2), vocab_size=600, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64)
    (base / "groundstate.json").write_text(json.dumps(FLAGS))
    recipe = VerlRecipe(model=str(base), train_file=str(root / "run" / "data" / "train.parquet"), out_dir=str(root / "run"))
    write_run_files(recipe, {})
    actor = recipe.checkpoint_dir / "global_step_1" / "actor"
    subprocess.run([sys.executable, str(HERE / "fsdp_checkpoint.py"), str(base), str(actor)], check=True, capture_output=True, timeout=300)
    return root, recipe, actor


@pytest.mark.slow
def test_merge_a_two_rank_fsdp_checkpoint_and_run_it_as_hf(checkpoint, tmp_path):
    root, recipe, actor = checkpoint
    assert sorted(p.name for p in actor.glob("model_world_size_*")) == ["model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    merged = tmp_path / "merged"
    runner = CliRunner()
    res = runner.invoke(app, ["merge", str(recipe.checkpoint_dir), "--out", str(merged)])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout[res.stdout.index("{") : res.stdout.rindex("}") + 1])
    assert report["checkpoint"] == str(actor) and report["chat_template"] and report["weights"] == ["model.safetensors"]
    assert report["completed_from_base"] == ["groundstate.json"]  # found through the run's groundstate_verl.json
    assert json.loads((merged / "groundstate.json").read_text()) == FLAGS

    # the merged weights are the trained (sharded) model's, not the base model's, in bfloat16 as verl's merger writes them
    expected = torch.load(actor.parent / "expected_state_dict.pt")
    got = load_file(str(merged / "model.safetensors"))
    base = load_file(str(Path(recipe.model) / "model.safetensors"))
    assert set(got) <= set(expected) and "model.embed_tokens.weight" in got
    for name, tensor in got.items():
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, expected[name].to(torch.bfloat16)), name
    assert any(not torch.equal(got[n], base[n].to(torch.bfloat16)) for n in got)

    # and groundstate loads it as a model: one attempt through `groundstate run --agent hf:DIR`
    task_id = iter_tasks(["kiosk"], "pool")[0][0].id
    results = tmp_path / "results.jsonl"
    res = runner.invoke(
        app, ["run", "--agent", f"hf:{merged}", "--tasks", task_id, "--k", "1", "--max-tokens", "16", "--max-turns", "2", "--out", str(results)]
    )
    assert res.exit_code == 0, res.output
    (record,) = read_records(results)
    assert record.task_id == task_id and record.system_error is None and record.reward in (0, 1)


def test_merge_refuses_a_folder_without_a_checkpoint(tmp_path):
    res = CliRunner().invoke(app, ["merge", str(tmp_path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "no FSDP checkpoint here" in " ".join(res.output.split())
