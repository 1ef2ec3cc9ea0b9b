"""Batch-2 backoff decisions at 2 streams: at each _decide, chosen mode before/after and the rates compared."""
import sys, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.backoff import BackoffState
from eagle_trt.runtime.batching import Batcher
from eagle_trt.tree_config import resolve
level, reps = int(sys.argv[1]), int(sys.argv[2])
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
b = Batcher(dec.with_backoff(), 8, resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True))
orig = BackoffState._decide
def decide(self):
    before = self.chosen_spec
    spec, plain = self.rate(True), self.rate(False)
    orig(self)
    if self is b.batch_backoff.get(level):
        print(f"  decide: spec {spec:.1f} plain {plain:.1f} plain age {self.times.age(False)} chosen {before}->{self.chosen_spec} probe_left {self.probe_left} interval {self.interval}")
BackoffState._decide = decide
for rep in range(reps):
    queue = list(enumerate(prompts[:level * 4]))
    while queue or b.active:
        while queue and len(b.active) < level:
            i, ids = queue.pop(0); b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
        b.round()
    st = b.batch_backoff[level]
    print(f"rep {rep}: rounds {st.times.steps} plain {st.plain_steps}")
