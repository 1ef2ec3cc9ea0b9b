"""4 streams eagle: the batch-4 backoff's sequence of rounds (S spec, p plain, lower-case unmeasured), switches."""
import sys, time, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.tree_config import resolve
level = int(sys.argv[1]); reps = int(sys.argv[2])
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
policy = resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True)
b = Batcher(dec.with_backoff(), 8, policy)
for rep in range(reps):
    queue = list(enumerate(prompts[:level * 4])); seq = []
    while queue or b.active:
        while queue and len(b.active) < level:
            i, ids = queue.pop(0); b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
        size = len(b.active)
        b.round()
        if size == level and b.policy.tree_for(size) is not None:
            c = "S" if b.speculated else "p"
            seq.append(c if b.measured is not None else c.lower() if c == "S" else ".")
    st = b.batch_backoff.get(level)
    print(rep, "".join(seq))
    if st: print("   switches", st.switches, "interval", st.interval, "rates spec/plain", st.rate(True), st.rate(False), "times", st.times.seconds, "acc", st.accepted, st.plain_tokens)
