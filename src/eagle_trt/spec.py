"""ModelSpec and DraftSpec: what a base and an EAGLE draft are, read from their directories without loading weights,
and whether they fit together (`check_compatibility`). All validation of user checkpoints lives here.

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
from eagle_trt.errors import EagleTrtError

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end_of_turn|>", "<end_of_turn>", "<|eot|>", "<|end|>")
LLAMA_ARCHITECTURES = ("LlamaForCausalLM",)

ENGINES = ("trtllm", "llmapi", "pytorch", "vllm")  # what computes eagle_model (README, Engines)
EAGLE_MODEL, BASE_MODEL = "eagle_model", "base_model"  # the two ensembles a bundle serves (speculative, plain)
MODELS = (EAGLE_MODEL, BASE_MODEL)

# rope_scaling types the runtime and the TensorRT-LLM checkpoint support, with the keys each one needs
ROPE_SCALINGS = {None: (), "default": (), "linear": ("factor",),
                 "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}

# Engine precisions. int8: the pytorch engine on the CPU, int8 linears (runtime/fast.py); the others are torch dtypes.
PRECISIONS = ("float32", "float16", "bfloat16", "int8")


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


def rope_scaling_kind(scaling: dict | None) -> str | None:
    """The rope_scaling type of a config's dict ("rope_type", or the older "type"); None without scaling."""
    return scaling.get("rope_type", scaling.get("type")) if scaling else None


def rope_scaling_problem(scaling: dict | None) -> str | None:
    """Why a rope_scaling cannot be served (an unknown type or a missing key), or None when it can."""
    kind = rope_scaling_kind(scaling)
    if kind not in ROPE_SCALINGS:
        return (f"rope_scaling type {kind!r} is not supported (supported: "
                f"{', '.join(str(k) for k in ROPE_SCALINGS if k)})")
    missing = [key for key in ROPE_SCALINGS[kind] if key not in scaling]
    if missing:
        return f"rope_scaling {kind!r} lacks {', '.join(missing)}"
    return None


def _require(cfg: dict, key: str, cfg_file: Path, kind=int):
    value = cfg.get(key)
    if value is None:
        raise EagleTrtError(f"{cfg_file} has no {key!r}", f"a Llama config.json needs {key}; restore the original file")
    if kind is int and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise EagleTrtError(f"{cfg_file}: {key} = {value!r} is not a positive integer", "restore the original file")
    return value


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
    """A Hugging Face Llama-family base checkpoint, described from config.json, tokenizer files and weight index."""

    path: Path
    architecture: str
    model_type: str
    num_hidden_layers: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    torch_dtype: str | None
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    has_tokenizer: bool
    has_chat_template: bool
    weight_format: str

    @classmethod
    def from_dir(cls, path: str | Path) -> ModelSpec:
        path = Path(path)
        cfg = read_config(path, "base")
        cfg_file = path / "config.json"
        fmt, files, _ = find_weight_files(path)
        arch = (cfg.get("architectures") or ["?"])[0]
        hidden = _require(cfg, "hidden_size", cfg_file)
        heads = _require(cfg, "num_attention_heads", cfg_file)
        for key in ("num_hidden_layers", "intermediate_size", "vocab_size"):
            _require(cfg, key, cfg_file)
        if "fc.weight" in _weight_names(path) or "midlayer.self_attn.q_proj.weight" in _weight_names(path):
            raise EagleTrtError(f"{path} is an EAGLE draft, not a base model (it has fc.weight)",
                                "pass the draft with --draft and the full Hugging Face model with --base")
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
            path=path.resolve(), architecture=arch, model_type=str(cfg.get("model_type", "?")),
            num_hidden_layers=cfg["num_hidden_layers"], hidden_size=hidden, num_attention_heads=heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads), intermediate_size=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"], rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(cfg.get("rope_theta", 10000.0)), rope_scaling=cfg.get("rope_scaling"),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            torch_dtype=cfg.get("torch_dtype") or cfg.get("dtype"), bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids, has_tokenizer=has_tok, has_chat_template=has_template, weight_format=fmt,
        )

    @property
    def is_llama(self) -> bool:
        return self.architecture in LLAMA_ARCHITECTURES or self.model_type == "llama"


