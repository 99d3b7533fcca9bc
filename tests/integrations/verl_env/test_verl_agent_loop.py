"""The verl agent loop plays complete groundstate episodes against a stand-in for verl's async LLM server.

The stand-in has the signature of verl 0.9's server manager (`generate(request_id, *, prompt_ids,
sampling_params, ...) -> TokenOutput`) and plays a scripted policy: it emits tool calls tokenised through
the same codec, with made-up log-probs. The loop is built the way verl builds it — `hydra.utils.instantiate`
of the entry in the agent-loop config file the recipe writes — and the checks are: the reward equals
the verdict `groundstate.worlds.attempt.play` gives the same calls, token ids and log-probs are the server's
exactly with observations masked, and the sandbox is released even when the episode fails.
"""

import asyncio
import os
from pathlib import Path

import hydra
import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from groundstate.agents import make_user
from groundstate.agents.local import ChatCodec
from groundstate.agents.scripted import ScriptedAgent
from groundstate.agents.toolcall_format import render_tool_call
from groundstate.grading.grader import grader_for
from groundstate.state.postgres import default_dsn
from groundstate.train.sft import FINAL_TEXT
from groundstate.train.tiny import build_tokenizer, domain_corpus
from groundstate.train.verl import agent_loop as gs_loop
from groundstate.train.verl.agent_loop import EpisodeSystemError
from groundstate.train.verl.dataset import task_rows
from groundstate.train.verl.recipe import VerlRecipe, write_run_files
from groundstate.worlds.attempt import play
from groundstate.worlds.domain import Domain

try:
    import psycopg

    psycopg.connect(default_dsn(), connect_timeout=3).close()
    PG_AVAILABLE = True
except Exception:  # noqa: BLE001 - no server, no driver: the postgres cases skip
    PG_AVAILABLE = False

SHOP = Path(__file__).parents[2] / "fixtures" / "shop"
PROMPT_LEN, RESPONSE_LEN = 4096, 4096
SAMPLING = {"temperature": 1.0, "top_p": 0.95, "top_k": 20, "repetition_penalty": 1.0, "logprobs": True}


class StandInServer:
    """verl's async `generate` signature; plays `calls` (one per turn), then the final text."""

    def __init__(self, codec: ChatCodec, calls: list[dict], fail_on_call: int | None = None):
        self.codec, self.calls, self.fail_on_call = codec, calls, fail_on_call
        self.requests: list[dict] = []
        self.outputs: list[TokenOutput] = []

    async def generate(
        self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None, audio_data=None, mm_processor_kwargs=None, **kwargs
    ) -> TokenOutput:
        n = len(self.requests)
        self.requests.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params)})
        if self.fail_on_call is not None and n == self.fail_on_call:
            raise RuntimeError("the rollout server died")
        await asyncio.sleep(0)
        text = render_tool_call(self.calls[n]["tool"], self.calls[n]["args"]) if n < len(self.calls) else FINAL_TEXT
        ids = self.codec.encode(text) + [self.codec.tok.eos_token_id]
        out = TokenOutput(token_ids=ids, log_probs=[-(n + 1) - i / 1000 for i in range(len(ids))], stop_reason="completed")
        self.outputs.append(out)
        return out


@pytest.fixture(scope="module")
def shop_env(tmp_path_factory):
    domain = Domain(SHOP)
    tok = build_tokenizer(domain_corpus(domain, repeat=2), vocab_size=400)
    model_dir = tmp_path_factory.mktemp("model")
    tok.save_pretrained(model_dir)
    return domain, tok, model_dir


@pytest.fixture(params=["sqlite", "postgres"])
def loop_backend(request, tmp_path):
    """The backend kind the loop is configured with, and the process-wide backend it will use."""
    kind = request.param
    dsn = None
    if kind == "postgres":
        if not PG_AVAILABLE:
            if os.environ.get("CI"):
                pytest.fail(f"PostgreSQL is required in CI but {default_dsn()} is not reachable")
            pytest.skip("PostgreSQL not reachable")
        dsn = default_dsn()
    backend = gs_loop.shared_backend(kind, dsn)
    yield kind, dsn, backend
    gs_loop.close_shared_backends()


