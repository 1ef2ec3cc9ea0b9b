"""base vs eagle vs eagle without priced suffix rows (Batcher.suffix = None), one process, engines rotating per rep."""
import os, sys, time, torch
TREE = os.environ.get("TREE", "chain:1+suffix:4,8"); DTYPE = os.environ.get("DTYPE", "native-q8")
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy, resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.tree_config import resolve
level, reps, ntok = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ds = os.environ.get("DS", "mt-bench")
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree=TREE, dtype=DTYPE, max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset(ds), 80)]
policy = resolve_load_policy(resolve(TREE), native=DTYPE.startswith("native"))
bs = {"base": Batcher(dec, 8, LoadPolicy.parse("none")), "eagle": Batcher(dec.with_backoff(), 8, policy),
      "nosuffix": Batcher(dec.with_backoff(), 8, policy)}
bs["nosuffix"].suffix = None
names = list(bs); tot = {n: 0.0 for n in names}; cnt = {n: 0 for n in names}; texts = {}; per = {n: [] for n in names}
for rep in range(reps):
    order = names[rep % 3:] + names[:rep % 3]
    for name in order:
        b = bs[name]; queue = list(enumerate(prompts[:level * 4])); t0 = time.perf_counter(); k = 0; got = {}
        while queue or b.active:
            while queue and len(b.active) < level:
                i, ids = queue.pop(0); b.start(ids, ntok, stop_token_ids=(tok.eos_token_id,), key=i); got[i] = []
            for slot, step in b.round():
                got[slot.key] = got[slot.key][:len(got[slot.key]) - step.retract] + step.token_ids; k += len(step.token_ids)
        dt = time.perf_counter() - t0; tot[name] += dt; cnt[name] += k; per[name].append(k / dt); texts.setdefault(name, got)
    print(f"rep {rep}: " + " ".join(f"{n} {per[n][-1]:.1f}" for n in names), flush=True)
rate = {n: cnt[n] / tot[n] for n in names}
print(f"level {level} {ntok} tok: " + " ".join(f"{n} {rate[n]:.1f}" for n in names)
      + f" | eagle/base {rate['eagle']/rate['base']:.3f} nosuffix/base {rate['nosuffix']/rate['base']:.3f}"
      + f" eagle/nosuffix {rate['eagle']/rate['nosuffix']:.3f} identical {texts['base'] == texts['eagle'] == texts['nosuffix']}")
odds = bs["eagle"].decoder.suffix_odds
print("odds", {b: f"{odds.accepted.get(b,0)}/{odds.seen[b]}" for b in sorted(odds.seen)})
r4 = bs["eagle"].rows.get(level)
if r4: print("verify ms", {k: round(v*1e3, 2) for k, v in sorted(r4.verify.items())}, "rest", {k: (round(v*1e3, 2) if v else v) for k, v in r4.rest.items()})
for name in ("eagle", "nosuffix"):
    for b, st in sorted(bs[name].batch_backoff.items()):
        print(name, "batch", b, "recorded", st.times.steps, "plain", st.plain_steps, "switches", st.switches,
              "spec s", st.times.seconds[True] and round(st.times.seconds[True]*1e3, 2), "plain s", st.times.seconds[False] and round(st.times.seconds[False]*1e3, 2),
              "acc", st.accepted and round(st.accepted, 2), "plain tok", st.plain_tokens and round(st.plain_tokens, 3))
