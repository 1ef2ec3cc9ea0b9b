"""compressed-tensors checkpoints (llm-compressor writes them): config.json's `quantization_config` read into a
`Quantization`, one `QuantGroup` per config group.

Read at vllm-project/compressed-tensors (`quantization/quant_config.py` QuantizationConfig, `quant_args.py`
QuantizationArgs, `config/base.py` CompressionFormat, `compressors/*`): formats `float-quantized` (FP8),
`int-quantized` and `naive-quantized` (8-bit), `pack-quantized` (2-8 bit integers packed into int32),
`nvfp4-pack-quantized`; a `mixed-precision` checkpoint names the format per group. Strategies tensor, channel,
group, block (tensor_group for NVFP4). Anything else (sparse formats, transforms, MX formats, dense or frozen
checkpoints) is refused by name.
"""

from __future__ import annotations

from pathlib import Path

from eagle_trt.quantization.scheme import QuantGroup, Quantization, refuse
from eagle_trt.quantization.formats import WeightFormat

FORMATS = ("float-quantized", "int-quantized", "naive-quantized", "pack-quantized", "nvfp4-pack-quantized")
STRATEGIES = {"tensor": "tensor", "channel": "channel", "group": "group", "block": "block", "tensor_group": "group"}


def _weights(args: dict, fmt: str, where: Path) -> WeightFormat:
    bits, kind = args.get("num_bits"), args.get("type", "int")
    strategy = STRATEGIES.get(str(args.get("strategy")))
    what = f"a compressed-tensors {fmt} base ({kind}{bits} weights, strategy {args.get('strategy')!r})"
    if strategy is None:
        raise refuse(what, "eagle-trt reads the tensor, channel, group and block strategies", where)
    group = args.get("group_size")
    block = tuple(args["block_structure"]) if args.get("block_structure") else None
    symmetric = args.get("symmetric", True) is not False
    act_order = str(args.get("actorder") or "").lower() == "group"
    if str(args.get("actorder") or "group").lower() not in ("group", "none"):
        raise refuse(what + f" with actorder {args.get('actorder')!r}", "only group activation ordering stores the "
                     "permutation (weight_g_idx) the weights need", where)
    if strategy == "group" and not (isinstance(group, int) and group > 0):
        raise refuse(what + f" with group_size {group!r}", "a group strategy needs a positive group_size", where)
    if strategy == "block" and not (block and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
        raise refuse(what + f" with block_structure {args.get('block_structure')!r}", "a block strategy needs "
                     "[rows, cols]", where)
    common = {"granularity": strategy, "group_size": group if strategy == "group" else None,
              "block": block if strategy == "block" else None}
    if fmt == "nvfp4-pack-quantized":
        if not (kind == "float" and bits == 4 and group == 16):
            raise refuse(what, "NVFP4 stores 4-bit floats in groups of 16", where)
        return WeightFormat("nvfp4", 4, **common, global_scale="divide")
    if fmt == "pack-quantized":
        if kind != "int" or bits not in (2, 4, 8):
            raise refuse(what, "pack-quantized holds 2-, 4- or 8-bit integers here", where)
        return WeightFormat("ct-packed", bits, **common, symmetric=symmetric, act_order=act_order)
    if kind == "float" and bits == 8 and symmetric:
        return WeightFormat("fp8", 8, **common)
    if kind == "int" and bits == 8:
        return WeightFormat("int8", 8, **common, symmetric=symmetric)
    raise refuse(what, f"the {fmt} format stores FP8 or INT8 weights", where)


def _activations(args: dict | None) -> str | None:
    if not args:
        return None
    kind = "FP" if args.get("type") == "float" else "INT"
    dynamic = args.get("dynamic")
    how = "dynamic" if dynamic is True else "static" if dynamic is False else f"dynamic ({dynamic})"
    return f"{kind}{args.get('num_bits')} {how} per-{args.get('strategy', 'tensor')}"


def read_compressed_tensors(qcfg: dict, where: Path, source: str) -> Quantization:
    top = str(qcfg.get("format") or "")
    status = str(qcfg.get("quantization_status") or "compressed")
    if status != "compressed":
        raise refuse(f"a compressed-tensors base saved {status!r} (not compressed)", "its weights are stored as the "
                     "calibration left them, not in a quantized layout; save it compressed", where)
    for key, what in (("sparsity_config", "sparsity"), ("transform_config", "transforms (rotations)")):
        if qcfg.get(key):
            raise refuse(f"a compressed-tensors base with {what} ({key})", "eagle-trt reads quantized weights "
                         "without sparsity or transforms", where)
    groups_cfg = qcfg.get("config_groups")
    if not isinstance(groups_cfg, dict) or not groups_cfg:
        raise refuse("a compressed-tensors base without config_groups", "it does not say how weights are stored",
                     where)
    groups, formats = [], []
    for name, group in sorted(groups_cfg.items()):
        fmt = str(group.get("format") or top)
        if fmt not in FORMATS:
            raise refuse(f"a compressed-tensors {fmt} base (group {name})", f"eagle-trt reads the formats "
                         f"{', '.join(FORMATS)}", where)
        if not group.get("weights"):
            raise refuse(f"a compressed-tensors base whose group {name} quantizes no weights",
                         "activation-only quantization leaves nothing for eagle-trt to dequantize", where)
        if group.get("output_activations"):
            raise refuse(f"a compressed-tensors base with quantized output activations (group {name})",
                         "eagle-trt computes unquantized outputs", where)
        targets = tuple(str(t) for t in group.get("targets") or ())
        if not targets:
            raise refuse(f"a compressed-tensors group {name} without targets", "it names no modules", where)
        groups.append(QuantGroup(targets, _weights(group["weights"], fmt, where),
                                 _activations(group.get("input_activations")), fmt))
        formats.append(fmt)
    algo = formats[0] if len(set(formats)) == 1 else "mixed-precision"
    kv = qcfg.get("kv_cache_scheme")
    kv_text = _activations(kv) if isinstance(kv, dict) else None
    described = {"float-quantized": "FP8", "int-quantized": "INT8", "naive-quantized": "INT8",
                 "pack-quantized": f"INT{groups[0].weights.bits} (packed)", "nvfp4-pack-quantized": "NVFP4",
                 "mixed-precision": "mixed-precision"}[algo]
    return Quantization("compressed-tensors", algo, f"a compressed-tensors {described} base", tuple(groups),
                        tuple(str(i) for i in qcfg.get("ignore") or ()), kv_text, source)
