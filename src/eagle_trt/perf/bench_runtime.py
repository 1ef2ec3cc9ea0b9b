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

from eagle_trt.errors import EagleTrtError
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
    turns: str = "first"  # "first" | "both": MT-bench as defined (turn 2 sees the model's own first answer)
    tune_budget: float = TUNE_BUDGET_S  # seconds `auto` may measure per draft (when not cached)

    @property
    def drafts(self) -> tuple[Path, ...]:
        if self.draft is None:
            return ()
        return tuple(self.draft) if isinstance(self.draft, (tuple, list)) else (self.draft,)


class Items:
    """The bench's prompts as (prompt, turn) items, encoded on demand: a second turn is the conversation with the
    model's own first answer (the plain row's greedy output, which every identical row shares)."""

    def __init__(self, cfg: BenchConfig):
        from transformers import AutoTokenizer

        from eagle_trt.datasets import load_dataset, take_prompts

        self.cfg = cfg
        self.tok = AutoTokenizer.from_pretrained(cfg.base)
        self.prompts = take_prompts(load_dataset(cfg.dataset), cfg.prompts)
        if cfg.turns == "both" and not cfg.chat:
            raise EagleTrtError("--turns both needs the chat template (a second turn is a conversation)",
                                "drop --no-chat, or pass --turns first")
        self.turns = [min(len(p.turns) or 1, 2 if cfg.turns == "both" else 1) for p in self.prompts]

    def __len__(self) -> int:
        return sum(self.turns)

    def encode(self, i: int, turn: int, answers: list[list[int]]) -> list[int]:
        from eagle_trt.chat import encode_conversation
        from eagle_trt.datasets import encode_prompt

        prompt = self.prompts[i]
        if turn == 1:
            return encode_prompt(self.tok, prompt.text, self.cfg.chat)
        texts = [self.tok.decode(a, skip_special_tokens=True) for a in answers]
        return encode_conversation(self.tok, list(prompt.turns[:turn]), texts)


def _settings(cfg: BenchConfig, echo, progress) -> tuple[dict[str, tuple[Path | None, str]], dict[Path, dict]]:
    """(row name -> (draft, concrete tree), draft -> its `--tree auto` tuning). With several drafts each row is
    prefixed by the draft's format (or its dir); `auto` rows are named `auto=<the tree it chose>`."""
    from eagle_trt.tuning.calibrate import TuneRequest, tune
    from eagle_trt.tree_config import AUTO
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
        chosen = tunings[draft].tree if draft in tunings else None
        for tree in cfg.trees:
            if tree != AUTO and tree == chosen:  # the auto row measures it already: once is enough
                echo(f"{tree}: the tree auto chose, measured once as auto={tree}")
                continue
            name = f"auto={chosen}" if tree == AUTO else tree
            out[f"{label} {name}" if len(drafts) > 1 else name] = (draft, chosen if tree == AUTO else tree)
    return out, tunings


def _empty_row() -> dict:
    return {"tokens": 0, "seconds": 0.0, "prefill_s": 0.0, "accepted_lengths": [], "drafted": 0, "accepted": 0,
            "draft_s": 0.0, "verify_s": 0.0, "outputs": [], "categories": {}, "turns": {},
            "suffix_proposed": 0, "suffix_accepted": 0}


