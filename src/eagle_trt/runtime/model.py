"""A lean Llama-family decoder for EAGLE: RoPE (linear or llama3 scaling), GQA, RMSNorm, tied embeddings, and what
the other families add (eagle_trt.families: q/k/v and o biases, q/k RMSNorm over head_dim, sliding-window layers),
a preallocated KV cache written at explicit slots, and a forward over a block of tokens with arbitrary positions and
a tree mask.

Shaped after gpt-fast's model.py. One forward serves prefill (causal block), plain decode (one token) and tree
verification (root + draft nodes at positions prefix + depth, masked by ancestor-or-self). It returns the final
normed hidden states (EAGLE-1/2 features, the lm_head input) and, on request, the residual stream entering the
layers EAGLE-3 captures.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from eagle_trt.runtime.rope import Rope, apply_rope
from eagle_trt.runtime.weight_memory import zeroed_pages
from eagle_trt.spec import LayerDims, ModelSpec
from eagle_trt.tree import pack_mask


@dataclass(frozen=True)
class LlamaArgs(LayerDims):
    """What the runtime's Llama (and a draft layer) is built from."""

    num_hidden_layers: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # normalised by families.read_rope: None or {"rope_type": ..., its keys}
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k, before RoPE
    sliding_window: int | None = None  # keys at q_pos - k_pos >= window are not seen by `sliding_layers`
    sliding_layers: tuple[int, ...] = ()

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> LlamaArgs:
        return cls(**spec.dims(), num_hidden_layers=spec.num_hidden_layers, rms_norm_eps=spec.rms_norm_eps,
                   rope_theta=spec.rope_theta, rope_scaling=spec.rope_scaling,
                   tie_word_embeddings=spec.tie_word_embeddings, qkv_bias=spec.qkv_bias, o_bias=spec.o_bias,
                   mlp_bias=spec.mlp_bias, qk_norm=spec.qk_norm, sliding_window=spec.sliding_window,
                   sliding_layers=tuple(spec.sliding_layers))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class KVCache:
    """Per-layer K/V buffers [num_layers, kv_heads, max_len, head_dim], written at explicit slots."""

    def __init__(self, num_layers: int, kv_heads: int, max_len: int, head_dim: int, dtype, device,
                 huge_pages: bool = True):
        """On the CPU each buffer lies in a mapping of its own, in 2 MiB pages where it is that large
        (runtime.weight_memory.zeroed_pages; `huge_pages` False: torch's allocator, for A/B measurements)."""
        shape = (num_layers, kv_heads, max_len, head_dim)
        if huge_pages and torch.device(device).type == "cpu":
            nbytes = num_layers * kv_heads * max_len * head_dim * torch.empty((), dtype=dtype).element_size()
            self.k, self.v = (torch.frombuffer(zeroed_pages(nbytes), dtype=dtype).view(shape) for _ in range(2))
        else:
            self.k = torch.zeros(shape, dtype=dtype, device=device)
            self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.held = None  # runtime.prefix.HeldTokens: the tokens whose K/V slots 0.. hold (a finished request's)

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
    (as `attention` takes it); `window_mask`: the mask of sliding-window layers where the window hides part of the
    context (None: they use `mask`)."""

    cache: KVCache
    start: int
    rows: int
    mask: object
    window_mask: object = None

    def mask_of(self, sliding: bool):
        return self.window_mask if sliding and self.window_mask is not None else self.mask


@dataclass(frozen=True)
class BaseCall:
    """One sequence's part of a base forward: input_ids, positions [T]; K/V land in `cache` (None: the model's)
    at slots start..start+T-1; tree_mask [T, T] bool or None (causal); packed_mask: the same tree as TRT-LLM's
    packed bitmask on the device (CUDA tree kernel; None: packed here from tree_mask); last_logits_only: the caller
    reads logits[-1] only (a prefill), so an engine may return [1, V] (the native forward does: a 4k prompt's
    vocabulary head is most of its cost)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    start: int
    tree_mask: torch.Tensor | None = None
    cache: KVCache | None = None
    packed_mask: torch.Tensor | None = None
    last_logits_only: bool = False


def logit_rows(calls: list[BaseCall]) -> list[int] | None:
    """The packed rows whose logits `calls` ask for (a last_logits_only call: its last row), None for all of them.
    A prefill's vocabulary head over every prompt row would be ~45 % of its cost for SmolLM2 (49k x 576)."""
    if not any(c.last_logits_only for c in calls):
        return None
    picked, row = [], 0
    for c in calls:
        n = c.input_ids.shape[0]
        picked += [row + n - 1] if c.last_logits_only else list(range(row, row + n))
        row += n
    return picked


