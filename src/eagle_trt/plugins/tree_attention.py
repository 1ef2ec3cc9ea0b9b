"""Tree attention for EAGLE verification: an OpenAI Triton kernel and its host wrapper.

Each program owns one sequence b, one KV head h and a block of tree rows; it packs the G = Hq/Hkv query heads
that share h into the tile's M dimension (M = BLOCK_Q * G rows, arithmetic intensity ~ N*G FLOP/byte,
docs/eagle_algorithms.md §6), streams K/V of the cached prefix once without any mask, and applies the
TRT-LLM packed bitmask ([N, ceil(N/32)] int32, bit 0 = root) only on the key blocks that hold tree tokens.
Online softmax in fp32; fp16/bf16/fp32 inputs; ragged batches (cu_q, prefix_lens); contiguous K/V.

Layouts are those of tree_attention_ref.py (the oracle). On a CPU the kernel runs under Triton's interpreter
(TRITON_INTERPRET=1, tests only); the runtime uses it on CUDA and the reference attention elsewhere.
"""

from __future__ import annotations

import torch

from eagle_trt.errors import EagleTrtError, missing_extra

HEAD_DIMS = (16, 32, 64, 128, 256)  # head dims the kernel is compiled for

try:  # triton is optional (extra "kernels"); import errors surface when the kernel is used
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None


if triton is not None:

    @triton.jit
    def _tree_attn_kernel(
        q_ptr, k_ptr, v_ptr, o_ptr, mask_ptr, cu_q_ptr, prefix_ptr,
        stride_qt, stride_qh, stride_ot, stride_oh,
        stride_kb, stride_kh, stride_ks,  # [B, Hkv, S, D]
        stride_mt,
        sm_scale,
        G: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
        W: tl.constexpr,
    ):
        b = tl.program_id(0)
        h = tl.program_id(1)
        qblk = tl.program_id(2)
        q_start = tl.load(cu_q_ptr + b)
        n = tl.load(cu_q_ptr + b + 1) - q_start
        if qblk * BLOCK_Q >= n:
            return
        prefix = tl.load(prefix_ptr + b)
        kv_len = prefix + n
        rows = tl.arange(0, BLOCK_M)  # BLOCK_M = next power of 2 >= BLOCK_Q * G
        qi = qblk * BLOCK_Q + rows // G  # tree row of each tile row  # [BLOCK_M]
        head = h * G + rows % G  # query head of each tile row
        row_ok = (rows < BLOCK_Q * G) & (qi < n)
        d = tl.arange(0, D)
        q_off = (q_start + qi)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :]
        q = tl.load(q_ptr + q_off, mask=row_ok[:, None], other=0.0)  # [BLOCK_M, D]
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        kcols = tl.arange(0, BLOCK_K)
        # the last tree row of this block sees at most prefix + (its index + 1) keys (parents come first)
        kv_end = tl.minimum(kv_len, prefix + (qblk + 1) * BLOCK_Q)
        for start in range(0, kv_end, BLOCK_K):
            kpos = start + kcols  # [BLOCK_K]
            k_ok = kpos < kv_end
            base = b * stride_kb + h * stride_kh + kpos * stride_ks  # [BLOCK_K]
            k = tl.load(k_ptr + base[:, None] + d[None, :], mask=k_ok[:, None], other=0.0)  # [BLOCK_K, D]
            v = tl.load(v_ptr + base[:, None] + d[None, :], mask=k_ok[:, None], other=0.0)
            s = tl.dot(q, tl.trans(k)).to(tl.float32) * sm_scale  # [BLOCK_M, BLOCK_K]
            visible = k_ok[None, :] & row_ok[:, None]
            if start + BLOCK_K > prefix:  # this key block reaches into the tree tokens: apply the bitmask
                t = kpos - prefix  # tree index of each key (negative inside the prefix)
                in_tree = t >= 0
                tw = tl.where(in_tree, t, 0)
                words = tl.load(mask_ptr + (q_start + qi)[:, None] * stride_mt + (tw // 32)[None, :],
                                mask=row_ok[:, None] & in_tree[None, :] & k_ok[None, :], other=0)
                bit = (words >> (tw % 32)[None, :]) & 1
                visible = visible & ((~in_tree)[None, :] | (bit != 0))
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
            m_i = m_new
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        o_off = (q_start + qi)[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :]
        tl.store(o_ptr + o_off, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])


