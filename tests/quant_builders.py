"""Quantized tiny bases in the exact layouts their writers produce, each with the dequantized weights an oracle
computes with (never through eagle_trt's own dequantization).

- Model-Optimizer: the real writer (nvidia-modelopt: mtq.quantize + export_hf_checkpoint, on the CPU, fp32);
  the oracle is modelopt's own fake-quantized weights (weight_quantizer(weight)) of the model it exported, times
  the pre_quant_scale the export kept (it folds the others into the layer norms it writes).
- compressed-tensors: the real library quantizes (apply_quantization_config, calculate_qparams, ModelCompressor);
  the oracle is transformers loading the checkpoint with CompressedTensorsConfig(dequantize=True). NVFP4, which
  compressed-tensors decompresses to bf16, gets its exact float32 values from `e2m1` below.
- AutoAWQ GEMM, GPTQ (v1 / v2, act-order), transformers' FP8 blocks: no writer installs on a CPU, so the layout is
  written as its writer's pack loop does (AutoAWQ WQLinear_GEMM.from_linear, AutoGPTQ QuantLinear.pack,
  transformers Fp8Quantize) from integer codes, zeros and scales drawn here; the oracle is (q - z) * s of those.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj")
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _copy_tokenizer(src: Path, out: Path) -> None:
    for name in TOKENIZER_FILES:
        if (src / name).exists() and not (out / name).exists():
            shutil.copy2(src / name, out / name)


def _calibration(vocab: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    return [torch.randint(3, vocab, (2, 24), generator=gen) for _ in range(3)]


def _linear_modules(model) -> dict:
    return {name: m for name, m in model.named_modules() if name.rpartition(".")[2] in
            {n.rpartition(".")[2] for n in LINEARS}}


# ---- Model-Optimizer (the real writer) ----------------------------------------------------------------------------
MODELOPT_RECIPES = {"FP8": "FP8_DEFAULT_CFG", "FP8_PER_CHANNEL_PER_TOKEN": "FP8_PER_CHANNEL_PER_TOKEN_CFG",
                    "NVFP4": "NVFP4_DEFAULT_CFG", "W4A16_AWQ": "INT4_AWQ_CFG", "W4A8_AWQ": "W4A8_AWQ_BETA_CFG",
                    "W8A8_SQ_PER_CHANNEL": "INT8_SMOOTHQUANT_CFG"}


def write_modelopt(src: Path, out: Path, algo: str, kv_fp8: bool = False, block: int = 32) -> tuple[Path, dict]:
    """Quantize the HF base `src` with Model-Optimizer's recipe for `algo` (AWQ blocks of `block`: the tiny
    layers are narrower than the default 128) and export it; returns (out, {module: modelopt's own fake-quantized
    [out, in] weight times the pre_quant_scale the export kept}) (NVFP4: {}, modelopt fake-quantizes it with a
    CUDA kernel only)."""
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    from modelopt.torch.export.unified_export_hf import requantize_resmooth_fused_llm_layers
    from modelopt.torch.quantization.utils import update_quant_cfg_with_kv_cache_quant
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    cfg = copy.deepcopy(getattr(mtq, MODELOPT_RECIPES[algo]))
    for entry in cfg["quant_cfg"]:
        for part in entry.get("cfg") if isinstance(entry.get("cfg"), list) else [entry.get("cfg")]:
            sizes = part.get("block_sizes") if isinstance(part, dict) else None
            if isinstance(sizes, dict) and -1 in sizes and sizes[-1] and sizes[-1] > 16:
                sizes[-1] = block
    if kv_fp8:
        cfg = update_quant_cfg_with_kv_cache_quant(cfg, mtq.FP8_KV_CFG["quant_cfg"])
    batches = _calibration(model.config.vocab_size)

    def forward_loop(m):
        with torch.no_grad():
            for ids in batches:
                m(ids)

    model = mtq.quantize(model, cfg, forward_loop)
    requantize_resmooth_fused_llm_layers(model)  # what export does first: the exported weights are these
    own = {}
    with torch.no_grad():
        for name, module in _linear_modules(model).items() if algo != "NVFP4" else ():
            quantizer = getattr(module, "weight_quantizer", None)
            if quantizer is not None and quantizer.is_enabled:
                pqs = getattr(getattr(module, "input_quantizer", None), "pre_quant_scale", None)
                own[name] = (quantizer(module.weight).float().clone(), None if pqs is None else pqs.float().clone())
    export_hf_checkpoint(model, export_dir=out)
    _copy_tokenizer(src, out)
    stored = _stored(out)
    return out, {name: w * pqs.reshape(1, -1) if pqs is not None and f"{name}.pre_quant_scale" in stored else w
                 for name, (w, pqs) in own.items()}  # a pre_quant_scale not exported went into the layer norm


def decode_modelopt(path: Path) -> dict[str, torch.Tensor]:
    """{module: [out, in] float32 weight} of a Model-Optimizer export, decoded as its writer encodes it
    (modelopt/torch/export/quant_utils.py: to_quantized_weight, pack_int4_in_uint8; NVFP4QTensor.dequantize)."""
    config = json.loads((path / "hf_quant_config.json").read_text())["quantization"]
    algo, stored, out = config["quant_algo"], _stored(path), {}
    for name, w in stored.items():
        module, _, leaf = name.rpartition(".")
        if leaf != "weight" or f"{module}.weight_scale" not in stored:
            continue
        scale = stored[f"{module}.weight_scale"].float()
        if algo == "NVFP4":
            weight = e2m1(w) * (scale.repeat_interleave(16, dim=1) * stored[f"{module}.weight_scale_2"].float())
        elif algo in ("W4A16_AWQ", "W4A8_AWQ"):
            rows = torch.empty(w.shape[0] * 2, w.shape[1], dtype=torch.long)
            rows[0::2], rows[1::2] = w.long() & 0xF, w.long() >> 4  # row 2k low nibble, 2k+1 high
            codes = torch.where(rows >= 8, rows - 16, rows).float()
            weight = codes * scale.repeat_interleave(w.shape[1] // scale.shape[1], dim=1)
            if algo == "W4A8_AWQ":  # the second, FP8 per-tensor stage of modelopt's SequentialQuantizer
                second = stored[f"{module}.weight_scale_2"].float()
                weight = (weight / second).to(torch.float8_e4m3fn).float() * second
        else:  # FP8 (per tensor / per channel), INT8 (per channel)
            weight = w.float() * (scale.reshape(-1, 1) if scale.dim() else scale)
        pqs = stored.get(f"{module}.pre_quant_scale")
        out[module] = weight if pqs is None else weight * pqs.float().reshape(1, -1)
    return out


def _stored(path: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for f in sorted(path.glob("*.safetensors")):
        tensors |= load_file(str(f))
    return tensors


# ---- compressed-tensors (the real library) ------------------------------------------------------------------------
def write_compressed_tensors(src: Path, out: Path, preset: str, group_size: int | None = None,
                             block: list[int] | None = None) -> Path:
    """Quantize the decoder linears of `src` with compressed-tensors' preset scheme (weights: min-max per strategy,
    as llm-compressor's observers; static activation scales from a calibration pass) and save it compressed."""
    from compressed_tensors import ModelCompressor
    from compressed_tensors.offload import update_offload_parameter
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig, QuantizationStatus,
                                                 apply_quantization_config, preset_name_to_scheme)
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam, is_module_quantized
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    scheme = preset_name_to_scheme(preset, ["Linear"])
    if group_size is not None:
        scheme.weights = QuantizationArgs(**(scheme.weights.model_dump() | {"group_size": group_size}))
    if block is not None:
        scheme.weights = QuantizationArgs(**(scheme.weights.model_dump() | {"block_structure": block}))
        if scheme.input_activations is not None and scheme.input_activations.group_size:
            scheme.input_activations = QuantizationArgs(**(scheme.input_activations.model_dump()
                                                           | {"group_size": block[1]}))
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"]))
    for module in (m for m in model.modules() if is_module_quantized(m)):
        args = module.quantization_scheme.weights
        w = module.weight.detach()
        lo, hi = _weight_ranges(w, args)
        global_scale = generate_gparam(-w.abs().max().reshape(1), w.abs().max().reshape(1)) \
            if args.strategy == "tensor_group" else None
        scale, zero = calculate_qparams(lo, hi, args, global_scale=global_scale)
        for name, value in (("weight_scale", scale), ("weight_zero_point", zero),
                            ("weight_global_scale", global_scale)):
            if value is not None and hasattr(module, name):
                update_offload_parameter(module, name, value)
        acts = module.quantization_scheme.input_activations
        if acts is not None and acts.dynamic is not True:  # a static (or locally dynamic) activation scale
            bound = torch.full((1,), 4.0)
            gs = generate_gparam(-bound, bound) if acts.strategy == "tensor_group" else None
            a_scale, a_zero = calculate_qparams(-bound, bound, acts, global_scale=gs)
            for name, value in (("input_scale", a_scale), ("input_zero_point", a_zero), ("input_global_scale", gs)):
                if value is not None and hasattr(module, name):
                    update_offload_parameter(module, name, value)
        module.quantization_status = QuantizationStatus.FROZEN
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=None)
    compressor.compress_model(model, skip_compressed=True)
    model.save_pretrained(out)
    compressor.update_config(str(out))
    _copy_tokenizer(src, out)
    return out


