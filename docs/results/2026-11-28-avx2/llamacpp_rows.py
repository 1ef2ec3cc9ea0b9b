"""llama.cpp (llama-cpp-python) on the demo GGUF: one eval of 1, 2 and 4 tokens after a ~CTX-token prompt, median of
REPS evals each (the context grows by those tokens). Run from the repository root after `make llamacpp`:

    .venv/bin/python docs/results/2026-11-28-avx2/llamacpp_rows.py THREADS CTX [REPS]
"""
import statistics
import sys
import time

from llama_cpp import Llama

from eagle_trt.demo_model import materialize_demo_gguf_base

threads, ctx = int(sys.argv[1]), int(sys.argv[2])
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 15
gguf = next(materialize_demo_gguf_base().glob("*.gguf"))
model = Llama(str(gguf), n_ctx=4096, n_threads=threads, n_threads_batch=threads, n_batch=512, verbose=False)
prompt = (model.tokenize(b"Write a story about a dragon who learns to cook. " * 200))[:ctx]
row = []
for t in (1, 2, 4):
    model.reset()
    model.eval(prompt)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        model.eval(prompt[:t])
        times.append(time.perf_counter() - t0)
    row.append(statistics.median(times))
print(f"| llama.cpp | {threads} | {ctx} | " + " | ".join(f"{1000 * v:.2f}" for v in row) + " |", flush=True)
