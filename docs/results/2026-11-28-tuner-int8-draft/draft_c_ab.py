"""Run from the repository root: .venv/bin/python docs/results/2026-11-28-tuner-int8-draft/draft_c_ab.py 1 > draft_c_ab.txt
int8 engine: the EAGLE-1 draft in torch (int8 linears) against in C (native-q8's NativeDraft, fc float32),
alternating per prompt on the calibration prompts: accepted length, ms per step, tok/s."""
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
from eagle_trt.runtime import EagleDecoder
from eagle_trt.tuning.calibrate import _prompts
base = materialize_demo_base()
trees = sys.argv[2].split(";") if len(sys.argv) > 2 else ["chain:2+suffix:2,6", "chain:3"]
c = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:2", dtype="int8")
assert c.draft.native is not None
import eagle_trt.runtime.linears as lin
real = lin._int8_draft_in_c
lin._int8_draft_in_c = lambda draft, vocab: False  # the draft on torch's int8 linears, as before
t = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:2", dtype="int8")
lin._int8_draft_in_c = real
assert t.draft.native is None
prompts = _prompts(base, 16)
for tree in trees:
    decs = {"torch": t.with_tree(tree), "C": c.with_tree(tree), "plain": t.with_tree("chain:1", speculative=False)}
    acc = {k: [0, 0, 0.0, 0.0] for k in decs}
    for rep in range(2):
        for ids in prompts:
            outs = {}
            for k, d in (list(decs.items()) if rep == 0 else list(reversed(decs.items()))):
                t0 = time.perf_counter()
                g = d.generate_all(ids, 48, stop_token_ids=d.base_spec.eos_token_ids)
                st = g.stats
                a = acc[k]; a[0] += sum(st.accepted_lengths); a[1] += len(st.accepted_lengths)
                a[2] += time.perf_counter() - t0 - st.prefill_time_s; a[3] += st.draft_time_s
                outs[k] = g.token_ids
            assert outs["torch"] == outs["C"] == outs["plain"]
    for k, (tok, steps, sec, dsec) in acc.items():
        print(f"{tree:22s} {k:6s} tau {tok/steps:.3f}  {1000*sec/steps:6.2f} ms/step  draft {1000*dsec/steps:5.2f} ms/step  {tok/sec:6.1f} tok/s", flush=True)
