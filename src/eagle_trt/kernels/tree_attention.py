"""Tree attention for EAGLE verification: OpenAI Triton kernels and their host wrapper.

Each program owns one sequence b, one KV head h, a block of tree rows and one split of the key range. It packs the
G = Hq/Hkv query heads that share h into the tile's M dimension (M = BLOCK_Q * G rows, arithmetic intensity
~ N*G FLOP/byte, docs/eagle_algorithms.md §6), streams its keys of the cached prefix with no mask at all, and
applies the TRT-LLM packed bitmask ([N, ceil(N/32)] int32, bit 0 = root) only on the key blocks that hold tree
tokens. Online softmax in fp32; fp16/bf16/fp32 inputs; ragged batches (cu_q, prefix_lens); contiguous K/V.

Splitting (flash-decoding): at batch 1 there are only Hkv * ceil(N/BLOCK_Q) (row block, head) pairs, 8 for
Llama-3-8B, far fewer than the GPU's multiprocessors, so one program per pair leaves most of the GPU idle while it
streams the whole prefix. From SPLIT_FROM_KEYS keys on, the key range is cut into splits, each program writes its
unnormalised partial (acc, running max m, running sum l) in fp32, and a second kernel merges the splits per
(token, head):
  M = max_s m_s,  L = sum_s l_s e^(m_s - M),  O = sum_s acc_s e^(m_s - M) / L.

Layouts are those of tree_attention_ref.py (the oracle). On a CPU the kernels run under Triton's interpreter
(TRITON_INTERPRET=1, tests only); the runtime uses them on CUDA and the reference attention elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from eagle_trt.errors import EagleTrtError, missing_extra

HEAD_DIMS = (16, 32, 64, 128, 256)  # head dims the kernel is compiled for
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # fp32 runs IEEE products (tl.dot defaults to TF32)
PROGRAMS_PER_SM = 2  # splits are added until the grid has this many programs per multiprocessor
MIN_SPLIT_KEYS = 256  # a split streams at least this many keys (and 4 keys per tile row: partials stay small)
SPLIT_FROM_KEYS = 6144  # shorter key ranges run in one pass: launched eagerly on an H100 the split lost at every
# L <= 2048, won half the rows at 4096 and 12 of 16 at 8192 (docs/results/2026-11-26-kernel)
BLOCK_K, NUM_WARPS, NUM_STAGES = 64, 4, 3  # keys per loop step and the launch's warps and pipeline stages

try:  # triton is optional (extra "kernels"); import errors surface when the kernel is used
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None


if triton is not None:

    @triton.jit
    def _online_softmax_step(q, k, v, visible, m_i, l_i, acc, sm_scale, MASKED: tl.constexpr,
                             PRECISION: tl.constexpr):
        """One key block of the online softmax: q [M, D], k/v [K, D], visible [M, K] bool (read iff MASKED)."""
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32) * sm_scale  # [BLOCK_M, BLOCK_K]
        if MASKED:
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION).to(tl.float32)
        return m_new, l_i, acc

    @triton.jit
    def _tree_attn_kernel(
        q_ptr, k_ptr, v_ptr, o_ptr, mask_ptr, cu_q_ptr, prefix_ptr,
        part_ptr,  # split runs only: fp32 workspace, acc [splits, total_q, Hq, D] then m and l [splits, total_q, Hq]
        stride_qt, stride_qh, stride_ot, stride_oh,
        stride_kb, stride_kh, stride_ks,  # [B, Hkv, S, D]
        stride_mt,
        total_q, num_splits, split_len,
        sm_scale,
        G: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
        SPLIT: tl.constexpr, PRECISION: tl.constexpr,
    ):
        b = tl.program_id(0) // num_splits
        split = tl.program_id(0) % num_splits
        h = tl.program_id(1)
        qblk = tl.program_id(2)
        q_start = tl.load(cu_q_ptr + b)
        n = tl.load(cu_q_ptr + b + 1) - q_start
        if qblk * BLOCK_Q >= n:
            return
        prefix = tl.load(prefix_ptr + b)
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
        # this program's keys: its split of [0, kv_end); the block's last tree row sees at most prefix + its index
        # + 1 keys (parents come first)
        kv_end = tl.minimum(prefix + n, prefix + (qblk + 1) * BLOCK_Q)
        lo = split * split_len
        hi = tl.minimum(lo + split_len, kv_end)
        tree_from = tl.maximum(lo, (prefix // BLOCK_K) * BLOCK_K)  # first key block that may hold tree tokens
        k_base = k_ptr + b * stride_kb + h * stride_kh  # this sequence's and head's keys (values alike)
        v_base = v_ptr + b * stride_kb + h * stride_kh
        for start in range(lo, tl.minimum(hi, tree_from), BLOCK_K):  # whole prefix blocks: no mask at all
            off = (start + kcols)[:, None] * stride_ks + d[None, :]  # [BLOCK_K, D]
            k = tl.load(k_base + off)
            v = tl.load(v_base + off)
            m_i, l_i, acc = _online_softmax_step(q, k, v, 0, m_i, l_i, acc, sm_scale, False, PRECISION)
        for start in range(tree_from, hi, BLOCK_K):  # blocks reaching into the tree tokens: bitmask
            kpos = start + kcols  # [BLOCK_K]
            k_ok = kpos < hi
            off = kpos[:, None] * stride_ks + d[None, :]
            k = tl.load(k_base + off, mask=k_ok[:, None], other=0.0)  # [BLOCK_K, D]
            v = tl.load(v_base + off, mask=k_ok[:, None], other=0.0)
            t = kpos - prefix  # tree index of each key (negative inside the prefix)
            in_tree = t >= 0
            tw = tl.where(in_tree, t, 0)
            words = tl.load(mask_ptr + (q_start + qi)[:, None] * stride_mt + (tw // 32)[None, :],
                            mask=row_ok[:, None] & in_tree[None, :] & k_ok[None, :], other=0)
            bit = (words >> (tw % 32)[None, :]) & 1
            visible = k_ok[None, :] & row_ok[:, None] & ((~in_tree)[None, :] | (bit != 0))  # [BLOCK_M, BLOCK_K]
            m_i, l_i, acc = _online_softmax_step(q, k, v, visible, m_i, l_i, acc, sm_scale, True, PRECISION)
        if SPLIT:  # unnormalised partial of this split (an empty split writes m = -inf, l = 0)
            hq = G * tl.num_programs(1)
            tok_head = (split * total_q + q_start + qi) * hq + head  # [BLOCK_M]
            rows_all = num_splits * total_q * hq  # (split, token, head) rows in the workspace
            tl.store(part_ptr + tok_head[:, None] * D + d[None, :], acc, mask=row_ok[:, None])
            tl.store(part_ptr + rows_all * D + tok_head, m_i, mask=row_ok)
            tl.store(part_ptr + rows_all * (D + 1) + tok_head, l_i, mask=row_ok)
        else:
            out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
            o_off = (q_start + qi)[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :]
            tl.store(o_ptr + o_off, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])

    @triton.jit
    def _merge_splits_kernel(part_ptr, o_ptr, stride_ot, stride_oh, total_q, num_splits,
                             HQ: tl.constexpr, BLOCK_H: tl.constexpr, D: tl.constexpr):
        """One program per tree token: combines the splits' partials of all its heads."""
        tok = tl.program_id(0)
        heads = tl.arange(0, BLOCK_H)
        h_ok = heads < HQ
        d = tl.arange(0, D)
        m = tl.full([BLOCK_H], float("-inf"), tl.float32)
        l_sum = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, D], tl.float32)
        rows_all = num_splits * total_q * HQ
        for s in range(num_splits):
            row = (s * total_q + tok) * HQ + heads  # [BLOCK_H]
            ms = tl.load(part_ptr + rows_all * D + row, mask=h_ok, other=float("-inf"))
            ls = tl.load(part_ptr + rows_all * (D + 1) + row, mask=h_ok, other=0.0)
            part = tl.load(part_ptr + row[:, None] * D + d[None, :], mask=h_ok[:, None], other=0.0)  # [BLOCK_H, D]
            m_new = tl.maximum(m, ms)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m - m_safe)
            beta = tl.exp(ms - m_safe)
            l_sum = l_sum * alpha + ls * beta
            acc = acc * alpha[:, None] + part * beta[:, None]
            m = m_new
        out = acc / tl.where(l_sum == 0.0, 1.0, l_sum)[:, None]
        o_off = tok * stride_ot + heads[:, None] * stride_oh + d[None, :]
        tl.store(o_ptr + o_off, out.to(o_ptr.dtype.element_ty), mask=h_ok[:, None])


