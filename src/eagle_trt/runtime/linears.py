"""Inference-time rewrites of a loaded base and draft: fused projections, int8 linears, oneDNN-packed fp32 linears,
a truncated draft vocabulary.

- `fuse_projections`: q|k|v and gate|up become one matmul each (fewer weight passes and kernel launches).
- `Int8Linear` (precision "int8"; also every draft on the CPU, which only proposes): weights int8 with one fp32 scale
  per output channel; activations quantized to int8 per token (one scale per row) at run time; int8 x int8 -> int32
  products summed exactly, by `torch._int_mm`, by oneDNN's prepacked u8 x s8 kernel or by our AVX2 kernel
  (kernels/cpu_int8.h), whichever is fastest for the weight's shape on this machine (`use_fastest_int8_kernels`;
  oneDNN only where it proves to give the same sums; on a CPU without VNNI _int_mm has no fast kernel). A
  row's result depends on that row alone, so a verify block of T tokens computes each token exactly as a one-token
  decode step would: the linears are batch-invariant, which keeps EAGLE's output identical to the same
  engine's plain decoding.
- `PackedLinear` (precision "float32" on the CPU): the weight reordered once into oneDNN's blocked layout, run by
  `torch.ops.mkldnn._linear_pointwise`. On this project's 2-core AVX-512 CPU a one-token SmolLM2 forward costs less
  than half of what `F.linear` (MKL) costs, and 2-4 rows cost about what one does. oneDNN runs a one-row input
  through another kernel than two or more rows, so a single row is run as two: then each row's result depends on that
  row alone (checked at load by `rows_are_independent`; where it holds the base is batch-invariant, as with int8).
- `truncate_draft_vocab` (FR-Spec): an EAGLE-1/2 draft proposes only among its N most frequent tokens; the head rows
  are sliced from the base's lm_head, and the base still verifies every token, so outputs do not change.
"""

from __future__ import annotations

import ctypes
import logging
import time

import torch
from torch import nn

from eagle_trt.errors import EagleTrtError
from eagle_trt.runtime.weight_memory import WeightArena, release_freed_memory
from eagle_trt.spec import CPU_PRECISIONS, NATIVE_PRECISIONS, PRECISIONS

INT8_MAX = 127.0
log = logging.getLogger(__name__)


