"""The EAGLE-3 route: TensorRT-LLM's LLM API (PyTorch backend) runs EAGLE-3 drafts; it is the only TensorRT-LLM
route after 1.2 (docs/trtllm_formats.md §6, §7). We write its configuration as YAML (PyYAML) for Triton's LLM-API
model (`model.yaml`, read by the container's triton_backend/all_models/llmapi/tensorrt_llm/1/model.py) and for
`trtllm-serve --extra_llm_api_options` (`llm_api_options.yaml`).

`speculative_config` follows `Eagle3DecodingConfig` (tensorrt_llm/llmapi/llm_args.py):
  chain:N          -> max_draft_len: N
  static tree      -> eagle_choices: [[0], [1], [0, 0], ...], max_draft_len: its depth
  dynamic:D,K,T    -> use_dynamic_tree: true, dynamic_tree_max_topK: K, max_draft_len: D+1, max_total_draft_tokens: T
(TensorRT-LLM's max_draft_len is the number of drafter layers = tree levels; our D, like EAGLE's `depth`, counts
the expansions after the root's top-K, so the tree has D+1 levels: eagle3_dynamic_tree.py sizes its history
K + K*K*(max_draft_len-1), our pool K + D*K*K.)
Capture layers: TensorRT-LLM's `eagle3_layers_to_capture` counts layer OUTPUTS (default {1, L//2-1, L-4}); a
DraftSpec counts layer INPUTS (eagle_trt.draft_layouts: one rule for every layout) - the default three are the same
hidden states. We write the key only when the draft reads other layers, converted input -> output (index - 1).
"""

from __future__ import annotations

from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.errors import EagleTrtError
from eagle_trt.tree import TreeConfig, validate_for_llmapi

MODEL_YAML = "model.yaml"
SERVE_YAML = "llm_api_options.yaml"


def trtllm_default_capture_outputs(num_layers: int) -> tuple[int, int, int]:
    """TensorRT-LLM's default eagle3_layers_to_capture: layer outputs {1, L//2-1, L-4} (llm_args.py)."""
    return 1, num_layers // 2 - 1, num_layers - 4


def layers_to_capture(capture_inputs: tuple[int, ...] | None, num_layers: int) -> list[int] | None:
    """`eagle3_layers_to_capture` for a draft that reads the inputs of `capture_inputs` (None: a draft that names
    none, the standard layers): None when TensorRT-LLM's default is already right, else the output indices (input
    index - 1)."""
    if capture_inputs is None:
        return None
    if any(i < 1 or i > num_layers for i in capture_inputs):
        raise EagleTrtError(f"the draft captures base layers {list(capture_inputs)}, which TensorRT-LLM cannot name "
                            f"(layer inputs 1..{num_layers} of a {num_layers}-layer base are the outputs 0.."
                            f"{num_layers - 1}; input 0, the embeddings, has no output index)",
                            "use --engine pytorch, or train the draft on the standard layers")
    outputs = sorted(i - 1 for i in capture_inputs)
    if tuple(outputs) == tuple(sorted(trtllm_default_capture_outputs(num_layers))):
        return None
    return outputs


def tree_fields(cfg: TreeConfig) -> dict:
    """Our --tree value as Eagle3DecodingConfig fields (the module docstring has the table)."""
    validate_for_llmapi(cfg)
    if cfg.kind == "chain":
        return {"max_draft_len": cfg.tree.num_nodes}
    if cfg.kind == "static":
        return {"max_draft_len": cfg.tree.depth, "eagle_choices": cfg.tree.to_list()}
    return {"max_draft_len": cfg.depth + 1, "use_dynamic_tree": True, "dynamic_tree_max_topK": cfg.top_k,
            "max_total_draft_tokens": cfg.total_tokens}


def speculative_config(spec: BuildSpec) -> dict:
    config = {"decoding_type": "Eagle3"} | tree_fields(spec.tree)
    config["speculative_model"] = str(spec.engine_draft_path)
    capture = layers_to_capture(spec.draft.capture_layers, spec.base.num_hidden_layers)
    if capture is not None:
        config["eagle3_layers_to_capture"] = capture
    return config


def llmapi_options(spec: BuildSpec, speculative: bool = True) -> dict:
    """LLM() arguments; the base model's options are the same without speculative_config."""
    options = {"backend": "pytorch", "tensor_parallel_size": spec.tp_size, "pipeline_parallel_size": 1,
               "max_batch_size": spec.max_batch_size, "max_seq_len": spec.max_seq_len,
               "max_num_tokens": spec.max_num_tokens}
    if speculative and spec.draft is not None:
        options["speculative_config"] = speculative_config(spec)
    return options


def model_yaml(spec: BuildSpec, speculative: bool = True, decoupled: bool = True) -> dict:
    """Triton LLM-API model.yaml: `model` + LLM() arguments + `triton_config` (max_batch_size 0: that model does
    not batch; decoupled: streaming)."""
    return {"model": str(spec.engine_base_path)} | llmapi_options(spec, speculative) | {
        "triton_config": {"max_batch_size": 0, "decoupled": decoupled}}


def dump_yaml(data: dict) -> str:
    import yaml  # pyyaml: a core dependency

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def write_llmapi_config(spec: BuildSpec, path: Path, speculative: bool = True, decoupled: bool = True) -> Path:
    """model.yaml at `path`, and llm_api_options.yaml for trtllm-serve beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# TensorRT-LLM LLM-API model (PyTorch backend), written by eagle-trt\n"
                    + dump_yaml(model_yaml(spec, speculative, decoupled)), encoding="utf-8")
    (path.parent / SERVE_YAML).write_text(
        f"# trtllm-serve {spec.engine_base_path} --backend pytorch --extra_llm_api_options {SERVE_YAML}\n"
        + dump_yaml(llmapi_options(spec, speculative)), encoding="utf-8")
    return path
