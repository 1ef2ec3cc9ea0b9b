"""Runtime benchmark: plain vs EAGLE decoding with the PyTorch runtime on a prompt set (greedy), per tree setting:
tok/s (with each prompt's prefill, and without it: `decode tok/s`, what the tree tuner predicts), speedup, mean
accepted length, acceptance rate, draft/verify time split. Prints a table, writes JSON. With a GGUF of the base,
llama.cpp's plain decoding runs the same token ids in the same loop (`LLAMACPP_ROW`), and every row gets its ratio
to it.

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

BACKOFF_ROW = " +backoff"  # appended to a setting's name: the same setting with runtime.backoff
WHOLE_PROMPT_ROW = " +whole prompt"  # the same setting with its draft reading the whole prompt (no draft window)
LLAMACPP_ROW = "llama.cpp plain"  # the row of llama.cpp's greedy decoding of the same prompts (perf.llamacpp)
OTHER_PLAIN = "plain "  # + a dtype: plain decoding of the same base at another precision (BenchConfig.also_plain)


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
    llamacpp: Path | None = None  # a GGUF of the base: llama.cpp's plain decoding as one more row (perf.llamacpp)
    context: int | None = None  # prompts of about this many tokens from held-out text instead of the dataset
    also_plain: tuple[str, ...] = ()  # more plain rows: the same base at these precisions (e.g. int8 beside native)
    backoff: bool = False  # each EAGLE setting also runs with runtime.backoff (a row "<setting> +backoff")
    whole_prompt: bool = False  # each EAGLE setting also runs with draft_window 0 (a row "<setting> +whole prompt")
    reuse_prefix: bool = False  # a next turn prefills only what it adds, on each row's own cache (runtime.prefix)

    @property
    def max_seq_len(self) -> int | None:
        """Room for a long-context prompt and its answer (None: the engine's default)."""
        return self.context + self.max_tokens + 64 if self.context else None

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
        if cfg.context:
            self.prompts = context_prompts(self.tok, cfg.context, cfg.prompts or 4, cfg.chat)
        else:
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


def context_prompts(tokenizer, tokens: int, count: int, chat: bool) -> list:
    """`count` prompts of about `tokens` tokens each (with the chat template): held-out ShareGPT turns (the tuner's
    calibration set, never an evaluation set) joined until long enough, cut to size, then a request to summarise;
    prompt i starts at another turn, so the prompts differ. For how the cost of a step grows with the context."""
    from eagle_trt.datasets import Prompt, encode_prompt, load_dataset

    texts = [p.text for p in load_dataset("calibration")]
    ask = "\n\nSummarise the notes above in a few sentences."
    room = tokens - len(encode_prompt(tokenizer, ask, chat))
    out = []
    for i in range(count):
        body, n = [], 0
        for j in range(len(texts)):
            body.append(texts[(i * 7 + j) % len(texts)])
            n += len(tokenizer(body[-1], add_special_tokens=False)["input_ids"])
            if n >= room:
                break
        ids = tokenizer("\n\n".join(body), add_special_tokens=False)["input_ids"][:max(room, 0)]
        text = tokenizer.decode(ids) + ask
        out.append(Prompt(f"context-{tokens}-{i}", text, f"context {tokens}", (text,)))
    return out


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
            "suffix_proposed": 0, "suffix_accepted": 0, "steps": 0, "plain_steps": 0, "cached_prompt_tokens": 0}


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
                     "suffix_proposed": r["suffix_proposed"], "suffix_accepted": r["suffix_accepted"],
                     "steps": r["steps"], "plain_steps": r["plain_steps"],
                     "cached_prompt_tokens": r["cached_prompt_tokens"]}
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
    if LLAMACPP_ROW in out:  # another engine's numerics: its greedy output is compared, not expected equal
        for row in out.values():
            row["vs_llamacpp"] = row["tok_per_s"] / max(out[LLAMACPP_ROW]["tok_per_s"], 1e-9)
            row["decode_vs_llamacpp"] = row["decode_tok_per_s"] / max(out[LLAMACPP_ROW]["decode_tok_per_s"], 1e-9)
    return out


def _add(r: dict, token_ids: list[int], elapsed: float, stats, category: str, turn: int,
         prefill_s: float = 0.0, cached: int = 0) -> None:
    """One request's figures into its row (`stats`: our engine's GenerationStats; None for llama.cpp, which gives
    `prefill_s` and `cached` itself)."""
    r["seconds"] += elapsed
    r["cached_prompt_tokens"] += stats.cached_prompt_tokens if stats is not None else cached
    r["tokens"] += len(token_ids)
    r["outputs"].append(token_ids)
    lengths = stats.accepted_lengths if stats is not None else []
    r["prefill_s"] += stats.prefill_time_s if stats is not None else prefill_s
    if stats is not None:
        r["accepted_lengths"] += lengths
        r["drafted"] += stats.num_draft_tokens
        r["accepted"] += stats.num_accepted_draft_tokens
        r["draft_s"] += stats.draft_time_s
        r["verify_s"] += stats.verify_time_s
        r["suffix_proposed"] += stats.num_suffix_tokens
        r["suffix_accepted"] += stats.num_accepted_suffix_tokens
        r["steps"] += stats.steps
        r["plain_steps"] += stats.num_plain_steps
    for group, key in (("categories", category), ("turns", f"turn {turn}")):
        sums = r[group].setdefault(key, [0, 0.0, 0, 0])  # as _per_group reads them
        sums[0] += len(token_ids)
        sums[1] += elapsed
        sums[2] += len(lengths)
        sums[3] += sum(lengths)


