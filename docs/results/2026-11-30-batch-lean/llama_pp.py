import sys, time
from llama_cpp import Llama
m = Llama(model_path=sys.argv[1], n_ctx=1024, n_threads=1, n_threads_batch=1, n_batch=512, verbose=False)
for n in (8, 32, 128, 256):
    toks = [(i * 37) % 40000 + 100 for i in range(n)]
    best = 1e9
    for _ in range(3):
        m.reset(); t = time.perf_counter(); m.eval(toks); best = min(best, time.perf_counter() - t)
    print(f"{n} tokens: {1e3*best:.1f} ms, {1e3*best/n:.3f} ms/token")
