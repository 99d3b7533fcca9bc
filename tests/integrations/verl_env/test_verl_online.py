"""Online sampling in verl (`train/verl/online.py`): the recipe's config composes with verl's own; the training dataset
verl builds from it (`create_rl_dataset`, `data.custom_cls`) hands verl's own data loader the online sampler's draws;
and the agent loop, built as verl builds it, hands every rollout's reward back to the sampler's Ray actor."""

import asyncio

import hydra
import pytest
import ray
from omegaconf import OmegaConf, open_dict
from test_verl_agent_loop import SAMPLING, StandInServer
from test_verl_recipe_compose import composed
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
from verl.utils.config import validate_config
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

from groundstate.agents.local import ChatCodec
from groundstate.pipeline.ray_executor import ray_session
from groundstate.train.curriculum import SignalSampler
from groundstate.train.online import OnlineConfig
from groundstate.train.tiny import build_tokenizer, domain_corpus
from groundstate.train.verl import agent_loop as gs_loop
from groundstate.train.verl.dataset import write_parquet
from groundstate.train.verl.online import OnlineTaskDataset
from groundstate.train.verl.recipe import VerlRecipe, check, write_run_files
from groundstate.worlds.domain import iter_tasks

G, PER_STEP = 2, 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A recipe with online sampling over 6 kiosk tasks, its files written, a tokenizer and local Ray."""
    d = tmp_path_factory.mktemp("online")
    pairs = iter_tasks(["kiosk"], "pool")[:8]
    train, val = write_parquet(pairs[:6], d / "train.parquet"), write_parquet(pairs[6:], d / "val.parquet", split="val")
    tok = build_tokenizer(domain_corpus(pairs[0][1], repeat=1), vocab_size=600)
    model_dir = d / "model"
    tok.save_pretrained(model_dir)
    recipe = VerlRecipe(
        model=str(model_dir),
        train_file=str(train),
        val_file=str(val),
        out_dir=str(d / "run"),
        nodes=1,
        gpus_per_node=2,
        tasks_per_step=PER_STEP * 2,
        group_size=G,
        sampling="online",
        explore=0.0,
        forget=1.0,
        seed=11,
    )
    check(recipe)
    files = write_run_files(recipe, {})
    with ray_session(num_cpus=1):
        yield recipe, files, pairs, tok, model_dir


def test_the_online_recipe_composes_and_validates_in_verl(run):
    recipe, *_ = run
    cfg = composed(recipe)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert cfg.data.custom_cls.path == "pkg://groundstate.train.verl.online" and cfg.data.custom_cls.name == "OnlineTaskDataset"
    assert cfg.data.dataloader_num_workers == 0 and cfg.data.groundstate_online == str(recipe.online_settings)
    with pytest.raises(Exception, match="online sampling draws the training file"):
        check(VerlRecipe(model="m", train_file="t.parquet", val_file="t.parquet", out_dir="o", sampling="online"))
    with pytest.raises(Exception, match=r"--verl-set actor_rollout_ref.rollout.n: online sampling counts groups"):
        check(VerlRecipe(model="m", train_file="t.parquet", out_dir="o", sampling="online", extra={"actor_rollout_ref.rollout.n": 4}))


def built_loop(entry, tok, model_dir, calls):
    """The agent loop of the recipe's agent-loop file `entry`, built as verl's AgentLoopWorker builds it, against a
    stand-in server that plays `calls`."""
    cfg = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 4096}, "model": {"path": str(model_dir)}}, "data": {}}
    )
    return hydra.utils.instantiate(
        config=entry,
        trainer_config=DictConfigWrap(cfg),
        server_manager=StandInServer(ChatCodec(tok), calls),
        tokenizer=tok,
        processor=None,
        hf_model_type="qwen2",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )


def data_config(recipe, tmp_path):
    data = composed(recipe).data
    with open_dict(data):  # nothing of the user's home: the cache under the test's folder
        data.cache_dir, data.filter_overlong_prompts_workers = str(tmp_path / "cache"), 1
    return data


def test_verls_loader_fetches_the_samplers_draws_and_the_loop_teaches_it(run, tmp_path):
    recipe, files, pairs, tok, model_dir = run
    data = data_config(recipe, tmp_path)
    train = create_rl_dataset(data.train_files, data, tok, None, is_train=True)  # verl's own factory, as its trainer calls it
    assert isinstance(train, OnlineTaskDataset) and train.actor is not None
    val = create_rl_dataset(data.val_files, data, tok, None, is_train=False)
    assert val.actor is None and [val[i]["extra_info"]["task_id"] for i in range(2)] == [t.id for t, _ in pairs[6:]]
    # verl's v1 trainer under group filtering fetches one prompt at a time, through its own sampler
    loader = StatefulDataLoader(
        dataset=train, batch_size=1, num_workers=0, drop_last=True, collate_fn=collate_fn, sampler=create_rl_sampler(data, train)
    )
    twin = SignalSampler([t.id for t, _ in pairs[:6]], G, PER_STEP * 2, 1, config=OnlineConfig(explore=0.0, forget=1.0), seed=11)
    fetched = []
    for batch in loader:
        fetched.append(batch["extra_info"][0]["task_id"])
        if len(fetched) == 4:
            break
    expect = [twin.draw() for _ in range(6)]
    assert fetched == expect[:4]  # whatever index verl's random sampler chose
    # one more draw, as verl's loader would fetch it: the agent loop, built from the recipe's agent-loop file as verl
    # builds it, plays its G rollouts
    row = train[0]
    assert row["extra_info"]["task_id"] == expect[4] and row["extra_info"]["online_draw"] is True
    task, _ = next(p for p in pairs if p[0].id == expect[4])
    (entry,) = [e for e in OmegaConf.load(files["agent_loop"]) if e.name == "groundstate"]
    assert entry.online_sampler == recipe.online_actor
    val_row = {**row, "extra_info": {k: v for k, v in row["extra_info"].items() if k != "online_draw"}}  # not a draw
    rewards = []
    for calls, r in (([c.model_dump() for c in task.gold], row), ([], row), ([], val_row)):  # a pass, a failure, validation
        loop = built_loop(entry, tok, model_dir, calls)
        rewards.append(asyncio.run(loop.run(dict(SAMPLING), **r)).reward_score)
    gs_loop.close_shared_backends()
    assert rewards == [1.0, 0.0, 0.0]
    actor = ray.get_actor(recipe.online_actor)
    state = ray.get(actor.state.remote())["tasks"][task.id]
    # Jeffreys + one pass and one failure; the row not drawn is not evidence (it would have opened a group)
    assert ray.get(actor.pending.remote()) == {} and (state["a"], state["b"]) == (1.5, 1.5)


def test_a_broken_settings_file_is_named_and_a_lost_actor_never_fails_a_rollout(tmp_path, caplog):
    from groundstate.train.verl.online import load_settings, record

    bad = tmp_path / "online_sampler.json"
    bad.write_text('{"actor": "x", "group_size": 2}')
    with pytest.raises(ValueError, match=r"online_sampler.json: the online sampler's settings lack tasks_per_step, seed"):
        load_settings(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match="online_sampler.json: cannot read"):
        load_settings(bad)
    with ray_session(num_cpus=1):
        for _ in range(3):
            record("groundstate-online-nobody", "t", 1.0)  # no such actor: said once, not raised
    assert caplog.text.count("groundstate-online-nobody: cannot be reached") == 1


def test_an_episode_that_fails_before_grading_still_closes_its_group(run, tmp_path):
    """A rollout whose episode raises before it is graded (an unknown domain here) reports None, so its group closes
    as no evidence instead of staying open and holding its task back."""
    recipe, files, pairs, tok, model_dir = run
    (entry,) = [e for e in OmegaConf.load(files["agent_loop"]) if e.name == "groundstate"]
    loop = built_loop(entry, tok, model_dir, [])
    data = data_config(recipe, tmp_path)
    train = create_rl_dataset(data.train_files, data, tok, None, is_train=True)  # the run's dataset holds its actor
    task = pairs[5][0]
    actor = ray.get_actor(recipe.online_actor)
    before = ray.get(actor.state.remote())["tasks"][task.id]
    row = {"raw_prompt": [], "extra_info": {"task_id": task.id, "domain": "no-such-domain", "online_draw": True}}
    for i in range(G):
        with pytest.raises(Exception):  # noqa: B017 - whatever the resolver raises: the episode cannot be played
            asyncio.run(loop.run(dict(SAMPLING), **row))
        ray.get(actor.state.remote())  # the actor has taken the reward (calls from one caller arrive in order)
        assert ray.get(actor.pending.remote()).get(task.id) == (i + 1 if i + 1 < G else None)
    after = ray.get(actor.state.remote())["tasks"][task.id]
    assert ray.get(actor.pending.remote()).get(task.id) is None and (after["a"], after["b"]) == (before["a"], before["b"])
    assert train.actor is not None
