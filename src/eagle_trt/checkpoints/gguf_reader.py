"""GGUF (llama.cpp) Llama checkpoints as Hugging Face tensors: names mapped, weights dequantized to float32,
and the Q/K rows un-permuted (llama.cpp's convert_hf_to_gguf.py interleaves the rotary halves: LlamaModel.permute).
Also reads the `llama.*` metadata into a HF-style config dict (`gguf_config`)."""

from __future__ import annotations

import struct
from pathlib import Path

from eagle_trt.checkpoints.weight_reader import WeightReader
from eagle_trt.errors import EagleTrtError, missing_extra

TOP_LEVEL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
IN_LAYER = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def _reader(path: Path):
    """The file's parsed header (checkpoints.gguf_file), or an EagleTrtError naming what is wrong with it."""
    try:
        import gguf  # noqa: F401 - its type tables name the tensors' block types
    except ImportError:
        raise missing_extra("gguf", "gguf") from None
    from eagle_trt.checkpoints.gguf_file import open_gguf

    try:
        return open_gguf(path)
    except (ValueError, struct.error, UnicodeDecodeError, KeyError) as exc:
        raise EagleTrtError(f"{path} is not a readable GGUF file ({type(exc).__name__}: {exc})",
                            "re-download the file") from None


def gguf_config(path: Path) -> dict:
    """A HF LlamaConfig-style dict from the GGUF metadata."""
    r = _reader(path)
    f = r.fields  # key -> value (a string array: its StringArray)
    arch = f.get("general.architecture")
    if arch != "llama":
        raise EagleTrtError(f"{path} holds a {arch!r} model, not llama", "pass a Llama-architecture GGUF")
    heads = f.get("llama.attention.head_count")
    hidden = f.get("llama.embedding_length")
    names = {t.name for t in r.tensors}
    vocab = len(f["tokenizer.ggml.tokens"]) if "tokenizer.ggml.tokens" in f else None
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": f.get("llama.feed_forward_length"),
        "num_hidden_layers": f.get("llama.block_count"), "num_attention_heads": heads,
        "num_key_value_heads": f.get("llama.attention.head_count_kv") or heads,
        "head_dim": hidden // heads, "hidden_act": "silu",
        "max_position_embeddings": f.get("llama.context_length"),
        "rms_norm_eps": f.get("llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": float(f.get("llama.rope.freq_base") or 10000.0), "rope_scaling": None,
        "vocab_size": vocab, "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": f.get("tokenizer.ggml.bos_token_id"), "eos_token_id": f.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": f.get("tokenizer.ggml.padding_token_id"), "torch_dtype": "float32",
        "attention_bias": False, "mlp_bias": False,
    }


def gguf_block_types(path: Path) -> list[str]:
    """The quantized tensor types a GGUF file stores (Q4_1, Q8_0, ...; float tensors left out), sorted."""
    return sorted({t.tensor_type.name for t in _reader(path).tensors} - {"F32", "F16", "BF16", "F64"})


class GGUFWeightReader(WeightReader):
    def __init__(self, path: Path, file: Path):
        super().__init__(path, "gguf")
        self._file = file
        self._r = _reader(file)
        self._heads = self._r.fields.get("llama.attention.head_count")
        self._kv_heads = self._r.fields.get("llama.attention.head_count_kv") or self._heads
        self._tensors = {}
        for t in self._r.tensors:
            name = self._hf_name(t.name)
            self._tensors[name] = t
            self._meta[name] = (tuple(int(x) for x in reversed(t.shape)), "float32")  # GGUF dims are (in, out)

    def _hf_name(self, name: str) -> str:
        if name in TOP_LEVEL:
            return TOP_LEVEL[name]
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in IN_LAYER:
            return f"model.layers.{parts[1]}.{IN_LAYER[parts[2]]}.{parts[3]}"
        raise EagleTrtError(f"{self._file}: unknown GGUF tensor {name!r}", "only Llama GGUF files are supported")

    def get(self, name: str):
        import numpy as np
        import torch
        from gguf.quants import dequantize

        t = self._tensors[self._check(name)]
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(self._meta[name][0])
        if name.endswith("self_attn.q_proj.weight"):
            w = _unpermute(w, self._heads)
        elif name.endswith("self_attn.k_proj.weight"):
            w = _unpermute(w, self._kv_heads)
        return torch.from_numpy(np.ascontiguousarray(w))

    def stored_blocks(self, name: str):
        """(GGUF type name, the tensor's rows as stored [out, bytes per row] uint8) for a block-quantized tensor,
        Q/K rows un-permuted like `get`; None for a float tensor."""
        t = self._tensors[self._check(name)]
        if t.tensor_type.name in ("F32", "F16", "BF16", "F64"):
            return None
        rows = t.data.reshape(self._meta[name][0][0], -1)  # [out, bytes]
        if name.endswith("self_attn.q_proj.weight"):
            rows = _unpermute(rows, self._heads)
        elif name.endswith("self_attn.k_proj.weight"):
            rows = _unpermute(rows, self._kv_heads)
        return t.tensor_type.name, rows


def _unpermute(w, n_head: int):
    """Undo llama.cpp's permute() of Q/K rows: (n_head, 2, d/2) interleave back to HF's rotate-half order."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)
