"""The parquet dataset built from a pool file reads back through verl's own RL dataset, and its rows drive the loop."""

import asyncio

import pytest
from omegaconf import OmegaConf
from test_verl_agent_loop import SAMPLING, StandInServer, make_loop
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

from groundstate.agents.local import ChatCodec
from groundstate.agents.toolcall_format import render_tool_call
from groundstate.train.tiny import build_tokenizer, domain_corpus
from groundstate.train.verl import AGENT_NAME
from groundstate.train.verl.dataset import build_dataset
from groundstate.worlds.domain import iter_tasks


@pytest.fixture(scope="module")
def kiosk_pool(tmp_path_factory):
    pairs = iter_tasks(["kiosk"], "pool")[:6]
    d = tmp_path_factory.mktemp("pool")
    pool = d / "train.yaml"  # the shape `groundstate select` writes: a commented YAML list of task ids
    pool.write_text("# train split of a selection\n" + "".join(f"- {t.id}\n" for t, _ in pairs))
    return pool, pairs


def test_pool_file_to_parquet_read_back_with_verls_dataset(kiosk_pool, tmp_path):
    pool, pairs = kiosk_pool
    path = build_dataset(str(pool), tmp_path / "train.parquet")
    domain = pairs[0][1]
    tok = build_tokenizer(domain_corpus(domain, repeat=1), vocab_size=600)
    cfg = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 4096,
            "filter_overlong_prompts": True,
            "return_raw_chat": True,
            "truncation": "error",
            "cache_dir": str(tmp_path / "cache"),
            "filter_overlong_prompts_workers": 1,
        }
    )
    ds = RLHFDataset(data_files=[str(path)], tokenizer=tok, config=cfg)
    assert len(ds) == len(pairs)
    for i, (task, dom) in enumerate(pairs):
        row = ds[i]
        assert row["agent_name"] == AGENT_NAME
        assert row["data_source"] == f"groundstate/{dom.name}"
        assert row["extra_info"]["task_id"] == task.id and row["extra_info"]["domain"] == "kiosk" and row["index"] == i
        assert row["raw_prompt"][-1] == {"role": "user", "content": task.instruction}
        assert row["raw_prompt"][0]["role"] == "system"
    batch = collate_fn([ds[i] for i in range(len(ds))])  # what verl's dataloader hands the agent-loop workers
    assert {"index", "split", "task_id", "domain"} <= set(batch["extra_info"][0])


def test_dataset_rows_drive_the_agent_loop(kiosk_pool, tmp_path):
    """A row as verl's dataset returns it is all the loop needs to play and grade the task (gold calls → 1)."""
    pool, pairs = kiosk_pool
    path = build_dataset(str(pool), tmp_path / "train.parquet")
    task, domain = pairs[0]
    tok = build_tokenizer(domain_corpus(domain, repeat=1), vocab_size=600)
    model_dir = tmp_path / "model"
    tok.save_pretrained(model_dir)
    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 4096, "return_raw_chat": True, "cache_dir": str(tmp_path / "cache")})
    row = RLHFDataset(data_files=[str(path)], tokenizer=tok, config=cfg)[0]
    server = StandInServer(ChatCodec(tok), [c.model_dump() for c in task.gold])
    loop = make_loop(tmp_path / "run", model_dir, tok, server, "sqlite", None)
    out = asyncio.run(loop.run(dict(SAMPLING), **row))
    assert out.reward_score == 1.0
    assert render_tool_call(task.gold[0].tool, task.gold[0].args) in tok.decode(out.response_ids)
