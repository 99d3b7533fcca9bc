"""`groundstate train --config FILE`: the job as a YAML file of `TrainJob`'s fields, the flags given overriding it; an
unknown key or a bad value is one line naming the file and the key (#33 item 3). Checked through verl's dry run,
which resolves the whole recipe and starts nothing."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.train.job import TrainJob, TrainRefused, load_train_job
from groundstate.worlds.domain import iter_tasks

TOPOLOGY = {"engine": "verl", "dry_run": True, "nodes": 3, "gpus_per_node": 8, "sp": 4, "rollout_tp": 4, "tasks_per_step": 18, "group_size": 8}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A pool file of 40 pool tasks and a model config with 16/8 heads (the reference topology's shape)."""
    monkeypatch.chdir(tmp_path)
    ids = [t.id for t, _ in iter_tasks(None, "pool")][:40]
    (tmp_path / "train.yaml").write_text("".join(f"- {i}\n" for i in ids))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_attention_heads": 16, "num_key_value_heads": 8}))
    return tmp_path


def invoke(*args: str):
    return CliRunner().invoke(app, ["train", *args], env={"COLUMNS": "400"})


def config(path, **fields):
    """The job file, named as a user in its folder names it."""
    path.write_text(yaml.safe_dump(fields))
    return path.name


def resolved(r) -> dict:
    assert r.exit_code == 0, r.output
    return yaml.safe_load(r.stdout.split("# launch command")[0])["config"]


def test_the_file_is_the_job_and_a_flag_overrides_it(workdir):
    cfg = config(workdir / "job.yaml", model="model", train="train.yaml", steps=7, lr=2e-6, verl_set={"trainer.logger": ["console"]}, **TOPOLOGY)
    doc = resolved(invoke("--config", cfg))
    assert doc["trainer"]["total_training_steps"] == 7 and doc["actor_rollout_ref"]["actor"]["optim"]["lr"] == 2e-6
    doc = resolved(invoke("--config", cfg, "--steps", "9", "--verl-set", "trainer.project_name=mine"))
    assert doc["trainer"]["total_training_steps"] == 9 and doc["actor_rollout_ref"]["actor"]["optim"]["lr"] == 2e-6
    assert doc["trainer"]["project_name"] == "mine" and doc["trainer"]["logger"] == ["console"]  # verl_set merges, key by key
    # every flag given alone makes the same job as the file
    flags = ["--model", "model", "--train", "train.yaml", "--steps", "7", "--lr", "2e-6", "--verl-set", "trainer.logger=[console]"]
    flags += ["--engine", "verl", "--dry-run", "--nodes", "3", "--gpus-per-node", "8", "--sp", "4", "--rollout-tp", "4"]
    assert resolved(invoke(*flags, "--tasks-per-step", "18", "--group-size", "8")) == resolved(invoke("--config", cfg))


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"model": "model", "train": "train.yaml", "group-size": 8}, "job.yaml: group-size: not a field of the train config"),
        ({"model": "model", "train": "train.yaml", "learning_rate": 1e-6}, "job.yaml: learning_rate: not a field of the train config"),
        ({"model": "model", "train": "train.yaml", "steps": 0}, "job.yaml: steps: Input should be greater than 0"),
        ({"model": "model", "train": "train.yaml", "top_p": 1.5}, "job.yaml: top_p: Input should be less than or equal to 1"),
        ({"model": "model", "train": "train.yaml", "lr": float("nan")}, "job.yaml: lr: Input should be a finite number"),
        ({"model": "model", "train": "train.yaml", "engine": "deepspeed"}, "job.yaml: engine: unknown engine 'deepspeed': use trl or verl"),
        ({"train": "train.yaml"}, "job.yaml: model: missing (give --model, or model: in --config FILE)"),
    ],
)
def test_a_bad_key_or_value_is_one_line_naming_the_file_and_the_key(workdir, fields, says):
    r = invoke("--config", config(workdir / "job.yaml", **fields), "--out", str(workdir / "out"))
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {says}"), r.output
    assert not (workdir / "out").exists()


def test_a_file_that_is_not_a_mapping_or_not_there_is_one_line(workdir):
    (workdir / "list.yaml").write_text("- model\n")
    for path, says in ((workdir / "list.yaml", "expected a mapping"), (workdir / "none.yaml", "No such file or directory")):
        r = invoke("--config", str(path))
        assert r.exit_code == 2 and r.output.startswith(f"error: {path}: ") and says in r.output, r.output


def test_without_a_file_the_required_options_are_said_as_before(workdir):
    r = invoke("--train", "train.yaml")
    assert r.exit_code == 2 and "error: Missing option '--model'." in r.output


def test_the_job_holds_the_only_defaults():
    job = load_train_job(None, {"model": "m", "train": "t"})
    assert (job.engine, job.seed, str(job.out), job.backend, job.user, job.dry_run) == ("trl", 0, "runs/train", "sqlite", "scripted", False)
    assert job.steps is None and job.group_size is None  # the engine's own default applies
    with pytest.raises(TrainRefused, match="unknown engine 'x'"):
        load_train_job(None, {"model": "m", "train": "t", "engine": "x"})
    assert set(TrainJob.model_fields) >= {"verl_set", "micro_batch", "tb_servers"}


def test_online_sampling_is_a_trl_field_and_starts_from_a_selections_probe(workdir):
    from groundstate.train.job import _probe

    job = load_train_job(None, {"model": "m", "train": "t", "sampling": "online", "forget": 0.9, "explore": 0.1})
    assert (job.sampling, job.forget, job.explore) == ("online", 0.9, 0.1)
    assert load_train_job(None, {"model": "m", "train": "t"}).sampling is None  # the engine's default: static
    for bad, says in (
        ({"sampling": "greedy"}, "sampling: Input should be 'static' or 'online'"),
        ({"forget": 0}, "forget: Input should be greater than 0"),
    ):
        with pytest.raises(TrainRefused, match=f"job.yaml: {says}"):
            load_train_job(workdir / config(workdir / "job.yaml", model="m", train="t", **bad), {})
    r = invoke("--config", config(workdir / "job.yaml", model="model", train="train.yaml", forget=0.9, **TOPOLOGY))
    assert r.exit_code == 2 and "forget and explore are for sampling: online" in r.output, r.output
    # verl: the training rows become the online sampler's draws (train/verl/online.py)
    doc = resolved(invoke("--config", config(workdir / "job.yaml", model="model", train="train.yaml", sampling="online", **TOPOLOGY)))
    assert doc["data"]["custom_cls"] == {"path": "pkg://groundstate.train.verl.online", "name": "OnlineTaskDataset"}
    assert doc["data"]["dataloader_num_workers"] == 0 and doc["data"]["groundstate_online"].endswith("online_sampler.json")
    # a selection's train.yaml has its probe's counts beside it; any other selector starts from Jeffreys
    (workdir / "sel").mkdir()
    (workdir / "sel" / "train.yaml").write_text("- a\n")
    (workdir / "sel" / "selection.jsonl").write_text(json.dumps({"task_id": "a", "clean_runs": 4, "successes": 1}) + "\n")
    assert _probe(str(workdir / "sel" / "train.yaml")) == {"a": (4, 1)}
    assert _probe("train.yaml") is None and _probe("kiosk") is None
