"""The engine's cost table on this machine: a base forward over T tokens at a few context lengths, and one draft step
per width (a draft forward over W rows and the top-k of their next-token distributions). `eagle-trt profile` prints
it; the tree tuner (tuning/tree_tuner.py) reads it to predict what a tree costs.

Timings are the best of `repeats` rounds after a warm-up, the sizes interleaved within each round (so a noisy
moment on a shared machine hits one sample, not one size), through the same engine (`EagleDecoder.load`) that serves:
plain decoding is the T = 1 row, so every ratio compares the engine with itself at its fastest one-token path.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass

import torch

TOKENS = (1, 2, 4, 8, 16, 32, 64)
CONTEXTS = (128, 512, 1024)
DRAFT_WIDTHS = (1, 2, 4, 8, 16)
TOP_K = 8


@dataclass(frozen=True)
class ProfileConfig:
    tokens: tuple[int, ...] = TOKENS
    contexts: tuple[int, ...] = CONTEXTS
    draft_widths: tuple[int, ...] = DRAFT_WIDTHS
    repeats: int = 9


def _best_ms(calls: dict, repeats: int, sync) -> dict:
    """{key: fn} -> {key: best milliseconds over `repeats` interleaved rounds} (one warm-up round first)."""
    best = {key: float("inf") for key in calls}
    for round_ in range(repeats + 1):
        for key, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            sync()
            if round_:
                best[key] = min(best[key], (time.perf_counter() - t0) * 1e3)
    return best


@torch.inference_mode()
def profile_decoder(decoder, cfg: ProfileConfig = ProfileConfig(), echo=lambda msg: None) -> dict:
    """Measure `engine` (an EagleDecoder, draft optional). Returns the cost table (JSON-able)."""
    base, draft, device = decoder.base, decoder.draft, decoder.device
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    vocab = base.args.vocab_size
    gen = torch.Generator().manual_seed(0)
    room = decoder.max_seq_len
    contexts = [c for c in cfg.contexts if c + max(cfg.tokens) <= room]
    forward: dict[str, dict[str, float]] = {}
    for ctx in contexts:
        prefix = torch.randint(0, vocab, (ctx,), generator=gen).to(device)  # [ctx]
        base(prefix, torch.arange(ctx, device=device), 0)
        calls = {}
        for t in cfg.tokens:
            ids = torch.randint(0, vocab, (t,), generator=gen).to(device)  # [T]
            pos = torch.arange(ctx, ctx + t, device=device)  # [T]
            mask = torch.ones(t, t, dtype=torch.bool, device=device).tril() if t > 1 else None  # [T, T]
            calls[str(t)] = lambda ids=ids, pos=pos, mask=mask: base(ids, pos, ctx, tree_mask=mask)
        row = forward[str(ctx)] = _best_ms(calls, cfg.repeats, sync)
        echo(f"  base forward at context {ctx}: " + ", ".join(f"T={t} {ms:.1f} ms" for t, ms in row.items()))
    result = {"base_forward_ms": forward, "draft_step_ms": {}, "topk_ms": {}}
    if draft is not None:
        ctx = contexts[0] if contexts else 128
        hidden = base.args.hidden_size
        feats = torch.randn(ctx, hidden, generator=gen).to(device=device, dtype=base.embed_tokens.weight.dtype)
        prefix = torch.randint(0, vocab, (ctx,), generator=gen).to(device)
        captured = torch.randn(ctx, 3 * hidden, generator=gen).to(feats) if draft.format == "eagle3" else None
        out = draft(prefix, draft.base_features(feats, captured), torch.arange(ctx, device=device), 0)
        steps, topks = {}, {}
        for w in cfg.draft_widths:
            ids, rows = prefix[:w], out[:w]  # [W], [W, H]
            pos = torch.full((w,), ctx, dtype=torch.long, device=device)  # [W]
            mask = torch.ones(w, ctx + w, dtype=torch.bool, device=device)  # [W, ctx+W]
            steps[str(w)] = lambda ids=ids, rows=rows, pos=pos, mask=mask: draft(ids, rows, pos, ctx, mask)
            topks[str(w)] = lambda rows=rows: draft.topk(rows, TOP_K)[1].tolist()
        result["draft_step_ms"] = _best_ms(steps, cfg.repeats, sync)
        result["topk_ms"] = _best_ms(topks, cfg.repeats, sync)
        echo("  draft forward: " + ", ".join(f"W={w} {ms:.2f} ms" for w, ms in result["draft_step_ms"].items()))
    result["machine"] = {"platform": platform.platform(), "processor": platform.processor(),
                         "threads": torch.get_num_threads(), "device": device, "torch": torch.__version__}
    result["engine"] = {"dtype": decoder.precision, "batch_invariant": bool(base.batch_invariant),
                        "draft": None if draft is None else draft.format,
                        "draft_vocab": None if draft is None or getattr(draft, "vocab_ids", None) is None
                        else int(draft.vocab_ids.numel())}
    return result


def format_table(result: dict) -> str:
    """Markdown: base forward ms per T and context, the ratio to T = 1, and the draft step per width."""
    forward = result["base_forward_ms"]
    tokens = list(next(iter(forward.values())).keys()) if forward else []
    lines = ["| context | " + " | ".join(f"T={t}" for t in tokens) + " |", "|---|" + "---|" * len(tokens)]
    for ctx, row in forward.items():
        one = row[tokens[0]]
        lines.append(f"| {ctx} | " + " | ".join(f"{row[t]:.1f} ms ({row[t] / one:.2f}x)" for t in tokens) + " |")
    if result.get("draft_step_ms"):
        widths = list(result["draft_step_ms"])
        lines += ["", "| draft step | " + " | ".join(f"W={w}" for w in widths) + " |", "|---|" + "---|" * len(widths),
                  "| forward | " + " | ".join(f"{result['draft_step_ms'][w]:.2f} ms" for w in widths) + " |",
                  f"| top-{TOP_K} | " + " | ".join(f"{result['topk_ms'][w]:.2f} ms" for w in widths) + " |"]
    return "\n".join(lines)
