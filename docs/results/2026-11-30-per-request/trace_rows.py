"""S streams through the served default's Batcher (`eagle` of scripts/stream_load.py), one thread: per batch size,
rounds plain / speculative, draft rows verified per speculative round, VerifyRows' table and the backoff's times."""
import sys, time, torch
torch.set_num_threads(1)
from collections import Counter, defaultdict
from transformers import AutoTokenizer
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import resolve_load_policy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.tree_config import resolve
level = int(sys.argv[1]) if len(sys.argv) > 1 else 2
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)]
policy = resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True)
eb = Batcher(dec.with_backoff(), 8, policy)
hist = defaultdict(Counter)
for rep in range(reps):
    queue = list(enumerate(prompts[:level * 4]))
    t0, n = time.perf_counter(), 0
    while queue or eb.active:
        while queue and len(eb.active) < level:
            i, ids = queue.pop(0)
            eb.start(ids, 64, stop_token_ids=(tok.eos_token_id,), key=i)
        for slot, step in eb.round():
            n += len(step.token_ids)
        if eb.measured is not None:
            batch, spec, _, rows, _ = eb.measured
            hist[batch]["plain" if not spec else f"rows={rows}"] += 1
    print(f"rep {rep}: {n / (time.perf_counter() - t0):.1f} tok/s")
for size in sorted(eb.rows):
    r, st = eb.rows[size], eb.batch_backoff[size].times
    print(size, dict(sorted(hist[size].items())), "verify ms", {k: round(1e3 * v, 2) for k, v in sorted(r.verify.items())},
          "rest ms", None if r.rest is None else round(1e3 * r.rest, 2),
          "round ms spec/plain", [None if st.seconds[m] is None else round(1e3 * st.seconds[m], 2) for m in (True, False)],
          "tokens/spec round/request", None if st.accepted is None else round(st.accepted, 2))
