import time, torch, sys
torch.set_num_threads(1)
from transformers import AutoTokenizer
from eagle_trt.datasets import load_dataset, take_prompts, encode_conversation
from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
dtype = sys.argv[1] if len(sys.argv) > 1 else "int8"
base = materialize_demo_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:2+suffix:2,6", dtype=dtype, max_seq_len=2048)
tok = AutoTokenizer.from_pretrained(str(base))
items = take_prompts(load_dataset("mt-bench"), 8)
def run(b, ids, n=64):
    t0 = time.perf_counter(); first = []; out = []
    slot = b.start(ids, n)
    def emit(ev):
        if not first: first.append(time.perf_counter() - t0)
        for s, step in ev: out[len(out) - step.retract:] = []; out.extend(step.token_ids)
    while b.active: b.round(emit=emit)
    return out, first[0] * 1000, slot.generation.stats.cached_prompt_tokens
for policy in ("chain:2+suffix:2,6", "none"):
    for reuse in (True, False):
        b = Batcher(dec, 2, LoadPolicy.parse(policy), reuse_prefix=reuse)
        outs, t1s, t2s, cached = [], [], [], []
        for it in items:
            ids = encode_conversation(tok, [it.text], [])
            a, t1, _ = run(b, ids)
            turns = getattr(it, "turns", None)
            q2 = turns[1] if turns and len(turns) > 1 else "Please go on."
            ids2 = encode_conversation(tok, [it.text, q2], [tok.decode(a, skip_special_tokens=True)])
            a2, t2, c = run(b, ids2)
            # a re-sent identical prompt is not reused
            _, _, c_again = run(b, ids2, 4)
            assert c_again == 0, c_again
            outs.append((a, a2)); t1s.append(t1); t2s.append(t2); cached.append((c, len(ids2)))
        print(policy, "reuse", reuse, "TTFT1", round(sum(t1s)/8), "TTFT2", round(sum(t2s)/8), "cached", cached, flush=True)
        if reuse: ref = outs
        else: print("identical", outs == ref)
