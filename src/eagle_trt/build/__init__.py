"""Bundle building: TensorRT-LLM checkpoint conversion and engines, the LLM-API route, bundle orchestration."""
