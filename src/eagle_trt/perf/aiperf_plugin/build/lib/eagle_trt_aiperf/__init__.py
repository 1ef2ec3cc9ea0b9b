"""AIPerf plugin for eagle-trt bundles: the `triton-generate` endpoint (Triton's generate extension with the
TensorRT-LLM ensemble's field names) and a spec-decode adapter that turns the cumulative acceptance outputs
(total_accepted_draft_tokens / total_draft_tokens) into AIPerf's acceptance metrics."""
