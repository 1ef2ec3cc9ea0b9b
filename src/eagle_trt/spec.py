"""ModelSpec and DraftSpec: what a base and an EAGLE draft are, read from their directories without loading weights,
and whether they fit together (`check_compatibility`; what each engine runs: eagle_trt.engines).

Glossary (the words the whole code base uses, defined once):
  base             the model whose output we must reproduce exactly (never called "target").
  draft            the EAGLE head that proposes tokens from the base's features. EAGLE-1/2 ("eagle1"): fc over
                   [embed(token), base final normed hidden], one decoder layer, the base lm_head. EAGLE-3
                   ("eagle3"): fc over three captured base layers, a "midlayer", its own norm + lm_head over a
                   reduced draft vocabulary mapped to base ids by d2t.
  tree             the draft tokens of one step arranged by parent; the root is the last committed token.
  choices          a static tree written as paths of child ranks from the root, e.g. [[0], [1], [0, 0]].
  path             one root-to-node sequence of nodes; the verify step accepts the longest matching path.
  depth            a node's distance from the root (root 0); its RoPE position is prefix length + depth.
  accepted length  tokens committed per verify step, the bonus token included (so >= 1); its mean is tau.
  acceptance rate  accepted draft tokens / drafted tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from eagle_trt.checkpoints import find_weight_files, open_weights
from eagle_trt.draft_layouts import LAYOUTS, read_draft, standard_capture_layers
from eagle_trt.errors import EagleTrtError
from eagle_trt.families import FAMILY_BY_TYPE, family_of, read_architecture, require_int
from eagle_trt.hub import hub_source, resolve_checkpoint
from eagle_trt.quantization import HF_QUANT_CONFIG, Quantization, read_quantization
from eagle_trt.quantization.config import gguf_quantization

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end_of_turn|>", "<end_of_turn>", "<|eot|>", "<|end|>")

EAGLE_MODEL, BASE_MODEL = "eagle_model", "base_model"  # the two ensembles a bundle serves (speculative, plain)
MODELS = (EAGLE_MODEL, BASE_MODEL)

# Engine precisions. int8: the pytorch engine on the CPU, int8 linears (runtime/linears.py); the others are torch dtypes.
# native: runtime.native, the CPU's fused C forward on a GGUF base's blocks as stored, float32 activations;
# native-q8: the same with activations quantized to 8 bits per 32-block (llama.cpp's numerics), summed in int32
NATIVE_PRECISIONS = ("native", "native-q8")
CPU_PRECISIONS = ("int8", *NATIVE_PRECISIONS)  # the pytorch engine's CPU-only modes
PRECISIONS = ("float32", "float16", "bfloat16", *CPU_PRECISIONS)


def read_config(path: Path, what: str) -> dict:
    """config.json of a checkpoint dir as a dict, with precise errors."""
    if not path.exists():
        raise EagleTrtError(f"{what} directory {path} does not exist", f"pass the {what} checkpoint directory")
    if not path.is_dir():
        raise EagleTrtError(f"{what} path {path} is a file, not a directory",
                            f"pass the directory that holds the {what}'s config.json and weights")
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        if not any(path.iterdir()):
            raise EagleTrtError(f"{what} directory {path} is empty", f"download the {what} checkpoint into it")
        raise EagleTrtError(f"no config.json in the {what} directory {path}",
                            "a Hugging Face checkpoint directory needs its config.json beside the weights")
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except PermissionError:
        raise EagleTrtError(f"cannot read {cfg_file}: permission denied", "fix the file permissions") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EagleTrtError(f"{cfg_file} is not valid JSON ({exc})", "restore the original config.json") from None
    if not isinstance(cfg, dict):
        raise EagleTrtError(f"{cfg_file} must hold a JSON object, got {type(cfg).__name__}",
                            "restore the original config.json")
    return cfg


def _ids(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def _tokenizer_info(path: Path) -> tuple[bool, bool, list[int]]:
    """(has_tokenizer, has_chat_template, end-of-turn ids found in tokenizer.json's added tokens)."""
    has_tok = (path / "tokenizer.json").exists() or (path / "tokenizer.model").exists()
    tcfg = {}
    if (path / "tokenizer_config.json").exists():
        try:
            tcfg = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            tcfg = {}
    has_template = bool(tcfg.get("chat_template")) or (path / "chat_template.jinja").exists()
    eot = []
    if (path / "tokenizer.json").exists():
        try:
            added = json.loads((path / "tokenizer.json").read_text(encoding="utf-8")).get("added_tokens", [])
        except (OSError, json.JSONDecodeError):
            added = []
        by_content = {t.get("content"): t.get("id") for t in added if isinstance(t, dict)}
        names = list(END_OF_TURN_TOKENS)
        eos = tcfg.get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        if isinstance(eos, str):
            names.append(eos)
        eot = [int(by_content[n]) for n in names if by_content.get(n) is not None]
    return has_tok, has_template, eot


@dataclass(frozen=True)
class LayerDims:
    """The shape of a Llama decoder layer and its vocabulary: what a base, a draft and the runtime's model carry."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int

    def dims(self) -> dict:
        """Just these fields, as keyword arguments (for another LayerDims of the same shape)."""
        return {f.name: getattr(self, f.name) for f in fields(LayerDims)}


@dataclass(frozen=True)
class ModelSpec(LayerDims):
    """A Hugging Face base checkpoint of a supported family (eagle_trt.families), described from config.json,
    tokenizer files and weight index. The fields after `weight_format` are the family's reading of the config; their
    defaults are Llama's, so a spec saved before they existed reads back as the Llama it was."""

    path: Path
    architecture: str
    model_type: str
    num_hidden_layers: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None  # normalised (families.read_rope): None = plain RoPE, else {"rope_type": ..., keys}
    max_position_embeddings: int
    tie_word_embeddings: bool
    torch_dtype: str | None
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    has_tokenizer: bool
    has_chat_template: bool
    weight_format: str
    family: str = "llama"
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] = ()
    hub_source: str | None = None  # "org/name@commit" when read from the Hugging Face cache (eagle_trt.hub)
    quantization: Quantization | None = None  # how the weights are stored (eagle_trt.quantization); None: plainly

    @classmethod
    def from_dir(cls, path: str | Path) -> ModelSpec:
        """`path`: a checkpoint directory or a hub id (org/name[@revision], eagle_trt.hub)."""
        path = resolve_checkpoint(path, "base")
        cfg = read_config(path, "base")
        cfg_file = path / "config.json"
        fmt, files, _ = find_weight_files(path)
        names = _weight_names(path)
        if "fc.weight" in names or any(n.startswith("midlayer.") for n in names):
            raise EagleTrtError(f"{path} is an EAGLE draft, not a base model (it has fc.weight)",
                                "pass the draft with --draft and the full Hugging Face model with --base")
        family = family_of(cfg, cfg_file)
        quantization = gguf_quantization(files[0]) if fmt == "gguf" else read_quantization(path, cfg)
        arch = (cfg.get("architectures") or [family.architectures[0]])[0]
        hidden = require_int(cfg, "hidden_size", cfg_file)
        heads = require_int(cfg, "num_attention_heads", cfg_file)
        layers = require_int(cfg, "num_hidden_layers", cfg_file)
        for key in ("intermediate_size", "vocab_size"):
            require_int(cfg, key, cfg_file)
        defaults = family.defaults
        max_pos = int(cfg.get("max_position_embeddings") or defaults["max_position_embeddings"])
        shape = read_architecture(cfg, cfg_file, family, layers, max_pos)
        eos = _ids(cfg.get("eos_token_id"))
        gen_file = path / "generation_config.json"
        if gen_file.exists():
            try:
                eos += _ids(json.loads(gen_file.read_text(encoding="utf-8")).get("eos_token_id"))
            except (OSError, json.JSONDecodeError, ValueError, TypeError):
                pass  # generation_config is optional; config.json's eos stays authoritative
        has_tok, has_template, eot = _tokenizer_info(path)
        eos_ids = tuple(dict.fromkeys(eos + eot))
        return cls(
            path=path.resolve(), architecture=arch, model_type=str(cfg.get("model_type") or family.model_types[0]),
            num_hidden_layers=layers,
            hidden_size=hidden, num_attention_heads=heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or defaults.get("head_dim") or hidden // heads),
            intermediate_size=cfg["intermediate_size"], vocab_size=cfg["vocab_size"],
            rms_norm_eps=float(cfg.get("rms_norm_eps", defaults["rms_norm_eps"])),
            rope_theta=shape.rope.theta, rope_scaling=shape.rope.scaling, max_position_embeddings=max_pos,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", defaults["tie_word_embeddings"])),
            torch_dtype=cfg.get("torch_dtype") or cfg.get("dtype"), bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids, has_tokenizer=has_tok, has_chat_template=has_template, weight_format=fmt,
            family=family.name, qkv_bias=shape.qkv_bias, o_bias=shape.o_bias, mlp_bias=shape.mlp_bias,
            qk_norm=shape.qk_norm, sliding_window=shape.sliding_window, sliding_layers=shape.sliding_layers,
            hub_source=hub_source(path), quantization=quantization,
        )

    @property
    def family_label(self) -> str:
        return FAMILY_BY_TYPE[self.family].label


