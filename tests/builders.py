"""Tiny random Llama bases, EAGLE drafts and a real BPE tokenizer, built on disk with no downloads.

Used by the test fixtures (conftest.py) and by scripts that need a small model. Weights are random but scaled so
logits are peaked (no near-ties in greedy decoding). Names and layouts follow the Hugging Face Llama checkpoint and
the EAGLE draft formats in docs/eagle_algorithms.md §1.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = """The quick brown fox jumps over the lazy dog. A language model predicts the next token.
Speculative decoding drafts several tokens and verifies them in one forward pass of the base model.
EAGLE drafts at the feature level: it predicts the next hidden state and reuses the base language model head.
def add(a, b):\n    return a + b\nprint(add(2, 3))\nfor i in range(10):\n    print(i * i)
What is the capital of France? The capital of France is Paris. Tell me a story about a robot who learns to paint.
Write a haiku about the sea. Waves fold into foam; the tide keeps its old promise; salt on the cold stones.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Punctuation: , . ; : ! ? ( ) [ ] { } ' " - _ / \\ @ # $ % & *
"""


@dataclass(frozen=True)
class TinyDims:
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 512
    rope_theta: float = 10000.0
    explicit_head_dim: int = 0  # 0: hidden_size // num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.explicit_head_dim or self.hidden_size // self.num_attention_heads


def make_tokenizer(out: Path, vocab_size: int = 384) -> int:
    """Train a byte-level BPE tokenizer with ChatML specials; write the HF tokenizer files. Returns the vocab size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 4, trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>", "model_max_length": 512, "chat_template": CHATML_TEMPLATE,
        "add_bos_token": False, "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>"}
    ))
    return tok.get_vocab_size()


def _linear(gen: torch.Generator, out_features: int, in_features: int, gain: float = 1.0) -> torch.Tensor:
    return torch.randn(out_features, in_features, generator=gen) * (gain / math.sqrt(in_features))


def _norm(gen: torch.Generator, size: int) -> torch.Tensor:
    return 1.0 + 0.1 * torch.randn(size, generator=gen)


def _layer(gen: torch.Generator, prefix: str, dims: TinyDims, attn_in: int | None = None,
           input_norm: bool = True) -> dict[str, torch.Tensor]:
    h, d = dims.hidden_size, dims.head_dim
    attn_in = attn_in or h
    sd = {
        f"{prefix}self_attn.q_proj.weight": _linear(gen, dims.num_attention_heads * d, attn_in),
        f"{prefix}self_attn.k_proj.weight": _linear(gen, dims.num_key_value_heads * d, attn_in),
        f"{prefix}self_attn.v_proj.weight": _linear(gen, dims.num_key_value_heads * d, attn_in),
        f"{prefix}self_attn.o_proj.weight": _linear(gen, h, dims.num_attention_heads * d),
        f"{prefix}mlp.gate_proj.weight": _linear(gen, dims.intermediate_size, h),
        f"{prefix}mlp.up_proj.weight": _linear(gen, dims.intermediate_size, h),
        f"{prefix}mlp.down_proj.weight": _linear(gen, h, dims.intermediate_size),
        f"{prefix}post_attention_layernorm.weight": _norm(gen, h),
    }
    if input_norm:
        sd[f"{prefix}input_layernorm.weight"] = _norm(gen, h)
    return sd


def _llama_config(dims: TinyDims, vocab_size: int, **extra) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": dims.hidden_size, "intermediate_size": dims.intermediate_size,
        "num_hidden_layers": dims.num_hidden_layers, "num_attention_heads": dims.num_attention_heads,
        "num_key_value_heads": dims.num_key_value_heads, "head_dim": dims.head_dim,
        "hidden_act": "silu", "max_position_embeddings": dims.max_position_embeddings,
        "rms_norm_eps": 1e-5, "rope_theta": dims.rope_theta, "rope_scaling": None,
        "vocab_size": vocab_size, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
        "pad_token_id": 2, "attention_bias": False, "mlp_bias": False, **extra,
    }