@dataclass(frozen=True)
class ExactMask:
    """Run `exact_attention` (batch-invariant models) with this dense [T, S] mask (None: all visible);
    `whole`: the mask may hide prefix keys too (a sliding window), not only the block's own columns."""

    dense: torch.Tensor | None
    whole: bool = False


def exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                    whole: bool = False) -> torch.Tensor:
    """Attention in float64, rounded to float32 at the end. Sums over keys in float64 do not depend, to float32
    precision, on how many rows run together or on masked keys between the visible ones (a tree's siblings), so a
    one-token decode step and a tree node on the same path compute the same float32 bits. With int8 linears
    (runtime.linears) that makes the whole forward batch-invariant: EAGLE's output equals plain decoding's exactly.
    q: [heads, T, D]; k, v: [kv_heads, S, D]; mask: [T, S] bool or None (only its last T columns may hold False:
    the cached prefix is visible to every row, as `block_mask` builds it; with `whole`, every column may)."""
    heads, t, d = q.shape
    kv_heads = k.shape[0]
    group = heads // kv_heads
    q = q.double().mul_(d ** -0.5).reshape(kv_heads, group * t, d)  # [KV, g*T, D]
    scores = torch.matmul(q, k.double().transpose(1, 2)).view(kv_heads, group, t, -1)  # [KV, g, T, S]
    if mask is not None and whole:
        scores.masked_fill_(~mask, float("-inf"))  # [T, S] over every key (a sliding window)
    elif mask is not None:
        scores[..., -t:].masked_fill_(~mask[:, -t:], float("-inf"))  # the block's own columns
    probs = torch.softmax(scores, dim=-1).view(kv_heads, group * t, -1)
    return torch.matmul(probs, v.double()).view(heads, t, d).float()  # [heads, T, D]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask) -> torch.Tensor:
    """q: [heads, T, D]; k, v: [kv_heads, S, D]; mask: [T, S] bool (True = visible), a PackedTreeMask (CUDA tree
    verification: runs plugins.tree_attention), an ExactMask (`exact_attention`) or None for 'all visible'. The one
    place attention is computed."""
    if isinstance(mask, PackedTreeMask):
        from eagle_trt.kernels.tree_attention import tree_attention

        out = tree_attention(q.transpose(0, 1).contiguous(), k.unsqueeze(0), v.unsqueeze(0), mask.packed,
                             mask.cu_seqlens, mask.prefix_lens, max_tree_len=q.shape[1])
        return out.transpose(0, 1)
    if isinstance(mask, ExactMask):
        return exact_attention(q, k, v, mask.dense, mask.whole)
    return F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask,
                                          enable_gqa=q.shape[0] != k.shape[0]).squeeze(0)


