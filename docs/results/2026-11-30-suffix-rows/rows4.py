"""Packed base forward of 4 requests (context ~200 each) by rows per request: marginal cost of extra rows."""
import time, torch, statistics
torch.set_num_threads(1)
from eagle_trt.demo_model import materialize_demo_gguf_base
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.model import BaseCall
base_dir = materialize_demo_gguf_base()
dec = EagleDecoder.load(base_dir, None, tree="chain:1", dtype="native-q8", max_seq_len=1024)
base = dec.base
caches = [base.new_cache(1024) for _ in range(4)]
ctx = 200
with torch.inference_mode():
    for c in caches:
        base.forward_packed([BaseCall(torch.randint(0, 40000, (ctx,)), torch.arange(ctx), 0, None, c, last_logits_only=True)])
def call(c, n):
    ids = torch.randint(0, 40000, (n,)); pos = ctx + torch.arange(n)
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    return BaseCall(ids, pos, ctx, mask if n > 1 else None, c)
shapes = [(1,1,1,1), (2,1,1,1), (2,2,1,1), (2,2,2,1), (2,2,2,2), (3,3,1,1), (4,1,1,1), (5,1,1,1), (3,3,3,3), (5,5,1,1)]
res = {s: [] for s in shapes}
with torch.inference_mode():
    for rep in range(12):
        for s in shapes:
            calls = [call(c, n) for c, n in zip(caches, s)]
            t = time.perf_counter(); base.forward_packed(calls); res[s].append(time.perf_counter() - t)
for s in shapes:
    print(s, sum(s), f"{statistics.median(res[s][2:])*1e3:.2f} ms")
