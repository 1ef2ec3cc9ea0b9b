"""Where 2 streams' time goes, base vs eagle (the served default), one thread, reps alternating: per engine the
seconds in rounds where a request prefills and in the other rounds, rounds of each, tokens."""
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
level = int(sys.argv[1]) if len(sys.argv) > 1 else 2
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
policy = resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True)
batchers = {"base": Batcher(dec, 8, LoadPolicy.parse("none")), "eagle": Batcher(dec.with_backoff(), 8, policy)}
acc = {n: defaultdict(float) for n in batchers}
for rep in range(reps):
    for name in (list(batchers) if rep % 2 == 0 else list(batchers)[::-1]):
        b, a = batchers[name], acc[name]
        queue = list(enumerate(prompts[:level * 4]))
        t0, last = time.perf_counter(), None
        while queue or b.active:
            while queue and len(b.active) < level:
                i, ids = queue.pop(0)
                b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
            kind = "prefill" if any(s.generation.stats.steps == 0 for s in b.active) else f"b{len(b.active)}"
            t = time.perf_counter()
            ev = b.round()
            a[kind + "_s"] += time.perf_counter() - t
            a[kind + "_n"] += 1
            got = sum(len(s.token_ids) for _, s in ev)
            a["tokens"] += got
            if last is not None:
                a[last + "_tok"] += got  # a round's tokens come out in the next one
            last = kind
        a["total_s"] += time.perf_counter() - t0
for name, a in acc.items():
    print(name, f"tok/s {a['tokens'] / a['total_s']:.1f}", " ".join(
        f"{k[:-2]}: {a[k]:.3f}s/{int(a[k[:-2] + '_n'])}r ({1e3 * a[k] / a[k[:-2] + '_n']:.2f} ms, "
        f"{a[k[:-2] + '_tok'] / a[k[:-2] + '_n']:.2f} tok/r, {a[k[:-2] + '_tok'] / a[k] / 1e3:.3f} tok/ms)"
        for k in sorted(a) if k.endswith("_s") and k != "total_s"), f"total {a['total_s']:.2f}s tokens {int(a['tokens'])}")
