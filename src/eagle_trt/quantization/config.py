"""Read how a base checkpoint is quantized: `hf_quant_config.json` (Model-Optimizer) and config.json's
`quantization_config` (Model-Optimizer, compressed-tensors, AutoAWQ, GPTQ, transformers' FineGrainedFP8), into one
`Quantization` every step reads. A scheme eagle-trt does not read is refused here, by name, before any work.

Sources read for each writer (docs/quantization.md has the tables):
- Model-Optimizer unified HF export (NVIDIA/Model-Optimizer `modelopt/torch/export/quant_utils.py` get_quant_config,
  `convert_hf_config.py`): hf_quant_config.json {"producer", "quantization": {quant_algo, kv_cache_quant_algo,
  group_size, exclude_modules (exact names or prefix wildcards), quantized_layers (MIXED_PRECISION)}}, and the same
  in config.json as quant_method "modelopt" (exclusions under `ignore`).
- compressed-tensors (vllm-project/compressed-tensors `quantization/quant_config.py`, `quant_args.py`):
  quant_method "compressed-tensors", format, config_groups {targets, weights, input_activations, format}, ignore
  (names or "re:" patterns), kv_cache_scheme, quantization_status.
- AutoAWQ (`awq/models/_config.py`): quant_method "awq", bits, group_size, zero_point, version,
  modules_to_not_convert (substrings). GPTQ (AutoGPTQ `quantization/config.py`, GPTQModel): quant_method "gptq",
  bits, group_size (-1: one group), desc_act, sym, checkpoint_format ("gptq" = v1, "gptq_v2"), lm_head.
- transformers FineGrainedFP8 (`utils/quantization_config.py`): quant_method "fp8", weight_block_size,
  activation_scheme, modules_to_not_convert (lm_head always kept).
"""

from __future__ import annotations

import json
from pathlib import Path

from eagle_trt.errors import EagleTrtError
from eagle_trt.quantization.compressed_tensors import read_compressed_tensors
from eagle_trt.quantization.formats import WeightFormat
from eagle_trt.quantization.scheme import QuantGroup, Quantization, refuse

HF_QUANT_CONFIG = "hf_quant_config.json"
DECODER_LINEARS = r"re:model\.layers\.\d+\..*"  # AutoAWQ / GPTQ quantize the decoder layers' linears only


def read_quantization(path: Path, cfg: dict) -> Quantization | None:
    """The checkpoint's quantization, or None for an unquantized one; a scheme we do not read is an EagleTrtError."""
    qcfg = cfg.get("quantization_config")
    hf_file = path / HF_QUANT_CONFIG
    if hf_file.exists():
        try:
            hf = json.loads(hf_file.read_text(encoding="utf-8"))
            section = hf["quantization"]
            assert isinstance(section, dict)
        except (OSError, ValueError, KeyError, AssertionError, TypeError):
            raise EagleTrtError(f"{hf_file} is not a Model-Optimizer quantization config (it needs a "
                                "'quantization' object)", "restore the file from the checkpoint's download") from None
        producer = hf.get("producer", {}).get("name") if isinstance(hf.get("producer"), dict) else None
        return _modelopt(section, path, HF_QUANT_CONFIG, producer)
    if qcfg is None:
        return None
    if not isinstance(qcfg, dict):
        raise EagleTrtError(f"{path / 'config.json'}: quantization_config = {qcfg!r} is not an object",
                            "restore the original config.json")
    method = str(qcfg.get("quant_method", "")).lower()
    where = path / "config.json"
    source = "config.json quantization_config"
    if method == "modelopt":
        section = dict(qcfg)
        section.setdefault("exclude_modules", qcfg.get("ignore") or [])
        producer = qcfg.get("producer", {}).get("name") if isinstance(qcfg.get("producer"), dict) else "modelopt"
        return _modelopt(section, path, source, producer)
    if method == "compressed-tensors":
        return read_compressed_tensors(qcfg, where, source)
    if method == "awq":
        return _awq(qcfg, where, source)
    if method == "gptq":
        return _gptq(qcfg, where, source)
    if method == "fp8":
        return _fine_grained_fp8(qcfg, where, source)
    raise refuse(f"a {method or 'quantized'} base (quant_method {qcfg.get('quant_method')!r})",
                 "eagle-trt does not read this quantization layout, so no engine would compute what the model "
                 "computes", where)


def gguf_quantization(file: Path) -> Quantization | None:
    """A GGUF base's block types (llama.cpp's ggml-quants: Q4_0, Q4_1, Q8_0, K-quants, ...): the GGUF reader
    dequantizes them (ggml's `gguf` package), so only engines that read that reader run it."""
    from eagle_trt.checkpoints.gguf_reader import gguf_block_types

    types = gguf_block_types(file)
    if not types:
        return None
    return Quantization("gguf", "+".join(types), f"a GGUF {'/'.join(types)} base", source=file.name)


