"""Precision `native`: the base model's whole forward in one C call (kernels/cpu_forward.c), its linears reading the
weights as the checkpoint stores them: a GGUF base's Q4_0 / Q4_1 / Q8_0 blocks as they lie in the file, a 4-bit
AWQ / GPTQ / compressed-tensors / Model-Optimizer INT4 base's linears as the same Q4_0 / Q4_1 blocks
(quantization.blocks), other weights as float32 rows; under `native-q8` (8-bit activations) those float weights are
quantized to Q8_0 blocks as the draft's are.

Why: a torch decode step of a small model is 30 layers x a dozen Python-dispatched ops, and int8 copies of 4-bit
weights read twice the bytes the file holds. Here a step is one call; a block is dequantized in registers to the
float32 the dequantized reference holds and multiplied by float32 activations, so a native linear computes what the
dequantized weights compute (up to the order of the float32 sums), and every row's sums and attention run in one
fixed order whatever rows run beside it: EAGLE's output equals this engine's plain decoding exactly.

`attach_native(model, blocks)` gives a loaded `Llama` a `NativeForward`; `Llama.forward_packed` then runs it. The
torch weights the C side does not read are dropped.
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from eagle_trt.errors import EagleTrtError
from eagle_trt.kernels.cpu_build import NATIVE_HINT, load_cpu_forward
from eagle_trt.quantization.blocks import QK
from eagle_trt.runtime.model import logit_rows
from eagle_trt.runtime.weight_memory import WeightArena

# GGUF block types the kernel reads as they are stored (cpu_forward.c's W_*); float32 rows are type 0
BLOCK_TYPES = {"Q4_0": 1, "Q4_1": 2, "Q8_0": 3}
W_F32 = 0
W_X4, W_X8 = 4, 5  # native-q8's repacked 4-bit and 8-bit units (cpu_linear_q8.h)
KEPT_SCRATCH_FLOATS = 1 << 20  # scratch up to this size (a decode or verify step's) is reused between calls


class CLinear(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int32), ("rows", ctypes.c_int32), ("cols", ctypes.c_int32),
                ("data", ctypes.c_void_p), ("bias", ctypes.c_void_p)]


class CLayer(ctypes.Structure):
    _fields_ = [(name, CLinear) for name in ("q", "k", "v", "o", "gate", "up", "down")] + [
        ("input_norm", ctypes.c_void_p), ("post_norm", ctypes.c_void_p)]


class CModel(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int32) for name in
                ("n_layers", "hidden", "inter", "heads", "kv_heads", "head_dim", "vocab")] + [
        ("eps", ctypes.c_float), ("layers", ctypes.POINTER(CLayer)), ("final_norm", ctypes.c_void_p),
        ("lm_head", CLinear)]


class CSegment(ctypes.Structure):
    _fields_ = [("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("max_len", ctypes.c_int32),
                ("start", ctypes.c_int32), ("rows", ctypes.c_int32), ("mask_cols", ctypes.c_int32),
                ("mask", ctypes.c_void_p), ("half", ctypes.c_int32)]


# our module path of each C linear, per layer, and its HF checkpoint name
LAYER_LINEARS = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
                 "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def native_refusal(args) -> str | None:
    """Why the native forward cannot run a model of these LlamaArgs (None: it can)."""
    if args.sliding_window and args.sliding_layers:
        return "sliding-window attention layers"
    if args.qk_norm:
        return "q/k RMSNorm (Qwen3)"
    if args.head_dim % 16 or args.head_dim > 128:
        return f"head_dim {args.head_dim} (the kernel takes multiples of 16 up to 128)"
    if args.hidden_size % QK or args.intermediate_size % QK:
        return f"hidden {args.hidden_size} / intermediate {args.intermediate_size} not multiples of {QK}"
    return None


def q8_0_blocks(weight: torch.Tensor) -> np.ndarray:
    """A float weight [rows, cols] as GGUF Q8_0 blocks [rows, cols / 32 * 34 bytes] (fp16 d = max|w| / 127, then
    32 int8 round(w / d)), ggml's quantizer: how native-q8 stores a float draft's linears."""
    w = weight.detach().float().numpy()
    rows, cols = w.shape
    b = w.reshape(rows, cols // QK, QK)  # [rows, blocks, 32]
    d = np.abs(b).max(-1, keepdims=True) / 127.0  # [rows, blocks, 1]
    q = np.round(b / np.where(d == 0, 1.0, d)).clip(-127, 127).astype(np.int8)  # [rows, blocks, 32]
    out = np.empty((rows, cols // QK, 2 + QK), np.uint8)  # [rows, blocks, 34]
    out[..., :2] = d.astype(np.float16).view(np.uint8)
    out[..., 2:] = q.view(np.uint8)
    return out.reshape(rows, -1)


class NativeWeights:
    """ctypes structs pointing at buffers (blocks or float32 rows) this object keeps alive."""

    def __init__(self, q8_activations: bool):
        load_cpu_forward(True), load_cpu_forward(False)  # both built (and checked) at load, not mid-request
        self.q8_activations = q8_activations
        # native-q8 keeps K/V in float16 (half the bytes a long context's step reads; llama.cpp's default cache),
        # native in float32: what the dequantized reference computes
        self.cache_dtype = torch.float16 if q8_activations else torch.float32
        self.keep: list = []  # every buffer a C pointer refers to
        self.arena = WeightArena()  # the weights a step streams through, in huge pages (runtime.weight_memory)
        self.scratch: torch.Tensor | None = None

    @property
    def lib(self):
        """The kernel build for this call: without OpenMP on one thread (the same bits; +2 % to +20 % a round there,
        docs/native_cpu.md)."""
        return load_cpu_forward(torch.get_num_threads() > 1)

    def _floats(self, tensor: torch.Tensor | None) -> int | None:
        if tensor is None:
            return None
        t = self.arena.copy(tensor.detach().float().contiguous().numpy())  # [same shape] float32
        self.keep.append(t)
        return t.ctypes.data

    def _linear(self, module, stored: tuple[str, np.ndarray] | None) -> CLinear:
        rows, cols = module.weight.shape
        bias = self._floats(module.bias)
        if stored is not None and stored[0] in BLOCK_TYPES:
            data = np.ascontiguousarray(stored[1])  # [rows, cols / 32 blocks] as bytes
            linear = CLinear(BLOCK_TYPES[stored[0]], rows, cols, data.ctypes.data, bias)
            if self.q8_activations and (repacked := self._repack(linear)) is not None:
                return repacked
            data = self.arena.copy(data)
            self.keep.append(data)
            return CLinear(BLOCK_TYPES[stored[0]], rows, cols, data.ctypes.data, bias)
        return CLinear(W_F32, rows, cols, self._floats(module.weight), bias)

    def _weights(self, module) -> CLinear:
        """A float linear as native-q8 reads it, Q8_0 blocks (ggml's quantizer; integer dot products like every
        other linear there), or float32 rows (native: what the weights compute)."""
        if not self.q8_activations or module.weight.shape[1] % QK:
            return self._linear(module, None)
        return self._linear(module, ("Q8_0", q8_0_blocks(module.weight)))

    def _repack(self, linear: CLinear) -> CLinear | None:
        """The block linear repacked for 8-bit activations (cpu_linear_q8.h: 16 output rows per 64-byte vector),
        or None where the kernel cannot take it (rows not a multiple of 16): it then runs on float32 activations."""
        size = self.lib.ef_repacked_bytes(linear.type, linear.rows, linear.cols)
        if size <= 0:
            return None
        data = self.arena.empty(size)  # [units of 16 rows x 32 inputs] as bytes
        kind = self.lib.ef_repack(ctypes.byref(linear), ctypes.c_void_p(data.ctypes.data))
        if kind < 0:
            return None
        self.keep.append(data)
        return CLinear(kind, linear.rows, linear.cols, data.ctypes.data, linear.bias)

    def weight_bytes(self) -> int:
        return sum(x.nbytes if isinstance(x, np.ndarray) else x.numel() * x.element_size() for x in self.keep)

    def _segments(self, parts: list[tuple]) -> tuple:
        """(CSegment array, the mask tensors it points at) for (cache, start, rows, mask, whole) per sequence: mask
        [rows, rows] (whole False: over the block, the prefix all visible) or [rows, start + rows] bool, or None
        (the prefix all visible, causal over the block)."""
        segs = (CSegment * len(parts))()
        masks = []  # alive until the C call returns
        for i, (cache, start, rows, mask, whole) in enumerate(parts):
            if cache.k.dtype != self.cache_dtype or not cache.k.is_contiguous():
                raise EagleTrtError(f"the native forward needs a contiguous {self.cache_dtype} KV cache, got "
                                    f"{cache.k.dtype}", "make caches with Llama.new_cache / DraftHead.new_cache")
            mask = None if mask is None else mask.to(torch.uint8).contiguous()
            masks.append(mask)
            segs[i] = CSegment(cache.k.data_ptr(), cache.v.data_ptr(), cache.max_len, start, rows,
                               start + rows if whole else rows, None if mask is None else mask.data_ptr(),
                               int(cache.k.dtype == torch.float16))
        return segs, masks

    def _scratch(self, t: int, segs) -> torch.Tensor:
        """The C forward's working memory for t rows: a step's kept between calls (one caller at a time, the
        decoder's), a prompt's (up to 85 MB at 4k tokens on SmolLM2) freed after it."""
        max_len = max(s.max_len for s in segs)
        need = self.lib.ef_scratch_floats(ctypes.byref(self.model), t, max_len, self.lib.ef_threads())
        if need > KEPT_SCRATCH_FLOATS:
            return torch.empty(need)  # [floats]
        if self.scratch is None or self.scratch.numel() < need:
            self.scratch = torch.empty(need)  # [floats]
        return self.scratch

    def _call(self, t, x, cos, sin, segs, capture, cap, captured, hidden, n_logit, picked, logits, scratch) -> int:
        """ef_forward over this model; captured and logits may be None (none asked for)."""
        def ptr(tensor):
            return None if tensor is None else ctypes.c_void_p(tensor.data_ptr())

        rc = self.lib.ef_forward(ctypes.byref(self.model), t, ptr(x), ptr(cos), ptr(sin), len(segs), segs,
                                 len(capture), cap, ptr(captured), ptr(hidden), n_logit, picked, ptr(logits),
                                 ptr(scratch))
        return rc

    @staticmethod
    def _check(rc: int, t: int, what: str) -> None:
        """The C forward's return code as an EagleTrtError (0: nothing); `what` names the model ("model", "draft")."""
        if rc == -2:
            raise EagleTrtError(f"the native {what} forward could not allocate the working buffers of {t} rows",
                                "free memory on this machine, or send shorter prompts")
        if rc == -3:
            raise EagleTrtError(f"a {what} call's token id or position is outside the {what}'s embedding or RoPE table",
                                "send token ids of the base's vocabulary and requests within the engine's max_seq_len")
        if rc != 0:
            raise EagleTrtError(f"the native forward rejected the {what}'s shapes", NATIVE_HINT)


class NativeForward(NativeWeights):
    """The base model in C."""

    def __init__(self, model, blocks: dict[str, tuple[str, np.ndarray]], q8_activations: bool = False):
        super().__init__(q8_activations)
        a = model.args
        self.layers = (CLayer * a.num_hidden_layers)()
        for i, layer in enumerate(model.layers):
            for field, path in LAYER_LINEARS.items():
                module = layer.get_submodule(path)
                setattr(self.layers[i], field, self._stored(module, blocks.get(f"model.layers.{i}.{path}.weight")))
            self.layers[i].input_norm = self._floats(layer.input_layernorm.weight)
            self.layers[i].post_norm = self._floats(layer.post_attention_layernorm.weight)
        head_name = "model.embed_tokens.weight" if a.tie_word_embeddings else "lm_head.weight"
        self.model = CModel(a.num_hidden_layers, a.hidden_size, a.intermediate_size, a.num_attention_heads,
                            a.num_key_value_heads, a.head_dim, a.vocab_size, a.rms_norm_eps, self.layers,
                            self._floats(model.norm.weight), self._stored(model.lm_head, blocks.get(head_name)))
        self.block_types = sorted({name for name, _ in blocks.values()})  # the checkpoint's (stored) block types

    def _stored(self, module, stored: tuple[str, np.ndarray] | None) -> CLinear:
        """A linear from the blocks the checkpoint stores, else from its float weight (`_weights`)."""
        return self._linear(module, stored) if stored is not None else self._weights(module)

    def forward_packed(self, model, calls, capture: tuple[int, ...]) -> list[tuple]:
        """Llama.forward_packed's contract: one (logits [T, V] ([1, V] for a call with last_logits_only), hidden
        [T, H], captured [T, n*H] or None) per call."""
        ids = torch.cat([c.input_ids for c in calls]) if len(calls) > 1 else calls[0].input_ids  # [sum T]
        positions = torch.cat([c.positions for c in calls]) if len(calls) > 1 else calls[0].positions  # [sum T]
        a = model.args
        t = ids.shape[0]
        x = model.embed_tokens(ids).float().contiguous()  # [T, H], the residual stream
        cos, sin = (c.reshape(t, a.head_dim).float().contiguous() for c in model.rope(positions))  # [T, D] each
        parts = []
        for c in calls:
            rows = c.input_ids.shape[0]
            parts.append((c.cache or model.cache, c.start, rows, c.tree_mask, False))  # mask None: causal
        segs, _masks = self._segments(parts)
        scratch = self._scratch(t, segs)
        rows_asked = logit_rows(calls)  # None: every row (no call is a prefill)
        n_logit = -1 if rows_asked is None else len(rows_asked)
        picked = (ctypes.c_int32 * max(1, n_logit))(*(rows_asked or ()))
        logits = torch.empty(t if rows_asked is None else n_logit, a.vocab_size)  # [rows asked for, V]
        hidden = torch.empty(t, a.hidden_size)  # [T, H]
        captured = torch.empty(t, len(capture) * a.hidden_size) if capture else None  # [T, n*H]
        cap = (ctypes.c_int32 * max(1, len(capture)))(*capture)
        if torch.autograd._profiler_enabled():  # one op in a torch.profiler table (entering one costs 0.1 ms)
            with torch.profiler.record_function("native_forward"):
                rc = self._call(t, x, cos, sin, segs, capture, cap, captured, hidden, n_logit, picked, logits, scratch)
        else:
            rc = self._call(t, x, cos, sin, segs, capture, cap, captured, hidden, n_logit, picked, logits, scratch)
        self._check(rc, t, "model")
        out, row, logit_row = [], 0, 0
        for c in calls:
            n = c.input_ids.shape[0]
            k = 1 if c.last_logits_only else n
            rows = slice(row, row + n)
            out.append((logits[logit_row:logit_row + k], hidden[rows], None if captured is None else captured[rows]))
            row, logit_row = row + n, logit_row + k
        return out


class NativeDraft(NativeWeights):
    """An EAGLE-1/2 draft head in C: fc, its one decoder layer (no input norm) and its head (truncated to the draft
    vocabulary when it is). Its float weights are quantized to Q8_0 blocks for native-q8 (the draft only proposes:
    its numerics set the acceptance rate, never the output), kept float32 for native. `forward_packed` runs a whole
    draft call (embedding, fc, layer, head top-k) in one C call; `rows` and `topk` are its parts."""

    def __init__(self, draft, q8_activations: bool, float_fc: bool = False):
        super().__init__(q8_activations)
        a = draft.args
        self.fc = self._linear(draft.fc, None) if float_fc else self._weights(draft.fc)
        layer = CLayer()
        for field, path in LAYER_LINEARS.items():
            setattr(layer, field, self._weights(draft.layer.get_submodule(path)))
        layer.input_norm, layer.post_norm = None, self._floats(draft.layer.post_attention_layernorm.weight)
        self.layers = (CLayer * 1)(layer)
        self.head = self._weights(draft.lm_head)
        self.model = CModel(1, a.hidden_size, a.intermediate_size, a.num_attention_heads, a.num_key_value_heads,
                            a.head_dim, self.head.rows, a.rms_norm_eps, self.layers, None, self.head)
        self.embed, self.head_dim = draft.embed_tokens, a.head_dim
        self.table = draft.embed_tokens.weight.detach().float().contiguous()  # [V, H] the base's (shared) embedding
        if self.table.data_ptr() != draft.embed_tokens.weight.data_ptr():
            self.keep.append(self.table)

    def forward_packed(self, head, calls) -> list[tuple]:
        """DraftHead.forward_packed in one C call (kernels/cpu_draft.h): per call (out [T_i, H] ([1, H] with
        last_only), log-probs [rows, top_k] and base token ids [rows, top_k] of the k best next tokens, or None, None
        for a call without top_k). The same bits as `rows` and `topk` one by one."""
        n = len(calls)
        ids = calls[0].input_ids if n == 1 else torch.cat([c.input_ids for c in calls])  # [T]
        feats = calls[0].features if n == 1 else torch.cat([c.features for c in calls])  # [T, H]
        positions = calls[0].positions if n == 1 else torch.cat([c.positions for c in calls])  # [T]
        ids, positions = ids.to(torch.int64).contiguous(), positions.to(torch.int64).contiguous()
        feats = feats.float().contiguous()
        t, h = feats.shape
        segs, _masks = self._segments([(c.cache if c.cache is not None else head.cache, c.start,
                                       c.input_ids.shape[0], c.mask, True) for c in calls])
        top_rows, row = [], 0  # the output rows whose top-k a call asks for
        for c in calls:
            rows = c.input_ids.shape[0]
            if c.top_k > 0:
                top_rows += [row + rows - 1] if c.last_only else list(range(row, row + rows))
            row += rows
        k = max((c.top_k for c in calls), default=0)
        out = torch.empty(t, h)  # [T, H]
        scores = torch.empty(len(top_rows), max(k, 1))  # [rows asked for, k]
        best = torch.empty(len(top_rows), max(k, 1), dtype=torch.int64)  # [rows asked for, k]
        picked = (ctypes.c_int32 * max(1, len(top_rows)))(*top_rows)
        vocab = None if head.vocab_ids is None else head.vocab_ids.contiguous()  # [V_draft] int64 base ids
        cos, sin = head.rope.cos, head.rope.sin  # [max_len, D] float32 each
        scratch = self._scratch(t, segs)  # held here: a prompt's is freed when the last reference goes
        rc = self.lib.ef_draft(ctypes.byref(self.model), ctypes.byref(self.fc), ctypes.c_void_p(self.table.data_ptr()),
                               self.table.shape[0], ctypes.c_void_p(cos.data_ptr()), ctypes.c_void_p(sin.data_ptr()),
                               cos.shape[0], t, ctypes.c_void_p(ids.data_ptr()), ctypes.c_void_p(feats.data_ptr()),
                               ctypes.c_void_p(positions.data_ptr()), len(segs), segs, ctypes.c_void_p(out.data_ptr()),
                               len(top_rows), picked, k, None if vocab is None else ctypes.c_void_p(vocab.data_ptr()),
                               ctypes.c_void_p(best.data_ptr()), ctypes.c_void_p(scores.data_ptr()),
                               ctypes.c_void_p(scratch.data_ptr()))
        self._check(rc, t, "draft")
        answers, row, top = [], 0, 0
        for c in calls:
            rows = c.input_ids.shape[0]
            o = out[row + rows - 1:row + rows] if c.last_only else out[row:row + rows]
            if c.top_k > 0:
                m = o.shape[0]
                answers.append((o, scores[top:top + m, :c.top_k], best[top:top + m, :c.top_k]))
                top += m
            else:
                answers.append((o, None, None))
            row += rows
        return answers

    def rows(self, input_ids, features, cos, sin, segments) -> torch.Tensor:
        """DraftHead.rows: the layer's output [sum T, H] for input_ids [sum T], features [sum T, H]."""
        t, h = features.shape
        x_in = torch.cat((self.embed(input_ids), features), dim=-1).float().contiguous()  # [T, 2H]
        x = torch.empty(t, h)  # [T, H] fc's output, the residual stream
        self.lib.ef_linear(ctypes.byref(self.fc), t, ctypes.c_void_p(x_in.data_ptr()), ctypes.c_void_p(x.data_ptr()))
        cos, sin = (c.reshape(t, self.head_dim).float().contiguous() for c in (cos, sin))  # [T, D] each
        segs, _masks = self._segments([(s.cache, s.start, s.rows, s.mask, True) for s in segments])
        out = torch.empty(t, h)  # [T, H]
        self._check(self._call(t, x, cos, sin, segs, (), None, None, out, 0, None, None, self._scratch(t, segs)), t,
                    "draft")
        return out

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """The draft head's logits [rows, V_draft] of draft outputs [rows, H]."""
        x = out.float().contiguous()
        y = torch.empty(x.shape[0], self.head.rows)  # [rows, V_draft]
        self.lib.ef_linear(ctypes.byref(self.head), x.shape[0], ctypes.c_void_p(x.data_ptr()),
                           ctypes.c_void_p(y.data_ptr()))
        return y

    def topk(self, out: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probs [rows, k], head rows [rows, k] int64) of the k best next tokens of draft outputs [rows, H]:
        the head, its log-softmax and the selection in one C call (equal logits: the lower row first)."""
        x = out.float().contiguous()
        n = x.shape[0]
        logits = torch.empty(n, self.head.rows)  # [rows, V_draft]
        ids = torch.empty(n, k, dtype=torch.int32)  # [rows, k]
        scores = torch.empty(n, k)  # [rows, k]
        self.lib.ef_head_topk(ctypes.byref(self.head), n, ctypes.c_void_p(x.data_ptr()), k,
                              ctypes.c_void_p(logits.data_ptr()), ctypes.c_void_p(ids.data_ptr()),
                              ctypes.c_void_p(scores.data_ptr()))
        return scores, ids.long()


def attach_native_draft(draft, q8_activations: bool, float_fc: bool = False) -> bool:
    """Run an EAGLE-1/2 draft (vocabulary already truncated) through the C forward; False for a draft it does not
    take (EAGLE-3's wider midlayer), which stays on torch. `float_fc`: its fc stays float32 under 8-bit
    activations (linears.quantize_int8 says why)."""
    if draft.format != "eagle1" or native_refusal(draft.args):
        return False
    draft.native = NativeDraft(draft, q8_activations, float_fc)
    return True


def attach_native(model, blocks: dict[str, tuple[str, np.ndarray]], q8_activations: bool = False) -> NativeForward:
    """Run `model` (a loaded runtime Llama, unfused) through the native forward; `blocks`: HF weight name ->
    (GGUF type name, raw block rows [rows, bytes]) for weights the checkpoint stores as blocks; `q8_activations`
    (precision native-q8): block linears take 8-bit activations (float32 rows keep float32). The layers' torch
    weights are dropped (the C side holds what it reads); embeddings, norms, rope and lm_head stay for the draft."""
    reason = native_refusal(model.args)
    if reason:
        raise EagleTrtError(f"the native CPU forward does not run models with {reason}", NATIVE_HINT)
    native = NativeForward(model, blocks, q8_activations)
    model.native = native
    model.batch_invariant = True
    model.layers = torch.nn.ModuleList()  # the C side holds its own copy of what it reads
    return native
