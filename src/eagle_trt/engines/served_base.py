"""The base as an engine that reads Hugging Face configs itself will read it right, whatever its transformers.

transformers >= 5 writes RoPE as `rope_parameters` (theta inside) and no longer writes `rope_theta` or
`rope_scaling`; readers on transformers 4 (TensorRT-LLM <= 1.2 pins 4.57.3; vLLM releases of that time) fall back to
theta 10000 and no scaling without a word: another model. For the engines that read the base's config.json
themselves (`Engine.reads_hf_directories`: llmapi, vllm), such a base is given as OUT/base: a symlink to each of its
files but config.json, which holds both layouts (transformers 5 reads `rope_scaling` before `rope_parameters`,
transformers 4 reads only the former, and both give the same RoPE). Nothing is copied but the config.
"""

from __future__ import annotations

import json
from pathlib import Path

from eagle_trt.engines.engine import Engine
from eagle_trt.spec import ModelSpec, read_config

SERVED_BASE_DIR = "base"  # OUT/base


def legacy_rope_missing(base: ModelSpec, engine: Engine) -> str | None:
    """Why `engine` must be given the base with both RoPE layouts, or None."""
    if not engine.reads_hf_directories:
        return None
    cfg = read_config(base.path, "base")
    if "rope_theta" in cfg or "rope_parameters" not in cfg:
        return None
    return ("its config.json has transformers 5's rope_parameters only; a reader on transformers 4 would run it with "
            "theta 10000 and no scaling")


def served_base_config(base: ModelSpec) -> dict:
    """The base's config.json with `rope_theta` and `rope_scaling` beside `rope_parameters`."""
    cfg = read_config(base.path, "base")
    return cfg | {"rope_theta": base.rope_theta, "rope_scaling": base.rope_scaling}  # rope_type: what 4.x reads


def write_served_base(base: ModelSpec, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for item in sorted(base.path.iterdir()):
        if item.name != "config.json":
            (out / item.name).symlink_to(item.resolve())
    (out / "config.json").write_text(json.dumps(served_base_config(base), indent=2) + "\n", encoding="utf-8")
    return out