def _own_caches(decoders: dict) -> dict:
    """row name -> the (base, draft) caches its requests run on: the decoder's own, or fresh ones where an earlier
    row's decoder shares its model (the +backoff and +whole prompt rows), so that each row's next turn finds its
    own last turn held (runtime.prefix)."""
    out, models = {}, set()
    for name, decoder in decoders.items():
        out[name] = None if id(decoder.base) not in models else decoder.new_caches(decoder.max_seq_len)
        models.add(id(decoder.base))
    return out


def _whole_prompt(decoder):
    """The same decoder (model, tree, caches) with its draft reading every prompt position."""
    whole = decoder.with_tree(decoder.tree)
    whole.draft_window = 0
    return whole


def run_bench(cfg: BenchConfig, echo=print, checkpoint: Path | None = None,
              progress=lambda done, total, what: None) -> dict:
    """Every setting runs each prompt in turn (interleaved, so machine noise hits all settings alike). With
    `checkpoint`, the partial result is rewritten after every prompt."""
    from eagle_trt.runtime import EagleDecoder

    from eagle_trt.tuning.calibrate import predict

    if cfg.llamacpp is not None:
        from eagle_trt.perf.llamacpp import check_llamacpp

        check_llamacpp(cfg.llamacpp)  # before tuning and loading
    items = Items(cfg)
    settings, tunings = _settings(cfg, echo, progress)
    decoders = {name: EagleDecoder.load(cfg.base, d, tree=t, device=cfg.device, dtype=cfg.dtype,
                                        draft_vocab=cfg.draft_vocab, max_seq_len=cfg.max_seq_len)
                for name, (d, t) in settings.items()}
    if cfg.backoff:
        decoders |= {name + BACKOFF_ROW: decoders[name].with_backoff() for name in settings if name != "plain"}
    if cfg.whole_prompt:
        decoders |= {name + WHOLE_PROMPT_ROW: _whole_prompt(decoders[name]) for name in settings if name != "plain"}
    for dtype in cfg.also_plain:
        decoders[OTHER_PLAIN + dtype] = EagleDecoder.load(cfg.base, None, tree="chain:1", device=cfg.device, dtype=dtype,
                                                          max_seq_len=cfg.max_seq_len)
    stop = decoders["plain"].base_spec.eos_token_ids
    for decoder in decoders.values():
        decoder.generate_all(items.encode(0, 1, []), 8, stop_token_ids=stop)  # warm-up
    llama = None
    if cfg.llamacpp is not None:
        from eagle_trt.perf.llamacpp import LlamaCpp

        llama = LlamaCpp(cfg.llamacpp, threads=torch.get_num_threads(), n_ctx=decoders["plain"].max_seq_len,
                         reuse_prefix=cfg.reuse_prefix)
        llama.generate(items.encode(0, 1, []), 8, stop)  # warm-up
        echo(f"llama.cpp {llama.version}, {llama.threads} threads: {llama.system_info}")
    echo(f"{len(items.prompts)} prompts ({len(items)} turns) x {cfg.max_tokens} tokens, settings: "
         f"{', '.join(settings)}")
    if not decoders["plain"].base.batch_invariant:
        echo("note: this engine is not batch-invariant here (a verify row may differ from a decode step in the last "
             "bits), so EAGLE matches plain decoding up to numerical near-ties"
             + ("; --reuse-prefix needs batch invariance: every prompt is prefilled whole" if cfg.reuse_prefix else ""))
    caches = _own_caches(decoders) if cfg.reuse_prefix else dict.fromkeys(decoders)
    rows = {name: _empty_row() for name in decoders} | ({LLAMACPP_ROW: _empty_row()} if llama is not None else {})
    result = {}
    order = [(i, turn) for i, turns in enumerate(items.turns) for turn in range(1, turns + 1)]
    answers: list[list[int]] = []
    for done, (i, turn) in enumerate(order):
        answers = answers if turn > 1 else []
        ids = items.encode(i, turn, answers)
        category = items.prompts[i].category
        for name, decoder in decoders.items():
            t0 = time.perf_counter()
            res = decoder.generate_all(ids, cfg.max_tokens, stop_token_ids=stop, caches=caches[name],
                                       reuse_prefix=cfg.reuse_prefix)
            _add(rows[name], res.token_ids, time.perf_counter() - t0, res.stats, category, turn)
        if llama is not None:
            run = llama.generate(ids, cfg.max_tokens, stop)
            _add(rows[LLAMACPP_ROW], run.token_ids, run.seconds, None, category, turn, prefill_s=run.prefill_s,
                 cached=run.cached_prompt_tokens)
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
                  "batch_invariant": bool(decoders["plain"].base.batch_invariant),  # EAGLE == plain bit for bit
                  "llamacpp": {"version": llama.version, "system_info": llama.system_info,
                               "gguf": str(cfg.llamacpp)} if llama is not None else None}
        if checkpoint is not None:
            checkpoint.write_text(json.dumps(result, indent=2))
        if (done + 1) % 10 == 0 or done + 1 == len(order):
            taus = ", ".join(f"{n} {r['mean_accepted_length']:.2f}" for n, r in result["rows"].items()
                             if n in decoders and n != "plain" and not other_numerics(n))
            echo(f"  {done + 1}/{len(order)} turns; tau: {taus}")
    if llama is not None:
        llama.close()
    return result


