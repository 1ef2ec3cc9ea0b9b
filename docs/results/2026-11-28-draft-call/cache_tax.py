"""What touching memory between base forwards costs the next forward on this machine: a 1-row forward of the demo
GGUF base (native-q8, one thread, 120-token context) with 0-20 MB of other memory read between forwards (a
float32 buffer summed), the sizes in turn, 4 rounds of 25 forwards. A chain:1 round reads the draft's ~10 MB of
weights between two base forwards. Run from the repository root:

    .venv/bin/python docs/results/2026-11-28-draft-call/cache_tax.py
"""
import statistics
import time

import torch

torch.set_num_threads(1)
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir  # noqa: E402
from eagle_trt.runtime import EagleDecoder  # noqa: E402
from eagle_trt.runtime.model import BaseCall  # noqa: E402

dec = EagleDecoder.load(materialize_demo_gguf_base(), shipped_draft_dir(), tree="chain:1", dtype="native-q8",
                        max_seq_len=2048)
base, P = dec.base, 120
sweeps = {mb: torch.ones(max(1, mb << 18)) for mb in (0, 2, 5, 10, 20)}  # [mb MB of float32]
res = {mb: [] for mb in sweeps}
with torch.inference_mode():
    base.forward_packed([BaseCall(torch.randint(0, 40000, (P,)), torch.arange(P), 0, None, base.cache,
                                  last_logits_only=True)])
    for rnd in range(4):
        for mb, buf in sweeps.items():
            for i in range(25):
                if mb:
                    buf.sum()
                call = BaseCall(torch.randint(0, 40000, (1,)), torch.arange(P, P + 1), P, None, base.cache)
                t0 = time.perf_counter()
                base.forward_packed([call])
                res[mb].append(time.perf_counter() - t0)
print("| MB read between forwards | 1-row forward, median ms |")
print("|---|---|")
for mb, v in res.items():
    print(f"| {mb} | {1000 * statistics.median(v):.2f} |")