def make_loop(recipe_dir: Path, model_dir: Path, tok, server, kind: str, dsn: str | None, judge: str | None = None):
    """Instantiate the loop exactly as verl's AgentLoopWorker does, from the agent-loop file the recipe writes."""
    recipe = VerlRecipe(model=str(model_dir), train_file="unused.parquet", out_dir=str(recipe_dir), backend=kind, pg_dsn=dsn, judge=judge)
    files = write_run_files(recipe, {})
    entries = OmegaConf.load(files["agent_loop"])
    (entry,) = [e for e in entries if e.name == "groundstate"]
    cfg = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": PROMPT_LEN, "response_length": RESPONSE_LEN}, "model": {"path": str(model_dir)}},
            "data": {"apply_chat_template_kwargs": {}},
        }
    )
    return hydra.utils.instantiate(
        config=entry,
        trainer_config=DictConfigWrap(cfg),
        server_manager=server,
        tokenizer=tok,
        processor=None,
        hf_model_type="qwen2",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )


def row_kwargs(domain: Domain, task_id: str) -> dict:
    (row,) = [r for r in task_rows([(domain.task(t.id), domain) for t in domain.tasks]) if r["extra_info"]["task_id"] == task_id]
    return {"raw_prompt": row["prompt"], "extra_info": row["extra_info"], "agent_name": row["agent_name"], "data_source": row["data_source"]}


def evaluator_reward(task, domain, calls, backend) -> int:
    out = asyncio.run(play(task, domain, ScriptedAgent(calls, final_text=FINAL_TEXT), make_user("scripted", task), backend=backend))
    assert out.verdict.system_error is None
    return out.verdict.reward


def policies(task) -> dict[str, list[dict]]:
    gold = [c.model_dump() for c in task.gold]
    return {"gold": gold, "missing_last_call": gold[:-1], "noop": []}


@pytest.mark.parametrize("task_id", ["shop-cancel", "shop-refuse", "shop-multi"])
def test_rewards_equal_the_evaluator_and_tokens_are_the_servers(task_id, shop_env, loop_backend, tmp_path):
    domain, tok, model_dir = shop_env
    kind, dsn, backend = loop_backend
    task = domain.task(task_id)
    codec = ChatCodec(tok)
    seen_rewards = {}
    for name, calls in policies(task).items():
        server = StandInServer(codec, calls)
        loop = make_loop(tmp_path / name, model_dir, tok, server, kind, dsn)
        out = asyncio.run(loop.run(dict(SAMPLING), **row_kwargs(domain, task_id)))

        # the reward is the verdict the evaluator gives the same calls on the same backend
        assert out.reward_score == evaluator_reward(task, domain, calls, backend)
        seen_rewards[name] = out.reward_score

        # token-exact: the server saw the growing sequence itself, and what verl trains on is that sequence
        full = out.prompt_ids + out.response_ids
        last = server.requests[-1]["prompt_ids"] + server.outputs[-1].token_ids
        assert full == last
        assert server.requests[0]["prompt_ids"] == out.prompt_ids
        assert len({r["request_id"] for r in server.requests}) == 1  # one sticky session per episode
        sampled_positions, expected_lps = [], []
        for req, o in zip(server.requests, server.outputs, strict=True):
            start = len(req["prompt_ids"]) - len(out.prompt_ids)
            assert full[: len(req["prompt_ids"])] == req["prompt_ids"]
            sampled_positions += range(start, start + len(o.token_ids))
            expected_lps += o.log_probs
        assert [i for i, m in enumerate(out.response_mask) if m == 1] == sampled_positions  # observations masked out
        assert [out.response_logprobs[i] for i in sampled_positions] == expected_lps
        assert all(out.response_logprobs[i] == 0.0 for i, m in enumerate(out.response_mask) if m == 0)

        # sampling settings reach the server, and each turn is bounded by what is left of the response
        for req in server.requests:
            p = req["sampling_params"]
            assert (p["temperature"], p["top_p"], p["top_k"]) == (1.0, 0.95, 20)
            assert tok.eos_token_id in p["stop_token_ids"]
            assert 1 <= p["max_tokens"] <= min(512, PROMPT_LEN + RESPONSE_LEN - len(req["prompt_ids"]))
        assert out.extra_fields["task_id"] == task_id
        assert out.metrics.generate_sequences > 0 and out.metrics.tool_calls >= 0 and out.metrics.compute_score > 0
    assert seen_rewards["gold"] == 1.0 and seen_rewards["noop"] == 0.0


def _count_sandboxes(backend, monkeypatch):
    opened, closed = [], []
    orig_open = backend.open

    def open_(template):
        sb = orig_open(template)
        opened.append(sb)
        orig_close = sb.close

        def close():
            closed.append(sb)
            orig_close()

        sb.close = close
        return sb

    monkeypatch.setattr(backend, "open", open_)
    return opened, closed