# ---- Model-Optimizer ---------------------------------------------------------------------------------------------
FP8_STATIC = "FP8 static per-tensor"
# quant_algo -> (weight format, activations); group_size filled from the config
MODELOPT_ALGOS = {
    "FP8": (WeightFormat("fp8", 8, "tensor"), FP8_STATIC),
    "FP8_PER_CHANNEL_PER_TOKEN": (WeightFormat("fp8", 8, "channel"), "FP8 dynamic per-token"),
    "FP8_PB_WO": (WeightFormat("fp8", 8, "block", block=(128, 128)), None),
    "NVFP4": (WeightFormat("nvfp4", 4, "group", group_size=16, global_scale="multiply"), "NVFP4 dynamic, static "
              "global scale"),
    "W4A16_NVFP4": (WeightFormat("nvfp4", 4, "group", group_size=16, global_scale="multiply"), None),
    "NVFP4_AWQ": (WeightFormat("nvfp4", 4, "group", group_size=16, global_scale="multiply", pre_quant_scale=True),
                  "NVFP4 dynamic, static global scale"),
    "W4A16_AWQ": (WeightFormat("modelopt-int4", 4, "group", group_size=128, pre_quant_scale=True), None),
    "W4A8_AWQ": (WeightFormat("modelopt-int4", 4, "group", group_size=128, pre_quant_scale=True, fp8_stage=True),
                 FP8_STATIC),
    "W8A8_SQ_PER_CHANNEL": (WeightFormat("int8", 8, "channel", pre_quant_scale=True), "INT8 static per-tensor"),
    "W8A16": (WeightFormat("int8", 8, "channel"), None),
}
MODELOPT_NAMES = {"FP8": "FP8", "FP8_PER_CHANNEL_PER_TOKEN": "FP8 per-channel", "FP8_PB_WO": "FP8 block",
                  "NVFP4": "NVFP4", "W4A16_NVFP4": "NVFP4 weight-only", "NVFP4_AWQ": "NVFP4 AWQ",
                  "W4A16_AWQ": "INT4 AWQ (W4A16)", "W4A8_AWQ": "INT4 AWQ with FP8 activations (W4A8)",
                  "W8A8_SQ_PER_CHANNEL": "INT8 SmoothQuant (W8A8)", "W8A16": "INT8 weight-only (W8A16)",
                  "MIXED_PRECISION": "mixed-precision"}


def _modelopt_format(algo: str, layer: dict, where: Path) -> tuple[WeightFormat, str | None]:
    key = str(algo).upper()
    if key not in MODELOPT_ALGOS:
        raise refuse(f"a Model-Optimizer {algo} base (quant_algo {algo!r})",
                     f"eagle-trt reads quant_algo {', '.join(MODELOPT_ALGOS)} and MIXED_PRECISION of these", where)
    fmt, acts = MODELOPT_ALGOS[key]
    if fmt.granularity == "group" and layer.get("group_size") is not None:
        size = layer["group_size"]
        if not isinstance(size, int) or size < 1 or (fmt.layout == "nvfp4" and size != 16):
            raise refuse(f"a Model-Optimizer {algo} base with group_size {size!r}",
                         "NVFP4 blocks are 16 values and AWQ groups a positive integer", where)
        fmt = WeightFormat(**(fmt.to_dict() | {"group_size": size, "block": None}))
    return fmt, acts


def _modelopt(section: dict, path: Path, source: str, producer: str | None) -> Quantization:
    where = path / (HF_QUANT_CONFIG if source == HF_QUANT_CONFIG else "config.json")
    algo = section.get("quant_algo")
    kv = section.get("kv_cache_quant_algo")
    if kv is None and isinstance(section.get("kv_cache_scheme"), (dict, str)):
        scheme = section["kv_cache_scheme"]
        kv = "FP8" if isinstance(scheme, dict) and scheme.get("type") == "float" and scheme.get("num_bits") == 8 \
            else str(scheme)
    excluded = tuple(str(m) for m in section.get("exclude_modules") or ())
    if algo is None:
        if kv is None:
            raise refuse("a Model-Optimizer config with neither quant_algo nor kv_cache_quant_algo",
                         "it does not say how the weights are stored", where)
        return Quantization("modelopt", "KV_ONLY", f"a Model-Optimizer {kv} KV-cache base", (), excluded, kv, source,
                            producer)
    if str(algo).upper() == "MIXED_PRECISION":
        layers = section.get("quantized_layers")
        if not isinstance(layers, dict) or not layers:
            raise refuse("a Model-Optimizer MIXED_PRECISION base without quantized_layers",
                         "it does not say how each layer is stored", where)
        groups = []
        for module, layer in sorted(layers.items()):
            fmt, acts = _modelopt_format(layer.get("quant_algo"), layer, where)
            groups.append(QuantGroup((module,), fmt, acts, str(layer.get("quant_algo")).upper()))
        return Quantization("modelopt", "MIXED_PRECISION", "a Model-Optimizer mixed-precision base", tuple(groups),
                            excluded, kv, source, producer)
    fmt, acts = _modelopt_format(algo, section, where)
    name = str(algo).upper()
    return Quantization("modelopt", name, f"a Model-Optimizer {MODELOPT_NAMES[name]} base",
                        (QuantGroup(("Linear",), fmt, acts, name),), excluded, kv, source, producer)


