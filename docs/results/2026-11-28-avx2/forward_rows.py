"""The demo base's forward at 1, 2 and 4 rows after a CTX-token prompt, per precision, median of REPS rounds (the
row counts alternate within a round). native / native-q8 read the GGUF's blocks; int8 the safetensors base. Run from
the repository root:

    .venv/bin/python docs/results/2026-11-28-avx2/forward_rows.py THREADS CTX native-q8,native,int8 [REPS]
"""
import statistics
import sys
import time

import torch

threads, ctx, dtypes = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 15
torch.set_num_threads(threads)
from eagle_trt.demo_model import materialize_demo_base, materialize_demo_gguf_base, shipped_draft_dir  # noqa: E402
from eagle_trt.runtime import EagleDecoder  # noqa: E402
from eagle_trt.runtime.model import BaseCall  # noqa: E402

for dtype in dtypes:
    base_dir = materialize_demo_gguf_base() if dtype.startswith("native") else materialize_demo_base()
    base = EagleDecoder.load(base_dir, shipped_draft_dir(), tree="chain:1", dtype=dtype, max_seq_len=4096).base
    res = {t: [] for t in (1, 2, 4)}
    with torch.inference_mode():
        base.forward_packed([BaseCall(torch.randint(0, 40000, (ctx,)), torch.arange(ctx), 0, None, base.cache,
                                      last_logits_only=True)])
        for _ in range(reps):
            for t in res:
                call = BaseCall(torch.randint(0, 40000, (t,)), torch.arange(ctx, ctx + t), ctx, None, base.cache)
                t0 = time.perf_counter()
                base.forward_packed([call])
                res[t].append(time.perf_counter() - t0)
    print(f"| {dtype} | {threads} | {ctx} | " + " | ".join(f"{1000 * statistics.median(v):.2f}" for v in res.values())
          + " |", flush=True)