def _weight_names(path: Path) -> set[str]:
    with open_weights(path) as reader:
        return set(reader.names())


@dataclass(frozen=True)
class DraftSpec(LayerDims):
    """An EAGLE draft checkpoint in any published layout (eagle_trt.draft_layouts reads them all into this). The
    fields after `max_position_embeddings` default to the SafeAILab layout, so a spec saved before they existed
    reads back as the draft it was."""

    path: Path
    format: str  # "eagle1" (EAGLE-1/2) | "eagle3"
    draft_vocab_size: int | None
    target_hidden_size: int | None
    fc_in_features: int
    has_fc_bias: bool
    has_embed_tokens: bool
    rms_norm_eps: float
    rope_theta: float
    num_hidden_layers: int
    weight_format: str
    max_position_embeddings: int = 2048
    # EAGLE-3: base layers whose *input* hidden state the draft reads (draft_layouts: one rule, inputs), when its
    # config names them; None = the standard ones (draft_layouts.standard_capture_layers)
    capture_layers: tuple[int, ...] | None = None
    capture_source: str = ""
    layout: str = ""  # draft_layouts.LAYOUTS key ("" in specs saved before layouts were told apart: SafeAILab)
    layer_prefix: str = ""  # "layers.0." | "midlayer." ("": the format's SafeAILab prefix)
    rope_scaling: dict | None = None  # the draft layer's own RoPE scaling (families.read_rope)
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    norm_before_residual: bool = False
    input_norm: bool = False
    fc_norm: bool = False
    norm_output: bool = False
    final_norm: bool = True
    hub_source: str | None = None  # "org/name@commit" when read from the Hugging Face cache (eagle_trt.hub)

    @classmethod
    def from_dir(cls, path: str | Path) -> DraftSpec:
        """`path`: a checkpoint directory or a hub id (org/name[@revision], eagle_trt.hub)."""
        path = resolve_checkpoint(path, "draft")
        cfg = read_config(path, "draft")
        if cfg.get("quantization_config") is not None or (path / HF_QUANT_CONFIG).exists():
            method = (cfg.get("quantization_config") or {}).get("quant_method", "Model-Optimizer")
            raise EagleTrtError(f"{path}: the draft is quantized ({method}); eagle-trt runs EAGLE drafts unquantized",
                                "pass the BF16/FP16 draft: published pairings quantize the base only (NVIDIA's FP8 "
                                "and NVFP4 bases ship with BF16 EAGLE-3 drafts)")
        with open_weights(path) as reader:
            fields_ = read_draft(path, cfg, reader)
        return cls(path=path.resolve(), hub_source=hub_source(path), **fields_)

    @property
    def prefix(self) -> str:
        """The tensor-name prefix of the draft's decoder layer in its files."""
        return self.layer_prefix or ("layers.0." if self.format == "eagle1" else "midlayer.")

    @property
    def layout_label(self) -> str:
        return LAYOUTS[self.layout].label if self.layout in LAYOUTS else "SafeAILab"

    def capture_inputs(self, num_layers: int) -> tuple[int, ...]:
        """The base layers (inputs) this EAGLE-3 draft reads: its own, or the standard three."""
        return self.capture_layers or standard_capture_layers(num_layers)


