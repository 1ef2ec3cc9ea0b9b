"""`eagle-trt inspect`: describe a base (and a draft) from configs, tokenizer files and the weight index, without
loading weights, and say whether they fit together (and with which engine, given the TensorRT-LLM installed here:
its engine path exists up to 1.2 only). JSON keys: docs/inspect.md."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from eagle_trt.commands.options import BASE, DRAFT
from eagle_trt.errors import EagleTrtError
from eagle_trt.engines import NAMES


def inspect_dirs(base_dir: Path, draft_dir: Path | None, engine: str | None,
                 backend_version: str | None = None) -> dict:
    from eagle_trt.engines.trtllm_install import TrtllmInstall, auto_engine, require_engine
    from eagle_trt.runtime.loading import shape_problems
    from eagle_trt.engines import compatibility
    from eagle_trt.spec import DraftSpec, ModelSpec

    base = ModelSpec.from_dir(base_dir)
    draft = DraftSpec.from_dir(draft_dir) if draft_dir is not None else None
    install = TrtllmInstall.detect()
    draft_format = draft.format if draft is not None else None
    engines = [engine] if engine else list(NAMES)
    verdicts = {}
    for e in engines:
        version = backend_version if engine is not None else None  # --backend-version goes with --engine
        problems = [dataclasses.asdict(p) for p in compatibility(base, draft, e, version)]
        try:
            require_engine(e, draft_format, install)
        except EagleTrtError as exc:
            problems.append({"message": exc.message, "hint": exc.hint})
        verdicts[e] = {"ok": not problems, "problems": problems}
    try:
        auto = auto_engine(draft_format, "cuda", install)
    except EagleTrtError as exc:
        auto = f"none: {exc.message}"
    trtllm = install.to_dict() | {"summary": install.describe(), "auto_engine_on_gpu": auto}
    general = compatibility(base, draft) + shape_problems(base, draft)
    base_d = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(base).items()}
    base_d["quantization"] = base.quantization.to_dict() | {"summary": base.quantization.summary()} \
        if base.quantization is not None else None
    draft_d = None
    if draft is not None:
        draft_d = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(draft).items()}
    return {"base": base_d, "draft": draft_d, "compatible": not general,
            "problems": [dataclasses.asdict(p) for p in general], "engines": verdicts, "tensorrt_llm": trtllm}


def _table(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for title, part in (("base", report["base"]), ("draft", report["draft"])):
        if part is None:
            continue
        table = Table(title=f"{title}: {part['path']}", show_header=False)
        for key, value in part.items():
            if key == "quantization":
                table.add_row(key, value["summary"] if value else "none (unquantized weights)")
            elif key != "path":
                table.add_row(key, str(value))
        console.print(table)
    verdict = "compatible" if report["compatible"] else "NOT compatible"
    console.print(f"verdict: {verdict}")
    for p in report["problems"]:
        console.print(f"  - {p['message']}\n    hint: {p['hint']}")
    for engine, v in report["engines"].items():
        status = "ok" if v["ok"] else "no: " + "; ".join(p["message"] for p in v["problems"])
        console.print(f"engine {engine}: {status}")
    trtllm = report["tensorrt_llm"]
    console.print(f"{trtllm['summary']}; --engine auto on a GPU: {trtllm['auto_engine_on_gpu']}")


@click.command("inspect")
@click.option("--base", "base_dir", required=True, type=BASE, help="HF base model directory or hub id.")
@click.option("--draft", "draft_dir", type=DRAFT, help="EAGLE draft directory or hub id.")
@click.option("--engine", type=click.Choice(NAMES), help="Check support by one engine only.")
@click.option("--backend-version", default=None,
              help="With --engine trtllm or llmapi: the TensorRT-LLM release to check against (llmapi: 1.2, 1.3, 1.4; "
                   "default 1.2).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report (keys in docs/inspect.md).")
def inspect_cmd(base_dir, draft_dir, engine, backend_version, as_json):
    """Report a base (and draft) checkpoint and whether they fit together. Exit 1 when they do not.

    \b
    Example:
      eagle-trt inspect --base ./Llama-3-8B-Instruct --draft ./EAGLE-LLaMA3-Instruct-8B --json
    """
    report = inspect_dirs(base_dir, draft_dir, engine, backend_version)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _table(report)
    bad = not report["compatible"] or (engine is not None and not report["engines"][engine]["ok"])
    if bad:
        problems = report["problems"] or report["engines"][engine]["problems"]
        what = "the base and draft do not fit" if draft_dir is not None else "the base cannot be served"
        if not report["problems"]:
            what = f"--engine {engine} cannot run this {'pair' if draft_dir is not None else 'base'}"
        raise EagleTrtError(what + ": " + "; ".join(p["message"] for p in problems),
                            "; ".join(dict.fromkeys(p["hint"] for p in problems)))
