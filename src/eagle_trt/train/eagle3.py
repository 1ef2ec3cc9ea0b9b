"""EAGLE-3 draft training (docs/eagle_algorithms.md §4): training-time test (TTT) over packed sequences.

Row t of step 0 consumes (x_{t+1}, fc(captured_t)); row t of step j consumes (x_{t+1+j}, the step j-1 output of row t)
at position t+j, exactly what a depth-(j+1) node of a draft tree sees. Step j attends causally over the step-0 keys
of its sequence (the accepted prefix) plus the same row's keys of steps 1..j (its ancestors in the tree), computed
as one softmax over [causal block | diagonal terms] so nothing of size T x (j+1)T is built. Loss per step: CE
against the base's next-token distribution restricted to the draft vocabulary, masked where the base's greedy token
is outside it; total = sum_j decay^j * loss_j. The draft vocabulary is the V_d most frequent tokens of the data
(sorted), `d2t[i] = used[i] - i`, `t2d[v] = v in used`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from eagle_trt.runtime.draft import Eagle3Draft
from eagle_trt.runtime.model import Llama
from eagle_trt.runtime.rope import Rope, apply_rope
from eagle_trt.train.loop import LoopConfig, pack, train_loop


@dataclass(frozen=True)
class Eagle3TrainConfig(LoopConfig):
    ttt_steps: int = 7  # unrolled draft steps (the reference's `length`)
    step_decay: float = 0.8


def draft_vocabulary(records: list[dict], vocab_size: int, size: int) -> torch.Tensor:
    """The `size` most frequent target ids of the data (input tokens and the base's greedy tokens), sorted."""
    ids = torch.cat([torch.cat((r["input_ids"], r["greedy"])) for r in records])
    counts = torch.bincount(ids, minlength=vocab_size).double()
    counts += torch.linspace(1e-3, 0, vocab_size, dtype=torch.float64)  # ties: lower ids first, deterministic
    return counts.topk(min(size, vocab_size)).indices.sort().values


def vocab_maps(used: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(d2t [V_d] int64 offsets, t2d [V] bool), the SafeAILab layout."""
    d2t = used - torch.arange(used.numel())
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[used] = True
    return d2t, t2d


def init_from_base(draft: Eagle3Draft, base: Llama, used: torch.Tensor, std: float = 0.02) -> None:
    """Start the draft as 'one more base layer over the highest captured feature': fc passes that feature through,
    the midlayer copies the base layer it was captured before (its q/k/v see the feature half; the embedding half
    starts small), norm and lm_head are the base's final norm and its rows of the draft vocabulary."""
    h = draft.args.hidden_size
    src = base.layers[min(draft.capture[-1], len(base.layers) - 1)]
    mid = draft.midlayer
    with torch.no_grad():
        draft.fc.weight.normal_(0, std)
        draft.fc.weight[:, 2 * h:] += torch.eye(h)
        for name in ("q_proj", "k_proj", "v_proj"):
            w = getattr(mid.self_attn, name).weight
            w.normal_(0, std)
            w[:, h:] = getattr(src.self_attn, name).weight
        mid.self_attn.o_proj.weight.copy_(src.self_attn.o_proj.weight)
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(mid.mlp, name).weight.copy_(getattr(src.mlp, name).weight)
        mid.input_layernorm.weight.fill_(1.0)
        mid.hidden_norm.weight.copy_(src.input_layernorm.weight)
        mid.post_attention_layernorm.weight.copy_(src.post_attention_layernorm.weight)
        draft.norm.weight.copy_(base.norm.weight)
        draft.lm_head.weight.copy_(base.lm_head.weight[used.to(base.lm_head.weight.device)])
        draft.d2t.copy_(used - torch.arange(used.numel()))


def chunk_tensors(chunk: list[dict], chunk_tokens: int, steps: int) -> dict:
    """Packed rows of one chunk: captured [T, 3H], ids [steps, T], feature index of each row's target
    [steps, T] (into `features` [sum L, H]), valid [steps, T], positions [T], block-causal mask [T, T]."""
    caps, ids, tgt, valid, positions, seg, feats, greedy = [], [], [], [], [], [], [], []
    offset = 0
    for s, rec in enumerate(chunk):
        x, length = rec["input_ids"], len(rec["input_ids"])
        n = min(length - 1, chunk_tokens)
        t = torch.arange(n)
        caps.append(rec["captured"][:n])
        rows_ids, rows_tgt, rows_ok = [], [], []
        for j in range(steps):
            src = t + 1 + j
            ok = src <= length - 1
            rows_ids.append(torch.where(ok, x[src.clamp(max=length - 1)], 0))
            rows_tgt.append(offset + src.clamp(max=length - 1))
            rows_ok.append(ok)
        ids.append(torch.stack(rows_ids))
        tgt.append(torch.stack(rows_tgt))
        valid.append(torch.stack(rows_ok))
        positions.append(t)
        seg.append(torch.full((n,), s))
        feats.append(rec["features"])
        greedy.append(rec["greedy"])
        offset += length
    seg_t = torch.cat(seg)
    mask = (seg_t[:, None] == seg_t[None, :]) & torch.ones(len(seg_t), len(seg_t), dtype=torch.bool).tril()
    return {"captured": torch.cat(caps).float(), "ids": torch.cat(ids, 1), "target_index": torch.cat(tgt, 1),
            "valid": torch.cat(valid, 1), "positions": torch.cat(positions), "mask": mask,
            "features": torch.cat(feats).float(), "greedy": torch.cat(greedy)}


def _attend(q, k0, v0, diag_k, diag_v, mask):
    """q: [heads, T, D]; k0/v0: [heads, T, D] step-0 keys (block-causal `mask` [T, T]); diag_k/v: per later step
    [heads, T, D], each row seeing only its own key. One softmax over both parts."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    parts = [(q @ k0.transpose(-1, -2) * scale).masked_fill(~mask, float("-inf"))]
    parts += [(q * k).sum(-1, keepdim=True) * scale for k in diag_k]
    p = torch.softmax(torch.cat(parts, dim=-1).float(), dim=-1).to(q.dtype)
    t = k0.shape[1]
    out = p[..., :t] @ v0
    for i, v in enumerate(diag_v):
        out = out + p[..., t + i: t + i + 1] * v
    return out


def ttt_forward(draft: Eagle3Draft, batch: dict, steps: int) -> list[torch.Tensor]:
    """The draft's pre-norm outputs [T, H] of each unrolled step, through the runtime module's own weights."""
    a, mid = draft.args, draft.midlayer
    attn = mid.self_attn
    t = batch["positions"].shape[0]
    groups = a.num_attention_heads // a.num_key_value_heads
    need = int(batch["positions"].max()) + steps + 1
    if draft.rope is None or draft.rope.cos.shape[0] < need:
        draft.rope = Rope(a, need + 1024, batch["captured"].dtype, batch["captured"].device)
    g = draft.fc(batch["captured"])
    k0 = v0 = None
    diag_k, diag_v, outs = [], [], []
    for j in range(steps):
        cos, sin = draft.rope(batch["positions"] + j)
        x = torch.cat((mid.input_layernorm(draft.embed_tokens(batch["ids"][j])), mid.hidden_norm(g)), dim=-1)
        q = apply_rope(attn.q_proj(x).view(t, a.num_attention_heads, a.head_dim), cos, sin).transpose(0, 1)
        k = apply_rope(attn.k_proj(x).view(t, a.num_key_value_heads, a.head_dim), cos, sin).transpose(0, 1)
        v = attn.v_proj(x).view(t, a.num_key_value_heads, a.head_dim).transpose(0, 1)
        k, v = k.repeat_interleave(groups, 0), v.repeat_interleave(groups, 0)
        if j == 0:
            k0, v0 = k, v
        else:
            diag_k.append(k)
            diag_v.append(v)
        o = _attend(q, k0, v0, diag_k, diag_v, batch["mask"])
        h = g + attn.o_proj(o.transpose(0, 1).reshape(t, a.num_attention_heads * a.head_dim))
        g = h + mid.mlp(mid.post_attention_layernorm(h))
        outs.append(g)
    return outs


def ttt_losses(draft: Eagle3Draft, head_rows: torch.Tensor, t2d: torch.Tensor, batch: dict,
               cfg: Eagle3TrainConfig) -> tuple[torch.Tensor, list[float]]:
    """(weighted loss, top-1 agreement with the base's greedy token per step)."""
    batch = {k: v.to(head_rows.device) for k, v in batch.items()}
    t2d = t2d.to(head_rows.device)
    with torch.no_grad():
        teacher = torch.softmax(batch["features"] @ head_rows.T, dim=-1)  # [sum L, V_d]
        in_vocab = t2d[batch["greedy"]]
    used = draft.d2t + torch.arange(draft.d2t.numel(), device=draft.d2t.device)
    total, accs = 0.0, []
    for j, out in enumerate(ttt_forward(draft, batch, cfg.ttt_steps)):
        idx = batch["target_index"][j]
        keep = batch["valid"][j] & in_vocab[idx]
        if not keep.any():
            accs.append(0.0)
            continue
        logp = F.log_softmax(draft.lm_head(draft.norm(out[keep])).float(), dim=-1)
        loss = -(teacher[idx[keep]] * logp).sum(-1).mean()
        total = total + cfg.step_decay ** j * loss
        with torch.no_grad():
            ok = batch["valid"][j]
            pred = used[draft.lm_head(draft.norm(out[ok])).argmax(-1)]
            accs.append((pred == batch["greedy"][idx[ok]]).float().mean().item())
    return total, accs


def train_eagle3(draft: Eagle3Draft, lm_head_weight: torch.Tensor, t2d: torch.Tensor, records: list[dict],
                 cfg: Eagle3TrainConfig, on_step=None, state: dict | None = None) -> dict:
    """Train in place (embeddings frozen; fc, midlayer, norm and lm_head learn). Same callback/resume contract as
    `train_eagle1`."""
    used = (draft.d2t + torch.arange(draft.d2t.numel(), device=draft.d2t.device)).detach()
    head_rows = lm_head_weight[used].detach()
    params = [p for n, p in draft.named_parameters() if not n.startswith("embed_tokens")]

    def step_loss(chunk):
        loss, accs = ttt_losses(draft, head_rows, t2d, chunk_tensors(chunk, cfg.chunk_tokens, cfg.ttt_steps), cfg)
        return loss, {"top1": accs[0], "top1_per_step": accs}

    return train_loop(draft, params, records, cfg, step_loss, on_step=on_step, state=state)


@torch.no_grad()
def evaluate3(draft: Eagle3Draft, lm_head_weight: torch.Tensor, t2d: torch.Tensor, records: list[dict],
              cfg: Eagle3TrainConfig) -> dict:
    """Held-out loss and per-step top-1 agreement with the base (teacher-forced tokens, own features)."""
    used = draft.d2t + torch.arange(draft.d2t.numel(), device=draft.d2t.device)
    head_rows = lm_head_weight[used]
    chunks = pack(records, cfg.chunk_tokens, random.Random(0))
    loss, accs = 0.0, [0.0] * cfg.ttt_steps
    for chunk in chunks:
        value, step_accs = ttt_losses(draft, head_rows, t2d, chunk_tensors(chunk, cfg.chunk_tokens, cfg.ttt_steps),
                                      cfg)
        loss += float(value) / len(chunks)
        accs = [a + b / len(chunks) for a, b in zip(accs, step_accs)]
    draft.cache = draft.rope = None
    return {"loss": loss, "top1": accs[0], "top1_per_step": accs}
