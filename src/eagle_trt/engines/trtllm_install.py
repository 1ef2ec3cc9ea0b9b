"""Which TensorRT-LLM is installed here, and which engine kind it can serve a draft with.

TensorRT-LLM's main branch removed the TensorRT engine backend in mid-2026 (`trtllm-build`,
`examples/eagle/convert_checkpoint.py` and the Triton C++ `tensorrtllm` backend; docs/trtllm_formats.md §7);
1.2 is the last release read that still has it. Newer releases run EAGLE only through the LLM API (PyTorch
backend), and only EAGLE-3 drafts. So the engine path (`trtllm`) needs a TensorRT-LLM <= 1.2 *and* a
`trtllm-build` on PATH; the LLM-API route (`llmapi`) needs an EAGLE-3 draft.

TensorRT-LLM is never imported: the version comes from the installed distribution's metadata.
"""

from __future__ import annotations

import importlib.metadata
import shutil
from dataclasses import dataclass

from eagle_trt.engines.trtllm_backend import ENGINE_PATH_LAST
from eagle_trt.errors import EagleTrtError

DISTRIBUTION = "tensorrt_llm"


@dataclass(frozen=True)
class TrtllmInstall:
    """What this machine has: the tensorrt_llm distribution's version (None: not installed) and trtllm-build."""

    version: str | None
    trtllm_build: str | None  # path of the executable on PATH

    @classmethod
    def detect(cls) -> TrtllmInstall:
        try:
            version = importlib.metadata.version(DISTRIBUTION)
        except importlib.metadata.PackageNotFoundError:
            version = None
        return cls(version=version, trtllm_build=shutil.which("trtllm-build"))

    @property
    def installed(self) -> bool:
        return self.version is not None

    @property
    def release(self) -> tuple[int, int] | None:
        """(major, minor) of the version; None when it does not parse ("1.2.0rc6" -> (1, 2))."""
        if self.version is None:
            return None
        parts = self.version.split(".")
        try:
            return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or "x")
        except (IndexError, ValueError):
            return None

    @property
    def has_engine_path(self) -> bool:
        """trtllm-build is here and the release still has the engine backend (an unparsable version is given the
        benefit of the doubt when trtllm-build exists)."""
        if not self.installed or self.trtllm_build is None:
            return False
        return self.release is None or self.release <= ENGINE_PATH_LAST

    def describe(self) -> str:
        if not self.installed:
            return "TensorRT-LLM is not installed"
        build = f"trtllm-build at {self.trtllm_build}" if self.trtllm_build else "no trtllm-build on PATH"
        path = "engine path available" if self.has_engine_path else "no engine path (LLM API only, EAGLE-3 drafts)"
        return f"TensorRT-LLM {self.version} ({build}): {path}"

    def to_dict(self) -> dict:
        return {"version": self.version, "trtllm_build": self.trtllm_build, "engine_path": self.has_engine_path}


def no_engine_path_error(install: TrtllmInstall, draft_format: str | None) -> EagleTrtError:
    """The one message for "this TensorRT-LLM cannot build EAGLE-1/2 engines", whatever asked for them."""
    what = "an EAGLE-1/2 draft" if draft_format == "eagle1" else "the TensorRT engine path (--engine trtllm)"
    if install.release is not None and install.release > ENGINE_PATH_LAST:
        why = (f"TensorRT-LLM {install.version} has no TensorRT engine path (trtllm-build and the tensorrtllm "
               f"Triton backend were removed after {'.'.join(map(str, ENGINE_PATH_LAST))}); it runs EAGLE-3 drafts "
               "only, through the LLM API")
    else:
        why = f"TensorRT-LLM {install.version} is installed but trtllm-build is not on PATH"
    return EagleTrtError(
        f"cannot serve {what} with this TensorRT-LLM: {why}",
        "train an EAGLE-3 draft for the same base (`eagle-trt train-draft --base B --prompts F -o D --format eagle3`) "
        "and build with --engine llmapi; or use --engine pytorch; or build in a container with TensorRT-LLM <= "
        f"{'.'.join(map(str, ENGINE_PATH_LAST))} (nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3)")


def auto_engine(draft_format: str | None, device: str, install: TrtllmInstall) -> str:
    """What `--engine auto` picks: TensorRT-LLM on a GPU when installed (engine path for EAGLE-1/2 drafts while it
    exists, the LLM API for EAGLE-3 drafts and everything on newer releases), else our pytorch runtime. Raises the
    no-engine-path error for an EAGLE-1/2 draft on a TensorRT-LLM without the engine path."""
    if device != "cuda" or not install.installed:
        return "pytorch"
    if draft_format == "eagle3":
        return "llmapi"
    if install.has_engine_path:
        return "trtllm"
    if draft_format == "eagle1":
        raise no_engine_path_error(install, draft_format)
    return "llmapi"  # no draft: the plain base runs through the LLM API


def require_engine(engine: str, draft_format: str | None, install: TrtllmInstall) -> None:
    """`--engine trtllm` where TensorRT-LLM is installed without the engine path: the clear error, before any heavy
    work. (Where TensorRT-LLM is absent, --dry-run still writes the checkpoint and the trtllm-build lines.)"""
    if engine == "trtllm" and install.installed and not install.has_engine_path:
        raise no_engine_path_error(install, draft_format)
