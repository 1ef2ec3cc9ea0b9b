"""`eagle-trt build` as one call: every option in a `BuildRequest`, `run_build` does the work and says what it did.

The command (commands/build.py) and `eagle-trt demo` only declare options and print the `BuildOutcome`; this module
decides: the engine kind, whether the tree is tuned (`--tree auto`, or no --tree for an engine that tunes its trees
with a draft), the plan, and what the build mode writes (a dry run writes the bundle only for an engine that can
write all but its toolchain's part: trtllm's checkpoint and trtllm-build lines, llmapi's configs).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from eagle_trt.build.bundle import BuildPlan, build_bundle, check_out_free, plan_build
from eagle_trt.deploy import DeployOptions
from eagle_trt.engines import get
from eagle_trt.engines.engine import Artifacts, BuildMode
from eagle_trt.errors import EagleTrtError
from eagle_trt.model_repository import ServingOptions
from eagle_trt.tree_config import AUTO
from eagle_trt.tuning import TUNE_BUDGET_S


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    """The options of `eagle-trt build` (see its --help): what the bundle is built from, and how it serves."""

    base_dir: Path
    draft_dir: Path | None
    out: Path
    engine: str = "auto"
    tree: str | None = None  # a --tree value, auto, or None: tuned for pytorch with a draft, else the default
    dtype: str = "auto"
    draft_vocab: int | None = None
    device: str = "cpu"
    max_batch_size: int = 8
    max_input_len: int | None = None
    max_seq_len: int | None = None
    tp_size: int = 1
    backend_version: str | None = None  # trtllm: the tensorrtllm backend release; llmapi: the TensorRT-LLM line
    chat_template: bool = True
    serving: ServingOptions = ServingOptions()
    deploy: DeployOptions = DeployOptions()  # --k8s-*: the Kubernetes manifests under OUT/deploy/
    mode: BuildMode = BuildMode()
    force: bool = False
    tune_budget: float = TUNE_BUDGET_S  # seconds `--tree auto` may measure

    @classmethod
    def from_options(cls, **options) -> BuildRequest:
        """From the command's flat options: ServingOptions' own names go to `serving` (--kv-cache-fraction is its
        kv_cache_free_gpu_mem_fraction), `k8s_<name>` to `deploy`'s <name>, --dry-run / --skip-engines /
        --skip-convert to the one build mode."""
        dry_run, skip_engines = options.pop("dry_run", False), options.pop("skip_engines", False)
        options["mode"] = BuildMode("dry-run" if dry_run else "no-engines" if skip_engines else "full",
                                    reuse_checkpoint=options.pop("skip_convert", False))
        if "kv_cache_fraction" in options:
            options["kv_cache_free_gpu_mem_fraction"] = options.pop("kv_cache_fraction")
        names = {f.name for f in fields(ServingOptions)}
        serving = ServingOptions(**{k: options.pop(k) for k in list(options) if k in names})
        deploy_names = {f"k8s_{f.name}" for f in fields(DeployOptions)}
        deploy = DeployOptions(**{k[4:]: options.pop(k) for k in list(options) if k in deploy_names})
        return cls(serving=serving, deploy=deploy, **options)

    def spec_options(self) -> dict:
        return {"dtype": self.dtype, "device": self.device, "max_batch_size": self.max_batch_size,
                "tp_size": self.tp_size, "max_input_len": self.max_input_len, "max_seq_len": self.max_seq_len,
                "chat_template": self.chat_template, "backend_version": self.backend_version,
                "draft_vocab": self.draft_vocab, "tree": None if self.tree == AUTO else self.tree}

    def tunes(self, engine: str) -> bool:
        """Whether the tree is tuned for a bundle of this (resolved) engine kind: `--tree auto`, or no --tree for an
        engine that tunes its trees (ours), with a draft."""
        return self.tree == AUTO or (self.tree is None and self.draft_dir is not None and get(engine).tunes_trees)


@dataclass
class BuildOutcome:
    """What `run_build` did: the plan, OUT once written, and for a dry run what it stands for."""

    plan: BuildPlan
    out: Path | None  # None: a dry run that wrote nothing (pytorch, vllm)
    tunes: bool
    mode: BuildMode
    artifacts: Artifacts = field(default_factory=Artifacts)  # what the engine's own step wrote (trtllm's lines)

    def models(self) -> list[str]:
        repo = self.out / "model_repository" if self.out is not None else None
        return sorted(p.name for p in repo.iterdir() if p.is_dir()) if repo and repo.is_dir() else []

    def files(self) -> list[str]:
        if self.out is None:
            return []
        return sorted(str(p.relative_to(self.out)) for p in self.out.rglob("*") if p.is_file())


def run_build(req: BuildRequest, echo: Callable[[str], None] = lambda msg: None,
              progress=lambda done, total, what: None) -> BuildOutcome:
    """Tune if asked (`progress` follows it), plan, build (or the engine's dry run). Raises EagleTrtError before any
    work on bad input."""
    options = req.spec_options()

    def make_plan() -> BuildPlan:
        return plan_build(req.base_dir, req.draft_dir, req.out, engine=req.engine, mode=req.mode, **options)

    plan = make_plan()  # every check runs before minutes of tuning (the tree is the engine's default until then)
    tunes = req.tunes(plan.spec.engine)
    if tunes and not get(plan.spec.engine).tunes_trees:
        raise EagleTrtError(f"--tree auto tunes our runtime's tree (--engine pytorch), not engine {plan.spec.engine}",
                            "pass a tree (e.g. --tree mc_sim_7b_63 or chain:3) for TensorRT-LLM and vLLM engines")
    if tunes and not req.mode.dry_run:
        check_out_free(plan.out, req.force)  # before the minutes of tuning, not after
        req.serving.validate()
        req.deploy.validate()
        from eagle_trt.tuning.calibrate import tuned_tree

        options.update(tuned_tree(req.base_dir, req.draft_dir, req.device, plan.spec.dtype, req.draft_vocab, echo=echo,
                                  threads=req.serving.engine_cpu_threads(), progress=progress,
                                  budget_s=req.tune_budget))  # the tree tuned at the threads the engine will have
        plan = make_plan()
    outcome = BuildOutcome(plan, None, tunes, req.mode)
    if req.mode.dry_run and not get(plan.spec.engine).dry_run_writes:
        return outcome  # the plan is the answer
    if not req.mode.dry_run:
        echo(f"building {plan.out} (engine {plan.spec.engine})")
    outcome.out, outcome.artifacts = build_bundle(plan, serving=req.serving, deploy=req.deploy, force=req.force,
                                                  mode=req.mode)
    return outcome
