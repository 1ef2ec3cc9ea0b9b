"""`eagle-trt perf load`: eagle_model and base_model under concurrent load. AIPerf runs each model at each
concurrency level (1, 2, 4, 8 by default) on the same prompts, greedy, streaming; `mixed` also runs both models at
once, each at the level (what a server taking both kinds of traffic sees). Per run: p50/p99 request latency, p50
time to first token, output tokens/s over the run, and eagle/base ratios; written as load.json and load.md."""

from __future__ import annotations

import json
import time
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


def run_load(req: LoadRequest, echo=print) -> dict:
    if not req.levels or min(req.levels) < 1 or req.requests_per_stream < 1 or req.max_tokens < 1:
        raise EagleTrtError(f"invalid load settings: levels {list(req.levels)}, requests per stream "
                            f"{req.requests_per_stream}, max tokens {req.max_tokens}",
                            "levels, requests per stream and max tokens must be >= 1")
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

            for model in MODELS:
                echo(f"AIPerf: {model} at concurrency {level}, {n} requests x {req.max_tokens} tokens ...")
                rows.append(_row(one(model, f"c{level}"), level, "alone"))
            if req.mixed:
                echo(f"AIPerf: both models at once, each at concurrency {level} ...")
                with ThreadPoolExecutor(len(MODELS)) as pool:
                    runs = list(pool.map(lambda m: one(m, f"c{level}-mixed"), MODELS))
                rows += [_row(r, level, "mixed") for r in runs]
    report = {"settings": {"dataset": req.dataset, "levels": list(req.levels), "max_tokens": req.max_tokens,
                           "requests_per_stream": req.requests_per_stream, "mixed": req.mixed, "engine": spec.engine,
                           "tree": spec.tree.label(), "dtype": spec.dtype, "device": spec.device,
                           "run_dir": str(run_dir)},
              "rows": rows, "ratios": _ratios(rows)}
    (out_dir / "load.json").write_text(json.dumps(report, indent=2))
    (out_dir / "load.md").write_text(load_table(report) + "\n")
    return report


def _row(run: RunResult, level: int, mode: str) -> dict:
    s = run.summary
    latency, ttft = s.get("request_latency") or {}, s.get("time_to_first_token") or {}
    return {"model": run.model, "concurrency": level, "mode": mode, "requests": len(run.requests),
            "latency_p50_ms": latency.get("p50"), "latency_p99_ms": latency.get("p99"),
            "ttft_p50_ms": ttft.get("p50"),
            "output_tokens_per_s": (s.get("output_token_throughput") or {}).get("avg"),
            "texts": [r.text for r in run.requests]}


def _ratios(rows: list[dict]) -> list[dict]:
    """eagle/base per (level, mode): throughput ratio (> 1: EAGLE serves more) and p50 latency ratio (< 1: faster),
    and whether the greedy texts were identical prompt for prompt."""
    out = []
    for level, mode in dict.fromkeys((r["concurrency"], r["mode"]) for r in rows):
        pair = {r["model"]: r for r in rows if (r["concurrency"], r["mode"]) == (level, mode)}
        eagle, base = pair.get("eagle_model"), pair.get("base_model")
        if not eagle or not base or not base["output_tokens_per_s"] or not base["latency_p50_ms"]:
            continue
        out.append({"concurrency": level, "mode": mode,
                    "throughput_ratio": eagle["output_tokens_per_s"] / base["output_tokens_per_s"],
                    "p50_latency_ratio": eagle["latency_p50_ms"] / base["latency_p50_ms"],
                    "identical": sorted(eagle["texts"]) == sorted(base["texts"])})
    return out


def load_table(report: dict) -> str:
    """Markdown: one line per (level, mode) with both models side by side."""
    lines = ["| concurrency | mode | eagle p50 / p99 ms | base p50 / p99 ms | eagle tok/s | base tok/s | "
             "eagle/base tok/s | identical |", "|---|---|---|---|---|---|---|---|"]
    rows = {(r["concurrency"], r["mode"], r["model"]): r for r in report["rows"]}
    for ratio in report["ratios"]:
        e = rows[(ratio["concurrency"], ratio["mode"], "eagle_model")]
        b = rows[(ratio["concurrency"], ratio["mode"], "base_model")]
        lines.append(f"| {ratio['concurrency']} | {ratio['mode']} | {e['latency_p50_ms']:.0f} / "
                     f"{e['latency_p99_ms']:.0f} | {b['latency_p50_ms']:.0f} / {b['latency_p99_ms']:.0f} | "
                     f"{e['output_tokens_per_s']:.1f} | {b['output_tokens_per_s']:.1f} | "
                     f"{ratio['throughput_ratio']:.2f}x | {'yes' if ratio['identical'] else 'NO'} |")
    return "\n".join(lines)
