"""Ad-hoc check (2026-11-26, night): the demo's two candidate trees on MT-bench first turns, in process, one thread,
through the single-request path (generate_all) and through runtime.batching at batch 1; best of 2 rounds, tok/s.

    .venv/bin/python docs/results/2026-11-26-caches/tree_paths.py
"""
import time, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
from eagle_trt.datasets import encode_prompt, load_dataset
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher, LoadPolicy
base = materialize_demo_base()
engine = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:2", dtype="int8", max_seq_len=8192)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in load_dataset("mt-bench")[:8]]
trees = ["static:[[0],[1],[0,0],[0,0,0]]+suffix:2,6", "dynamic:5,4,12+suffix:2,6", "none"]
best = {}
for rnd in range(2):
    for tree in trees:
        for path in ("direct", "batcher"):
            n, t = 0, 0.0
            if path == "direct":
                view = engine.with_tree(tree if tree != "none" else "chain:1", speculative=tree != "none")
                for p in prompts:
                    t0 = time.perf_counter(); r = view.generate_all(p, 64, stop_token_ids=()); t += time.perf_counter() - t0; n += len(r.token_ids)
            else:
                b = Batcher(engine, 1, LoadPolicy.parse(tree))
                for p in prompts:
                    t0 = time.perf_counter(); b.start(p, 64, stop_token_ids=())
                    while b.active: n += sum(len(s.token_ids) for _, s in b.round())
                    t += time.perf_counter() - t0
            best[(tree, path)] = max(best.get((tree, path), 0), n / t)
for tree in trees:
    print(f"{tree:45s} direct {best[(tree,'direct')]:.1f}  batcher {best[(tree,'batcher')]:.1f} tok/s")
