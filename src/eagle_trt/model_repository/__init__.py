"""The Triton model repository's shared parts: typed configs (configs.py), the ensembles, text models and the
acceptance step every engine kind builds on (layout.py), and the python models shipped as package data
(python_models/). Each engine kind writes its own models (eagle_trt.engines)."""

from eagle_trt.model_repository.configs import ServingOptions
from eagle_trt.model_repository.layout import ENSEMBLES

__all__ = ["ENSEMBLES", "ServingOptions"]
