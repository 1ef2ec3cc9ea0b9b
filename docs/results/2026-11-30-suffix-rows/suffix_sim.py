"""Greedy walk: plain steps plus suffix rows taken while P(acc >= k | match bucket) > theta (calibration from a first
half of prompts, judged on the second half). Prints tokens/step, rows/step, predicted ratio at batch 4 and 8."""
import sys, collections, torch, pickle, os
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.suffix import SuffixAutomaton
N, TOK, DS = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
cache = f"/tmp/probe/outs_{DS}_{N}_{TOK}.pkl"
base = materialize_demo_gguf_base()
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset(DS), N)]
if os.path.exists(cache):
    outs = pickle.load(open(cache, "rb"))
else:
    dec = EagleDecoder.load(base, None, tree="chain:1", dtype="native-q8", max_seq_len=2048)
    outs = [dec.generate_all(ids, TOK, stop_token_ids=(tok.eos_token_id,)).token_ids for ids in prompts]
    pickle.dump(outs, open(cache, "wb"))
def bucket(n): return min(n, 12) if n < 12 else (16 if n < 32 else 32)
def walk(idx, table=None, theta=None, learn=None):
    steps = toks = rows = 0
    for i in idx:
        ids, out = prompts[i], outs[i]
        sam = SuffixAutomaton(); sam.extend_all(ids); t = 0
        while t < len(out):
            sam.extend(out[t]) if True else None
            length, end = sam.match()
            prop = sam.tokens[end + 1:end + 9] if length >= 2 else []
            acc = 0
            for a, b in zip(prop, out[t + 1:]):
                if a != b: break
                acc += 1
            if learn is not None and prop:
                s = learn[bucket(length)]; s[0] += 1
                for k in range(1, len(prop) + 1): s[k] += acc >= k
            take = 0
            if table is not None and prop:
                s = table.get(bucket(length))
                while s and take < len(prop) and s[0] >= 5 and s[take + 1] / s[0] > theta: take += 1
            got = min(acc, take)
            steps += 1; rows += take; toks += 1 + got
            for x in out[t + 1:t + 1 + got]: sam.extend(x)
            t += 1 + got
    return steps, toks, rows
half = list(range(0, N, 2)), list(range(1, N, 2))
learn = collections.defaultdict(lambda: [0] * 9)
walk(half[0], learn=learn)
for b, plain_ms, row_ms in ((4, 5.98, 0.95), (8, 9.77, 1.05)):
    per = plain_ms / b
    for theta in (0.5, 0.6, 0.7, 0.8, 0.9):
        steps, toks, rows = walk(half[1], dict(learn), theta)
        ratio = (toks / steps) / ((per + row_ms * rows / steps) / per)
        print(f"batch {b} theta {theta}: tokens/step {toks/steps:.3f} rows/step {rows/steps:.3f} predicted {ratio:.3f}x")
