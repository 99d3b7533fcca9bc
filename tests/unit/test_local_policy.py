"""The one local-model policy (`hf:PATH`) on a tiny model built here: chat template, sampling, token records, episodes,
and generation batched across concurrent episodes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from groundstate.agents import AgentSource  # noqa: E402
from groundstate.agents.local import BatchedPolicy, SamplingParams  # noqa: E402
from groundstate.agents.toolcall_format import render_tool_call  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.train.tiny import build_tokenizer, domain_corpus, save_tiny  # noqa: E402
from groundstate.types import FINISH_REASONS, EpisodeLimits  # noqa: E402
from groundstate.worlds.domain import Domain  # noqa: E402
from groundstate.worlds.environment import SqlEnvironment  # noqa: E402
from groundstate.worlds.episode import run_episode  # noqa: E402

FIXTURE = Path(__file__).parents[1] / "fixtures" / "shop"


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
def policy(model_dir):
    return BatchedPolicy.from_pretrained(str(model_dir), SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=24), seed=0)


@pytest.fixture(scope="module")
def tok(policy):
    return policy.tok


@pytest.fixture(scope="module")
def backend():
    return SqliteBackend()


def _episode(domain, backend, agent, task_id="shop-cancel", max_turns=2):
    task = domain.task(task_id)
    limits = EpisodeLimits(max_turns=max_turns)
    with backend.open(backend.prepare(domain, task.patch)) as sandbox:
        traj = asyncio.run(run_episode(SqlEnvironment(task, sandbox, limits), agent, None, limits))
        status = sandbox.connection.scalar("SELECT status FROM orders WHERE id = 1")
    return traj, status


def _conversation(domain):
    args = json.dumps({"order_id": 1})
    return [
        {"role": "system", "content": domain.system_prompt()},
        {"role": "user", "content": "Please cancel order 1."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "get_order", "arguments": args}},
                {"id": "call_1", "type": "function", "function": {"name": "cancel_order", "arguments": args}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "name": "get_order", "content": '{"id": 1, "status": "pending"}'},
        {"role": "tool", "tool_call_id": "call_1", "name": "cancel_order", "content": '{"order_id": 1, "status": "cancelled"}'},
        {"role": "assistant", "content": "Order 1 is cancelled."},
        {"role": "user", "content": "Thanks!"},
    ]


# -- tokenizer and chat template ----------------------------------------------------------------


def test_tokenizer_specials_and_digits(tok):
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    for t in [
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
        "<think>",
        "</think>",
    ]:
        assert len(tok(t, add_special_tokens=False)["input_ids"]) == 1, t
    assert [t for t in tok.tokenize("order 1234") if t.isdigit()] == ["1", "2", "3", "4"]
    assert len(tok) <= 1024
    ids = tok("<tool_call>x</tool_call><|im_end|>", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"  # format tags survive, control tokens do not


def test_chat_template_lists_tools_and_renders_calls_as_render_tool_call_does(tok, domain):
    tools = domain.tools.openai_schemas()
    conv = _conversation(domain)
    text = tok.apply_chat_template(conv, tools=tools, tokenize=False)
    assert text.startswith("<|im_start|>system\n" + domain.system_prompt() + "\n\n# Tools\n")
    assert "<tools>\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools) + "\n</tools>" in text
    calls = render_tool_call("get_order", {"order_id": 1}) + "\n" + render_tool_call("cancel_order", {"order_id": 1})
    assert "<|im_start|>assistant\n" + calls + "<|im_end|>\n" in text
    assert '<|im_start|>user\n<tool_response>\n{"id": 1, "status": "pending"}\n</tool_response><|im_end|>\n' in text
    assert text.endswith("<|im_start|>assistant\nOrder 1 is cancelled.<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n")
    # arguments given as mappings render exactly like the JSON strings of OpenAI-style messages
    as_dicts = [dict(m) for m in conv]
    as_dicts[2] = {**conv[2], "tool_calls": [{**c, "function": {**c["function"], "arguments": {"order_id": 1}}} for c in conv[2]["tool_calls"]]}
    assert tok.apply_chat_template(as_dicts, tools=tools, tokenize=False) == text
    no_tools = tok.apply_chat_template(conv[:2], tokenize=False, add_generation_prompt=True)
    assert "# Tools" not in no_tools and no_tools.endswith("<|im_start|>assistant\n")


def test_chat_template_is_prefix_preserving(tok, domain):
    tools = domain.tools.openai_schemas()
    conv = _conversation(domain)

    def render(msgs, gen=False, tokenize=False):
        out = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False)
        return tok(out, add_special_tokens=False)["input_ids"] if tokenize else out

    full = render(conv)
    for k in range(1, len(conv)):
        assert full.startswith(render(conv[:k])), k
        if conv[k]["role"] == "assistant":  # the generation prompt is where the assistant turn starts
            assert render(conv[: k + 1]).startswith(render(conv[:k], gen=True)), k
    # token level, as TRL checks it: appending tool results only appends tokens
    assert render(conv[:5], gen=True, tokenize=True)[: len(render(conv[:3], tokenize=True))] == render(conv[:3], tokenize=True)


def test_build_tokenizer_rejects_a_vocabulary_below_the_byte_alphabet():
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(["x"], vocab_size=200)


# -- sampling ----------------------------------------------------------------------------------


def test_an_hf_spec_loads_one_policy_shared_by_every_attempt(model_dir, domain):
    source = AgentSource(f"hf:{model_dir}", {"max_tokens": 7, "temperature": 0})
    task = domain.task("shop-cancel")
    a, b = source.for_attempt(task, domain, 0), source.for_attempt(task, domain, 1)
    assert a.policy is b.policy and a is not b  # one model, one token record per attempt
    assert a.policy.sampling == SamplingParams(temperature=0, max_new_tokens=7)
    assert SamplingParams.from_options({}) == SamplingParams()


def test_greedy_matches_generate_and_logprobs_are_the_sampling_distributions(model_dir, policy, domain):
    prompt = policy.codec.prompt_ids(_conversation(domain)[:2], domain.tools.openai_schemas())
    greedy = BatchedPolicy.from_pretrained(str(model_dir), SamplingParams(temperature=0, max_new_tokens=12), seed=0)
    [(ids, _, _)] = greedy._generate_batch([prompt])
    ref = greedy.model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=12)[0, len(prompt) :].tolist()
    assert ids == ref[: len(ids)]

    params = SamplingParams(temperature=0.7, top_k=50, top_p=0.9, max_new_tokens=12)
    sampler = BatchedPolicy.from_pretrained(str(model_dir), params, seed=123)
    [(ids, logprobs, _)] = sampler._generate_batch([prompt], [torch.Generator().manual_seed(5)])
    assert sampler._generate_batch([prompt], [torch.Generator().manual_seed(5)]) == [(ids, logprobs, _)]  # the same stream, the same turn
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    with torch.no_grad():
        logits = sampler.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    warpers = [TemperatureLogitsWarper(0.7), TopKLogitsWarper(50), TopPLogitsWarper(0.9)]
    expected = []
    for i, t in enumerate(ids):
        scores = logits[i : i + 1]
        for w in warpers:
            scores = w(torch.tensor([prompt + ids[:i]]), scores)
        expected.append(float(torch.log_softmax(scores, -1)[0, t]))
    assert logprobs == pytest.approx(expected, abs=1e-4)


# -- episodes ----------------------------------------------------------------------------------


def test_episode_end_to_end_with_the_tiny_model(policy, domain, backend):
    agent = policy.agent()
    traj, _ = _episode(domain, backend, agent)
    assert traj.finish_reason in FINISH_REASONS
    assert 1 <= traj.turns <= 2 and len(traj.extra) == traj.turns
    assert traj.usage.input_tokens > 0 and traj.usage.output_tokens == sum(agent.env_mask) > 0
    assert len(agent.logprobs) == len(agent.completion_ids) == len(agent.env_mask)
    assert all(lp <= 0 for lp, m in zip(agent.logprobs, agent.env_mask, strict=True) if m)
    first = traj.extra[0]
    n1 = next((i for i, m in enumerate(agent.env_mask) if m == 0), len(agent.env_mask))  # the first turn's sampled tokens
    ids = agent.completion_ids[:n1]
    assert policy.tok.decode(ids[:-1] if first["ended"] else ids, skip_special_tokens=False) == first["completion_text"]
    assistant = [m for m in traj.messages if m["role"] == "assistant"]
    if "<tool_call>" not in first["completion_text"] and "<think>" not in first["completion_text"]:
        assert assistant[0]["content"] == first["completion_text"].strip()


def test_an_episodes_samples_do_not_depend_on_the_episodes_batched_with_it(model_dir, policy, domain):
    """Which requests share a pass is a matter of timing: a row draws from its own stream and has its own budget."""
    tools = domain.tools.openai_schemas()
    prompts = [policy.codec.prompt_ids([{"role": "user", "content": f"Please cancel order {n}."}], tools) for n in (1, 22, 333)]
    sampler = BatchedPolicy.from_pretrained(
        str(model_dir), SamplingParams(temperature=1.0, max_new_tokens=10, max_context=len(prompts[2]) + 6), seed=0
    )
    alone = [sampler._generate_batch([p], [torch.Generator().manual_seed(i)])[0] for i, p in enumerate(prompts)]
    together = sampler._generate_batch(prompts[::-1], [torch.Generator().manual_seed(i) for i in (2, 1, 0)])[::-1]
    assert [ids for ids, _, _ in together] == [ids for ids, _, _ in alone]
    for (_, lp, _), (_, lp_alone, _) in zip(together, alone, strict=True):
        assert lp == pytest.approx(lp_alone, abs=1e-5)
    assert len(alone[2][0]) <= 6 < 10  # the longest prompt's own room, not the batch's
    a, b = sampler.agent(), sampler.agent()
    assert a.rng.initial_seed() != b.rng.initial_seed()  # episodes made in order draw from streams of their own
    assert sampler.agent(seed=7).rng.initial_seed() == 7


class Scripted(BatchedPolicy):
    """Stands in for the model's sampler: the token ids of fixed texts, one per generation, ended or cut off."""

    def __init__(self, *a, texts, ended=True, **kw):
        super().__init__(*a, **kw)
        self.texts, self.ended = list(texts), ended

    def _generate_batch(self, batch, generators=None):
        out = []
        for _ in batch:
            ids = self.codec.encode(self.texts.pop(0)) + ([self.eos_id] if self.ended else [])
            out.append((ids, [-0.5] * len(ids), self.ended))
        return out