def _weight_ranges(w: torch.Tensor, args) -> tuple[torch.Tensor, torch.Tensor]:
    """(min, max) of the weight per quantization unit, shaped as compressed-tensors' scales."""
    if args.strategy == "tensor":
        return w.min().reshape(1), w.max().reshape(1)
    if args.strategy == "channel":
        return w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
    if args.strategy in ("group", "tensor_group"):
        g = w.unflatten(-1, (-1, args.group_size))
        return g.amin(dim=-1), g.amax(dim=-1)
    rows, cols = args.block_structure
    o, i = w.shape
    padded = torch.zeros(math.ceil(o / rows) * rows, math.ceil(i / cols) * cols)
    padded[:o, :i] = w
    blocks = padded.reshape(padded.shape[0] // rows, rows, padded.shape[1] // cols, cols).transpose(1, 2)
    return blocks.amin(dim=(-1, -2)), blocks.amax(dim=(-1, -2))


def compressed_tensors_oracle(path: Path) -> dict[str, torch.Tensor]:
    """{module: [out, in] float32 weight} as transformers dequantizes the checkpoint (compressed-tensors'
    decompressors), NVFP4 from its codes in exact float32 (compressed-tensors rounds it to bf16)."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    config = json.loads((path / "config.json").read_text())["quantization_config"]
    stored = _stored(path)
    if config["format"] == "nvfp4-pack-quantized":
        return {n.removesuffix(".weight_packed"): e2m1(stored[n]) * (
            stored[n.replace("weight_packed", "weight_scale")].float().repeat_interleave(16, dim=1)
            / stored[n.replace("weight_packed", "weight_global_scale")].float())
            for n in stored if n.endswith(".weight_packed")}
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                 quantization_config=CompressedTensorsConfig(dequantize=True))
    return {name: m.weight.detach().float().clone() for name, m in _linear_modules(model).items()
            if name != "lm_head"}


def e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[O, I/2] uint8 FP4 pairs (even element in the low nibble, bit 3 the sign) -> [O, I] float32."""
    out = torch.empty(packed.shape[0], packed.shape[1] * 2)
    for j in range(2):
        code = (packed.long() >> (4 * j)) & 0xF
        value = torch.tensor(E2M1)[code & 7]
        out[:, j::2] = torch.where(code >= 8, -value, value)
    return out


# ---- layouts written from integer codes (AutoAWQ GEMM, GPTQ, FineGrainedFP8) ---------------------------------------
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ WQLinear_GEMM.from_linear: nibble k holds column AWQ_ORDER[k]


def _words(fields: torch.Tensor) -> torch.Tensor:
    """[..., 8] 4-bit fields -> [...] int32 words, field k in bits 4k..4k+3."""
    word = sum(fields[..., k].long() << (4 * k) for k in range(8))
    return torch.where(word >= 2 ** 31, word - 2 ** 32, word).to(torch.int32)


def _codes(gen, shape, low=0, high=16) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=gen)