class Attention(nn.Module):
    def __init__(self, args: LlamaArgs, in_features: int | None = None, sliding: bool = False):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = args.num_attention_heads, args.num_key_value_heads, args.head_dim
        in_features = in_features or args.hidden_size
        self.q_proj = nn.Linear(in_features, self.heads * self.head_dim, bias=args.qkv_bias)
        self.k_proj = nn.Linear(in_features, self.kv_heads * self.head_dim, bias=args.qkv_bias)
        self.v_proj = nn.Linear(in_features, self.kv_heads * self.head_dim, bias=args.qkv_bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, args.hidden_size, bias=args.o_bias)
        self.q_norm = RMSNorm(self.head_dim, args.rms_norm_eps) if args.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, args.rms_norm_eps) if args.qk_norm else None
        self.sliding = sliding  # this layer sees keys through the model's sliding window
        self.qkv_proj: nn.Module | None = None  # q|k|v in one matmul, set by runtime.linears.fuse_projections

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
        are read once for all), then each segment writes and attends over its own cache, one attention call per
        segment on purpose: every segment reads its own KVCache, so one call for all would first copy each cache
        into one padded tensor per layer (the CUDA tree kernel's several sequences also come from one [B, ...]
        tensor or page pool), and a padded call changes the shape of the sums (SDPA's kernels and exact_attention's
        float64 matmuls block by shape), which would break "each request's output equals its run alone, bit for
        bit". The per-segment call is the exact one."""
        t = x.shape[0]
        q, k, v = self.project(x)
        q, k = q.view(t, self.heads, self.head_dim), k.view(t, self.kv_heads, self.head_dim)  # [sum T, h, D]
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, cos, sin).transpose(0, 1)  # [heads, sum T, D]
        k = apply_rope(k, cos, sin).transpose(0, 1)  # [KV, sum T, D]
        v = v.view(t, self.kv_heads, self.head_dim).transpose(0, 1)  # [KV, sum T, D]
        outs, row = [], 0
        for seg in segments:
            end = seg.start + seg.rows
            seg.cache.k[layer, :, seg.start:end] = k[:, row:row + seg.rows]
            seg.cache.v[layer, :, seg.start:end] = v[:, row:row + seg.rows]
            outs.append(attention(q[:, row:row + seg.rows], seg.cache.k[layer, :, :end], seg.cache.v[layer, :, :end],
                                  seg.mask_of(self.sliding)))  # [heads, T_i, D]
            row += seg.rows
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)  # [heads, sum T, D]
        return self.o_proj(out.transpose(0, 1).reshape(t, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, args: LlamaArgs):
        super().__init__()
        self.gate_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=args.mlp_bias)
        self.up_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=args.mlp_bias)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=args.mlp_bias)
        self.gate_up_proj: nn.Module | None = None  # gate|up in one matmul, set by runtime.linears.fuse_projections

    def forward(self, x):
        if self.gate_up_proj is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # [T, I] each
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, args: LlamaArgs, input_norm: bool = True, sliding: bool = False):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps) if input_norm else None
        self.self_attn = Attention(args, sliding=sliding)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = MLP(args)

    def forward(self, x, cos, sin, cache, layer, start, mask):
        return self.forward_segments(x, cos, sin, [Segment(cache, start, x.shape[0], mask)], layer)

    def forward_segments(self, x, cos, sin, segments: list[Segment], layer: int):
        h = x if self.input_layernorm is None else self.input_layernorm(x)
        x = x + self.self_attn.forward_segments(h, cos, sin, segments, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


def block_mask(start: int, tree_mask: torch.Tensor | None, t: int, device) -> torch.Tensor | None:
    """[t, start+t] bool: all of the cached prefix, then `tree_mask` [t, t] (or causal) over the block itself."""
    if t == 1 and tree_mask is None:
        return None
    inner = tree_mask if tree_mask is not None else torch.ones(t, t, dtype=torch.bool, device=device).tril()
    return torch.cat((torch.ones(t, start, dtype=torch.bool, device=device), inner), dim=1)


def window_mask(start: int, positions: torch.Tensor, mask: torch.Tensor | None, window: int) -> torch.Tensor | None:
    """[t, start+t] bool: `mask` (block_mask's; None = all visible) with the keys a sliding window hides removed
    (transformers' sliding_window_overlay: a key is seen while q_pos - k_pos < window). Cached slot s holds position s
    (committed rows are compacted), the block's keys sit at `positions` [t]. None when the window hides nothing."""
    t = positions.shape[0]
    if start + t <= window:  # every position is < start + t: no key is `window` or more behind a query
        return None
    keys = torch.cat((torch.arange(start, device=positions.device), positions))  # [start+t]
    seen = (positions[:, None] - keys[None, :]) < window  # [t, start+t]
    return seen if mask is None else seen & mask


def use_tree_kernel() -> bool:
    """The Triton tree-attention kernel verifies trees on CUDA unless EAGLE_TRT_TREE_KERNEL=0."""
    import importlib.util
    import os

    return os.environ.get("EAGLE_TRT_TREE_KERNEL", "1") != "0" and importlib.util.find_spec("triton") is not None


class Llama(nn.Module):
    def __init__(self, args: LlamaArgs):
        super().__init__()
        self.args = args
        # uninitialised (the checkpoint fills it): a random init on the meta device imports torch._dynamo (~2 s)
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size,
                                         _weight=torch.empty(args.vocab_size, args.hidden_size))  # [V, H]
        self.layers = nn.ModuleList(DecoderLayer(args, sliding=i in args.sliding_layers)
                                    for i in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.cache: KVCache | None = None
        self.rope: Rope | None = None
        self.batch_invariant = False  # set by runtime.linears.prepare (int8; packed fp32): attention runs exact_attention
        self.native = None  # a runtime.native.NativeForward (precision native): it runs forward_packed

    def setup_cache(self, max_len: int) -> None:
        """Allocate the KV cache once; a call asking for no more than what exists is a no-op."""
        if self.cache is not None and self.cache.max_len >= max_len and self.cache.k.dtype == self.cache_dtype():
            return
        self.cache = self.new_cache(max_len)
        self.rope = Rope(self.args, max_len, self.embed_tokens.weight.dtype, self.embed_tokens.weight.device)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, start: int,
                tree_mask: torch.Tensor | None = None, capture: tuple[int, ...] = ()):
        """input_ids, positions: [T]; K/V land at slots start..start+T-1. Returns (logits [T, V] fp32,
        hidden [T, H] after the final norm, captured [T, len(capture)*H] or None: the hidden states entering the
        layers `capture` names, L = the last layer's output; draft_layouts has the one rule)."""
        return self.forward_packed([BaseCall(input_ids, positions, start, tree_mask)], capture)[0]

    def forward_packed(self, calls: list[BaseCall], capture: tuple[int, ...] = ()) -> list[tuple]:
        """Several sequences in one forward: their rows are packed so every linear layer reads its weights once,
        attention runs per sequence over its own cache. One (logits, hidden, captured) per call, as `forward`.
        With int8 linears and exact attention, or the native forward, each row's result does not depend on what it
        is packed with."""
        if self.native is not None:
            return self.native.forward_packed(self, calls, capture)
        ids = calls[0].input_ids if len(calls) == 1 else torch.cat([c.input_ids for c in calls])  # [sum T]
        positions = calls[0].positions if len(calls) == 1 else torch.cat([c.positions for c in calls])
        x = self.embed_tokens(ids)  # [sum T, H]
        cos, sin = self.rope(positions)
        segments = [Segment(c.cache or self.cache, c.start, c.input_ids.shape[0], *self._masks(c, x)) for c in calls]
        saved = {}
        for i, layer in enumerate(self.layers):
            if i in capture:
                saved[i] = x
            x = layer.forward_segments(x, cos, sin, segments, i)
        if len(self.layers) in capture:
            saved[len(self.layers)] = x  # what enters the final norm: capture index L (vLLM's last aux id)
        hidden = self.norm(x)
        picked = logit_rows(calls)
        logits = self.lm_head(hidden if picked is None else hidden[picked]).float()  # [rows asked for, V]
        captured = torch.cat([saved[i] for i in capture], dim=-1) if capture else None
        out, row, logit_row = [], 0, 0
        for call, seg in zip(calls, segments, strict=True):
            rows, k = slice(row, row + seg.rows), 1 if picked is not None and call.last_logits_only else seg.rows
            out.append((logits[logit_row:logit_row + k], hidden[rows], None if captured is None else captured[rows]))
            row, logit_row = row + seg.rows, logit_row + k
        return out

    def _masks(self, call: BaseCall, x: torch.Tensor) -> tuple:
        """(mask of full-attention layers, mask of sliding-window layers or None) as `attention` takes them."""
        t = call.input_ids.shape[0]
        dense = block_mask(call.start, call.tree_mask, t, x.device)
        windowed = None
        if self.args.sliding_layers:
            windowed = window_mask(call.start, call.positions, dense, self.args.sliding_window)
            if windowed is not None and self.batch_invariant:
                windowed = ExactMask(windowed, whole=True)
        mask = ExactMask(dense) if self.batch_invariant else dense
        if call.tree_mask is not None and x.is_cuda and use_tree_kernel():
            packed = call.packed_mask
            if packed is None:
                packed = torch.from_numpy(pack_mask(call.tree_mask.cpu().numpy())).to(x.device)  # [T, ceil(T/32)]
            mask = PackedTreeMask.of(call.start, packed)
        return mask, windowed

    def new_cache(self, max_len: int) -> KVCache:
        """A KV cache like the model's own, for another sequence (packed forwards take one per sequence)."""
        a = self.args
        return KVCache(a.num_hidden_layers, a.num_key_value_heads, max_len, a.head_dim, self.cache_dtype(),
                       self.embed_tokens.weight.device)

    def cache_dtype(self) -> torch.dtype:
        """float64 for exact_attention (int8 linears), the native forward's own, else the weights' dtype."""
        if self.native is not None:
            return self.native.cache_dtype
        return torch.float64 if self.batch_invariant else self.embed_tokens.weight.dtype

    def hf_name_map(self) -> dict[str, str]:
        """our parameter name -> HF checkpoint name, for every parameter this model has (biases and q/k norms
        included where its family has them)."""
        names = {"embed_tokens.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
                 "lm_head.weight": "model.embed_tokens.weight" if self.args.tie_word_embeddings else "lm_head.weight"}
        for name, _ in self.layers.named_parameters():
            names[f"layers.{name}"] = f"model.layers.{name}"
        return names
