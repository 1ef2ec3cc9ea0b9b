"""Where a served engine's round goes, at the served thread count: MT-bench first turns through the engine's Batcher
one request at a time (1 stream), the demo's base (GGUF for native-q8) and EAGLE-1 draft, --dtype, each base forward timed by its
rows (1: plain step, 2+: verify block, prefill), each packed draft forward, and the rest (Python) per round.
Runs of two settings lie minutes apart, and this machine's speed moves 10-30 % between minutes: compare parts within
a run, or runs repeated in turn.

    .venv/bin/python scripts/step_split.py --tree chain:1 --seconds 30 [--threads 1] [--json out.json]
    .venv/bin/python scripts/step_split.py --tree none ...          # plain decoding on the same engine
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", default="chain:1", help="the batch-1 tree, or none (plain decoding)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--dtype", default="native-q8", help="native-q8 (the GGUF base) or int8 / float32 (the HF base)")
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
    from eagle_trt.demo_model import (
        materialize_demo_base,
        materialize_demo_gguf_base,
        shipped_draft_dir,
    )
    from eagle_trt.load_policy import LoadPolicy
    from eagle_trt.runtime import EagleDecoder
    from eagle_trt.runtime.batching import Batcher
    from eagle_trt.runtime.draft import DraftHead
    from eagle_trt.runtime.model import Llama

    base = materialize_demo_gguf_base() if args.dtype.startswith("native") else materialize_demo_base()
    plain = args.tree == "none"
    decoder = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1" if plain else args.tree, dtype=args.dtype,
                                max_seq_len=2048)
    tok = AutoTokenizer.from_pretrained(str(base))
    prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)][:args.prompts]
    batcher = Batcher(decoder, 1, LoadPolicy.parse(args.tree))

    seconds: dict[str, list[float]] = defaultdict(list)
    base_forward, draft_forward = Llama.forward_packed, DraftHead.forward_packed

    def timed_base(model, calls, capture=()):
        rows = sum(c.input_ids.shape[0] for c in calls)
        t = time.perf_counter()
        out = base_forward(model, calls, capture)
        seconds[f"base, {rows} row(s)" if rows <= 16 else "base, prefill"].append(time.perf_counter() - t)
        return out

    def timed_draft(head, calls):
        t = time.perf_counter()
        out = draft_forward(head, calls)
        seconds["draft"].append(time.perf_counter() - t)
        return out

    Llama.forward_packed, DraftHead.forward_packed = timed_base, timed_draft
    rounds = tokens = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        for ids in prompts:
            batcher.start(ids, 64, stop_token_ids=(tok.eos_token_id,))
            while batcher.active:
                tokens += sum(len(step.token_ids) for _, step in batcher.round())
                rounds += 1
    elapsed = time.perf_counter() - t0
    Llama.forward_packed, DraftHead.forward_packed = base_forward, draft_forward


    ms = 1000.0
    report = {"tree": args.tree, "threads": args.threads, "tok_s": tokens / elapsed, "ms_per_round": ms * elapsed / rounds,
              "tokens_per_round": tokens / rounds, "parts": {}}
    print(f"{args.tree}, {args.threads} thread(s): {tokens / elapsed:.1f} tok/s, {ms * elapsed / rounds:.2f} ms and "
          f"{tokens / rounds:.2f} tokens per round")
    print("| part | calls | median ms | ms per round |")
    print("|---|---|---|---|")
    accounted = 0.0
    for name in sorted(seconds):
        xs = seconds[name]
        accounted += sum(xs)
        report["parts"][name] = {"calls": len(xs), "median_ms": statistics.median(xs) * ms,
                                 "ms_per_round": sum(xs) * ms / rounds}
        print(f"| {name} | {len(xs)} | {statistics.median(xs) * ms:.2f} | {sum(xs) * ms / rounds:.2f} |")
    report["parts"]["rest (Python)"] = {"ms_per_round": (elapsed - accounted) * ms / rounds}
    print(f"| rest (Python) | | | {(elapsed - accounted) * ms / rounds:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
