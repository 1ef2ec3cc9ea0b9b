"""HF base + EAGLE-1 draft -> TensorRT-LLM EAGLE checkpoint (`EagleForCausalLM`), or the base alone
(`LlamaForCausalLM`, for the comparison engine): config.json + rank{r}.safetensors (docs/trtllm_formats.md §1).

Everything comes from a validated BuildSpec (engine trtllm): dims, dtype, tp size and the EAGLE sizes; nothing
is re-read from the model directories but the tensors themselves.

Tensors are streamed: every rank file's header is computed first, then each tensor is read, sliced for the rank,
cast and appended, so peak memory stays near the largest tensor. Output is written into a temporary sibling and
renamed at the end; an interrupted run (Ctrl-C, SIGTERM) leaves no checkpoint behind.
"""

from __future__ import annotations

import json
import shutil
import signal
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch

from eagle_trt.engines.safetensors_writer import StreamingSafetensorsWriter
from eagle_trt.engines.trtllm_weights import Heads, TensorPlan, layer_plans, padded_vocab, slice_tensor
from eagle_trt.build_spec import BuildSpec
from eagle_trt.checkpoints import open_weights
from eagle_trt.errors import EagleTrtError
from eagle_trt.fsutil import atomic_directory
from eagle_trt.runtime.loading import FLOAT_DTYPES, torch_dtype


def _rotary_scaling(rope_scaling: dict | None) -> dict | None:
    """The base's RoPE scaling as families.read_rope normalised it (from `rope_scaling` or transformers 5's
    `rope_parameters`: factor, low/high_freq_factor, original_max_position_embeddings, ...) plus the "type" key
    TensorRT-LLM's RotaryScalingType reads; None for plain RoPE (TensorRT-LLM <= 1.2 has no "default" type)."""
    if not rope_scaling:
        return None
    return dict(rope_scaling) | {"type": rope_scaling["rope_type"]}


def _common(dtype: str, tp: int, layers: int, heads: int, kv: int, hidden: int, inter: int, vocab: int,
            head_dim: int, max_pos: int, theta: float, scaling, eps: float) -> dict:
    return {
        "dtype": dtype, "logits_dtype": "float32", "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "hidden_size": hidden, "intermediate_size": inter, "vocab_size": vocab,
        "head_dim": head_dim, "head_size": head_dim, "position_embedding_type": "rope_gpt_neox",
        "max_position_embeddings": max_pos, "hidden_act": "silu", "rotary_base": theta,
        "rotary_scaling": scaling, "norm_epsilon": eps,
        "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
        "mapping": {"world_size": tp, "tp_size": tp, "pp_size": 1},
        "use_parallel_embedding": False, "embedding_sharding_dim": 0,
    }


def checkpoint_config(spec: BuildSpec, speculative: bool = True) -> dict:
    """config.json of the EAGLE checkpoint (`speculative` and a draft) or of the base alone."""
    base, draft = spec.base, spec.draft if speculative else None
    scaling = _rotary_scaling(base.rope_scaling)
    cfg = {"architecture": "EagleForCausalLM" if draft is not None else "LlamaForCausalLM"}
    cfg |= _common(spec.dtype, spec.tp_size, base.num_hidden_layers, base.num_attention_heads,
                   base.num_key_value_heads, base.hidden_size, base.intermediate_size, base.vocab_size, base.head_dim,
                   base.max_position_embeddings, base.rope_theta, scaling, base.rms_norm_eps)
    if draft is None:
        return cfg
    cfg |= spec.trtllm.engine_sizes()  # max_draft_len, num_eagle_layers, max_non_leaves_per_layer
    # rope settings come from the base and are reused for the EagleNets (convert_checkpoint.py)
    cfg["eagle_net_config"] = {"architecture": "LlamaForCausalLM"} | _common(
        spec.dtype, spec.tp_size, 1, draft.num_attention_heads, draft.num_key_value_heads, draft.hidden_size,
        draft.intermediate_size, draft.vocab_size, draft.head_dim, draft.max_position_embeddings, base.rope_theta,
        scaling, draft.rms_norm_eps)
    return cfg


