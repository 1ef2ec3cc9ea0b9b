"""Why EAGLE suffers under concurrent load on a CPU: run the SmolLM2 engine (EAGLE and plain, int8, the demo's
settings) alone and side by side in two processes, at 1 and at all cores' intra-op threads each, and print tokens/s.

    .venv/bin/python scripts/contention.py --prompts 4 --max-tokens 64 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time


def _worker(kind: str, threads: int, prompts: int, max_tokens: int, barrier, results, wait_policy: str | None):
    if wait_policy:
        os.environ["OMP_WAIT_POLICY"] = wait_policy
    import torch

    from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
    from eagle_trt.datasets import encode_prompt, load_dataset
    from eagle_trt.runtime import EagleDecoder

    torch.set_num_threads(threads)
    base = materialize_demo_base()
    decoder = EagleDecoder.load(base, shipped_draft_dir() if kind == "eagle" else None, tree="chain:2",
                              dtype="int8", max_seq_len=2048)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base))
    ids = [encode_prompt(tok, p.text, True) for p in load_dataset("calibration")[-prompts:]]
    decoder.generate_all(ids[0], 8)  # warm-up
    barrier.wait()
    t0, n = time.perf_counter(), 0
    for x in ids:
        n += len(decoder.generate_all(x, max_tokens, stop_token_ids=()).token_ids)
    results[kind] = n / (time.perf_counter() - t0)


def run(kinds, threads, prompts, max_tokens, wait_policy=None) -> dict:
    ctx = mp.get_context("spawn")
    manager = ctx.Manager()
    results, barrier = manager.dict(), ctx.Barrier(len(kinds))
    procs = [ctx.Process(target=_worker, args=(k, threads, prompts, max_tokens, barrier, results, wait_policy))
             for k in kinds]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return dict(results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--json", help="write the table here")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    rows = []
    for threads in sorted({1, cores}):
        for policy in (None, "PASSIVE"):
            for kinds in (("eagle",), ("plain",), ("eagle", "plain")):
                tps = run(kinds, threads, args.prompts, args.max_tokens, policy)
                row = {"threads": threads, "omp_wait_policy": policy or "default",
                       "mode": "alone" if len(kinds) == 1 else "side by side"} | {k: round(v, 1) for k, v in tps.items()}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cores": cores, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
