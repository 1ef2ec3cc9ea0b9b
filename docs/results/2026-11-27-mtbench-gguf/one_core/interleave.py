import sys, time, statistics, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.runtime.model import Llama
tree = sys.argv[1]
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)][:8]
b = Batcher(dec, 1, LoadPolicy.parse(tree))
of = Llama.forward_packed
last = []; inloop = []; replay = []
def f(self, calls, capture=()):
    t = time.perf_counter(); r = of(self, calls, capture); dt = time.perf_counter() - t
    if calls[0].input_ids.shape[0] <= 4:
        inloop.append(dt); last[:] = [(calls, capture)]
    return r
Llama.forward_packed = f
for ids in prompts:
    b.start(ids, 64, stop_token_ids=(tok.eos_token_id,))
    while b.active:
        b.round()
        if last:
            calls, cap = last[0]
            with torch.inference_mode():
                t = time.perf_counter(); of(dec.base, calls, cap); replay.append(time.perf_counter() - t)
            last.clear()
print(tree, "in loop median %.2f ms, replayed right after the round %.2f ms (n=%d)" % (1000 * statistics.median(inloop), 1000 * statistics.median(replay), len(replay)))
