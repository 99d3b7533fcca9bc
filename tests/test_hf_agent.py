"""The local Hugging Face policy on a tiny model built here: chat template, sampling, token records, episodes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from groundstate.agents.hf import HFAgent, Sampling, _truncate, make_hf_agent  # noqa: E402
from groundstate.agents.toolcall_format import render_tool_call  # noqa: E402
from groundstate.episode import FINISH_REASONS, run_episode  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.tasks import Domain  # noqa: E402
from groundstate.train.tiny import build_tokenizer, domain_corpus, save_tiny  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "shop"


@pytest.fixture(scope="module", autouse=True)
def _quiet_single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def domain():
    return Domain(FIXTURE)


@pytest.fixture(scope="module")
def model_dir(domain, tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny"), domain_corpus(domain), vocab_size=1024, seed=0)


@pytest.fixture(scope="module")
def agent(model_dir):
    return HFAgent(f"hf:{model_dir}", {"max_new_tokens": 24, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0})


@pytest.fixture(scope="module")
def backend():
    return SqliteBackend()


def _episode(domain, backend, agent, task_id="shop-cancel", max_turns=2):
    task = domain.task(task_id)
    with backend.open(backend.prepare(domain, task.patch)) as sandbox:
        traj = asyncio.run(run_episode(task, domain, sandbox, agent, max_turns=max_turns))
        status = sandbox.connection.scalar("SELECT status FROM orders WHERE id = 1")
    return traj, status


def _conversation(domain):
    args = json.dumps({"order_id": 1})
    return [
        {"role": "system", "content": domain.system_prompt()},
        {"role": "user", "content": "Please cancel order 1."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "get_order", "arguments": args}},
            {"id": "call_1", "type": "function", "function": {"name": "cancel_order", "arguments": args}},
        ]},
        {"role": "tool", "tool_call_id": "call_0", "name": "get_order", "content": '{"id": 1, "status": "pending"}'},
        {"role": "tool", "tool_call_id": "call_1", "name": "cancel_order", "content": '{"order_id": 1, "status": "cancelled"}'},
        {"role": "assistant", "content": "Order 1 is cancelled."},
        {"role": "user", "content": "Thanks!"},
    ]


# -- tokenizer and chat template ----------------------------------------------------------------


def test_tokenizer_specials_and_digits(agent):
    tok = agent.tokenizer
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    for t in ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]:
        assert len(tok(t, add_special_tokens=False)["input_ids"]) == 1, t
    assert [t for t in tok.tokenize("order 1234") if t.isdigit()] == ["1", "2", "3", "4"]
    assert len(tok) <= 1024
    ids = tok("<tool_call>x</tool_call><|im_end|>", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"  # format tags survive, control tokens do not


def test_chat_template_lists_tools_and_renders_calls_as_render_tool_call_does(agent, domain):
    tok, tools = agent.tokenizer, domain.tools.openai_schemas()
    conv = _conversation(domain)
    text = tok.apply_chat_template(conv, tools=tools, tokenize=False)
    assert text.startswith("<|im_start|>system\n" + domain.system_prompt() + "\n\n# Tools\n")
    assert "<tools>\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools) + "\n</tools>" in text
    calls = render_tool_call("get_order", {"order_id": 1}) + "\n" + render_tool_call("cancel_order", {"order_id": 1})
    assert "<|im_start|>assistant\n" + calls + "<|im_end|>\n" in text
    assert "<|im_start|>user\n<tool_response>\n{\"id\": 1, \"status\": \"pending\"}\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\nOrder 1 is cancelled.<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n")
    # arguments given as mappings render exactly like the JSON strings of OpenAI-style messages
    as_dicts = [dict(m) for m in conv]
    as_dicts[2] = {**conv[2], "tool_calls": [{**c, "function": {**c["function"], "arguments": {"order_id": 1}}} for c in conv[2]["tool_calls"]]}
    assert tok.apply_chat_template(as_dicts, tools=tools, tokenize=False) == text
    no_tools = tok.apply_chat_template(conv[:2], tokenize=False, add_generation_prompt=True)
    assert "# Tools" not in no_tools and no_tools.endswith("<|im_start|>assistant\n")


def test_chat_template_is_prefix_preserving(agent, domain):
    tok, tools = agent.tokenizer, domain.tools.openai_schemas()
    conv = _conversation(domain)

    def render(msgs, gen=False, tokenize=False):
        out = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False)
        return tok(out, add_special_tokens=False)["input_ids"] if tokenize else out

    full = render(conv)
    for k in range(1, len(conv)):
        assert full.startswith(render(conv[:k])), k
        if conv[k]["role"] == "assistant":  # the generation prompt is where the assistant turn starts
            assert render(conv[:k + 1]).startswith(render(conv[:k], gen=True)), k
    # token level, as TRL checks it: appending tool results only appends tokens
    assert render(conv[:5], gen=True, tokenize=True)[: len(render(conv[:3], tokenize=True))] == render(conv[:3], tokenize=True)


def test_build_tokenizer_rejects_a_vocabulary_below_the_byte_alphabet():
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(["x"], vocab_size=200)


# -- sampling ----------------------------------------------------------------------------------


def test_sampling_options():
    assert Sampling.from_dict({"max_tokens": 7, "temperature": 0, "top_k": None}) == Sampling(temperature=0, max_new_tokens=7)
    with pytest.raises(ValueError, match="unknown sampling"):
        Sampling.from_dict({"typical_p": 0.5})
    with pytest.raises(ValueError, match="bad sampling"):
        Sampling.from_dict({"top_p": 0})
    with pytest.raises(ValueError, match="hf:PATH"):
        make_hf_agent("hf:")


def test_truncation_keeps_top_k_and_the_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept = lambda x: torch.isfinite(x).tolist()  # noqa: E731
    assert kept(_truncate(logits, 2, 1.0)) == [True, True, False, False]
    assert kept(_truncate(logits, 0, 0.75)) == [True, True, False, False]
    assert kept(_truncate(logits, 0, 0.5)) == [True, False, False, False]
    assert kept(_truncate(logits, 0, 0.01)) == [True, False, False, False]
    assert kept(_truncate(logits, 0, 1.0)) == [True] * 4


def test_greedy_matches_generate_and_logprobs_match_a_full_forward(agent, domain):
    prompt = agent.encode_prompt(_conversation(domain)[:2], domain.tools.openai_schemas())
    greedy = agent.with_seed(0)
    greedy.sampling = Sampling(temperature=0, max_new_tokens=12)
    ids, _, _ = greedy._generate(prompt, seed=0)
    ref = agent.model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=12)[0, len(prompt):].tolist()
    assert ids == ref[: len(ids)]

    sampler = agent.with_seed(0)
    sampler.sampling = Sampling(temperature=0.7, top_k=50, top_p=0.9, max_new_tokens=12)
    ids, logprobs, _ = sampler._generate(prompt, seed=123)
    assert sampler._generate(prompt, seed=123) == (ids, logprobs, _)  # a seeded generator per call
    with torch.no_grad():
        logits = agent.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    expected = [float(torch.log_softmax(_truncate(lg / 0.7, 50, 0.9), -1)[t]) for lg, t in zip(logits, ids)]
    assert logprobs == pytest.approx(expected, abs=1e-4)


# -- episodes ----------------------------------------------------------------------------------


def test_episode_end_to_end_with_the_tiny_model(agent, domain, backend):
    traj, _ = _episode(domain, backend, agent)
    assert traj.finish_reason in FINISH_REASONS
    assert 1 <= traj.turns <= 2 and len(traj.extra) == traj.turns
    tok = agent.tokenizer
    assert traj.usage.input_tokens == sum(len(e["prompt_ids"]) for e in traj.extra) > 0
    assert traj.usage.output_tokens == sum(len(e["completion_ids"]) for e in traj.extra) > 0
    for e in traj.extra:
        ids = e["completion_ids"]
        assert 1 <= len(ids) <= 24 and len(e["logprobs"]) == len(ids)
        assert all(lp <= 0 for lp in e["logprobs"])
        body = ids[:-1] if e["finish"] == "stop" else ids
        assert tok.decode(body) == e["completion_text"]
    assistant = [m for m in traj.messages if m["role"] == "assistant"]
    first = traj.extra[0]
    if "<tool_call>" not in first["completion_text"] and "<think>" not in first["completion_text"]:
        assert assistant[0]["content"] == first["completion_text"].strip()
    # the same seed replays the same episode
    again, _ = _episode(domain, backend, agent)
    assert [e["completion_ids"] for e in again.extra] == [e["completion_ids"] for e in traj.extra]


class _Scripted:
    """Stands in for the model's sampler: returns the token ids of fixed texts, one per call."""

    def __init__(self, agent, texts, stop=True):
        self.tok, self.texts, self.stop, self.prompts = agent.tokenizer, list(texts), stop, []

    def __call__(self, prompt_ids, seed):
        self.prompts.append(prompt_ids)
        ids = self.tok(self.texts.pop(0), add_special_tokens=False)["input_ids"]
        if self.stop:
            ids = ids + [self.tok.convert_tokens_to_ids("<|im_end|>")]
        return ids, [-0.5] * len(ids), "stop" if self.stop else "length"


