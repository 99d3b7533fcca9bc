"""Local-policy decoding: groundstate's KV-cache decode loop against transformers' `generate`, in one run.

`BatchedPolicy` samples every row from its own random stream (`agents.local._RowSampler`). It used to run that
sampler as a logits processor inside `model.generate`; it now runs its own token-by-token loop over the model's KV
cache (`BatchedPolicy._decode`). Both are timed here on the same model, batch and random streams, and must choose
the same tokens. The model is the quickstart's architecture (a 0.51M-parameter Qwen2, random weights: the speed
of a forward pass does not depend on what the weights learned); each batch is 64 left-padded rows decoding a fixed
number of tokens (no row stops early), at the context widths the quickstart's turns have (a first turn and a third).

Merges its keys into benchmarks/results.json (`decode_*`); prints the table for RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from results_file import merge  # noqa: E402 - beside this script

from groundstate.agents.local import BatchedPolicy, SamplingParams, _RowSampler
from groundstate.train.tiny import build_model, build_tokenizer, domain_corpus
from groundstate.worlds.domain import load_domain


def batch(width: int, rows: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, vocab, (rows, width), generator=g)
    mask = torch.ones_like(ids)
    for i in range(rows):  # rows of different lengths, left-padded as the policy pads them
        mask[i, : (i * 7) % (width // 2)] = 0
    return ids * mask, mask


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=40, help="tokens decoded per row")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    torch.manual_seed(0)
    tok = build_tokenizer(domain_corpus(load_domain("kiosk"), repeat=2), vocab_size=512)
    model = build_model(tok)
    params = SamplingParams(temperature=1.0, top_k=0, max_new_tokens=args.tokens, max_context=8192)
    policy = BatchedPolicy(model, tok, params)
    R: dict[str, float] = {}
    lines = ["| context width | `generate` + row sampler (baseline) | decode loop | speed-up |", "| --- | --- | --- | --- |"]
    for width in (32, 170):
        ids, mask = batch(width, 64, len(tok), seed=width)

        def sampler() -> _RowSampler:  # eos -1: no row stops early, both paths decode the same number of tokens
            return _RowSampler(params, [torch.Generator().manual_seed(i) for i in range(64)], [args.tokens] * 64, eos_id=-1, pad_id=0)

        def run_generate(ids: torch.Tensor = ids, mask: torch.Tensor = mask) -> list:
            s = sampler()
            with torch.inference_mode():
                model.generate(
                    input_ids=ids, attention_mask=mask, logits_processor=[s], do_sample=False, max_new_tokens=args.tokens,
                    eos_token_id=None, pad_token_id=0, temperature=None, top_p=None, top_k=None,
                )  # fmt: skip
            return s.results

        def run_loop(ids: torch.Tensor = ids, mask: torch.Tensor = mask) -> list:
            s = sampler()
            with torch.inference_mode():
                policy._decode(ids, mask, s)
            return s.results

        assert [r[0] for r in run_generate()] == [r[0] for r in run_loop()], "both paths must choose the same tokens"
        times: dict[str, list[float]] = {"generate": [], "loop": []}
        for _ in range(args.reps):  # interleaved, so that a change in machine load hits both
            for name, fn in (("generate", run_generate), ("loop", run_loop)):
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1000)
        g, lp = statistics.median(times["generate"]), statistics.median(times["loop"])
        R[f"decode_w{width}_generate_ms"], R[f"decode_w{width}_loop_ms"] = round(g, 1), round(lp, 1)
        R[f"decode_w{width}_speedup"] = round(g / lp, 2)
        lines.append(f"| {width} | {g:.0f} ms | {lp:.0f} ms | {g / lp:.2f}× |")
        print(f"width {width}: generate {g:.0f} ms, decode loop {lp:.0f} ms per batch of 64 × {args.tokens} tokens ({g / lp:.2f}×)", flush=True)
    print("\n".join(lines))
    if not args.no_write:
        print(f"wrote {merge(R)}")


if __name__ == "__main__":
    main()
