"""plain + EAGLE (chain:1+suffix:4,8) tok/s at batch 1 on 20 MT-bench prompts, 64 tokens, one thread: a base dir and dtype per arg."""
import sys, time, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import shipped_draft_dir
from eagle_trt.runtime import EagleDecoder
tok = AutoTokenizer.from_pretrained("/root/.cache/eagle-trt/smollm2-135m-instruct-gguf")
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)][:int(sys.argv[1])]
for arg in sys.argv[2:]:
    path, dtype = arg.split(":")
    dec = EagleDecoder.load(path, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype=dtype, max_seq_len=2048)
    plain = dec.with_tree("chain:1", speculative=False)
    res = {}
    for name, d in (("plain", plain), ("eagle", dec), ("plain2", plain), ("eagle2", dec)):
        n = 0; t0 = time.perf_counter(); outs = []
        for ids in prompts:
            r = d.generate_all(ids, 64, stop_token_ids=(tok.eos_token_id,)); n += len(r.token_ids); outs.append(r.token_ids)
        res[name] = (n / (time.perf_counter() - t0), outs)
    same = res["plain"][1] == res["eagle"][1]
    p = max(res["plain"][0], res["plain2"][0]); e = max(res["eagle"][0], res["eagle2"][0])
    print(f"{path} {dtype}: blocks {dec.base.native.block_types} weights {dec.base.native.weight_bytes()/1e6:.0f} MB; plain {p:.1f} tok/s, eagle {e:.1f} tok/s, {e/p:.2f}x, identical {same}", flush=True)
