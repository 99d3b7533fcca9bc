"""A chat template that cannot render a tool-using episode is said once, naming what it drops (#36 item 6): the schemas
in the prompt, the agent's own tool calls, the tools' results. Checked on a real tokenizer (built here, with our chat
template) and the same tokenizer given templates that drop each part, as a model from a hub may ship them."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("transformers")

from groundstate.agents.local import ChatCodec  # noqa: E402
from groundstate.agents.template_check import ChatTemplateWarning, template_problems  # noqa: E402
from groundstate.train.tiny import build_tokenizer  # noqa: E402

CONTENT_ONLY = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
WITH_TOOLS = "{% if tools %}{{ tools | tojson }}{% endif %}" + CONTENT_ONLY  # schemas and results, but no calls
NO_RESULTS = (
    "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{% if m['role'] != 'tool' %}<|{{ m['role'] }}|>{{ m['content'] }}"
    "{% for c in m.get('tool_calls') or [] %}{{ c['function'] | tojson }}{% endfor %}{% endif %}{% endfor %}"
)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(["Where is order 7? lookup_order_probe shipped"] * 4, vocab_size=300)


def test_our_template_renders_everything(tok):
    assert template_problems(tok) == [] and template_problems(tok, tools_in_prompt=False) == []


def test_each_part_a_template_drops_is_named(tok):
    saved = tok.chat_template
    try:
        tok.chat_template = CONTENT_ONLY  # messages' content only: a tool's result is content, a call is not
        assert template_problems(tok) == [
            "its prompt holds no tool schemas: the template ignores `tools`",
            "an assistant turn's tool calls are dropped: the model never sees its own calls",
        ]
        assert template_problems(tok, tools_in_prompt=False) == ["an assistant turn's tool calls are dropped: the model never sees its own calls"]
        tok.chat_template = WITH_TOOLS
        assert template_problems(tok) == ["an assistant turn's tool calls are dropped: the model never sees its own calls"]
        tok.chat_template = NO_RESULTS
        assert template_problems(tok) == ["tool results are dropped: the model never sees what its calls returned"]
        tok.chat_template = "{{ raise_exception('no tools here') }}"
        assert all("fails on" in p and "no tools here" in p for p in template_problems(tok))
        tok.chat_template = None
        assert template_problems(tok) == ["the tokenizer has no chat template"]
    finally:
        tok.chat_template = saved


def test_a_local_policy_warns_once_per_template(tok):
    saved = tok.chat_template
    try:
        tok.chat_template = NO_RESULTS
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ChatCodec(tok)
            ChatCodec(tok)  # the same template again: said once
        said = [w for w in caught if issubclass(w.category, ChatTemplateWarning)]
        assert len(said) == 1 and "tool results are dropped" in str(said[0].message)
        tok.chat_template = saved
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ChatCodec(tok)
        assert not [w for w in caught if issubclass(w.category, ChatTemplateWarning)]
    finally:
        tok.chat_template = saved
