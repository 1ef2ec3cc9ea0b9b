"""llama.cpp (llama-cpp-python 0.3.16) on the demo GGUF: does its own prefix reuse (generate(reset=True) after the
first turn) give the same greedy second turn as a full evaluation? 4 MT-bench questions, 48 tokens, 2 threads.
.venv/bin/python docs/results/2026-11-29-served-memory/llamacpp_reuse_output.py  (llamacpp_reuse_output.txt)"""
from transformers import AutoTokenizer
from eagle_trt.chat import encode_conversation
from eagle_trt.datasets import load_dataset, take_prompts
from eagle_trt.demo_model import materialize_demo_gguf_base, find_smollm2_gguf
import llama_cpp
def gen(m, prompt, n, reset):
    out = []
    for t in m.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0, reset=reset):
        out.append(int(t))
        if len(out) >= n: break
    return out
def main():
    tok = AutoTokenizer.from_pretrained(materialize_demo_gguf_base())
    m = llama_cpp.Llama(str(find_smollm2_gguf()), n_ctx=2048, n_threads=2, n_threads_batch=2, verbose=False)
    for q in take_prompts(load_dataset("mt-bench"), 4):
        p1 = encode_conversation(tok, [q.turns[0]], [])
        m.reset(); a = gen(m, p1, 48, False)
        p2 = encode_conversation(tok, list(q.turns[:2]), [tok.decode(a, skip_special_tokens=True)])
        b_own = gen(m, p2, 48, True)  # llama-cpp-python's own prefix match
        m.reset(); b_full = gen(m, p2, 48, False)
        print("own-reuse == full:", b_own == b_full)
main()
