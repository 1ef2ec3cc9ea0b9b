"""Build a bundle: validate -> BuildSpec -> engines -> Triton model repository -> perf harness -> spec file.

```
OUT/
  eagle_trt_spec.json   the BuildSpec every later step reads
  checkpoint/ engines/  (trtllm) TRT-LLM EAGLE checkpoint and engines, by eagle_trt.build.trtllm
  model_repository/     eagle_model, base_model, preprocessing, postprocessing, eagle_engine, base_engine
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
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from eagle_trt.build.draft_export import write_served_draft
from eagle_trt.build.llmapi import speculative_config, write_llmapi_config
from eagle_trt.build.served_base import SERVED_BASE_DIR, legacy_rope_missing, write_served_base
from eagle_trt.build.trtllm import build_trtllm_engines
from eagle_trt.build.trtllm_env import TrtllmInstall, auto_engine, require_engine
from eagle_trt.build_spec import SPEC_FILE, BuildSpec
from eagle_trt.deploy import DEPLOY_DIR, DeployOptions, write_deploy
from eagle_trt.draft_layouts import served_layout_change
from eagle_trt.errors import EagleTrtError
from eagle_trt.fsutil import atomic_directory
from eagle_trt.model_repository import ServingOptions, write_model_repository
from eagle_trt.perf.harness_files import write_perf_files
from eagle_trt.spec import ENGINES, DraftSpec, ModelSpec

ENGINE_CHOICES = ("auto", *ENGINES)
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
    """The engine kind to build: `auto` is decided by the installed TensorRT-LLM (trtllm_env.auto_engine); an
    explicit `trtllm` is checked against it, so a TensorRT-LLM without the engine path stops here, before any
    heavy work."""
    install = install or TrtllmInstall.detect()
    draft_format = draft.format if draft is not None else None
    if engine == "auto":
        return auto_engine(draft_format, device, install)
    require_engine(engine, draft_format, install)
    return engine


def plan_build(base_dir: str | Path, draft_dir: str | Path | None, out: str | Path, *, engine: str = "auto",
               skip_convert: bool = False, skip_engines: bool = False, **spec_options) -> BuildPlan:
    """Validate everything and describe the steps; touches nothing on disk."""
    base = ModelSpec.from_dir(Path(base_dir).resolve())
    draft = DraftSpec.from_dir(Path(draft_dir).resolve()) if draft_dir is not None else None
    engine = choose_engine(engine, draft, spec_options.get("device", "cpu"))
    spec = BuildSpec.from_specs(base, draft, engine=engine, **spec_options)
    from eagle_trt.runtime.loading import require_shapes  # torch, only once a build is planned

    require_shapes(base, draft)  # every tensor against its config.json, before anything is built
    steps = []
    reason = served_layout_change(draft, spec.engine)
    if reason:
        spec = dataclasses.replace(spec, served_draft=str(Path(out).resolve() / SERVED_DRAFT_DIR),
                                   served_draft_reason=reason)
        steps.append(f"draft in the layout {spec.engine} reads -> {SERVED_DRAFT_DIR}/ ({reason})")
    reason = legacy_rope_missing(base, spec.engine)
    if reason:
        spec = dataclasses.replace(spec, served_base=str(Path(out).resolve() / SERVED_BASE_DIR),
                                   served_base_reason=reason)
        steps.append(f"base with both RoPE layouts -> {SERVED_BASE_DIR}/ ({reason})")
    if spec.engine == "trtllm":
        steps.append("convert checkpoint (skipped)" if skip_convert else "convert checkpoint -> checkpoint/")
        steps.append("trtllm-build (skipped)" if skip_engines else "trtllm-build -> engines/eagle, engines/base")
    elif spec.engine == "llmapi":
        steps.append("LLM-API config -> model_repository/{eagle,base}_engine/1/model.yaml")
    steps.append("model repository -> model_repository/")
    steps.append("perf harness -> perf/")
    steps.append(f"Kubernetes manifests and Grafana dashboard -> {DEPLOY_DIR}/")
    steps.append(f"build spec -> {SPEC_FILE}")
    return BuildPlan(spec=spec, out=Path(out).resolve(), steps=steps)


def check_out_free(out: Path, force: bool) -> None:
    """OUT is replaced only with --force."""
    if out.exists() and not force:
        raise EagleTrtError(f"{out} already exists", "pass --force to replace it, or choose another -o/--output")


def build_bundle(plan: BuildPlan, *, serving: ServingOptions | None = None, deploy: DeployOptions | None = None,
                 force: bool = False, skip_convert: bool = False, skip_engines: bool = False,
                 dry_run: bool = False) -> Path:
    """Carry out a plan atomically; returns OUT. For trtllm, `dry_run` writes everything but the engines and
    records the exact trtllm-build commands in OUT/engines/build_engines.sh."""
    out, spec = plan.out, plan.spec
    check_out_free(out, force)
    serving, deploy = serving or ServingOptions(), deploy or DeployOptions()
    serving.validate()
    deploy.validate()
    if spec.engine == "llmapi" and spec.draft is not None:
        speculative_config(spec, serving.load_policy)  # a policy TensorRT-LLM cannot express stops before any work
    with atomic_directory(out, label="building") as tmp:
        if spec.engine == "trtllm":
            if skip_convert and out.exists():  # reuse OUT's checkpoint
                shutil.copytree(out / "checkpoint", tmp / "checkpoint")
            result = build_trtllm_engines(spec, tmp, dry_run=dry_run, skip_convert=skip_convert,
                                          skip_engines=skip_engines)
            _write_engine_script(result.commands, tmp, out)
            _write_plugin_record(tmp)
        if spec.served_draft:
            write_served_draft(spec.draft, spec.engine, tmp / SERVED_DRAFT_DIR)
        if spec.served_base:
            write_served_base(spec.base, tmp / SERVED_BASE_DIR)
        repo = tmp / "model_repository"
        write_model_repository(spec, repo, bundle_dir=out, options=serving)
        if spec.engine == "llmapi":
            for engine_name, speculative in (("eagle_engine", spec.draft is not None), ("base_engine", False)):
                write_llmapi_config(spec, repo / engine_name / "1" / "model.yaml", speculative=speculative,
                                    decoupled=serving.decoupled, load_policy=serving.load_policy)
        write_perf_files(spec, tmp)
        write_deploy(spec, tmp, out, deploy)
        spec.save(tmp / SPEC_FILE)
    return out


def _write_engine_script(commands: dict[str, list[str]], tmp: Path, out: Path) -> None:
    """OUT/engines/build_engines.sh: the exact trtllm-build command lines (paths as in the final OUT)."""
    import shlex

    engines = tmp / "engines"
    engines.mkdir(parents=True, exist_ok=True)
    lines = ["#!/usr/bin/env bash",
             "# trtllm-build for the EAGLE and the base engine (run inside the serving container)",
             "set -euo pipefail"]
    lines += [" ".join(shlex.quote(a.replace(str(tmp), str(out))) for a in argv) for argv in commands.values()]
    (engines / "build_engines.sh").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (engines / "build_engines.sh").chmod(0o755)


def _write_plugin_record(tmp: Path) -> None:
    """OUT/plugins/tree_attention.json: our tree-attention TensorRT plugin and how TensorRT picks it up."""
    import json

    from eagle_trt.plugins.trt_plugin import describe_plugin

    (tmp / "plugins").mkdir(exist_ok=True)
    (tmp / "plugins" / "tree_attention.json").write_text(json.dumps(describe_plugin(), indent=2) + "\n",
                                                         encoding="utf-8")

