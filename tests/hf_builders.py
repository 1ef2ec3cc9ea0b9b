"""Tiny random bases of every supported family, built by Hugging Face transformers' own classes and saved with
`save_pretrained` (so key names, config keys and their layout are exactly what transformers writes), plus the same
tokenizer as builders.make_base. Weights are re-drawn with a gain that makes logits peaked (no greedy near-ties).

The variants are the layouts people deploy: Llama-3.1 written by transformers >= 5 (`rope_parameters`) and by
transformers 4 (`rope_theta` + `rope_scaling`), Mistral v0.1 (a sliding window shorter than the test's context) and
v0.3 (no window), Qwen2 (q/k/v biases), Qwen2 with its sliding window on the upper layers, Qwen2.5 (tied; YaRN
RoPE as its long-context configs set it), Qwen3
(q/k RMSNorm, head_dim != hidden / heads) tied and untied.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

import builders

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "bos_token_id": 1,
        "eos_token_id": 2, "pad_token_id": 2}
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}

# name -> (transformers config class, its keyword arguments beyond TINY)
VARIANTS = {
    "llama31": ("LlamaConfig", {"rope_parameters": {"rope_theta": 500000.0, **LLAMA3_ROPE}}),
    "llama31_tf4": ("LlamaConfig", {"rope_parameters": {"rope_theta": 500000.0, **LLAMA3_ROPE}}),
    "llama_bias": ("LlamaConfig", {"attention_bias": True, "mlp_bias": True}),
    "mistral_v01": ("MistralConfig", {"sliding_window": 24}),
    "mistral_v03": ("MistralConfig", {"sliding_window": None, "rope_parameters": {"rope_theta": 1000000.0,
                                                                                  "rope_type": "default"}}),
    "qwen2": ("Qwen2Config", {}),
    "qwen2_window": ("Qwen2Config", {"use_sliding_window": True, "sliding_window": 20, "max_window_layers": 1}),
    "qwen25_tied": ("Qwen2Config", {"tie_word_embeddings": True}),
    "qwen25_yarn": ("Qwen2Config", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1000000.0,
                                                        "original_max_position_embeddings": 128}}),
    "qwen3": ("Qwen3Config", {"head_dim": 32}),
    "qwen3_tied": ("Qwen3Config", {"head_dim": 24, "tie_word_embeddings": True, "attention_bias": True}),
}


def make_hf_base(out: Path, variant: str, seed: int = 0, dims: dict | None = None) -> Path:
    """Save a tiny random `variant` (VARIANTS) with transformers' save_pretrained, and a tokenizer beside it;
    `dims`: other sizes than TINY's."""
    import transformers

    out.mkdir(parents=True, exist_ok=True)
    vocab = builders.make_tokenizer(out)
    cls_name, extra = VARIANTS[variant]
    config = getattr(transformers, cls_name)(vocab_size=vocab, **(dims or TINY), **extra)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                gain = 4.0 if name == "lm_head.weight" else 1.0
                p.copy_(torch.randn(p.shape, generator=gen) * (gain / math.sqrt(p.shape[1])))
    model.save_pretrained(out, safe_serialization=True)
    if variant == "llama31_tf4":  # the same model as transformers 4 wrote its config: rope_theta + rope_scaling
        cfg = json.loads((out / "config.json").read_text())
        rope = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rope.pop("rope_theta")
        cfg["rope_scaling"] = rope
        (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def hf_greedy(base: Path, prompt: list[int], new_tokens: int) -> list[int]:
    """transformers' own greedy continuation of `prompt`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                         do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def hf_logits(base: Path, ids: list[int]) -> torch.Tensor:
    """[T, V] transformers' logits over one sequence."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()