def _per_group(categories: dict[str, list], plain: dict[str, list]) -> dict[str, dict]:
    """category (or turn) -> tok/s, speedup over plain and mean accepted length, from [tokens, seconds, verify
    steps, tokens accepted by them] sums."""
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
                     "draft_s": r["draft_s"], "verify_s": r["verify_s"], "prompts": len(r["outputs"]),
                     "suffix_proposed": r["suffix_proposed"], "suffix_accepted": r["suffix_accepted"]}
        if len(r["categories"]) > 1:
            out[name]["per_category"] = _per_group(r["categories"], rows["plain"]["categories"])
        if len(r["turns"]) > 1:
            out[name]["per_turn"] = _per_group(r["turns"], rows["plain"]["turns"])
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

    items = Items(cfg)
    settings, tunings = _settings(cfg, echo, progress)
    decoders = {name: EagleDecoder.load(cfg.base, d, tree=t, device=cfg.device, dtype=cfg.dtype,
                                      draft_vocab=cfg.draft_vocab) for name, (d, t) in settings.items()}
    stop = decoders["plain"].base_spec.eos_token_ids
    for decoder in decoders.values():
        decoder.generate_all(items.encode(0, 1, []), 8, stop_token_ids=stop)  # warm-up
    echo(f"{len(items.prompts)} prompts ({len(items)} turns) x {cfg.max_tokens} tokens, settings: "
         f"{', '.join(settings)}")
    if not decoders["plain"].base.batch_invariant:
        echo("note: this engine is not batch-invariant here (a verify row may differ from a decode step in the last "
             "bits), so EAGLE matches plain decoding up to numerical near-ties")
    rows = {name: _empty_row() for name in settings}
    result = {}
    order = [(i, turn) for i, turns in enumerate(items.turns) for turn in range(1, turns + 1)]
    answers: list[list[int]] = []
    for done, (i, turn) in enumerate(order):
        answers = answers if turn > 1 else []
        ids = items.encode(i, turn, answers)
        category = items.prompts[i].category
        for name, decoder in decoders.items():
            t0 = time.perf_counter()
            res = decoder.generate_all(ids, cfg.max_tokens, stop_token_ids=stop)
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
            r["suffix_proposed"] += res.stats.num_suffix_tokens
            r["suffix_accepted"] += res.stats.num_accepted_suffix_tokens
            for group, key in (("categories", category), ("turns", f"turn {turn}")):
                sums = r[group].setdefault(key, [0, 0.0, 0, 0])  # as _per_group reads them
                sums[0] += len(res.token_ids)
                sums[1] += elapsed
                sums[2] += len(res.stats.accepted_lengths)
                sums[3] += sum(res.stats.accepted_lengths)
        answers = answers + [rows["plain"]["outputs"][-1]]
        summary = _summarise(rows)
        for name, (draft, tree) in settings.items():
            guess = predict(tunings[draft], tree) if draft in tunings else None
            if guess is not None:
                summary[name]["predicted_tok_per_s"] = guess.tok_per_s
                summary[name]["predicted_accepted_length"] = guess.accepted_length
            elif tunings and draft is None:
                summary[name]["predicted_tok_per_s"] = 1000.0 / next(iter(tunings.values())).measured_plain_ms
        result = {"config": {k: str(v) for k, v in cfg.__dict__.items()}, "rows": summary,
                  "tunings": {str(d): t.chosen for d, t in tunings.items()},
                  "prompts_done": done + 1, "prompts_total": len(order),
                  "machine": {"platform": platform.platform(), "threads": torch.get_num_threads()},
                  "batch_invariant": bool(decoders["plain"].base.batch_invariant)}  # EAGLE == plain bit for bit
        if checkpoint is not None:
            checkpoint.write_text(json.dumps(result, indent=2))
        if (done + 1) % 10 == 0 or done + 1 == len(order):
            taus = ", ".join(f"{n} {r['mean_accepted_length']:.2f}" for n, r in result["rows"].items() if n != "plain")
            echo(f"  {done + 1}/{len(order)} turns; tau: {taus}")
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
    for key, title in (("per_turn", "Per turn"), ("per_category", "Per category")):
        named = [name for name, r in result["rows"].items() if key in r and name != "plain"]
        if not named:
            continue
        groups = list(result["rows"][named[0]][key])
        lines += ["", f"{title}: speedup over plain (mean accepted length)", "",
                  "| setting | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
        for name in named:
            cells = [f"{c['speedup']:.2f}x ({c['mean_accepted_length']:.2f})" for c in result["rows"][name][key].values()]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

