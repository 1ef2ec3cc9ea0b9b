"""Per batch size after S streams x reps: measured spec and plain rates, the price, skipped probes, plain share."""
import sys, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.tree_config import resolve
level, reps = int(sys.argv[1]), int(sys.argv[2])
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
b = Batcher(dec.with_backoff(), 8, resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True))
for rep in range(reps):
    queue = list(enumerate(prompts[:level * 4]))
    while queue or b.active:
        while queue and len(b.active) < level:
            i, ids = queue.pop(0); b.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
        b.round()
    for size, st in sorted(b.batch_backoff.items()):
        price = st.price() if st.price else None
        print(f"rep {rep} batch {size}: rounds {st.times.steps} plain {st.plain_steps} switches {st.switches} skipped {getattr(st, 'skipped_probes', '-')}"
              f" spec {st.rate(True) or 0:.1f} plain {st.rate(False) or 0:.1f} price {price or 0:.1f} tok/s/request")