def _scales(gen, shape, inputs: int) -> torch.Tensor:
    return (torch.rand(shape, generator=gen) * 0.5 + 0.75) * (2.0 / math.sqrt(inputs) / 8)


def awq_gemm_tensors(q: torch.Tensor, z: torch.Tensor, s: torch.Tensor) -> dict[str, torch.Tensor]:
    """AutoAWQ GEMM's tensors of 4-bit codes q [I, O], zero points z [G, O] and fp16 scales s [G, O]: qweight
    [I, O/8] and qzeros [G, O/8] in AWQ's nibble order (scripts/int4_checkpoint.py writes its checkpoints with it)."""
    o = q.shape[1]
    pack = lambda v: _words(v.reshape(v.shape[0], o // 8, 8)[..., list(AWQ_ORDER)])  # noqa: E731
    return {"qweight": pack(q), "qzeros": pack(z), "scales": s}


def gptq_tensors(q: torch.Tensor, z: torch.Tensor, s: torch.Tensor, g_idx: torch.Tensor,
                 v2: bool = False) -> dict[str, torch.Tensor]:
    """GPTQ's tensors of 4-bit codes q [I, O], zero points z [G, O], fp16 scales s [G, O] and each input's group
    g_idx [I]: qweight [I/8, O] (word r holds inputs 8r..8r+7), qzeros [G, O/8] (v1 stores zero - 1)."""
    i, o = q.shape
    stored_z = z if v2 else (z - 1) & 0xF
    return {"qweight": _words(q.reshape(i // 8, 8, o).transpose(1, 2)),
            "qzeros": _words(stored_z.reshape(-1, o // 8, 8)), "scales": s, "g_idx": g_idx.to(torch.int32)}


def _rewrite(src: Path, out: Path, layers, quantization_config: dict) -> tuple[Path, dict]:
    """The base `src` with each linear of its decoder layers replaced by `layers(name, out, in)` -> (tensors,
    oracle weight); config.json gets `quantization_config`."""
    out.mkdir(parents=True, exist_ok=True)
    tensors, oracle = {}, {}
    for name, value in _stored(src).items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.startswith("model.layers.") and module.split(".", 3)[3] in LINEARS:
            stored, weight = layers(module, *value.shape)
            tensors |= {f"{module}.{k}": v.contiguous() for k, v in stored.items()}
            oracle[module] = weight
        else:
            tensors[name] = value
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(config | {"quantization_config": quantization_config}, indent=2))
    _copy_tokenizer(src, out)
    return out, oracle


def write_awq(src: Path, out: Path, group: int = 32, seed: int = 5) -> tuple[Path, dict]:
    """AutoAWQ GEMM: qweight [I, O/8] and qzeros [I/g, O/8] in AWQ's nibble order, fp16 scales [I/g, O]."""
    gen = torch.Generator().manual_seed(seed)

    def layer(module, o, i):
        q, z = _codes(gen, (i, o)), _codes(gen, (i // group, o))
        s = _scales(gen, (i // group, o), i).half()
        rows = torch.arange(i) // group
        weight = ((q - z[rows]).float() * s.float()[rows]).t()
        return awq_gemm_tensors(q, z, s), weight

    return _rewrite(src, out, layer, {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
                                      "version": "gemm", "modules_to_not_convert": None})


def write_gptq(src: Path, out: Path, group: int = 32, act_order: bool = False, v2: bool = False,
               seed: int = 6, sym: bool = False) -> tuple[Path, dict]:
    """GPTQ: qweight [I/8, O] packed along the input, qzeros [G, O/8] along the output (v1 stores zero - 1),
    fp16 scales [G, O], g_idx [I] (a permutation's groups with act-order); `sym`: every zero point 8 (GPTQ's sym=True
    stores them all the same)."""
    gen = torch.Generator().manual_seed(seed)

    def layer(module, o, i):
        q = _codes(gen, (i, o))
        z = torch.full((i // group, o), 8) if sym else _codes(gen, (i // group, o))
        s = _scales(gen, (i // group, o), i).half()
        g_idx = (torch.randperm(i, generator=gen) if act_order else torch.arange(i)) // group
        weight = ((q - z[g_idx]).float() * s.float()[g_idx]).t()
        return gptq_tensors(q, z, s, g_idx, v2), weight

    return _rewrite(src, out, layer, {"quant_method": "gptq", "bits": 4, "group_size": group,
                                      "desc_act": act_order, "sym": sym,
                                      "checkpoint_format": "gptq_v2" if v2 else "gptq"})


def write_fp8_blocks(src: Path, out: Path, block: int = 32) -> tuple[Path, dict]:
    """transformers' FineGrainedFP8: float8_e4m3fn weight, float32 weight_scale_inv per [block, block] (amax / 448,
    which the matmul multiplies by)."""
    weights = _stored(src)

    def layer(module, o, i):
        w = weights[f"{module}.weight"].float()
        rows, cols = math.ceil(o / block), math.ceil(i / block)
        padded = torch.zeros(rows * block, cols * block)
        padded[:o, :i] = w
        scale = padded.reshape(rows, block, cols, block).abs().amax(dim=(1, 3)) / 448.0  # [ceil(O/b), ceil(I/b)]
        full = scale.repeat_interleave(block, 0).repeat_interleave(block, 1)[:o, :i]
        codes = (w / full).to(torch.float8_e4m3fn)
        return {"weight": codes, "weight_scale_inv": scale}, codes.float() * full

    return _rewrite(src, out, layer, {"quant_method": "fp8", "activation_scheme": "dynamic",
                                      "weight_block_size": [block, block]})


def oracle_state_dict(base: Path, linears: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint's float tensors (embeddings, norms, head: stored plainly) with each quantized linear's oracle
    weight: what transformers runs as the dequantized model."""
    state = {n: v.float() for n, v in _stored(base).items() if v.is_floating_point() and v.dtype.itemsize > 1
             and n.endswith(".weight") and n.removesuffix(".weight") not in linears}
    return state | {f"{name}.weight": w for name, w in linears.items()}


def transformers_on(base: Path, linears: dict[str, torch.Tensor]):
    """transformers' model of `base`'s config running the oracle weights (fp32)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(base)
    config.quantization_config = None
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    missing, unexpected = model.load_state_dict(oracle_state_dict(base, linears), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if "lm_head.weight" in missing:
        model.tie_weights()
    return model


# name -> (writer, algo, its arguments): every layout eagle-trt dequantizes, one per scheme a user brings
SCHEMES = {
    "modelopt-fp8": ("modelopt", "FP8", {}),
    "modelopt-fp8-kv": ("modelopt", "FP8", {"kv_fp8": True}),
    "modelopt-fp8-channel": ("modelopt", "FP8_PER_CHANNEL_PER_TOKEN", {}),
    "modelopt-nvfp4": ("modelopt", "NVFP4", {}),
    "modelopt-w4a16-awq": ("modelopt", "W4A16_AWQ", {}),
    "modelopt-w4a8-awq": ("modelopt", "W4A8_AWQ", {}),
    "modelopt-int8-sq": ("modelopt", "W8A8_SQ_PER_CHANNEL", {}),
    "ct-fp8": ("ct", "FP8", {}),
    "ct-fp8-dynamic": ("ct", "FP8_DYNAMIC", {}),
    "ct-fp8-block": ("ct", "FP8_BLOCK", {"block": [32, 32]}),
    "ct-w4a16": ("ct", "W4A16", {"group_size": 32}),
    "ct-w4a16-asym": ("ct", "W4A16_ASYM", {"group_size": 32}),
    "ct-w8a16": ("ct", "W8A16", {"group_size": 32}),
    "ct-w8a8-int8": ("ct", "W8A8", {}),
    "ct-nvfp4": ("ct", "NVFP4", {}),
    "awq-gemm": ("awq", None, {}),
    "gptq-v1": ("gptq", None, {}),
    "gptq-v2-act-order": ("gptq", None, {"v2": True, "act_order": True}),
    "gptq-sym": ("gptq", None, {"sym": True}),
    "fp8-blocks": ("fp8", None, {}),
}


def write_scheme(name: str, src: Path, out: Path, **overrides) -> tuple[Path, dict | None]:
    """SCHEMES[name] written from the plain base `src` into `out` (its arguments updated by `overrides`):
    (checkpoint dir, {module: oracle weight}); the oracle is None where the caller does not need it computed."""
    writer, algo, kwargs = SCHEMES[name]
    kwargs = kwargs | overrides
    if writer == "modelopt":
        return write_modelopt(src, out, algo, **kwargs)[0], decode_modelopt(out)
    if writer == "ct":
        return write_compressed_tensors(src, out, algo, **kwargs), compressed_tensors_oracle(out)
    return {"awq": write_awq, "gptq": write_gptq, "fp8": write_fp8_blocks}[writer](src, out, **kwargs)
