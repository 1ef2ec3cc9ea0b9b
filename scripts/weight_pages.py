"""Huge pages for the weights (or, with --what caches, the KV caches), measured: plain decoding of the demo GGUF base
at --dtype by engines whose weights (caches) lie in 2 MiB pages (runtime.weight_memory, the default) and by engines
in ordinary 4 KiB pages, loaded alternately into this one process (ordinary, huge, ordinary, huge: two of each show
how much placement alone moves a copy), then run in turn on the same bursts of MT-bench prompts (the served request
loop, runtime.batching) at each --batch size, the order flipped every round. Prints a table, writes JSON; every
engine's tokens must be identical.

    .venv/bin/python scripts/weight_pages.py --dtype native-q8 --threads 1 --batch 1,8 --json-out pages.json
    .venv/bin/python scripts/weight_pages.py --what caches --dtype native-q8 --batch 1,4,8 --max-tokens 128
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def anon_huge_mib() -> float:
    """Anonymous memory in huge pages in this process (/proc/self/smaps_rollup), MiB."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) / 1024
    return 0.0


def burst(batcher, prompts, max_tokens: int) -> tuple[float, list[list[int]]]:
    """Seconds to run `prompts` at once to the end, and each one's tokens."""
    slots = [batcher.start(ids, max_tokens) for ids in prompts]
    tokens = {id(s): [] for s in slots}
    t0 = time.perf_counter()
    while batcher.active:
        for slot, step in batcher.round():
            out = tokens[id(slot)]
            out[len(out) - step.retract:] = step.token_ids
    return time.perf_counter() - t0, [tokens[id(s)] for s in slots]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="native-q8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", default="1,8", help="comma-separated burst sizes")
    ap.add_argument("--prompts", type=int, default=16, help="MT-bench first turns per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--what", choices=("weights", "caches"), default="weights",
                    help="what lies in huge pages or not: the weights (caches in huge pages in all four) or the KV "
                         "caches (weights in huge pages in all four)")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    import torch
    from transformers import AutoTokenizer

    from eagle_trt.datasets import encode_prompt, mtbench_prompts
    from eagle_trt.demo_model import materialize_demo_base, materialize_demo_gguf_base
    from eagle_trt.load_policy import LoadPolicy
    from eagle_trt.runtime import EagleDecoder, weight_memory
    from eagle_trt.runtime.batching import Batcher
    from eagle_trt.runtime.model import KVCache
    from eagle_trt.spec import NATIVE_PRECISIONS

    torch.set_num_threads(args.threads)
    base = materialize_demo_gguf_base() if args.dtype in NATIVE_PRECISIONS else materialize_demo_base()
    tokenizer = AutoTokenizer.from_pretrained(base)
    prompts = [encode_prompt(tokenizer, p.text, True) for p in mtbench_prompts()[:args.prompts]]
    advised = weight_memory.huge_pages_advised
    huge_caches = KVCache.__init__.__defaults__  # (huge_pages,): what a cache made now gets
    engines = {}
    for name in ("ordinary-1", "huge-1", "ordinary-2", "huge-2"):
        if args.what == "weights":
            weight_memory.huge_pages_advised = advised if name.startswith("huge") else (lambda: False)
        KVCache.__init__.__defaults__ = (args.what == "weights" or name.startswith("huge"),)
        decoder = EagleDecoder.load(base, None, tree="chain:1", dtype=args.dtype)
        engines[name] = Batcher(decoder, 8, LoadPolicy((None,)), reuse_prefix=False)
    weight_memory.huge_pages_advised = advised
    rows, identical = [], True
    for b in (int(x) for x in args.batch.split(",")):
        seconds, tokens = dict.fromkeys(engines, 0.0), dict.fromkeys(engines, 0)
        for r in range(args.rounds):
            for k in range(0, len(prompts), b):
                group = [prompts[(k + i) % len(prompts)] for i in range(b)]
                outputs = []
                for name in (list(engines) if r % 2 == 0 else list(engines)[::-1]):
                    KVCache.__init__.__defaults__ = (args.what == "weights" or name.startswith("huge"),)
                    dt, out = burst(engines[name], group, args.max_tokens)
                    seconds[name] += dt
                    tokens[name] += sum(len(o) for o in out)
                    outputs.append(out)
                identical &= all(o == outputs[0] for o in outputs)
        KVCache.__init__.__defaults__ = huge_caches
        ref = tokens["ordinary-1"] / seconds["ordinary-1"]
        for name in engines:
            rate = tokens[name] / seconds[name]
            rows.append({"batch": b, "engine": name, "tok_per_s": round(rate, 1), "vs_ordinary_1": round(rate / ref, 3)})
    print(f"| batch | engine | tok/s | vs ordinary-1 |  ({args.what} in huge pages or not, {args.dtype}, "
          f"{args.threads} thread(s), "
          f"anonymous huge pages {anon_huge_mib():.0f} MiB, identical {identical})")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['batch']} | {row['engine']} | {row['tok_per_s']} | {row['vs_ordinary_1']:.3f}x |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"settings": vars(args), "huge_pages_advised": advised(),
                                                   "anon_huge_mib": anon_huge_mib(), "identical": identical,
                                                   "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
