"""`--tree auto`, the measurements: the cost table of this machine (tuning/profile.py) and the draft's acceptance by depth
and rank on calibration prompts (held-out ShareGPT first turns; never MT-bench or HumanEval), from which
tuning/tree_tuner.py ranks the static trees; then its first few, its best chain and a few EAGLE-2 dynamic trees run on
the same prompts, in turn prompt by prompt (one tree of each batch runs in the next, bridging their minutes), and the
fastest measured is the choice (tree_tuner.choose_tree: suffix candidates kept within the noise, and of trees this
close the one that verifies fewer drafted rows). The result is
cached per (base, draft, device, dtype, draft vocabulary, threads) under $EAGLE_TRT_CACHE/tuning/, so only the first
run pays (~2 min for SmolLM2 on 2 CPU cores, up to 10 for a new draft).

Tuning never surprises: `build`, `bench`, `demo` and `eagle-trt tune` measure with a progress callback and within a
time budget (candidates past it are skipped and said); interactive commands (`generate`) never measure: they take
the cached choice or `preset_tree`, and say how to tune (`tune_command`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch

from eagle_trt.tree_config import (
    AUTO,
    DEFAULT_RUNTIME_TREE,
    Suffix,
    TreeConfig,
    resolve,
)
from eagle_trt.tuning import TUNE_BUDGET_S
from eagle_trt.tuning.acceptance import (
    PROBE_DEPTH,
    PROBE_WIDTH,
    AcceptanceCounter,
    probe_tree,
)
from eagle_trt.tuning.profile import ProfileConfig, profile_decoder
from eagle_trt.tuning.tree_tuner import (
    CostModel,
    TreeChoice,
    choose_tree,
    dynamic_step_ms,
    ranked_static_trees,
)

TUNER_VERSION = 9  # bump when what is measured or how it is scored changes: old cache entries are ignored
STATIC_MEASURED = 3  # the static trees the cost model ranks first, run on the calibration prompts (+ its best chain)
DYNAMIC_GRID = ("dynamic:3,2,4", "dynamic:4,2,6", "dynamic:4,4,8", "dynamic:5,4,12", "dynamic:6,8,16")
# what interactive commands use untuned: on a CPU the tuner chooses small trees (dynamic:3,2,4 on this 2-core
# machine, int8 and fp32: docs/results/2026-11-25-draft-batch); on a GPU the engine's default
PRESET_TREES = {"cpu": "dynamic:3,2,4", "cuda": DEFAULT_RUNTIME_TREE}
# suffix-automaton candidates (runtime/suffix.py) tried on the SUFFIX_BASES fastest drafted trees: (min match, max
# tokens). Two bases, not one: drafted trees often lie within a few per cent of each other, about one run's noise,
# and which of them takes the text's repeats best decides (2026-11-28: a static tree 2.6 % ahead of chain:1 on
# calibration prompts ran 1.04x on HumanEval, chain:1+suffix:4,8 1.21x)
SUFFIX_GRID = ((2, 6), (4, 8))
SUFFIX_BASES = 2
# profile, acceptance, plain, then the runs
TUNE_STAGES = 3 + len(DYNAMIC_GRID) + STATIC_MEASURED + 2 + SUFFIX_BASES * len(SUFFIX_GRID)


@dataclass(frozen=True)
class TuneRequest:
    base: Path
    draft: Path
    device: str = "cpu"
    dtype: str = "float32"
    draft_vocab: int | None = None
    prompts: int = 16  # calibration prompts
    max_tokens: int = 48
    max_nodes: int = 32
    budget_s: float = TUNE_BUDGET_S  # not part of the cache key: it bounds how long, not what is measured


def _prompts(base: Path, n: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    from eagle_trt.datasets import encode_prompt, load_dataset

    tok = AutoTokenizer.from_pretrained(base)
    return [encode_prompt(tok, p.text, chat=bool(getattr(tok, "chat_template", None)))[-384:]
            for p in load_dataset("calibration")[:n]]


def _run(decoder, prompts, max_tokens) -> tuple[float, float]:
    """(mean accepted length, milliseconds per verify step) over the prompts (greedy; prefill excluded)."""
    return _interleaved([decoder], prompts, max_tokens)[0]


def _interleaved(decoders, prompts, max_tokens) -> list[tuple[float, float]]:
    """(mean accepted length, milliseconds per verify step) of each engine, measured prompt by prompt in turn (a, b,
    c, a, b, c, ...), so that a machine slowing down during the run moves all of them alike (greedy; prefill
    excluded)."""
    steps, tokens, seconds = [0] * len(decoders), [0] * len(decoders), [0.0] * len(decoders)
    for ids in prompts:
        for i, decoder in enumerate(decoders):
            t0 = time.perf_counter()
            stats = decoder.generate_all(ids, max_tokens, stop_token_ids=decoder.base_spec.eos_token_ids).stats
            seconds[i] += time.perf_counter() - t0 - stats.prefill_time_s
            steps[i] += len(stats.accepted_lengths)
            tokens[i] += sum(stats.accepted_lengths)
    return [(t / max(n, 1), 1000.0 * sec / max(n, 1)) for n, t, sec in zip(steps, tokens, seconds)]


def _code_digest() -> str:
    """The runtime's, the native CPU kernel's and the tuner's source: a change to any can move every cost, so it
    re-tunes."""
    here = Path(__file__).resolve().parent  # the tuning package
    kernels = here.parent / "kernels"
    files = (sorted((here.parent / "runtime").glob("*.py")) + sorted(here.glob("*.py"))
             + sorted(kernels.glob("cpu_*.c")) + sorted(kernels.glob("cpu_*.h")))
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def cache_key(req: TuneRequest) -> str:
    parts = [TUNER_VERSION, _code_digest(), req.device, req.dtype, req.draft_vocab, req.prompts, req.max_tokens,
             req.max_nodes, torch.get_num_threads(), platform.machine(), platform.processor(), torch.__version__]
    for d in (req.base, req.draft):
        for f in sorted(Path(d).glob("*")):
            if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".gguf"):
                st = f.stat()
                parts += [str(f.resolve()), st.st_size, int(st.st_mtime)]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class TuneResult:
    """What `tune` measured and chose; the tuning cache stores it as JSON (`to_dict` / `from_dict`)."""

    chosen: dict  # TreeChoice.to_dict() of the fastest tree measured: "tree", predicted length / step / tok/s
    candidates: list[dict]  # every tree measured: TreeChoice.to_dict() + "measured_tok_per_s"
    acceptance: list[list[float]]  # [PROBE_DEPTH][PROBE_WIDTH]: the draft's acceptance by depth and rank
    context: float  # mean tokens in context the costs were read at
    profile: dict  # the cost table (tuning/profile.py)
    overhead_ms: float  # per verify step, what the forwards do not explain
    plain_overhead_ms: float  # the same for plain decoding
    measured_plain_ms: float  # plain decoding's ms per token on the calibration prompts
    seconds: float  # how long tuning took
    skipped: list[str]  # candidates the time budget left out
    budget_s: float
    request: dict  # the TuneRequest, as strings
    tuner_version: int

    @property
    def tree(self) -> str:
        """The chosen --tree value."""
        return self.chosen["tree"]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TuneResult:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


def cache_path(req: TuneRequest) -> Path:
    from eagle_trt.demo_model import cache_root

    return cache_root() / "tuning" / f"{cache_key(req)}.json"


def cached_tuning(req: TuneRequest) -> TuneResult | None:
    """The stored result for this request on this machine and code, or None (nothing is measured)."""
    path = cache_path(req)
    return TuneResult.from_dict(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else None


def tune(req: TuneRequest, echo=lambda msg: None, use_cache: bool = True,
         progress=lambda done, total, what: None) -> TuneResult:
    """Measure (or read from the cache) and choose.
    `progress(done, total, what)` after each of the TUNE_STAGES stages; candidates not started within
    req.budget_s are skipped (listed in "skipped"), the first dynamic tree always runs."""
    from eagle_trt.runtime import EagleDecoder

    path = cache_path(req)
    if use_cache and path.exists():
        echo(f"--tree auto: cached tuning {path}")
        return TuneResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
    t0 = time.time()
    done = 0

    def advance(what: str):
        nonlocal done
        done += 1
        progress(done, TUNE_STAGES, what)

    prompts = _prompts(req.base, req.prompts)
    echo(f"--tree auto: measuring costs and acceptance on {len(prompts)} calibration prompts, at most "
         f"~{req.budget_s:.0f} s (once per machine, then cached)")
    probe = EagleDecoder.load(req.base, req.draft, tree=TreeConfig("static", tree=probe_tree()), device=req.device,
                              dtype=req.dtype, draft_vocab=req.draft_vocab)
    profile = profile_decoder(probe, ProfileConfig(contexts=(128, 512)), echo=echo)
    advance("cost table")
    counter = AcceptanceCounter(PROBE_DEPTH, PROBE_WIDTH)
    probe.on_verify = counter
    _run(probe, prompts, req.max_tokens)
    probe.on_verify = None
    accept = counter.table()
    advance("acceptance")
    context = sum(len(p) for p in prompts) / len(prompts) + req.max_tokens / 2
    bare = CostModel.from_profile(profile, int(context))
    skipped: list[str] = []

    def in_budget(arg: str, first: bool = False) -> bool:
        if first or time.time() - t0 < req.budget_s:
            return True
        skipped.append(arg)
        advance(f"{arg} skipped")
        return False

    # plain decoding and the dynamic trees in turn, prompt by prompt (so are the statics below, and each tree with
    # its suffix candidates): this machine's speed moves 10-30 % between minutes, more than the trees differ
    dynamic = [arg for i, arg in enumerate(DYNAMIC_GRID) if in_budget(arg, first=i == 0)]
    runs = _interleaved([probe.with_tree("chain:1", speculative=False)] + [probe.with_tree(arg) for arg in dynamic],
                        prompts, req.max_tokens)
    plain_ms = runs[0][1]
    advance("plain decoding")
    measured = dict(zip(dynamic, runs[1:]))  # arg -> (τ, ms/step)
    for arg in dynamic:
        advance(arg)
    # what the forwards do not explain (host work per step), from the measured runs
    overhead = sorted(ms - dynamic_step_ms(resolve(arg), bare, tau) for arg, (tau, ms) in measured.items())
    cost = CostModel.from_profile(profile, int(context), overhead=max(overhead[len(overhead) // 2], 0.0),
                                  plain_overhead=max(plain_ms - bare.plain_step(), 0.0))
    candidates, measured_tps = [], {}
    ranked = ranked_static_trees(accept, cost, req.max_nodes)
    best_chain = next(c for c in ranked if c.arg.startswith("chain:"))  # the cheapest trees to draft
    # and one draft token always: where an extra verify row costs much of a decode step (the native CPU forward) it
    # is the tree that pays, and the cost model, fitted on forwards alone, ranks it low
    one_token = next(c for c in ranked if c.arg == "chain:1")
    statics = list(dict.fromkeys(ranked[:STATIC_MEASURED] + [best_chain, one_token]))
    for _ in range(STATIC_MEASURED + 2 - len(statics)):
        advance("")  # the chains were among the first: a run fewer
    runnable = [static for static in statics if in_budget(static.arg)]
    # in turn with the fastest dynamic tree again, which bridges the two batches: their minutes differ by up to a
    # third here (2026-11-28: dynamic:3,2,4 16 % ahead of chain:3 in one tuning, 20 % behind in the two before)
    bridge = max(measured, key=lambda arg: measured[arg][0] / measured[arg][1])
    drift = 1.0
    if runnable:
        runs = _interleaved([probe.with_tree(bridge)] + [probe.with_tree(s.arg) for s in runnable], prompts,
                            req.max_tokens)
        (b_tau, b_ms), runs = runs[0], runs[1:]
        drift = (b_tau / b_ms) / (measured[bridge][0] / measured[bridge][1])
        echo(f"  {bridge} again, in turn with the static trees: {drift:.3f}x its first rate (the machine's drift; "
             "plain decoding's and the dynamic trees' rates are scaled by it)")
    plain_ms /= drift
    measured = {arg: (tau, ms / drift) for arg, (tau, ms) in measured.items()}
    for static, (s_tau, s_ms) in zip(runnable, runs):
        advance(static.arg)
        candidates.append(static)
        measured_tps[static.arg] = 1000.0 * s_tau / s_ms
        echo(f"  {static.arg}: accepted length {s_tau:.2f} ({static.accepted_length:.2f} predicted), "
             f"{measured_tps[static.arg]:.1f} tok/s measured, {static.tok_per_s:.1f} predicted")
    for arg, (tau, ms) in measured.items():
        candidates.append(TreeChoice(arg, tau, dynamic_step_ms(resolve(arg), cost, tau), cost.plain_step()))
        measured_tps[arg] = 1000.0 * tau / ms
        echo(f"  {arg}: accepted length {tau:.2f}, {measured_tps[arg]:.1f} tok/s measured, "
             f"{candidates[-1].tok_per_s:.1f} predicted")
    # each of the fastest drafted trees with the text's own repeats merged in: measured in turn with that tree on
    # each prompt and scored by that ratio (no cost model for proposals; run after the others, a separate run would
    # carry whatever the machine did meanwhile)
    drafted_trees = sorted(candidates, key=lambda c: -measured_tps[c.arg])[:SUFFIX_BASES]
    for _ in range((SUFFIX_BASES - len(drafted_trees)) * len(SUFFIX_GRID)):
        advance("")  # fewer drafted trees than bases: runs fewer
    for drafted in drafted_trees:
        suffixed = [drafted.arg + Suffix(m, t).to_arg() for m, t in SUFFIX_GRID]
        suffixed = [arg for arg in suffixed if in_budget(arg)]
        if not suffixed:
            continue
        runs = _interleaved([probe.with_tree(arg) for arg in [drafted.arg] + suffixed], prompts, req.max_tokens)
        drafted_tps = runs[0][0] / max(runs[0][1], 1e-9)
        for arg, (tau, ms) in zip(suffixed, runs[1:]):
            advance(arg)
            ratio = tau / max(ms, 1e-9) / max(drafted_tps, 1e-9)
            measured_tps[arg] = measured_tps[drafted.arg] * ratio
            candidates.append(TreeChoice(arg, tau, 1000.0 * tau / measured_tps[arg], drafted.plain_ms))
            echo(f"  {arg}: accepted length {tau:.2f}, {ratio:.3f}x {drafted.arg} measured in turn with it "
                 f"({runs[0][0]:.2f})")
    # the cost model ranks the static trees; measurements on the calibration prompts pick between its first few and
    # the dynamic trees (its step costs are within a few per cent of each other, about the model's error)
    # speedups against the plain decoding measured on the same prompts, not the cost model's plain step
    candidates = [replace(c, plain_ms=plain_ms) for c in candidates]
    chosen = next(c for c in candidates if c.arg == choose_tree(measured_tps))
    fastest = max(measured_tps, key=measured_tps.get)
    if chosen.arg != fastest:
        echo(f"--tree auto: {chosen.arg} kept over {fastest} ({measured_tps[chosen.arg] / measured_tps[fastest]:.3f}x "
             f"of it, within the calibration's spread): suffix candidates pay where text repeats (calibration prompts "
             f"rarely do), and of trees this close the one that verifies fewer drafted rows")
    if measured_tps[chosen.arg] < 1000.0 / plain_ms:
        echo(f"--tree auto: no tree beats plain decoding here (best {measured_tps[chosen.arg]:.1f} tok/s, plain "
             f"{1000.0 / plain_ms:.1f} tok/s): speculation costs on this engine and machine; the backoff (bench "
             "--backoff, build --backoff on) runs plain steps where they are faster")
    result = TuneResult(
        chosen=chosen.to_dict(),
        candidates=[{**c.to_dict(), "measured_tok_per_s": round(measured_tps[c.arg], 3)} for c in candidates],
        acceptance=accept, context=context, profile=profile, overhead_ms=cost.overhead,
        plain_overhead_ms=cost.plain_overhead, measured_plain_ms=plain_ms, seconds=round(time.time() - t0, 1),
        skipped=skipped, budget_s=req.budget_s, request={k: str(v) for k, v in req.__dict__.items()},
        tuner_version=TUNER_VERSION)
    echo(f"--tree auto: {chosen.arg} ({measured_tps[chosen.arg]:.1f} tok/s measured; predicted accepted length "
         f"{chosen.accepted_length:.2f}, {chosen.tok_per_s:.1f} tok/s, {chosen.speedup:.2f}x) in {result.seconds:.0f} s")
    if skipped:
        echo(f"--tree auto: the {req.budget_s:.0f} s budget ran out; not measured: {', '.join(skipped)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(result.to_dict(), indent=2), encoding="utf-8")
    tmp.replace(path)
    return result


def predict(result: TuneResult, arg: str) -> TreeChoice | None:
    """The tuner's prediction for another tree setting, from a tune() result (None if it cannot tell)."""
    from eagle_trt.tuning.tree_tuner import static_step_ms

    cost = CostModel.from_profile(result.profile, int(result.context), result.overhead_ms, result.plain_overhead_ms)
    for c in result.candidates:
        if c["tree"] == arg:
            return TreeChoice(arg, c["predicted_accepted_length"], c["predicted_step_ms"], cost.plain_step())
    cfg = resolve(arg)
    if cfg.kind == "dynamic" or cfg.suffix is not None:  # measured only: what the text repeats is not modelled
        return None
    accept = result.acceptance
    value, stack = 1.0, {(): 1.0}
    for choice in cfg.tree.choices:  # parents come first
        if len(choice) > len(accept) or choice[-1] >= len(accept[0]):
            return None
        stack[choice] = stack[choice[:-1]] * accept[len(choice) - 1][choice[-1]]
        value += stack[choice]
    return TreeChoice(arg, value, static_step_ms(cfg.tree, cost, value), cost.plain_step())