class Int8Linear(nn.Module):
    """y = x W^T (+ b) with W int8 per output channel and x int8 per row; exact int32 accumulation, the bias (fp32)
    added per row after the scales."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        w = weight.detach().float()  # [N, K]
        scale = w.abs().amax(dim=1).clamp_min(1e-12) / INT8_MAX  # [N]
        q = torch.round(w / scale[:, None]).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
        self.register_buffer("qweight_t", q.t().contiguous())  # [K, N] int8, the layout _int_mm reads fastest
        self.register_buffer("scale", scale)  # [N] fp32
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())  # [N] fp32
        self.in_features, self.out_features = w.shape[1], w.shape[0]
        self.onednn = None  # oneDNN's prepacked weight, set by use_onednn
        self.native = None  # the weight in kernels/cpu_int8.h's layout (int8 bytes), set by use_native

    @classmethod
    def from_rows(cls, other: Int8Linear, rows: torch.Tensor) -> Int8Linear:
        """The same quantized rows (output channels) `rows` [n] of another Int8Linear: identical numerics."""
        if other.qweight_t is None:
            raise EagleTrtError("cannot slice rows of an int8 linear whose weight lives in another kernel's layout",
                                "slice the rows (truncate_draft_vocab) before use_fastest_int8_kernels, as "
                                "prepare() does")
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.register_buffer("qweight_t", other.qweight_t[:, rows].contiguous())  # [K, n]
        new.register_buffer("scale", other.scale[rows].clone())  # [n]
        new.register_buffer("bias", None if other.bias is None else other.bias[rows].clone())  # [n]
        new.in_features, new.out_features = other.in_features, int(rows.numel())
        new.onednn = new.native = None
        return new

    def use_onednn(self) -> bool:
        """Run the int32 products through oneDNN's prepacked u8 x s8 kernel (2.5x faster than `_int_mm` for a
        vocabulary head on this project's CPU) if it gives the same int32 sums on this machine (no VNNI: it may
        saturate). Either kernel gives the same bits, so the choice changes speed only. On success the `_int_mm`
        copy of the weight is dropped (oneDNN holds its own)."""
        if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.onednn, "qlinear_prepack")):
            return False
        self.onednn = torch.ops.onednn.qlinear_prepack(self.qweight_t.t().contiguous(), None)  # oneDNN layout
        self._unit = torch.ones(self.out_features)  # [N] weight scale 1: oneDNN returns the exact int32 sums
        self._zero = torch.zeros(self.out_features, dtype=torch.long)  # [N] weight zero points
        probe = torch.full((3, self.in_features), -INT8_MAX, dtype=torch.int8)  # [3, K]: the extreme sums
        probe[1] = INT8_MAX
        probe[2] = torch.randint(-127, 128, (self.in_features,), generator=torch.Generator().manual_seed(0))
        if not torch.equal(self._int32(probe), torch._int_mm(probe, self.qweight_t).float()):
            self.onednn = None
        else:
            self.qweight_t = None  # [K, N] no longer read
        return self.onednn is not None

    def use_native(self) -> bool:
        """Run the int32 products through kernels/cpu_int8.h (AMX, AVX-512 VNNI or AVX2; the exact int32 sums, so the
        same bits as the other kernels) where this CPU runs the native kernels. The weight moves into that kernel's
        own layout; the `_int_mm` copy is dropped."""
        from eagle_trt.kernels.cpu_build import cpu_supports_native, load_cpu_forward

        if self.qweight_t is None or cpu_supports_native() is not None:
            return False
        lib, _ = load_cpu_forward(False), load_cpu_forward(True)  # both built at load, not mid-request
        weight = self.qweight_t.t().contiguous()  # [N, K] int8
        self.native = torch.empty(lib.ef_int8_packed_bytes(self.out_features, self.in_features),
                                  dtype=torch.int8)  # [bytes]: the kernel's layout
        lib.ef_int8_pack(ctypes.c_void_p(weight.data_ptr()), self.out_features, self.in_features,
                         ctypes.c_void_p(self.native.data_ptr()))
        self.qweight_t = None
        return True

    def _int32(self, xq: torch.Tensor) -> torch.Tensor:
        """xq [T, K] int8 -> the int32 sums of xq W_q^T as float32 [T, N]."""
        if self.native is not None:
            from eagle_trt.kernels.cpu_build import load_cpu_forward

            xq = xq.contiguous()
            out = torch.empty(xq.shape[0], self.out_features, dtype=torch.int32)  # [T, N]
            load_cpu_forward(torch.get_num_threads() > 1).ef_int8_mm(
                ctypes.c_void_p(xq.data_ptr()), xq.shape[0], ctypes.c_void_p(self.native.data_ptr()),
                self.out_features, self.in_features, ctypes.c_void_p(out.data_ptr()))
            return out.float()
        if self.onednn is None:
            return torch._int_mm(xq, self.qweight_t).float()
        xu = xq.view(torch.uint8).bitwise_xor(128)  # [T, K] uint8 = xq + 128 (zero point 128)
        return torch.ops.onednn.qlinear_pointwise(xu, 1.0, 128, self.onednn, self._unit, self._zero, None, 1.0, 0,
                                                  torch.float32, "none", [], "")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [T, K] float -> [T, N] float32
        x = x.float()
        if self.native is not None:  # the ops below in one C call: the same bits
            from eagle_trt.kernels.cpu_build import load_cpu_forward

            x = x.contiguous()
            out = torch.empty(x.shape[0], self.out_features)  # [T, N]
            load_cpu_forward(torch.get_num_threads() > 1).ef_int8_linear(
                ctypes.c_void_p(x.data_ptr()), x.shape[0], ctypes.c_void_p(self.native.data_ptr()),
                self.out_features, self.in_features, ctypes.c_void_p(self.scale.data_ptr()),
                None if self.bias is None else ctypes.c_void_p(self.bias.data_ptr()), ctypes.c_void_p(out.data_ptr()))
            return out
        row_scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / INT8_MAX  # [T, 1]
        xq = torch.round(x / row_scale).to(torch.int8)  # [T, K]
        out = self._int32(xq).mul_(row_scale).mul_(self.scale)  # [T, N]
        return out if self.bias is None else out.add_(self.bias)


class PackedLinear(nn.Module):
    """fp32 y = x W^T (+ b) through oneDNN with W reordered once (CPU). Batch-invariant: one row runs as two."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float().contiguous()  # [N, K]
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)  # oneDNN blocked layout of [N, K]
        self.bias = None if linear.bias is None else linear.bias.detach().float().contiguous()  # [N]
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [T, K] float32 -> [T, N] float32
        if x.shape[0] == 1:  # the one-row kernel sums in another order: run it as two rows
            return torch.ops.mkldnn._linear_pointwise(x.expand(2, -1).contiguous(), self.packed, self.bias,
                                                      "none", [], "")[:1]  # [1, N]
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, self.bias, "none", [], "")


