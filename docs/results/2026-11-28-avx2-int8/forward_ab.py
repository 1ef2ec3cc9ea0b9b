"""The SmolLM2 int8 forward at 1, 2, 4 and 8 rows after a 300-token prompt, with the int8 products on the AVX2 kernel
before 41e2fad (one weight row a pass; sources of 368cca7) and on the tiled one (the working tree), alternating in
one process, median of 9 rounds. Both libraries are compiled here as kernels/cpu_build compiles them. Run from the
repository root (forward_ab.txt):

    for t in 1 2; do .venv/bin/python docs/results/2026-11-28-avx2-int8/forward_ab.py $t; done
"""
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

threads = int(sys.argv[1])
torch.set_num_threads(threads)
import eagle_trt.kernels.cpu_build as cb
from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.model import BaseCall

tmp = Path(tempfile.mkdtemp())
(tmp / "old").mkdir()
for src in (cb.SOURCE, *cb.HEADERS):
    (tmp / "old" / src.name).write_bytes(subprocess.run(["git", "show", f"368cca7:src/eagle_trt/kernels/{src.name}"],
                                                        check=True, capture_output=True).stdout)
flags = cb.CFLAGS if threads > 1 else [f for f in cb.CFLAGS if f != "-fopenmp"]
libs = {}
for name, source in (("before", tmp / "old" / cb.SOURCE.name), ("tiled", cb.SOURCE)):
    out = tmp / f"{name}.so"
    subprocess.run(["gcc", *flags, str(source), "-o", str(out), *(cb._torch_gomp() if threads > 1 else []), "-lm"],
                   check=True)
    libs[name] = ctypes.CDLL(str(out))
    libs[name].ef_int8_mm.restype = None
current = ["tiled"]
decoder = EagleDecoder.load(materialize_demo_base(), shipped_draft_dir(), tree="chain:1", dtype="int8", max_seq_len=4096)
cb.load_cpu_forward = lambda parallel=True: libs[current[0]]  # Int8Linear looks the library up at each call
base, ctx, rows = decoder.base, 300, (1, 2, 4, 8)
seconds = {(k, t): [] for k in libs for t in rows}
with torch.inference_mode():
    base.forward_packed([BaseCall(torch.randint(0, 40000, (ctx,)), torch.arange(ctx), 0, None, base.cache,
                                  last_logits_only=True)])
    for _ in range(9):
        for kernel in libs:
            current[0] = kernel
            for t in rows:
                call = BaseCall(torch.randint(0, 40000, (t,)), torch.arange(ctx, ctx + t), ctx, None, base.cache)
                t0 = time.perf_counter()
                base.forward_packed([call])
                seconds[(kernel, t)].append(time.perf_counter() - t0)
for kernel in libs:
    print(f"| int8, kernel {kernel} | {threads} | {ctx} | "
          + " | ".join(f"{1000 * statistics.median(seconds[(kernel, t)]):.2f}" for t in rows) + " |")
