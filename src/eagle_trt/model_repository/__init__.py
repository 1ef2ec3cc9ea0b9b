"""The Triton model repository: typed configs (configs.py), the layout per engine kind (layout.py) and the python
models shipped as package data (python_models/)."""

from eagle_trt.model_repository.configs import ServingOptions
from eagle_trt.model_repository.layout import ENSEMBLES, write_model_repository

__all__ = ["ENSEMBLES", "ServingOptions", "write_model_repository"]