def tree_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packed_mask: torch.Tensor,
                   cu_q: torch.Tensor, prefix_lens: torch.Tensor, *,
                   sm_scale: float | None = None, max_tree_len: int | None = None, out: torch.Tensor | None = None,
                   block_q: int | None = None, block_k: int = 64) -> torch.Tensor:
    """Attention of every tree token over its sequence's prefix plus its tree ancestors (and itself).

    q [total_q, Hq, D]; k, v [B, Hkv, S, D]; packed_mask [total_q, W] int32; cu_q [B+1] int32; prefix_lens [B]
    int32.
    Returns [total_q, Hq, D] in q's dtype.
    """
    if triton is None:
        raise missing_extra("triton", "kernels")
    total_q, hq, d = q.shape
    hkv = k.shape[1]
    batch = prefix_lens.shape[0]
    _check_inputs(q, k, v, packed_mask, cu_q, batch)
    if max_tree_len is None:
        max_tree_len = int((cu_q[1:] - cu_q[:-1]).max())
    group = hq // hkv
    if block_q is None:  # tree rows per program: enough to fill ~64 MMA rows with the G packed heads
        block_q = max(1, min(triton.next_power_of_2(max_tree_len), max(1, 64 // group)))
    block_m = max(16, triton.next_power_of_2(block_q * group))  # tl.dot needs M >= 16
    out = torch.empty_like(q) if out is None else out
    grid = (batch, hkv, triton.cdiv(max_tree_len, block_q))
    _tree_attn_kernel[grid](
        q, k, v, out, packed_mask, cu_q, prefix_lens,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k.stride(0), k.stride(1), k.stride(2),
        packed_mask.stride(0),
        sm_scale if sm_scale is not None else d ** -0.5,
        G=group, D=d, BLOCK_Q=block_q, BLOCK_M=block_m, BLOCK_K=block_k, W=packed_mask.shape[1],
    )
    return out


def _check_inputs(q, k, v, packed_mask, cu_q, batch: int) -> None:
    """Every layout rule of the kernel's inputs, each one as an EagleTrtError naming the value."""
    (total_q, hq, d), hkv = q.shape, k.shape[1]
    rules = [
        (q.dtype == k.dtype == v.dtype, f"q/k/v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}",
         "cast q, k and v to one dtype"),
        (hq % hkv == 0, f"{hq} query heads are not a multiple of {hkv} KV heads", "pass a GQA layout"),
        (d in HEAD_DIMS, f"head dim {d} is not supported", f"use a head dim in {HEAD_DIMS}"),
        (k.shape == v.shape and k.shape[-1] == d, f"k {tuple(k.shape)} / v {tuple(v.shape)} / head dim {d}",
         "k and v must be [B, Hkv, S, D] with q's head dim"),
        (packed_mask.dtype == torch.int32 and packed_mask.shape[0] == total_q,
         f"packed_mask is {packed_mask.dtype} {tuple(packed_mask.shape)}, not int32 [{total_q}, W]",
         "pack the tree mask with eagle_trt.tree.pack_mask"),
        (q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1, "the last dimension is not contiguous",
         "call .contiguous() on q, k and v"),
        (k.stride() == v.stride(), "k and v do not share a layout", "allocate k and v alike"),
        (cu_q.shape[0] == batch + 1, f"cu_q has {cu_q.shape[0]} entries for {batch} sequences",
         "cu_q needs B+1 cumulative offsets"),
    ]
    for ok, message, hint in rules:
        if not ok:
            raise EagleTrtError(f"tree_attention: {message}", hint)