def _weight_names(path: Path) -> set[str]:
    with open_weights(path) as reader:
        return set(reader.names())


@dataclass(frozen=True)
class DraftSpec(LayerDims):
    """An EAGLE draft checkpoint (research/trtllm_eagle.md §A): format detected from its tensor names."""

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
    # EAGLE-3: base layers whose *input* hidden state the draft was trained on, when its config names them
    # (`eagle_aux_hidden_state_layer_ids`, vLLM/speculators convention); None = the standard (2, L//2, L-3)
    capture_layers: tuple[int, ...] | None = None

    @classmethod
    def from_dir(cls, path: str | Path) -> DraftSpec:
        path = Path(path)
        cfg = read_config(path, "draft")
        cfg_file = path / "config.json"
        with open_weights(path) as reader:
            names = set(reader.names())
            fmt = detect_draft_format(path, names, cfg)
            if "fc.weight" not in names:
                raise EagleTrtError(f"the draft {path} has no fc.weight", "the checkpoint is incomplete; re-download it")
            fc_shape = reader.shape("fc.weight")
            draft_vocab = None
            if fmt == "eagle3":
                draft_vocab = cfg.get("draft_vocab_size") or (reader.shape("lm_head.weight")[0]
                                                              if "lm_head.weight" in names else None)
            weight_format = reader.format
        hidden = _require(cfg, "hidden_size", cfg_file)
        heads = _require(cfg, "num_attention_heads", cfg_file)
        return cls(
            path=path.resolve(), format=fmt, hidden_size=hidden, num_attention_heads=heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate_size=_require(cfg, "intermediate_size", cfg_file),
            vocab_size=_require(cfg, "vocab_size", cfg_file), draft_vocab_size=draft_vocab,
            target_hidden_size=cfg.get("target_hidden_size"), fc_in_features=int(fc_shape[1]),
            has_fc_bias="fc.bias" in names, has_embed_tokens="embed_tokens.weight" in names,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=float(cfg.get("rope_theta", 10000.0)),
            num_hidden_layers=int(cfg.get("num_hidden_layers", 1)), weight_format=weight_format,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            capture_layers=_capture_layers(cfg, cfg_file) if fmt == "eagle3" else None,
        )


def _capture_layers(cfg: dict, cfg_file: Path) -> tuple[int, ...] | None:
    value = cfg.get("eagle_aux_hidden_state_layer_ids")
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, int) and v >= 0 for v in value):
        raise EagleTrtError(f"{cfg_file}: eagle_aux_hidden_state_layer_ids = {value!r} is not a list of layer indices",
                            "write the base layers the draft was trained on, e.g. [2, 16, 29], or remove the key")
    return tuple(value)


def detect_draft_format(path: Path, names: set[str], cfg: dict) -> str:
    """EAGLE-3 <=> a `midlayer.*` key, a `d2t` tensor or `draft_vocab_size` in config; EAGLE-1 <=> fc.weight +
    layers.0.* (research §A.3). A full base model or anything else is refused with a hint."""
    if any(n.startswith("midlayer.") for n in names) or "d2t" in names or "draft_vocab_size" in cfg:
        return "eagle3"
    if "fc.weight" in names and any(n.startswith("layers.0.") for n in names):
        return "eagle1"
    if any(n.startswith("model.layers.") for n in names):
        raise EagleTrtError(f"{path} looks like a base model (it has model.layers.*), not an EAGLE draft",
                            "pass the EAGLE draft checkpoint with --draft (e.g. yuhuili/EAGLE-LLaMA3-Instruct-8B)")
    sample = ", ".join(sorted(names)[:4]) or "no tensors"
    raise EagleTrtError(f"unknown draft layout in {path} (tensors: {sample}, ...)",
                        "expected an EAGLE-1/2 draft (fc.weight + layers.0.*) or an EAGLE-3 draft (midlayer.*, d2t)")


