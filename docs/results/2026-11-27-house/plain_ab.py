"""Plain decoding speed of the runtime, for an A/B of two source trees: SmolLM2 int8, the first 8 MT-bench first
turns, 64 tokens, 2 threads, best of 3 rounds; prints one line `LABEL plain int8 tok/s X`.

    for i in 1 2; do
      PYTHONPATH=/tmp/before/src .venv/bin/python docs/results/2026-11-27-house/plain_ab.py before
      PYTHONPATH=src .venv/bin/python docs/results/2026-11-27-house/plain_ab.py after
    done
"""

import sys
import time

import torch
from transformers import AutoTokenizer

from eagle_trt.datasets import mtbench_prompts
from eagle_trt.demo_model import materialize_demo_base
from eagle_trt.runtime import EagleDecoder

torch.set_num_threads(2)
base = materialize_demo_base()
tok = AutoTokenizer.from_pretrained(base)
prompts = [tok(tok.apply_chat_template([{"role": "user", "content": p.turns[0]}], add_generation_prompt=True,
                                       tokenize=False), add_special_tokens=False)["input_ids"]
           for p in mtbench_prompts()[:8]]
decoder = EagleDecoder.load(base, None, tree="chain:1", dtype="int8")
decoder.generate_all(prompts[0], 8)  # warm-up
best = 0.0
for _ in range(3):
    t0, tokens = time.time(), 0
    for ids in prompts:
        tokens += len(decoder.generate_all(ids, 64).token_ids)
    best = max(best, tokens / (time.time() - t0))
print(sys.argv[1] if len(sys.argv) > 1 else "this tree", "plain int8 tok/s", round(best, 2))
