"""Serving a bundle: the real tritonserver process (tritonserver.py) and its supervisor (supervisor.py)."""

from eagle_trt.serving.supervisor import Supervisor
from eagle_trt.serving.tritonserver import DEFAULT_MODELS, TritonServer, find_tritonserver, free_port

__all__ = ["DEFAULT_MODELS", "Supervisor", "TritonServer", "find_tritonserver", "free_port"]
