import time, statistics, dataclasses, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.runtime.model import Llama, BaseCall
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)][:2]
b = Batcher(dec, 1, LoadPolicy.parse("chain:1"))
kept = []
of = Llama.forward_packed
def f(self, calls, capture=()):
    if calls[0].input_ids.shape[0] == 2: kept.append((calls[0], capture))
    return of(self, calls, capture)
Llama.forward_packed = f
b.start(prompts[0], 40, stop_token_ids=())
while b.active: b.round()
Llama.forward_packed = of
c, cap = kept[-1]
print("start", c.start, "cache", c.cache.max_len, "mask", c.tree_mask.tolist(), "ids", c.input_ids.tolist(), "pos", c.positions.tolist())
m = dec.base
syn_cache = m.new_cache(c.cache.max_len)
with torch.inference_mode():
    ids = torch.randint(0, 40000, (c.start,))
    m.forward_packed([BaseCall(ids, torch.arange(c.start), 0, cache=syn_cache, last_logits_only=True)])
    # the real cache's prefix copied into a fresh cache of the same size
    cp_cache = m.new_cache(c.cache.max_len)
    cp_cache.k.copy_(c.cache.k); cp_cache.v.copy_(c.cache.v)
    variants = {
        "real": c,
        "real 1 row": dataclasses.replace(c, input_ids=c.input_ids[:1], positions=c.positions[:1], tree_mask=c.tree_mask[:1, :1]),
        "random ids": dataclasses.replace(c, input_ids=torch.randint(0, 40000, (2,))),
        "synthetic cache": dataclasses.replace(c, cache=syn_cache),
        "copied cache": dataclasses.replace(c, cache=cp_cache),
        "synthetic cache 1 row": dataclasses.replace(c, cache=syn_cache, input_ids=c.input_ids[:1], positions=c.positions[:1], tree_mask=c.tree_mask[:1, :1]),
    }
    ts = {k: [] for k in variants}
    for rep in range(40):
        for k, v in variants.items():
            t = time.perf_counter(); of(m, [v], cap); ts[k].append(time.perf_counter() - t)
    for k in variants: print(f"{k:22s} median {1000*statistics.median(ts[k]):.2f} ms  min {1000*min(ts[k]):.2f}")
    # what differs in the cache data: magnitude stats
    L = c.start
    print("real K absmax", c.cache.k[:, :, :L].abs().max().item(), "syn K absmax", syn_cache.k[:, :, :L].abs().max().item())
    print("real V absmax", c.cache.v[:, :, :L].abs().max().item(), "syn V absmax", syn_cache.v[:, :, :L].abs().max().item())
    tiny = lambda x: ((x != 0) & (x.abs() < 6.1e-5)).float().mean().item()
    print("fp16 subnormal fraction: real K", tiny(c.cache.k[:, :, :L]), "V", tiny(c.cache.v[:, :, :L]), "syn K", tiny(syn_cache.k[:, :, :L]), "V", tiny(syn_cache.v[:, :, :L]))
