"""`eagle-trt perf run`: AIPerf at concurrency 1 on eagle_model and base_model (same prompts, same max tokens,
greedy, streaming), the identity check, and the report. Starts tritonserver on the bundle unless --url is given."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.spec import BASE_MODEL, EAGLE_MODEL, MODELS
from eagle_trt.errors import EagleTrtError
from eagle_trt.perf.aiperf_run import run_aiperf
from eagle_trt.perf.datasets import load_dataset, write_aiperf_input
from eagle_trt.perf.report import build_report, write_report



@dataclass(frozen=True)
class PerfRequest:
    bundle: Path
    url: str | None = None
    dataset: str = "mt-bench"
    requests: int = 20
    max_tokens: int = 128
    warmup: int = 1
    out_dir: Path | None = None


def run_perf(req: PerfRequest, echo=print) -> dict:
    if req.requests < 1 or req.max_tokens < 1 or req.warmup < 0:
        raise EagleTrtError(f"invalid perf settings: requests {req.requests}, max tokens {req.max_tokens}, warmup "
                            f"{req.warmup}", "requests and max tokens must be >= 1, warmup >= 0")
    spec = BuildSpec.load(req.bundle)
    prompts = load_dataset(req.dataset)[: req.requests]
    out_dir = req.out_dir or req.bundle / "perf"
    run_dir = out_dir / "runs" / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    input_file = write_aiperf_input(prompts, run_dir / "prompts.aiperf.jsonl", req.max_tokens)
    categories = {p.text: p.category for p in prompts if p.category}
    results = {}
    with bundle_server(req, echo) as url:
        for model in MODELS:
            echo(f"AIPerf: {model}, {len(prompts)} requests x {req.max_tokens} tokens at concurrency 1 ...")
            t0 = time.time()
            results[model] = run_aiperf(model, url, input_file, spec.base.path, len(prompts), req.warmup,
                                        run_dir / model, run_dir / f"{model}.aiperf.log",
                                        cumulative=spec.engine == "llmapi",
                                        perf_metrics=spec.acceptance_figures)
            echo(f"  done in {time.time() - t0:.0f} s")
    settings = {"dataset": req.dataset, "requests": len(prompts), "max_tokens": req.max_tokens,
                "warmup": req.warmup, "concurrency": 1, "temperature": 0.0, "streaming": True,
                "engine": spec.engine, "runtime_tree": spec.runtime_tree, "dtype": spec.dtype, "device": spec.device,
                "acceptance_figures": spec.acceptance_figures,
                "base": str(spec.base.path), "draft": str(spec.draft.path) if spec.draft else None,
                "run_dir": str(run_dir)}
    report = build_report(results[EAGLE_MODEL], results[BASE_MODEL], categories=categories, settings=settings)
    write_report(report, out_dir, results[EAGLE_MODEL], results[BASE_MODEL])
    return report


@contextlib.contextmanager
def bundle_server(req, echo):
    """The URL of `req.url`, or of a tritonserver started on the bundle (eagle_model and base_model) until exit."""
    if req.url:
        yield req.url
        return
    from eagle_trt.serving.tritonserver import TritonServer

    echo(f"starting tritonserver on {req.bundle / 'model_repository'} ...")
    t0 = time.time()
    server = TritonServer(req.bundle / "model_repository", models=MODELS,
                         log_file=req.bundle / "perf" / "tritonserver.log")
    with server:
        echo(f"  ready in {time.time() - t0:.0f} s at {server.http_url}")
        yield server.http_url
