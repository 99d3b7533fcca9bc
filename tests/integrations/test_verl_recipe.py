"""`groundstate train --engine verl`: the recipe is rendered and checked without verl installed; mis-sized
topologies are refused with their reason before anything starts. Also the parquet rows' content and the
`merge` command's answer where verl is missing. (What needs verl itself is in tests/integrations/verl/.)"""

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.train.verl.dataset import task_rows, write_parquet
from groundstate.train.verl.recipe import RecipeError, VerlRecipe, check, overrides, render
from groundstate.worlds.domain import Domain, iter_tasks

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"
REFERENCE = [
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
    "model",
    "--train",
    "train.yaml",
]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder with a pool file (`select`'s train.yaml shape) of 40 pool tasks and a model config with 16/8 heads."""
    monkeypatch.chdir(tmp_path)
    ids = [t.id for t, _ in iter_tasks(None, "pool")][:40]
    (tmp_path / "train.yaml").write_text("# train split\n" + "".join(f"- {i}\n" for i in ids))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_attention_heads": 16, "num_key_value_heads": 8}))
    return tmp_path


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_reference_topology_dry_run_prints_the_config_and_starts_nothing(workdir):
    res = CliRunner().invoke(app, REFERENCE)
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(res.stdout.split("# launch command")[0])
    topo, cfg = doc["topology"], doc["config"]
    assert (topo["gpus"], topo["data_parallel_ranks"], topo["rollout_replicas"], topo["trajectories_per_step"]) == (24, 6, 6, 144)
    assert topo["trajectories_per_rank_per_mini_batch"] == 24 and topo["pool_tasks"] == 40
    r = cfg["actor_rollout_ref"]
    assert (cfg["trainer"]["nnodes"], cfg["trainer"]["n_gpus_per_node"], cfg["trainer"]["total_training_steps"]) == (3, 8, 50)
    assert (cfg["data"]["train_batch_size"], r["rollout"]["n"]) == (18, 8)
    assert (r["rollout"]["temperature"], r["rollout"]["top_k"], r["rollout"]["top_p"]) == (1.0, 20, 0.95)
    assert (r["actor"]["optim"]["lr"], r["actor"]["use_kl_loss"], cfg["algorithm"]["use_kl_in_reward"]) == (1e-6, False, False)
    fg = cfg["algorithm"]["filter_groups"]  # (where verl is installed the config is verl's whole one, with more keys)
    assert (fg["enable"], fg["metric"], fg["max_inflight_gen_batches"]) == (True, "reward", 1)
    assert cfg["trainer"]["v1"]["sampler"]["sync_refill_failed_groups"] is True
    assert r["model"]["path"] == str(workdir / "model")
    assert r["rollout"]["agent"]["agent_loop_config_path"] == str(workdir / "runs" / "train" / "agent_loop.yaml")
    assert doc["agent_loop_config"][0]["_target_"] == "groundstate.train.verl.agent_loop.GroundstateAgentLoop"
    assert "-m verl.trainer.main_ppo" in _flat(res.stdout) and "actor_rollout_ref.rollout.n=8" in res.stdout
    assert not (workdir / "runs").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    "args, reason",
    [
        (["--gpus-per-node", "6"], "rollout tensor parallelism 4 does not divide the 6 GPUs of a node"),
        (["--tasks-per-step", "17"], "17 tasks × 8 rollouts = 136 trajectories per step do not split evenly over 24 GPUs"),
        (["--micro-batch", "5"], "--micro-batch 5 does not divide the 24 trajectories each data-parallel rank gets"),
        (["--sp", "3"], "sequence parallelism 3 does not divide the 8 GPUs of a node"),
        (["--nodes", "1", "--tasks-per-step", "50"], "the training pool has 40 tasks, fewer than --tasks-per-step 50"),
        # --group-size 1 never reaches the recipe: the command line refuses it (an integer >= 2), for both engines
        (["--group-size", "1", "--tasks-per-step", "24"], "Invalid value for '--group-size': 1 is not an integer >= 2"),
    ],
)
def test_mis_sized_topologies_are_refused_with_the_reason(workdir, args, reason):
    argv = list(REFERENCE)
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2
    output = _flat(res.output.translate({ord(c): " " for c in "│╭╮╰╯─"}))  # without the frame of typer's usage-error panel
    assert reason in output and (reason.startswith("Invalid value") or "the verl recipe cannot run" in output)


def test_model_heads_are_checked_when_the_model_is_readable(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 14, "num_key_value_heads": 2}))
    recipe = VerlRecipe(model=str(tmp_path), train_file="t.parquet", out_dir=str(tmp_path), sp=4, rollout_tp=4)
    with pytest.raises(RecipeError) as e:
        check(recipe)
    assert any("14 attention heads do not split over rollout tensor parallelism 4" in r for r in e.value.reasons)
    assert any("14 attention heads do not split over sequence parallelism 4" in r for r in e.value.reasons)


