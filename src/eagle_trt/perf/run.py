"""`eagle-trt perf run`: AIPerf at concurrency 1 on eagle_model and base_model (same prompts, same max tokens,
greedy, streaming), the identity check, and the report. Starts tritonserver on the bundle unless --url is given.
With rounds > 1 each model runs that many times, alternating which goes first, and the fastest run of each is
compared (best against best); every run's texts are checked."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.engines import get
from eagle_trt.spec import BASE_MODEL, EAGLE_MODEL, MODELS
from eagle_trt.errors import EagleTrtError
from eagle_trt.perf.aiperf_run import RunResult, run_aiperf
from eagle_trt.datasets import load_dataset, take_prompts, write_aiperf_input
from eagle_trt.perf.report import best_run, build_report, with_rounds, write_report
from eagle_trt.perf.server_metrics import around



@dataclass(frozen=True)
class PerfRequest:
    bundle: Path
    url: str | None = None
    dataset: str = "mt-bench"
    requests: int = 20
    max_tokens: int = 128
    warmup: int = 1
    out_dir: Path | None = None
    rounds: int = 1  # AIPerf runs per model, alternating which model goes first; the best run of each is compared
    metrics_url: str | None = None  # with url: its metrics endpoint (acceptance when the responses carry none)
    turns: str = "first"  # "both": every prompt's second turn too, seeing the model's own first answer (MT-bench);
    #                       "auto": both where the bundle's ensemble takes `messages` (pytorch, trtllm), else first


def run_perf(req: PerfRequest, echo=print) -> dict:
    if req.requests < 1 or req.max_tokens < 1 or req.warmup < 0 or req.rounds < 1:
        raise EagleTrtError(f"invalid perf settings: requests {req.requests}, max tokens {req.max_tokens}, warmup "
                            f"{req.warmup}, rounds {req.rounds}",
                            "requests, max tokens and rounds must be >= 1, warmup >= 0")
    spec = BuildSpec.load(req.bundle)
    prompts = take_prompts(load_dataset(req.dataset), req.requests)
    takes_messages = get(spec.engine).takes_messages
    second = [p for p in prompts if len(p.turns) > 1] if req.turns == "both" or (
        req.turns == "auto" and takes_messages) else []
    if second and not takes_messages:
        raise EagleTrtError(f"--turns both sends second turns as the ensemble's `messages` input, which a "
                            f"{spec.engine} bundle does not take", "pass --turns first")
    out_dir = req.out_dir or req.bundle / "perf"
    run_dir = out_dir / "runs" / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    categories = {p.text: p.category for p in prompts if p.category}
    turns = {p.text: "turn 1" for p in prompts}
    runs: dict[str, list[RunResult]] = {model: [] for model in MODELS}
    with bundle_server(req, echo) as (url, metrics_url):
        conversations = first_answers(url, second, req.max_tokens, echo)
        # a second turn's request is known by its `messages` input, the JSON written into the AIPerf input file
        categories |= {json.dumps(c): p.category for p, c in zip(second, conversations) if p.category}
        turns |= {json.dumps(c): "turn 2" for c in conversations}
        input_file = write_aiperf_input(prompts, run_dir / "prompts.aiperf.jsonl", req.max_tokens, conversations)
        count = len(prompts) + len(conversations)
        for index in range(req.rounds):
            for model in round_order(index):
                tag = model if index == 0 else f"{model}-round{index + 1}"
                echo(f"AIPerf: {model}, {count} requests x {req.max_tokens} tokens at concurrency 1"
                     + (f" (round {index + 1} of {req.rounds})" if req.rounds > 1 else "") + " ...")
                t0 = time.time()
                runs[model].append(around(metrics_url, model, lambda model=model, tag=tag: run_aiperf(
                    model, url, input_file, spec.base.path, count, req.warmup, run_dir / tag,
                    run_dir / f"{tag}.aiperf.log", cumulative=get(spec.engine).cumulative_text,
                    perf_metrics=get(spec.engine).acceptance_figures(spec))))
                echo(f"  done in {time.time() - t0:.0f} s")
    settings = {"dataset": req.dataset, "requests": count, "turns": req.turns, "max_tokens": req.max_tokens,
                "warmup": req.warmup, "rounds": req.rounds, "concurrency": 1, "temperature": 0.0, "streaming": True,
                "engine": spec.engine, "tree": spec.tree.label(), "dtype": spec.dtype, "device": spec.device,
                "acceptance_figures": get(spec.engine).acceptance_figures(spec), "metrics_url": metrics_url,
                "base": str(spec.base.path), "draft": str(spec.draft.path) if spec.draft else None,
                "run_dir": str(run_dir)}
    eagle, base = best_run(runs[EAGLE_MODEL]), best_run(runs[BASE_MODEL])
    report = build_report(eagle, base, categories=categories, turns=turns if conversations else None,
                          settings=settings)
    if report["acceptance_source"] == "metrics":
        echo(f"acceptance from {metrics_url} (the responses carry no per-request figures)")
    if req.rounds > 1:
        report = with_rounds(report, runs[EAGLE_MODEL], runs[BASE_MODEL])
    write_report(report, out_dir, eagle, base)
    return report


def first_answers(url: str, prompts: list, max_tokens: int, echo) -> list[list[dict]]:
    """The second-turn conversations: each prompt's first turn answered by base_model (greedy, the same token
    budget as the measured runs, so it is the first-turn text both models give), then its second user turn."""
    from eagle_trt.client.triton import generate
    from eagle_trt.chat import conversation

    if prompts:
        echo(f"first answers for {len(prompts)} second turns (base_model, greedy, not timed) ...")
    return [conversation(list(p.turns[:2]), [generate(url, BASE_MODEL, p.turns[0], max_tokens=max_tokens,
                                                      temperature=0.0).text]) for p in prompts]


def round_order(index: int) -> tuple[str, ...]:
    """eagle_model first in even rounds, base_model first in odd ones (a drift in the machine's speed over the run
    then favours neither)."""
    return MODELS if index % 2 == 0 else tuple(reversed(MODELS))


@contextlib.contextmanager
def bundle_server(req, echo):
    """(HTTP URL, metrics URL) of `req.url` (its metrics URL: `req.metrics_url`, None if not given), or of a
    tritonserver started on the bundle (eagle_model and base_model) until exit."""
    if req.url:
        yield req.url, getattr(req, "metrics_url", None)
        return
    from eagle_trt.serving.tritonserver import TritonServer

    echo(f"starting tritonserver on {req.bundle / 'model_repository'} ...")
    t0 = time.time()
    server = TritonServer(req.bundle / "model_repository", models=MODELS,
                         log_file=req.bundle / "perf" / "tritonserver.log")
    with server:
        echo(f"  ready in {time.time() - t0:.0f} s at {server.http_url} (metrics {server.metrics_url})")
        yield server.http_url, server.metrics_url
