import sys, time, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
level = int(sys.argv[1]); reps = int(sys.argv[2])
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
bs = {"base": Batcher(dec, 8, LoadPolicy.parse("none")), "eagle": Batcher(dec.with_backoff(), 8, LoadPolicy.parse("chain:1+suffix:4,8;none"))}
fwd = [0.0]
fn = dec.base.forward_packed
def w(*a, **k):
    t = time.perf_counter(); r = fn(*a, **k); fwd[0] += time.perf_counter() - t; return r
dec.base.forward_packed = w
tot = {k: 0.0 for k in bs}; f = {k: 0.0 for k in bs}; rounds = {k: 0 for k in bs}
for rep in range(reps):
    for name in (["base", "eagle"] if rep % 2 == 0 else ["eagle", "base"]):
        b = bs[name]
        for i, ids in enumerate(prompts[(rep % 4) * level:(rep % 4 + 1) * level]): b.start(ids, 64, key=i)
        b.round(); b.round()
        fwd[0] = 0.0; t0 = time.perf_counter()
        while b.active:
            b.round(); rounds[name] += 1
        tot[name] += time.perf_counter() - t0; f[name] += fwd[0]
for k in bs: print(k, f"{1e3*tot[k]/rounds[k]:.3f} ms/round, forward {1e3*f[k]/rounds[k]:.3f}, other {1e3*(tot[k]-f[k])/rounds[k]:.3f} over {rounds[k]}")
