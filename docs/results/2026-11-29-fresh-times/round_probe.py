"""Time per round kind (batch size, prefill in it, speculative) for base and eagle at one level, in one process."""
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
bs = {"base": Batcher(dec, 8, LoadPolicy.parse("none")), "eagle": Batcher(dec.with_backoff(), 8, policy)}
for rnd in range(3):
    for name in (["base", "eagle"] if rnd % 2 == 0 else ["eagle", "base"]):
        b = bs[name]
        kinds = defaultdict(lambda: [0, 0.0, 0])
        queue = list(enumerate(prompts[:level * reqs])); n = 0; t0 = time.perf_counter()
        while queue or b.active:
            while queue and len(b.active) < level:
                i, ids = queue.pop(0); b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
            pre = any(s.generation.stats.steps == 0 for s in b.active)
            batch = len(b.active)
            spec = name == "eagle" and b._speculates(batch)
            t = time.perf_counter()
            ev = b.round()
            k = (batch, "pre" if pre else "dec", "S" if spec else "-")
            kinds[k][0] += 1; kinds[k][1] += time.perf_counter() - t; kinds[k][2] += sum(len(s.token_ids) for _, s in ev)
            n += sum(len(s.token_ids) for _, s in ev)
        dt = time.perf_counter() - t0
        print(name, rnd, f"{n/dt:.1f} tok/s {dt:.2f} s", flush=True)
        if rnd == 2:
            for k in sorted(kinds):
                c, s, tk = kinds[k]
                print("   ", k, f"rounds {c:4d} {s:6.3f} s {1e3*s/c:6.2f} ms/round tokens {tk}")
for bsz, st in sorted(bs["eagle"].batch_backoff.items()):
    print("  batch", bsz, "spec" if st.chosen_spec else "plain", "switches", st.switches, "plain steps", st.plain_steps,
          "times", {k: None if v is None else round(v * 1e3, 2) for k, v in st.times.seconds.items()}, "acc", st.accepted, st.times.accepted, "interval", st.interval)
