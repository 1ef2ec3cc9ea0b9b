import sys, torch
torch.set_num_threads(2)
sys.path.insert(0, "tests")
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, mtbench_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.runtime import EagleDecoder
import eagle_trt.runtime.drafting as dr, eagle_trt.runtime.decoder as de
from test_backoff import PlainFirst
base = materialize_demo_gguf_base()
tok = AutoTokenizer.from_pretrained(base)
eagle = EagleDecoder.load(base, shipped_draft_dir("eagle1"), tree="chain:1", dtype="native-q8")
prompts = [encode_prompt(tok, p.text, True) for p in mtbench_prompts()[:80:5]]
for w in (8, 16, 32, 64, 100000):
    orig = dr.resume_rows
    de.resume_rows = lambda call, window=w: orig(call, window)
    acc = n = 0
    for ids in prompts:
        r = eagle.with_backoff(PlainFirst(30)).generate_all(ids, 94)
        a = r.stats.accepted_lengths[30:]; acc += sum(a); n += len(a)
    print("window", w, "tau after resume", round(acc / n, 3), flush=True)
acc = n = 0
for ids in prompts:
    r = eagle.generate_all(ids, 94); a = r.stats.accepted_lengths[20:]; acc += sum(a); n += len(a)
print("always speculating, steps 20+", round(acc / n, 3))
