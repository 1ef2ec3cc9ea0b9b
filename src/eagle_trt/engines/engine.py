"""The one interface every engine kind implements: what it runs (families, draft layouts, quantization schemes,
trees, dtypes, releases), each refusal with its reason, and what it writes into a bundle (its models of the Triton
repository, its served copies of the base and draft, its image, the files a bundle must hold) and what perf and
metrics can read from it. Nothing outside `eagle_trt.engines` asks an engine kind by its name; it asks the object
(`engines.get(name)`).

An `Engine` subclass is one module of this package (pytorch, trtllm, llmapi, vllm); adding an engine is adding a
module and listing its object in `engines.ENGINES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.errors import EagleTrtError
from eagle_trt.families import FAMILY_BY_TYPE, Family
from eagle_trt.quantization import Quantization
from eagle_trt.spec import CPU_PRECISIONS, EAGLE_MODEL, DraftSpec, ModelSpec
from eagle_trt.tree_config import TreeConfig, resolve


@dataclass(frozen=True)
class ServingImage:
    """The container a bundle's Triton runs in."""

    image: str  # what the Deployment runs
    base: str  # the NGC image it is, or derives from
    derived: bool  # the user builds `image` from `base` + eagle-trt (OUT/deploy/image/Dockerfile)
    why: str  # one line: why this image
    install: tuple[str, ...] = ()  # the Dockerfile's RUN lines on top of `base` (eagle-trt included)
    tag: str = ""  # the derived image's tag ("": the base image's)

    def to_dict(self) -> dict:
        return {"image": self.image, "base": self.base, "derived": self.derived, "why": self.why}


@dataclass(frozen=True)
class RequiredPath:
    """A path a served bundle reads (checked in the pod before Triton starts, deploy/check_bundle.py)."""

    what: str
    path: Path
    hint: str = "mount the volume so that it shows the path the build used"


@dataclass(frozen=True)
class BuildMode:
    """How far `eagle-trt build` goes, which each engine interprets: `full` builds everything; `dry-run` validates
    and plans, and an engine whose build needs a GPU toolchain writes what it can without one (trtllm: the checkpoint
    and the trtllm-build lines; llmapi: its configs; `Engine.dry_run_writes`); `no-engines` writes the bundle but
    does not run trtllm-build. `reuse_checkpoint` (trtllm): OUT's converted checkpoint is kept."""

    name: str = "full"  # full | dry-run | no-engines
    reuse_checkpoint: bool = False
    NAMES = ("full", "dry-run", "no-engines")  # a ClassVar: no annotation

    def __post_init__(self):
        if self.name not in self.NAMES:
            raise EagleTrtError(f"unknown build mode {self.name!r}", f"use one of {', '.join(self.NAMES)}")

    @property
    def dry_run(self) -> bool:
        return self.name == "dry-run"

    @property
    def builds_engines(self) -> bool:
        return self.name == "full"


@dataclass
class Artifacts:
    """What an engine's own build step wrote into the bundle, for the command to print."""

    commands: list[str] = field(default_factory=list)  # trtllm: the trtllm-build lines (a dry run skips them)
    config: Path | None = None  # llmapi: the model.yaml written
    warnings: list[str] = field(default_factory=list)


