"""Batch-L speculative rounds with the batch's VerifyRows pricing (speculation forced): per request-step, the kept
nodes' draft probabilities (sum) against the draft tokens the base accepted; and per round, predicted vs accepted."""
import sys, math, torch
torch.set_num_threads(1)
from collections import defaultdict
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.runtime.verify import accept_greedy
level = int(sys.argv[1]); reps = int(sys.argv[2])
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
b = Batcher(dec.with_backoff(), 8, LoadPolicy.parse("chain:1"))
rows = defaultdict(lambda: [0, 0.0, 0])  # bucket of a node's p -> [nodes, sum p, accepted]
per_round = []; cur = []
def on_verify(tree, logits):
    if tree.scores is None or tree.num_draft_tokens == 0:
        cur.append((0.0, 0)); return
    p = [math.exp(x) for x in tree.scores.tolist()]
    acc = len(accept_greedy(logits, tree).path) - 1
    cur.append((sum(p), acc))
    if len(p) == 1:
        e = rows[min(9, int(p[0] * 10))]; e[0] += 1; e[1] += p[0]; e[2] += acc
for v in b.views.values(): v.on_verify = on_verify
for rep in range(reps):
    queue = list(enumerate(prompts[(rep % 5) * level * 2:(rep % 5 + 1) * level * 2]))
    while queue or b.active:
        while queue and len(b.active) < level:
            i, ids = queue.pop(0); b.start(ids, 64, key=i)
        for st in b.batch_backoff.values():
            st.chosen_spec, st.probe_left = True, 0
        n = len(b.active); cur.clear()
        b.round()
        if n == level and len(cur) == level:
            per_round.append((sum(x for x, _ in cur), sum(a for _, a in cur)))
for k in sorted(rows):
    n, s, a = rows[k]; print(f"p in [{k/10:.1f},{(k+1)/10:.1f}): {n} nodes, mean p {s/n:.2f}, accepted {a/n:.2f}")
buckets = defaultdict(lambda: [0, 0.0, 0])
for pred, acc in per_round:
    e = buckets[round(pred * 2) / 2]; e[0] += 1; e[1] += pred; e[2] += acc
print("per round (predicted sum -> rounds, mean predicted, mean accepted):")
for k in sorted(buckets):
    n, s, a = buckets[k]; print(f"  {k:4.1f}: {n:4d} {s/n:.2f} {a/n:.2f}")
r = b.rows[level]; print("verify", {k: round(1e3*v, 2) for k, v in sorted(r.verify.items())}, "rest", r.rest and round(1e3*r.rest, 2), dict(r.timed))
