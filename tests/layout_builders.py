"""Write an EAGLE-3 draft (SafeAILab layout, as train-draft writes it) in the other published layouts, as their
writers lay them out (read at the sources eagle_trt.draft_layouts names): the same weights under another tensor
prefix, another config shape and another capture-id convention, plus each layout's optional extra norms."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

LAYOUTS = ("safeailab-eagle3", "specforge", "angelslim", "modelopt", "speculators")
LLAMA_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
              "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta", "vocab_size")


def write_layout(src: Path, out: Path, layout: str, capture_inputs: list[int] | None = None,
                 extra: dict | None = None, base: Path | None = None) -> Path:
    """`src` (SafeAILab EAGLE-3) rewritten as `layout`. capture_inputs: layer inputs the draft reads, written in the
    layout's own convention (outputs = inputs - 1 for SpecForge, AngelSlim, Model-Optimizer). extra: tensors to add
    ({name: tensor}) and config switches ({"fc_norm": True, ...}) under the key "tensors" / "config"."""
    extra = extra or {}
    cfg = json.loads((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    layer = {k: v for k, v in cfg.items() if k in LLAMA_KEYS} | {"num_hidden_layers": 1, "model_type": "llama"}
    outputs = None if capture_inputs is None else [i - 1 for i in capture_inputs]
    if layout in ("modelopt", "speculators"):
        tensors = {("layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k): v
                   for k, v in tensors.items()}
    if layout == "safeailab-eagle3":
        new = dict(cfg) | ({} if capture_inputs is None else {"eagle_aux_hidden_state_layer_ids": capture_inputs})
    elif layout == "specforge":
        new = dict(cfg) | {"architectures": ["LlamaForCausalLMEagle3"]}
        if outputs is not None:
            new["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": outputs}
    elif layout == "angelslim":
        new = dict(cfg) | {"architectures": ["Eagle3LlamaForCausalLM"], "target_model_type": "llama"}
        if outputs is not None:
            new["aux_hidden_states_layer_ids"] = outputs
    elif layout == "modelopt":
        tensors.pop("t2d", None)  # Model-Optimizer ships d2t only
        new = {k: v for k, v in cfg.items() if k != "eagle_trt_training"} | {
            "architectures": ["LlamaForCausalLMEagle3"],
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": outputs or [], "use_aux_hidden_state": True,
                             "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                             "use_mtp_layernorm": False, "next_layer_regular": True}}
    elif layout == "speculators":
        new = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.3",
               "draft_vocab_size": cfg["draft_vocab_size"], "norm_before_residual": False, "target_hidden_size": None,
               "eagle_aux_hidden_state_layer_ids": capture_inputs, "transformer_layer_config": layer,
               "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                      "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                      "verifier": {"name_or_path": "base", "architectures": ["LlamaForCausalLM"]}}}
        if base is not None:  # speculators saves its frozen copy of the verifier's embeddings
            tensors["embed_tokens.weight"] = _base_embed(base)
    else:
        raise ValueError(layout)
    new |= extra.get("config", {})
    tensors |= extra.get("tensors", {})
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(new, indent=2))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    return out


def _base_embed(base: Path) -> torch.Tensor:
    return load_file(str(next(base.glob("*.safetensors"))))["model.embed_tokens.weight"]
