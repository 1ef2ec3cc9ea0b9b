"""Serving a bundle: the real tritonserver process (see tritonserver.py)."""

from eagle_trt.serving.tritonserver import DEFAULT_MODELS, TritonServer, find_tritonserver, free_port

__all__ = ["DEFAULT_MODELS", "TritonServer", "find_tritonserver", "free_port"]
