"""Build a bundle: validate -> BuildSpec -> the engine's artifacts -> Triton model repository -> perf harness ->
deploy files -> spec file. What the engine kind adds is the engine's (eagle_trt.engines): this module only orders
the steps.

```
OUT/
  eagle_trt_spec.json   the BuildSpec every later step reads
  checkpoint/ engines/  (trtllm) TRT-LLM EAGLE checkpoint and engines (engines/trtllm.py)
  model_repository/     eagle_model, base_model and the engine's models (engines: Engine.repository)
  perf/                 datasets and scripts, by eagle_trt.perf.harness_files
  draft/                (llmapi, vllm) the draft in the layout that engine reads, when its own is another
  base/                 (llmapi, vllm) the base with both RoPE config layouts, when it has transformers 5's only
  deploy/               Kubernetes (kustomize base + this engine's overlay), Grafana dashboard, by eagle_trt.deploy
```
The bundle is written into a temporary sibling of OUT and renamed at the end, so a failed build leaves nothing
half-written; an existing OUT is replaced only with `force`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from eagle_trt.build_spec import SPEC_FILE, BuildSpec
from eagle_trt.deploy import DEPLOY_DIR, DeployOptions, write_deploy
from eagle_trt.engines import NAMES, get, spec_from, write_model_repository
from eagle_trt.engines.engine import Artifacts, BuildMode
from eagle_trt.engines.served_base import SERVED_BASE_DIR, legacy_rope_missing, write_served_base
from eagle_trt.engines.served_draft import write_served_draft
from eagle_trt.engines.trtllm_install import TrtllmInstall, auto_engine, require_engine
from eagle_trt.errors import EagleTrtError
from eagle_trt.fsutil import atomic_directory
from eagle_trt.model_repository import ServingOptions
from eagle_trt.perf.harness_files import write_perf_files
from eagle_trt.spec import DraftSpec, ModelSpec

ENGINE_CHOICES = ("auto", *NAMES)
SERVED_DRAFT_DIR = "draft"  # OUT/draft: the draft rewritten in the layout the engine reads, when it needs one


@dataclass(frozen=True)
class BuildPlan:
    """What `eagle-trt build` will do (printed by --dry-run)."""

    spec: BuildSpec
    out: Path
    steps: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"out": str(self.out), "engine": self.spec.engine, "steps": self.steps, "spec": self.spec.to_dict()}


def choose_engine(engine: str, draft: DraftSpec | None, device: str, install: TrtllmInstall | None = None) -> str:
    """The engine kind to build: `auto` is decided by the installed TensorRT-LLM (trtllm_install.auto_engine); an
    explicit `trtllm` is checked against it, so a TensorRT-LLM without the engine path stops here, before any
    heavy work."""
    install = install or TrtllmInstall.detect()
    draft_format = draft.format if draft is not None else None
    if engine == "auto":
        return auto_engine(draft_format, device, install)
    require_engine(engine, draft_format, install)
    return engine


def plan_build(base_dir: str | Path, draft_dir: str | Path | None, out: str | Path, *, engine: str = "auto",
               mode: BuildMode = BuildMode(), **spec_options) -> BuildPlan:
    """Validate everything and describe the steps; touches nothing on disk."""
    base = ModelSpec.from_dir(Path(base_dir).resolve())
    draft = DraftSpec.from_dir(Path(draft_dir).resolve()) if draft_dir is not None else None
    engine = choose_engine(engine, draft, spec_options.get("device", "cpu"))
    spec = spec_from(base, draft, engine=engine, **spec_options)
    kind = get(spec.engine)
    from eagle_trt.runtime.loading import require_shapes  # torch, only once a build is planned

    require_shapes(base, draft)  # every tensor against its config.json, before anything is built
    steps = []
    reason = kind.served_draft_change(draft)
    if reason:
        spec = dataclasses.replace(spec, served_draft=str(Path(out).resolve() / SERVED_DRAFT_DIR),
                                   served_draft_reason=reason)
        steps.append(f"draft in the layout {spec.engine} reads -> {SERVED_DRAFT_DIR}/ ({reason})")
    reason = legacy_rope_missing(base, kind)
    if reason:
        spec = dataclasses.replace(spec, served_base=str(Path(out).resolve() / SERVED_BASE_DIR),
                                   served_base_reason=reason)
        steps.append(f"base with both RoPE layouts -> {SERVED_BASE_DIR}/ ({reason})")
    steps += kind.plan_steps(spec, mode)
    steps += ["model repository -> model_repository/", "perf harness -> perf/",
              f"Kubernetes manifests and Grafana dashboard -> {DEPLOY_DIR}/", f"build spec -> {SPEC_FILE}"]
    return BuildPlan(spec=spec, out=Path(out).resolve(), steps=steps)


def check_out_free(out: Path, force: bool) -> None:
    """OUT is replaced only with --force."""
    if out.exists() and not force:
        raise EagleTrtError(f"{out} already exists", "pass --force to replace it, or choose another -o/--output")


def build_bundle(plan: BuildPlan, *, serving: ServingOptions | None = None, deploy: DeployOptions | None = None,
                 force: bool = False, mode: BuildMode = BuildMode()) -> tuple[Path, Artifacts]:
    """Carry out a plan atomically; returns OUT and what the engine's own step wrote (trtllm in a dry run: the
    trtllm-build lines, also in OUT/engines/build_engines.sh)."""
    out, spec = plan.out, plan.spec
    kind = get(spec.engine)
    check_out_free(out, force)
    serving, deploy = serving or ServingOptions(), deploy or DeployOptions()
    serving.validate()
    deploy.validate()
    kind.check_serving(spec, serving)
    with atomic_directory(out, label="building") as tmp:
        artifacts = kind.build_artifacts(spec, tmp, out, mode, serving)
        if spec.served_draft:
            write_served_draft(spec.draft, kind, tmp / SERVED_DRAFT_DIR)
        if spec.served_base:
            write_served_base(spec.base, tmp / SERVED_BASE_DIR)
        write_model_repository(spec, tmp / "model_repository", bundle_dir=out, options=serving)
        write_perf_files(spec, tmp)
        write_deploy(spec, tmp, out, deploy)
        spec.save(tmp / SPEC_FILE)
    return out, artifacts
