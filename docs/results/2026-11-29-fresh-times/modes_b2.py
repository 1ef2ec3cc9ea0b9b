"""batch 2 steady state: eagle rounds forced spec / plain in blocks, base plain rounds interleaved; times per round."""
import sys, time, torch
torch.set_num_threads(1)
from statistics import median
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy, resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.tree_config import resolve
batch = int(sys.argv[1]) if len(sys.argv) > 1 else 2
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
policy = resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True)
bb = Batcher(dec, 8, LoadPolicy.parse("none")); eb = Batcher(dec.with_backoff(), 8, policy)
bb.spare.clear(); eb.spare.clear()
mode = [True]
eb._speculates = lambda n: mode[0]
for b in (bb, eb):
    for i in range(batch):
        b.start(prompts[10 + i], 400, key=i)
    for _ in range(3): b.round()
res = {"base": [], "spec": [], "plain_first": [], "plain": [], "spec_first": []}
tok_ = {"spec": 0, "spec_n": 0}
for block in range(12):
    spec = block % 2 == 0
    mode[0] = spec
    for k in range(6):
        t = time.perf_counter(); ev = eb.round(); dt = time.perf_counter() - t
        key = ("spec" if spec else "plain") if k else ("spec_first" if spec else "plain_first")
        res[key].append(dt)
        t = time.perf_counter(); bb.round(); res["base"].append(time.perf_counter() - t)
        if spec and k: tok_["spec"] += sum(len(s.token_ids) for _, s in ev); tok_["spec_n"] += 1
for k, v in res.items():
    print(f"{k:12s} n={len(v):3d} median {1e3*median(v):6.2f} ms")
print("tokens per spec round (emitted the round after)", tok_["spec"] / tok_["spec_n"])
