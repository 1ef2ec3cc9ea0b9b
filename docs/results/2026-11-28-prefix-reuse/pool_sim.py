import torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import load_dataset, take_prompts, encode_conversation
from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
base = materialize_demo_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:3", dtype="int8", max_seq_len=8192)
tok = AutoTokenizer.from_pretrained(str(base))
items = take_prompts(load_dataset("mt-bench"), 8)
def run(b, ids, n=64):
    slot = b.start(ids, n); out = []
    while b.active:
        for s, step in b.round(): out[len(out) - step.retract:] = []; out.extend(step.token_ids)
    return out, slot.generation.stats.cached_prompt_tokens
b = Batcher(dec, 8, LoadPolicy.parse("none"))
t1 = [encode_conversation(tok, [it.text], []) for it in items]
answers = [run(b, ids)[0] for ids in t1]  # "first answers"
t2 = [encode_conversation(tok, list(it.turns[:2]), [tok.decode(a, skip_special_tokens=True)]) for it, a in zip(items, answers)]
for r in range(3):
    c1 = [run(b, ids)[1] for ids in t1]
    c2 = [(run(b, ids)[1], len(ids)) for ids in t2]
    print("round", r + 1, "turn1 cached", c1, "turn2 cached", c2, "pool", len(b.spare), flush=True)