@dataclass(frozen=True)
class Problem:
    message: str
    hint: str


def check_compatibility(base: ModelSpec, draft: DraftSpec | None, engine: str | None = None) -> list[Problem]:
    """Every reason the pair cannot be served (by `engine`, when given); empty when they fit."""
    problems: list[Problem] = []
    rope = rope_scaling_problem(base.rope_scaling)
    if rope:
        problems.append(Problem(f"the base's {rope}",
                                "use a base with default, linear or llama3 RoPE scaling (config.json rope_scaling)"))
    if engine == "trtllm" and not base.is_llama:
        problems.append(Problem(f"base architecture {base.architecture} ({base.model_type}) is not Llama",
                                "the TensorRT-LLM EAGLE engine (EagleForCausalLM) takes only Llama-family bases; "
                                "use --engine pytorch or vllm"))
    if draft is None:
        return problems
    if draft.format == "eagle1":
        if draft.hidden_size != base.hidden_size:
            problems.append(Problem(f"draft hidden_size {draft.hidden_size} != base hidden_size {base.hidden_size}",
                                    "pass the EAGLE draft trained for this base"))
        if draft.fc_in_features != 2 * base.hidden_size:
            problems.append(Problem(f"draft fc takes {draft.fc_in_features} inputs, expected 2 x base hidden = "
                                    f"{2 * base.hidden_size}", "pass the EAGLE draft trained for this base"))
    else:
        target = draft.target_hidden_size or draft.hidden_size
        if target != base.hidden_size:
            problems.append(Problem(f"EAGLE-3 draft target_hidden_size {target} != base hidden_size "
                                    f"{base.hidden_size}", "pass the EAGLE-3 draft trained for this base"))
        if draft.fc_in_features != 3 * base.hidden_size:
            problems.append(Problem(f"EAGLE-3 draft fc takes {draft.fc_in_features} inputs, expected 3 x base "
                                    f"hidden = {3 * base.hidden_size}", "pass the EAGLE-3 draft trained for this base"))
    if draft.vocab_size != base.vocab_size:
        problems.append(Problem(f"draft vocab_size {draft.vocab_size} != base vocab_size {base.vocab_size}",
                                "the draft must share the base's tokenizer; pass the draft trained for this base"))
    if draft.num_attention_heads != base.num_attention_heads or draft.head_dim != base.head_dim:
        problems.append(Problem(f"draft has {draft.num_attention_heads} heads of dim {draft.head_dim}, base has "
                                f"{base.num_attention_heads} of dim {base.head_dim}",
                                "pass the EAGLE draft trained for this base"))
    if engine == "trtllm" and draft.format == "eagle3":
        problems.append(Problem("EAGLE-3 drafts are not supported by the TensorRT-LLM engine path",
                                "use --engine llmapi (TRT-LLM's PyTorch backend) or --engine pytorch/vllm"))
    if engine == "llmapi" and draft.format == "eagle1":
        problems.append(Problem("TRT-LLM's LLM-API (PyTorch backend) runs EAGLE-3 drafts only",
                                "use --engine trtllm for EAGLE-1/2 drafts (TensorRT-LLM <= 1.2) or --engine "
                                "pytorch, or train an EAGLE-3 draft for this base (eagle-trt train-draft --format "
                                "eagle3)"))
    return problems


def require_compatible(base: ModelSpec, draft: DraftSpec | None, engine: str | None = None) -> None:
    """`check_compatibility` as one EagleTrtError listing every problem (BuildSpec.validate and the runtime)."""
    problems = check_compatibility(base, draft, engine)
    if problems:
        where = f" (base {base.path}, draft {draft.path})" if draft is not None else f" (base {base.path})"
        raise EagleTrtError("the base and draft do not fit together" + where + ": "
                            + "; ".join(p.message for p in problems),
                            "; ".join(dict.fromkeys(p.hint for p in problems)))
