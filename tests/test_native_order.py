"""The native kernel's sums run in the order cpu_forward.c documents, to the last bit, on whichever vector unit this
CPU has (kernels/cpu_simd.h: AVX-512, or AVX2 as two halves of each 16-lane vector).

The expected values are computed here in exact rational arithmetic, one rounding to float32 per documented
operation (an FMA rounds once): the float32-activation linear (two 16-lane accumulators over blocks in order, their
sum, then the reduction tree lane i + i+8, the 128-bit halves, pairs (0,2) (1,3), the two) and the 8-bit-activation
linear (llama.cpp's activation blocks, exact integer block sums, two FMAs per block per output). Every machine that
passes this computes the same bits, so a plain run on one CPU and a speculative run on another agree too.
"""

import ctypes
from fractions import Fraction

import numpy as np
import pytest
import torch

from eagle_trt.kernels.cpu_build import cpu_supports_native

gguf = pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(cpu_supports_native() is not None,
                                reason=f"the native forward cannot run here: {cpu_supports_native()}")

F32 = np.float32


def _round32(q: Fraction) -> F32:
    """q rounded once to the nearest float32 (ties to even)."""
    f = F32(float(q))
    cands = (f, np.nextafter(f, F32(np.inf)), np.nextafter(f, F32(-np.inf)))
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - q), int(np.array(v).view(np.uint32)) & 1))


def _fma(a, b, c) -> F32:
    return _round32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def _tree(v: np.ndarray) -> F32:
    """16 float32 lanes summed as documented (GCC's _mm512_reduce_add_ps)."""
    t3 = v[8:] + v[:8]
    t6 = t3[4:] + t3[:4]
    return (t6[0] + t6[2]) + (t6[1] + t6[3])


def _q4_1(blocks: np.ndarray, out: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row and block: the 32 stored values 0..15, d and m as float32 ([out, nb, 32], [out, nb], [out, nb])."""
    raw = blocks.reshape(out, k // 32, 20)
    d = raw[..., 0:2].copy().view(np.float16)[..., 0].astype(F32)
    m = raw[..., 2:4].copy().view(np.float16)[..., 0].astype(F32)
    qs = raw[..., 4:]
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int64), d, m


@pytest.fixture(scope="module")
def lib():
    from eagle_trt.kernels.cpu_build import load_cpu_forward

    return load_cpu_forward()


@pytest.mark.parametrize("type_name", ["F32", "Q4_1"])
def test_float_linear_sums_in_the_documented_order(lib, type_name):
    from gguf.quants import quantize

    from eagle_trt.runtime.native import BLOCK_TYPES, W_F32, CLinear

    gen = np.random.default_rng(1)
    out, k, t = 3, 64, 2
    w = (gen.standard_normal((out, k)) * 0.05).astype(F32)  # [out, K]
    x = torch.randn(t, k)  # [T, K]
    bias = torch.randn(out)  # [out]
    if type_name == "F32":
        stored, code, ref = np.ascontiguousarray(w), W_F32, w
    else:
        stored = np.ascontiguousarray(quantize(w, gguf.GGMLQuantizationType.Q4_1))  # [out, K/32 * 20 bytes]
        code = BLOCK_TYPES[type_name]
        q, d, m = _q4_1(stored, out, k)
        ref = ((q.astype(F32) * d[..., None]) + m[..., None]).reshape(out, k)  # two roundings, as the kernel
    lin = CLinear(code, out, k, stored.ctypes.data, bias.data_ptr())
    y = torch.empty(t, out)  # [T, out]
    lib.ef_linear(ctypes.byref(lin), t, ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()))
    xs = x.numpy()
    for r in range(t):
        for o in range(out):
            acc = [[F32(0)] * 16, [F32(0)] * 16]
            for b in range(k // 32):
                for half in range(2):
                    for lane in range(16):
                        i = 32 * b + 16 * half + lane
                        acc[half][lane] = _fma(ref[o, i], xs[r, i], acc[half][lane])
            expected = _tree(np.array(acc[0], F32) + np.array(acc[1], F32)) + F32(bias[o].item())
            assert y[r, o].item() == float(expected), (r, o)


@pytest.mark.parametrize("type_name", ["Q4_1", "Q8_0"])
def test_q8_linear_sums_in_the_documented_order(lib, type_name):
    from gguf.quants import quantize

    from eagle_trt.runtime.native import BLOCK_TYPES, CLinear

    if not lib.ef_has_q8():
        pytest.skip("this build has no 8-bit-activation linears")
    gen = np.random.default_rng(2)
    out, k, t = 16, 64, 2
    nb = k // 32
    w = (gen.standard_normal((out, k)) * 0.05).astype(F32)  # [out, K]
    stored = np.ascontiguousarray(quantize(w, gguf.GGMLQuantizationType[type_name]))  # [out, nb * block bytes]
    if type_name == "Q4_1":
        u, d, m = _q4_1(stored, out, k)
    else:  # Q8_0 as the repack holds it: u = q + 128, m = -128 d
        raw = stored.reshape(out, nb, 34)
        d = raw[..., 0:2].copy().view(np.float16)[..., 0].astype(F32)
        u = raw[..., 2:].view(np.int8).astype(np.int64) + 128
        m = (F32(-128) * d).astype(F32)
    bias = torch.randn(out)  # [out]
    src = CLinear(BLOCK_TYPES[type_name], out, k, stored.ctypes.data, bias.data_ptr())
    packed = np.empty(lib.ef_repacked_bytes(src.type, out, k), np.uint8)
    kind = lib.ef_repack(ctypes.byref(src), ctypes.c_void_p(packed.ctypes.data))
    lin = CLinear(kind, out, k, packed.ctypes.data, bias.data_ptr())
    x = torch.randn(t, k) * 3  # [T, K]
    y = torch.empty(t, out)  # [T, out]
    lib.ef_linear(ctypes.byref(lin), t, ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()))
    xs = x.numpy()
    for r in range(t):
        blocks = []
        for b in range(nb):  # llama.cpp's Q8 block of the activations
            xb = xs[r, 32 * b:32 * b + 32]
            amax = F32(np.abs(xb).max())
            dx, inv = F32(amax / F32(127)), (F32(F32(127) / amax) if amax > 0 else F32(0))
            qx = np.clip(np.rint(xb * inv), -128, 127).astype(np.int64)  # xb * inv rounds in float32 first
            blocks.append((qx, dx, F32(dx * F32(qx.sum()))))
        for o in range(out):
            acc = F32(0)
            for b, (qx, dx, sx) in enumerate(blocks):
                isum = int((u[o, b] * qx).sum())
                acc = _fma(F32(isum), F32(d[o, b] * dx), acc)
                acc = _fma(m[o, b], sx, acc)
            assert y[r, o].item() == float(acc + F32(bias[o].item())), (r, o)
