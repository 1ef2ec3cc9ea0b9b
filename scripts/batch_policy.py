"""Which tree pays at which batch size: run B requests at once through runtime.batching (SmolLM2 + our EAGLE-1
draft, int8 by default, the demo's settings) for B in 1, 2, 4, 8 and each candidate tree, and print aggregate output tokens/s
of the decoding rounds (best of interleaved rounds; the prompts' base prefill, the same under every tree, is not timed:
timed, it diluted the trees' differences) and the best tree per B: the measurement behind the default load policy.

    .venv/bin/python scripts/batch_policy.py [--trees "dynamic:3,2,4;chain:2;chain:1;none"] [--dtype native-q8]
        [--json out.json]

--dtype native / native-q8 read the demo's GGUF blocks as stored (the base from `eagle-trt demo-model --gguf-dir`).
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", default="dynamic:3,2,4;chain:2;chain:1;none")
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads (1: what each of the two engines gets when served on 2 cores)")
    ap.add_argument("--dtype", default="int8", help="int8, float32, native or native-q8")
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)

    from transformers import AutoTokenizer

    from eagle_trt.demo_model import materialize_demo_base, materialize_demo_gguf_base, shipped_draft_dir
    from eagle_trt.datasets import encode_prompt, load_dataset
    from eagle_trt.runtime import EagleDecoder
    from eagle_trt.runtime.batching import Batcher, LoadPolicy

    base = materialize_demo_gguf_base() if args.dtype.startswith("native") else materialize_demo_base()
    decoder = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:2", dtype=args.dtype, max_seq_len=1024)
    tok = AutoTokenizer.from_pretrained(str(base))
    prompts = [encode_prompt(tok, p.text, True) for p in load_dataset("calibration")[:16]]
    trees, batches = args.trees.split(";"), [int(b) for b in args.batches.split(",")]
    best: dict[tuple[int, str], float] = {}
    for _ in range(args.rounds):
        for b in batches:
            for tree in trees:
                batcher = Batcher(decoder, b, LoadPolicy.parse(tree))
                for i in range(b):
                    batcher.start(prompts[i], args.max_tokens, stop_token_ids=())
                batcher.round()  # the prompts' base prefill, the same work under every tree: not timed
                t0, n = time.perf_counter(), 0
                while batcher.active:
                    n += sum(len(step.token_ids) for _, step in batcher.round())
                tps = n / (time.perf_counter() - t0)
                best[(b, tree)] = max(best.get((b, tree), 0.0), tps)
    print("| batch | " + " | ".join(trees) + " | best |")
    print("|---" * (len(trees) + 2) + "|")
    rows = []
    for b in batches:
        figures = [best[(b, t)] for t in trees]
        winner = trees[figures.index(max(figures))]
        rows.append({"batch": b, "tokens_per_s": dict(zip(trees, figures)), "best": winner})
        print(f"| {b} | " + " | ".join(f"{f:.1f}" for f in figures) + f" | {winner} |")
    print("policy: " + ";".join(r["best"] for r in rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"max_tokens": args.max_tokens, "threads": args.threads, "dtype": args.dtype, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
