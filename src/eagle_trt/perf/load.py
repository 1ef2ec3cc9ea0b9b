"""`eagle-trt perf load`: eagle_model and base_model under concurrent load. AIPerf runs each model at each
concurrency level (1, 2, 4, 8 by default) on the same prompts, greedy, streaming; `mixed` also runs both models at
once, each at the level (what a server taking both kinds of traffic sees). Per run: p50/p99 request latency, p50
time to first token, output tokens/s over the run, and eagle/base ratios; written as load.json and load.md.

With `rounds` > 1 every level runs that many times, the two models in turn and the order flipped each round (so a
machine that speeds up or slows down over minutes weighs on both alike); a level's figures are the medians over its
rounds and its ratio the ratio of those medians, with each round's own ratio beside it. From 3 rounds on a level
also gets a 95 % interval for its eagle/base ratio: the rounds are pairs (both models on the same prompts minutes
apart), so a paired t-interval over the rounds' log ratios, around their geometric mean; its verdict says whether
the rounds resolve a difference (`faster`, `slower`) or not (`tie`: a single round moved by more than the models
differ; run more rounds to tell them apart)."""

from __future__ import annotations

import json
import math
import time
from statistics import fmean, median, stdev
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.engines import get
from eagle_trt.errors import EagleTrtError
from eagle_trt.perf.aiperf_run import RunResult, run_aiperf
from eagle_trt.datasets import load_dataset, take_prompts, write_aiperf_input
from eagle_trt.perf.run import MODELS, bundle_server

DEFAULT_LEVELS = (1, 2, 4, 8)
INTERVAL_MIN_ROUNDS = 3  # fewer paired rounds give no interval worth printing (2 rounds: t = 12.7)
# Student's t, two-sided 95 %, by degrees of freedom 1..30 (rounds - 1); past 30 t(30), a little wide
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


@dataclass(frozen=True)
class LoadRequest:
    bundle: Path
    url: str | None = None
    dataset: str = "mt-bench"
    levels: tuple[int, ...] = DEFAULT_LEVELS
    requests_per_stream: int = 2  # requests per concurrent stream: level 8 sends 16
    max_tokens: int = 64
    mixed: bool = False
    out_dir: Path | None = None
    rounds: int = 1  # runs per level and model, in turn


def run_load(req: LoadRequest, echo=print) -> dict:
    if not req.levels or min(req.levels) < 1 or min(req.requests_per_stream, req.max_tokens, req.rounds) < 1:
        raise EagleTrtError(f"invalid load settings: levels {list(req.levels)}, requests per stream "
                            f"{req.requests_per_stream}, max tokens {req.max_tokens}, rounds {req.rounds}",
                            "levels, requests per stream, max tokens and rounds must be >= 1")
    spec = BuildSpec.load(req.bundle)
    prompts = load_dataset(req.dataset)
    out_dir = req.out_dir or req.bundle / "perf"
    run_dir = out_dir / "load" / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    with bundle_server(req, echo) as (url, _):
        for level in req.levels:
            n = level * req.requests_per_stream
            if n > len(prompts):
                raise EagleTrtError(f"concurrency {level} x {req.requests_per_stream} requests needs {n} prompts; "
                                    f"{req.dataset} has {len(prompts)}", "lower --requests-per-stream or --concurrency")
            input_file = write_aiperf_input(take_prompts(prompts, n), run_dir / f"c{level}.prompts.jsonl",
                                            req.max_tokens)

            def one(model, tag, level=level, n=n, input_file=input_file):
                return run_aiperf(model, url, input_file, spec.base.path, n, min(level, 2), run_dir / f"{tag}-{model}",
                                  run_dir / f"{tag}-{model}.log", cumulative=get(spec.engine).cumulative_text,
                                  perf_metrics=get(spec.engine).acceptance_figures(spec), concurrency=level)

            for rnd in range(req.rounds):
                tag = f"c{level}" if req.rounds == 1 else f"c{level}-r{rnd}"
                for model in MODELS if rnd % 2 == 0 else MODELS[::-1]:
                    echo(f"AIPerf: {model} at concurrency {level}, {n} requests x {req.max_tokens} tokens"
                         f"{'' if req.rounds == 1 else f', round {rnd + 1}/{req.rounds}'} ...")
                    rows.append(_row(one(model, tag), level, "alone", rnd))
                if req.mixed:
                    echo(f"AIPerf: both models at once, each at concurrency {level} ...")
                    with ThreadPoolExecutor(len(MODELS)) as pool:
                        runs = list(pool.map(lambda m, tag=tag: one(m, f"{tag}-mixed"), MODELS))
                    rows += [_row(r, level, "mixed", rnd) for r in runs]
    report = {"settings": {"dataset": req.dataset, "levels": list(req.levels), "max_tokens": req.max_tokens,
                           "requests_per_stream": req.requests_per_stream, "rounds": req.rounds, "mixed": req.mixed,
                           "engine": spec.engine,
                           "tree": spec.tree.label(), "dtype": spec.dtype, "device": spec.device,
                           "run_dir": str(run_dir)} | get(spec.engine).load_settings(req.bundle),
              "rows": rows, "ratios": _ratios(rows)}
    (out_dir / "load.json").write_text(json.dumps(report, indent=2))
    (out_dir / "load.md").write_text(load_table(report) + "\n")
    return report


