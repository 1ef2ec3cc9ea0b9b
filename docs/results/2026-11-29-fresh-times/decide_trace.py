import time, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.runtime import backoff as bo
from eagle_trt.tree_config import resolve
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
policy = resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True)
eb = Batcher(dec.with_backoff(), 8, policy)
orig_decide, orig_record = bo.BackoffState._decide, bo.BackoffState._decide
log = []
def decide(self):
    log.append(("decide", self.chosen_spec, self.rate(True), self.rate(False), self.times.age(False), self.probe_left))
    orig_decide(self)
    log.append(("->", self.chosen_spec, self.probe_left, self.interval))
bo.BackoffState._decide = decide
orig_rec = bo.BackoffState.record
def rec(self, spec, tokens, seconds):
    if self is eb.batch_backoff.get(2): log.append(("rec", spec, round(tokens, 2), round(seconds * 1e3, 2)))
    orig_rec(self, spec, tokens, seconds)
bo.BackoffState.record = rec
queue = list(enumerate(prompts[:2 * 6]))
while queue or eb.active:
    while queue and len(eb.active) < 2:
        i, ids = queue.pop(0); eb.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
    eb.round()
st = eb.batch_backoff[2]
recs = [l for l in log if l[0] == "rec"]
print("recorded", len(recs), "plain", sum(1 for r in recs if not r[1]))
for l in log:
    if l[0] != "rec": print(l)
print([r[1:] for r in recs][:60])
