"""BuildSpec: every value a bundle is built from, validated once and saved as OUT/eagle_trt_spec.json.

`eagle-trt build` creates it with `BuildSpec.create(base_dir, draft_dir, **options)`; every later step (checkpoint
conversion, trtllm-build, the Triton model repository, the perf harness, the python engine model at serve time)
reads the saved spec instead of re-deriving anything, so max_batch_size, max_draft_len, the tree, dtype and paths
cannot disagree between engines and configs. Variants are made with `dataclasses.replace`, never by mutation.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from eagle_trt import __version__
from eagle_trt.backend import DEFAULT_BACKEND_VERSION, backend_contract, parse_backend_version
from eagle_trt.errors import EagleTrtError
from eagle_trt.spec import ENGINES, PRECISIONS, DraftSpec, ModelSpec, require_compatible
from eagle_trt.tree import (DEFAULT_RUNTIME_TREE, MAX_DRAFT_TOKENS, Tree, TreeConfig, parse_tree_arg,
                            validate_for_llmapi, validate_for_trtllm)

SPEC_FILE = "eagle_trt_spec.json"
DTYPES = PRECISIONS
DEFAULT_TREE = "mc_sim_7b_63"
DEFAULT_LLMAPI_TREE = "chain:3"  # TensorRT-LLM's EAGLE-3 examples; its static trees are deprecated (llm_args.py)


@dataclass(frozen=True, kw_only=True)
class BuildSpec:
    """What a bundle is built from. Sizes follow trtllm-build's names (docs/trtllm_formats.md §3)."""

    base: ModelSpec
    draft: DraftSpec | None
    engine: str
    tree: Tree  # static tree of the TRT-LLM engine (eagle_choices)
    runtime_tree: str  # --tree value for the pytorch engine (chain:N | static:... | dynamic:D,K,T)
    dtype: str
    tp_size: int = 1
    max_batch_size: int = 8
    max_input_len: int = 4096
    max_seq_len: int = 8192
    max_num_tokens: int = 8192
    max_draft_len: int = 63
    num_eagle_layers: int = 4
    max_non_leaves_per_layer: int = 10
    device: str = "cpu"
    chat_template: bool = True
    backend_version: str = DEFAULT_BACKEND_VERSION  # tensorrtllm backend release the trtllm configs target
    draft_vocab: int | None = None  # pytorch engine: FR-Spec draft vocabulary (None: the draft's file; 0: full)
    tree_tuning: dict | None = None  # `--tree auto`: the tuner's choice and predictions (perf/calibrate.py)
    # llmapi/vllm: the copy of the draft in the layout that engine reads, written into the bundle, and why
    # (draft_layouts.served_layout_change); None: the engine reads draft.path as it is
    served_draft: str | None = None
    served_draft_reason: str | None = None
    # llmapi/vllm: the base with both RoPE layouts in its config.json (build/served_base.py), and why; None: base.path
    served_base: str | None = None
    served_base_reason: str | None = None
    eagle_trt_version: str = __version__

    # ---- creation -----------------------------------------------------------------------------------------------
    @classmethod
    def create(cls, base_dir: str | Path, draft_dir: str | Path | None, **options) -> BuildSpec:
        """Read base + draft from their directories (once), then `from_specs`."""
        draft = DraftSpec.from_dir(draft_dir) if draft_dir is not None else None
        return cls.from_specs(ModelSpec.from_dir(base_dir), draft, **options)

    @classmethod
    def from_specs(cls, base: ModelSpec, draft: DraftSpec | None, *, engine: str,
                   tree: str | Tree = DEFAULT_TREE, runtime_tree: str | None = None, dtype: str = "auto",
                   tp_size: int = 1, max_batch_size: int = 8, max_input_len: int | None = None,
                   max_seq_len: int | None = None, max_num_tokens: int | None = None,
                   max_draft_len: int | None = None, num_eagle_layers: int | None = None,
                   max_non_leaves_per_layer: int | None = None, device: str = "cpu", chat_template: bool = True,
                   backend_version: str = DEFAULT_BACKEND_VERSION, draft_vocab: int | None = None,
                   tree_tuning: dict | None = None) -> BuildSpec:
        """Fill defaults from the tree and the base, and validate everything (`validate`)."""
        if engine not in ENGINES:
            raise EagleTrtError(f"unknown engine {engine!r}", f"choose one of {', '.join(ENGINES)}")
        static = tree if isinstance(tree, Tree) else _static_tree(tree)
        runtime_tree = runtime_tree or (DEFAULT_LLMAPI_TREE if engine in ("llmapi", "vllm") else DEFAULT_RUNTIME_TREE)
        if dtype == "auto":
            dtype = auto_dtype(base.torch_dtype, engine, device)
        if max_seq_len is None:  # None means "from the base"; 0 or less is refused by validate(), never defaulted
            max_seq_len = min(8192, base.max_position_embeddings)
        if max_input_len is None:
            max_input_len = max(1, min(4096, max_seq_len // 2))
        spec = cls(
            base=base, draft=draft, engine=engine, tree=static, runtime_tree=runtime_tree, dtype=dtype,
            tp_size=tp_size, max_batch_size=max_batch_size, max_input_len=max_input_len, max_seq_len=max_seq_len,
            max_num_tokens=8192 if max_num_tokens is None else max_num_tokens,
            max_draft_len=max_draft_len if max_draft_len is not None else static.num_nodes,
            num_eagle_layers=num_eagle_layers if num_eagle_layers is not None else static.depth,
            max_non_leaves_per_layer=(max_non_leaves_per_layer if max_non_leaves_per_layer is not None
                                      else max(static.non_leaves_per_depth())),
            device=device, chat_template=chat_template, backend_version=backend_version, draft_vocab=draft_vocab,
            tree_tuning=tree_tuning,
        )
        spec.validate()
        return spec

    def validate(self) -> None:
        """The one validation path of a bundle: the base and draft fit together for this engine
        (`spec.check_compatibility`) and every option and cross-value rule holds. Raises one EagleTrtError."""
        require_compatible(self.base, self.draft, self.engine)
        problems: list[str] = []
        if self.engine not in ENGINES:
            problems.append(f"engine {self.engine!r} is not one of {', '.join(ENGINES)}")
        if self.dtype not in DTYPES:
            problems.append(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)} (or auto)")
        if self.device not in ("cpu", "cuda"):
            problems.append(f"device {self.device!r} is not cpu or cuda")
        for name in ("tp_size", "max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens",
                     "max_draft_len", "num_eagle_layers", "max_non_leaves_per_layer"):
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
        if self.max_draft_len > MAX_DRAFT_TOKENS:
            problems.append(f"max_draft_len {self.max_draft_len} > {MAX_DRAFT_TOKENS} (TRT-LLM's limit)")
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
            runtime = parse_tree_arg(self.runtime_tree)
            if self.engine == "llmapi":
                validate_for_llmapi(runtime)
            if self.engine == "vllm" and self.draft is not None and runtime.kind != "chain":
                problems.append(f"vLLM drafts chains only (its tree attention was removed), got --tree "
                                f"{self.runtime_tree}: pass --tree chain:N")
        except EagleTrtError as exc:
            problems.append(f"runtime tree: {exc.message}")
        if self.engine == "trtllm":
            try:
                parse_backend_version(self.backend_version)
            except EagleTrtError as exc:
                problems.append(exc.message)
            try:
                validate_for_trtllm(self.tree, self.num_eagle_layers, self.max_draft_len,
                                    self.max_non_leaves_per_layer)
            except EagleTrtError as exc:
                problems.append(exc.message)
        if problems:
            raise EagleTrtError("invalid build settings: " + "; ".join(problems),
                                "change the options named above (see `eagle-trt build --help`)")

    # ---- derived values -----------------------------------------------------------------------------------------
    @property
    def runtime_tree_config(self) -> TreeConfig:
        return parse_tree_arg(self.runtime_tree)

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
        return self.engine != "trtllm" or backend_contract(self.backend_version).perf_metrics

    # ---- persistence --------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["base"] = _spec_to_dict(self.base)
        data["draft"] = _spec_to_dict(self.draft) if self.draft is not None else None
        data["tree"] = self.tree.to_list()
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
        data["tree"] = Tree.from_choices(data["tree"], source="eagle_trt_spec.json tree")
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


def _static_tree(value: str) -> Tree:
    """A --tree value for the static TRT-LLM tree: a name, a JSON file, inline JSON, or chain:N."""
    if value.startswith(("static:", "chain:")):
        cfg = parse_tree_arg(value)
        return cfg.tree
    if value.startswith("dynamic:"):
        raise EagleTrtError(f"the TRT-LLM engine needs a static tree, got {value!r}",
                            "pass a named tree, a JSON file or chain:N (dynamic trees are a runtime option)")
    return parse_tree_arg("static:" + value).tree


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
        out[f.name] = str(value) if isinstance(value, Path) else value
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
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)