# ---- AutoAWQ, GPTQ, FineGrainedFP8 --------------------------------------------------------------------------------
def _bits(qcfg: dict, allowed: tuple[int, ...], what: str, where: Path) -> int:
    bits = qcfg.get("bits", qcfg.get("w_bit"))
    if bits not in allowed:
        raise refuse(f"{what} with bits = {bits!r}", f"eagle-trt reads {'/'.join(map(str, allowed))}-bit weights "
                     "of this layout", where)
    return bits


def _group_size(qcfg: dict, what: str, where: Path) -> int | None:
    size = qcfg.get("group_size", qcfg.get("q_group_size", 128))
    if size in (-1, None):
        return None
    if not isinstance(size, int) or size < 1:
        raise refuse(f"{what} with group_size = {size!r}", "group_size must be a positive integer or -1", where)
    return size


def _awq(qcfg: dict, where: Path, source: str) -> Quantization:
    version = str(qcfg.get("version", "gemm")).lower()
    if version != "gemm":
        raise refuse(f"an AWQ INT4 base in AutoAWQ's {version.upper()} layout (version {qcfg.get('version')!r})",
                     "eagle-trt reads AutoAWQ's GEMM layout (qweight [in, out/8]); the GEMV / Marlin / exllama "
                     "layouts pack other orders", where)
    bits = _bits(qcfg, (4,), "an AWQ base", where)
    if qcfg.get("zero_point") is False:
        raise refuse("an AWQ INT4 base without zero points (zero_point false)",
                     "AutoAWQ's GEMM layout always stores qzeros; this config does not match it", where)
    fmt = WeightFormat("awq-gemm", bits, "group", group_size=_group_size(qcfg, "an AWQ base", where),
                       symmetric=False)
    excluded = tuple(f"*{m}*" for m in qcfg.get("modules_to_not_convert") or ())
    return Quantization("awq", "gemm", "an AWQ INT4 (AutoAWQ GEMM) base", (QuantGroup((DECODER_LINEARS,), fmt),),
                        excluded, None, source)


def _gptq(qcfg: dict, where: Path, source: str) -> Quantization:
    fmt_name = str(qcfg.get("checkpoint_format") or qcfg.get("format") or "gptq").lower()
    if fmt_name not in ("gptq", "gptq_v2"):
        raise refuse(f"a GPTQ base in the {fmt_name!r} checkpoint format",
                     "eagle-trt reads GPTQ's own v1 (gptq) and v2 (gptq_v2) packing, not kernel-specific repacks", where)
    if qcfg.get("dynamic"):
        raise refuse("a GPTQ base with per-module overrides (dynamic)", "each module's bits and groups would differ "
                     "from the config's; eagle-trt reads uniform GPTQ checkpoints", where)
    bits = _bits(qcfg, (2, 4, 8), "a GPTQ base", where)
    fmt = WeightFormat("gptq", bits, "group", group_size=_group_size(qcfg, "a GPTQ base", where),
                       symmetric=bool(qcfg.get("sym", True)), act_order=bool(qcfg.get("desc_act")),
                       zero_offset=1 if fmt_name == "gptq" else 0)
    targets = (DECODER_LINEARS, "lm_head") if qcfg.get("lm_head") else (DECODER_LINEARS,)
    excluded = tuple(f"*{m}*" for m in qcfg.get("modules_to_not_convert") or ())
    return Quantization("gptq", fmt_name, f"a GPTQ INT{bits} base", (QuantGroup(targets, fmt),), excluded, None,
                        source)


def _fine_grained_fp8(qcfg: dict, where: Path, source: str) -> Quantization:
    block = qcfg.get("weight_block_size")
    if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
        raise refuse(f"an FP8 base (quant_method 'fp8') with weight_block_size {block!r}",
                     "eagle-trt reads transformers' FineGrainedFP8 layout: weight_scale_inv per [rows, cols] block",
                     where)
    if str(qcfg.get("scale_fmt", "float")).lower() != "float":
        raise refuse(f"an FP8 base with scale_fmt {qcfg.get('scale_fmt')!r}", "eagle-trt reads float32 block scales",
                     where)
    acts = f"FP8 {qcfg.get('activation_scheme', 'dynamic')}"
    fmt = WeightFormat("fp8", 8, "block", block=tuple(block), scale_name="weight_scale_inv")
    excluded = tuple(f"*{m}*" for m in (qcfg.get("modules_to_not_convert") or qcfg.get("ignored_layers") or ()))
    return Quantization("fp8", "block", f"an FP8 ({block[0]}x{block[1]} block) base",
                        (QuantGroup((DECODER_LINEARS,), fmt, acts),), excluded + ("lm_head",), None, source)