def tune_command(req: TuneRequest) -> str:
    """The `eagle-trt tune` line that fills the cache entry `req` reads."""
    line = f"eagle-trt tune --base {req.base} --draft {req.draft}"
    for flag, value, default in (("--device", req.device, "cpu"), ("--dtype", req.dtype, "float32"),
                                 ("--draft-vocab", req.draft_vocab, None)):
        if value != default:
            line += f" {flag} {value}"
    return line


def preset_tree(tree: str, base: Path, draft: Path | None, echo=lambda msg: None,
                **load) -> tuple[str, TuneResult | None]:
    """For interactive commands, which never measure: (the concrete --tree value, the cached tuning or None).
    `auto` takes the cached choice if this machine has tuned this pair, else the engine's default tree, and says
    how to tune."""
    if tree != AUTO:
        return tree, None
    if draft is None:
        return "chain:1", None
    req = TuneRequest(Path(base), Path(draft), **load)
    result = cached_tuning(req)
    if result is not None:
        echo(f"--tree auto: {result.tree} (tuned on this machine, {cache_path(req)})")
        return result.tree, result
    preset = PRESET_TREES.get(req.device, DEFAULT_RUNTIME_TREE)
    echo(f"--tree auto: not tuned on this machine yet; using the preset {preset}. To tune once (a few minutes, "
         f"cached): {tune_command(req)}")
    return preset, None


def tuned_tree(base: Path, draft: Path | None, device: str, dtype: str, draft_vocab: int | None,
               echo=lambda msg: None, threads: int | None = None, progress=lambda done, total, what: None,
               budget_s: float = TUNE_BUDGET_S) -> dict:
    """Build options for `--tree auto` on our runtime: {"tree": the tuned tree, "tree_tuning": what the bundle
    records}. `dtype`: the bundle's (resolved); `threads`: the CPU threads the served engine will have (costs
    measured at another count mislead the tuner)."""
    if draft is None:
        return {}
    before = torch.get_num_threads()
    if threads and device == "cpu":
        torch.set_num_threads(threads)
    try:
        result = tune(TuneRequest(Path(base), Path(draft), device=device, dtype=dtype, draft_vocab=draft_vocab,
                                  budget_s=budget_s), echo, progress=progress)
    finally:
        torch.set_num_threads(before)
    return {"tree": result.tree, "tree_tuning": result.chosen | {"dtype": dtype, "tuned_in_s": result.seconds,
                                                                 "threads": threads or before}}
