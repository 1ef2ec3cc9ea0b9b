"""The same base forwards replayed after different work, in one process at one thread: per MT-bench first turn, the
last 6 steps' calls of a plain generation (1 row) and of an EAGLE chain:1 generation (2 rows) are recorded, then
replayed right after an EAGLE generation, right after a plain one, and right after 40 draft calls alone (1st, 2nd,
3rd forward after them, then 12 more). Every forward is the same arithmetic; what differs is what ran before it.
Run from the repository root:

    .venv/bin/python docs/results/2026-11-28-draft-call/replay_after.py
"""
import statistics
import time
from collections import defaultdict

import torch

torch.set_num_threads(1)
from transformers import AutoTokenizer  # noqa: E402

from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts  # noqa: E402
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir  # noqa: E402
from eagle_trt.runtime import EagleDecoder  # noqa: E402
from eagle_trt.runtime.draft import DraftCall  # noqa: E402
from eagle_trt.runtime.model import Llama  # noqa: E402

base_dir = materialize_demo_gguf_base()
dec = EagleDecoder.load(base_dir, shipped_draft_dir(), tree="chain:1", dtype="native-q8", max_seq_len=2048)
plain = dec.with_tree("chain:1", speculative=False)
tok = AutoTokenizer.from_pretrained(str(base_dir))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)][:12]
recorded, secs = [], defaultdict(list)
forward = Llama.forward_packed


def recording(self, calls, capture=()):
    if calls[0].input_ids.shape[0] <= 4:
        recorded.append(calls[0])
    return forward(self, calls, capture)


def replay(calls, key):
    for c in calls:
        t0 = time.perf_counter()
        forward(dec.base, [c])
        secs[key].append(time.perf_counter() - t0)


def generate(decoder, ids):
    recorded.clear()
    decoder.generate_all(ids, 64, stop_token_ids=(tok.eos_token_id,))
    return recorded[-6:]


Llama.forward_packed = recording
draft_cache = dec.draft.new_cache(2048)
with torch.inference_mode():
    dec.draft.forward_packed([DraftCall(torch.randint(0, 40000, (100,)), torch.randn(100, 576), torch.arange(100), 0,
                                        draft_cache)])
    for ids in prompts:
        plain_calls, eagle_calls = generate(plain, ids), generate(dec, ids)
        replay(plain_calls, "after EAGLE: plain steps' calls")
        replay(eagle_calls, "after EAGLE: verify calls")
        generate(plain, ids)
        replay(plain_calls, "after plain: plain steps' calls")
        replay(eagle_calls, "after plain: verify calls")
        for i in range(40):
            dec.draft.forward_packed([DraftCall(torch.randint(0, 40000, (2,)), torch.randn(2, 576),
                                                torch.arange(100, 102), 100, draft_cache, top_k=1, last_only=True)])
        for n, key in enumerate(("1st", "2nd", "3rd")):
            replay(plain_calls[n:n + 1], f"after 40 draft calls: {key} plain call")
        replay(plain_calls * 2, "after 40 draft calls: 4th-15th plain call")
print("| replayed | forwards | median ms |")
print("|---|---|---|")
for key, v in secs.items():
    print(f"| {key} | {len(v)} | {1000 * statistics.median(v):.2f} |")
