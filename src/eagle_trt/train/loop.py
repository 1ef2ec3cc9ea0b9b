"""The training loop EAGLE-1/2 and EAGLE-3 drafts share: records packed into chunks per epoch, AdamW, gradient
clipping, a linear-warmup x cosine LR schedule (optionally fitted to a time budget), progress callback and resume
from (optimizer, step)."""

from __future__ import annotations

import math
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.optim.lr_scheduler import LambdaLR


@dataclass(frozen=True)
class LoopConfig:
    """What the loop itself needs; each draft format's config adds its loss settings."""

    epochs: int = 4
    lr: float = 1e-3
    chunk_tokens: int = 2048  # rows per packed step ("batch size" in tokens)
    grad_clip: float = 0.5
    warmup_steps: int = 20
    seed: int = 0
    max_steps: int | None = None  # stop early (the LR schedule still spans all epochs)
    time_budget_s: float | None = None  # train for about this long: the step time measured over the warmup steps
    #                                     sets the number of steps (at most `epochs`) and the cosine ends there


def pack(records: list[dict], chunk_tokens: int, rng: random.Random) -> list[list[dict]]:
    """Group records into chunks of at most chunk_tokens draft rows (long records are cut)."""
    order = records[:]
    rng.shuffle(order)
    chunks, cur, size = [], [], 0
    for rec in order:
        n = min(len(rec["input_ids"]) - 1, chunk_tokens)
        if n < 2:
            continue
        if size + n > chunk_tokens and cur:
            chunks.append(cur)
            cur, size = [], 0
        cur.append(rec)
        size += n
    if cur:
        chunks.append(cur)
    return chunks


class WarmupCosine(LambdaLR):
    """lr * min(1, (step + 1) / warmup_steps) * (1 + cos(pi * min(step, total) / total)) / 2. `total` may be
    shortened while training (a time budget): the cosine then ends at the new total."""

    def __init__(self, opt: torch.optim.Optimizer, warmup_steps: int, total_steps: int):
        self.warmup, self.total = max(1, warmup_steps), max(1, total_steps)
        super().__init__(opt, self.factor)

    def factor(self, step: int) -> float:
        return min(1.0, (step + 1) / self.warmup) * 0.5 * (1 + math.cos(math.pi * min(step, self.total) / self.total))


def train_loop(draft: torch.nn.Module, params: list[torch.nn.Parameter], records: list[dict], cfg: LoopConfig,
               step_loss: Callable[[list[dict]], tuple[torch.Tensor, dict]], on_step=None,
               state: dict | None = None) -> dict:
    """Train `params` of `draft` in place; `step_loss(chunk)` -> (loss, metrics) for one packed chunk. Returns a
    summary (steps, the last metrics). `on_step(step, total, metrics, optimizer)` reports progress and may save
    checkpoints; `state` ({"optimizer", "step"}) resumes one."""
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    chunks = [c for _ in range(cfg.epochs) for c in pack(records, cfg.chunk_tokens, rng)]
    total, step = len(chunks), 0
    schedule = WarmupCosine(opt, cfg.warmup_steps, total)
    if state:
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        with warnings.catch_warnings():  # replaying the schedule to the resumed step, no optimizer step between
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(step):
                schedule.step()
    metrics: dict = {}
    draft.train()
    first, started = step, time.perf_counter()
    while step < min(total, cfg.max_steps or total):
        lr = schedule.get_last_lr()[0]
        loss, metrics = step_loss(chunks[step])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        step += 1
        if cfg.time_budget_s is not None and step - first == max(1, cfg.warmup_steps):  # before the next rate
            per_step = (time.perf_counter() - started) / (step - first)
            total = schedule.total = min(total, max(step + 1, first + int(cfg.time_budget_s / per_step)))
        schedule.step()
        metrics = {"loss": loss.item(), **metrics, "lr": lr}
        if on_step is not None:
            on_step(step, total, metrics, opt)
    draft.eval().requires_grad_(False)
    draft.cache = draft.rope = None
    return {"steps": step, **metrics}
