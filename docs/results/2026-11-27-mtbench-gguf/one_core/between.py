import time, statistics, dataclasses, gc, numpy as np, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.runtime.model import Llama
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)][:2]
b = Batcher(dec, 1, LoadPolicy.parse("none"))
kept = []
of = Llama.forward_packed
def f(self, calls, capture=()):
    if calls[0].input_ids.shape[0] == 1: kept.append((calls[0], capture))
    return of(self, calls, capture)
Llama.forward_packed = f
b.start(prompts[0], 40, stop_token_ids=())
while b.active: b.round()
Llama.forward_packed = of
c, cap = kept[-1]
m = dec.base
big = np.ones(64 * 2**20 // 8)  # 64 MB
mid = np.ones(8 * 2**20 // 8)  # 8 MB
logit = np.random.rand(49152).astype(np.float32)
def py_busy(ms):
    t = time.perf_counter()
    while time.perf_counter() - t < ms / 1000: pass
between = {
    "back to back": lambda: None,
    "1 ms Python spin": lambda: py_busy(1),
    "sum 8 MB": lambda: mid.sum(),
    "sum 64 MB": lambda: big.sum(),
    "sleep 1 ms": lambda: time.sleep(0.001),
}
ts = {k: [] for k in between}
with torch.inference_mode():
    for rep in range(40):
        for k, fn in between.items():
            for _ in range(3):
                fn(); t = time.perf_counter(); of(m, [c], cap); ts[k].append(time.perf_counter() - t)
for k in between: print(f"{k:20s} median {1000*statistics.median(ts[k]):.2f} ms  min {1000*min(ts[k]):.2f}")
