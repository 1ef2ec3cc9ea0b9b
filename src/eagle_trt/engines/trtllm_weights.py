"""HF -> TensorRT-LLM tensor names and tensor-parallel splits (docs/trtllm_formats.md §2).

HF names appear only in the `hf` column, TRT-LLM names only in the `trt` column. Each entry says how rank r of t
gets its slice: "full" (replicated), "rows"/"cols" (split dim 0 / dim 1 evenly), "qkv" (q, k, v sliced by heads,
KV heads duplicated when there are fewer than ranks, then concatenated by rows), "vocab_rows" (dim 0 after
zero-padding the vocabulary to a multiple of t), "zeros_rows" (an all-zero bias, split like rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# (trt suffix, hf suffix, split) inside one decoder layer
LAYER_MAP = (
    ("input_layernorm.weight", "input_layernorm.weight", "full"),
    ("attention.qkv.weight", "self_attn.{q,k,v}_proj.weight", "qkv"),
    ("attention.dense.weight", "self_attn.o_proj.weight", "cols"),
    ("post_layernorm.weight", "post_attention_layernorm.weight", "full"),
    ("mlp.fc.weight", "mlp.gate_proj.weight", "rows"),  # TRT-LLM's GatedMLP: fc gets the activation (gate_proj)
    ("mlp.gate.weight", "mlp.up_proj.weight", "rows"),
    ("mlp.proj.weight", "mlp.down_proj.weight", "cols"),
)


@dataclass(frozen=True)
class TensorPlan:
    """One output tensor of one rank: where it comes from and how it is cut."""

    trt_name: str
    sources: tuple[str, ...]  # HF names in the base or draft reader ("base:" / "draft:" prefixed)
    split: str
    shape: tuple[int, ...]  # per-rank output shape


@dataclass(frozen=True)
class Heads:
    n_heads: int
    n_kv: int
    head_dim: int


def kv_heads_for_rank(n_kv: int, tp: int, rank: int) -> list[int]:
    """KV head indices rank `rank` holds: an even share, or one duplicated head when n_kv < tp."""
    if n_kv >= tp:
        per = n_kv // tp
        return list(range(rank * per, (rank + 1) * per))
    return [rank * n_kv // tp]


def slice_tensor(split: str, tensors: list[torch.Tensor], tp: int, rank: int, heads: Heads | None = None,
                 padded_rows: int | None = None) -> torch.Tensor:
    if split == "full":
        return tensors[0]
    if split == "rows":
        n = tensors[0].shape[0] // tp
        return tensors[0][rank * n:(rank + 1) * n]
    if split == "cols":
        n = tensors[0].shape[1] // tp
        return tensors[0][:, rank * n:(rank + 1) * n]
    if split == "vocab_rows":
        w = tensors[0]
        if padded_rows != w.shape[0]:
            w = torch.cat((w, w.new_zeros(padded_rows - w.shape[0], *w.shape[1:])))
        n = padded_rows // tp
        return w[rank * n:(rank + 1) * n]
    if split == "qkv":
        q, k, v = tensors
        d = heads.head_dim
        per_q = heads.n_heads // tp
        q_r = q[rank * per_q * d:(rank + 1) * per_q * d]
        kv_idx = kv_heads_for_rank(heads.n_kv, tp, rank)
        k_r = torch.cat([k[h * d:(h + 1) * d] for h in kv_idx])
        v_r = torch.cat([v[h * d:(h + 1) * d] for h in kv_idx])
        return torch.cat((q_r, k_r, v_r))
    raise ValueError(f"unknown split {split!r}")


def qkv_rows(heads: Heads, tp: int) -> int:
    kv_per_rank = max(heads.n_kv // tp, 1)
    return (heads.n_heads // tp + 2 * kv_per_rank) * heads.head_dim


def padded_vocab(vocab: int, tp: int) -> int:
    return -(-vocab // tp) * tp


def layer_plans(prefix_trt: str, prefix_hf: str, hidden: int, inter: int, heads: Heads, tp: int,
                input_norm: bool = True) -> list[TensorPlan]:
    plans = []
    for trt, hf, split in LAYER_MAP:
        if trt == "input_layernorm.weight" and not input_norm:
            continue
        if split == "qkv":
            sources = tuple(f"{prefix_hf}self_attn.{p}_proj.weight" for p in "qkv")
            shape = (qkv_rows(heads, tp), hidden)
        else:
            sources = (prefix_hf + hf,)
            shape = {"full": (hidden,), "rows": (inter // tp, hidden),
                     "cols": ((hidden, heads.n_heads * heads.head_dim // tp) if "dense" in trt else (hidden, inter // tp))}[split]
        plans.append(TensorPlan(prefix_trt + trt, sources, split, shape))
    return plans
