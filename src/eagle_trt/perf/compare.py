"""Read a finished run for `perf compare`: an AIPerf artifact dir, or a genai-perf export
(`*_genai_perf.json`, whose metric keys follow the same {avg, p50, ...} shape)."""

from __future__ import annotations

import json
from pathlib import Path

from eagle_trt.errors import EagleTrtError
from eagle_trt.perf.aiperf_run import RunResult, read_aiperf_dir


def load_run(path: Path, default_model: str) -> RunResult:
    path = Path(path)
    if path.is_dir():
        if (path / "profile_export_aiperf.json").exists():
            return read_aiperf_dir(path, default_model)
        exports = sorted(path.glob("*genai_perf.json"))
        if exports:
            return _genai_perf(exports[0], default_model)
        raise EagleTrtError(f"{path} holds neither an AIPerf run (profile_export_aiperf.json) nor a genai-perf export",
                            "pass an AIPerf --artifact-dir or a genai-perf *_genai_perf.json file")
    if path.name.endswith("genai_perf.json"):
        return _genai_perf(path, default_model)
    if path.name == "profile_export_aiperf.json":
        return read_aiperf_dir(path.parent, default_model)
    raise EagleTrtError(f"cannot tell what {path} is", "pass an AIPerf artifact dir or a *_genai_perf.json file")


def _genai_perf(path: Path, model: str) -> RunResult:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise EagleTrtError(f"{path} is not JSON: {exc}", "pass the genai-perf export file") from None
    if "output_token_throughput" not in data:
        raise EagleTrtError(f"{path} has no output_token_throughput", "pass a genai-perf *_genai_perf.json export")
    summary = {k: v for k, v in data.items() if isinstance(v, dict) and "avg" in v}
    cfg = data.get("input_config", {})
    model = (cfg.get("model_names") or cfg.get("model") or [model])
    return RunResult(model[0] if isinstance(model, list) else str(model), summary, [], path.parent)
