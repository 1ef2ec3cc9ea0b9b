import time, torch
torch.set_num_threads(1)
from statistics import median
from eagle_trt.demo_model import materialize_demo_gguf_base
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.model import BaseCall
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, None, tree="chain:1", dtype="native-q8", max_seq_len=2048)
m = dec.base
c = m.new_cache(1024)
L = 100
with torch.inference_mode():
    m.forward_packed([BaseCall(torch.randint(0, 40000, (L,)), torch.arange(L), 0, None, c, last_logits_only=True)])
res = {}
with torch.inference_mode():
    for rep in range(9):
        for n in (1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64, 128):
            call = BaseCall(torch.randint(0, 40000, (n,)), torch.arange(L, L + n), L, None, c, last_logits_only=True)
            t0 = time.perf_counter(); m.forward_packed([call]); res.setdefault(n, []).append(time.perf_counter() - t0)
for n, v in res.items():
    t = median(v); print(f"{n:4d} rows {1e3*t:7.2f} ms  {1e3*t/n:6.3f} ms/row")