def other_numerics(name: str) -> bool:
    """A row whose arithmetic is not the plain row's (llama.cpp, another precision): its output is compared, not
    expected equal."""
    return name == LLAMACPP_ROW or name.startswith(OTHER_PLAIN)


def _identical(name: str, r: dict, n: int) -> str:
    if other_numerics(name):  # another arithmetic: how often its greedy output is ours, not a check
        return f"- ({r['identical_prompts']}/{n} equal to ours)"
    return f"{'yes' if r['identical_to_plain'] else 'NO'} ({r['identical_prompts']}/{n})"


def format_table(result: dict) -> str:
    llama = LLAMACPP_ROW in result["rows"]
    lines = ["| setting | tok/s | decode tok/s | predicted tok/s | speedup | mean accepted length | acceptance rate | "
             "draft s | verify s | identical |" + (" vs llama.cpp (decode) |" if llama else ""),
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if llama else "")]
    n = result.get("prompts_total", 0)
    for name, r in result["rows"].items():
        guess = f"{r['predicted_tok_per_s']:.1f}" if "predicted_tok_per_s" in r else "-"
        decode = f"{r['decode_tok_per_s']:.1f}" if "decode_tok_per_s" in r else "-"
        label = name + (f" ({100 * r['plain_steps'] / r['steps']:.0f} % plain steps)" if r.get("plain_steps") else "")
        lines.append(f"| {label} | {r['tok_per_s']:.1f} | {decode} | {guess} | {r['speedup']:.2f}x | "
                     f"{r['mean_accepted_length']:.2f} | {r['acceptance_rate']:.3f} | {r['draft_s']:.1f} | "
                     f"{r['verify_s']:.1f} | {_identical(name, r, n)} |"
                     + (f" {r['vs_llamacpp']:.2f}x ({r['decode_vs_llamacpp']:.2f}x) |" if llama else ""))
    cached = {name: r["cached_prompt_tokens"] for name, r in result["rows"].items() if r.get("cached_prompt_tokens")}
    if cached:
        lines += ["", "prompt tokens not prefilled (--reuse-prefix: a next turn's conversation so far, held by the "
                  "last turn's cache): " + ", ".join(f"{name} {n}" for name, n in cached.items())]
    for key, title in (("per_turn", "Per turn"), ("per_category", "Per category")):
        named = [name for name, r in result["rows"].items() if key in r and name != "plain"
                 and not other_numerics(name)]
        if not named:
            continue
        groups = list(result["rows"][named[0]][key])
        lines += ["", f"{title}: speedup over plain (mean accepted length)", "",
                  "| setting | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
        for name in named:
            cells = [f"{c['speedup']:.2f}x ({c['mean_accepted_length']:.2f})" for c in result["rows"][name][key].values()]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)



def format_contexts(results: dict[int, dict]) -> str:
    """The cost growth table of `bench --contexts`: per context length, each setting's tok/s, decode tok/s and ms
    per generated token after prefill, its speedup over plain and its ratio to llama.cpp (if run)."""
    lines = ["| context | setting | tok/s | decode tok/s | decode ms/token | speedup | vs llama.cpp (decode) |",
             "|---|---|---|---|---|---|---|"]
    for context, result in results.items():
        for name, r in result["rows"].items():
            versus = f"{r['vs_llamacpp']:.2f}x ({r['decode_vs_llamacpp']:.2f}x)" if "vs_llamacpp" in r else "-"
            lines.append(f"| ~{context} | {name} | {r['tok_per_s']:.1f} | {r['decode_tok_per_s']:.1f} | "
                         f"{1000.0 / max(r['decode_tok_per_s'], 1e-9):.1f} | {r['speedup']:.2f}x | {versus} |")
    return "\n".join(lines)
