"""Token-exactness: an episode's token record equals the supervised rendering of the same conversation."""

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("torch")

from groundstate.agents.local import BatchedPolicy, ChatCodec, SamplingParams  # noqa: E402
from groundstate.agents.scripted import ScriptedUser  # noqa: E402
from groundstate.agents.toolcall_format import render_tool_call  # noqa: E402
from groundstate.grading.grader import grade  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.train.sft import FINAL_TEXT, encode_demo  # noqa: E402
from groundstate.train.tiny import build_model, build_tokenizer, domain_corpus  # noqa: E402
from groundstate.worlds.domain import Domain  # noqa: E402
from groundstate.worlds.environment import SqlEnvironment  # noqa: E402
from groundstate.worlds.episode import run_episode  # noqa: E402

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"


class TeacherForced(BatchedPolicy):
    """Emits the gold calls one per turn, then the final text, as token ids (what a perfect model would sample)."""

    def __init__(self, *a, calls, **kw):
        super().__init__(*a, **kw)
        self.calls = calls
        self.emitted = 0

    def _generate_batch(self, batch, generators=None):
        eos = self.tok.eos_token_id
        out = []
        for _ in batch:
            text = (
                render_tool_call(self.calls[self.emitted]["tool"], self.calls[self.emitted]["args"]) if self.emitted < len(self.calls) else FINAL_TEXT
            )
            self.emitted += 1
            ids = self.codec.encode(text) + [eos]
            out.append((ids, [0.0] * len(ids), True))
        return out


@pytest.mark.parametrize("flags", [{"tools_in_prompt": False, "system_in_prompt": False}, {"tools_in_prompt": True, "system_in_prompt": True}])
def test_episode_tokens_equal_the_supervised_rendering(flags):
    domain = Domain(SHOP)
    task = domain.task("shop-multi")
    tok = build_tokenizer(domain_corpus(domain, repeat=2), vocab_size=400)
    model = build_model(tok, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    calls = [c.model_dump() for c in task.gold]
    policy = TeacherForced(model, tok, SamplingParams(max_context=8192), calls=calls, **flags)
    agent = policy.agent()
    backend = SqliteBackend()
    with backend.open(backend.prepare(domain, task.patch)) as sb:
        traj = asyncio.run(run_episode(SqlEnvironment(task, sb), agent, ScriptedUser([])))
        assert grade(task, sb).reward == 1  # the forced gold turns, parsed from tokens, solve the task
    ids, mask = encode_demo(ChatCodec(tok, **flags), traj.messages, domain.tools.openai_schemas())
    assert agent.prompt_ids + agent.completion_ids == ids
    assert [0] * len(agent.prompt_ids) + agent.env_mask == mask
    assert len(agent.logprobs) == len(agent.completion_ids)
