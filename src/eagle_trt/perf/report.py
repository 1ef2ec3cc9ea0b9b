"""The perf report: eagle_model vs base_model from two AIPerf runs (or genai-perf exports) -> report.json,
report.md and PNG plots.

report.json top level: speedup (eagle / base output tok/s), mean_accepted_length, identical (every eagle text
equals its base text), plus per-model metrics, per-category speedups, settings, versions and the machine; with
several rounds (`perf run --rounds`), `rounds`: every run's output tok/s per model (the metrics are the best run's).
"""

from __future__ import annotations

import json
import platform
import statistics
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from eagle_trt import __version__
from eagle_trt.perf.aiperf_run import RunResult
from eagle_trt.spec import BASE_MODEL, EAGLE_MODEL


def _avg(summary: dict, key: str):
    value = summary.get(key)
    return value.get("avg") if isinstance(value, dict) else value


def model_metrics(run: RunResult) -> dict:
    s = run.summary
    per_req = [r.tokens_per_s for r in run.requests if r.latency_ms]
    return {
        "model": run.model, "requests": len(run.requests) or _avg(s, "request_count"),
        "output_token_throughput": _avg(s, "output_token_throughput"),
        "output_token_throughput_per_user": _avg(s, "output_token_throughput_per_user"),
        "mean_request_tokens_per_s": statistics.mean(per_req) if per_req else None,
        "time_to_first_token_ms": _avg(s, "time_to_first_token"),
        "inter_token_latency_ms": _avg(s, "inter_token_latency"),
        "request_latency_ms": _avg(s, "request_latency"),
        "output_sequence_length": _avg(s, "output_sequence_length"),
        "input_sequence_length": _avg(s, "input_sequence_length"),
        "spec_decode_acceptance_length": _avg(s, "spec_decode_acceptance_length"),
        "scraped_metrics": run.scraped.to_dict() if run.scraped is not None else None,
        "artifact_dir": str(run.artifact_dir),
    }


