"""Which tensorrtllm backend release a bundle targets, and what its `tensorrt_llm` model's tensor contract is.

The Triton `tensorrtllm` backend reads request tensors by name, and the names moved between releases (sources read:
triton-inference-server/tensorrtllm_backend tags, all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt and
inflight_batcher_llm/src/utils.h; from 0.20 on the models live in NVIDIA/TensorRT-LLM triton_backend/):

| backend     | seed input    | return_perf_metrics, acceptance outputs |
|-------------|---------------|-----------------------------------------|
| 0.16-0.18.x | `random_seed` | absent (0.18.2 reads return_kv_cache_reuse_stats instead) |
| 0.19-0.20   | `random_seed` | present |
| 0.21-1.2    | `seed`        | present |

The rename reached the backend's main branch on 2025-05-13 (tensorrtllm_backend c2e65b8, PR #749), after the 0.20
release line was cut: that line still declared `random_seed` when its files moved into TensorRT-LLM (c4a49e8^,
2025-06-04). 0.21 is the first release branched after the rename; TensorRT-LLM's triton_backend declares `seed`.
A bundle names the seed input its backend reads (a name the backend does not know would be ignored silently), and
declares the perf-metrics input and the acceptance outputs only where the backend has them (Triton refuses a model
or ensemble that maps a tensor its composing model lacks).
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle_trt.errors import EagleTrtError

ENGINE_PATH_LAST = (1, 2)  # the last TensorRT-LLM minor release read that still ships trtllm-build
BACKEND_OLDEST = (0, 16)  # the oldest tag read
PERF_METRICS_SINCE = (0, 19)  # return_perf_metrics + acceptance_rate/total_*_draft_tokens
SEED_NAME_SINCE = (0, 21)  # `seed` instead of `random_seed`
DEFAULT_BACKEND_VERSION = ".".join(map(str, ENGINE_PATH_LAST))  # the newest release with the engine path


@dataclass(frozen=True)
class BackendContract:
    """What the targeted tensorrtllm backend's `tensorrt_llm` model reads and answers."""

    version: str
    seed_input: str  # random_seed | seed
    perf_metrics: bool  # return_perf_metrics input and the acceptance outputs exist


def parse_backend_version(version: str) -> tuple[int, int]:
    """"0.19", "0.19.0", "1.2.0rc6" -> (major, minor), checked against the releases we support."""
    parts = str(version).strip().split(".")
    try:
        release = (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or "x"))
    except (IndexError, ValueError):
        raise EagleTrtError(f"--backend-version {version!r} is not a version",
                            f"pass the tensorrtllm backend release as MAJOR.MINOR, e.g. {DEFAULT_BACKEND_VERSION}"
                            ) from None
    if not BACKEND_OLDEST <= release <= ENGINE_PATH_LAST:
        raise EagleTrtError(
            f"--backend-version {version} is outside the supported {_text(BACKEND_OLDEST)}..{_text(ENGINE_PATH_LAST)}",
            f"pass the release of the serving container's tensorrtllm backend, {_text(BACKEND_OLDEST)} to "
            f"{_text(ENGINE_PATH_LAST)} (later releases have no engine path: use --engine llmapi)")
    return release


def backend_contract(version: str = DEFAULT_BACKEND_VERSION) -> BackendContract:
    release = parse_backend_version(version)
    return BackendContract(version=str(version), perf_metrics=release >= PERF_METRICS_SINCE,
                           seed_input="seed" if release >= SEED_NAME_SINCE else "random_seed")


def _text(release: tuple[int, int]) -> str:
    return ".".join(map(str, release))
