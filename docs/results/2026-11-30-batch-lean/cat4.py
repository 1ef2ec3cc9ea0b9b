"""Level L, fresh Batchers: base vs eagle reps alternating; eagle rounds by category (time, tokens, count)."""
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
cat = {k: defaultdict(lambda: [0, 0.0, 0]) for k in bs}
for rep in range(reps):
    for name in (["base", "eagle"] if rep % 2 == 0 else ["eagle", "base"]):
        b = bs[name]; queue = list(enumerate(prompts[:level * 4])); prev = None
        while queue or b.active:
            while queue and len(b.active) < level:
                i, ids = queue.pop(0); b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
            size = len(b.active); pre = any(s.generation.stats.steps == 0 for s in b.active)
            t = time.perf_counter(); k = 0
            for slot, step in b.round(): k += len(step.token_ids)
            dt = time.perf_counter() - t
            spec = b.speculated and b.policy.tree_for(size) is not None
            c = "prefill" if pre else f"b{size} " + ("spec" if spec else "plain") + (" first" if prev is not None and prev != spec else "")
            prev = spec if not pre else prev
            e = cat[name][c]; e[0] += 1; e[1] += dt; e[2] += k
for name in bs:
    T = sum(v[1] for v in cat[name].values()); N = sum(v[2] for v in cat[name].values())
    print(name, f"{T:.2f} s {N} tok {N/T:.1f} tok/s")
    for c, (r, s, k) in sorted(cat[name].items()):
        print(f"   {c:18s} {r:5d} rounds {s:6.2f} s {k:5d} tok  {1e3*s/r:6.2f} ms/round {k/r:5.2f} tok/round")
st = bs["eagle"].batch_backoff.get(level)
if st:
    print("backoff b%d: spec %.2f ms x %.3f tok/req, plain %.2f ms x %.3f tok/req, timed %s, rates %.1f / %.1f, switches %d" % (
        level, 1e3 * st.times.seconds[True], st.accepted, 1e3 * st.times.seconds[False], st.plain_tokens, st.times.timed,
        st.rate(True), st.rate(False), st.switches))
    r = bs["eagle"].rows[level]
    print("rows", {k: round(1e3 * v, 2) for k, v in sorted(r.verify.items())}, "rest", r.rest and round(1e3 * r.rest, 2), r.timed)
