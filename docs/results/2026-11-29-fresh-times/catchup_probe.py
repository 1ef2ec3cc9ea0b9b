"""How much of a batched run's time goes to draft calls, by rows per call (catch-up after plain rounds)."""
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
level = int(sys.argv[1]); reqs = int(sys.argv[2]) if len(sys.argv) > 2 else 4
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
policy = resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True)
stats = defaultdict(lambda: [0, 0.0])
draft = dec.draft
orig = draft.forward_packed
def timed(calls):
    t = time.perf_counter(); r = orig(calls); dt = time.perf_counter() - t
    rows = sum(c.input_ids.numel() for c in calls)
    key = "1-8" if rows <= 8 else "9-32" if rows <= 32 else "33-128" if rows <= 128 else ">128"
    stats[key][0] += 1; stats[key][1] += dt
    return r
draft.forward_packed = timed
for name, b in [("base", Batcher(dec, 8, LoadPolicy.parse("none"))), ("eagle", Batcher(dec.with_backoff(), 8, policy))]:
    for rnd in range(2):
        stats.clear()
        queue = list(enumerate(prompts[:level * reqs])); n = 0; t0 = time.perf_counter()
        while queue or b.active:
            while queue and len(b.active) < level:
                i, ids = queue.pop(0); b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
            for slot, step in b.round():
                n += len(step.token_ids)
        dt = time.perf_counter() - t0
        print(name, rnd, f"{n/dt:.1f} tok/s {dt:.2f} s", {k: (v[0], round(v[1], 3)) for k, v in sorted(stats.items())})
    for bs, st in sorted(getattr(b, "batch_backoff", {}).items()):
        print("  batch", bs, "spec" if st.chosen_spec else "plain", "switches", st.switches, "plain steps", st.plain_steps,
              "times", {k: None if v is None else round(v * 1e3, 2) for k, v in st.times.seconds.items()}, "acc", st.times.accepted)
