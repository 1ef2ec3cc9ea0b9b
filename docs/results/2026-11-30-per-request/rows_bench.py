import time, torch
torch.set_num_threads(1)
from statistics import median
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.model import BaseCall
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, None, tree="chain:1", dtype="native-q8", max_seq_len=2048)
m = dec.base
caches = [m.new_cache(512) for _ in range(4)]
L = 200
with torch.inference_mode():
    for c in caches:
        m.forward_packed([BaseCall(torch.randint(0, 40000, (L,)), torch.arange(L), 0, None, c, last_logits_only=True)])
def call(c, n, tree):
    ids = torch.randint(0, 40000, (n,))
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool)) if tree else None
    return BaseCall(ids, torch.arange(L, L + n), L, mask, c)
shapes = {"1+1": [(1, False), (1, False)], "2+1": [(2, True), (1, False)], "2+2": [(2, True), (2, True)],
          "3+1": [(3, True), (1, False)], "1+1+1": [(1, False)] * 3, "1+1+1+1": [(1, False)] * 4,
          "2+1 nomask": [(2, False), (1, False)], "2+2 nomask": [(2, False), (2, False)], "4": [(4, False)], "3": [(3, False)], "2": [(2, False)], "1": [(1, False)]}
res = {k: [] for k in shapes}
with torch.inference_mode():
    for rep in range(30):
        for k, sh in shapes.items():
            calls = [call(caches[i], n, t) for i, (n, t) in enumerate(sh)]
            t0 = time.perf_counter(); m.forward_packed(calls); res[k].append(time.perf_counter() - t0)
for k, v in res.items():
    print(f"{k:12s} {1e3 * median(v):6.2f} ms")
