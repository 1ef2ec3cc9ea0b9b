import sys, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.runtime import EagleDecoder
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)][:40]
for w in [int(x) for x in sys.argv[1].split(",")]:
    dec.draft_window = w
    acc = steps = 0
    for ids in prompts:
        r = dec.generate_all(ids, 64, stop_token_ids=(tok.eos_token_id,))
        acc += sum(r.stats.accepted_lengths); steps += r.stats.steps
    print("window", w, "tau", round(acc / steps, 3))