def tensor_plans(spec: BuildSpec, speculative: bool, base_names: set[str]) -> list[TensorPlan]:
    """Every tensor of one rank, with its sources ('base:NAME' / 'draft:NAME') and split."""
    base, draft = spec.base, spec.draft if speculative else None
    tp, h = spec.tp_size, base.hidden_size
    vpad = padded_vocab(base.vocab_size, tp)
    head_src = "base:lm_head.weight" if "lm_head.weight" in base_names else "base:model.embed_tokens.weight"
    heads = Heads(base.num_attention_heads, base.num_key_value_heads, base.head_dim)
    plans = [TensorPlan("transformer.vocab_embedding.weight", ("base:model.embed_tokens.weight",), "full",
                        (base.vocab_size, h))]
    for i in range(base.num_hidden_layers):
        plans += _prefixed(layer_plans(f"transformer.layers.{i}.", f"model.layers.{i}.", h, base.intermediate_size,
                                       heads, tp), "base:")
    plans.append(TensorPlan("transformer.ln_f.weight", ("base:model.norm.weight",), "full", (h,)))
    plans.append(TensorPlan("lm_head.weight", (head_src,), "vocab_rows", (vpad // tp, h)))
    if draft is None:
        return plans
    dheads = Heads(draft.num_attention_heads, draft.num_key_value_heads, draft.head_dim)
    embed_src = "draft:embed_tokens.weight" if draft.has_embed_tokens else "base:model.embed_tokens.weight"
    per_net = [TensorPlan("drafter.vocab_embedding.weight", (embed_src,), "full", (draft.vocab_size, h)),
               TensorPlan("drafter.fc.weight", ("draft:fc.weight",), "rows", (h // tp, 2 * h)),
               TensorPlan("drafter.fc.bias", ("draft:fc.bias",) if draft.has_fc_bias else (), 
                          "rows" if draft.has_fc_bias else "zeros_rows", (h // tp,))]
    per_net += _prefixed(layer_plans("drafter.layers.0.", "layers.0.", h, draft.intermediate_size, dheads, tp,
                                     input_norm=False), "draft:")
    per_net.append(TensorPlan("lm_head.weight", (head_src,), "vocab_rows", (vpad // tp, h)))
    for p in per_net:  # copies of one tensor are adjacent, so its source is read once per rank
        for k in range(spec.trtllm.num_eagle_layers):
            plans.append(TensorPlan(f"eagle_nets.{k}.{p.trt_name}", p.sources, p.split, p.shape))
    return plans


def _prefixed(plans: list[TensorPlan], prefix: str) -> list[TensorPlan]:
    return [TensorPlan(p.trt_name, tuple(prefix + s for s in p.sources), p.split, p.shape) for p in plans]


@contextmanager
def _sigterm_as_exit():
    """Turn SIGTERM into SystemExit so `finally` blocks remove the temporary output."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def convert(spec: BuildSpec, out_dir: str | Path, *, speculative: bool = True, force: bool = False,
            progress=None) -> Path:
    """Write the checkpoint of a validated trtllm spec to out_dir (atomically): the EAGLE checkpoint, or the base
    alone when `speculative` is False or the spec has no draft. `progress(n_done, n_total, name)` is called per
    tensor."""
    if spec.trtllm is None:
        raise EagleTrtError(f"a TensorRT-LLM checkpoint is made from a trtllm build spec, got engine {spec.engine!r}",
                            "create the spec with engines.create_spec(..., engine='trtllm')")
    draft = spec.draft if speculative else None
    out = Path(out_dir)
    if out.exists() and not force:
        raise EagleTrtError(f"checkpoint directory {out} already exists", "pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{out.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)  # left by a killed run
    dtype, tp, base = torch_dtype(spec.dtype), spec.tp_size, spec.base
    with _sigterm_as_exit(), atomic_directory(out) as tmp, ExitStack() as stack:
        readers = {"base": stack.enter_context(open_weights(base.path))}
        heads = {"base:": Heads(base.num_attention_heads, base.num_key_value_heads, base.head_dim)}
        if draft is not None:
            readers["draft"] = stack.enter_context(open_weights(draft.path))
            heads["draft:"] = Heads(draft.num_attention_heads, draft.num_key_value_heads, draft.head_dim)
        plans = tensor_plans(spec, speculative, set(readers["base"].names()))
        _require_float_sources(plans, readers)
        cfg = checkpoint_config(spec, speculative)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        total, done = len(plans) * tp, 0
        for rank in range(tp):
            writer = StreamingSafetensorsWriter(tmp / f"rank{rank}.safetensors",
                                                [(p.trt_name, dtype, p.shape) for p in plans])
            cache: tuple = ((), [])
            for plan in plans:
                if plan.sources != cache[0]:
                    cache = (plan.sources, [_read(readers, s) for s in plan.sources])
                writer.write(plan.trt_name, _produce(plan, cache[1], tp, rank, heads, dtype,
                                                     padded_vocab(base.vocab_size, tp)))
                done += 1
                if progress is not None:
                    progress(done, total, plan.trt_name)
            writer.close()
    return out


def _require_float_sources(plans: list[TensorPlan], readers: dict) -> None:
    """Every tensor the checkpoint copies is a float weight: a quantized value (float8, packed integers) copied as a
    weight would build another model (BuildSpec.validate refuses quantized bases for trtllm; this is the last word)."""
    for source in dict.fromkeys(s for p in plans for s in p.sources):
        which, name = source.split(":", 1)
        dtype = readers[which].dtype(name)
        if dtype not in FLOAT_DTYPES:
            raise EagleTrtError(f"{which} tensor {name!r} is stored as {dtype}: a TensorRT-LLM checkpoint takes "
                                "float weights, and copying quantized values as weights would build another model",
                                "quantized bases run on --engine pytorch, llmapi or vllm (eagle-trt inspect says "
                                "which)")


def _read(readers: dict, source: str) -> torch.Tensor:
    which, name = source.split(":", 1)
    return readers[which].get(name)


def _produce(plan: TensorPlan, tensors: list[torch.Tensor], tp: int, rank: int, heads: dict, dtype, vpad: int):
    if plan.split == "zeros_rows":
        return torch.zeros(plan.shape, dtype=dtype)  # TRT-LLM's fc always has a bias (NVIDIA/TensorRT-LLM#2588)
    prefix = plan.sources[0].split(":", 1)[0] + ":"
    out = slice_tensor(plan.split, tensors, tp, rank, heads.get(prefix), vpad)
    return out.to(dtype)
