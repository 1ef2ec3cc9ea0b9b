"""Model families: the one table every step reads to know what a base checkpoint computes.

A family is how Hugging Face transformers builds a model type (its `modeling_*.py` and `configuration_*.py`): which
tensors a decoder layer has (q/k/v biases, q/k RMSNorm), which layers attend through a sliding window, what a config
key means when it is absent (the config class's defaults). `read_architecture` turns a config.json into an
`Architecture` the runtime, the shape check and the TensorRT-LLM converter all build from; nothing else in eagle-trt
knows a family by name (which engine runs which family is each engine's: eagle_trt.engines). A model type not in the
table is refused by name before any work.

RoPE is read the way transformers >= 5 standardises it (`modeling_rope_utils.RotaryEmbeddingConfigMixin`): the
parameters come from `rope_scaling` (transformers 4 layout) or `rope_parameters` (transformers 5), `rope_theta` from
that dict, else the top-level key, else 10000; `rope_type` (or the older `type`) defaults to "default"; llama3 and
yarn take `original_max_position_embeddings` from `max_position_embeddings` when absent. Every rope type is either
computed (`ROPE_TYPES`) or refused by name, never silently read as plain RoPE.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle_trt.errors import EagleTrtError

DEFAULT_ROPE_THETA = 10000.0  # transformers' RotaryEmbeddingConfigMixin.default_theta
# rope types the runtime computes, with the keys each needs (besides rope_type / rope_theta); the TensorRT-LLM
# checkpoint carries the same dict as `rotary_scaling`
ROPE_TYPES = {"default": (), "linear": ("factor",),
              "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
              "yarn": ("factor", "original_max_position_embeddings")}
ROPE_OPTIONAL = {"yarn": ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate")}
ROPE_REFUSED = {  # rope types transformers knows that we do not compute, and why
    "dynamic": "dynamic NTK scaling changes the frequencies with the sequence length at run time",
    "longrope": "LongRoPE's per-dimension factors switch with the sequence length",
    "proportional": "proportional RoPE is not implemented by eagle-trt",
}


@dataclass(frozen=True)
class Family:
    """One row of the family table."""

    name: str
    label: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    source: str  # the transformers modules that define it (read for this table)
    defaults: dict  # the config class's value of each key we read when config.json lacks it
    qkv_bias: bool | None  # True: q/k/v always carry a bias (Qwen2); None: config `attention_bias` (also o_proj)
    mlp_bias_key: bool  # whether config `mlp_bias` is read (Llama); elsewhere the MLP has no bias
    qk_norm: bool  # RMSNorm over head_dim on q and k before RoPE (Qwen3)
    sliding: str | None  # "all": every layer uses `sliding_window`; "layer_types": Qwen's use_sliding_window


_LLAMA_DEFAULTS = {"max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
                   "attention_bias": False, "mlp_bias": False, "hidden_act": "silu"}
FAMILIES = (
    Family("llama", "Llama 1/2/3.x", ("llama",), ("LlamaForCausalLM",), "transformers/models/llama",
           _LLAMA_DEFAULTS, qkv_bias=None, mlp_bias_key=True, qk_norm=False, sliding=None),
    Family("mistral", "Mistral", ("mistral",), ("MistralForCausalLM",), "transformers/models/mistral",
           _LLAMA_DEFAULTS | {"max_position_embeddings": 131072, "sliding_window": 4096},
           qkv_bias=False, mlp_bias_key=False, qk_norm=False, sliding="all"),
    Family("qwen2", "Qwen2 / Qwen2.5", ("qwen2",), ("Qwen2ForCausalLM",), "transformers/models/qwen2",
           _LLAMA_DEFAULTS | {"max_position_embeddings": 32768, "use_sliding_window": False, "sliding_window": 4096,
                              "max_window_layers": 28},
           qkv_bias=True, mlp_bias_key=False, qk_norm=False, sliding="layer_types"),
    Family("qwen3", "Qwen3 (dense)", ("qwen3",), ("Qwen3ForCausalLM",), "transformers/models/qwen3",
           _LLAMA_DEFAULTS | {"max_position_embeddings": 32768, "head_dim": 128, "use_sliding_window": False,
                              "sliding_window": 4096, "max_window_layers": 28},
           qkv_bias=None, mlp_bias_key=False, qk_norm=True, sliding="layer_types"),
)
FAMILY_BY_TYPE = {t: f for f in FAMILIES for t in f.model_types}
FAMILY_BY_ARCH = {a: f for f in FAMILIES for a in f.architectures}


def require_int(cfg: dict, key: str, cfg_file: Path) -> int:
    """A positive integer config key, or an EagleTrtError naming it."""
    value = cfg.get(key)
    if value is None:
        raise EagleTrtError(f"{cfg_file} has no {key!r}", f"the config.json needs {key}; restore the original file")
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise EagleTrtError(f"{cfg_file}: {key} = {value!r} is not a positive integer", "restore the original file")
    return value


def supported_families() -> str:
    return ", ".join(f"{f.label} ({'/'.join(f.model_types)})" for f in FAMILIES)


def family_of(cfg: dict, cfg_file: Path) -> Family:
    """The family of a base config: by `model_type`, else by `architectures`; anything else is refused by name."""
    model_type = cfg.get("model_type")
    arch = (cfg.get("architectures") or [None])[0]
    family = FAMILY_BY_TYPE.get(model_type) if model_type else FAMILY_BY_ARCH.get(arch)
    if family is None:
        raise EagleTrtError(f"{cfg_file}: model_type {model_type!r} (architecture {arch!r}) is not a family "
                            f"eagle-trt can run correctly",
                            f"supported families: {supported_families()}; other architectures are refused rather "
                            "than run with the wrong math")
    if arch is not None and arch not in family.architectures:
        raise EagleTrtError(f"{cfg_file}: architecture {arch!r} is not a causal LM of model_type {model_type!r}",
                            f"eagle-trt runs {', '.join(family.architectures)} checkpoints of this family")
    return family


@dataclass(frozen=True)
class Rope:
    """RoPE of a model: the base theta and the scaling dict (None = plain RoPE), normalised as transformers does."""

    theta: float
    scaling: dict | None  # {"rope_type": "linear" | "llama3", + the keys ROPE_TYPES lists}

    @property
    def kind(self) -> str:
        return self.scaling["rope_type"] if self.scaling else "default"


def read_rope(cfg: dict, cfg_file: Path, max_positions: int) -> Rope:
    """Both config layouts (module docstring); an unknown or incomplete rope type is an EagleTrtError."""
    params = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise EagleTrtError(f"{cfg_file}: rope parameters {params!r} are not an object",
                            "restore the original config.json")
    layer_types = set(cfg.get("layer_types") or ())
    if layer_types and layer_types & set(params):
        raise EagleTrtError(f"{cfg_file}: RoPE parameters per layer type ({sorted(layer_types & set(params))}) are "
                            "not supported", "eagle-trt runs models with one RoPE for every layer")
    theta = params.get("rope_theta", cfg.get("rope_theta", DEFAULT_ROPE_THETA))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind in ROPE_REFUSED:
        raise EagleTrtError(f"{cfg_file}: rope_type {kind!r} is not supported: {ROPE_REFUSED[kind]}",
                            f"eagle-trt computes rope types {', '.join(ROPE_TYPES)}; use a base with one of them")
    if kind not in ROPE_TYPES:
        raise EagleTrtError(f"{cfg_file}: unknown rope_type {kind!r}",
                            f"eagle-trt computes rope types {', '.join(ROPE_TYPES)}; restore the original config")
    if cfg.get("partial_rotary_factor", params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise EagleTrtError(f"{cfg_file}: partial_rotary_factor is not supported",
                            "eagle-trt rotates the whole head dimension, as Llama does")
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or theta <= 0:
        raise EagleTrtError(f"{cfg_file}: rope_theta = {theta!r} is not a positive number",
                            "restore the original config.json")
    if kind == "default":
        return Rope(float(theta), None)
    scaling = {"rope_type": kind}
    if kind in ("llama3", "yarn"):
        scaling["original_max_position_embeddings"] = max_positions  # transformers' default
    scaling |= {key: params[key] for key in ROPE_OPTIONAL.get(kind, ()) if params.get(key) is not None}
    for key in ROPE_TYPES[kind]:
        if key in params:
            scaling[key] = params[key]
        if not isinstance(scaling.get(key), (int, float)) or isinstance(scaling.get(key), bool):
            raise EagleTrtError(f"{cfg_file}: rope_type {kind!r} needs a number {key!r}, got {params.get(key)!r}",
                                "restore the original config.json")
    return Rope(float(theta), scaling)


@dataclass(frozen=True)
class Architecture:
    """What a decoder stack computes beyond its sizes: everything the runtime and the converter build from."""

    family: str
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    sliding_window: int | None  # keys this far back or further (q_pos - k_pos >= window) are not seen
    sliding_layers: tuple[int, ...]  # the layers that use the window
    rope: Rope


def _flag(cfg: dict, family: Family, key: str) -> bool:
    value = cfg.get(key, family.defaults.get(key, False))
    return bool(value) if value is not None else False


def read_architecture(cfg: dict, cfg_file: Path, family: Family, num_layers: int, max_positions: int) -> Architecture:
    """The family's reading of config.json (transformers' defaults for absent keys)."""
    act = cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))
    if act != "silu":
        raise EagleTrtError(f"{cfg_file}: hidden_act {act!r} is not supported", "eagle-trt runs SiLU-gated MLPs")
    if cfg.get("pretraining_tp", 1) not in (None, 1):
        raise EagleTrtError(f"{cfg_file}: pretraining_tp = {cfg['pretraining_tp']} is not supported",
                            "set pretraining_tp to 1 (transformers >= 5 ignores it; older ones split the linears)")
    attention_bias = family.qkv_bias is None and _flag(cfg, family, "attention_bias")
    qkv_bias = family.qkv_bias if family.qkv_bias is not None else attention_bias
    o_bias = attention_bias if family.qkv_bias is None else False
    window, layers = None, ()
    if family.sliding == "all":
        window = cfg.get("sliding_window", family.defaults["sliding_window"])
        layers = tuple(range(num_layers)) if window is not None else ()
    elif family.sliding == "layer_types" and cfg.get("use_sliding_window", family.defaults["use_sliding_window"]):
        window = cfg.get("sliding_window", family.defaults["sliding_window"])
        types = cfg.get("layer_types")
        if types is None:
            first = cfg.get("max_window_layers", family.defaults["max_window_layers"])
            types = ["sliding_attention" if i >= first else "full_attention" for i in range(num_layers)]
        if not isinstance(types, list) or len(types) != num_layers:
            raise EagleTrtError(f"{cfg_file}: layer_types must list one type per layer ({num_layers}), got {types!r}",
                                "restore the original config.json")
        layers = tuple(i for i, t in enumerate(types) if t == "sliding_attention") if window is not None else ()
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window <= 0):
        raise EagleTrtError(f"{cfg_file}: sliding_window = {window!r} is not a positive integer",
                            "restore the original config.json (null means no window)")
    if not layers:
        window = None
    mlp_bias = family.mlp_bias_key and _flag(cfg, family, "mlp_bias")
    return Architecture(family=family.name, qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias,
                        qk_norm=family.qk_norm, sliding_window=window, sliding_layers=layers,
                        rope=read_rope(cfg, cfg_file, max_positions))
