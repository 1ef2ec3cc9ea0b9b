"""What the engines that read quantized checkpoints themselves (the LLM API, vLLM) read, at each one's loader source;
each engine module asks here (`llmapi_refusal`, `vllm_refusal`). Ours and the TensorRT engine path decide in their
own modules.

- pytorch (ours): every layout quantization.formats reads, dequantized exactly at load into the engine's fp32 or
  int8 path; KV-cache scales are not applied (K/V stay in the engine's precision).
- llmapi (TensorRT-LLM's PyTorch backend, `_torch/model_config.py` ModelConfig.from_pretrained and
  load_hf_quant_config): Model-Optimizer checkpoints (hf_quant_config.json; config.json's quant_method "modelopt"
  from 1.3, PR #14088) with the quant_algo values its PyTorch backend runs (docs/source/features/quantization.md,
  "Model Supported Matrix": FP8, FP8 per-channel, FP8 block, NVFP4, W4A16 / W4A8 AWQ); transformers' FP8 with
  128x128 blocks (FP8_BLOCK_SCALES); compressed-tensors from 1.3 (FP8 per-channel with per-token activations, FP8
  128-blocks; NVFP4 from 1.4, models/quant_config_utils.py). AutoAWQ / GPTQ configs raise "Unsupported
  quantization_config" (llmapi/llm_utils.py). The base is passed through unchanged; the draft stays unquantized
  (its own checkpoint's config decides, `_torch/models/modeling_speculative.py`).
- vllm (vllm/model_executor/layers/quantization, read at vLLM 0.33.0): Model-Optimizer FP8, FP8_PER_CHANNEL_PER_TOKEN,
  FP8_PB_WO, NVFP4, W4A16_NVFP4, MIXED_PRECISION of those (modelopt.py QUANT_ALGOS; a legacy hf_quant_config.json
  is recognised by producer.name "modelopt" only); compressed-tensors (W8A8 / W8A16 FP8, INT8, WNA16, NVFP4);
  AutoAWQ; GPTQ (v1 checkpoints); FP8 (`fp8`). The draft loads unquantized (get_draft_quant_config).
- trtllm: refused. TensorRT-LLM's EAGLE converter (examples/eagle/convert_checkpoint.py, <= 1.2) reads unquantized
  Hugging Face weights only (no FP8 input, no scale tensors), and eagle-trt writes no quantized TensorRT-LLM
  checkpoint: dequantizing into an unquantized one would build a different engine than the user's model.
"""

from __future__ import annotations

from eagle_trt.engines.llmapi_release import LlmapiRelease
from eagle_trt.quantization.scheme import QuantGroup, Quantization

LLMAPI_MODELOPT = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "NVFP4", "W4A16_AWQ", "W4A8_AWQ")
VLLM_MODELOPT = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "W4A16_NVFP4")
VLLM_CT = ("float-quantized", "int-quantized", "naive-quantized", "pack-quantized", "nvfp4-pack-quantized")


def _ct_kind(group: QuantGroup) -> str:
    """A compressed-tensors group as TensorRT-LLM's loader names what it reads."""
    w = group.weights
    if w.layout == "fp8" and w.granularity == "channel" and group.activations and "token" in group.activations:
        return "fp8-channel"
    if w.layout == "fp8" and w.granularity == "block" and w.block == (128, 128):
        return "fp8-block"
    if w.layout == "nvfp4":
        return "nvfp4"
    return f"{w.describe()} ({group.algo})"


CT_KINDS = {"fp8-channel": "FP8 per-channel (per-token activations)", "fp8-block": "FP8 128x128 blocks",
            "nvfp4": "NVFP4"}


def llmapi_refusal(quant: Quantization, release: LlmapiRelease) -> str | None:
    """The reasons name what TensorRT-LLM reads in every release line, and from which release where that differs,
    so one reason reads the same whichever --backend-version was asked for."""
    if quant.method == "modelopt":
        if quant.source != "hf_quant_config.json" and not release.reads_modelopt_inline:
            return (f"TensorRT-LLM {release.version} reads Model-Optimizer checkpoints from hf_quant_config.json, which "
                    "this base lacks (config.json's quantization_config is read from 1.3 on: --backend-version 1.3)")
        allowed = LLMAPI_MODELOPT + (("FP8_PB_WO",) if release.reads_modelopt_inline else ())
        bad = sorted({g.algo for g in quant.groups if g.algo not in allowed})
        return (f"TensorRT-LLM's PyTorch backend runs Model-Optimizer {', '.join(LLMAPI_MODELOPT)} checkpoints "
                f"(and FP8_PB_WO from 1.3), not {', '.join(bad)}" if bad else None)
    if quant.method == "fp8":
        block = quant.groups[0].weights.block
        return None if block == (128, 128) else \
            f"TensorRT-LLM reads transformers' FP8 checkpoints with 128x128 blocks only, not {block[0]}x{block[1]}"
    if quant.method == "compressed-tensors":
        kinds = {_ct_kind(g) for g in quant.groups}
        if kinds <= set(release.compressed_tensors):
            return None
        return ("TensorRT-LLM reads compressed-tensors checkpoints from 1.3 on, FP8 per-channel (per-token "
                "activations) and FP8 128x128 blocks (NVFP4 from 1.4), not "
                + ", ".join(sorted(CT_KINDS.get(k, k) for k in kinds - set(release.compressed_tensors))))
    if quant.method in ("awq", "gptq"):
        return (f"TensorRT-LLM's PyTorch backend does not read {quant.method.upper()} quantization configs "
                "('Unsupported quantization_config', llmapi/llm_utils.py); a Model-Optimizer W4A16_AWQ export of "
                "the base runs there")
    return f"TensorRT-LLM does not read {quant.method.upper()} checkpoints"


def vllm_refusal(quant: Quantization) -> str | None:
    if quant.method == "modelopt":
        bad = sorted({g.algo for g in quant.groups if g.algo not in VLLM_MODELOPT})
        if bad or not quant.groups:
            return (f"vLLM's Model-Optimizer loader runs {', '.join(VLLM_MODELOPT)} (and mixes of them), not "
                    f"{', '.join(bad) or quant.algo} (vllm/model_executor/layers/quantization/modelopt.py)")
        if quant.source == "hf_quant_config.json" and quant.producer != "modelopt":
            return ("vLLM recognises a hf_quant_config.json by producer.name 'modelopt', which this one lacks: it "
                    "would load the weights as if unquantized")
        return None
    if quant.method == "compressed-tensors":
        bad = sorted({g.algo for g in quant.groups if g.algo not in VLLM_CT})
        return f"vLLM's compressed-tensors loader has no {', '.join(bad)} scheme" if bad else None
    if quant.method == "gptq" and quant.algo != "gptq":
        return "vLLM reads GPTQ checkpoints in GPTQ's v1 format (checkpoint_format gptq), not gptq_v2"
    if quant.method == "gguf":
        return ("eagle-trt's vLLM bundle hands vLLM a Hugging Face directory; vLLM loads a GGUF base only as one file "
                "with a separate tokenizer")
    return None