def use_fastest_int8_kernels(modules) -> None:
    """Every Int8Linear under `modules` (None skipped) runs on whichever of `_int_mm`, oneDNN and kernels/cpu_int8.h
    is fastest for its weight's shape on this machine: the first linear of each shape is timed on each (1 and 4
    rows), the rest follow it. All three give the same int32 sums (SmolLM2 on the AVX-512 machine: oneDNN for its
    vocabulary heads and MLP gate|up; on an AVX2 one without VNNI, where _int_mm ran a step in ~200 ms, ours)."""
    by_shape: dict[tuple[int, int], dict[int, Int8Linear]] = {}
    for module in modules:
        for lin in [] if module is None else module.modules():
            if isinstance(lin, Int8Linear) and lin.onednn is None and lin.native is None:  # a shared head counts once
                by_shape.setdefault((lin.in_features, lin.out_features), {})[id(lin)] = lin
    for group in by_shape.values():
        first, *rest = group.values()
        kernel = _fastest_kernel(first)
        for lin in rest:
            if kernel == "onednn":
                lin.use_onednn()
            elif kernel == "native":
                lin.use_native()


def _fastest_kernel(lin: Int8Linear) -> str:
    """Time `lin` on each kernel that runs here and leave it on the fastest: "native", "onednn" or "int_mm"."""
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(rows, lin.in_features, generator=gen) for rows in (1, 4)]  # [rows, K]
    weight, seconds = lin.qweight_t, {}
    uses = {"native": lin.use_native, "onednn": lin.use_onednn, "int_mm": lambda: True}
    for name, use in uses.items():
        lin.onednn, lin.native, lin.qweight_t = None, None, weight
        if use():
            seconds[name] = _best_seconds(lin, xs, slower_than=min(seconds.values(), default=None))
    best = min(seconds, key=seconds.get)
    lin.onednn, lin.native, lin.qweight_t = None, None, weight
    uses[best]()
    return best


def _best_seconds(lin: nn.Module, xs: list[torch.Tensor], calls: int = 8, repeats: int = 5,
                  slower_than: float | None = None) -> float:
    """The best of `repeats` timings of `calls` passes over xs; after one pass alone where that pass shows the kernel
    3x slower than `slower_than` (_int_mm without VNNI: ~1000x, seconds a shape)."""
    with torch.inference_mode():
        t0 = time.perf_counter()
        for x in xs:
            lin(x)
        if slower_than is not None and (time.perf_counter() - t0) * calls > 3 * slower_than:
            return (time.perf_counter() - t0) * calls
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                for x in xs:
                    lin(x)
            best = min(best, time.perf_counter() - t0)
    return best


