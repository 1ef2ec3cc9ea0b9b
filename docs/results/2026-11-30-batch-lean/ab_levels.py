"""base vs eagle (served default) per level, alternating reps; prints tok/s and ratio per level (and per rep)."""
import os, sys, time, torch, json
TREE = os.environ.get("TREE", "chain:1+suffix:4,8"); DTYPE = os.environ.get("DTYPE", "native-q8")
torch.set_num_threads(1)
from transformers import AutoTokenizer
import eagle_trt
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy, resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.tree_config import resolve
levels = [int(x) for x in sys.argv[1].split(",")]; reps = int(sys.argv[2]); tag = sys.argv[3]
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree=TREE, dtype=DTYPE, max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
policy = LoadPolicy.parse(sys.argv[4]) if len(sys.argv) > 4 else resolve_load_policy(resolve(TREE), native=DTYPE.startswith("native"))
bs = {"base": Batcher(dec, 8, LoadPolicy.parse("none")), "eagle": Batcher(dec.with_backoff(), 8, policy)}
out = {}
for level in levels:
    tot = {"base": 0.0, "eagle": 0.0}; n = {"base": 0, "eagle": 0}; per = []; texts = {}
    for rep in range(reps):
        r = {}
        for name in (["base", "eagle"] if rep % 2 == 0 else ["eagle", "base"]):
            b = bs[name]; queue = list(enumerate(prompts[:level * 4])); t0 = time.perf_counter(); k = 0
            got = {}
            while queue or b.active:
                while queue and len(b.active) < level:
                    i, ids = queue.pop(0); b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i); got[i] = []
                for slot, step in b.round():
                    got[slot.key] = got[slot.key][:len(got[slot.key]) - step.retract] + step.token_ids; k += len(step.token_ids)
            dt = time.perf_counter() - t0; tot[name] += dt; n[name] += k; r[name] = k / dt
            texts.setdefault(name, got)
        per.append(round(r["eagle"] / r["base"], 3))
    same = texts["base"] == texts["eagle"]
    ratio = (n["eagle"] / tot["eagle"]) / (n["base"] / tot["base"])
    out[level] = ratio
    print(f"{tag} level {level}: base {n['base']/tot['base']:.1f} eagle {n['eagle']/tot['eagle']:.1f} tok/s ratio {ratio:.3f} reps {per} identical {same}", flush=True)