class Engine:
    """Defaults are the plainest engine's; each module overrides what its engine does otherwise."""

    name: str = ""
    label: str = ""
    default_tree: str = "chain:3"
    family_refusals: dict[str, str] = {}  # family name -> why this engine does not run it
    reads_hf_directories: bool = False  # the engine loads the base and draft directories itself (served copies)
    takes_messages: bool = True  # eagle_model takes `messages` (our preprocessing applies the chat template)
    cumulative_text: bool = False  # a streamed text_output holds the text so far, not the new piece
    startup_budget_s: int = 1800  # how long loading may take before Kubernetes gives up on the pod
    tunes_trees: bool = False  # `--tree auto` tunes this engine's tree on this machine
    dry_run_writes: bool = False  # `build --dry-run` writes the bundle (all but what needs the engine's toolchain)
    reads_draft: bool = True  # the served bundle reads the draft directory (trtllm: it is inside the engine)
    releases: bool = False  # --backend-version applies (a TensorRT-LLM release)

    # ---- what it runs -------------------------------------------------------------------------------------------
    def family_refusal(self, family: Family) -> str | None:
        return self.family_refusals.get(family.name)

    def draft_problems(self, draft: DraftSpec, backend_version: str | None = None) -> list[str]:
        """Each thing this draft needs that the engine's draft model does not compute (whole sentences)."""
        return []

    def quantization_refusal(self, quant: Quantization, backend_version: str | None = None) -> str | None:
        return None

    def refusals(self, base: ModelSpec, draft: DraftSpec | None, backend_version: str | None = None) -> list[str]:
        """Why this engine does not run this base (its family, its quantization) with this draft."""
        out = []
        family = FAMILY_BY_TYPE[base.family]
        refusal = self.family_refusal(family)
        if refusal:
            out.append(f"the {self.name} engine does not run {family.label} bases ({base.architecture}): {refusal}")
        refusal = self.quantization_refusal(base.quantization, backend_version) if base.quantization else None
        if refusal:
            out.append(f"the {self.name} engine does not run {base.quantization.label}: {refusal}")
        return out + (self.draft_problems(draft, backend_version) if draft is not None else [])

    def missing_in_draft_model(self, draft: DraftSpec, what: list[str]) -> list[str]:
        return [f"the {self.name} engine's draft model has no {w}, which this {draft.layout_label} draft uses"
                for w in what]

    # ---- trees, dtypes, releases, the spec --------------------------------------------------------------------
    def tree(self, value: str | TreeConfig | None, backend_version: str | None = None) -> TreeConfig:
        """A --tree value as this engine drafts it (None: its default tree); its rules checked."""
        cfg = resolve(self.default_tree if value is None else value)
        self.check_tree(cfg, backend_version)
        return cfg

    def check_tree(self, cfg: TreeConfig, backend_version: str | None) -> None:
        """Raise EagleTrtError when the engine cannot draft with `cfg`."""

    def release(self, backend_version: str | None) -> str | None:
        """The normalised release the bundle targets, or None for an engine without releases."""
        if backend_version is not None:
            raise EagleTrtError(f"--backend-version names the TensorRT-LLM release of a trtllm or llmapi bundle, not "
                                f"of engine {self.name}", "drop --backend-version")
        return None

    def default_dtype(self, base: ModelSpec, device: str) -> str:
        """What `--dtype auto` means for this base on this engine."""
        return base.torch_dtype if base.torch_dtype in ("float16", "bfloat16") else "bfloat16"

    def spec_problems(self, spec: BuildSpec) -> list[str]:
        """The engine's own rules on a bundle's options (beyond what BuildSpec.validate checks for every engine)."""
        found = []
        if spec.dtype in CPU_PRECISIONS:
            found.append(f"dtype {spec.dtype} is the pytorch engine's CPU mode (engine {self.name}): use "
                         "float16/bfloat16 on a GPU")
        return found

    def acceptance_figures(self, spec: BuildSpec) -> bool:
        """Whether eagle_model answers acceptance figures (and takes return_perf_metrics)."""
        return True

    def load_settings(self, bundle: Path) -> dict[str, str]:
        """What shapes the bundle's speculation by load, as `perf load` names it in its report (none here)."""
        return {}

    # ---- what it writes -----------------------------------------------------------------------------------------
    def served_draft_change(self, draft: DraftSpec | None) -> str | None:
        """Why the engine must be given the draft in another layout than its own (a copy in the bundle), or None."""
        return None

    def served_draft_config(self, draft: DraftSpec) -> dict:
        raise NotImplementedError

    def served_draft_name(self, draft: DraftSpec, name: str) -> str:
        return name

    def check_serving(self, spec: BuildSpec, serving) -> None:
        """Raise EagleTrtError, before any work, for serving options the engine cannot honour."""

    def plan_steps(self, spec: BuildSpec, mode: BuildMode) -> list[str]:
        """The engine's own build steps, as `build --dry-run` prints them."""
        return []

    def build_artifacts(self, spec: BuildSpec, tmp: Path, out: Path, mode: BuildMode, serving) -> Artifacts:
        """Write the engine's own artifacts into the bundle being built (`tmp`, to be renamed `out`)."""
        return Artifacts()

    def repository(self, spec: BuildSpec, bundle_dir: Path, options) -> tuple[dict[str, dict], dict[str, object]]:
        """Its models of the Triton repository: (model name -> config fields, relative path -> text or source)."""
        raise NotImplementedError

    def image(self, spec: BuildSpec) -> ServingImage:
        raise NotImplementedError

    def repository_config(self, bundle: Path) -> Path:
        """The file that says eagle_model is there."""
        return bundle / "model_repository" / EAGLE_MODEL / "config.pbtxt"

    def required_paths(self, spec: BuildSpec, bundle: Path) -> list[RequiredPath]:
        """What the served bundle reads: its model repository, the base (its tokenizer, and its weights for the
        engines that read Hugging Face directories), the draft, and what the engine adds."""
        paths = [RequiredPath("eagle_model config", self.repository_config(bundle)),
                 RequiredPath("base model directory", spec.engine_base_path)]
        if spec.engine_draft_path is not None and self.reads_draft:
            paths.append(RequiredPath("draft directory", spec.engine_draft_path))
        return paths

    def uses_gpu(self, spec: BuildSpec) -> bool:
        return True

    def triton_ranks(self, spec: BuildSpec) -> int:
        """tritonserver processes per pod (one per GPU rank where the backend runs one rank per process)."""
        return 1

    def queue_models(self) -> list[str]:
        """The models requests queue in (what the autoscaler watches): the engine models."""
        from eagle_trt.model_repository import ENSEMBLES

        return list(ENSEMBLES.values())