@dataclass(frozen=True)
class Problem:
    message: str
    hint: str


def check_compatibility(base: ModelSpec, draft: DraftSpec | None) -> list[Problem]:
    """Every reason the draft does not fit the base, whatever the engine (each engine adds what it cannot run:
    eagle_trt.engines.compatibility); empty when they fit."""
    problems: list[Problem] = []
    if draft is None:
        return problems
    if draft.format == "eagle1":
        if draft.hidden_size != base.hidden_size:
            problems.append(Problem(f"draft hidden_size {draft.hidden_size} != base hidden_size "
                                    f"{base.hidden_size}", "pass the EAGLE draft trained for this base"))
        if draft.fc_in_features != 2 * base.hidden_size:
            problems.append(Problem(f"draft fc takes {draft.fc_in_features} inputs, expected 2 x base hidden = "
                                    f"{2 * base.hidden_size}", "pass the EAGLE draft trained for this base"))
    else:
        problems += _eagle3_problems(base, draft)
    if draft.vocab_size != base.vocab_size:
        problems.append(Problem(f"draft vocab_size {draft.vocab_size} != base vocab_size {base.vocab_size}",
                                "the draft must share the base's tokenizer; pass the draft trained for this base"))
    return problems


def _eagle3_problems(base: ModelSpec, draft: DraftSpec) -> list[Problem]:
    problems = []
    target = draft.target_hidden_size or draft.hidden_size
    if target != base.hidden_size:
        problems.append(Problem(f"EAGLE-3 draft target_hidden_size {target} != base hidden_size "
                                f"{base.hidden_size}", "pass the EAGLE-3 draft trained for this base"))
    capture = draft.capture_inputs(base.num_hidden_layers)
    if draft.fc_in_features != len(capture) * base.hidden_size:
        problems.append(Problem(f"EAGLE-3 draft fc takes {draft.fc_in_features} inputs, expected {len(capture)} "
                                f"captured layers x base hidden = {len(capture) * base.hidden_size}",
                                "pass the EAGLE-3 draft trained for this base"))
    if any(i > base.num_hidden_layers for i in capture):
        problems.append(Problem(f"the EAGLE-3 draft reads base layers {list(capture)} ({draft.capture_source}), but "
                                f"the base has {base.num_hidden_layers}",
                                "pass the EAGLE-3 draft trained for this base"))
    return problems


def raise_problems(problems: list[Problem], what: str) -> None:
    """Problems as one EagleTrtError: `what` and every message, every distinct hint."""
    if problems:
        raise EagleTrtError(what + ": " + "; ".join(p.message for p in problems),
                            "; ".join(dict.fromkeys(p.hint for p in problems)))


def require_compatible(base: ModelSpec, draft: DraftSpec | None) -> None:
    """`check_compatibility` as one EagleTrtError listing every problem (BuildSpec.validate and the runtime)."""
    where = f" (base {base.path}, draft {draft.path})" if draft is not None else f" (base {base.path})"
    raise_problems(check_compatibility(base, draft), "the base and draft do not fit together" + where)
