"""BuildSpec: every value a bundle is built from, validated once and saved as OUT/eagle_trt_spec.json.

The engine kind makes it (`engines.create_spec(base_dir, draft_dir, engine=..., **options)`: its tree rules, its
dtype default, its release), then every build step (checkpoint conversion, trtllm-build, the Triton model
repository, the perf harness) reads this one object, so max_batch_size, the tree, dtype and paths cannot disagree
between engines and configs. The tree is stored resolved (`tree.resolve`: a static tree's choices inline), so it
means the same wherever the bundle is read. The served engine model and the perf harness read the saved spec.
Variants are made with `dataclasses.replace`, never by mutation.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from eagle_trt import __version__
from eagle_trt.errors import EagleTrtError
from eagle_trt.quantization import Quantization
from eagle_trt.spec import PRECISIONS, DraftSpec, ModelSpec
from eagle_trt.tree_config import TreeConfig

SPEC_FILE = "eagle_trt_spec.json"
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class TrtllmSettings:
    """What only a trtllm bundle has: the EAGLE sizes its TensorRT engine is built with (the checkpoint's
    config.json; trtllm-build's names: draft tokens per step, EagleNets = the tree's depth, non-leaf nodes per
    depth). The trtllm engine fills them from the bundle's tree and checks them (engines/trtllm.py)."""

    max_draft_len: int
    num_eagle_layers: int
    max_non_leaves_per_layer: int

    def engine_sizes(self) -> dict:
        """The three sizes, as the EAGLE checkpoint's config.json names them."""
        return {"max_draft_len": self.max_draft_len, "num_eagle_layers": self.num_eagle_layers,
                "max_non_leaves_per_layer": self.max_non_leaves_per_layer}