def test_a_generated_hermes_call_runs_against_the_sandbox(agent, domain, backend, monkeypatch):
    call = render_tool_call("cancel_order", {"order_id": 1})
    stub = _Scripted(agent, [call, "Order 1 is cancelled."])
    monkeypatch.setattr(agent, "_generate", stub)
    traj, status = _episode(domain, backend, agent, max_turns=3)
    assert status == "cancelled"
    assert traj.tool_calls == [{"name": "cancel_order", "arguments": {"order_id": 1}, "ok": True,
                                "result": '{"order_id": 1, "status": "cancelled"}', "write": True}]
    assert traj.messages[2]["tool_calls"][0]["id"] == "call_0" and traj.messages[3]["tool_call_id"] == "call_0"
    assert traj.messages[4] == {"role": "assistant", "content": "Order 1 is cancelled."}
    assert traj.finish_reason == "user_done" and traj.turns == 2
    first, second = traj.extra
    assert agent.tokenizer.decode(first["completion_ids"][:-1]) == call
    # what the model generated is, token for token, what the next prompt holds: training sees what was sampled
    assert second["prompt_ids"][: len(first["prompt_ids"]) + len(first["completion_ids"])] == first["prompt_ids"] + first["completion_ids"]


def test_a_malformed_generated_call_is_answered_with_an_error(agent, domain, backend, monkeypatch):
    cut_off = '<tool_call>\n{"name": "cancel_order", "arguments": {"order_id": 1'
    stub = _Scripted(agent, [cut_off], stop=False)
    monkeypatch.setattr(agent, "_generate", stub)
    traj, status = _episode(domain, backend, agent, max_turns=1)
    assert status == "pending"
    assert traj.tool_calls[0]["ok"] is False and "unclosed <tool_call>" in traj.tool_calls[0]["result"]
    assert traj.messages[-1]["role"] == "tool" and traj.messages[-1]["content"].startswith("error: ")
    assert traj.extra[0]["finish"] == "length" and traj.finish_reason == "max_turns"


def test_concurrent_attempts_share_one_model(agent, domain):
    conv = _conversation(domain)[:2]
    tools = domain.tools.openai_schemas()
    a, b = agent.with_seed(1), agent.with_seed(2)
    assert a.model is agent.model

    async def both():
        return await asyncio.gather(a.act(conv, tools), b.act(conv, tools), a.act(conv, tools))

    t1, t2, t3 = asyncio.run(both())
    assert t1.extra["completion_ids"] == t3.extra["completion_ids"]
    assert t1.extra["seed"] != t2.extra["seed"]
