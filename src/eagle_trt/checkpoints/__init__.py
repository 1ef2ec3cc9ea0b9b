"""Read Hugging Face checkpoints tensor by tensor: safetensors (single or sharded), pytorch_model*.bin
(weights_only), and GGUF (dequantized, HF names).

`open_weights(dir)` picks the format and returns a WeightReader: names, shapes and dtypes without loading weights,
and one tensor at a time by name, so peak memory stays near the largest tensor, never the whole model.
"""

from eagle_trt.checkpoints.readers import WeightReader, find_weight_files, open_weights

__all__ = ["WeightReader", "find_weight_files", "open_weights"]
