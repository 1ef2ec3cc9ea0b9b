"""The tree-attention kernel as a TensorRT plugin, through TensorRT's Python plugin API (`tensorrt.plugin`,
TensorRT >= 10.6): a shape/dtype description and an implementation that calls the Triton host wrapper on the
plugin's CUDA stream. Thin on purpose: everything it wraps (tree_attention, its layouts) is tested on its own.

TensorRT finds the plugin by name once this module's `register()` has run in the process that builds or deserializes
the engine (e.g. `python -c "import eagle_trt.kernels.trt_plugin as p; p.register()"` before trtllm-build, or
the same import in the serving process). This environment has no TensorRT, so it is never exercised here.
"""

from __future__ import annotations

PLUGIN_NAME = "eagle_trt::tree_attention"
_registered = False


def describe_plugin() -> dict:
    """What `eagle-trt build` records in the bundle."""
    return {
        "name": PLUGIN_NAME, "module": __name__, "register": f"import {__name__} as p; p.register()",
        "inputs": {"q": "[total_q, Hq, D] fp16|bf16", "k": "[B, Hkv, S, D]", "v": "[B, Hkv, S, D]",
                   "packed_mask": "[total_q, ceil(N/32)] int32 (TRT-LLM spec_decoding_packed_mask rows)",
                   "cu_q": "[B+1] int32", "prefix_lens": "[B] int32"},
        "attributes": {"sm_scale": "float"}, "outputs": {"out": "like q"},
        "requires": "tensorrt >= 10.6 (tensorrt.plugin), triton, a CUDA GPU",
        "note": "TensorRT-LLM's own engines verify trees inside the GPT-attention plugin (XQA spec-decoding "
                "kernels); this plugin is for engines where those kernels are missing for the GPU or head size.",
    }


def register() -> None:
    """Register the plugin with TensorRT (idempotent)."""
    global _registered
    if _registered:
        return
    try:
        import tensorrt.plugin as trtp
    except ImportError as exc:
        from eagle_trt.errors import EagleTrtError

        raise EagleTrtError(f"TensorRT's Python plugin API is not available ({exc})",
                            "install TensorRT >= 10.6 (the TensorRT-LLM container has it)") from None

    @trtp.register(PLUGIN_NAME)
    def _desc(q: trtp.TensorDesc, k: trtp.TensorDesc, v: trtp.TensorDesc, packed_mask: trtp.TensorDesc,
              cu_q: trtp.TensorDesc, prefix_lens: trtp.TensorDesc, sm_scale: float) -> trtp.TensorDesc:
        return q.like()

    @trtp.impl(PLUGIN_NAME)
    def _impl(q: trtp.Tensor, k: trtp.Tensor, v: trtp.Tensor, packed_mask: trtp.Tensor, cu_q: trtp.Tensor,
              prefix_lens: trtp.Tensor, sm_scale: float, outputs: tuple, stream: int) -> None:
        import torch

        from eagle_trt.kernels.tree_attention import tree_attention

        as_torch = (lambda t: torch.as_tensor(t, device="cuda"))  # noqa: E731 - __cuda_array_interface__
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            tree_attention(as_torch(q), as_torch(k), as_torch(v), as_torch(packed_mask), as_torch(cu_q),
                           as_torch(prefix_lens), sm_scale=sm_scale, out=as_torch(outputs[0]))

    _registered = True
