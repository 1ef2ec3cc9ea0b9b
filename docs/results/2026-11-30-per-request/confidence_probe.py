"""Is the draft's own confidence a better guide than a request's history to which request of a batch of 2 should
get the round's one cheap extra verify row? Batches of 2 MT-bench requests, both drafting chain:1 every round;
per round and request: the draft's top-1 log-prob and whether the base accepted it. Then the extra tokens per round
of: the request with the higher moving-average acceptance (alpha 0.1), the higher confidence, both, an oracle;
and the acceptance by confidence decile."""
import json, math, sys, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
b = Batcher(dec, 8, LoadPolicy.parse("chain:1;chain:1"))
view = b.views[next(iter(b.views))]
score_of, rec = {}, []
orig = EagleDecoder._tree_steps
def tree_steps(self, root, root_draft, *a):
    tree = yield from orig(self, root, root_draft, *a)
    score_of[id(tree)] = float(root_draft.scores[0, 0])
    return tree
EagleDecoder._tree_steps = tree_steps
def on_verify(tree, logits):
    if tree.num_draft_tokens:
        rec.append((score_of.pop(id(tree)), int(logits[0].argmax()) == int(tree.tokens[1])))
for v in b.views.values(): v.on_verify = on_verify
rounds = []
for p in range(pairs):
    slots = [b.start(prompts[2 * p + i], 128, stop_token_ids=(tok.eos_token_id,), key=i) for i in range(2)]
    while b.active:
        rec.clear(); b.round()
        if len(rec) == 2 and len(b.active) == 2: rounds.append(list(rec))
    # a new pair: histories restart
    rounds.append(None)
hist, alpha, res = [None, None], 0.1, {"history": 0, "confidence": 0, "both": 0, "oracle": 0, "first": 0}
n = 0
for r in rounds:
    if r is None:
        hist = [None, None]; continue
    n += 1
    pick_h = 0 if (hist[0] or 1) >= (hist[1] or 1) else 1
    res["history"] += r[pick_h][1]
    res["confidence"] += r[0 if r[0][0] >= r[1][0] else 1][1]
    res["both"] += r[0][1] + r[1][1]
    res["oracle"] += max(r[0][1], r[1][1])
    res["first"] += r[0][1]
    for i in range(2):
        hist[i] = r[i][1] if hist[i] is None else alpha * r[i][1] + (1 - alpha) * hist[i]
print(f"{n} rounds of 2:", {k: round(v / n, 3) for k, v in res.items()}, "extra accepted tokens per round")
flat = sorted(x for r in rounds if r for x in r)
for d in range(10):
    part = flat[d * len(flat) // 10:(d + 1) * len(flat) // 10]
    print(f"decile {d}: p(top-1) {math.exp(part[0][0]):.2f}-{math.exp(part[-1][0]):.2f} accepted {sum(a for _, a in part) / len(part):.2f}")