@dataclass(frozen=True, kw_only=True)
class BuildSpec:
    """What a bundle is built from. Sizes follow trtllm-build's names (docs/trtllm_formats.md §3)."""

    base: ModelSpec
    draft: DraftSpec | None
    engine: str  # the engine kind (eagle_trt.engines): ask `engines.get(spec.engine)`, never compare the name
    tree: TreeConfig  # the tree eagle_model drafts with, resolved by that engine's rules
    dtype: str
    tp_size: int = 1
    max_batch_size: int = 8
    max_input_len: int = 4096
    max_seq_len: int = 8192
    max_num_tokens: int = 8192
    trtllm: TrtllmSettings | None = None  # engine trtllm only
    backend_version: str | None = None  # trtllm / llmapi: the TensorRT-LLM release the bundle targets
    device: str = "cpu"
    chat_template: bool = True
    draft_vocab: int | None = None  # pytorch engine: FR-Spec draft vocabulary (None: the draft's file; 0: full)
    tree_tuning: dict | None = None  # `--tree auto`: the tuner's choice and predictions (tuning/calibrate.py)
    # llmapi/vllm: the copy of the draft in the layout that engine reads, written into the bundle, and why
    # (Engine.served_draft_change); None: the engine reads draft.path as it is
    served_draft: str | None = None
    served_draft_reason: str | None = None
    # llmapi/vllm: the base with both RoPE layouts in its config.json (engines/served_base.py), and why; None: base.path
    served_base: str | None = None
    served_base_reason: str | None = None
    eagle_trt_version: str = __version__

    def validate(self) -> list[str]:
        """Every option rule that holds whatever the engine: values in range and consistent with the base. Returns
        the problems (engines.check adds the pair's fit and the engine's own rules, and raises them)."""
        problems: list[str] = []
        if self.dtype not in PRECISIONS:
            problems.append(f"dtype {self.dtype!r} is not one of {', '.join(PRECISIONS)} (or auto)")
        if self.device not in DEVICES:
            problems.append(f"device {self.device!r} is not cpu or cuda")
        for name in ("tp_size", "max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                problems.append(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if problems:
            return problems
        if self.max_input_len >= self.max_seq_len:
            problems.append(f"max_input_len {self.max_input_len} must be < max_seq_len {self.max_seq_len} "
                            "(room is needed for generated tokens)")
        if self.max_seq_len > self.base.max_position_embeddings:
            problems.append(f"max_seq_len {self.max_seq_len} > the base's max_position_embeddings "
                            f"{self.base.max_position_embeddings}")
        if self.max_batch_size > 512:
            problems.append(f"max_batch_size {self.max_batch_size} > 512 (TRT-LLM's limit)")
        if self.tp_size > 1:
            for what, value in (("num_attention_heads", self.base.num_attention_heads),
                                ("intermediate_size", self.base.intermediate_size),
                                ("hidden_size", self.base.hidden_size)):
                if value % self.tp_size:
                    problems.append(f"tp_size {self.tp_size} does not divide the base's {what} {value}")
            kv = self.base.num_key_value_heads
            if (kv >= self.tp_size and kv % self.tp_size) or (kv < self.tp_size and self.tp_size % kv):
                problems.append(f"tp_size {self.tp_size} and the base's {kv} KV heads cannot be split evenly")
        if self.draft_vocab is not None and (not isinstance(self.draft_vocab, int) or self.draft_vocab < 0):
            problems.append(f"draft_vocab must be an integer >= 0, got {self.draft_vocab!r}")
        return problems

    # ---- derived values -----------------------------------------------------------------------------------------
    @property
    def engine_base_path(self) -> Path:
        """The base directory an engine that reads Hugging Face configs itself is given."""
        return Path(self.served_base) if self.served_base else self.base.path

    @property
    def engine_draft_path(self) -> Path | None:
        """The draft directory the serving engine reads: the bundle's rewritten copy, else the draft itself."""
        if self.draft is None:
            return None
        return Path(self.served_draft) if self.served_draft else self.draft.path

    @property
    def draft_format(self) -> str | None:
        return self.draft.format if self.draft is not None else None

    # ---- persistence --------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["base"] = _spec_to_dict(self.base)
        data["draft"] = _spec_to_dict(self.draft) if self.draft is not None else None
        data["tree"] = self.tree.to_dict()
        data["trtllm"] = dataclasses.asdict(self.trtllm) if self.trtllm is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict) -> BuildSpec:
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise EagleTrtError(f"unknown keys in the build spec: {sorted(unknown)}",
                                "the bundle was written by another eagle-trt version; rebuild it")
        data["base"] = _spec_from_dict(ModelSpec, data["base"])
        data["draft"] = _spec_from_dict(DraftSpec, data["draft"]) if data.get("draft") else None
        data["tree"] = TreeConfig.from_dict(data.get("tree"), where=f"{SPEC_FILE} tree")
        if data.get("trtllm") is not None:
            data["trtllm"] = TrtllmSettings(**data["trtllm"])
        return cls(**data)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        if path.is_dir():
            path = path / SPEC_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> BuildSpec:
        path = Path(path)
        if path.is_dir():
            path = path / SPEC_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise EagleTrtError(f"no build spec at {path}",
                                "pass a bundle directory written by `eagle-trt build`") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise EagleTrtError(f"cannot read the build spec {path}: {exc}", "rebuild the bundle") from None
        return cls.from_dict(data)


def _spec_to_dict(spec: ModelSpec | DraftSpec) -> dict:
    out = {}
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        out[f.name] = str(value) if isinstance(value, Path) else value.to_dict() if isinstance(
            value, Quantization) else value
    return out


def _spec_from_dict(cls, data: dict):
    names = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            raise EagleTrtError(f"unknown key {key!r} for {cls.__name__} in the build spec",
                                "the bundle was written by another eagle-trt version; rebuild it")
        if key == "path" and value is not None:
            value = Path(value)
        elif key == "quantization" and value is not None:
            value = Quantization.from_dict(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)


