"""eagle-trt: deploy EAGLE speculative decoding (TensorRT-LLM engines, Triton model repository, PyTorch runtime,
perf harness) from a Hugging Face Llama-family base and an EAGLE draft."""

from eagle_trt.errors import EagleTrtError

__version__ = "0.1.0"
__all__ = ["EagleTrtError", "__version__"]
