"""The PyTorch EAGLE runtime: a lean Llama, EAGLE-1/2 and EAGLE-3 draft heads, static and dynamic trees, greedy
and lossless stochastic tree verification. It serves eagle_model where TensorRT-LLM is absent, is the oracle the
other paths are checked against, and measures acceptance for a base/draft pair."""

from eagle_trt.runtime.decoder import EagleDecoder
from eagle_trt.runtime.generation import GenerationResult, GenerationStats, StepOutput
from eagle_trt.runtime.verify import SamplingParams

__all__ = ["EagleDecoder", "GenerationResult", "GenerationStats", "SamplingParams", "StepOutput"]
