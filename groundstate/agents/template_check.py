"""Whether a model's chat template renders what a tool-using episode holds: the tool schemas in the prompt, the
agent's own tool calls in its turn, and the tools' results. A template that drops any of them trains and evaluates
nothing, silently (the model never sees the tools, or its calls and their results vanish from its context), so
every local policy checks its tokenizer once (`ChatCodec`) and warns (`ChatTemplateWarning`) saying what is missing;
`template_problems` is the check, for a trainer of one's own (TRL's `processing_class`)."""

from __future__ import annotations

import hashlib
import json
import threading
import warnings
from typing import Any

__all__ = ["ChatTemplateWarning", "template_problems", "warn_once"]

PROBE_TOOL = "lookup_order_probe"  # names nothing a real conversation holds: its presence is the template's doing
PROBE_RESULT = "shipped on the probe date"
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": PROBE_TOOL,
            "description": "Look up an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]},
        },
    }
]
_ASKED = [{"role": "system", "content": "Help the customer."}, {"role": "user", "content": "Where is order 7?"}]
_CALLED = [
    *_ASKED,
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "id": "call_1", "function": {"name": PROBE_TOOL, "arguments": {"order_id": 7}}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": PROBE_TOOL, "content": json.dumps({"status": PROBE_RESULT})},
]


class ChatTemplateWarning(UserWarning):
    """A model's chat template drops part of a tool-using conversation."""


def template_problems(tokenizer: Any, tools_in_prompt: bool = True) -> list[str]:
    """What `tokenizer`'s chat template fails to render, one line each (empty: nothing). `tools_in_prompt` False: the
    model is not shown the schemas (a tiny model that learned its tools), so only calls and results are asked for."""
    if not tokenizer.chat_template:
        return ["the tokenizer has no chat template"]
    problems = []
    try:
        prompt = tokenizer.apply_chat_template(_ASKED, tools=_TOOLS if tools_in_prompt else None, add_generation_prompt=True, tokenize=False)
        if tools_in_prompt and PROBE_TOOL not in prompt:
            problems.append("its prompt holds no tool schemas: the template ignores `tools`")
    except Exception as e:  # a template is code: whatever it raises is what the model's users would meet
        problems.append(f"it fails on a prompt with tools: {type(e).__name__}: {e}")
    try:
        called = tokenizer.apply_chat_template(_CALLED, add_generation_prompt=True, tokenize=False)  # no schemas: the name is the call's
        if PROBE_TOOL not in called:
            problems.append("an assistant turn's tool calls are dropped: the model never sees its own calls")
        if PROBE_RESULT not in called:
            problems.append("tool results are dropped: the model never sees what its calls returned")
    except Exception as e:
        problems.append(f"it fails on a conversation with a tool call: {type(e).__name__}: {e}")
    return problems


_warned: set[str] = set()
_lock = threading.Lock()


def warn_once(tokenizer: Any, tools_in_prompt: bool = True) -> list[str]:
    """`template_problems`, with one `ChatTemplateWarning` per template and process when there are any."""
    template = tokenizer.chat_template or ""
    key = hashlib.sha256(f"{tools_in_prompt}\0{template}".encode()).hexdigest()
    with _lock:
        if key in _warned:
            return []
        _warned.add(key)
    problems = template_problems(tokenizer, tools_in_prompt)
    if problems:
        name = tokenizer.name_or_path or "this model"
        warnings.warn(
            f"the chat template of {name} cannot render a tool-using episode: {'; '.join(problems)}. Its episodes will "
            "make no tool call the grader can see: give the tokenizer a template that renders tools, tool calls and "
            "results (transformers' chat-template docs), or train one (`groundstate tiny build` writes one)",
            ChatTemplateWarning,
            stacklevel=3,
        )
    return problems
