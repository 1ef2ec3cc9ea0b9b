"""S streams, base vs eagle, alternating: time in base forwards (prefill rows / decode rows), draft forwards, other."""
import sys, time, torch
torch.set_num_threads(1)
from collections import defaultdict
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy, resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.tree_config import resolve
level = int(sys.argv[1]); reps = int(sys.argv[2])
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
policy = resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True)
bs = {"base": Batcher(dec, 8, LoadPolicy.parse("none")), "eagle": Batcher(dec.with_backoff(), 8, policy)}
cur = [None]
acc = {k: defaultdict(float) for k in bs}
def wrap(obj, attr, kind):
    fn = getattr(obj, attr)
    def w(calls, *a, **k):
        t = time.perf_counter(); r = fn(calls, *a, **k); dt = time.perf_counter() - t
        rows = [c.input_ids.numel() for c in calls]
        big = sum(x for x in rows if x > 16)
        a_ = acc[cur[0]]
        if kind == "base" and big:
            a_["base_prefill_s"] += dt; a_["prefill_rows"] += big; a_["prefill_calls"] += 1; a_["prefill_decode_rows"] += sum(rows) - big
        elif kind == "base":
            a_["base_decode_s"] += dt; a_["decode_rows"] += sum(rows); a_["decode_calls"] += 1
        else:
            a_[kind + ("_big" if big else "") + "_s"] += dt; a_[kind + "_rows"] += sum(rows); a_[kind + "_calls"] += 1
        return r
    setattr(obj, attr, w)
wrap(dec.base, "forward_packed", "base"); wrap(dec.draft, "forward_packed", "draft")
tot = defaultdict(float); ntok = defaultdict(int)
for rep in range(reps):
    for name in (["base", "eagle"] if rep % 2 == 0 else ["eagle", "base"]):
        b = bs[name]; cur[0] = name
        queue = list(enumerate(prompts[:level * 4])); t0 = time.perf_counter()
        while queue or b.active:
            while queue and len(b.active) < level:
                i, ids = queue.pop(0); b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
            for slot, step in b.round(): ntok[name] += len(step.token_ids)
            acc[name]["rounds"] += 1
        tot[name] += time.perf_counter() - t0
print("tok/s", {k: round(ntok[k] / tot[k], 1) for k in tot}, "ratio", round(ntok["eagle"] / tot["eagle"] / (ntok["base"] / tot["base"]), 3))
for name in bs:
    a = acc[name]; other = tot[name] - sum(v for k, v in a.items() if k.endswith("_s"))
    print(name, f"total {tot[name]:.2f} s other {other:.2f} s", {k: round(v, 3) if isinstance(v, float) else v for k, v in sorted(a.items())})
