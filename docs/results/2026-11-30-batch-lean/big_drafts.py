import sys, time, torch
torch.set_num_threads(1)
from collections import Counter
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.tree_config import resolve
level = int(sys.argv[1]); reps = int(sys.argv[2])
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
policy = resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True)
b = Batcher(dec.with_backoff(), 8, policy)
fn = dec.draft.forward_packed; log = []; cur = [0]
def w(calls):
    t = time.perf_counter(); r = fn(calls); dt = time.perf_counter() - t
    log.append((cur[0], tuple(c.input_ids.numel() for c in calls), dt)); return r
dec.draft.forward_packed = w
for rep in range(reps):
    queue = list(enumerate(prompts[:level * 4]))
    while queue or b.active:
        while queue and len(b.active) < level:
            i, ids = queue.pop(0); b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
        cur[0] = len(b.active); b.round()
tot = Counter(); cnt = Counter()
for size, rows, dt in log:
    kind = "big" if max(rows) > 16 else "small"
    tot[(size, kind)] += dt; cnt[(size, kind)] += 1
for k in sorted(tot): print(k, cnt[k], f"{tot[k]*1e3:.1f} ms")
print([ (s, r, round(dt*1e3,2)) for s, r, dt in log if max(r) > 16][:30])
