"""`perf load` without Triton: S streams through one engine's Batcher (runtime.batching), each sending its next
request when its last one ends, MT-bench first turns spread over the categories (as `perf load` takes them), greedy,
64 tokens, stopping at EOS. The settings run in turn on the same requests, the order flipped each round, and every
output is checked against the base's. Prints aggregate output tokens/s per level and setting (medians over rounds)
and the ratios to the base, each round's beside them; writes them as JSON.

    .venv/bin/python scripts/stream_load.py [--levels 1,2,4,8] [--rounds 3] [--threads 1] [--json out.json]

Settings: `base` plain decoding; `eagle` the native engine as served by default (`--backoff auto` = `on`: the
tree, the native load policy, backoff for a request running alone and per batch); `eagle_static` the same with the
batch's backoff off (each request alone backs off, batches run the load policy's trees); `eagle_always` without any
backoff (every request drafts whenever its policy entry has a tree); `eagle_batch` the batch's backoff alone
(`--backoff batches`: a request running alone keeps its tree).
One thread by default: what each of the bundle's two engines gets on this 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import time
from statistics import median


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=4, help="requests per stream")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tree", default="chain:1+suffix:4,8", help="the batch-1 tree (the bundle's tuned one)")
    ap.add_argument("--dtype", default="native-q8")
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
    from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
    from eagle_trt.load_policy import LoadPolicy, resolve_load_policy
    from eagle_trt.runtime import EagleDecoder
    from eagle_trt.runtime.backoff import Backoff
    from eagle_trt.runtime.batching import Batcher
    from eagle_trt.tree_config import resolve

    base = materialize_demo_gguf_base()
    decoder = EagleDecoder.load(base, shipped_draft_dir(), tree=args.tree, dtype=args.dtype, max_seq_len=2048)
    tok = AutoTokenizer.from_pretrained(str(base))
    prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
    policy = resolve_load_policy(resolve(args.tree), native=args.dtype.startswith("native"))
    batchers = {"base": Batcher(decoder, 8, LoadPolicy.parse("none")),
                "eagle": Batcher(decoder.with_backoff(), 8, policy),
                "eagle_static": Batcher(decoder.with_backoff(), 8, policy),
                "eagle_always": Batcher(decoder, 8, policy),
                "eagle_batch": Batcher(decoder, 8, policy, batch_backoff=Backoff())}
    batchers["eagle_static"].backoff = None  # requests still back off one by one; the batch does not
    levels = [int(x) for x in args.levels.split(",")]
    print(f"{args.dtype}, {args.threads} thread(s), policy {policy.to_arg()}", flush=True)

    def run(batcher: Batcher, level: int) -> tuple[float, dict]:
        queue = list(enumerate(prompts[:level * args.requests]))
        out: dict[int, list[int]] = {}
        t0, n = time.perf_counter(), 0
        while queue or batcher.active:
            while queue and len(batcher.active) < level:
                i, ids = queue.pop(0)
                batcher.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
                out[i] = []
            for slot, step in batcher.round():
                out[slot.key] += step.token_ids
                n += len(step.token_ids)
        return n / (time.perf_counter() - t0), out

    tps: dict[tuple[int, str], list[float]] = {}
    for r in range(args.rounds):
        for level in levels:
            names = list(batchers) if r % 2 == 0 else list(batchers)[::-1]
            outs = {}
            for name in names:
                tps.setdefault((level, name), []).append(0.0)
                tps[(level, name)][-1], outs[name] = run(batchers[name], level)
            assert all(o == outs["base"] for o in outs.values()), f"outputs differ at level {level}"
    rows = []
    print("| streams | " + " | ".join(f"{n} tok/s" for n in batchers) + " | "
          + " | ".join(f"{n}/base (rounds)" for n in batchers if n != "base") + " |")
    print("|---" * (2 * len(batchers)) + "|")
    for level in levels:
        med = {n: median(tps[(level, n)]) for n in batchers}
        ratios = {n: med[n] / med["base"] for n in batchers if n != "base"}
        rounds = {n: [a / b for a, b in zip(tps[(level, n)], tps[(level, "base")])] for n in ratios}
        rows.append({"streams": level, "tok_per_s": med, "ratio": ratios, "round_ratios": rounds})
        print(f"| {level} | " + " | ".join(f"{med[n]:.1f}" for n in batchers) + " | "
              + " | ".join(f"{ratios[n]:.2f}x ({' '.join(f'{x:.2f}' for x in rounds[n])})" for n in ratios) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "dtype": args.dtype, "policy": policy.to_arg(), "levels": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