def test_a_generated_hermes_call_runs_against_the_sandbox(policy, domain, backend):
    call = render_tool_call("cancel_order", {"order_id": 1})
    scripted = Scripted(policy.model, policy.tok, policy.sampling, texts=[call, "Order 1 is cancelled."])
    agent = scripted.agent()
    traj, status = _episode(domain, backend, agent, max_turns=3)
    assert status == "cancelled"
    assert [c.to_json() for c in traj.tool_calls] == [
        {
            "name": "cancel_order",
            "arguments": {"order_id": 1},
            "ok": True,
            "result": '{"order_id": 1, "status": "cancelled"}',
            "write": True,
            "parser": "hermes",
        }
    ]
    assert traj.messages[2]["tool_calls"][0]["id"] == "call_0" and traj.messages[3]["tool_call_id"] == "call_0"
    assert traj.messages[4] == {"role": "assistant", "content": "Order 1 is cancelled."}
    assert traj.finish_reason == "user_done" and traj.turns == 2
    # what the model generated is, token for token, what the episode's record holds: training sees what was sampled
    first = scripted.codec.encode(call) + [scripted.eos_id]
    assert agent.completion_ids[: len(first)] == first and agent.env_mask[: len(first)] == [1] * len(first)


def test_a_malformed_generated_call_is_answered_with_an_error(policy, domain, backend):
    cut_off = '<tool_call>\n{"name": "cancel_order", "arguments": {"order_id": 1'
    agent = Scripted(policy.model, policy.tok, policy.sampling, texts=[cut_off], ended=False).agent()
    traj, status = _episode(domain, backend, agent, max_turns=1)
    assert status == "pending"
    assert traj.tool_calls[0].ok is False and "unclosed <tool_call>" in traj.tool_calls[0].result
    assert traj.messages[-1]["role"] == "tool" and traj.messages[-1]["content"].startswith("error: ")
    assert traj.extra[0]["ended"] is False and traj.finish_reason == "max_turns"