def _row(run: RunResult, level: int, mode: str, rnd: int = 0) -> dict:
    s = run.summary
    latency, ttft = s.get("request_latency") or {}, s.get("time_to_first_token") or {}
    return {"model": run.model, "concurrency": level, "mode": mode, "round": rnd, "requests": len(run.requests),
            "latency_p50_ms": latency.get("p50"), "latency_p99_ms": latency.get("p99"),
            "ttft_p50_ms": ttft.get("p50"),
            "output_tokens_per_s": (s.get("output_token_throughput") or {}).get("avg"),
            "texts": [r.text for r in run.requests]}


def _ratios(rows: list[dict]) -> list[dict]:
    """eagle/base per (level, mode) over its rounds: each model's median tokens/s and p50/p99 latency, the
    throughput ratio of the medians (> 1: EAGLE serves more), each round's own ratio, the p50 latency ratio (< 1:
    faster), and whether the greedy texts were identical prompt for prompt in every round."""
    out = []
    for level, mode in dict.fromkeys((r["concurrency"], r["mode"]) for r in rows):
        runs = {m: {r.get("round", 0): r for r in rows if (r["concurrency"], r["mode"], r["model"]) == (level, mode, m)}
                for m in ("eagle_model", "base_model")}
        eagle, base = runs["eagle_model"], runs["base_model"]
        both = sorted(set(eagle) & set(base))
        if not both or not all(base[i]["output_tokens_per_s"] and base[i]["latency_p50_ms"] for i in both):
            continue
        med = {name: {key: median([run[i][key] for i in both]) for key in
                      ("output_tokens_per_s", "latency_p50_ms", "latency_p99_ms")}
               for name, run in (("eagle", eagle), ("base", base))}
        round_ratios = [eagle[i]["output_tokens_per_s"] / base[i]["output_tokens_per_s"] for i in both]
        out.append({"concurrency": level, "mode": mode, "rounds": len(both),
                    "eagle_tokens_per_s": med["eagle"]["output_tokens_per_s"],
                    "base_tokens_per_s": med["base"]["output_tokens_per_s"],
                    "eagle_latency_p50_ms": med["eagle"]["latency_p50_ms"],
                    "eagle_latency_p99_ms": med["eagle"]["latency_p99_ms"],
                    "base_latency_p50_ms": med["base"]["latency_p50_ms"],
                    "base_latency_p99_ms": med["base"]["latency_p99_ms"],
                    "throughput_ratio": med["eagle"]["output_tokens_per_s"] / med["base"]["output_tokens_per_s"],
                    "round_ratios": round_ratios,
                    "p50_latency_ratio": med["eagle"]["latency_p50_ms"] / med["base"]["latency_p50_ms"],
                    **ratio_interval(round_ratios),
                    "identical": all(sorted(eagle[i]["texts"]) == sorted(base[i]["texts"]) for i in both)})
    return out


def ratio_interval(ratios: list[float]) -> dict:
    """The 95 % interval of paired rounds' eagle/base ratios (geometric mean exp(m +- t * s / sqrt(n)) over their
    logs) and its verdict; {} below INTERVAL_MIN_ROUNDS rounds."""
    if len(ratios) < INTERVAL_MIN_ROUNDS:
        return {}
    logs = [math.log(r) for r in ratios]
    t = T_975[min(len(logs) - 1, len(T_975)) - 1]
    half = t * stdev(logs) / math.sqrt(len(logs))
    low, high = math.exp(fmean(logs) - half), math.exp(fmean(logs) + half)
    return {"ratio_geomean": math.exp(fmean(logs)), "ratio_interval_95": [low, high],
            "verdict": "faster" if low > 1.0 else "slower" if high < 1.0 else "tie"}


def load_table(report: dict) -> str:
    """Markdown: one line per (level, mode) with both models side by side (medians over the rounds, and each
    round's ratio when there were several; from INTERVAL_MIN_ROUNDS rounds the ratio's 95 % interval and verdict)."""
    lines = ["| concurrency | mode | eagle p50 / p99 ms | base p50 / p99 ms | eagle tok/s | base tok/s | "
             "eagle/base tok/s | 95 % interval | identical |", "|---|---|---|---|---|---|---|---|---|"]
    settings = report.get("settings", {})
    if "load_policy" in settings:  # the pytorch engine: what the eagle/base ratios ran under
        lines[:0] = [f"eagle_engine: trees by batch size {settings['load_policy']}; backoff: {settings['backoff']}", ""]
    for r in report["ratios"]:
        per_round = "" if len(r.get("round_ratios", [])) < 2 else \
            " (" + " ".join(f"{x:.2f}" for x in r["round_ratios"]) + ")"
        lines.append(f"| {r['concurrency']} | {r['mode']} | {r['eagle_latency_p50_ms']:.0f} / "
                     f"{r['eagle_latency_p99_ms']:.0f} | {r['base_latency_p50_ms']:.0f} / "
                     f"{r['base_latency_p99_ms']:.0f} | {r['eagle_tokens_per_s']:.1f} | {r['base_tokens_per_s']:.1f} | "
                     f"{r['throughput_ratio']:.2f}x{per_round} | {_interval_cell(r)} | "
                     f"{'yes' if r['identical'] else 'NO'} |")
    return "\n".join(lines)


def _interval_cell(ratio: dict) -> str:
    if "ratio_interval_95" not in ratio:
        return "-"
    low, high = ratio["ratio_interval_95"]
    return f"{low:.2f}-{high:.2f}x, {ratio['verdict']}"
