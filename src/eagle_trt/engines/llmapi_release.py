"""Which TensorRT-LLM release an LLM-API bundle targets, and what that release's `Eagle3DecodingConfig` and Triton
LLM-API model take.

`Eagle3DecodingConfig` forbids unknown keys ("Extra inputs are not permitted": DecodingBaseConfig is a
StrictBaseModel), so a bundle writes only the fields its release has. Field sets, inherited fields included, read at
the TensorRT-LLM API reference for each release (nvidia.github.io/TensorRT-LLM/<version>/llm-api/reference/
Eagle3DecodingConfig.html: 1.3.0rc27, 1.4.0rc1, 1.4.0rc4) and, for 1.2 (no versioned page; no tag readable here),
at NVIDIA/TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` as of December 2025 (the release/1.2 branch point):

| line | installed      | static trees               | suffix (sa_config) | acceptance gate keys                       |
|------|----------------|----------------------------|--------------------|--------------------------------------------|
| 1.2  | 1.2.1 (Triton 26.07) | eagle_choices        | no                 | acceptance_window, acceptance_length_threshold |
| 1.3  | 1.3.0rc29      | eagle_choices (deprecated) | yes                | acceptance_rate_window_size, acceptance_rate_threshold |
| 1.4  | 1.4.0rc4       | none (dynamic trees, chains) | yes              | acceptance_rate_window_size, acceptance_rate_threshold |

No Triton container ships 1.3 or 1.4 (Triton's compatibility matrix ends at 26.07 with 1.2.1): their bundles' image
installs that TensorRT-LLM into the newest one (deploy/images.py).

The Triton LLM-API model (triton_backend/all_models/llmapi/tensorrt_llm/1/model.py, every version read, late 2025
to 2026) builds every perf-metrics output (acceptance_rate, total_*_draft_tokens, *_time_ns) with text_output's
dtype, np.object_: BYTES holding the number's text, while its config.pbtxt declares FP32 / INT32 / INT64.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle_trt.errors import EagleTrtError

_BASE_COMMON = ("max_draft_len", "max_total_draft_tokens", "speculative_model", "max_concurrency",
                "draft_len_schedule", "load_format", "allow_advanced_sampling")
_EAGLE_COMMON = ("decoding_type", "use_dynamic_tree", "dynamic_tree_max_topK", "max_non_leaves_per_layer",
                 "eagle3_layers_to_capture", "eagle3_model_arch")
_GATE = ("acceptance_rate_window_size", "acceptance_rate_threshold")
_SAMPLING_13 = ("use_rejection_sampling", "advanced_sampling_mode", "enable_penalty")


@dataclass(frozen=True)
class LlmapiRelease:
    """What one TensorRT-LLM release line's LLM API reads (module docstring)."""

    line: tuple[int, int]
    exact: str  # the release the bundle's image installs
    fields: frozenset[str]  # Eagle3DecodingConfig's fields, inherited included
    source: str  # where `fields` was read
    perf_outputs_bytes: bool = True  # model.py sends the perf metrics as BYTES (module docstring)
    draft_norms: bool = False  # the draft model reads fc_norm / norm_output (EAGLE 3.1, PR #14988, mid-2026)
    reads_modelopt_inline: bool = False  # config.json quant_method "modelopt" without hf_quant_config.json (#14088)
    compressed_tensors: tuple[str, ...] = ()  # compressed-tensors schemes its loader reads (#10796, #14468)

    @property
    def version(self) -> str:
        return f"{self.line[0]}.{self.line[1]}"

    @property
    def static_trees(self) -> bool:
        return "eagle_choices" in self.fields

    @property
    def suffix(self) -> bool:
        return "sa_config" in self.fields


LLMAPI_RELEASES = {r.line: r for r in (
    LlmapiRelease((1, 2), "1.2.1", frozenset(_BASE_COMMON + _EAGLE_COMMON + (
        "acceptance_window", "acceptance_length_threshold", "eagle_choices", "greedy_sampling", "posterior_threshold",
        "num_eagle_layers", "eagle3_one_model")),
        "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py, December 2025 (release/1.2 branch point)"),
    LlmapiRelease((1, 3), "1.3.0rc29", frozenset(_BASE_COMMON + _EAGLE_COMMON + _GATE + _SAMPLING_13 + (
        "moe_backend", "eagle_choices", "num_eagle_layers", "sa_config")),
        "TensorRT-LLM API reference 1.3.0rc27 (Eagle3DecodingConfig) and 1.3.0rc29 (DecodingBaseConfig)",
        reads_modelopt_inline=True, compressed_tensors=("fp8-channel", "fp8-block")),
    LlmapiRelease((1, 4), "1.4.0rc4", frozenset(_BASE_COMMON + _EAGLE_COMMON + _GATE + _SAMPLING_13 + (
        "moe_backend", "moe_tactic", "spec_dec_variant", "sa_config")),
        "TensorRT-LLM API reference 1.4.0rc4 (Eagle3DecodingConfig)", draft_norms=True,
        reads_modelopt_inline=True, compressed_tensors=("fp8-channel", "fp8-block", "nvfp4")),
)}
# the release in the newest Triton container the image table knows (deploy/images.py TRTLLM_CONTAINERS: 26.07, 1.2.1)
DEFAULT_LLMAPI_VERSION = "1.2"


def llmapi_release(version: str | None = None) -> LlmapiRelease:
    """"1.4", "1.4.0rc4" -> the 1.4 line; None: the default. Anything else is an EagleTrtError naming the lines."""
    text = DEFAULT_LLMAPI_VERSION if version is None else str(version).strip()
    parts = text.split(".")
    try:
        line = (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or "x"))
    except (IndexError, ValueError):
        line = None
    if line not in LLMAPI_RELEASES:
        known = ", ".join(r.version for r in LLMAPI_RELEASES.values())
        raise EagleTrtError(f"--backend-version {version!r} is not a TensorRT-LLM release line eagle-trt writes LLM-API "
                            f"bundles for", f"pass one of {known} (the TensorRT-LLM in the serving container; "
                            f"default {DEFAULT_LLMAPI_VERSION})")
    return LLMAPI_RELEASES[line]
