"""The TensorRT-LLM engine path of `eagle-trt build`: environment checks, checkpoint conversion for the EAGLE and
the base engine, and the exact `trtllm-build` command lines (docs/trtllm_formats.md §3).

TensorRT-LLM is never imported here: its presence and version are read from package metadata (trtllm_env), and
trtllm-build runs as a subprocess. Bundle layout: OUT/checkpoint/{eagle,base}/ and OUT/engines/{eagle,base}/.
The engine path exists in TensorRT-LLM <= 1.2 only (docs/trtllm_formats.md §7).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from eagle_trt.engines.trtllm_checkpoint import convert
from eagle_trt.engines.trtllm_install import TrtllmInstall, no_engine_path_error
from eagle_trt.build_spec import BuildSpec
from eagle_trt.errors import EagleTrtError

log = logging.getLogger(__name__)
# (version prefix, warning) for versions with known EAGLE problems (docs/trtllm_formats.md §5)
KNOWN_ISSUES = (
    ((0, 15), "TensorRT-LLM 0.15 lacks typical acceptance and the eagle_choices Triton parameter (added in 0.16)"),
    ((0, 19), "TensorRT-LLM before 0.19 can corrupt EAGLE outputs at batch > 1 (fixed by PR #3456, Apr 2025)"),
)


@dataclass
class EngineBuildResult:
    checkpoint_dirs: dict[str, Path] = field(default_factory=dict)
    engine_dirs: dict[str, Path] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)
    ran: bool = False
    warnings: list[str] = field(default_factory=list)


def trtllm_build_argv(spec: BuildSpec, checkpoint_dir: Path, engine_dir: Path, speculative: bool) -> list[str]:
    """The trtllm-build command line for the EAGLE engine (speculative) or the plain base engine.
    max_draft_len is not passed: the builder takes it from the checkpoint (a flag would override it while the
    EAGLE inputs stay sized from the checkpoint)."""
    argv = ["trtllm-build", "--checkpoint_dir", str(checkpoint_dir), "--output_dir", str(engine_dir)]
    if speculative:
        argv += ["--speculative_decoding_mode", "eagle"]
    argv += ["--gemm_plugin", spec.dtype, "--gpt_attention_plugin", spec.dtype, "--kv_cache_type", "paged",
             "--use_paged_context_fmha", "enable", "--remove_input_padding", "enable", "--context_fmha", "enable",
             "--max_beam_width", "1", "--max_batch_size", str(spec.max_batch_size),
             "--max_input_len", str(spec.max_input_len), "--max_seq_len", str(spec.max_seq_len),
             "--max_num_tokens", str(max(spec.max_num_tokens, spec.max_batch_size * (spec.trtllm.max_draft_len + 1))),
             "--workers", str(spec.tp_size)]
    return argv


def version_warnings(version: str, max_batch_size: int) -> list[str]:
    try:
        parts = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return [f"cannot parse the TensorRT-LLM version {version!r}; EAGLE needs >= 0.15"]
    if parts < (0, 15):
        raise EagleTrtError(f"TensorRT-LLM {version} has no EAGLE support (added in 0.15)",
                            "use TensorRT-LLM 0.17-0.21 or 1.x (build inside the serving container)")
    out = [msg for (ver, msg) in KNOWN_ISSUES if parts <= ver and (ver != (0, 19) or max_batch_size > 1)]
    return out


def check_environment(spec: BuildSpec) -> list[str]:
    """Before any heavy work: tensorrt_llm installed with the engine path (<= 1.2 and trtllm-build on PATH), a
    visible GPU."""
    install = TrtllmInstall.detect()
    if install.installed and not install.has_engine_path:
        raise no_engine_path_error(install, spec.draft_format)
    problems = []
    if not install.installed:
        problems.append("the tensorrt_llm package is not installed")
    if install.trtllm_build is None:
        problems.append("trtllm-build is not on PATH")
    if not _gpu_visible():
        problems.append("no NVIDIA GPU is visible (nvidia-smi -L lists none)")
    if problems:
        raise EagleTrtError("cannot build TensorRT-LLM engines here: " + "; ".join(problems),
                            "run inside the Triton TensorRT-LLM container (nvcr.io/nvidia/tritonserver:<yy.mm>-"
                            "trtllm-python-py3) on a GPU machine, or pass --dry-run to write the checkpoint and "
                            "print the commands, or use --engine pytorch")
    return version_warnings(install.version, spec.max_batch_size)


def _gpu_visible() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def build_trtllm_engines(spec: BuildSpec, out_dir: Path, *, build: bool = True, reuse_checkpoint: bool = False,
                         progress=None) -> EngineBuildResult:
    """Convert (eagle + base; `reuse_checkpoint`: keep out_dir's) and, with `build`, run trtllm-build for each;
    the command lines are returned either way."""
    result = EngineBuildResult()
    if build:
        result.warnings = check_environment(spec)
        for w in result.warnings:
            log.warning(w)
    out_dir = Path(out_dir)
    for name in ("eagle", "base") if spec.draft is not None else ("base",):
        ckpt = out_dir / "checkpoint" / name
        result.checkpoint_dirs[name] = ckpt
        if reuse_checkpoint:
            if not (ckpt / "config.json").exists():
                raise EagleTrtError(f"--skip-convert: no checkpoint at {ckpt}", "run once without --skip-convert")
        else:
            convert(spec, ckpt, speculative=name == "eagle", force=True, progress=progress)
        engine = out_dir / "engines" / name
        result.engine_dirs[name] = engine
        result.commands[name] = trtllm_build_argv(spec, ckpt, engine, speculative=name == "eagle")
    if not build:
        return result
    for name, argv in result.commands.items():
        log.info("running %s", " ".join(argv))
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-2000:]
            raise EagleTrtError(f"trtllm-build failed for the {name} engine (exit {proc.returncode}):\n{tail}",
                                "see the output above; engines must be built with the TensorRT-LLM version of "
                                "the serving container")
    result.ran = True
    return result