@pytest.mark.parametrize("fail_on_call", [0, 2])
def test_sandbox_released_when_the_episode_raises(fail_on_call, shop_env, loop_backend, tmp_path, monkeypatch):
    domain, tok, model_dir = shop_env
    kind, dsn, backend = loop_backend
    opened, closed = _count_sandboxes(backend, monkeypatch)
    task = domain.task("shop-multi")
    server = StandInServer(ChatCodec(tok), [c.model_dump() for c in task.gold], fail_on_call=fail_on_call)
    loop = make_loop(tmp_path, model_dir, tok, server, kind, dsn)
    with pytest.raises(EpisodeSystemError, match="rollout server died"):  # a system error is never a 0 reward
        asyncio.run(loop.run(dict(SAMPLING), **row_kwargs(domain, "shop-multi")))
    # every sandbox opened is closed: the attempt's, and the golden replay's when the task's golden state was not cached yet
    assert 1 <= len(opened) <= 2 and closed == opened
    if kind == "postgres":
        assert backend.in_use == 0


def test_sandbox_released_when_grading_fails(shop_env, loop_backend, tmp_path, monkeypatch):
    domain, tok, model_dir = shop_env
    kind, dsn, backend = loop_backend
    opened, closed = _count_sandboxes(backend, monkeypatch)

    def broken(*a, **kw):
        raise RuntimeError("grader bug")

    monkeypatch.setattr(grader_for(backend), "grade", broken)
    task = domain.task("shop-cancel")
    loop = make_loop(tmp_path, model_dir, tok, StandInServer(ChatCodec(tok), [c.model_dump() for c in task.gold]), kind, dsn)
    with pytest.raises(EpisodeSystemError, match="grader bug"):
        asyncio.run(loop.run(dict(SAMPLING), **row_kwargs(domain, "shop-cancel")))
    # every sandbox opened is closed: the attempt's, and the golden replay's when the task's golden state was not cached yet
    assert 1 <= len(opened) <= 2 and closed == opened


def test_row_without_task_is_refused(shop_env, tmp_path):
    domain, tok, model_dir = shop_env
    loop = make_loop(tmp_path, model_dir, tok, StandInServer(ChatCodec(tok), []), "sqlite", None)
    with pytest.raises(ValueError, match="extra_info.task_id"):
        asyncio.run(loop.run(dict(SAMPLING), raw_prompt=[], extra_info={"index": 0}))


@pytest.fixture
def rubric_domain(tmp_path):
    """The shop fixture with one more task whose pass also needs a yes from the reply-rubric judge."""
    import shutil

    root = tmp_path / "shop"
    shutil.copytree(SHOP, root)
    (root / "tasks" / "rubric.yaml").write_text(
        "tasks:\n  - id: shop-cancel-told\n    instruction: Please cancel order 1 and tell me.\n"
        "    patch:\n      orders: [{id: 1, customer_id: 1, status: pending, total: 10.0, updated_at: null}]\n"
        "    gold:\n      - {tool: cancel_order, args: {order_id: 1}}\n"
        '    rubrics: ["Does the reply say the order was cancelled?"]\n    family: single_write\n'
    )
    return Domain(root)


@pytest.mark.parametrize("answer, reward", [("yes", 1.0), ("no", 0.0), (None, None)])
def test_reply_rubrics_are_judged_or_fail_the_group(answer, reward, rubric_domain, shop_env, tmp_path):
    """With a judge, the rubric decides with the final state; without one the task has no reward: never a silent 0."""
    from openai_stub import OpenAIStub, text

    _, tok, model_dir = shop_env
    task = rubric_domain.task("shop-cancel-told")
    server = StandInServer(ChatCodec(tok), [c.model_dump() for c in task.gold])
    row = {"raw_prompt": [], "extra_info": {"index": 0, "task_id": task.id, "domain": str(rubric_domain.path)}}
    with OpenAIStub([text(answer)] if answer else []) as stub:
        loop = make_loop(tmp_path, model_dir, tok, server, "sqlite", None, judge=f"openai:judge@{stub.base_url}" if answer else None)
        if reward is None:
            with pytest.raises(EpisodeSystemError, match="rubric task without a judge"):
                asyncio.run(loop.run(dict(SAMPLING), **row))
        else:
            assert asyncio.run(loop.run(dict(SAMPLING), **row)).reward_score == reward
            assert len(stub.requests) == 1
