"""How one quantized linear layer's weight is stored, which tensors that takes, and its exact dequantization.

A `WeightFormat` names one on-disk layout (the writers' own code is cited per layout below); `expected_tensors`
lists every tensor a module in that layout carries (name suffix, shape, dtypes, required or not), so the shape check
accounts for scale tensors as it does for weights; `dequantize` turns them into the float32 [out, in] weight that
transformers would compute with after dequantizing (quantization.dequantize). Integer sums and products of powers of two are exact in
float32, so every layout here dequantizes exactly (a scale's own rounding is the writer's, read as stored).

Layouts (O = out_features, I = in_features, g = group size):
- fp8: `weight` float8 [O, I] x `weight_scale` (per tensor [] / [1], per channel [O] / [O, 1], per group [O, I/g],
  per block [O/bo, I/bi]); Model-Optimizer FP8, compressed-tensors float-quantized. `scale_inv`: transformers'
  FineGrainedFP8 names it `weight_scale_inv` (the same multiplication).
- int8: `weight` int8 [O, I] x `weight_scale` (- `weight_zero_point` when asymmetric); compressed-tensors
  int-quantized, Model-Optimizer INT8 SmoothQuant.
- ct-packed: compressed-tensors pack-quantized: `weight_packed` int32 [O, ceil(I*b/32)], b-bit values packed along
  the input dimension, lowest bits first, stored offset by 2^(b-1); `weight_shape` [2]; `weight_scale` [O, I/g];
  `weight_zero_point` int32 [ceil(O*b/32), I/g] when asymmetric; `weight_g_idx` [I] with activation ordering.
- nvfp4: two FP4 (e2m1) codes per uint8, the even element in the low nibble; block scales float8_e4m3fn [O, I/16]
  and a float32 global scale: Model-Optimizer multiplies by `weight_scale_2`, compressed-tensors divides by
  `weight_global_scale`.
- modelopt-int4: Model-Optimizer W4A16/W4A8 AWQ (`quant_utils.pack_int4_in_uint8`): two signed int4 per byte of
  `weight` uint8 [O/2, I], packed along the OUTPUT (row 2k in the low nibble, 2k+1 in the high one);
  `weight_scale` [O, I/g]; where the export could not fold it into the layer norm before (o_proj, down_proj), a
  `pre_quant_scale` [I] that multiplies the activation: y = W (s * x), folded here into the weight. W4A8 adds a
  per-tensor FP8 stage (its SequentialQuantizer [int4 blocks, fp8]): w = fp8(w4 / weight_scale_2) * weight_scale_2.
- awq-gemm: AutoAWQ GEMM: `qweight` int32 [I, O/8] (8 output columns per int32 in AWQ's order 0,2,4,6,1,3,5,7),
  `qzeros` int32 [I/g, O/8] (same packing), `scales` [I/g, O]; w = (q - z) * s.
- gptq: AutoGPTQ / GPTQModel: `qweight` int32 [I*b/32, O] (packed along the input), `qzeros` int32 [G, O*b/32]
  (packed along the output; format v1 stores zero - 1: AutoGPTQ reads (stored + 1) & mask), `scales` [G, O],
  `g_idx` int32 [I] (each input's group).
"""

from __future__ import annotations

from dataclasses import dataclass

FP8 = ("float8_e4m3fn", "float8_e5m2")
FLOATS = ("float32", "float16", "bfloat16")
INT_WORDS = ("int32", "uint32")
# e2m1 code -> value (the OCP MX FP4 element: sign bit 3, exponent bits 2-1, mantissa bit 0)
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ: nibble i of a packed int32 holds output column AWQ_ORDER[i]
NVFP4_BLOCK = 16


@dataclass(frozen=True)
class Expected:
    """One tensor a quantized module carries: the shapes it may have (None: not checked), the dtypes it may have,
    and whether it must be there (activation and KV-cache scales are read only by engines that quantize
    activations)."""

    shapes: tuple[tuple[int, ...], ...] | None
    dtypes: tuple[str, ...]
    required: bool = True

    def allows(self, shape: tuple[int, ...], dtype: str) -> bool:
        return dtype in self.dtypes and (self.shapes is None or tuple(shape) in self.shapes)

    def describe(self) -> str:
        shapes = " or ".join(str(list(s)) for s in self.shapes) if self.shapes else "any shape"
        return f"{'/'.join(self.dtypes)} {shapes}"


