import time, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
base = materialize_demo_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:2+suffix:2,6", dtype="int8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 8)]
for label, policy in (("eagle", "chain:2+suffix:2,6"), ("plain", "none"), ("eagle", "chain:2+suffix:2,6"), ("plain", "none")):
    b = Batcher(dec, 1, LoadPolicy.parse(policy))
    ttft = []
    for ids in prompts:
        t0 = time.perf_counter(); first = []
        slot = b.start(ids, 4)
        def emit(ev):
            if not first: first.append(time.perf_counter() - t0)
        while b.active: b.round(emit=emit)
        ttft.append(first[0] * 1000)
    print(label, "mean TTFT ms", round(sum(ttft)/len(ttft), 1), [round(x) for x in ttft], flush=True)