def build_report(eagle: RunResult, base: RunResult, *, categories: dict[str, str] | None = None,
                 turns: dict[str, str] | None = None, settings: dict | None = None) -> dict:
    """`categories` / `turns`: prompt -> its category / "turn 1" or "turn 2" (the per-group speedups)."""
    e, b = model_metrics(eagle), model_metrics(base)
    speedup = (e["output_token_throughput"] / b["output_token_throughput"]
               if e["output_token_throughput"] and b["output_token_throughput"] else None)
    steps = [a for r in eagle.requests for a in r.accepted_lengths]
    mean_al, source = acceptance_length(steps, eagle.scraped, e["spec_decode_acceptance_length"])
    compared, mismatches = _compare_texts(eagle, base)
    identical = compared > 0 and not mismatches
    per_category = _per_category(eagle, base, categories or {})
    return {
        "speedup": speedup, "mean_accepted_length": mean_al, "acceptance_source": source, "identical": identical,
        "compared_requests": compared, "mismatched_prompts": mismatches,
        "eagle": e, "base": b, "per_category_speedup": per_category,
        "per_turn_speedup": _per_category(eagle, base, turns) if turns else {},
        "accepted_length_histogram": _histogram(steps),
        "settings": settings or {}, "versions": _versions(), "machine": _machine(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def acceptance_length(steps: list[int], scraped, aiperf_value) -> tuple[float | None, str | None]:
    """(mean accepted length, where it came from): the per-request figures of the responses ("responses"), else
    the server's metrics over the run ("metrics", perf.server_metrics), else AIPerf's own figure ("aiperf")."""
    if steps:
        return statistics.mean(steps), "responses"
    if scraped is not None and scraped.mean_accepted_length is not None:
        return scraped.mean_accepted_length, "metrics"
    return (aiperf_value, "aiperf") if aiperf_value else (None, None)


def _compare_texts(eagle: RunResult, base: RunResult) -> tuple[int, list[str]]:
    """(requests of `eagle` with a base text for the same prompt, the first 80 characters of those that differ)."""
    base_text = {r.prompt: r.text for r in base.requests}
    compared = [(r, base_text[r.prompt]) for r in eagle.requests if r.prompt in base_text]
    return len(compared), [r.prompt[:80] for r, text in compared if r.text != text]


def _throughput(run: RunResult) -> float:
    return _avg(run.summary, "output_token_throughput") or 0.0


def best_run(runs: list[RunResult]) -> RunResult:
    """The run with the highest output tok/s (the least disturbed by whatever else the machine was doing)."""
    return max(runs, key=_throughput)


def with_rounds(report: dict, eagle_runs: list[RunResult], base_runs: list[RunResult]) -> dict:
    """`report` (built from the best run of each model) plus every round's output tok/s, and its identity verdict
    widened to every run: each eagle run against each base run (greedy output must not change from run to run)."""
    mismatches = list(dict.fromkeys(p for eagle in eagle_runs for base in base_runs
                                    for p in _compare_texts(eagle, base)[1]))  # the best pair's among them
    rounds = {EAGLE_MODEL: [_throughput(r) for r in eagle_runs], BASE_MODEL: [_throughput(r) for r in base_runs]}
    return dict(report, rounds=rounds, mismatched_prompts=mismatches,
                identical=report["compared_requests"] > 0 and not mismatches)


def _per_category(eagle: RunResult, base: RunResult, categories: dict[str, str]) -> dict:
    base_by_prompt = {r.prompt: r for r in base.requests}
    ratios = defaultdict(list)
    for r in eagle.requests:
        other = base_by_prompt.get(r.prompt)
        if other is None or not r.tokens_per_s or not other.tokens_per_s:
            continue
        ratios[categories.get(r.prompt, "all")].append(r.tokens_per_s / other.tokens_per_s)
    return {cat: statistics.mean(v) for cat, v in sorted(ratios.items())}


def _histogram(steps: list[int]) -> dict[str, int]:
    counts = defaultdict(int)
    for a in steps:
        counts[str(a)] += 1
    return dict(sorted(counts.items(), key=lambda kv: int(kv[0])))


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"eagle-trt": __version__, "python": platform.python_version()}
    for pkg in ("torch", "transformers", "nvidia-pytriton", "tritonclient"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def _machine() -> dict:
    import os

    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count()}


def _fmt(value, spec=".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def summary_table(report: dict) -> str:
    e, b = report["eagle"], report["base"]
    rows = [("output tok/s", e["output_token_throughput"], b["output_token_throughput"]),
            ("TTFT ms", e["time_to_first_token_ms"], b["time_to_first_token_ms"]),
            ("ITL ms", e["inter_token_latency_ms"], b["inter_token_latency_ms"]),
            ("request latency ms", e["request_latency_ms"], b["request_latency_ms"])]
    lines = ["| metric | eagle_model | base_model |", "|---|---|---|"]
    lines += [f"| {name} | {_fmt(x)} | {_fmt(y)} |" for name, x, y in rows]
    lines += ["", f"speedup (output tok/s): **{_fmt(report['speedup'])}x**",
              f"mean accepted length: **{_fmt(report['mean_accepted_length'])}**",
              f"identical outputs: **{'yes' if report['identical'] else 'NO'}** "
              f"({report['compared_requests']} requests compared"
              + (f", in every one of {len(report['rounds'][EAGLE_MODEL])} rounds)" if "rounds" in report else ")")]
    cached = [(m["model"], (m.get("scraped_metrics") or {}).get("cached_prompt_tokens")) for m in (e, b)]
    if any(n for _, n in cached):
        lines.append("prompt tokens not prefilled (a next turn's conversation so far, held by the last turn's cache): "
                     + ", ".join(f"{model} {_fmt(n, '.0f')}" for model, n in cached))
    if "rounds" in report:
        runs = "; ".join(f"{model} " + " / ".join(_fmt(x, ".1f") for x in values)
                         for model, values in report["rounds"].items())
        lines.append(f"rounds (output tok/s, the best of each compared): {runs}")
    return "\n".join(lines)


def write_report(report: dict, out_dir: Path, eagle: RunResult | None = None, base: RunResult | None = None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = []
    if eagle is not None and base is not None:
        from eagle_trt.perf.plots import write_plots

        plots = write_plots(report, eagle, base, out_dir)
    report = dict(report, plots=[p.name for p in plots])
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    md = ["# eagle_model vs base_model", "", summary_table(report), ""]
    for key, what in (("per_turn_speedup", "turn"), ("per_category_speedup", "category")):
        if report.get(key):
            md += [f"## Speedup per {what} (mean of per-request tok/s ratios)", "", f"| {what} | speedup |", "|---|---|"]
            md += [f"| {c} | {v:.2f}x |" for c, v in report[key].items()]
            md.append("")
    if report["accepted_length_histogram"]:
        md += ["## Accepted length per verify step", "", "| accepted | steps |", "|---|---|"]
        md += [f"| {k} | {v} |" for k, v in report["accepted_length_histogram"].items()]
        md.append("")
    if report["mismatched_prompts"]:
        md += ["## Outputs that differ (a lossless engine never does this)", ""]
        md += [f"- {p}" for p in report["mismatched_prompts"]]
        md.append("")
    md += ["## Settings", "", "```json", json.dumps(report["settings"], indent=2), "```", "",
           "## Versions and machine", "", "```json", json.dumps({"versions": report["versions"],
                                                                 "machine": report["machine"]}, indent=2), "```", ""]
    md += [f"![{p.stem}]({p.name})" for p in plots]
    (out_dir / "report.md").write_text("\n".join(md) + "\n")
    return out_dir / "report.md"
