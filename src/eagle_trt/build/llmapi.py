"""The EAGLE-3 route: TensorRT-LLM's LLM API (PyTorch backend) runs EAGLE-3 drafts; the engine path does not
(research/trtllm_eagle.md §H). We write its configuration for Triton's LLM-API model (model.yaml) and for
`trtllm-serve --extra_llm_api_options` (llm_api_options.yaml)."""

from __future__ import annotations

import json
from pathlib import Path


def speculative_config(spec) -> dict:
    n = spec.base.num_hidden_layers
    layers = [2, n // 2, n - 3] if n >= 4 else [0, n // 2, n - 1]  # what EAGLE-3 captures (research §3)
    return {"decoding_type": "Eagle3", "max_draft_len": spec.runtime_tree_config.max_draft_tokens
            if spec.runtime_tree_config.kind == "chain" else spec.num_eagle_layers,
            "speculative_model_dir": str(spec.draft.path), "eagle3_layers_to_capture": layers}


def llmapi_options(spec, speculative: bool = True) -> dict:
    options = {"backend": "pytorch", "tensor_parallel_size": spec.tp_size, "pipeline_parallel_size": 1,
               "max_batch_size": spec.max_batch_size, "max_seq_len": spec.max_seq_len,
               "max_num_tokens": spec.max_num_tokens}
    if speculative and spec.draft is not None:
        options["speculative_config"] = speculative_config(spec)
    return options


def model_yaml(spec, speculative: bool = True) -> dict:
    """Triton LLM-API model (all_models/llmapi/tensorrt_llm/1/model.yaml): LLM() arguments + triton_config."""
    return {"model": str(spec.base.path)} | llmapi_options(spec, speculative) | {
        "triton_config": {"max_batch_size": 0, "decoupled": True}}


def to_yaml(data, indent: int = 0) -> str:
    """Block-style YAML for nested dicts/lists of scalars (scalars JSON-quoted, which YAML reads the same)."""
    pad = "  " * indent
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines.append(to_yaml(value, indent + 1))
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: {json.dumps(value)}")
        else:
            lines.append(f"{pad}{key}: {json.dumps(value)}")
    return "\n".join(lines)


def write_llmapi_config(spec, path: Path, speculative: bool = True) -> Path:
    """model.yaml at `path`, and llm_api_options.yaml for trtllm-serve beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# TensorRT-LLM LLM-API model (PyTorch backend), written by eagle-trt\n"
                    + to_yaml(model_yaml(spec, speculative)) + "\n", encoding="utf-8")
    (path.parent / "llm_api_options.yaml").write_text(
        f"# trtllm-serve {spec.base.path} --backend pytorch --extra_llm_api_options llm_api_options.yaml\n"
        + to_yaml(llmapi_options(spec, speculative)) + "\n", encoding="utf-8")
    return path