_SM_COUNT: dict[int, int] = {}


def multiprocessors(device: torch.device) -> int:
    """The device's SM count (cached), which LaunchPlan fills with programs."""
    if device.type != "cuda":
        return 4  # Triton's interpreter on a CPU (tests pass num_splits to exercise splitting)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


def plan_splits(programs: int, keys: int, tile_rows: int, block_k: int, multiprocessors: int) -> tuple[int, int]:
    """(number of splits, keys per split) for `programs` (sequence, head, row block) programs over <= `keys` keys.

    Splits are added until the grid fills PROGRAMS_PER_SM programs per multiprocessor, while each split keeps at
    least max(MIN_SPLIT_KEYS, 4 * tile_rows) keys, so the fp32 partials stay well below the K/V bytes they replace.
    Fewer than SPLIT_FROM_KEYS keys run in one pass. Keys per split are a multiple of block_k."""
    if keys < SPLIT_FROM_KEYS:
        return 1, keys
    want = -(-PROGRAMS_PER_SM * multiprocessors // max(programs, 1))
    most = max(1, keys // max(MIN_SPLIT_KEYS, 4 * tile_rows))
    return split_keys(keys, max(1, min(want, most)), block_k)


def split_keys(keys: int, splits: int, block_k: int) -> tuple[int, int]:
    """(splits, keys per split): `keys` cut into at most `splits` runs of whole key blocks (one run: all keys)."""
    if splits <= 1:
        return 1, keys
    split_len = -(-keys // (splits * block_k)) * block_k
    return -(-keys // split_len), split_len


@dataclass(frozen=True)
class LaunchPlan:
    """How tree_attention launches: tree rows per program, tile rows, row blocks, splits and keys per split."""

    block_q: int
    block_m: int
    q_blocks: int
    num_splits: int
    split_len: int

    @classmethod
    def of(cls, batch: int, hq: int, hkv: int, keys: int, max_tree_len: int, block_k: int, multiprocessors: int,
           block_q: int | None = None, num_splits: int | None = None) -> LaunchPlan:
        group = hq // hkv
        if block_q is None:  # tree rows per program: enough to fill ~64 MMA rows with the G packed heads
            block_q = max(1, min(_next_power_of_2(max_tree_len), max(1, 64 // group)))
        block_m = max(16, _next_power_of_2(block_q * group))  # tl.dot needs M >= 16
        q_blocks = -(-max_tree_len // block_q)
        if num_splits is None:
            splits = plan_splits(batch * hkv * q_blocks, keys, block_m, block_k, multiprocessors)
        else:
            splits = split_keys(keys, num_splits, block_k)
        return cls(block_q, block_m, q_blocks, *splits)


def _next_power_of_2(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def tree_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packed_mask: torch.Tensor,
                   cu_q: torch.Tensor, prefix_lens: torch.Tensor, *,
                   sm_scale: float | None = None, max_tree_len: int | None = None, out: torch.Tensor | None = None,
                   block_q: int | None = None, block_k: int = BLOCK_K, num_splits: int | None = None,
                   num_warps: int = NUM_WARPS, num_stages: int = NUM_STAGES) -> torch.Tensor:
    """Attention of every tree token over its sequence's prefix plus its tree ancestors (and itself).

    q [total_q, Hq, D]; k, v [B, Hkv, S, D]; packed_mask [total_q, W] int32; cu_q [B+1] int32; prefix_lens [B]
    int32. num_splits None: plan_splits picks it from the grid and S (an upper bound on prefix + N, so no host
    sync); 1 runs the single-pass kernel. Returns [total_q, Hq, D] in q's dtype.
    """
    if triton is None:
        raise missing_extra("triton", "kernels")
    total_q, hq, d = q.shape
    hkv, keys = k.shape[1], k.shape[2]
    batch = prefix_lens.shape[0]
    _check_inputs(q, k, v, packed_mask, cu_q, batch)
    if max_tree_len is None:
        max_tree_len = int((cu_q[1:] - cu_q[:-1]).max())
    plan = LaunchPlan.of(batch, hq, hkv, keys, max_tree_len, block_k, multiprocessors(q.device), block_q,
                         num_splits)
    out = torch.empty_like(q) if out is None else out
    if plan.num_splits * total_q * hq * (d + 2) >= 2**31:  # the workspace's int32 offsets in the kernels
        plan = replace(plan, num_splits=1, split_len=keys)
    split = plan.num_splits > 1
    # one fp32 workspace for the split partials: acc [S, total_q, Hq, D], then m and l [S, total_q, Hq] each
    part = torch.empty(plan.num_splits * total_q * hq * (d + 2), dtype=torch.float32, device=q.device) if split else out
    _tree_attn_kernel[(batch * plan.num_splits, hkv, plan.q_blocks)](
        q, k, v, out, packed_mask, cu_q, prefix_lens, part,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k.stride(0), k.stride(1), k.stride(2),
        packed_mask.stride(0),
        total_q, plan.num_splits, plan.split_len,
        sm_scale if sm_scale is not None else d ** -0.5,
        G=hq // hkv, D=d, BLOCK_Q=plan.block_q, BLOCK_M=plan.block_m, BLOCK_K=block_k, SPLIT=split,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", num_warps=num_warps, num_stages=num_stages,
    )
    if split:
        _merge_splits_kernel[(total_q,)](part, out, out.stride(0), out.stride(1), total_q, plan.num_splits,
                                         HQ=hq, BLOCK_H=_next_power_of_2(hq), D=d)
    return out


def _check_inputs(q, k, v, packed_mask, cu_q, batch: int) -> None:
    """Every layout rule of the kernel's inputs, each one as an EagleTrtError naming the value. The messages are
    built only for a broken rule (this runs before every launch)."""
    (total_q, hq, d), hkv = q.shape, k.shape[1]
    rules = (
        (q.dtype == k.dtype == v.dtype, lambda: f"q/k/v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}",
         "cast q, k and v to one dtype"),
        (q.dtype in KERNEL_DTYPES, lambda: f"dtype {q.dtype} is not supported", "use float16, bfloat16 or float32"),
        (hq % hkv == 0, lambda: f"{hq} query heads are not a multiple of {hkv} KV heads", "pass a GQA layout"),
        (d in HEAD_DIMS, lambda: f"head dim {d} is not supported", f"use a head dim in {HEAD_DIMS}"),
        (k.shape == v.shape and k.shape[-1] == d, lambda: f"k {tuple(k.shape)} / v {tuple(v.shape)} / head dim {d}",
         "k and v must be [B, Hkv, S, D] with q's head dim"),
        (packed_mask.dtype == torch.int32 and packed_mask.shape[0] == total_q,
         lambda: f"packed_mask is {packed_mask.dtype} {tuple(packed_mask.shape)}, not int32 [{total_q}, W]",
         "pack the tree mask with eagle_trt.tree.pack_mask"),
        (q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1, lambda: "the last dimension is not contiguous",
         "call .contiguous() on q, k and v"),
        (k.stride() == v.stride(), lambda: "k and v do not share a layout", "allocate k and v alike"),
        (cu_q.shape[0] == batch + 1, lambda: f"cu_q has {cu_q.shape[0]} entries for {batch} sequences",
         "cu_q needs B+1 cumulative offsets"),
    )
    for ok, message, hint in rules:
        if not ok:
            raise EagleTrtError(f"tree_attention: {message()}", hint)
