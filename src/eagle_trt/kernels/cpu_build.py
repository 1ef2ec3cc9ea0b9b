"""Build and load cpu_forward.c, the fused CPU forward of the `native` precision: gcc compiles it once per source
and machine into the cache (EAGLE_TRT_CACHE, default ~/.cache/eagle-trt/kernels; about 3 s on 2 cores), ctypes
loads it. It links the OpenMP runtime torch already loaded, so the two share one thread pool; a second build
without OpenMP serves callers on one thread.

    load_cpu_forward(parallel=True) -> ctypes.CDLL with ef_forward, ef_scratch_floats, ef_threads, ef_linear,
                                       ef_has_q8, ef_repacked_bytes, ef_repack, ef_head_topk, ef_draft,
                                       ef_int8_kernel, ef_int8_packed_bytes, ef_int8_pack, ef_int8_mm,
                                       ef_int8_linear
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
from functools import cache
from pathlib import Path

from eagle_trt.demo_model import cache_root
from eagle_trt.errors import EagleTrtError

SOURCE = Path(__file__).with_name("cpu_forward.c")
HEADERS = tuple(Path(__file__).with_name(h) for h in ("cpu_simd.h", "cpu_amx.h", "cpu_linear_q8.h", "cpu_attention.h",
                                                             "cpu_draft.h", "cpu_int8.h"))  # included by SOURCE
CFLAGS = ["-O3", "-march=native", "-fopenmp", "-ffp-contract=off", "-fPIC", "-shared"]
NATIVE_HINT = "use --dtype int8 (the PyTorch engine's batch-invariant path), which runs on every CPU"


def cpu_supports_native(q8: bool = False) -> str | None:
    """None when this CPU and toolchain can run the native forward (`q8`: with 8-bit activations), else the reason
    it cannot."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the native CPU forward is written for x86-64 (AVX-512 or AVX2), this machine is {platform.machine()}"
    flags = set(cpu_flags())
    missing = [f for f in ("avx2", "fma", "f16c") if f not in flags]
    if missing and "avx512f" not in flags:
        return f"the native CPU forward needs AVX-512 or AVX2 with FMA and F16C (this CPU lacks {', '.join(missing)})"
    if q8 and "avx512f" in flags and "avx512_vnni" not in flags:
        return "native-q8 sums 8-bit activations with AVX-512 VNNI on an AVX-512 CPU, which this one lacks " \
               "(--dtype native runs here)"
    if shutil.which(os.environ.get("CC", "gcc")) is None:
        return "the native CPU forward is compiled at first use and no C compiler (gcc, or $CC) is on PATH"
    return None


@cache
def cpu_flags() -> tuple[str, ...]:
    """The instruction-set flags /proc/cpuinfo lists for this CPU (empty where it is not there)."""
    info = Path("/proc/cpuinfo")
    line = next((ln for ln in info.read_text().splitlines() if ln.startswith("flags")), "") if info.exists() else ""
    return tuple(line.partition(":")[2].split())


def _torch_gomp() -> list[str]:
    """Link torch's own libgomp (same soname, already loaded), so one OpenMP pool serves torch and this kernel."""
    import torch

    lib = Path(torch.__file__).parent / "lib"
    found = sorted(lib.glob("libgomp*.so*"))
    return [str(found[0]), f"-Wl,-rpath,{lib}"] if found else []


@cache
def load_cpu_forward(parallel: bool = True) -> ctypes.CDLL:
    """The kernel library; `parallel` False: built without OpenMP (its pragmas ignored, the same arithmetic), for
    callers on one thread, where entering and leaving each parallel region cost a round 2-20 % (A/B in one process,
    docs/native_cpu.md)."""
    reason = cpu_supports_native()
    if reason:
        raise EagleTrtError(reason, NATIVE_HINT)
    cc = os.environ.get("CC", "gcc")
    flags = CFLAGS if parallel else [f for f in CFLAGS if f != "-fopenmp"]
    source = b"".join(p.read_bytes() for p in (SOURCE, *HEADERS))
    key = hashlib.sha256(source + " ".join(flags).encode() + " ".join(cpu_flags()).encode()).hexdigest()[:16]
    out = cache_root() / "kernels" / f"cpu_forward-{key}.so"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        cmd = [cc, *flags, str(SOURCE), "-o", str(tmp), *(_torch_gomp() if parallel else []), "-lm"]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise EagleTrtError(f"compiling the native CPU forward failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}",
                                NATIVE_HINT)
        os.replace(tmp, out)
    lib = ctypes.CDLL(str(out))
    lib.ef_forward.restype = ctypes.c_int
    lib.ef_scratch_floats.restype = ctypes.c_long
    lib.ef_threads.restype = ctypes.c_int
    lib.ef_head_topk.restype = None
    lib.ef_draft.restype = ctypes.c_int
    lib.ef_has_q8.restype = ctypes.c_int
    lib.ef_repacked_bytes.restype = ctypes.c_long
    lib.ef_repack.restype = ctypes.c_int
    lib.ef_int8_mm.restype = None
    lib.ef_int8_pack.restype = None
    lib.ef_int8_linear.restype = None
    lib.ef_int8_packed_bytes.restype = ctypes.c_long
    lib.ef_int8_kernel.restype = ctypes.c_int
    return lib
