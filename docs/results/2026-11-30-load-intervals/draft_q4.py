"""batch 1: time in draft vs base forwards; Q8_0 draft vs Q4_1 draft (env Q4=1)."""
import os, sys, time, torch, numpy as np
torch.set_num_threads(1)
from collections import defaultdict
from transformers import AutoTokenizer
import eagle_trt.runtime.native as N
QK = 32
def q4_1_blocks(weight):
    w = weight.detach().float().numpy(); rows, cols = w.shape
    b = w.reshape(rows, cols // QK, QK)
    mn = b.min(-1, keepdims=True); mx = b.max(-1, keepdims=True)
    d = (mx - mn) / 15.0
    q = np.round((b - mn) / np.where(d == 0, 1.0, d)).clip(0, 15).astype(np.uint8)
    out = np.empty((rows, cols // QK, 4 + QK // 2), np.uint8)
    out[..., 0:2] = d.astype(np.float16).view(np.uint8); out[..., 2:4] = mn.astype(np.float16).view(np.uint8)
    out[..., 4:] = q[..., :16] | (q[..., 16:] << 4)
    return out.reshape(rows, -1)
MODE = os.environ.get("Q4", "")
orig = N.NativeDraft._weights
def patched(self, module):
    if not self.q8_activations or module.weight.shape[1] % QK: return self._linear(module, None)
    name = [n for n, m in DRAFT.named_modules() if m is module][0]
    use4 = (MODE == "all") or (MODE == "layer" and name.startswith("layer")) or (MODE == "nohead" and name != "lm_head")
    return self._linear(module, ("Q4_1", q4_1_blocks(module.weight)) if use4 else ("Q8_0", N.q8_0_blocks(module.weight)))
N.NativeDraft._weights = patched
import eagle_trt.runtime.draft as Dm
orig_attach = N.attach_native_draft
def attach(draft, *a, **k):
    global DRAFT; DRAFT = draft; return orig_attach(draft, *a, **k)
N.attach_native_draft = attach
for mod in list(sys.modules.values()):
    if mod and getattr(mod, "attach_native_draft", None) is orig_attach: mod.attach_native_draft = attach
from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
base = materialize_demo_gguf_base()
dec = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:1+suffix:4,8", dtype="native-q8", max_seq_len=2048)
print("draft weight bytes", dec.draft.native.weight_bytes() if dec.draft.native else None)
tok = AutoTokenizer.from_pretrained(str(base))
prompts = [encode_prompt(tok, p.text, True) for p in take_prompts(load_dataset("mt-bench"), 80)][: int(sys.argv[1])]
acc = defaultdict(float)
def wrap(obj, attr, kind):
    fn = getattr(obj, attr)
    def w(calls, *a, **k):
        t = time.perf_counter(); r = fn(calls, *a, **k); acc[kind] += time.perf_counter() - t; acc[kind + "_n"] += 1; return r
    setattr(obj, attr, w)
wrap(dec.base, "forward_packed", "base"); wrap(dec.draft, "forward_packed", "draft")
b = Batcher(dec, 1, LoadPolicy.parse("chain:1+suffix:4,8"))
for rep in range(2):
    acc.clear(); n = 0; rounds = 0; t0 = time.perf_counter(); outs = []
    for ids in prompts:
        b.start(ids, 64, stop_token_ids=(tok.eos_token_id,)); got = []
        while b.active:
            for slot, step in b.round(): got = got[:len(got) - step.retract] + step.token_ids; n += len(step.token_ids)
            rounds += 1
        outs.append(got)
    dt = time.perf_counter() - t0
    print(MODE or "q8", f"rep {rep}: {n/dt:.1f} tok/s, tokens/round {n/rounds:.3f}, base {acc['base']:.2f} s ({acc['base_n']:.0f}), draft {acc['draft']:.2f} s ({acc['draft_n']:.0f}) = {1e3*acc['draft']/max(acc['draft_n'],1):.3f} ms/call, total {dt:.2f}", flush=True)
import hashlib; print("outputs", hashlib.sha1(repr(outs).encode()).hexdigest()[:12])
