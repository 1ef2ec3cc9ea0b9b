"""Run AIPerf (from .venv-aiperf or PATH) against one model and read what it exports.

Per request we keep: the prompt, the concatenated text, output tokens, latency, TTFT, ITL, and the acceptance
figures of each streamed response (cumulative total_accepted_draft_tokens / total_draft_tokens) from which the
accepted length of every verify step follows; without them, tokens per streamed chunk stand in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from eagle_trt.errors import EagleTrtError
from eagle_trt.metrics import AcceptanceCounts
from eagle_trt.perf.harness_files import aiperf_command

REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass
class RequestResult:
    prompt: str
    text: str
    output_tokens: int
    latency_ms: float
    ttft_ms: float | None
    itl_ms: float | None
    accepted_lengths: list[int] = field(default_factory=list)  # per verify step, bonus included

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / (self.latency_ms / 1000.0) if self.latency_ms else 0.0


@dataclass
class RunResult:
    model: str
    summary: dict  # profile_export_aiperf.json
    requests: list[RequestResult]
    artifact_dir: Path
    scraped: AcceptanceCounts | None = None  # the model's metrics over the run (perf.server_metrics.around)


def find_aiperf() -> str:
    for candidate in (REPO_ROOT / ".venv-aiperf" / "bin" / "aiperf", Path(sys.prefix).parent / ".venv-aiperf/bin/aiperf"):
        if candidate.exists():
            return str(candidate)
    found = shutil.which("aiperf")
    if found:
        return found
    raise EagleTrtError("AIPerf is not installed (looked in .venv-aiperf/bin and on PATH)",
                        "run `make aiperf` (a separate venv with aiperf==0.13.0 and our plugin)")


def run_aiperf(model: str, url: str, input_file: Path, tokenizer: Path, requests: int, warmup: int,
               artifact_dir: Path, log_file: Path, cumulative: bool = False,
               perf_metrics: bool = True, concurrency: int = 1) -> RunResult:
    """`cumulative`: the model streams the text so far in each response (TensorRT-LLM's LLM-API model).
    `perf_metrics`: request the acceptance figures (False where the backend has no return_perf_metrics)."""
    cmd = aiperf_command(model, str(input_file), str(tokenizer), url=url, requests=requests, warmup=warmup,
                         artifact_dir=str(artifact_dir), aiperf=find_aiperf(), perf_metrics=perf_metrics,
                         concurrency=concurrency)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    artifact_dir.mkdir(parents=True, exist_ok=True)
    (artifact_dir / "command.json").write_text(json.dumps(cmd))
    with open(log_file, "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        tail = log_file.read_text(encoding="utf-8")[-1500:]
        raise EagleTrtError(f"AIPerf failed on {model} (exit {proc.returncode}); log {log_file}:\n{tail}",
                            "check that the server is up and the model is loaded")
    return read_aiperf_dir(artifact_dir, model, cumulative)


def read_aiperf_dir(artifact_dir: Path, model: str | None = None, cumulative: bool = False) -> RunResult:
    """Parse an AIPerf artifact directory (profile_export_aiperf.json + profile_export_raw.jsonl)."""
    summary_file = artifact_dir / "profile_export_aiperf.json"
    if not summary_file.exists():
        raise EagleTrtError(f"{summary_file} does not exist", "pass an AIPerf --artifact-dir from a finished run")
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    errors = summary.get("error_summary") or []
    if errors:
        raise EagleTrtError(f"AIPerf reported errors in {artifact_dir}: {json.dumps(errors)[:500]}",
                            "look at the server log; every request must succeed for a fair comparison")
    model = model or (summary.get("input_config", {}).get("endpoint", {}).get("model_names") or ["?"])[0]
    raw = artifact_dir / "profile_export_raw.jsonl"
    metrics = _read_metrics(artifact_dir / "profile_export.jsonl")
    requests = _read_raw(raw, metrics, cumulative) if raw.exists() else []
    return RunResult(model, summary, requests, artifact_dir)


def _read_metrics(path: Path) -> dict[str, dict]:
    """Per-request metrics (profile_export.jsonl) by x_request_id."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            rec = json.loads(line)
            out[rec.get("metadata", {}).get("x_request_id")] = rec.get("metrics", {})
    return out


def _read_raw(path: Path, all_metrics: dict[str, dict], cumulative: bool = False) -> list[RequestResult]:
    out = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        rec = json.loads(line)
        meta = rec.get("metadata", {})
        if meta.get("benchmark_phase", "profiling") != "profiling":
            continue
        payload = rec.get("payload") or rec.get("request", {}).get("payload") or {}
        if isinstance(payload, str):
            payload = json.loads(payload)
        events = _events(rec)
        texts = [e.get("text_output", "") for e in events]
        if cumulative:
            texts = [t for t in texts if isinstance(t, str)][-1:]  # the last response holds the whole text
        metrics = rec.get("metrics") or all_metrics.get(meta.get("x_request_id"), {})
        out.append(RequestResult(
            # a second turn is known by its `messages` input (the conversation's JSON)
            prompt=payload.get("text_input") or payload.get("messages") or "",
            text="".join(t for t in texts if isinstance(t, str)),
            output_tokens=int(_metric(metrics, "output_sequence_length") or 0),
            latency_ms=float(_metric(metrics, "request_latency") or 0.0),
            ttft_ms=_metric(metrics, "time_to_first_token"), itl_ms=_metric(metrics, "inter_token_latency"),
            accepted_lengths=_accepted_lengths(events)))
    return out


def _events(rec: dict) -> list[dict]:
    events = []
    for response in rec.get("responses", []):
        for packet in response.get("packets", []) or [response]:
            value = packet.get("value") if isinstance(packet, dict) else None
            if isinstance(value, str) and value.strip().startswith("{"):
                try:
                    events.append(json.loads(value))
                except json.JSONDecodeError:
                    continue
            elif isinstance(packet, dict) and "text_output" in packet:
                events.append(packet)
    return events


def _metric(metrics: dict, name: str):
    value = metrics.get(name)
    if isinstance(value, dict):
        value = value.get("value", value.get("avg"))
    return value


def _accepted_lengths(events: list[dict]) -> list[int]:
    """Per verify step, from the cumulative acceptance outputs of the streamed responses."""
    lengths, prev_acc, prev_draft = [], 0, 0
    for e in events:
        acc, drafted = _count(e.get("total_accepted_draft_tokens")), _count(e.get("total_draft_tokens"))
        if acc is None or drafted is None:
            continue
        if drafted > prev_draft:
            lengths.append(1 + acc - prev_acc)
        prev_acc, prev_draft = acc, drafted
    return lengths


def _count(value) -> int | None:
    """An acceptance counter as int (the LLM-API model sends it as a string, sometimes in a list)."""
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else int(float(value))
