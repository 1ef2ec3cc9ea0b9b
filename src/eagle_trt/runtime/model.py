"""A lean Llama for EAGLE: RoPE (with llama3 scaling), GQA, RMSNorm, tied embeddings, a preallocated KV cache
written at explicit slots, and a forward over a block of tokens with arbitrary positions and a tree mask.

Shaped after gpt-fast's model.py. One forward serves prefill (causal block), plain decode (one token) and tree
verification (root + draft nodes at positions prefix + depth, masked by ancestor-or-self). It returns the final
normed hidden states (EAGLE-1/2 features, the lm_head input) and, on request, the residual stream entering the
layers EAGLE-3 captures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from eagle_trt.errors import EagleTrtError
from eagle_trt.spec import LayerDims, ModelSpec, rope_scaling_kind, rope_scaling_problem
from eagle_trt.tree import pack_mask


@dataclass(frozen=True)
class LlamaArgs(LayerDims):
    """What the runtime's Llama (and a draft layer) is built from."""

    num_hidden_layers: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    tie_word_embeddings: bool = False

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> LlamaArgs:
        return cls(**spec.dims(), num_hidden_layers=spec.num_hidden_layers, rms_norm_eps=spec.rms_norm_eps,
                   rope_theta=spec.rope_theta, rope_scaling=spec.rope_scaling,
                   tie_word_embeddings=spec.tie_word_embeddings)

    @property
    def eagle3_layers(self) -> tuple[int, int, int]:
        """Layers whose *input* EAGLE-3 captures (research/eagle_algorithms.md §3)."""
        n = self.num_hidden_layers
        return (2, n // 2, n - 3) if n >= 4 else (0, n // 2, n - 1)


def rope_frequencies(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    """[head_dim/2] inverse frequencies, with Llama-3.1 ("llama3") or linear scaling applied."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if not scaling:
        return inv
    problem = rope_scaling_problem(scaling)
    if problem:
        raise EagleTrtError(f"cannot build RoPE: {problem}", "use a base with default, linear or llama3 RoPE scaling")
    kind = rope_scaling_kind(scaling)
    if kind == "linear":
        return inv / float(scaling["factor"])
    if kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_ctx = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = ((old_ctx / wavelen) - low) / (high - low)
        scaled = torch.where(wavelen > old_ctx / low, inv / factor, inv)
        mid = (wavelen <= old_ctx / low) & (wavelen >= old_ctx / high)
        return torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return inv  # None or "default"


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [T, heads, head_dim]; cos/sin: [T, 1, head_dim] (HF rotate-half layout)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class KVCache:
    """Per-layer K/V buffers [num_layers, kv_heads, max_len, head_dim], written at explicit slots."""

    def __init__(self, num_layers: int, kv_heads: int, max_len: int, head_dim: int, dtype, device):
        shape = (num_layers, kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len

    def compact(self, dst_start: int, src_slots: torch.Tensor) -> None:
        """Copy the K/V rows at `src_slots` [a] to dst_start..dst_start+a (the accepted path, root first)."""
        n = src_slots.numel()
        self.k[:, :, dst_start:dst_start + n] = self.k[:, :, src_slots]
        self.v[:, :, dst_start:dst_start + n] = self.v[:, :, src_slots]


@dataclass(frozen=True)
class PackedTreeMask:
    """A verify block on CUDA: the prefix (`start` keys) is visible to all, the block itself is masked by the
    TRT-LLM packed bitmask [T, ceil(T/32)] int32, so the tree-attention kernel can run it. Built once per forward,
    device tensors included, so no layer copies anything from the host."""

    start: int
    packed: torch.Tensor  # [T, ceil(T/32)] int32
    cu_seqlens: torch.Tensor  # [2] int32: 0, T
    prefix_lens: torch.Tensor  # [1] int32: start

    @classmethod
    def of(cls, start: int, packed: torch.Tensor) -> PackedTreeMask:
        t, device = packed.shape[0], packed.device
        return cls(start, packed, torch.tensor([0, t], dtype=torch.int32, device=device),
                   torch.tensor([start], dtype=torch.int32, device=device))


@dataclass(frozen=True)
class Segment:
    """One sequence's rows in a packed forward: its cache, the slot of its first row, its row count and its mask
    (as `attention` takes it)."""

    cache: KVCache
    start: int
    rows: int
    mask: object


@dataclass(frozen=True)
class BaseCall:
    """One sequence's part of a base forward: input_ids, positions [T]; K/V land in `cache` (None: the model's)
    at slots start..start+T-1; tree_mask [T, T] bool or None (causal); packed_mask: the same tree as TRT-LLM's
    packed bitmask on the device (CUDA tree kernel; None: packed here from tree_mask)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    start: int
    tree_mask: torch.Tensor | None = None
    cache: KVCache | None = None
    packed_mask: torch.Tensor | None = None


@dataclass(frozen=True)
class ExactMask:
    """Run `exact_attention` (batch-invariant models) with this dense [T, S] mask (None: all visible)."""

    dense: torch.Tensor | None


def exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Attention in float64, rounded to float32 at the end. Sums over keys in float64 do not depend, to float32
    precision, on how many rows run together or on masked keys between the visible ones (a tree's siblings), so a
    one-token decode step and a tree node on the same path compute the same float32 bits. With int8 linears
    (runtime.fast) that makes the whole forward batch-invariant: EAGLE's output equals plain decoding's exactly.
    q: [heads, T, D]; k, v: [kv_heads, S, D]; mask: [T, S] bool or None (only its last T columns may hold False:
    the cached prefix is visible to every row, as `block_mask` builds it)."""
    heads, t, d = q.shape
    kv_heads = k.shape[0]
    group = heads // kv_heads
    q = q.double().mul_(d ** -0.5).reshape(kv_heads, group * t, d)  # [KV, g*T, D]
    scores = torch.matmul(q, k.double().transpose(1, 2)).view(kv_heads, group, t, -1)  # [KV, g, T, S]
    if mask is not None:
        scores[..., -t:].masked_fill_(~mask[:, -t:], float("-inf"))  # the block's own columns
    probs = torch.softmax(scores, dim=-1).view(kv_heads, group * t, -1)
    return torch.matmul(probs, v.double()).view(heads, t, d).float()  # [heads, T, D]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask) -> torch.Tensor:
    """q: [heads, T, D]; k, v: [kv_heads, S, D]; mask: [T, S] bool (True = visible), a PackedTreeMask (CUDA tree
    verification: runs plugins.tree_attention), an ExactMask (`exact_attention`) or None for 'all visible'. The one
    place attention is computed."""
    if isinstance(mask, PackedTreeMask):
        from eagle_trt.plugins.tree_attention import tree_attention

        out = tree_attention(q.transpose(0, 1).contiguous(), k.unsqueeze(0), v.unsqueeze(0), mask.packed,
                             mask.cu_seqlens, mask.prefix_lens, max_tree_len=q.shape[1])
        return out.transpose(0, 1)
    if isinstance(mask, ExactMask):
        return exact_attention(q, k, v, mask.dense)
    return F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask,
                                          enable_gqa=q.shape[0] != k.shape[0]).squeeze(0)


class Attention(nn.Module):
    def __init__(self, args: LlamaArgs, in_features: int | None = None):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = args.num_attention_heads, args.num_key_value_heads, args.head_dim
        in_features = in_features or args.hidden_size
        self.q_proj = nn.Linear(in_features, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(in_features, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(in_features, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, args.hidden_size, bias=False)
        self.qkv_proj: nn.Module | None = None  # q|k|v in one matmul, set by runtime.fast.fuse_projections

    def project(self, x: torch.Tensor):
        """x: [T, in] -> q [T, heads*D], k [T, kv_heads*D], v [T, kv_heads*D]."""
        if self.qkv_proj is None:
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        kv = self.kv_heads * self.head_dim
        return self.qkv_proj(x).split((self.heads * self.head_dim, kv, kv), dim=-1)

    def forward(self, x, cos, sin, cache: KVCache, layer: int, start: int, mask):
        # x: [T, in_features]; writes K/V at slots start..start+T-1, attends over slots 0..start+T-1
        return self.forward_segments(x, cos, sin, [Segment(cache, start, x.shape[0], mask)], layer)

    def forward_segments(self, x, cos, sin, segments: list[Segment], layer: int):
        """x: [sum T, in_features], the rows of several sequences back to back: projected together (the weights
        are read once for all), then each segment writes and attends over its own cache."""
        t = x.shape[0]
        q, k, v = self.project(x)
        q = apply_rope(q.view(t, self.heads, self.head_dim), cos, sin).transpose(0, 1)  # [heads, sum T, D]
        k = apply_rope(k.view(t, self.kv_heads, self.head_dim), cos, sin).transpose(0, 1)  # [KV, sum T, D]
        v = v.view(t, self.kv_heads, self.head_dim).transpose(0, 1)  # [KV, sum T, D]
        outs, row = [], 0
        for seg in segments:
            end = seg.start + seg.rows
            seg.cache.k[layer, :, seg.start:end] = k[:, row:row + seg.rows]
            seg.cache.v[layer, :, seg.start:end] = v[:, row:row + seg.rows]
            outs.append(attention(q[:, row:row + seg.rows], seg.cache.k[layer, :, :end], seg.cache.v[layer, :, :end],
                                  seg.mask))  # [heads, T_i, D]
            row += seg.rows
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)  # [heads, sum T, D]
        return self.o_proj(out.transpose(0, 1).reshape(t, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, args: LlamaArgs):
        super().__init__()
        self.gate_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.up_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)
        self.gate_up_proj: nn.Module | None = None  # gate|up in one matmul, set by runtime.fast.fuse_projections

    def forward(self, x):
        if self.gate_up_proj is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # [T, I] each
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, args: LlamaArgs, input_norm: bool = True):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps) if input_norm else None
        self.self_attn = Attention(args)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = MLP(args)

    def forward(self, x, cos, sin, cache, layer, start, mask):
        return self.forward_segments(x, cos, sin, [Segment(cache, start, x.shape[0], mask)], layer)

    def forward_segments(self, x, cos, sin, segments: list[Segment], layer: int):
        h = x if self.input_layernorm is None else self.input_layernorm(x)
        x = x + self.self_attn.forward_segments(h, cos, sin, segments, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


class Rope:
    """cos/sin tables for positions 0..max_len-1, gathered by explicit positions."""

    def __init__(self, args: LlamaArgs, max_len: int, dtype, device):
        inv = rope_frequencies(args.head_dim, args.rope_theta, args.rope_scaling)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.cos = angles.cos().to(dtype=dtype, device=device)  # [max_len, head_dim]
        self.sin = angles.sin().to(dtype=dtype, device=device)

    def __call__(self, positions: torch.Tensor):
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)  # [T, 1, head_dim]


def block_mask(start: int, tree_mask: torch.Tensor | None, t: int, device) -> torch.Tensor | None:
    """[t, start+t] bool: all of the cached prefix, then `tree_mask` [t, t] (or causal) over the block itself."""
    if t == 1 and tree_mask is None:
        return None
    inner = tree_mask if tree_mask is not None else torch.ones(t, t, dtype=torch.bool, device=device).tril()
    return torch.cat((torch.ones(t, start, dtype=torch.bool, device=device), inner), dim=1)


def use_tree_kernel() -> bool:
    """The Triton tree-attention kernel verifies trees on CUDA unless EAGLE_TRT_TREE_KERNEL=0."""
    import importlib.util
    import os

    return os.environ.get("EAGLE_TRT_TREE_KERNEL", "1") != "0" and importlib.util.find_spec("triton") is not None


class Llama(nn.Module):
    def __init__(self, args: LlamaArgs):
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args) for _ in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.cache: KVCache | None = None
        self.rope: Rope | None = None
        self.batch_invariant = False  # set by runtime.fast.prepare (int8; packed fp32): attention runs exact_attention

    def setup_cache(self, max_len: int) -> None:
        """Allocate the KV cache once; a call asking for no more than what exists is a no-op."""
        if self.cache is not None and self.cache.max_len >= max_len:
            return
        self.cache = self.new_cache(max_len)
        self.rope = Rope(self.args, max_len, self.embed_tokens.weight.dtype, self.embed_tokens.weight.device)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, start: int,
                tree_mask: torch.Tensor | None = None, capture: tuple[int, ...] = ()):
        """input_ids, positions: [T]; K/V land at slots start..start+T-1. Returns (logits [T, V] fp32,
        hidden [T, H] after the final norm, captured [T, len(capture)*H] or None)."""
        return self.forward_packed([BaseCall(input_ids, positions, start, tree_mask)], capture)[0]

    def forward_packed(self, calls: list[BaseCall], capture: tuple[int, ...] = ()) -> list[tuple]:
        """Several sequences in one forward: their rows are packed so every linear layer reads its weights once,
        attention runs per sequence over its own cache. One (logits, hidden, captured) per call, as `forward`.
        With int8 linears and exact attention each row's result does not depend on what it is packed with."""
        ids = calls[0].input_ids if len(calls) == 1 else torch.cat([c.input_ids for c in calls])  # [sum T]
        positions = calls[0].positions if len(calls) == 1 else torch.cat([c.positions for c in calls])
        x = self.embed_tokens(ids)  # [sum T, H]
        cos, sin = self.rope(positions)
        segments = [Segment(c.cache or self.cache, c.start, c.input_ids.shape[0], self._mask(c, x)) for c in calls]
        saved = {}
        for i, layer in enumerate(self.layers):
            if i in capture:
                saved[i] = x
            x = layer.forward_segments(x, cos, sin, segments, i)
        hidden = self.norm(x)
        logits = self.lm_head(hidden).float()
        captured = torch.cat([saved[i] for i in capture], dim=-1) if capture else None
        out, row = [], 0
        for seg in segments:
            rows = slice(row, row + seg.rows)
            out.append((logits[rows], hidden[rows], None if captured is None else captured[rows]))
            row += seg.rows
        return out

    def _mask(self, call: BaseCall, x: torch.Tensor):
        t = call.input_ids.shape[0]
        mask = block_mask(call.start, call.tree_mask, t, x.device)
        if self.batch_invariant:
            mask = ExactMask(mask)
        if call.tree_mask is not None and x.is_cuda and use_tree_kernel():
            packed = call.packed_mask
            if packed is None:
                packed = torch.from_numpy(pack_mask(call.tree_mask.cpu().numpy())).to(x.device)  # [T, ceil(T/32)]
            mask = PackedTreeMask.of(call.start, packed)
        return mask

    def new_cache(self, max_len: int) -> KVCache:
        """A KV cache like the model's own, for another sequence (packed forwards take one per sequence)."""
        a, p = self.args, self.embed_tokens.weight
        cache_dtype = torch.float64 if self.batch_invariant else p.dtype  # exact_attention reads float64
        return KVCache(a.num_hidden_layers, a.num_key_value_heads, max_len, a.head_dim, cache_dtype, p.device)

    @staticmethod
    def hf_name_map(args: LlamaArgs) -> dict[str, str]:
        """our parameter name -> HF checkpoint name."""
        names = {"embed_tokens.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
                 "lm_head.weight": "model.embed_tokens.weight" if args.tie_word_embeddings else "lm_head.weight"}
        for i in range(args.num_hidden_layers):
            for part in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
                         "post_attention_layernorm"):
                names[f"layers.{i}.{part}.weight"] = f"model.layers.{i}.{part}.weight"
        return names
