"""Runtime benchmark: plain vs EAGLE decoding with the PyTorch runtime on a prompt set (greedy), per tree setting:
tok/s (with each prompt's prefill, and without it: `decode tok/s`, what the tree tuner predicts), speedup, mean
accepted length, acceptance rate, draft/verify time split. Prints a table, writes JSON.

    eagle-trt bench --base B --draft D --trees "chain:3;dynamic:4,4,12" --prompts 10
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from eagle_trt.tuning import TUNE_BUDGET_S


@dataclass(frozen=True)
class BenchConfig:
    base: Path
    draft: Path | None | tuple[Path, ...]  # one draft or several (EAGLE-1 vs EAGLE-3 side by side)
    trees: tuple[str, ...] = ("chain:3", "dynamic:4,4,12")
    dataset: str = "mt-bench"
    prompts: int = 10  # 0 = every prompt of the dataset
    max_tokens: int = 64
    device: str = "cpu"
    dtype: str = "float32"
    chat: bool = True
    draft_vocab: int | None = None  # FR-Spec size for EAGLE-1/2 drafts (None: the draft's file, 0: full)
    tune_budget: float = TUNE_BUDGET_S  # seconds `auto` may measure per draft (when not cached)

    @property
    def drafts(self) -> tuple[Path, ...]:
        if self.draft is None:
            return ()
        return tuple(self.draft) if isinstance(self.draft, (tuple, list)) else (self.draft,)


def _encode_all(cfg: BenchConfig) -> tuple[list[list[int]], list[str]]:
    """(token ids, category) of each prompt the bench runs."""
    from transformers import AutoTokenizer

    from eagle_trt.datasets import encode_prompt, load_dataset, take_prompts

    tok = AutoTokenizer.from_pretrained(cfg.base)
    prompts = take_prompts(load_dataset(cfg.dataset), cfg.prompts)
    return [encode_prompt(tok, p.text, cfg.chat) for p in prompts], [p.category for p in prompts]


def _settings(cfg: BenchConfig, echo, progress) -> tuple[dict[str, tuple[Path | None, str]], dict[Path, dict]]:
    """(row name -> (draft, concrete tree), draft -> its `--tree auto` tuning). With several drafts each row is
    prefixed by the draft's format (or its dir); `auto` rows are named `auto=<the tree it chose>`."""
    from eagle_trt.tuning.calibrate import TuneRequest, tune
    from eagle_trt.tree import AUTO
    from eagle_trt.spec import DraftSpec

    out: dict[str, tuple[Path | None, str]] = {"plain": (None, "chain:1")}
    drafts = cfg.drafts
    labels = [DraftSpec.from_dir(d).format for d in drafts]
    if len(set(labels)) < len(labels):
        labels = [Path(d).name for d in drafts]
    tunings = {}
    for draft, label in zip(drafts, labels):
        if AUTO in cfg.trees:
            tunings[draft] = tune(TuneRequest(Path(cfg.base), Path(draft), device=cfg.device, dtype=cfg.dtype,
                                              draft_vocab=cfg.draft_vocab, budget_s=cfg.tune_budget), echo=echo,
                                  progress=progress)
        for tree in cfg.trees:
            concrete = tunings[draft]["chosen"]["tree"] if tree == AUTO else tree
            name = f"auto={concrete}" if tree == AUTO else tree
            out[f"{label} {name}" if len(drafts) > 1 else name] = (draft, concrete)
    return out, tunings


def _empty_row() -> dict:
    return {"tokens": 0, "seconds": 0.0, "prefill_s": 0.0, "accepted_lengths": [], "drafted": 0, "accepted": 0,
            "draft_s": 0.0, "verify_s": 0.0, "outputs": [], "categories": {}}


def _per_category(categories: dict[str, list], plain: dict[str, list]) -> dict[str, dict]:
    """category -> tok/s, speedup over plain and mean accepted length, from [tokens, seconds, verify steps, tokens
    accepted by them] sums."""
    out = {}
    for cat, (tokens, seconds, steps, accepted) in categories.items():
        tps = tokens / max(seconds, 1e-9)
        out[cat] = {"tokens": tokens, "seconds": seconds, "tok_per_s": tps,
                    "speedup": tps * plain[cat][1] / max(plain[cat][0], 1),
                    "mean_accepted_length": accepted / max(steps, 1)}
    return out


def _summarise(rows: dict) -> dict:
    out = {}
    for name, r in rows.items():
        lengths = r["accepted_lengths"]
        out[name] = {"tokens": r["tokens"], "seconds": r["seconds"], "tok_per_s": r["tokens"] / max(r["seconds"], 1e-9),
                     "decode_tok_per_s": r["tokens"] / max(r["seconds"] - r["prefill_s"], 1e-9),
                     "mean_accepted_length": sum(lengths) / max(len(lengths), 1),
                     "acceptance_rate": r["accepted"] / r["drafted"] if r["drafted"] else 0.0,
                     "draft_s": r["draft_s"], "verify_s": r["verify_s"], "prompts": len(r["outputs"])}
        if len(r["categories"]) > 1:
            out[name]["per_category"] = _per_category(r["categories"], rows["plain"]["categories"])
    base_tps = out["plain"]["tok_per_s"]
    reference = rows["plain"]["outputs"]
    for name, row in out.items():
        row["speedup"] = row["tok_per_s"] / base_tps
        row["identical_to_plain"] = rows[name]["outputs"] == reference
        row["identical_prompts"] = sum(a == b for a, b in zip(rows[name]["outputs"], reference))
    return out


