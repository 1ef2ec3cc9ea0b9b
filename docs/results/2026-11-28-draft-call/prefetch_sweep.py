"""Prefetch distance and hint of the native-q8 kernel's weight stream (cpu_linear_q8.h Q8_AHEAD, Q8_HINT) and of
attention's cached rows (cpu_attention.h), builds alternating in one process on the same calls: the base forward
of the demo GGUF at 1, 2 and 4 rows after a prompt of CTX tokens. The builds are compiled here from the working
tree's kernel sources with -D overrides (the source's own prefetch lines are rewritten to take ATT_HINT). Run from
the repository root:

    .venv/bin/python docs/results/2026-11-28-draft-call/prefetch_sweep.py THREADS CTX
"""
import ctypes
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

threads, ctx = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir  # noqa: E402
from eagle_trt.kernels import cpu_build  # noqa: E402
from eagle_trt.runtime import EagleDecoder, native  # noqa: E402
from eagle_trt.runtime.model import BaseCall  # noqa: E402

VARIANTS = {"16 units, T0 (before)": "-DQ8_AHEAD=16 -DQ8_HINT=_MM_HINT_T0 -DATT_HINT=_MM_HINT_T0",
            "32 units, T1 (now)": "-DQ8_AHEAD=32 -DQ8_HINT=_MM_HINT_T1 -DATT_HINT=_MM_HINT_T1",
            "64 units, T1": "-DQ8_AHEAD=64 -DQ8_HINT=_MM_HINT_T1 -DATT_HINT=_MM_HINT_T1"}
work = Path(tempfile.mkdtemp())
for src in (cpu_build.SOURCE, *cpu_build.HEADERS):
    text = src.read_text()
    text = re.sub(r"_mm_prefetch\(\(const char \*\)row \+ i, _MM_HINT_T\d\)", "_mm_prefetch((const char *)row + i, ATT_HINT)",
                  text)
    text = re.sub(r"#ifndef Q8_AHEAD.*?#endif\n#ifndef Q8_HINT.*?#endif", "", text, flags=re.S)
    (work / src.name).write_text(text)
flags = [f for f in cpu_build.CFLAGS if threads > 1 or f != "-fopenmp"]
extra = cpu_build._torch_gomp() if threads > 1 else []
libs = {}
for name, defs in VARIANTS.items():
    out = work / f"v{len(libs)}.so"
    subprocess.run(["gcc", *flags, *defs.split(), str(work / "cpu_forward.c"), "-o", str(out), *extra, "-lm"], check=True)
    lib = ctypes.CDLL(str(out))
    for fn, rt in (("ef_forward", ctypes.c_int), ("ef_scratch_floats", ctypes.c_long), ("ef_threads", ctypes.c_int)):
        getattr(lib, fn).restype = rt
    libs[name] = lib

dec = EagleDecoder.load(materialize_demo_gguf_base(), shipped_draft_dir(), tree="chain:1", dtype="native-q8",
                        max_seq_len=4096)
base, current = dec.base, [None]
native.load_cpu_forward = lambda parallel=True: current[0]
current[0] = next(iter(libs.values()))
res = {(n, t): [] for n in libs for t in (1, 2, 4)}
with torch.inference_mode():
    base.forward_packed([BaseCall(torch.randint(0, 40000, (ctx,)), torch.arange(ctx), 0, None, base.cache,
                                  last_logits_only=True)])
    for rep in range(20):
        for name, lib in libs.items():
            current[0] = lib
            for t in (1, 2, 4):
                call = BaseCall(torch.randint(0, 40000, (t,)), torch.arange(ctx, ctx + t), ctx, None, base.cache)
                t0 = time.perf_counter()
                base.forward_packed([call])
                res[(name, t)].append(time.perf_counter() - t0)
print(f"| {threads} thread(s), context {ctx} | 1 row ms | 2 rows ms | 4 rows ms |")
print("|---|---|---|---|")
for name in libs:
    print(f"| {name} | " + " | ".join(f"{1000 * statistics.median(res[(name, t)]):.2f}" for t in (1, 2, 4)) + " |")
