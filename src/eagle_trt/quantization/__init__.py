"""Quantized bases: how a checkpoint's weights are stored (`read_quantization`: Model-Optimizer, compressed-tensors,
AutoAWQ, GPTQ, FP8 blocks; GGUF blocks as the GGUF reader names them), the tensors each layout carries and their
exact dequantization (`reader.DequantizedWeights`, `reader.account`: these import torch). Which engine runs which
scheme is each engine's (eagle_trt.engines). docs/quantization.md has the tables."""

from eagle_trt.quantization.config import HF_QUANT_CONFIG, read_quantization
from eagle_trt.quantization.scheme import Quantization

__all__ = ["HF_QUANT_CONFIG", "Quantization", "read_quantization"]