@dataclass(frozen=True)
class WeightFormat:
    """How one module's weight is stored (the module docstring lists the layouts)."""

    layout: str  # fp8 | int8 | ct-packed | nvfp4 | modelopt-int4 | awq-gemm | gptq
    bits: int
    granularity: str  # tensor | channel | group | block
    group_size: int | None = None
    block: tuple[int, int] | None = None  # [rows, cols] of an fp8 block scale
    symmetric: bool = True
    scale_name: str = "weight_scale"  # fp8: weight_scale, or transformers' FineGrainedFP8 weight_scale_inv
    act_order: bool = False  # an input permutation (g_idx) is stored
    zero_offset: int = 0  # GPTQ v1 stores zero - 1: the stored zeros are read + this (mod 2^bits)
    global_scale: str = ""  # nvfp4: "multiply" (weight_scale_2) | "divide" (weight_global_scale)
    pre_quant_scale: bool = False  # Model-Optimizer AWQ / SmoothQuant: a per-input activation scale may be stored
    fp8_stage: bool = False  # Model-Optimizer W4A8: the int4 weight passes a per-tensor FP8 stage (weight_scale_2)

    def describe(self) -> str:
        how = {"tensor": "per tensor", "channel": "per channel",
               "block": f"{self.block[0]}x{self.block[1]} blocks" if self.block else "blocks",
               "group": f"groups of {self.group_size}"}[self.granularity]
        kind = {"fp8": "FP8", "nvfp4": "NVFP4 (FP4 e2m1)"}.get(self.layout, f"INT{self.bits}")
        return f"{kind} weights, {how}" + ("" if self.symmetric else ", asymmetric")

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: dict) -> WeightFormat:
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()})


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _scale_shapes(fmt: WeightFormat, out: int, inp: int) -> tuple[tuple[int, ...], ...]:
    if fmt.granularity == "tensor":
        return ((), (1,))
    if fmt.granularity == "channel":
        return ((out,), (out, 1))
    if fmt.granularity == "group":
        return ((out, ceil_div(inp, fmt.group_size)),)
    rows, cols = ceil_div(out, fmt.block[0]), ceil_div(inp, fmt.block[1])
    return ((rows, cols), (rows, 1, cols, 1))  # Model-Optimizer's FP8_PB_WO writes the 4-d form


SCALAR = ((), (1,))
ACTIVATION_SCALES = ("input_scale", "input_global_scale", "input_zero_point")


def expected_tensors(fmt: WeightFormat, out: int, inp: int) -> dict[str, Expected]:
    """Every tensor (name suffix after the module name) a module of this format carries, for a [out, in] weight."""
    scale = Expected(_scale_shapes(fmt, out, inp), FLOATS)
    if fmt.layout == "fp8":
        want = {"weight": Expected(((out, inp),), FP8), fmt.scale_name: scale}
    elif fmt.layout == "int8":
        want = {"weight": Expected(((out, inp),), ("int8",)), "weight_scale": scale}
        if not fmt.symmetric:
            want["weight_zero_point"] = Expected(scale.shapes, ("int8", "int32"))
    elif fmt.layout == "ct-packed":
        want = {"weight_packed": Expected(((out, ceil_div(inp * fmt.bits, 32)),), INT_WORDS),
                "weight_shape": Expected(((2,),), ("int32", "int64")), "weight_scale": scale}
        if not fmt.symmetric:
            cols = scale.shapes[0][1] if len(scale.shapes[0]) == 2 else 1
            want["weight_zero_point"] = Expected(((ceil_div(out * fmt.bits, 32), cols),), INT_WORDS)
        if fmt.act_order:
            want["weight_g_idx"] = Expected(((inp,),), ("int32", "int64"))
    elif fmt.layout == "nvfp4":
        packed = "weight" if fmt.global_scale == "multiply" else "weight_packed"
        global_name = "weight_scale_2" if fmt.global_scale == "multiply" else "weight_global_scale"
        want = {packed: Expected(((out, inp // 2),), ("uint8",)),
                "weight_scale": Expected(((out, inp // NVFP4_BLOCK),), FP8),
                global_name: Expected(SCALAR, FLOATS)}
    elif fmt.layout == "modelopt-int4":
        want = {"weight": Expected(((out // 2, inp),), ("uint8", "int8")),
                "weight_scale": Expected(((out, ceil_div(inp, fmt.group_size)),), FLOATS),
                "weight_scale_2": Expected(SCALAR, FLOATS, required=fmt.fp8_stage)}
    elif fmt.layout == "awq-gemm":
        groups = ceil_div(inp, fmt.group_size or inp)
        want = {"qweight": Expected(((inp, out * fmt.bits // 32),), INT_WORDS),
                "qzeros": Expected(((groups, out * fmt.bits // 32),), INT_WORDS),
                "scales": Expected(((groups, out),), FLOATS)}
    elif fmt.layout == "gptq":
        groups = ceil_div(inp, fmt.group_size or inp)  # group_size None: one group (GPTQ's -1)
        want = {"qweight": Expected(((inp * fmt.bits // 32, out),), INT_WORDS),
                "qzeros": Expected(((groups, out * fmt.bits // 32),), INT_WORDS),
                "scales": Expected(((groups, out),), FLOATS),
                "g_idx": Expected(((inp,),), ("int32", "int64"), required=fmt.act_order)}
    else:
        raise ValueError(f"unknown weight layout {fmt.layout!r}")
    if fmt.pre_quant_scale:
        want["pre_quant_scale"] = Expected(((inp,),), FLOATS, required=False)
    if fmt.layout in ("fp8", "nvfp4", "int8", "modelopt-int4"):
        # static activation scales (Model-Optimizer FP8 / NVFP4 / W4A8 / SmoothQuant, compressed-tensors static FP8 /
        # INT8, NVFP4's input_global_scale): read by engines that quantize activations, not by ours
        for name in ACTIVATION_SCALES:
            want[name] = Expected(None, FLOATS + ("int8", "int32"), required=False)
    return want
