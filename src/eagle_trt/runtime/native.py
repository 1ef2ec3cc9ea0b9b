"""Precision `native`: the base model's whole forward in one C call (kernels/cpu_forward.c), its linears reading the
weights as the checkpoint stores them: a GGUF base's Q4_0 / Q4_1 / Q8_0 blocks as they lie in the file (other GGUF
types and every float checkpoint: float32 rows).

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

# GGUF block types the kernel reads as they are stored (cpu_forward.c's W_*); float32 rows are type 0
BLOCK_TYPES = {"Q4_0": 1, "Q4_1": 2, "Q8_0": 3}
W_F32 = 0
W_X4, W_X8 = 4, 5  # native-q8's repacked 4-bit and 8-bit units (cpu_linear_q8.h)
QK = 32  # weights per block


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
                ("start", ctypes.c_int32), ("rows", ctypes.c_int32), ("mask", ctypes.c_void_p)]


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


class NativeForward:
    """The C model: ctypes structs pointing at tensors (blocks or float32 rows) this object keeps alive."""

    def __init__(self, model, blocks: dict[str, tuple[str, np.ndarray]], q8_activations: bool = False):
        self.lib = load_cpu_forward()
        self.q8_activations = q8_activations
        self.keep: list = []  # every buffer a C pointer refers to
        a = model.args
        self.layers = (CLayer * a.num_hidden_layers)()
        for i, layer in enumerate(model.layers):
            for field, path in LAYER_LINEARS.items():
                module = layer.get_submodule(path)
                setattr(self.layers[i], field, self._linear(module, blocks.get(f"model.layers.{i}.{path}.weight")))
            self.layers[i].input_norm = self._floats(layer.input_layernorm.weight)
            self.layers[i].post_norm = self._floats(layer.post_attention_layernorm.weight)
        head_name = "model.embed_tokens.weight" if a.tie_word_embeddings else "lm_head.weight"
        self.model = CModel(a.num_hidden_layers, a.hidden_size, a.intermediate_size, a.num_attention_heads,
                            a.num_key_value_heads, a.head_dim, a.vocab_size, a.rms_norm_eps, self.layers,
                            self._floats(model.norm.weight), self._linear(model.lm_head, blocks.get(head_name)))
        self.block_types = sorted({name for name, _ in blocks.values()})

    def _floats(self, tensor: torch.Tensor) -> int:
        t = tensor.detach().float().contiguous()
        self.keep.append(t)
        return t.data_ptr()

    def _linear(self, module, stored: tuple[str, np.ndarray] | None) -> CLinear:
        rows, cols = module.weight.shape
        bias = None if module.bias is None else self._floats(module.bias)
        if stored is not None and stored[0] in BLOCK_TYPES:
            data = np.ascontiguousarray(stored[1])  # [rows, cols / 32 blocks] as bytes
            linear = CLinear(BLOCK_TYPES[stored[0]], rows, cols, data.ctypes.data, bias)
            if self.q8_activations and (repacked := self._repack(linear)) is not None:
                return repacked
            self.keep.append(data)
            return linear
        return CLinear(W_F32, rows, cols, self._floats(module.weight), bias)

    def _repack(self, linear: CLinear) -> CLinear | None:
        """The block linear repacked for 8-bit activations (cpu_linear_q8.h: 16 output rows per 64-byte vector),
        or None where the kernel cannot take it (rows not a multiple of 16): it then runs on float32 activations."""
        size = self.lib.ef_repacked_bytes(linear.type, linear.rows, linear.cols)
        if size <= 0:
            return None
        data = np.empty(size, np.uint8)  # [units of 16 rows x 32 inputs]
        kind = self.lib.ef_repack(ctypes.byref(linear), ctypes.c_void_p(data.ctypes.data))
        if kind < 0:
            return None
        self.keep.append(data)
        return CLinear(kind, linear.rows, linear.cols, data.ctypes.data, linear.bias)

    def _call(self, t, x, cos, sin, segs, capture, cap, captured, hidden, n_logit, picked, logits, scratch) -> int:
        return self.lib.ef_forward(ctypes.byref(self.model), t, ctypes.c_void_p(x.data_ptr()),
                                   ctypes.c_void_p(cos.data_ptr()), ctypes.c_void_p(sin.data_ptr()), len(segs), segs,
                                   len(capture), cap,
                                   None if captured is None else ctypes.c_void_p(captured.data_ptr()),
                                   ctypes.c_void_p(hidden.data_ptr()), n_logit, picked,
                                   ctypes.c_void_p(logits.data_ptr()), ctypes.c_void_p(scratch.data_ptr()))

    def weight_bytes(self) -> int:
        return sum(x.nbytes if isinstance(x, np.ndarray) else x.numel() * x.element_size() for x in self.keep)

    def forward_packed(self, model, calls, capture: tuple[int, ...]) -> list[tuple]:
        """Llama.forward_packed's contract: one (logits [T, V] ([1, V] for a call with last_logits_only), hidden
        [T, H], captured [T, n*H] or None) per call."""
        ids = torch.cat([c.input_ids for c in calls]) if len(calls) > 1 else calls[0].input_ids  # [sum T]
        positions = torch.cat([c.positions for c in calls]) if len(calls) > 1 else calls[0].positions  # [sum T]
        a = model.args
        t = ids.shape[0]
        x = model.embed_tokens(ids).float().contiguous()  # [T, H], the residual stream
        cos, sin = (c.reshape(t, a.head_dim).float().contiguous() for c in model.rope(positions))  # [T, D] each
        segs = (CSegment * len(calls))()
        masks = []  # the mask tensors the C call reads: alive until it returns
        max_len = 0
        for i, c in enumerate(calls):
            cache = c.cache or model.cache
            if cache.k.dtype != torch.float32 or not cache.k.is_contiguous():
                raise EagleTrtError("the native forward needs a contiguous float32 KV cache",
                                    "make caches with Llama.new_cache")
            rows = c.input_ids.shape[0]
            mask = None
            if c.tree_mask is not None:
                mask = c.tree_mask.to(torch.uint8).contiguous()  # [rows, rows]
            elif rows > 1:
                mask = torch.ones(rows, rows, dtype=torch.uint8).tril_()  # [rows, rows] causal
            masks.append(mask)
            segs[i] = CSegment(cache.k.data_ptr(), cache.v.data_ptr(), cache.max_len, c.start, rows,
                               None if mask is None else mask.data_ptr())
            max_len = max(max_len, cache.max_len)
        threads = self.lib.ef_threads()
        scratch = torch.empty(self.lib.ef_scratch_floats(ctypes.byref(self.model), t, max_len, threads))
        logit_rows, row = [], 0  # rows whose logits are asked for (a prefill: its last)
        for c in calls:
            n = c.input_ids.shape[0]
            logit_rows += [row + n - 1] if c.last_logits_only else list(range(row, row + n))
            row += n
        n_logit = -1 if len(logit_rows) == t else len(logit_rows)
        picked = (ctypes.c_int32 * max(1, len(logit_rows)))(*logit_rows)
        logits = torch.empty(len(logit_rows), a.vocab_size)  # [rows asked for, V]
        hidden = torch.empty(t, a.hidden_size)  # [T, H]
        captured = torch.empty(t, len(capture) * a.hidden_size) if capture else None  # [T, n*H]
        cap = (ctypes.c_int32 * max(1, len(capture)))(*capture)
        with torch.profiler.record_function("native_forward"):  # one op in a torch.profiler table
            rc = self._call(t, x, cos, sin, segs, capture, cap, captured, hidden, n_logit, picked, logits, scratch)
        if rc != 0:
            raise EagleTrtError("the native forward rejected the model's shapes", NATIVE_HINT)
        out, row, logit_row = [], 0, 0
        for c in calls:
            n = c.input_ids.shape[0]
            k = 1 if c.last_logits_only else n
            rows = slice(row, row + n)
            out.append((logits[logit_row:logit_row + k], hidden[rows], None if captured is None else captured[rows]))
            row, logit_row = row + n, logit_row + k
        return out


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
