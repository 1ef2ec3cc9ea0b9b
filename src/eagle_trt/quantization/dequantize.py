"""Exact dequantization of each layout quantization.formats describes (its docstring cites the writers): integer
fields and their scales multiply exactly in float32, so the result is the weight transformers computes with after
dequantizing, bit for bit up to the scale's own float32 product."""

from __future__ import annotations

from typing import Callable

import torch

from eagle_trt.quantization.formats import AWQ_ORDER, E2M1_VALUES, NVFP4_BLOCK, WeightFormat, ceil_div

INTEGER_GROUP_LAYOUTS = ("ct-packed", "modelopt-int4", "awq-gemm", "gptq")  # w = (u - z) * s per group


def unpack_int32(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Unsigned `bits`-bit fields of 32-bit words, lowest bits first, laid out along `dim` (int32 result)."""
    per = 32 // bits
    words = packed.to(torch.int64) & 0xFFFFFFFF  # [..., n] as unsigned
    shifts = torch.arange(per, dtype=torch.int64) * bits  # [per]
    fields = (words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)  # [..., n, per]
    dim = dim % packed.dim()
    fields = fields.movedim(-1, dim + 1)  # [..., n, per, ...]: each word's fields follow it along `dim`
    shape = list(packed.shape)
    shape[dim] *= per
    return fields.reshape(shape).to(torch.int32)


def _expand(scale: torch.Tensor, out: int, inp: int, fmt: WeightFormat) -> torch.Tensor:
    """A scale (or zero point) broadcast to [out, in] float32."""
    s = scale.to(torch.float32)
    if fmt.granularity == "tensor":
        return s.reshape(()).expand(out, inp)
    if fmt.granularity == "channel":
        return s.reshape(out, 1).expand(out, inp)
    if fmt.granularity == "group":
        return s.repeat_interleave(fmt.group_size, dim=1)[:, :inp]
    rows, cols = fmt.block
    s = s.reshape(ceil_div(out, rows), ceil_div(inp, cols))  # the 4-d [O/b, 1, I/b, 1] form too
    return s.repeat_interleave(rows, dim=0)[:out].repeat_interleave(cols, dim=1)[:, :inp]


def _nibbles(packed: torch.Tensor, dim: int) -> torch.Tensor:
    """uint8 bytes -> their two 4-bit fields along `dim`, the low nibble first (int64)."""
    b = packed.view(torch.uint8).to(torch.int64)
    pair = torch.stack((b & 0x0F, b >> 4), dim=dim + 1)  # [..., n, 2, ...]
    shape = list(b.shape)
    shape[dim] *= 2
    return pair.reshape(shape)


def dequantize(fmt: WeightFormat, get: Callable[[str], torch.Tensor], has: Callable[[str], bool], out: int,
               inp: int) -> torch.Tensor:
    """The [out, in] float32 weight of one module; `get(suffix)` reads that module's tensor, `has(suffix)` says
    whether it is stored."""
    if fmt.layout == "fp8":
        w = get("weight").to(torch.float32) * _expand(get(fmt.scale_name), out, inp, fmt)
    elif fmt.layout == "int8":
        q = get("weight").to(torch.float32)
        if not fmt.symmetric:
            q = q - _expand(get("weight_zero_point"), out, inp, fmt)
        w = q * _expand(get("weight_scale"), out, inp, fmt)
    elif fmt.layout in INTEGER_GROUP_LAYOUTS:
        u, z, scale, group = integer_fields(fmt, get, has, out, inp)
        w = (u - z[:, group]).to(torch.float32) * scale[:, group]  # [O, I]
        if fmt.fp8_stage:  # Model-Optimizer W4A8: the weight is used as FP8 of its own per-tensor scale
            second = get("weight_scale_2").to(torch.float32).reshape(())
            w = (w / second).to(torch.float8_e4m3fn).to(torch.float32) * second
    elif fmt.layout == "nvfp4":
        if fmt.global_scale == "multiply":
            codes, factor = get("weight"), get("weight_scale_2").to(torch.float32).reshape(())
            block = get("weight_scale").to(torch.float32) * factor  # [O, I/16]
        else:
            codes, divisor = get("weight_packed"), get("weight_global_scale").to(torch.float32).reshape(())
            block = get("weight_scale").to(torch.float32) / divisor  # [O, I/16]
        values = torch.tensor(E2M1_VALUES, dtype=torch.float32)[_nibbles(codes, dim=1)]  # [O, I]
        w = values * block.repeat_interleave(NVFP4_BLOCK, dim=1)
    else:
        raise ValueError(f"unknown weight layout {fmt.layout!r}")
    if fmt.pre_quant_scale and has("pre_quant_scale"):
        w = w * get("pre_quant_scale").to(torch.float32).reshape(1, inp)  # y = W (s * x) = (W diag(s)) x
    return w.contiguous()


def integer_fields(fmt: WeightFormat, get: Callable[[str], torch.Tensor], has: Callable[[str], bool], out: int,
                   inp: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """An integer group layout (INTEGER_GROUP_LAYOUTS) as w = (u - z[:, group]) * s[:, group]: (unsigned codes u
    [O, I], zero points z [O, G] (2^(b-1) when symmetric), scales s [O, G] float32, each input's group [I]). What
    `dequantize` computes with, and what quantization.blocks writes as GGUF blocks."""
    by_group = torch.arange(inp) // (fmt.group_size or inp)  # [I]
    mask = (1 << fmt.bits) - 1
    if fmt.layout == "awq-gemm":
        column = torch.argsort(torch.tensor(AWQ_ORDER))  # output column j of a word sits in field column[j]
        u = unpack_int32(get("qweight"), fmt.bits, dim=1).reshape(inp, -1, 8)[..., column].reshape(inp, out).t()
        z = unpack_int32(get("qzeros"), fmt.bits, dim=1)
        z = z.reshape(z.shape[0], -1, 8)[..., column].reshape(z.shape[0], out).t()  # [O, G]
        return u, z, get("scales").to(torch.float32).t(), by_group
    if fmt.layout == "gptq":
        u = unpack_int32(get("qweight"), fmt.bits, dim=0)[:inp].t()  # [O, I]
        z = ((unpack_int32(get("qzeros"), fmt.bits, dim=1)[:, :out] + fmt.zero_offset) & mask).t()  # [O, G]
        return u, z, get("scales").to(torch.float32).t(), get("g_idx").long() if has("g_idx") else by_group
    offset = 1 << (fmt.bits - 1)
    if fmt.layout == "ct-packed":  # codes and zero points stored as q + 2^(b-1)
        u = unpack_int32(get("weight_packed"), fmt.bits, dim=1)[:, :inp]  # [O, I]
        scale = _per_row(get("weight_scale").to(torch.float32), out)  # [O, G] (G = 1: channel / tensor)
        z = (unpack_int32(get("weight_zero_point"), fmt.bits, dim=0)[:out] if not fmt.symmetric
             else torch.full(scale.shape, offset))  # [O, G]
        return u, z, scale, _ct_group_of_input(fmt, get, inp)
    if fmt.layout == "modelopt-int4":  # two's complement int4 q, row 2k low nibble, 2k+1 high: u = q + 8
        scale = _per_row(get("weight_scale").to(torch.float32), out)  # [O, G]
        return _nibbles(get("weight"), dim=0) ^ offset, torch.full(scale.shape, offset), scale, by_group
    raise ValueError(f"{fmt.layout!r} is not an integer group layout")


def _per_row(values: torch.Tensor, out: int) -> torch.Tensor:
    """[O, G] from a per-tensor ([1]), per-channel ([O, 1]) or per-group ([O, G]) tensor."""
    return values.reshape(1, 1).expand(out, 1) if values.numel() == 1 else values.reshape(out, -1)


def _ct_group_of_input(fmt: WeightFormat, get, inp: int) -> torch.Tensor:
    """[I]: the scale column each input reads (compressed-tensors: `weight_g_idx` when the inputs were reordered)."""
    if fmt.granularity != "group":
        return torch.zeros(inp, dtype=torch.long)
    if fmt.act_order:
        return get("weight_g_idx").long()
    return torch.arange(inp) // fmt.group_size
