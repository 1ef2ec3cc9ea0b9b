"""What a quantized checkpoint is: `Quantization` (the writer's scheme, its groups of modules with one
`WeightFormat` each, exclusions, KV-cache quantization) and the one error for a layout eagle-trt does not read.
Module patterns: "Linear" (every linear), an exact name or wildcard (Model-Optimizer's exclude_modules), "re:" + a
regular expression matched at the name's start (compressed-tensors' targets and ignore)."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

from eagle_trt.errors import EagleTrtError
from eagle_trt.quantization.formats import WeightFormat

# where each writer stores KV-cache scales (Model-Optimizer: on k_proj / v_proj; compressed-tensors: on the attention)
KV_SCALES = {"modelopt": ("self_attn.k_proj.k_scale", "self_attn.v_proj.v_scale", "self_attn.k_proj.k_bias",
                          "self_attn.v_proj.v_bias"),
             "compressed-tensors": ("self_attn.k_scale", "self_attn.v_scale")}


@dataclass(frozen=True)
class QuantGroup:
    """Modules matched by `targets` ("Linear": every linear; a name; a wildcard; "re:" + a regular expression) store
    their weight as `weights`."""

    targets: tuple[str, ...]
    weights: WeightFormat
    activations: str | None = None  # how the writer meant activations to be quantized (None: weight-only)
    algo: str = ""  # the writer's name for this group's scheme (Model-Optimizer quant_algo, compressed-tensors format)

    def to_dict(self) -> dict:
        return {"targets": list(self.targets), "weights": self.weights.to_dict(), "activations": self.activations,
                "algo": self.algo}

    @classmethod
    def from_dict(cls, data: dict) -> QuantGroup:
        return cls(tuple(data["targets"]), WeightFormat.from_dict(data["weights"]), data.get("activations"),
                   data.get("algo", ""))


@dataclass(frozen=True)
class Quantization:
    """How a checkpoint's linear weights are stored, as its writer described it."""

    method: str  # modelopt | compressed-tensors | awq | gptq | fp8 | gguf
    algo: str  # the writer's own name of the scheme: FP8, NVFP4, W4A16_AWQ, pack-quantized, gemm, gptq_v2, ...
    label: str  # for messages: "a Model-Optimizer FP8 base"
    groups: tuple[QuantGroup, ...] = ()
    excluded: tuple[str, ...] = ()  # module patterns left unquantized (same pattern language as targets)
    kv_cache: str | None = None  # KV-cache quantization the writer asked engines for (FP8, ...)
    source: str = ""  # the file(s) read
    producer: str | None = None  # Model-Optimizer: hf_quant_config.json's producer.name (vLLM needs "modelopt")

    @property
    def scheme(self) -> str:
        """The key engines are asked about (quantization.engines)."""
        return f"{self.method}:{self.algo}"

    def format_of(self, module: str) -> WeightFormat | None:
        """How `module` (by its checkpoint name) stores its weight; None: unquantized (only linears are quantized)."""
        if module.rpartition(".")[2] not in LINEAR_NAMES or any(_matches(p, module) for p in self.excluded):
            return None
        for group in self.groups:
            if any(_matches(t, module) for t in group.targets):
                return group.weights
        return None

    def kv_scale_names(self) -> tuple[str, ...]:
        return KV_SCALES.get(self.method, ()) if self.kv_cache else ()

    def summary(self) -> str:
        """One line for `inspect`: the scheme, each weight format, activations, exclusions, KV cache."""
        parts = [self.label.removeprefix("a ").removeprefix("an ").removesuffix(" base")]
        formats = dict.fromkeys(g.weights.describe() for g in self.groups)
        parts += list(formats)
        acts = dict.fromkeys(g.activations for g in self.groups if g.activations)
        parts.append("activations: " + (", ".join(acts) if acts else "not quantized"))
        if self.excluded:
            parts.append("unquantized: " + ", ".join(p.removeprefix("re:") for p in self.excluded))
        parts.append(f"KV cache: {self.kv_cache or 'not quantized'}")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return {"method": self.method, "algo": self.algo, "label": self.label,
                "groups": [g.to_dict() for g in self.groups], "excluded": list(self.excluded),
                "kv_cache": self.kv_cache, "source": self.source, "producer": self.producer}

    @classmethod
    def from_dict(cls, data: dict) -> Quantization:
        return cls(data["method"], data["algo"], data["label"], tuple(QuantGroup.from_dict(g) for g in data["groups"]),
                   tuple(data["excluded"]), data.get("kv_cache"), data.get("source", ""), data.get("producer"))


# the linear modules of the supported families (families.py): what a "Linear" target means
LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def _matches(pattern: str, module: str) -> bool:
    if pattern == "Linear":
        return True
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    return fnmatch.fnmatchcase(module, pattern)


def refuse(what: str, why: str, where: Path) -> EagleTrtError:
    """The one error for a quantized layout eagle-trt does not read: named, never blamed on the download."""
    return EagleTrtError(f"{where}: {what}: {why}",
                         "eagle-trt reads Model-Optimizer (FP8, FP8 per-channel, FP8 block, NVFP4, W4A16/W4A8 AWQ, "
                         "W8A8 SmoothQuant, W8A16), compressed-tensors (float-, int-, pack- and nvfp4-pack-quantized), "
                         "AutoAWQ GEMM, GPTQ (v1/v2) and FP8 block checkpoints (docs/quantization.md); use the "
                         "unquantized base, or one of those exports")
