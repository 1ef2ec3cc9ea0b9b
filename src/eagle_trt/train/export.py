"""Write trained drafts in the standard Hugging Face EAGLE layouts (docs/eagle_algorithms.md §1), which EAGLE's
reference code, SGLang, vLLM and our converter load unchanged: config.json + model.safetensors."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from eagle_trt.draft_layouts import one_layer_llama_config
from eagle_trt.fsutil import atomic_directory
from eagle_trt.runtime.draft import Eagle1Draft, Eagle3Draft
from eagle_trt.spec import ModelSpec


def eagle1_state_dict(draft: Eagle1Draft, dtype=torch.float16) -> dict[str, torch.Tensor]:
    names = draft.hf_names("layers.0.")
    params = dict(draft.named_parameters())
    return {theirs: params[ours].detach().to(dtype).contiguous() for ours, theirs in names.items() if ours in params}


def _draft_config(base: ModelSpec, draft: Eagle1Draft | Eagle3Draft, record: dict, **extra) -> dict:
    """config.json of a trained one-layer draft (Llama keys), with the format's own keys in `extra`."""
    a = draft.args
    return one_layer_llama_config(a, rms_norm_eps=a.rms_norm_eps, rope_theta=a.rope_theta,
                                  max_position_embeddings=base.max_position_embeddings, **extra,
                                  torch_dtype="float16", eagle_trt_training=record)


def eagle1_config(base: ModelSpec, draft: Eagle1Draft, record: dict) -> dict:
    return _draft_config(base, draft, record, bias=draft.fc.bias is not None)


def eagle3_state_dict(draft: Eagle3Draft, t2d: torch.Tensor, dtype=torch.float16) -> dict[str, torch.Tensor]:
    """SafeAILab EAGLE-3 names (fc, midlayer.*, norm, lm_head, d2t int64, t2d bool); no embed_tokens (frozen, the
    base's)."""
    state = draft.state_dict()
    out = {}
    for ours, theirs in draft.hf_names("midlayer.").items():
        value = state[ours].detach()
        out[theirs] = (value if ours == "d2t" else value.to(dtype)).contiguous()
    out["t2d"] = t2d.to(torch.bool).contiguous()
    return out


def eagle3_config(base: ModelSpec, draft: Eagle3Draft, record: dict) -> dict:
    """The training config layout of SafeAILab's traineagle3 (LlamaForCausalLM + draft_vocab_size)."""
    return _draft_config(base, draft, record, draft_vocab_size=draft.lm_head.weight.shape[0])


def save_draft(out: Path, state: dict[str, torch.Tensor], config: dict, readme: str | None = None,
               force: bool = False) -> Path:
    """Atomic: write into a temporary sibling, then rename."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        from eagle_trt.errors import EagleTrtError

        raise EagleTrtError(f"output directory {out} already exists", "pass --force to overwrite it")
    with atomic_directory(out) as tmp:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if readme:
            (tmp / "README.md").write_text(readme, encoding="utf-8")
    return out
