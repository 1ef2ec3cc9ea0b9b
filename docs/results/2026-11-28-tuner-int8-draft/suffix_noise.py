"""Run from the repository root: .venv/bin/python docs/results/2026-11-28-tuner-int8-draft/suffix_noise.py (REPS=4).
How noisy is the tuner's in-turn ratio of a tree with and without suffix candidates? Per prompt and aggregate."""
import statistics, sys, time
import torch
torch.set_num_threads(2)
from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
from eagle_trt.runtime import EagleDecoder
from eagle_trt.tuning.calibrate import _prompts
base = materialize_demo_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:3", dtype="int8")
prompts = _prompts(base, 16)
args = sys.argv[1:] or ["chain:3", "chain:3+suffix:4,8"]
decs = [dec.with_tree(a) for a in args]
for rep in range(int(__import__("os").environ.get("REPS", "4"))):
    per = [[] for _ in decs]
    for ids in prompts:
        for i, d in enumerate(decs):
            t0 = time.perf_counter()
            st = d.generate_all(ids, 48, stop_token_ids=d.base_spec.eos_token_ids).stats
            per[i].append((sum(st.accepted_lengths), len(st.accepted_lengths), time.perf_counter() - t0 - st.prefill_time_s))
    def agg(p):
        return sum(x[0] for x in p) / sum(x[2] for x in p)
    tau = [sum(x[0] for x in p) / sum(x[1] for x in p) for p in per]
    # per prompt step-time ratio
    step = lambda x: x[2] / x[1]
    for i in range(1, len(decs)):
        pr = [step(b) / step(a) for a, b in zip(per[0], per[i])]
        print(f"rep {rep} {args[i]}: tok/s ratio {agg(per[i])/agg(per[0]):.3f} tau {tau[i]:.3f}/{tau[0]:.3f}"
              f" step ratio agg {(sum(x[2] for x in per[i])/sum(x[1] for x in per[i]))/(sum(x[2] for x in per[0])/sum(x[1] for x in per[0])):.3f}"
              f" median per-prompt step ratio {statistics.median(pr):.3f} min {min(pr):.3f} max {max(pr):.3f}", flush=True)
