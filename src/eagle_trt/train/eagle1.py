"""EAGLE-1/2 draft training (docs/eagle_algorithms.md §2): draft row t consumes (f_t, x_{t+1}) and regresses
the next feature f_{t+1}; loss = 1.0 * SmoothL1(f^, f) + 0.1 * CE(softmax(lm_head f) || lm_head f^) (the base's own
next-token distribution as the soft target, as in EAGLE's main.py), uniform noise on the input features. The head
is the runtime's own `Eagle1Draft` module, trained over packed sequences with a block-diagonal causal mask; the
base lm_head stays frozen, its rows sliced to the most frequent tokens of the data to keep the CE affordable on a
CPU. Every position with a next feature trains (answers and prompts alike: the targets are the base's own).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from eagle_trt.runtime.draft import Eagle1Draft
from eagle_trt.runtime.model import KVCache
from eagle_trt.runtime.rope import Rope
from eagle_trt.train.loop import LoopConfig, pack, train_loop


@dataclass(frozen=True)
class TrainConfig(LoopConfig):
    noise: float = 0.2  # uniform noise width, relative to the feature RMS
    weight_reg: float = 1.0
    weight_ce: float = 0.1


def init_from_identity(draft: Eagle1Draft, std: float = 0.02) -> None:
    """fc passes the feature through (embedding half small) and the layer starts near zero, so the untrained
    draft predicts f_{t+1} ~ f_t; training learns the step."""
    h = draft.args.hidden_size
    with torch.no_grad():
        draft.fc.weight.normal_(0, std)
        draft.fc.weight[:, h:] += torch.eye(h)
        if draft.fc.bias is not None:
            draft.fc.bias.zero_()
        for name, p in draft.layer.named_parameters():
            if name.endswith("layernorm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0, std)


def chunk_tensors(chunk: list[dict], chunk_tokens: int):
    """One packed chunk: draft inputs (ids [T], features [T, H], positions [T]), teacher features f_{t+1} [T, H]
    and the block-diagonal causal mask [T, T]."""
    ids, feats, targets, positions, seg = [], [], [], [], []
    device = chunk[0]["input_ids"].device  # records may live on the GPU: build the chunk there
    for s, rec in enumerate(chunk):
        x, f = rec["input_ids"], rec["features"].float()
        n = min(len(x) - 1, chunk_tokens)
        ids.append(x[1:n + 1])
        feats.append(f[:n])
        targets.append(f[1:n + 1])
        positions.append(torch.arange(n, device=device))
        seg.append(torch.full((n,), s, device=device))
    seg_t = torch.cat(seg)
    mask = (seg_t[:, None] == seg_t[None, :]) & torch.ones(len(seg_t), len(seg_t), dtype=torch.bool,
                                                           device=device).tril()  # [T, T]
    return torch.cat(ids), torch.cat(feats), torch.cat(targets), torch.cat(positions), mask


def draft_forward(draft: Eagle1Draft, ids, feats, positions, mask):
    """Training forward through the runtime module: a fresh KV buffer per chunk (autograd flows through it)."""
    a = draft.args
    cache = KVCache(1, a.num_key_value_heads, len(ids), a.head_dim, feats.dtype, feats.device)  # [1, KV, T, D]
    if draft.rope is None or draft.rope.cos.shape[0] <= int(positions.max()):
        draft.rope = Rope(a, int(positions.max()) + 1024, feats.dtype, feats.device)
    return draft(ids, feats, positions, 0, mask, cache=cache)


def losses(draft: Eagle1Draft, head_rows: torch.Tensor, batch, cfg: TrainConfig, noise: bool):
    ids, feats, targets, positions, mask = (t.to(head_rows.device) for t in batch)
    if noise and cfg.noise > 0:
        rms = feats.pow(2).mean().sqrt()
        feats = feats + (torch.rand_like(feats) - 0.5) * cfg.noise * rms
    out = draft_forward(draft, ids, feats, positions, mask)
    reg = F.smooth_l1_loss(out, targets)
    logits = out @ head_rows.T  # [rows, V_subset]
    with torch.no_grad():
        teacher = targets @ head_rows.T  # the base's logits at t+1
        target_p = torch.softmax(teacher, dim=-1)
    ce = -(target_p * F.log_softmax(logits, dim=-1)).sum(-1).mean()
    acc = (logits.argmax(-1) == teacher.argmax(-1)).float().mean().item()
    return cfg.weight_reg * reg + cfg.weight_ce * ce, reg.item(), ce.item(), acc


def vocab_subset(records: list[dict], vocab_size: int, limit: int = 8192) -> torch.Tensor:
    """The `limit` most frequent token ids of the data (sorted): the lm_head rows the CE is computed over."""
    counts = torch.bincount(torch.cat([r["input_ids"] for r in records]), minlength=vocab_size)
    return counts.topk(min(limit, int((counts > 0).sum()))).indices.sort().values


def train_eagle1(draft: Eagle1Draft, lm_head_weight: torch.Tensor, records: list[dict], cfg: TrainConfig,
                 on_step=None, state: dict | None = None) -> dict:
    """Train in place. Returns a summary (steps, last losses). `on_step(step, total, metrics)` reports progress
    and may save checkpoints; `state` resumes optimizer/step from a checkpoint."""
    head_rows = lm_head_weight[vocab_subset(records, lm_head_weight.shape[0])].detach()
    params = [p for n, p in draft.named_parameters() if not n.startswith(("embed_tokens", "lm_head"))]

    def step_loss(chunk):
        loss, reg, ce, acc = losses(draft, head_rows, chunk_tensors(chunk, cfg.chunk_tokens), cfg, noise=True)
        return loss, {"reg": reg, "ce": ce, "top1": acc}

    return train_loop(draft, params, records, cfg, step_loss, on_step=on_step, state=state)


@torch.no_grad()
def evaluate(draft: Eagle1Draft, lm_head_weight: torch.Tensor, records: list[dict], cfg: TrainConfig) -> dict:
    """Held-out losses and next-token top-1 accuracy (teacher-forced features)."""
    head_rows = lm_head_weight[vocab_subset(records, lm_head_weight.shape[0])]
    out = {"loss": 0.0, "reg": 0.0, "ce": 0.0, "top1": 0.0}
    chunks = pack(records, cfg.chunk_tokens, random.Random(0))
    for chunk in chunks:
        loss, reg, ce, acc = losses(draft, head_rows, chunk_tensors(chunk, cfg.chunk_tokens), cfg, False)
        for k, v in zip(out, (loss.item(), reg, ce, acc)):
            out[k] += v / len(chunks)
    draft.cache = draft.rope = None
    return out