def make_base(out: Path, dims: TinyDims = TinyDims(), tie_word_embeddings: bool = False, seed: int = 0,
              shards: int = 1) -> Path:
    """A tiny random Llama base with tokenizer, chat template and generation config (safetensors, optionally sharded)."""
    out.mkdir(parents=True, exist_ok=True)
    vocab = make_tokenizer(out)
    gen = torch.Generator().manual_seed(seed)
    sd = {"model.embed_tokens.weight": torch.randn(vocab, dims.hidden_size, generator=gen)}
    for i in range(dims.num_hidden_layers):
        sd.update(_layer(gen, f"model.layers.{i}.", dims))
    sd["model.norm.weight"] = _norm(gen, dims.hidden_size)
    if not tie_word_embeddings:
        sd["lm_head.weight"] = _linear(gen, vocab, dims.hidden_size, gain=4.0)
    config = _llama_config(dims, vocab, tie_word_embeddings=tie_word_embeddings)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}))
    _save(out, sd, shards)
    return out


def _save(out: Path, sd: dict[str, torch.Tensor], shards: int) -> None:
    sd = {k: v.contiguous() for k, v in sd.items()}
    if shards <= 1:
        save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(sd)
    weight_map, total = {}, 0
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: sd[k] for k in part}, str(out / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
        total += sum(sd[k].numel() * sd[k].element_size() for k in part)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _base_embed(base: Path) -> torch.Tensor:
    from safetensors import safe_open

    for f in sorted(base.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            if "model.embed_tokens.weight" in fh.keys():
                return fh.get_tensor("model.embed_tokens.weight")
    raise FileNotFoundError(f"no model.embed_tokens.weight under {base}")


def _draft_dims(base: Path) -> tuple[dict, TinyDims]:
    """The base's config.json and the one-layer dims of a draft for it."""
    base_cfg = json.loads((base / "config.json").read_text())
    theta = base_cfg.get("rope_theta") or (base_cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    return base_cfg, TinyDims(hidden_size=base_cfg["hidden_size"], num_hidden_layers=1,
                              num_attention_heads=base_cfg["num_attention_heads"],
                              num_key_value_heads=base_cfg["num_key_value_heads"],
                              intermediate_size=base_cfg["intermediate_size"], rope_theta=theta,
                              explicit_head_dim=base_cfg.get("head_dim") or 0)


def make_eagle1_draft(out: Path, base: Path, bias: bool = True, with_embed: bool = True, seed: int = 1,
                      fmt: str = "safetensors") -> Path:
    """An EAGLE-1/2 draft (SafeAILab cnets1 layout) for `base`: fc [H,2H] (+bias), one layer without input norm."""
    out.mkdir(parents=True, exist_ok=True)
    base_cfg, dims = _draft_dims(base)
    gen = torch.Generator().manual_seed(seed)
    h = dims.hidden_size
    sd = {"fc.weight": _linear(gen, h, 2 * h)}
    if bias:
        sd["fc.bias"] = 0.01 * torch.randn(h, generator=gen)
    sd.update(_layer(gen, "layers.0.", dims, input_norm=False))
    if with_embed:
        sd["embed_tokens.weight"] = _base_embed(base)
    config = _llama_config(dims, base_cfg["vocab_size"], bias=bias, max_position_embeddings=2048)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if fmt == "bin":
        torch.save({k: v.contiguous() for k, v in sd.items()}, out / "pytorch_model.bin")
    else:
        save_file({k: v.contiguous() for k, v in sd.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def make_eagle3_draft(out: Path, base: Path, draft_vocab_size: int = 200, seed: int = 2) -> Path:
    """An EAGLE-3 draft (SafeAILab cnets layout): fc [H,3H], midlayer with 2H attention input, own norm + lm_head
    over a reduced vocabulary, d2t offsets and the t2d mask."""
    out.mkdir(parents=True, exist_ok=True)
    base_cfg, dims = _draft_dims(base)
    gen = torch.Generator().manual_seed(seed)
    h, vocab = dims.hidden_size, base_cfg["vocab_size"]
    sd = {"fc.weight": _linear(gen, h, 3 * h)}
    sd.update(_layer(gen, "midlayer.", dims, attn_in=2 * h))
    sd["midlayer.hidden_norm.weight"] = _norm(gen, h)
    sd["norm.weight"] = _norm(gen, h)
    sd["lm_head.weight"] = _linear(gen, draft_vocab_size, h, gain=4.0)
    used = torch.sort(torch.randperm(vocab, generator=gen)[:draft_vocab_size]).values
    sd["d2t"] = (used - torch.arange(draft_vocab_size)).to(torch.int64)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[used] = True
    sd["t2d"] = t2d
    config = _llama_config(dims, vocab, draft_vocab_size=draft_vocab_size, max_position_embeddings=2048)
    config["architectures"] = ["LlamaForCausalLMEagle3"]
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v.contiguous() for k, v in sd.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def fixed_build_spec(engine: str, *, backend_version: str = "1.2", base_path: Path = Path("/models/base"),
                     draft_path: Path | None = Path("/models/draft"), **changes):
    """A real BuildSpec with fixed paths and tiny dims, not read from disk, so golden files do not depend on the
    machine (and a renamed BuildSpec field breaks the tests that use it)."""
    import dataclasses

    from eagle_trt.build_spec import BuildSpec, TrtllmSettings
    from eagle_trt.spec import DraftSpec, ModelSpec
    from eagle_trt.tree import Tree
    from eagle_trt.tree_config import TreeConfig, resolve

    dims = TinyDims()
    base = ModelSpec(path=base_path, architecture="LlamaForCausalLM", model_type="llama",
                     num_hidden_layers=dims.num_hidden_layers, hidden_size=dims.hidden_size,
                     num_attention_heads=dims.num_attention_heads, num_key_value_heads=dims.num_key_value_heads,
                     head_dim=dims.head_dim, intermediate_size=dims.intermediate_size, vocab_size=384,
                     rms_norm_eps=1e-6, rope_theta=dims.rope_theta, rope_scaling=None,
                     max_position_embeddings=4096, tie_word_embeddings=False, torch_dtype="float16",
                     bos_token_id=1, eos_token_ids=(2, 7), has_tokenizer=True, has_chat_template=True,
                     weight_format="safetensors")
    draft = None if draft_path is None else DraftSpec(
        path=draft_path, format="eagle1", hidden_size=dims.hidden_size, num_attention_heads=dims.num_attention_heads,
        num_key_value_heads=dims.num_key_value_heads, head_dim=dims.head_dim,
        intermediate_size=dims.intermediate_size, vocab_size=384, draft_vocab_size=None, target_hidden_size=None,
        fc_in_features=2 * dims.hidden_size, has_fc_bias=False, has_embed_tokens=False, rms_norm_eps=1e-6,
        rope_theta=dims.rope_theta, num_hidden_layers=1, weight_format="safetensors")
    static = TreeConfig("static", tree=Tree.from_choices([[0], [1], [0, 0], [0, 1], [0, 0, 0]]))
    tree = {"trtllm": static, "vllm": resolve("chain:3")}.get(engine, resolve("dynamic:5,8,48"))
    spec = BuildSpec(base=base, draft=draft, engine=engine, tree=tree, dtype="float16",
                     max_input_len=1024, max_seq_len=2048,
                     trtllm=TrtllmSettings(max_draft_len=63, num_eagle_layers=3, max_non_leaves_per_layer=10)
                     if engine == "trtllm" else None,
                     backend_version=backend_version if engine in ("trtllm", "llmapi") else None)
    return dataclasses.replace(spec, **changes)


def build_tiny_bundle(tmp_path_factory, name: str, base: Path, draft: Path, *options: str) -> Path:
    """`eagle-trt build` of a pytorch bundle (chain:3, max_seq_len 512 unless `options` say otherwise) in a fresh
    temporary directory; the CLI's exit is asserted."""
    from click.testing import CliRunner

    from eagle_trt.cli import main

    out = tmp_path_factory.mktemp(name) / "bundle"
    result = CliRunner().invoke(main, ["build", "--base", str(base), "--draft", str(draft), "-o", str(out),
                                       "--engine", "pytorch", "--max-seq-len", "512", "--tree", "chain:3", *options])
    assert result.exit_code == 0, result.output
    return out
