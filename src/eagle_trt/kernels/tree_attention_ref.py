"""The tree-attention oracle: plain math in fp32 with the expanded boolean mask (and an SDPA variant).

Layout (shared with the kernel in tree_attention.py):
  q            [total_q, Hq, D]    tree tokens of all sequences, packed; sequence b owns rows cu_q[b]:cu_q[b+1]
  k, v         [B, Hkv, S, D]      contiguous cache; sequence b's keys are 0..prefix_lens[b]+N_b-1, the tree tokens
                                   at prefix_lens[b].. in tree order
  packed_mask  [total_q, W] int32  TRT-LLM layout: bit j (word j // 32, LSB first) of a row is set iff tree token j
                                   is visible to it (bit 0 = the root); the cached prefix is always visible
"""

from __future__ import annotations

import torch


def unpack_rows(packed: torch.Tensor, n: int) -> torch.Tensor:
    """[rows, W] int32 -> [rows, n] bool."""
    j = torch.arange(n, device=packed.device)
    words = packed.to(torch.int64)[:, j // 32] & 0xFFFFFFFF
    return ((words >> (j % 32)) & 1).bool()


def expanded_mask(packed_rows: torch.Tensor, prefix_len: int, n: int) -> torch.Tensor:
    """[n, prefix_len + n] bool for one sequence."""
    return torch.cat((torch.ones(n, prefix_len, dtype=torch.bool, device=packed_rows.device),
                      unpack_rows(packed_rows, n)), dim=1)


def tree_attention_ref(q, k, v, packed_mask, cu_q, prefix_lens, sm_scale: float | None = None,
                       use_sdpa: bool = False) -> torch.Tensor:
    """Reference output [total_q, Hq, D] (in q's dtype, computed in fp32)."""
    hq, d = q.shape[1], q.shape[2]
    hkv = k.shape[1]
    group = hq // hkv
    scale = sm_scale if sm_scale is not None else d ** -0.5
    out = torch.empty_like(q)
    for b in range(len(prefix_lens)):
        a, e = int(cu_q[b]), int(cu_q[b + 1])
        n, p = e - a, int(prefix_lens[b])
        mask = expanded_mask(packed_mask[a:e], p, n)  # [n, p + n]
        qb = q[a:e].float().transpose(0, 1)  # [Hq, n, D]
        kb = k[b, :, : p + n].float().repeat_interleave(group, dim=0)  # [Hq, p + n, D]
        vb = v[b, :, : p + n].float().repeat_interleave(group, dim=0)
        if use_sdpa:
            ob = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale)
        else:
            scores = (qb @ kb.transpose(-1, -2)) * scale
            ob = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ vb
        out[a:e] = ob.transpose(0, 1).to(q.dtype)
    return out
