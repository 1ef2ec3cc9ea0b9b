"""A draft in the layout an engine reads (draft_layouts.served_layout_change says when one is needed): the same
tensors under the names that engine loads and a config it parses, written into the bundle (OUT/draft), so the
serving container never meets a layout it misreads.

- llmapi: SafeAILab's EAGLE-3 layout (`midlayer.*`, flat `LlamaForCausalLM` config with `draft_vocab_size`,
  `target_hidden_size`, and the `fc_norm` / `norm_output` switches TensorRT-LLM's draft model reads);
- vllm: the draft's own tensors and config, its capture ids moved to the top-level
  `eagle_aux_hidden_state_layer_ids` as layer inputs (the convention vLLM reads).
"""

from __future__ import annotations

import json
from pathlib import Path

from eagle_trt.checkpoints import open_weights
from eagle_trt.draft_layouts import one_layer_llama_config
from eagle_trt.spec import DraftSpec, read_config


def served_config(draft: DraftSpec, engine: str) -> dict:
    """config.json of the copy `engine` reads."""
    original = read_config(draft.path, "draft")
    if engine == "vllm":
        cfg = {k: v for k, v in original.items() if k not in ("aux_hidden_states_layer_ids",)}
        if isinstance(cfg.get("eagle_config"), dict):
            cfg["eagle_config"] = {k: v for k, v in cfg["eagle_config"].items()
                                   if k != "eagle_aux_hidden_state_layer_ids"}
        return cfg | {"eagle_aux_hidden_state_layer_ids": list(draft.capture_layers)}
    cfg = one_layer_llama_config(draft, rms_norm_eps=draft.rms_norm_eps, rope_theta=draft.rope_theta,
                                 max_position_embeddings=draft.max_position_embeddings,
                                 rope_scaling=draft.rope_scaling,
                                 draft_vocab_size=draft.draft_vocab_size or draft.vocab_size,
                                 attention_bias=draft.qkv_bias, mlp_bias=draft.mlp_bias)
    if draft.target_hidden_size:
        cfg["target_hidden_size"] = draft.target_hidden_size
    cfg |= {k: True for k in ("fc_norm", "norm_output") if getattr(draft, k)}
    return cfg | {"eagle_trt_source": {"path": str(draft.path), "layout": draft.layout}}


def served_name(draft: DraftSpec, engine: str, name: str) -> str:
    """The tensor's name in the copy `engine` reads."""
    if engine == "llmapi" and name.startswith(draft.prefix):
        return "midlayer." + name[len(draft.prefix):]
    return name


def write_served_draft(draft: DraftSpec, engine: str, out: Path) -> Path:
    """Write the copy into `out` (a directory inside the bundle being built)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    with open_weights(draft.path) as reader:
        tensors = {served_name(draft, engine, n): reader.get(n).contiguous() for n in reader.names()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(served_config(draft, engine), indent=2) + "\n", encoding="utf-8")
    return out
