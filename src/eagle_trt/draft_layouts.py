"""Published EAGLE draft layouts, read into one description at the door (`read_draft`), so that nothing after
`DraftSpec.from_dir` knows who wrote a draft.

- safeailab-eagle1: SafeAILab/EAGLE `eagle/model/cnets1.py`. fc [H, 2H] (+bias), `layers.0.*` without input norm,
  config `qkv_bias` (EAGLE-Qwen2 drafts: q/k/v biases).
- safeailab-eagle3: SafeAILab/EAGLE `eagle/model/cnets.py`. `midlayer.*`, fc [H, 3H_t], norm, lm_head [V_d, H],
  d2t (int64 offsets) / t2d.
- specforge: sgl-project/SpecForge `specforge/modeling/draft/llama3_eagle.py`. `LlamaForCausalLMEagle3`, optional
  `fc_norm.{0,1,2}`, `norm_output`, capture ids in `eagle_config`.
- angelslim: Tencent/AngelSlim `angelslim/compressor/speculative/train/models/draft/llama_eagle3.py`.
  `Eagle3LlamaForCausalLM`, capture ids in `aux_hidden_states_layer_ids`.
- modelopt: NVIDIA/Model-Optimizer `modelopt/torch/export/plugins/hf_spec_export.py`. `layers.0.*`, nested
  `eagle_config`, attention/MLP biases per config, `use_last_layernorm`.
- speculators: vllm-project/speculators `src/speculators/models/eagle3/` (consumer: vLLM `llama_eagle3.py`).
  `speculators_model_type`, the layer's config in `transformer_layer_config`, `layers.0.*`, `norm_before_residual`
  (default true when absent, as vLLM reads it), `norm_before_fc` (`input_norm`), `fc_norm`, `norm_output`, Qwen3
  layers with q/k norms.

Capture layers, one rule: EAGLE-3 reads three base hidden states. We count them as layer INPUTS (Hugging Face's
`output_hidden_states` index: 0 = embeddings, i = what enters layer i), as SafeAILab (inputs of 2, L//2, L-3 by
default), vLLM and speculators do. Model-Optimizer, SpecForge and AngelSlim name layer OUTPUTS (default
{1, L//2-1, L-4}, the same three states), so their ids are converted here (+1); TensorRT-LLM's
`eagle3_layers_to_capture` counts outputs too (build/llmapi.py converts back).

Math switches, as the consumers compute them (vLLM `llama_eagle3.py`, TensorRT-LLM `modeling_speculative.py`):
`norm_before_residual` (the layer's residual is hidden_norm(g), not g), `input_norm` (speculators `norm_before_fc`:
one RMSNorm over the concatenated captures before fc), `fc_norm` (one RMSNorm per capture before fc),
`norm_output` (the hidden carried to the next draft step is the final-normed one), `final_norm` (Model-Optimizer's
`use_last_layernorm`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle_trt.errors import EagleTrtError
from eagle_trt.families import FAMILY_BY_TYPE, read_architecture, read_rope, require_int


@dataclass(frozen=True)
class Layout:
    name: str
    label: str
    format: str  # "eagle1" | "eagle3"
    capture_key: tuple[str, ...]  # config path of explicit capture ids
    capture_counts_outputs: bool  # ids name layer outputs (converted +1 to inputs)


LAYOUTS = {layout.name: layout for layout in (
    Layout("safeailab-eagle1", "SafeAILab EAGLE-1/2", "eagle1", (), False),
    Layout("safeailab-eagle3", "SafeAILab EAGLE-3", "eagle3", ("eagle_aux_hidden_state_layer_ids",), False),
    Layout("specforge", "SpecForge", "eagle3", ("eagle_config", "eagle_aux_hidden_state_layer_ids"), True),
    Layout("angelslim", "AngelSlim", "eagle3", ("aux_hidden_states_layer_ids",), True),
    Layout("modelopt", "Model-Optimizer export", "eagle3", ("eagle_config", "eagle_aux_hidden_state_layer_ids"),
           True),
    Layout("speculators", "vLLM speculators", "eagle3", ("eagle_aux_hidden_state_layer_ids",), False),
)}


def standard_capture_layers(num_layers: int) -> tuple[int, int, int]:
    """The base layers whose input EAGLE-3 reads by default, ascending as SafeAILab concatenates them (2, L//2, L-3;
    tiny bases: 0, L//2, L-1)."""
    n = num_layers
    return tuple(sorted((2, n // 2, n - 3) if n >= 4 else (0, n // 2, n - 1)))


def one_layer_llama_config(dims, *, rms_norm_eps: float, rope_theta: float, max_position_embeddings: int,
                           **extra) -> dict:
    """config.json of a one-layer draft in SafeAILab's layout (a `LlamaForCausalLM` config) for `dims` (a LayerDims),
    with the format's own keys in `extra`: what train-draft writes and what TensorRT-LLM's LLM API reads."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **dims.dims(), "num_hidden_layers": 1,
            "hidden_act": "silu", "max_position_embeddings": max_position_embeddings, "rms_norm_eps": rms_norm_eps,
            "rope_theta": rope_theta, "tie_word_embeddings": False, **extra}


def detect_layout(path: Path, names: set[str], cfg: dict) -> Layout:
    """Which published layout a draft directory is in, from its config keys and tensor names."""
    arch = (cfg.get("architectures") or [""])[0]
    if "speculators_model_type" in cfg:
        if cfg["speculators_model_type"] != "eagle3":
            raise EagleTrtError(f"{path}: a speculators {cfg['speculators_model_type']!r} draft is not EAGLE",
                                "pass an EAGLE-1/2 or EAGLE-3 draft")
        return LAYOUTS["speculators"]
    mid = any(n.startswith("midlayer.") for n in names)
    layer0 = any(n.startswith("layers.0.") for n in names)
    eagle3 = mid or "d2t" in names or "draft_vocab_size" in cfg or "layers.0.hidden_norm.weight" in names
    if isinstance(cfg.get("eagle_config"), dict) and "use_aux_hidden_state" in cfg["eagle_config"]:
        if not cfg["eagle_config"]["use_aux_hidden_state"]:
            raise EagleTrtError(f"{path}: a Model-Optimizer EAGLE export without aux hidden states "
                                "(use_aux_hidden_state false) is not supported",
                                "export the draft as EAGLE-3 (use_aux_hidden_state true)")
        return LAYOUTS["modelopt"]
    if eagle3 and (mid or layer0):
        if arch == "Eagle3LlamaForCausalLM" or "target_model_type" in cfg:
            return LAYOUTS["angelslim"]
        if arch == "LlamaForCausalLMEagle3":
            return LAYOUTS["specforge"]
        return LAYOUTS["safeailab-eagle3"]
    if "fc.weight" in names and layer0:
        return LAYOUTS["safeailab-eagle1"]
    if any(n.startswith("model.layers.") for n in names):
        raise EagleTrtError(f"{path} looks like a base model (it has model.layers.*), not an EAGLE draft",
                            "pass the EAGLE draft checkpoint with --draft (e.g. yuhuili/EAGLE-LLaMA3-Instruct-8B)")
    sample = ", ".join(sorted(names)[:4]) or "no tensors"
    raise EagleTrtError(f"unknown draft layout in {path} (tensors: {sample}, ...)",
                        "expected an EAGLE-1/2 draft (fc.weight + layers.0.*) or an EAGLE-3 draft (midlayer.* or "
                        f"layers.0.hidden_norm, d2t); eagle-trt reads {', '.join(x.label for x in LAYOUTS.values())}")


def _capture(cfg: dict, cfg_file: Path, layout: Layout) -> tuple[tuple[int, ...] | None, str]:
    """(capture layers as inputs or None for the standard ones, where they came from)."""
    value, where = cfg, []
    for key in layout.capture_key:
        value = value.get(key) if isinstance(value, dict) else None
        where.append(key)
    if value is None and layout.name in ("safeailab-eagle3", "specforge", "angelslim", "modelopt"):
        top = cfg.get("eagle_aux_hidden_state_layer_ids")  # a top-level key: the vLLM convention (inputs)
        if top is not None:
            return _capture_ids(top, cfg_file, "eagle_aux_hidden_state_layer_ids"), \
                "eagle_aux_hidden_state_layer_ids (layer inputs)"
    if not value:  # absent or [] (Model-Optimizer writes [] for its defaults)
        return None, "the standard layers"
    ids = _capture_ids(value, cfg_file, ".".join(where))
    if layout.capture_counts_outputs:
        return tuple(i + 1 for i in ids), f"{'.'.join(where)} (layer outputs {list(ids)}, read as inputs +1)"
    return ids, f"{'.'.join(where)} (layer inputs)"


def _capture_ids(value, cfg_file: Path, key: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in value):
        raise EagleTrtError(f"{cfg_file}: {key} = {value!r} is not a list of layer indices",
                            "write the base layers the draft was trained on, e.g. [2, 16, 29], or remove the key")
    return tuple(sorted(value))


def read_draft(path: Path, cfg: dict, reader) -> dict:
    """Every DraftSpec field (but path) of the draft in `path`, whatever its layout."""
    cfg_file = path / "config.json"
    names = set(reader.names())
    layout = detect_layout(path, names, cfg)
    layer_cfg = cfg.get("transformer_layer_config") if layout.name == "speculators" else cfg
    if not isinstance(layer_cfg, dict):
        raise EagleTrtError(f"{cfg_file}: a speculators config needs a transformer_layer_config object",
                            "restore the original config.json")
    if "fc.weight" not in names:
        raise EagleTrtError(f"the draft {path} has no fc.weight", "the checkpoint is incomplete; re-download it")
    layers = int(layer_cfg.get("num_hidden_layers", 1))
    deeper = sorted({n.split(".")[1] for n in names if n.startswith(("layers.", "midlayer.")) and
                     n.split(".")[1].isdigit() and n.split(".")[1] != "0"})
    if layers != 1 or deeper:
        raise EagleTrtError(f"the draft {path} has {max(layers, len(deeper) + 1)} decoder layers; eagle-trt runs "
                            "one-layer EAGLE drafts", "use a one-layer draft (the published EAGLE-1/2/3 drafts are)")
    hidden = require_int(layer_cfg, "hidden_size", cfg_file)
    heads = require_int(layer_cfg, "num_attention_heads", cfg_file)
    max_pos = int(layer_cfg.get("max_position_embeddings") or 2048)
    rope = read_rope(layer_cfg, cfg_file, max_pos)
    math = _layer_math(layout, layer_cfg, cfg, cfg_file, max_pos)
    fmt = layout.format
    eagle_cfg = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    draft_vocab = None
    if fmt == "eagle3":
        draft_vocab = reader.shape("lm_head.weight")[0] if "lm_head.weight" in names else cfg.get("draft_vocab_size")
    capture, capture_source = _capture(cfg, cfg_file, layout) if fmt == "eagle3" else (None, "")
    speculators = layout.name == "speculators"
    return dict(
        format=fmt, layout=layout.name, hidden_size=hidden, num_attention_heads=heads,
        num_key_value_heads=int(layer_cfg.get("num_key_value_heads") or heads),
        head_dim=int(layer_cfg.get("head_dim") or hidden // heads),
        intermediate_size=require_int(layer_cfg, "intermediate_size", cfg_file),
        vocab_size=require_int(layer_cfg, "vocab_size", cfg_file), draft_vocab_size=draft_vocab,
        target_hidden_size=cfg.get("target_hidden_size"), fc_in_features=int(reader.shape("fc.weight")[1]),
        has_fc_bias="fc.bias" in names, has_embed_tokens="embed_tokens.weight" in names,
        rms_norm_eps=float(layer_cfg.get("rms_norm_eps", 1e-6)), rope_theta=rope.theta, rope_scaling=rope.scaling,
        num_hidden_layers=1, weight_format=reader.format, max_position_embeddings=max_pos,
        capture_layers=capture, capture_source=capture_source,
        layer_prefix="midlayer." if any(n.startswith("midlayer.") for n in names) else "layers.0.",
        **math,
        norm_before_residual=bool(cfg.get("norm_before_residual", speculators)) if fmt == "eagle3" else False,
        input_norm=fmt == "eagle3" and bool(cfg.get("norm_before_fc", eagle_cfg.get("norm_before_fc", False))),
        fc_norm=fmt == "eagle3" and bool(cfg.get("fc_norm", False)),
        norm_output=fmt == "eagle3" and bool(cfg.get("norm_output", False)),
        final_norm=fmt == "eagle3" and bool(eagle_cfg.get("use_last_layernorm", True)),
    )


def _layer_math(layout: Layout, layer_cfg: dict, cfg: dict, cfg_file: Path, max_pos: int) -> dict:
    """The draft layer's biases and q/k norms, as its writer builds the layer."""
    if layout.name == "safeailab-eagle1":  # cnets1: `qkv_bias` on q/k/v only (Qwen2 drafts)
        return dict(qkv_bias=bool(cfg.get("qkv_bias", False)), o_bias=False, mlp_bias=False, qk_norm=False)
    if layout.name in ("modelopt", "speculators"):  # stock transformers layers: the family's own reading
        family = FAMILY_BY_TYPE.get(layer_cfg.get("model_type", "llama"))
        if family is None or family.name not in ("llama", "qwen3"):
            raise EagleTrtError(f"{cfg_file}: a draft layer of model_type {layer_cfg.get('model_type')!r} is not "
                                "supported", "eagle-trt runs Llama and Qwen3 draft layers")
        shape = read_architecture(layer_cfg, cfg_file, family, 1, max_pos)
        if shape.sliding_layers:
            raise EagleTrtError(f"{cfg_file}: a draft layer with a sliding window is not supported",
                                "eagle-trt's draft layers attend over the whole draft context")
        return dict(qkv_bias=shape.qkv_bias, o_bias=shape.o_bias, mlp_bias=shape.mlp_bias, qk_norm=shape.qk_norm)
    return dict(qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm=False)  # SafeAILab-3/SpecForge/AngelSlim