def run_bench(cfg: BenchConfig, echo=print, checkpoint: Path | None = None,
              progress=lambda done, total, what: None) -> dict:
    """Every setting runs each prompt in turn (interleaved, so machine noise hits all settings alike). With
    `checkpoint`, the partial result is rewritten after every prompt."""
    from eagle_trt.runtime import EagleDecoder

    from eagle_trt.tuning.calibrate import predict

    prompts, categories = _encode_all(cfg)
    settings, tunings = _settings(cfg, echo, progress)
    engines = {name: EagleDecoder.load(cfg.base, d, tree=t, device=cfg.device, dtype=cfg.dtype,
                                      draft_vocab=cfg.draft_vocab) for name, (d, t) in settings.items()}
    stop = engines["plain"].base_spec.eos_token_ids
    for engine in engines.values():
        engine.generate_all(prompts[0], 8, stop_token_ids=stop)  # warm-up
    echo(f"{len(prompts)} prompts x {cfg.max_tokens} tokens, settings: {', '.join(settings)}")
    if not engines["plain"].base.batch_invariant:
        echo("note: this engine is not batch-invariant here (a verify row may differ from a decode step in the last "
             "bits), so EAGLE matches plain decoding up to numerical near-ties")
    rows = {name: _empty_row() for name in settings}
    result = {}
    for i, ids in enumerate(prompts):
        for name, engine in engines.items():
            t0 = time.perf_counter()
            res = engine.generate_all(ids, cfg.max_tokens, stop_token_ids=stop)
            elapsed = time.perf_counter() - t0
            r = rows[name]
            r["seconds"] += elapsed
            r["tokens"] += len(res.token_ids)
            r["prefill_s"] += res.stats.prefill_time_s
            r["accepted_lengths"] += res.stats.accepted_lengths
            r["drafted"] += res.stats.num_draft_tokens
            r["accepted"] += res.stats.num_accepted_draft_tokens
            r["draft_s"] += res.stats.draft_time_s
            r["verify_s"] += res.stats.verify_time_s
            r["outputs"].append(res.token_ids)
            sums = r["categories"].setdefault(categories[i], [0, 0.0, 0, 0])  # as _per_category reads them
            sums[0] += len(res.token_ids)
            sums[1] += elapsed
            sums[2] += len(res.stats.accepted_lengths)
            sums[3] += sum(res.stats.accepted_lengths)
        summary = _summarise(rows)
        for name, (draft, tree) in settings.items():
            guess = predict(tunings[draft], tree) if draft in tunings else None
            if guess is not None:
                summary[name]["predicted_tok_per_s"] = guess.tok_per_s
                summary[name]["predicted_accepted_length"] = guess.accepted_length
            elif tunings and draft is None:
                summary[name]["predicted_tok_per_s"] = 1000.0 / next(iter(tunings.values()))["measured_plain_ms"]
        result = {"config": {k: str(v) for k, v in cfg.__dict__.items()}, "rows": summary,
                  "tunings": {str(d): t["chosen"] for d, t in tunings.items()},
                  "prompts_done": i + 1, "prompts_total": len(prompts),
                  "machine": {"platform": platform.platform(), "threads": torch.get_num_threads()},
                  "batch_invariant": bool(engines["plain"].base.batch_invariant)}  # EAGLE == plain bit for bit
        if checkpoint is not None:
            checkpoint.write_text(json.dumps(result, indent=2))
        if (i + 1) % 10 == 0 or i + 1 == len(prompts):
            taus = ", ".join(f"{n} {r['mean_accepted_length']:.2f}" for n, r in result["rows"].items() if n != "plain")
            echo(f"  {i + 1}/{len(prompts)} prompts; tau: {taus}")
    return result


def format_table(result: dict) -> str:
    lines = ["| setting | tok/s | decode tok/s | predicted tok/s | speedup | mean accepted length | acceptance rate | "
             "draft s | verify s | identical |", "|---|---|---|---|---|---|---|---|---|---|"]
    n = result.get("prompts_total", 0)
    for name, r in result["rows"].items():
        guess = f"{r['predicted_tok_per_s']:.1f}" if "predicted_tok_per_s" in r else "-"
        decode = f"{r['decode_tok_per_s']:.1f}" if "decode_tok_per_s" in r else "-"
        lines.append(f"| {name} | {r['tok_per_s']:.1f} | {decode} | {guess} | {r['speedup']:.2f}x | "
                     f"{r['mean_accepted_length']:.2f} | {r['acceptance_rate']:.3f} | {r['draft_s']:.1f} | "
                     f"{r['verify_s']:.1f} | {'yes' if r['identical_to_plain'] else 'NO'} "
                     f"({r['identical_prompts']}/{n}) |")
    with_categories = [name for name, r in result["rows"].items() if "per_category" in r and name != "plain"]
    if with_categories:
        lines += ["", "Per category: speedup over plain (mean accepted length)", "",
                  "| setting | " + " | ".join(result["rows"][with_categories[0]]["per_category"]) + " |",
                  "|---|" + "---|" * len(result["rows"][with_categories[0]]["per_category"])]
        for name in with_categories:
            cells = [f"{c['speedup']:.2f}x ({c['mean_accepted_length']:.2f})"
                     for c in result["rows"][name]["per_category"].values()]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

