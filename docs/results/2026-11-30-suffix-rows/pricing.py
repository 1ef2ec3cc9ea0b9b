"""Per round at batch `level`: mode, rows chosen, predicted tokens/seconds vs actual (priced suffix rows)."""
import os, sys, time, math, torch, collections
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.tree_config import resolve
level, reps, ntok = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
b = Batcher(dec.with_backoff(), 8, resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True))
pred = {}
orig_keep, orig_measure = b._keep_nodes, b._measure
def keep(batch, offers, speculated):
    out = orig_keep(batch, offers, speculated)
    if batch == level and batch in b.rows:
        scored = sorted((x for o in offers for x in o.scores.tolist()), reverse=True)
        r = sum(out); rows = b.rows[batch]
        exp = batch + sum(math.exp(x) for x in scored[:r])
        sec = (rows.rest[speculated] or 0) + (rows.cost(r) or float('nan'))
        pred["last"] = (speculated, r, exp, sec, len(scored))
    return out
b._keep_nodes = keep
log = collections.defaultdict(list)
def measure(tokens, now):
    if b.measured is not None and "cur" in pred:
        batch, spec, started, rows, verify_s = b.measured
        if batch == level:
            log[(spec, pred["cur"][1] > 0)].append((pred["cur"], tokens, now - started))
    pred.pop("cur", None)
    orig_measure(tokens, now)
b._measure = measure
orig_round = b.round
def round_(*a, **k):
    pred.pop("last", None)
    out = orig_round(*a, **k)
    if "last" in pred: pred["cur"] = pred["last"]
    return out
b.round = round_
for rep in range(reps):
    queue = list(enumerate(prompts[:level * 4]))
    while queue or b.active:
        while queue and len(b.active) < level:
            i, ids = queue.pop(0); b.start(ids, ntok, stop_token_ids=(tok.eos_token_id,), key=i)
        b.round()
for key, items in sorted(log.items()):
    n = len(items)
    pe = sum(p[2] for p, _, _ in items) / n; ae = sum(t for _, t, _ in items) / n
    ps = sum(p[3] for p, _, _ in items) / n; as_ = sum(s for _, _, s in items) / n
    rows = sum(p[1] for p, _, _ in items) / n; offered = sum(p[4] for p, _, _ in items) / n
    print(f"spec={key[0]} rows>0={key[1]}: rounds {n} rows {rows:.2f} offered {offered:.2f} tokens pred {pe:.2f} actual {ae:.2f} | ms pred {ps*1e3:.2f} actual {as_*1e3:.2f}")
r = b.rows[level]
print("verify ms", {k: round(v*1e3, 2) for k, v in sorted(r.verify.items())}, "timed", dict(sorted(r.timed.items())), "rest", r.rest)
