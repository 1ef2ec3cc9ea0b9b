"""`eagle-trt perf run|compare`: eagle_model vs base_model at concurrency 1, and the report."""

from __future__ import annotations

import json
from pathlib import Path

import click

from eagle_trt.spec import BASE_MODEL, EAGLE_MODEL


@click.group("perf")
def perf_cmd():
    """Measure eagle_model against base_model (AIPerf, concurrency 1) and write report.md/json + plots.

    \b
    Example:
      eagle-trt perf run out --requests 20 --max-tokens 128
      eagle-trt perf compare artifacts/aiperf/eagle_model artifacts/aiperf/base_model -o report
    """


@perf_cmd.command("run")
@click.argument("bundle", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--url", help="A running server (default: start tritonserver on the bundle).")
@click.option("--metrics-url", help="With --url: its metrics endpoint (http://HOST:8002/metrics), read for acceptance "
              "when the engine's responses carry no per-request figures.")
@click.option("--dataset", default="mt-bench", show_default=True, help="mt-bench, humaneval or a JSONL file.")
@click.option("--requests", type=click.IntRange(min=1), default=20, show_default=True,
              help="Prompts, one per category in turn (MT-bench: writing, roleplay, ...).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--turns", type=click.Choice(["auto", "both", "first"]), default="auto", show_default=True,
              help="both: each prompt's second turn too, as a conversation with the model's own first answer "
                   "(MT-bench as defined; sent as the ensemble's `messages` input: pytorch and trtllm bundles); "
                   "auto: both where the bundle takes `messages`, else first.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
              help="Warm-up requests per model.")
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True,
              help="AIPerf runs per model, alternating which model goes first; the fastest of each is compared.")
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path), help="Report dir (default BUNDLE/perf).")
@click.option("--json", "as_json", is_flag=True, help="Print report.json.")
def perf_run_cmd(bundle, url, metrics_url, dataset, requests, max_tokens, turns, warmup, rounds, out_dir, as_json):
    """Run AIPerf on eagle_model and base_model with the same prompts and greedy decoding, check the texts are
    identical, and write the report.

    \b
    Example:
      eagle-trt perf run out --dataset mt-bench --requests 20 --max-tokens 128 --rounds 3
    """
    from eagle_trt.perf.report import summary_table
    from eagle_trt.perf.run import PerfRequest, run_perf

    echo = (lambda msg: click.echo(msg, err=True))
    report = run_perf(PerfRequest(bundle, url, dataset, requests, max_tokens, warmup, out_dir, rounds,
                                  metrics_url=metrics_url, turns=turns), echo=echo)
    report_dir = out_dir or bundle / "perf"
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
    else:
        click.echo(summary_table(report))
        click.echo(f"report: {report_dir / 'report.md'}")


@perf_cmd.command("compare")
@click.argument("eagle_run", type=click.Path(path_type=Path, exists=True))
@click.argument("base_run", type=click.Path(path_type=Path, exists=True))
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path), default=Path("perf-report"),
              show_default=True)
@click.option("--json", "as_json", is_flag=True)
def perf_compare_cmd(eagle_run, base_run, out_dir, as_json):
    """Make the report from existing exports: AIPerf artifact dirs or genai-perf *_genai_perf.json files.

    \b
    Example:
      eagle-trt perf compare artifacts/aiperf/eagle_model artifacts/aiperf/base_model -o report
    """
    from eagle_trt.perf.compare import load_run
    from eagle_trt.perf.report import build_report, summary_table, write_report

    eagle, base = load_run(eagle_run, EAGLE_MODEL), load_run(base_run, BASE_MODEL)
    report = build_report(eagle, base, settings={"eagle_run": str(eagle_run), "base_run": str(base_run)})
    write_report(report, out_dir, eagle, base)
    click.echo(json.dumps(report, indent=2, default=str) if as_json else summary_table(report))
    if not as_json:
        click.echo(f"report: {out_dir / 'report.md'}")


@perf_cmd.command("load")
@click.argument("bundle", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--url", help="A running server (default: start tritonserver on the bundle).")
@click.option("--dataset", default="mt-bench", show_default=True, help="mt-bench, humaneval or a JSONL file.")
@click.option("--concurrency", "levels", default="1,2,4,8", show_default=True,
              help="Comma-separated concurrency levels.")
@click.option("--requests-per-stream", type=click.IntRange(min=1), default=2, show_default=True,
              help="Requests per concurrent stream (level 8 sends 8x this many).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs per level and model, in turn (order flipped each round); the table shows medians and each "
                   "round's eagle/base ratio, from 3 rounds also the ratio's 95 % interval and whether the rounds "
                   "resolve a difference (faster / tie / slower).")
@click.option("--mixed", is_flag=True, help="Also run both models at once, each at the level.")
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path), help="Report dir (default BUNDLE/perf).")
@click.option("--json", "as_json", is_flag=True, help="Print load.json.")
def perf_load_cmd(bundle, url, dataset, levels, requests_per_stream, max_tokens, rounds, mixed, out_dir, as_json):
    """eagle_model vs base_model under concurrent load: p50/p99 latency and tokens/s per concurrency level
    (writes load.json and load.md).

    \b
    Example:
      eagle-trt perf load out --concurrency 1,2,4,8 --mixed
    """
    from eagle_trt.perf.load import LoadRequest, load_table, run_load

    try:
        parsed = tuple(int(v) for v in levels.split(","))
    except ValueError:
        raise click.BadParameter(f"{levels!r} is not a comma-separated list of integers, e.g. 1,2,4,8",
                                 param_hint="--concurrency") from None
    if min(parsed) < 1:
        raise click.BadParameter(f"levels must be >= 1, got {levels!r}", param_hint="--concurrency")
    report = run_load(LoadRequest(bundle, url, dataset, parsed, requests_per_stream, max_tokens, mixed, out_dir,
                                  rounds=rounds),
                      echo=lambda msg: click.echo(msg, err=True))
    click.echo(json.dumps(report, indent=2) if as_json else load_table(report))
