"""4-bit group-quantized linears as GGUF Q4_0 / Q4_1 blocks, so that the native CPU forward (runtime.native) reads an
AutoAWQ, GPTQ, compressed-tensors or Model-Optimizer INT4 base at the bytes its file holds (20 bytes per 32 weights,
GGUF's block_q4_1), not as a dequantized float32 copy (128 bytes per 32).

Each 4-bit layout here dequantizes to w = (u - z) * s over an input group (quantization.dequantize): u the stored
code 0..15, z the group's zero point (asymmetric) or 8 (symmetric: codes stored offset by 8, or signed int4 read
as u - 8), s its scale. A block of 32 inputs in one group is ggml's Q4_1, w = u * d + m with d = s and m = -z * s,
both fp16; a linear whose zero points are all 8 is written as Q4_0 (w = (u - 8) * d), which the kernel reads as
m = -8d. `exact` (precision native, which computes what the dequantized weights compute): only where d and m are
s and -z * s exactly, i.e. s is an fp16 value (AutoAWQ and GPTQ store fp16 scales; bf16 ones within fp16's range
are) and, for an asymmetric linear, so is every -z * s (-8s always is). Without (native-q8, which already rounds
activations to 8 bits per block): d and m are rounded to fp16 as GGUF's own Q4_1 stores them, which moves a weight
by at most 2^-11 of |w| plus 2^-11 |z s| (z <= 15: under 1/130 of one quantization step). A linear that cannot be
written as blocks stays on the dequantized float32 path (`convert` says why): act-order groups that do not each
cover aligned runs of 32 inputs, a group size not a multiple of 32, scales outside fp16's normal range, 8-bit
codes, NVFP4 / FP8 / INT8 weights, Model-Optimizer's pre_quant_scale or W4A8 FP8 stage.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from eagle_trt.quantization.dequantize import INTEGER_GROUP_LAYOUTS, integer_fields
from eagle_trt.quantization.formats import WeightFormat
from eagle_trt.quantization.reader import quantized_modules, stored_size
from eagle_trt.quantization.scheme import Quantization

QK = 32  # weights per GGUF block (ggml's QK4_0 / QK4_1 / QK8_0)
SYMMETRIC_ZERO = 8  # the zero point of a symmetric 4-bit layout (integer_fields: 2^(b-1))


def quantized_blocks(raw, quant: Quantization,
                     exact: bool) -> tuple[dict[str, tuple[str, np.ndarray]], dict[str, str]]:
    """({HF weight name: (GGUF type name, block rows)} for every module of the checkpoint reader `raw` that `convert`
    writes as blocks, {module: why not} for the quantized modules it leaves to the dequantized float32 path)."""
    blocks, left = {}, {}
    for module, fmt in sorted(quantized_modules(quant, set(raw.names())).items()):
        out, inp = stored_size(fmt, raw, module)
        got = convert(fmt, lambda s, m=module: raw.get(f"{m}.{s}"), lambda s, m=module: f"{m}.{s}" in raw, out, inp,
                      exact)
        if isinstance(got, str):
            left[module] = got
        else:
            blocks[f"{module}.weight"] = got
    return blocks, left


def convert(fmt: WeightFormat, get: Callable[[str], torch.Tensor], has: Callable[[str], bool], out: int,
            inp: int, exact: bool = True) -> tuple[str, np.ndarray] | str:
    """One module's weight as (GGUF type name, block rows [out, in / 32 * block bytes] uint8), or why it cannot be
    (module docstring; `exact`: d and m hold the scales and zero points exactly, else rounded to fp16)."""
    if inp % QK:
        return f"{inp} inputs are not a multiple of {QK}"
    fields = _fields(fmt, get, has, out, inp)
    if isinstance(fields, str):
        return fields
    u, zeros, scales, group = fields  # [O, I] codes, [O, G] zero points and float32 scales, [I] each input's group
    runs = group.reshape(-1, QK)  # [B, 32]
    if not bool((runs == runs[:, :1]).all()):
        return f"input groups do not each cover aligned runs of {QK} inputs (group size {fmt.group_size}, act order)"
    of_block = runs[:, 0]  # [B]: each block's group
    z, s = zeros[:, of_block], scales[:, of_block]  # [O, B] each
    d16, m = s.to(torch.float16), -z.float() * s  # [O, B] each
    if not bool((torch.isfinite(d16) & ((s == 0) | (s.abs() >= 2 ** -14))).all()):
        return "its scales are outside fp16's normal range"
    symmetric = bool((z == SYMMETRIC_ZERO).all())
    if exact and not (torch.equal(d16.float(), s) and (symmetric or torch.equal(m.half().float(), m))):
        return ("its scales are not all fp16 values" if not torch.equal(d16.float(), s) else
                "its zero points times scales are not all fp16 values") + " (precision native-q8 rounds them)"
    codes = u.to(torch.uint8).reshape(out, -1, QK)  # [O, B, 32]
    packed = codes[..., :QK // 2] | (codes[..., QK // 2:] << 4)  # [O, B, 16]: ggml's qs, inputs j and j + 16
    head = [d16.numpy().view(np.uint8).reshape(out, -1, 2)]  # [O, B, 2] fp16 d
    name = "Q4_0"
    if not symmetric:
        head.append(m.to(torch.float16).numpy().view(np.uint8).reshape(out, -1, 2))  # [O, B, 2] fp16 m
        name = "Q4_1"
    blocks = np.concatenate(head + [packed.numpy()], axis=-1)  # [O, B, 18 (Q4_0) or 20 (Q4_1)]
    return name, np.ascontiguousarray(blocks.reshape(out, -1))


def _fields(fmt: WeightFormat, get, has, out: int, inp: int):
    """quantization.dequantize.integer_fields of a 4-bit layout, or why it has none here."""
    if fmt.bits != 4 or fmt.layout not in INTEGER_GROUP_LAYOUTS:
        return f"{fmt.describe()} is not a 4-bit integer layout"
    if fmt.pre_quant_scale and has("pre_quant_scale"):
        return "it stores a pre_quant_scale (each input scaled before the product)"
    if fmt.fp8_stage:
        return "its weights pass an FP8 stage (W4A8)"
    if fmt.layout == "ct-packed" and fmt.granularity not in ("tensor", "channel", "group"):
        return f"{fmt.describe()} has no per-group scales"
    return integer_fields(fmt, get, has, out, inp)
