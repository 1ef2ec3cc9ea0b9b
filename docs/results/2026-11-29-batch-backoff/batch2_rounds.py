"""Batch-2 rounds of the native-q8 demo engine (1 thread, MT-bench first turns, 2 streams x 6 requests): tok/s,
rounds, tokens per round and the seconds in the packed base and draft forwards, per setting: base (policy none),
spec (the policy given, always), fplain (that policy's decoder forced plain: what a drafting decoder's plain rounds
cost), bkoff (the policy with the batch's backoff).

    .venv/bin/python batch2_rounds.py "chain:1+suffix:4,8;chain:1" 2
"""
import time, sys, collections
import torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher

base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
T = collections.Counter()
def timed(obj, name, key):
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[key] += time.perf_counter() - t; T[key + "#"] += 1
        if key == "base": T["rows"] += sum(c.input_ids.numel() if hasattr(c, "input_ids") else 0 for c in a[0])
        return r
    setattr(obj, name, g)
timed(dec.draft, "forward_packed", "draft")
timed(dec.base, "forward_packed", "base")
pol = sys.argv[1] if len(sys.argv) > 1 else "chain:1;chain:1"
LEVEL = int(sys.argv[2]) if len(sys.argv) > 2 else 2
from eagle_trt.runtime.backoff import Backoff
batchers = {}
for name, policy in [("base", "none"), ("spec", pol), ("fplain", pol), ("bkoff", pol)] * 2:
    if name not in batchers:
        batchers[name] = Batcher(dec, 8, LoadPolicy.parse(policy))
        if name == "bkoff": batchers[name].backoff = Backoff()
        if name == "fplain": batchers[name]._speculates = lambda batch: False
    b = batchers[name]
    queue = list(enumerate(prompts[:LEVEL * 6])); n = 0; rounds = 0
    T.clear(); t0 = time.perf_counter()
    while queue or b.active:
        while queue and len(b.active) < LEVEL:
            i, ids = queue.pop(0); b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
        for slot, step in b.round(): n += len(step.token_ids)
        rounds += 1
    el = time.perf_counter() - t0
    print(f"{name:5s} {policy:20s} {n/el:6.1f} tok/s  rounds {rounds} tok/round {n/rounds:.2f}  total {el:.2f}s  "
          f"base {T['base']:.2f}s/{T['base#']} ({1e3*T['base']/max(T['base#'],1):.2f} ms)  draft {T['draft']:.2f}s/{T['draft#']} ({1e3*T['draft']/max(T['draft#'],1):.2f} ms)  other {el-T['base']-T['draft']:.2f}s ({1e3*(el-T['base']-T['draft'])/rounds:.2f} ms/round)", flush=True)