def test_unknown_pool_is_refused(workdir):
    argv = list(REFERENCE)
    argv[argv.index("--train") + 1] = "missing.yaml"
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2 and "matched no task" in _flat(res.output)


def test_overrides_are_hydra_literals():
    cfg = {"a": {"b": "has space", "c": None, "d": True, "e": [1, "x"], "f": 1e-6, "g": "it's", "h": "/abs/path.parquet", "i": "~/m"}}
    assert overrides(cfg) == [
        "a.b='has space'",
        "a.c=null",
        "a.d=true",
        "a.e=[1,x]",
        "a.f=1e-06",
        "a.g='it\\'s'",
        "a.h=/abs/path.parquet",
        "a.i='~/m'",
    ]


def test_beta_turns_the_kl_loss_on():
    cfg = render(VerlRecipe(model="m", train_file="t", out_dir="o", beta=0.02))
    assert cfg["actor_rollout_ref"]["actor"]["use_kl_loss"] is True and cfg["actor_rollout_ref"]["actor"]["kl_loss_coef"] == 0.02


def test_rows_name_their_task_and_route_to_the_groundstate_loop():
    pairs = iter_tasks(["kiosk"], "pool")[:3]
    shop = Domain(SHOP)
    rows = task_rows(pairs + [(shop.task("shop-cancel"), shop)])
    for i, row in enumerate(rows):
        assert row["agent_name"] == "groundstate" and row["extra_info"]["index"] == i and row["extra_info"]["split"] == "train"
    assert rows[0]["data_source"] == "groundstate/kiosk" and rows[0]["extra_info"]["domain"] == "kiosk"
    assert rows[0]["extra_info"]["task_id"] == pairs[0][0].id
    assert rows[0]["prompt"] == [{"role": "system", "content": pairs[0][1].system_prompt()}, {"role": "user", "content": pairs[0][0].instruction}]
    assert rows[-1]["extra_info"]["domain"] == str(SHOP.resolve())  # a domain outside the bundle travels by path
    with pytest.raises(ValueError, match="pool is empty"):
        task_rows([])


def test_parquet_round_trip(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    pairs = iter_tasks(["kiosk"], "pool")[:4]
    table = pq.read_table(write_parquet(pairs, tmp_path / "d" / "train.parquet"))
    assert table.to_pylist() == task_rows(pairs)


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="this environment has verl")
def test_merge_without_verl_says_how_to_install_it(tmp_path):
    res = CliRunner().invoke(app, ["merge", str(tmp_path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "pip install 'groundstate[verl]'" in _flat(res.output)


@pytest.mark.parametrize("engine, message", [("trl", "--dry-run is for --engine verl"), ("deepspeed", "unknown engine 'deepspeed'")])
def test_other_engines_keep_their_path(workdir, engine, message):
    res = CliRunner().invoke(app, ["train", "--engine", engine, "--dry-run", "--model", "model", "--train", "train.yaml"])
    assert res.exit_code == 2 and message in _flat(res.output)


@pytest.fixture
def tokenizer_model(workdir):
    """The work folder's model gains a tiny tokenizer (groundstate's chat template), so prompts can be checked."""
    from groundstate.train.tiny import build_tokenizer, domain_corpus
    from groundstate.worlds.domain import load_domain

    tok = build_tokenizer(domain_corpus(load_domain("kiosk"), repeat=1), vocab_size=600)
    tok.save_pretrained(workdir / "model")
    (workdir / "model" / "groundstate.json").write_text(json.dumps({"tools_in_prompt": False, "system_in_prompt": False}))
    return tok


def test_prompts_are_checked_with_the_models_tokenizer(workdir, tokenizer_model):
    res = CliRunner().invoke(app, REFERENCE)
    assert res.exit_code == 0, res.output
    prompts = yaml.safe_load(res.stdout.split("# launch command")[0])["topology"]["prompts"]
    assert prompts["template_prefix_preserving"] is True and 0 < prompts["longest_prompt_tokens"] <= 4096
    res = CliRunner().invoke(app, REFERENCE + ["--prompt-length", "16"])
    assert res.exit_code == 2 and "tokens, over --prompt-length 16" in _flat(res.output)


def test_a_template_that_is_not_prefix_preserving_is_refused(workdir, tokenizer_model):
    tokenizer_model.chat_template = "{{ messages | length }}" + tokenizer_model.chat_template
    tokenizer_model.save_pretrained(workdir / "model")
    res = CliRunner().invoke(app, REFERENCE)
    assert res.exit_code == 2 and "not prefix-preserving" in _flat(res.output)


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="this environment has verl")
def test_launch_without_verl_is_refused_before_writing_anything(workdir):
    argv = [a for a in REFERENCE if a != "--dry-run"]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2 and "verl is not installed in this environment" in _flat(res.output)
    assert not (workdir / "runs").exists()
