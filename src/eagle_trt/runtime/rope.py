"""RoPE tables: inverse frequencies with linear, llama3 or YaRN scaling (as transformers' modeling_rope_utils computes
them; eagle_trt.families reads and checks the config), cos/sin gathered by explicit positions, and the rotate-half
rotation."""

from __future__ import annotations

import math

import torch

from eagle_trt.errors import EagleTrtError


def rope_frequencies(head_dim: int, theta: float, scaling: dict | None) -> tuple[torch.Tensor, float]:
    """([head_dim/2] inverse frequencies, the factor cos/sin are multiplied by), with linear, llama3 or YaRN scaling
    applied as transformers' modeling_rope_utils computes them."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    kind = scaling["rope_type"] if scaling else "default"
    if kind == "default":
        return inv, 1.0
    if kind == "linear":
        return inv / float(scaling["factor"]), 1.0
    if kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_ctx = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = ((old_ctx / wavelen) - low) / (high - low)
        scaled = torch.where(wavelen > old_ctx / low, inv / factor, inv)
        mid = (wavelen <= old_ctx / low) & (wavelen >= old_ctx / high)
        return torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled), 1.0
    if kind == "yarn":
        return _yarn(inv, head_dim, theta, scaling)
    raise EagleTrtError(f"cannot build RoPE of type {kind!r}", "eagle_trt.families.read_rope refuses it at the door; "
                        "read the config through ModelSpec.from_dir")


def _yarn(inv: torch.Tensor, dim: int, theta: float, s: dict) -> tuple[torch.Tensor, float]:
    """YaRN (arXiv 2309.00071): interpolate the low frequencies, keep the high ones, ramp between; scale cos/sin."""
    factor, old_ctx = float(s["factor"]), s["original_max_position_embeddings"]

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = s.get("attention_factor")
    if attention is None:
        both = s.get("mscale") and s.get("mscale_all_dim")
        attention = mscale(factor, s["mscale"]) / mscale(factor, s["mscale_all_dim"]) if both else mscale(factor)

    def correction_dim(rotations: float) -> float:
        return dim * math.log(old_ctx / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(s.get("beta_fast") or 32), correction_dim(s.get("beta_slow") or 1)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / ((high + 0.001 if low == high else high) - low))
    keep = 1 - ramp.clamp(0, 1)  # [dim/2] 1: extrapolate (keep the frequency), 0: interpolate (divide by factor)
    return inv / factor * (1 - keep) + inv * keep, float(attention)


class Rope:
    """cos/sin tables for positions 0..max_len-1, gathered by explicit positions. `args`: a runtime.model.LlamaArgs
    (its head_dim, rope_theta and rope_scaling)."""

    def __init__(self, args, max_len: int, dtype, device):
        inv, scale = rope_frequencies(args.head_dim, args.rope_theta, args.rope_scaling)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.cos = (angles.cos() * scale).to(dtype=dtype, device=device)  # [max_len, head_dim]
        self.sin = (angles.sin() * scale).to(dtype=dtype, device=device)

    def __call__(self, positions: torch.Tensor):
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)  # [T, 1, head_dim]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [T, heads, head_dim]; cos/sin: [T, 1, head_dim] (HF rotate-half layout)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
