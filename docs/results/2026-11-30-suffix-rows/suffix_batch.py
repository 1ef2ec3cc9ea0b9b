"""How often suffix candidates fire in plain decoding on MT-bench first turns, and how many of their tokens the base
accepts, by the matched length (greedy: the plain output is the truth)."""
import sys, collections, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.suffix import SuffixAutomaton
N, TOK = int(sys.argv[1]), int(sys.argv[2])
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, None, tree="chain:1", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), N)]
stats = collections.defaultdict(lambda: [0, 0, collections.Counter()])  # match bucket -> [proposals, tokens acc, acc-count hist]
steps = 0
for ids in prompts:
    out = dec.generate_all(ids, TOK, stop_token_ids=(tok.eos_token_id,)).token_ids
    sam = SuffixAutomaton(); sam.extend_all(ids)
    for t in range(len(out) - 1):
        sam.extend(out[t]); steps += 1
        length, end = sam.match()
        if length < 2: continue
        prop = sam.tokens[end + 1:end + 9]
        acc = 0
        for a, b in zip(prop, out[t + 1:]):
            if a != b: break
            acc += 1
        key = min(length, 16) if length < 16 else (16 if length < 32 else 32)
        s = stats[key]; s[0] += 1; s[1] += acc; s[2][acc] += 1
print(f"steps {steps}")
for key in sorted(stats):
    n, acc, hist = stats[key]
    p1 = sum(v for k, v in hist.items() if k >= 1) / n
    p2 = sum(v for k, v in hist.items() if k >= 2) / n
    p4 = sum(v for k, v in hist.items() if k >= 4) / n
    print(f"match {key:>2}: proposals {n:4d} ({n/steps:.1%} of steps) acc/prop {acc/n:.2f} P(>=1) {p1:.2f} P(>=2) {p2:.2f} P(>=4) {p4:.2f}")
