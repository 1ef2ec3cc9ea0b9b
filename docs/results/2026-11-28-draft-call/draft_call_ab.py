"""The draft call's two paths on the same calls, alternating in one process at one thread: its parts one by one
(`hidden_packed`: the torch ops around fc in C and the layer in C, then the head's top-k in C; the path before
0c6c54c) against one C call (`NativeDraft.forward_packed`, kernels/cpu_draft.h). The calls are a chain:1 step's:
the accepted rows (1-3) with the root's top-1, after a 100-token prompt. Run from the repository root:

    .venv/bin/python docs/results/2026-11-28-draft-call/draft_call_ab.py
"""
import statistics
import time

import torch

torch.set_num_threads(1)
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir  # noqa: E402
from eagle_trt.runtime import EagleDecoder  # noqa: E402
from eagle_trt.runtime.draft import DraftCall, DraftOut  # noqa: E402

dec = EagleDecoder.load(materialize_demo_gguf_base(), shipped_draft_dir(), tree="chain:1", dtype="native-q8",
                        max_seq_len=2048)
draft = dec.draft


def by_parts(calls):
    outs = [o[-1:] if c.last_only else o for c, o in zip(calls, draft.hidden_packed(calls))]
    scores, rows = draft.native.topk(torch.cat(outs), max(c.top_k for c in calls))
    return [DraftOut(o, scores[i:i + 1], draft.to_base_ids(rows[i:i + 1])) for i, o in enumerate(outs)]


P = 100
times = {"parts": [], "one call": []}
with torch.inference_mode():
    cache = draft.new_cache(2048)
    draft.forward_packed([DraftCall(torch.randint(0, 40000, (P,)), torch.randn(P, 576), torch.arange(P), 0, cache)])
    for i in range(400):
        a = 1 + i % 3  # accepted rows this step
        call = DraftCall(torch.randint(0, 40000, (a,)), torch.randn(a, 576), torch.arange(P, P + a), P, cache,
                         top_k=1, last_only=True)
        for name, fn in (("parts", by_parts), ("one call", draft.forward_packed)) if i % 2 else \
                (("one call", draft.forward_packed), ("parts", by_parts)):
            t = time.perf_counter()
            out = fn([call])
            times[name].append(time.perf_counter() - t)
            if name == "parts":
                ref = out
        new = draft.forward_packed([call])
        assert torch.equal(new[0].out, ref[0].out) and torch.equal(new[0].ids, ref[0].ids)
for name, v in times.items():
    print(f"{name:9s} median {1000 * statistics.median(v):.3f} ms, mean {1000 * statistics.fmean(v):.3f} ms")