def test_concurrent_episodes_share_one_model_and_one_batch(model_dir, domain):
    policy = BatchedPolicy.from_pretrained(str(model_dir), SamplingParams(max_new_tokens=8), seed=1)
    conv = _conversation(domain)[:2]
    tools = domain.tools.openai_schemas()
    a, b = policy.agent(), policy.agent()

    async def both():
        return await asyncio.gather(a.act(conv, tools), b.act(conv, tools))

    asyncio.run(both())
    assert policy.batches == 1 and a.prompt_ids == b.prompt_ids and a is not b


def test_the_row_sampler_draws_from_the_sampling_distribution():
    """Inverting each row's CDF at its own uniforms samples the warped distribution; masked tokens never come up."""
    from groundstate.agents.local import _RowSampler

    n = 4000
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]]))
    for params, expected in (
        (SamplingParams(temperature=1.0, max_new_tokens=n), [[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]]),
        (SamplingParams(temperature=1.0, top_k=2, max_new_tokens=n), [[0, 0, 3 / 7, 4 / 7], [4 / 7, 3 / 7, 0, 0]]),
    ):
        sampler = _RowSampler(params, [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)], [n, n], eos_id=99, pad_id=98)
        for _ in range(n):
            sampler(torch.zeros((2, 1), dtype=torch.long), logits.clone())
        for (toks, lps), want in zip(sampler.results, expected, strict=True):
            freq = [toks.count(t) / n for t in range(4)]
            assert freq == pytest.approx(want, abs=0.03)
            assert all(want[t] > 0 for t in toks)  # a token outside top-k is never drawn
            assert lps[0] == pytest.approx(float(torch.log(torch.tensor(want[toks[0]]))), abs=1e-5)


class Short(Scripted):
    """A sampler that loses a row: one result fewer than the batch it was given."""

    def _generate_batch(self, batch, generators=None):
        return super()._generate_batch(batch, generators)[:-1]


def test_a_batch_short_of_results_fails_every_waiting_episode_never_hangs(policy):
    short = Short(policy.model, policy.tok, policy.sampling, texts=["a", "b", "c"])

    async def main():
        asks = [short.generate([1, 2, 3], None) for _ in range(3)]
        return await asyncio.wait_for(asyncio.gather(*asks, return_exceptions=True), timeout=60)

    outcomes = asyncio.run(main())
    assert len(outcomes) == 3 and all(isinstance(o, RuntimeError) and "2 results for a batch of 3" in str(o) for o in outcomes), outcomes