def packed_linears_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def _replace_linears(module: nn.Module, wanted, make, cache: dict) -> dict:
    """Replace every nn.Linear under `module` for which wanted(linear) holds by make(linear); a linear shared by two
    modules (the draft uses the base's lm_head) becomes one replacement: pass the same `cache` for both."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and wanted(child):
                key = id(child.weight)
                if key not in cache:
                    cache[key] = make(child)
                setattr(parent, name, cache[key])
    return cache


def pack_linears(module: nn.Module, cache: dict[int, PackedLinear] | None = None) -> dict[int, PackedLinear]:
    """Every fp32 CPU nn.Linear under `module` becomes a PackedLinear (shared ones once, see `_replace_linears`)."""
    return _replace_linears(module, lambda lin: lin.weight.dtype == torch.float32 and lin.weight.device.type == "cpu",
                            PackedLinear, {} if cache is None else cache)


def rows_are_independent(linears) -> bool:
    """Does each row of a multi-row call equal, bit for bit, the same row run alone or with fewer rows?"""
    gen = torch.Generator().manual_seed(0)
    for lin in linears:
        x = torch.randn(9, lin.in_features, generator=gen)  # [9, K]
        full = lin(x)  # [9, N]
        for rows in (1, 2, 3, 5):
            alone = lin(x[rows:rows + 1])  # [1, N]
            if not torch.equal(lin(x[:rows]), full[:rows]) or not torch.equal(alone, full[rows:rows + 1]):
                return False
    return True


def _fused(*linears: nn.Linear) -> nn.Linear:
    weight = torch.cat([lin.weight for lin in linears], dim=0)  # [sum N, K]
    biased = linears[0].bias is not None
    fused = nn.Linear(weight.shape[1], weight.shape[0], bias=biased, device=weight.device, dtype=weight.dtype)
    fused.weight = nn.Parameter(weight, requires_grad=False)
    if biased:
        fused.bias = nn.Parameter(torch.cat([lin.bias for lin in linears]), requires_grad=False)  # [sum N]
    return fused


def fuse_projections(module: nn.Module) -> None:
    """Every attention's q|k|v and every MLP's gate|up into one linear (the originals are dropped)."""
    from eagle_trt.runtime.model import MLP, Attention

    for sub in list(module.modules()):
        if isinstance(sub, Attention) and sub.qkv_proj is None:
            sub.qkv_proj = _fused(sub.q_proj, sub.k_proj, sub.v_proj)
            del sub.q_proj, sub.k_proj, sub.v_proj
        elif isinstance(sub, MLP) and sub.gate_up_proj is None:
            sub.gate_up_proj = _fused(sub.gate_proj, sub.up_proj)
            del sub.gate_proj, sub.up_proj


def quantize_int8(module: nn.Module, cache: dict[int, Int8Linear] | None = None) -> dict[int, Int8Linear]:
    """Every nn.Linear under `module` becomes an Int8Linear (shared ones once, see `_replace_linears`) but an
    EAGLE-1/2 draft's fc with a bias: its input joins an embedding and a hidden state of very different scales, and
    quantizing it lowered the accepted length by 5 % (2.19 -> 2.07 on 12 held-out ShareGPT prompts)."""
    fc = getattr(module, "fc", None)
    keep = id(fc) if getattr(module, "format", None) == "eagle1" and getattr(fc, "bias", None) is not None else None
    return _replace_linears(module, lambda lin: id(lin) != keep, lambda lin: Int8Linear(lin.weight, lin.bias),
                            {} if cache is None else cache)


def check_precision(precision: str, device: str) -> None:
    if precision not in PRECISIONS:
        raise EagleTrtError(f"unsupported dtype {precision!r}", f"choose one of {', '.join(PRECISIONS)}")
    if precision in CPU_PRECISIONS and not device.startswith("cpu"):
        raise EagleTrtError(f"dtype {precision} runs on the CPU only, got device {device!r}",
                            "use --dtype bfloat16 on a GPU, or --device cpu")
    if precision in NATIVE_PRECISIONS:
        from eagle_trt.kernels.cpu_build import NATIVE_HINT, cpu_supports_native

        reason = cpu_supports_native(q8=precision == "native-q8")
        if reason:
            raise EagleTrtError(f"dtype native cannot run here: {reason}", NATIVE_HINT)


def prepare(base: nn.Module, draft: nn.Module | None, precision: str,
            draft_vocab: torch.Tensor | None = None, native_blocks: dict | None = None) -> None:
    """Fuse the projections of base and draft; with precision int8, quantize both (sharing the lm_head); truncate an
    EAGLE-1/2 draft's vocabulary to `draft_vocab` [n] base ids; fp32 on the CPU: pack the base's linears for oneDNN
    (a batch-invariant base where every packed shape proves it, see `rows_are_independent`) and quantize the draft
    to int8. Int8 linears run on oneDNN where it is faster for their shape and gives the same sums. native: the
    base runs runtime.native's fused C forward on `native_blocks` (runtime.loading.stored_blocks), so does an EAGLE-1/2
    draft (an EAGLE-3 draft: int8)."""
    if precision in NATIVE_PRECISIONS:
        from eagle_trt.runtime.native import attach_native, attach_native_draft

        attach_native(base, native_blocks or {}, q8_activations=precision == "native-q8")
        if draft is not None and draft_vocab is not None:
            truncate_draft_vocab(draft, draft_vocab)
            draft_vocab = None
        if draft is not None and attach_native_draft(draft, q8_activations=precision == "native-q8"):
            draft = None  # runs in C: nothing below applies to it
    elif precision == "int8" and draft is not None and _int8_draft_in_c(draft, draft_vocab):
        draft = draft_vocab = None
    fuse_projections(base)
    if draft is not None:
        fuse_projections(draft)
    if precision == "int8":
        base.batch_invariant = True
        cache = quantize_int8(base)
        if draft is not None:
            quantize_int8(draft, cache)
    elif precision in NATIVE_PRECISIONS and draft is not None:
        quantize_int8(draft)
    if draft is not None and draft_vocab is not None:
        truncate_draft_vocab(draft, draft_vocab)
    packed: dict[int, PackedLinear] = {}
    on_cpu = base.embed_tokens.weight.device.type == "cpu" and packed_linears_available()
    if precision == "float32" and on_cpu:
        packed = pack_linears(base)
        shapes = {(lin.in_features, lin.out_features): lin for lin in packed.values()}
        base.batch_invariant = rows_are_independent(shapes.values())
        if not base.batch_invariant:
            log.warning("oneDNN's fp32 linears are not row-independent on this CPU: the fp32 engine is not "
                        "batch-invariant here, so EAGLE matches plain decoding up to numerical near-ties; "
                        "--dtype int8 is batch-invariant on every CPU")
        if draft is not None:  # the draft only proposes: int8 halves its cost at the same acceptance
            quantize_int8(draft)
    if draft is not None and on_cpu:
        pack_linears(draft, packed)  # what is left in fp32: a draft's fc
    use_fastest_int8_kernels((base, draft))
    place_in_weight_pages((base, draft))
    release_freed_memory()  # the float32 copies loading and quantizing left in the heap: ~560 MiB for SmolLM2 int8


def place_in_weight_pages(modules) -> None:
    """The int8 weights our kernels read (`_int_mm`'s and kernels/cpu_int8.h's; oneDNN keeps its packed copy in its
    own memory) moved into one WeightArena: 2 MiB pages where the system allows (runtime.weight_memory)."""
    arena, seen = WeightArena(), set()
    for module in modules:
        for lin in [] if module is None else module.modules():
            if not isinstance(lin, Int8Linear) or id(lin) in seen:
                continue
            seen.add(id(lin))
            for name in ("qweight_t", "native"):
                weight = getattr(lin, name)
                if weight is not None:  # qweight_t stays a registered buffer: Module.__setattr__ keeps it one
                    setattr(lin, name, torch.from_numpy(arena.copy(weight.numpy())))  # [same shape] int8, same values


def _int8_draft_in_c(draft, draft_vocab: torch.Tensor | None) -> bool:
    """int8: an EAGLE-1/2 draft runs as native-q8 runs it (runtime.native.NativeDraft: Q8_0 blocks, 8-bit
    activations, fc float32 as quantize_int8 keeps it), a whole draft call in one C call instead of ~20 torch ops,
    where this CPU runs native-q8. The draft only proposes: its numerics move the acceptance, never the output."""
    from eagle_trt.kernels.cpu_build import cpu_supports_native
    from eagle_trt.runtime.native import NativeDraft, native_refusal

    if draft.format != "eagle1" or native_refusal(draft.args) or cpu_supports_native(q8=True):
        return False  # (int8 runs on the CPU only: check_precision)
    if draft_vocab is not None:
        truncate_draft_vocab(draft, draft_vocab)
    draft.native = NativeDraft(draft, q8_activations=True, float_fc=True)
    draft.layer = draft.lm_head = None  # float32 on torch, ~33 MB for SmolLM2's: the C side holds its Q8_0 copy
    return True


def truncate_draft_vocab(draft, token_ids: torch.Tensor) -> None:
    """FR-Spec on an EAGLE-1/2 draft: its head scores only `token_ids` [n] (base ids); `topk` maps back."""
    if draft.format != "eagle1":
        raise EagleTrtError(f"a truncated draft vocabulary applies to EAGLE-1/2 drafts, this one is {draft.format}",
                            "EAGLE-3 drafts carry their own draft vocabulary (d2t); drop --draft-vocab")
    head = draft.lm_head
    ids = token_ids.to(device=head.scale.device if isinstance(head, Int8Linear) else head.weight.device)
    if isinstance(head, Int8Linear):
        draft.lm_head = Int8Linear.from_rows(head, ids)
    else:
        sliced = nn.Linear(head.in_features, ids.numel(), bias=False, device=head.weight.device,
                           dtype=head.weight.dtype)
        sliced.weight = nn.Parameter(head.weight[ids].clone(), requires_grad=False)  # [n, H]
        draft.lm_head = sliced
    draft.vocab_ids = ids  # [n] int64: draft row -> base token id
