"""Peak resident memory of the PyTorch engine as a served model holds it: in this (fresh) process, load the demo
base and the shipped EAGLE-1 draft at --dtype (native and native-q8 read the base's GGUF blocks; the others its float32
HF copy), generate, and print the RSS after loading, the peak RSS (ru_maxrss, load included) and the tokens generated,
as one JSON line.

Alone (the default): one MT-bench prompt on the decoder's own cache. With `--served N`: the served engine's request
loop, a Batcher of max_batch N (its pool of caches, prefix reuse on unless --no-reuse), running the demo's 8 MT-bench
questions, turn 1 then turn 2 (with the model's own first answer), `--concurrency` requests at a time.

    .venv/bin/python scripts/engine_rss.py --dtype int8
    .venv/bin/python scripts/engine_rss.py --dtype int8 --served 8 --concurrency 1 [--no-reuse]
"""

from __future__ import annotations

import argparse
import json
import resource
from pathlib import Path


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def serve(decoder, tokenizer, max_batch: int, concurrency: int, reuse: bool, max_tokens: int) -> dict:
    """The demo's 8 questions, both turns, through one Batcher, `concurrency` at a time; returns tokens, cached
    prompt tokens and how many cache pairs the pool held at the end."""
    from eagle_trt.chat import encode_conversation
    from eagle_trt.datasets import load_dataset, take_prompts
    from eagle_trt.load_policy import resolve_load_policy
    from eagle_trt.runtime.batching import Batcher

    questions = take_prompts(load_dataset("mt-bench"), 8)
    batcher = Batcher(decoder, max_batch, resolve_load_policy(decoder.tree), reuse_prefix=reuse)
    stop = decoder.base_spec.eos_token_ids
    answers: dict[int, list[int]] = {}
    totals = {"tokens": 0, "cached_prompt_tokens": 0}
    for turn in (1, 2):
        todo = list(range(len(questions)))
        running = {}  # slot -> (question, tokens so far)
        while todo or running:
            while todo and len(running) < concurrency:
                i = todo.pop(0)
                q = questions[i]
                texts = [tokenizer.decode(answers[i], skip_special_tokens=True)] if turn == 2 else []
                ids = encode_conversation(tokenizer, list(q.turns[:turn]), texts)
                running[batcher.start(ids, max_tokens, stop_token_ids=stop)] = (i, [])
            for slot, step in batcher.round():
                out = running[slot][1]
                out[len(out) - step.retract:] = step.token_ids
            for slot in [s for s in running if s not in batcher.active]:
                i, out = running.pop(slot)
                answers[i] = out
                totals["tokens"] += len(out)
                totals["cached_prompt_tokens"] += slot.generation.stats.cached_prompt_tokens
    return totals | {"pool_pairs": len(batcher.spare)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="int8")
    ap.add_argument("--tree", default="chain:2+suffix:4,8")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--served", type=int, default=0, metavar="MAX_BATCH", help="through a Batcher (the served loop)")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--no-reuse", action="store_true", help="the served loop without prefix reuse")
    args = ap.parse_args()
    import torch
    from transformers import AutoTokenizer

    from eagle_trt.datasets import encode_prompt, mtbench_prompts
    from eagle_trt.demo_model import materialize_demo_base, materialize_demo_gguf_base, shipped_draft_dir
    from eagle_trt.runtime import EagleDecoder
    from eagle_trt.spec import NATIVE_PRECISIONS

    torch.set_num_threads(2)
    base = materialize_demo_gguf_base() if args.dtype in NATIVE_PRECISIONS else materialize_demo_base()
    decoder = EagleDecoder.load(base, shipped_draft_dir("eagle1"), tree=args.tree, dtype=args.dtype)
    loaded = rss_mib()
    tokenizer = AutoTokenizer.from_pretrained(base)
    if args.served:
        run = serve(decoder, tokenizer, args.served, args.concurrency, not args.no_reuse, args.max_tokens)
        run |= {"served": {"max_batch": args.served, "concurrency": args.concurrency, "reuse": not args.no_reuse}}
    else:
        ids = encode_prompt(tokenizer, mtbench_prompts()[0].text, True)
        run = {"tokens": len(decoder.generate_all(ids, args.max_tokens).token_ids)}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"dtype": args.dtype, "base": str(base), "rss_after_load_mib": round(loaded, 1),
                      "peak_rss_mib": round(peak, 1), "rss_now_mib": round(rss_mib(), 1)} | run))


if __name__ == "__main__":
    main()
