"""The int8 precision's products on each branch of kernels/cpu_int8.h this CPU can run (AMX tiles, AVX-512 VNNI,
AVX2), measured in one process: every product of one forward of the demo base (SmolLM2-135M: 30 layers of q|k|v,
o, gate|up and down, then the vocabulary head; random int8 weights of those shapes, each branch holding its own
copy in its own layout, so the weights stream from memory as in a served step) at --rows activation rows, the
branches in turn within each repeat. Prints a table, writes JSON; every branch's int32 sums must equal the first's.

    .venv/bin/python scripts/int8_kernels.py --rows 1,2,4,8,16 --json-out int8_kernels.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from eagle_trt.kernels.cpu_build import CFLAGS, SOURCE, cpu_flags

# each branch as a build of cpu_forward.c: the flags that leave only it (the AMX build needs the tile state granted)
BRANCHES = {"amx": [], "vnni": ["-mno-amx-tile", "-mno-amx-int8"], "avx2": ["-mno-avx512f", "-mno-amx-tile",
                                                                             "-mno-amx-int8"]}
KERNEL_NAMES = {2: "amx", 1: "vnni", 0: "avx2"}


def build(name: str, extra: list[str], where: Path) -> ctypes.CDLL | None:
    """This branch's one-thread build, or None where it does not run here (its kernel id says another branch)."""
    out = where / f"cpu_forward_{name}.so"
    flags = [f for f in CFLAGS if f != "-fopenmp"] + extra
    subprocess.run(["gcc", *flags, str(SOURCE), "-o", str(out), "-lm"], check=True)
    lib = ctypes.CDLL(str(out))
    lib.ef_int8_packed_bytes.restype = ctypes.c_long
    lib.ef_int8_kernel.restype = ctypes.c_int
    return lib if KERNEL_NAMES[lib.ef_int8_kernel()] == name else None


def demo_shapes() -> list[tuple[int, int]]:
    """(out, in) of every int8 product of one SmolLM2-135M forward, in order."""
    h, inter, kv, layers, vocab = 576, 1536, 192, 30, 49152
    return [(h + 2 * kv, h), (h, h), (2 * inter, h), (h, inter)] * layers + [(vocab, h)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    shapes = demo_shapes()
    weights = [torch.randint(-127, 128, s, dtype=torch.int8, generator=gen) for s in shapes]  # [N, K] each
    with tempfile.TemporaryDirectory() as tmp:
        libs = {name: lib for name, extra in BRANCHES.items() if (lib := build(name, extra, Path(tmp))) is not None}
        packed = {}
        for name, lib in libs.items():
            packed[name] = []
            for w in weights:
                n, k = w.shape
                p = torch.empty(lib.ef_int8_packed_bytes(n, k), dtype=torch.int8)  # [bytes]: the branch's layout
                lib.ef_int8_pack(ctypes.c_void_p(w.data_ptr()), n, k, ctypes.c_void_p(p.data_ptr()))
                packed[name].append(p)
        rows_out, identical = [], True
        for t in (int(r) for r in args.rows.split(",")):
            xs = {k: torch.randint(-127, 128, (t, k), dtype=torch.int8, generator=gen) for _, k in shapes}  # [T, K]
            outs = {name: [torch.empty(t, n, dtype=torch.int32) for n, _ in shapes] for name in libs}  # [T, N] each
            best = dict.fromkeys(libs, float("inf"))
            for _ in range(args.repeats):
                for name, lib in libs.items():
                    t0 = time.perf_counter()
                    for (n, k), p, o in zip(shapes, packed[name], outs[name], strict=True):
                        lib.ef_int8_mm(ctypes.c_void_p(xs[k].data_ptr()), t, ctypes.c_void_p(p.data_ptr()), n, k,
                                       ctypes.c_void_p(o.data_ptr()))
                    best[name] = min(best[name], time.perf_counter() - t0)
            first = next(iter(libs))
            identical &= all(torch.equal(a, b) for name in libs for a, b in zip(outs[first], outs[name], strict=True))
            rows_out.append({"rows": t, **{f"{name}_ms": round(best[name] * 1e3, 3) for name in libs}})
    gib = sum(w.numel() for w in weights) / 2**30
    print(f"int8 products of one SmolLM2-135M forward ({gib * 1024:.0f} MiB of weights), one thread, best of "
          f"{args.repeats}; CPU flags: {' '.join(f for f in ('avx512_vnni', 'amx_int8') if f in cpu_flags())}")
    print("| rows | " + " | ".join(libs) + " |\n|---|" + "---|" * len(libs))
    for row in rows_out:
        print(f"| {row['rows']} | " + " | ".join(f"{row[f'{name}_ms']:.2f} ms" for name in libs) + " |")
    print(f"identical int32 sums on every branch: {'yes' if identical else 'NO'}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows_out, "identical": identical,
                                                   "branches": list(libs)}, indent=1))
    if not identical:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
