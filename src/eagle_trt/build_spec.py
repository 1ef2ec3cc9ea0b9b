"""BuildSpec: every value a bundle is built from, validated once and saved as OUT/eagle_trt_spec.json.

`eagle-trt build` creates it with `BuildSpec.create(base_dir, draft_dir, **options)`; every build step
(checkpoint conversion, trtllm-build, the Triton model repository, the perf harness) reads this one object, so
max_batch_size, the tree, dtype and paths cannot disagree between engines and configs. The tree is stored resolved
(`tree.resolve`: a static tree's choices inline), so it means the same wherever the bundle is read. At serve time
the python engine model reads the values the repository's config.pbtxt carries (model_repository/layout.py), and
the perf harness reads the saved spec. Variants are made with `dataclasses.replace`, never by mutation.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from eagle_trt import __version__
from eagle_trt.backend import DEFAULT_BACKEND_VERSION, backend_contract, parse_backend_version
from eagle_trt.errors import EagleTrtError
from eagle_trt.llmapi_release import llmapi_release
from eagle_trt.quantization import Quantization
from eagle_trt.spec import ENGINES, PRECISIONS, DraftSpec, ModelSpec, require_compatible
from eagle_trt.tree import MAX_DRAFT_TOKENS, Tree, TreeConfig, resolve

SPEC_FILE = "eagle_trt_spec.json"
DTYPES = PRECISIONS


@dataclass(frozen=True)
class TrtllmSettings:
    """What only a trtllm bundle has: the EAGLE sizes its TensorRT engine is built with (the checkpoint's
    config.json; trtllm-build's names: draft tokens per step, EagleNets = the tree's depth, non-leaf nodes per
    depth; by default from the bundle's tree), and the tensorrtllm backend release its configs target."""

    max_draft_len: int
    num_eagle_layers: int
    max_non_leaves_per_layer: int
    backend_version: str = DEFAULT_BACKEND_VERSION

    @classmethod
    def of(cls, tree: TreeConfig, max_draft_len: int | None = None, num_eagle_layers: int | None = None,
           max_non_leaves_per_layer: int | None = None, backend_version: str | None = None) -> TrtllmSettings:
        return cls(tree.tree.num_nodes if max_draft_len is None else max_draft_len,
                   tree.tree.depth if num_eagle_layers is None else num_eagle_layers,
                   max(tree.tree.non_leaves_per_depth()) if max_non_leaves_per_layer is None
                   else max_non_leaves_per_layer, backend_version or DEFAULT_BACKEND_VERSION)

    def engine_sizes(self) -> dict:
        """The three sizes, as the EAGLE checkpoint's config.json names them."""
        return {"max_draft_len": self.max_draft_len, "num_eagle_layers": self.num_eagle_layers,
                "max_non_leaves_per_layer": self.max_non_leaves_per_layer}

    def problems(self, tree: TreeConfig) -> list[str]:
        found = [f"{name} must be a positive integer, got {value!r}" for name, value in self.engine_sizes().items()
                 if not isinstance(value, int) or value < 1]
        try:
            parse_backend_version(self.backend_version)
        except EagleTrtError as exc:
            found.append(exc.message)
        if found:
            return found
        if self.max_draft_len > MAX_DRAFT_TOKENS:
            found.append(f"max_draft_len {self.max_draft_len} > {MAX_DRAFT_TOKENS} (TRT-LLM's limit)")
        try:
            validate_for_trtllm(tree.tree, self.num_eagle_layers, self.max_draft_len, self.max_non_leaves_per_layer)
        except EagleTrtError as exc:
            found.append(exc.message)
        return found


@dataclass(frozen=True, kw_only=True)
class BuildSpec:
    """What a bundle is built from. Sizes follow trtllm-build's names (docs/trtllm_formats.md §3)."""

    base: ModelSpec
    draft: DraftSpec | None
    engine: str
    tree: TreeConfig  # the tree eagle_model drafts with, resolved for this engine (tree.resolve)
    dtype: str
    tp_size: int = 1
    max_batch_size: int = 8
    max_input_len: int = 4096
    max_seq_len: int = 8192
    max_num_tokens: int = 8192
    trtllm: TrtllmSettings | None = None  # engine trtllm only
    device: str = "cpu"
    chat_template: bool = True
    draft_vocab: int | None = None  # pytorch engine: FR-Spec draft vocabulary (None: the draft's file; 0: full)
    tree_tuning: dict | None = None  # `--tree auto`: the tuner's choice and predictions (tuning/calibrate.py)
    # llmapi/vllm: the copy of the draft in the layout that engine reads, written into the bundle, and why
    # (draft_layouts.served_layout_change); None: the engine reads draft.path as it is
    served_draft: str | None = None
    served_draft_reason: str | None = None
    # llmapi/vllm: the base with both RoPE layouts in its config.json (build/served_base.py), and why; None: base.path
    served_base: str | None = None
    served_base_reason: str | None = None
    llmapi_version: str | None = None  # llmapi: the TensorRT-LLM release line it targets (eagle_trt.llmapi_release)
    eagle_trt_version: str = __version__

    # ---- creation -----------------------------------------------------------------------------------------------
    @classmethod
    def create(cls, base_dir: str | Path, draft_dir: str | Path | None, **options) -> BuildSpec:
        """Read base + draft from their directories (once), then `from_specs`."""
        draft = DraftSpec.from_dir(draft_dir) if draft_dir is not None else None
        return cls.from_specs(ModelSpec.from_dir(base_dir), draft, **options)

    @classmethod
    def from_specs(cls, base: ModelSpec, draft: DraftSpec | None, *, engine: str,
                   tree: str | TreeConfig | None = None, dtype: str = "auto",
                   tp_size: int = 1, max_batch_size: int = 8, max_input_len: int | None = None,
                   max_seq_len: int | None = None, max_num_tokens: int | None = None,
                   max_draft_len: int | None = None, num_eagle_layers: int | None = None,
                   max_non_leaves_per_layer: int | None = None, device: str = "cpu", chat_template: bool = True,
                   backend_version: str | None = None, draft_vocab: int | None = None,
                   tree_tuning: dict | None = None) -> BuildSpec:
        """Resolve the tree for the engine (None: its default), fill defaults from the tree and the base, and
        validate everything (`validate`). The max_draft_len group applies to engine trtllm only; `backend_version`
        to trtllm (the tensorrtllm backend release, eagle_trt.backend) and llmapi (the TensorRT-LLM release line,
        eagle_trt.llmapi_release)."""
        if engine not in ENGINES:
            raise EagleTrtError(f"unknown engine {engine!r}", f"choose one of {', '.join(ENGINES)}")
        if backend_version is not None and engine not in ("trtllm", "llmapi"):
            raise EagleTrtError(f"--backend-version names the TensorRT-LLM release of a trtllm or llmapi bundle, not "
                                f"of engine {engine}", "drop --backend-version")
        llmapi_version = llmapi_release(backend_version).version if engine == "llmapi" else None
        try:
            tree = resolve(tree, engine, llmapi_version)
        except EagleTrtError as exc:
            raise EagleTrtError(f"invalid build settings: tree: {exc.message}", exc.hint) from None
        trtllm_only = (max_draft_len, num_eagle_layers, max_non_leaves_per_layer)
        if engine != "trtllm" and any(v is not None for v in trtllm_only):
            raise EagleTrtError(f"max_draft_len, num_eagle_layers and max_non_leaves_per_layer describe TensorRT-LLM "
                                f"engines; engine {engine} takes its sizes from the tree ({tree.label()})",
                                "drop them, or build with --engine trtllm")
        if dtype == "auto":
            dtype = auto_dtype(base.torch_dtype, engine, device)
        if max_seq_len is None:  # None means "from the base"; 0 or less is refused by validate(), never defaulted
            max_seq_len = min(8192, base.max_position_embeddings)
        if max_input_len is None:
            max_input_len = max(1, min(4096, max_seq_len // 2))
        spec = cls(
            base=base, draft=draft, engine=engine, tree=tree, dtype=dtype,
            tp_size=tp_size, max_batch_size=max_batch_size, max_input_len=max_input_len, max_seq_len=max_seq_len,
            max_num_tokens=8192 if max_num_tokens is None else max_num_tokens,
            trtllm=TrtllmSettings.of(tree, *trtllm_only, backend_version) if engine == "trtllm" else None,
            llmapi_version=llmapi_version,
            device=device, chat_template=chat_template, draft_vocab=draft_vocab,
            tree_tuning=tree_tuning,
        )
        spec.validate()
        return spec

    def validate(self) -> None:
        """The one validation path of a bundle: the base and draft fit together for this engine
        (`spec.check_compatibility`) and every option and cross-value rule holds. Raises one EagleTrtError."""
        require_compatible(self.base, self.draft, self.engine, self.llmapi_version)
        problems: list[str] = []
        if self.engine not in ENGINES:
            problems.append(f"engine {self.engine!r} is not one of {', '.join(ENGINES)}")
        if self.dtype not in DTYPES:
            problems.append(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)} (or auto)")
        if self.device not in ("cpu", "cuda"):
            problems.append(f"device {self.device!r} is not cpu or cuda")
        for name in ("tp_size", "max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                problems.append(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if problems:
            raise EagleTrtError("invalid build settings: " + "; ".join(problems), "fix the options named above")
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
        if self.engine == "pytorch" and self.tp_size != 1:
            problems.append("the pytorch engine runs on one device: tp_size must be 1")
        if self.dtype == "int8" and (self.engine != "pytorch" or self.device != "cpu"):
            problems.append(f"dtype int8 is the pytorch engine's CPU mode (engine {self.engine}, device "
                            f"{self.device}): use float16/bfloat16 on a GPU")
        if self.draft_vocab is not None and (not isinstance(self.draft_vocab, int) or self.draft_vocab < 0):
            problems.append(f"draft_vocab must be an integer >= 0, got {self.draft_vocab!r}")
        try:
            resolve(self.tree, self.engine, self.llmapi_version)
        except EagleTrtError as exc:
            problems.append(f"tree: {exc.message}")
        if (self.engine == "llmapi") != (self.llmapi_version is not None):
            problems.append(f"engine {self.engine} {'needs' if self.engine == 'llmapi' else 'takes no'} "
                            "TensorRT-LLM release line (llmapi_version)")
        if (self.engine == "trtllm") != (self.trtllm is not None):
            problems.append(f"engine {self.engine} {'needs' if self.engine == 'trtllm' else 'takes no'} TensorRT-LLM "
                            "engine sizes (max_draft_len, num_eagle_layers, max_non_leaves_per_layer)")
        elif self.trtllm is not None:
            problems += self.trtllm.problems(self.tree)
        if problems:
            raise EagleTrtError("invalid build settings: " + "; ".join(problems),
                                "change the options named above (see `eagle-trt build --help`)")

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

    @property
    def acceptance_figures(self) -> bool:
        """Whether the bundle's eagle_model answers acceptance figures (and takes return_perf_metrics): every engine
        kind but a trtllm bundle for a backend before 0.19. The perf harness asks for them only then."""
        return self.engine != "trtllm" or backend_contract(self.trtllm.backend_version).perf_metrics

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


def auto_dtype(torch_dtype: str | None, engine: str, device: str) -> str:
    """What `--dtype auto` means for this base, engine and device."""
    if engine == "pytorch" and device == "cpu":
        return "float32"  # CPU matmuls in half precision are slow and lossy; fp32 is the oracle's dtype
    if torch_dtype in ("float16", "bfloat16"):
        return torch_dtype
    return "float16" if engine == "trtllm" else "bfloat16"


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


def validate_for_trtllm(tree: Tree, num_eagle_layers: int, max_draft_len: int, max_non_leaves_per_layer: int) -> None:
    """TRT-LLM's rules for eagle_choices (examples/eagle/README.md): depth == num_eagle_layers, nodes <=
    max_draft_len, non-leaf nodes per depth <= max_non_leaves_per_layer. Raises EagleTrtError listing every breach."""
    problems = []
    if tree.depth != num_eagle_layers:
        problems.append(f"tree depth {tree.depth} != num_eagle_layers {num_eagle_layers} (TRT-LLM needs them equal; "
                        f"pass --num-eagle-layers {tree.depth} or a tree of depth {num_eagle_layers})")
    if tree.num_nodes > max_draft_len:
        problems.append(f"tree has {tree.num_nodes} nodes > max_draft_len {max_draft_len} "
                        f"(pass --max-draft-len {tree.num_nodes} or a smaller tree)")
    worst = max(tree.non_leaves_per_depth())
    if worst > max_non_leaves_per_layer:
        problems.append(f"tree has {worst} non-leaf nodes at one depth > max_non_leaves_per_layer "
                        f"{max_non_leaves_per_layer} (pass --max-non-leaves-per-layer {worst})")
    if problems:
        raise EagleTrtError("the EAGLE tree does not fit the TensorRT-LLM engine: " + "; ".join(problems),
                            "adjust the tree or the engine limits as suggested")
