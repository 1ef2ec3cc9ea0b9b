"""Checkpoint readers: lazy safetensors (single and sharded), .bin through weights_only, GGUF (SmolLM2)."""

import pytest
import torch
from safetensors import safe_open

from eagle_trt.checkpoints import find_weight_files, open_weights


def test_single_safetensors(tiny_base):
    with open_weights(tiny_base) as r:
        assert r.format == "safetensors"
        assert "model.embed_tokens.weight" in r and "lm_head.weight" in r
        assert r.shape("model.layers.0.self_attn.k_proj.weight") == (2 * 16, 64)
        assert r.dtype("model.norm.weight") == "float32"
        with safe_open(str(tiny_base / "model.safetensors"), "pt") as fh:
            assert torch.equal(r.get("model.norm.weight"), fh.get_tensor("model.norm.weight"))


def test_sharded_safetensors(tiny_base_tied):
    fmt, files, index = find_weight_files(tiny_base_tied)
    assert fmt == "safetensors" and len(files) == 2 and index is not None
    with open_weights(tiny_base_tied) as r:
        assert set(r.names()) == set(index)
        assert "lm_head.weight" not in r  # tied
        for name in r.names():
            assert tuple(r.get(name).shape) == r.shape(name)


def test_bin_reader(eagle1_draft_bin, eagle1_draft):
    with open_weights(eagle1_draft_bin) as rb, open_weights(eagle1_draft) as rs:
        assert rb.format == "bin" and set(rb.names()) == set(rs.names())
        assert torch.equal(rb.get("fc.weight"), rs.get("fc.weight"))


@pytest.mark.slow
def test_gguf_reader_matches_transformers():
    """Our GGUF dequantization + Q/K un-permutation gives transformers' weights for SmolLM2."""
    from transformers import AutoModelForCausalLM

    from eagle_trt.checkpoints.gguf_reader import GGUFWeightReader, gguf_config
    from eagle_trt.demo_model import find_smollm2_gguf

    gguf = find_smollm2_gguf()
    cfg = gguf_config(gguf)
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["vocab_size"], cfg["tie_word_embeddings"]) == (30, 576, 9, 3, 49152, True)
    reader = GGUFWeightReader(gguf.parent, gguf)
    assert reader.shape("model.layers.0.self_attn.q_proj.weight") == (576, 576)
    assert reader.shape("model.layers.0.self_attn.k_proj.weight") == (192, 576)
    hf = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    sd = hf.state_dict()
    for name in ("model.layers.3.self_attn.q_proj.weight", "model.layers.3.self_attn.k_proj.weight",
                 "model.layers.3.mlp.down_proj.weight", "model.norm.weight"):
        assert torch.allclose(reader.get(name), sd[name].float(), atol=1e-3), name
