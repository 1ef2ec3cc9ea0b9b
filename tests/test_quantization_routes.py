"""Quantized bases through every route: the README's quantization x engine table (produced here from the checks
`inspect` and `build` run), bundles that pass a Model-Optimizer FP8 / NVFP4 base through to the LLM API and vLLM
unchanged, and refusals that name the scheme, write nothing, and point only at routes that run it.

The README must hold exactly this module's table; to refresh it after a deliberate change:

    EAGLE_TRT_WRITE_README=1 .venv/bin/pytest tests/test_quantization_routes.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import builders
import hf_builders
import quant_builders as qb
from readme_tables import readme_table
from eagle_trt.build_spec import SPEC_FILE, BuildSpec
from eagle_trt.cli import main
from eagle_trt.engines.llmapi_release import LLMAPI_RELEASES
from eagle_trt.runtime import EagleDecoder
from eagle_trt.engines import compatibility
from eagle_trt.spec import DraftSpec, ModelSpec

START, END = "<!-- quantization-table:start -->", "<!-- quantization-table:end -->"
# README row -> (quant_builders.SCHEMES name, arguments changed), one per scheme a user brings
ROWS = {
    "Model-Optimizer FP8 (+ FP8 KV cache)": ("modelopt-fp8-kv", {}),
    "Model-Optimizer FP8 per-channel": ("modelopt-fp8-channel", {}),
    "Model-Optimizer NVFP4": ("modelopt-nvfp4", {}),
    "Model-Optimizer INT4 AWQ (W4A16)": ("modelopt-w4a16-awq", {}),
    "Model-Optimizer W4A8 AWQ": ("modelopt-w4a8-awq", {}),
    "Model-Optimizer INT8 SmoothQuant": ("modelopt-int8-sq", {}),
    "compressed-tensors FP8 (per tensor, static)": ("ct-fp8", {}),
    "compressed-tensors FP8 dynamic (per channel)": ("ct-fp8-dynamic", {}),
    "compressed-tensors FP8 blocks": ("ct-fp8-block", {}),
    "compressed-tensors W4A16 (pack-quantized)": ("ct-w4a16", {}),
    "compressed-tensors W8A8 INT8": ("ct-w8a8-int8", {}),
    "compressed-tensors NVFP4": ("ct-nvfp4", {}),
    "AutoAWQ INT4 (GEMM)": ("awq-gemm", {}),
    "GPTQ INT4 (v1)": ("gptq-v1", {}),
    "transformers FP8 (128x128 blocks)": ("fp8-blocks", {"block": 128}),  # on the wide base: 128-row blocks
}
COLUMNS = [("trtllm", None)] + [("llmapi", r.version) for r in LLMAPI_RELEASES.values()] + [("pytorch", None),
                                                                                          ("vllm", None)]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return hf_builders.make_hf_base(tmp_path_factory.mktemp("routes_src") / "llama31", "llama31")


@pytest.fixture(scope="module")
def wide_source(tmp_path_factory):
    """128-wide layers: whole 128x128 FP8 blocks (TensorRT-LLM reads FP8 blocks of 128x128 only)."""
    return hf_builders.make_hf_base(tmp_path_factory.mktemp("routes_wide") / "llama31", "llama31",
                                    dims=hf_builders.TINY | {"hidden_size": 128, "intermediate_size": 256})


@pytest.fixture(scope="module")
def bases(source, wide_source, tmp_path_factory):
    root = tmp_path_factory.mktemp("routes")
    return {row: qb.write_scheme(name, wide_source if name == "fp8-blocks" else source, root / f"row{i}", **changed)[0]
            for i, (row, (name, changed)) in enumerate(ROWS.items())}


@pytest.fixture(scope="module")
def drafts(bases, tmp_path_factory):
    """An EAGLE-3 draft per base (NVIDIA's pairings: a quantized base, a BF16 EAGLE-3 draft)."""
    root = tmp_path_factory.mktemp("routes_drafts")
    return {row: builders.make_eagle3_draft(root / f"d{i}", base) for i, (row, base) in enumerate(bases.items())}


def render(bases, drafts) -> str:
    notes: dict[str, int] = {}
    head = [f"`{e}`" if v is None else f"`{e}` {v}" for e, v in COLUMNS]
    rows = ["| base (quantized by) | " + " | ".join(head) + " |", "|---|" + "---|" * len(COLUMNS)]
    for row, base_dir in bases.items():
        base, draft = ModelSpec.from_dir(base_dir), DraftSpec.from_dir(drafts[row])
        cells = []
        for engine, version in COLUMNS:
            problems = compatibility(base, draft, engine, version)
            if problems:
                message = problems[0].message.split(": ", 1)[1]  # the reason, without "the X engine does not run ..."
                cells.append(f"refused ({notes.setdefault(message, len(notes) + 1)})")
            else:
                cells.append("runs (dequantized exactly)" if engine == "pytorch" else "passed through")
        rows.append(f"| {row} | " + " | ".join(cells) + " |")
    footnotes = [f"({n}) {message}" for message, n in notes.items()]
    return "\n".join(rows) + "\n\n" + "\n".join(f"{line}  " for line in footnotes).rstrip() + "\n"


def test_the_readme_table_is_what_the_checks_say(bases, drafts):
    """Every cell is what `build` decides; every `runs` of the pytorch engine is run: EAGLE equals plain decoding."""
    table = render(bases, drafts)
    current = readme_table(START, END, table)
    assert current == table, "README.md's quantization table is stale: see this module's docstring to refresh it"
    prompt = list(range(5, 37))
    for row, base in bases.items():
        plain = EagleDecoder.load(base, None).generate_all(prompt, 16).token_ids
        assert EagleDecoder.load(base, drafts[row], tree="chain:3").generate_all(prompt, 16).token_ids == plain, row


@pytest.mark.parametrize("row", ["Model-Optimizer FP8 (+ FP8 KV cache)", "Model-Optimizer NVFP4"])
@pytest.mark.parametrize("version", [r.version for r in LLMAPI_RELEASES.values()])
def test_llmapi_bundle_passes_the_quantized_base_through(bases, drafts, tmp_path, row, version):
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["build", "--base", str(bases[row]), "--draft", str(drafts[row]), "-o", str(out),
                                    "--engine", "llmapi", "--backend-version", version, "--tree", "chain:3",
                                    "--dry-run"])
    assert res.exit_code == 0, res.output
    model = yaml.safe_load((out / "model_repository/eagle_engine/1/model.yaml").read_text())
    spec = BuildSpec.load(out / SPEC_FILE)
    assert model["model"] == str(spec.engine_base_path)
    assert_passed_through(bases[row], spec.engine_base_path)  # TensorRT-LLM reads the quantization itself
    assert "quantization" not in json.dumps(model) and "quant_config" not in model
    speculative = model["speculative_config"]
    assert speculative["speculative_model"] == str(drafts[row].resolve())  # the draft stays unquantized
    assert set(speculative) <= LLMAPI_RELEASES[tuple(map(int, version.split(".")))].fields
    assert spec.backend_version == version and spec.base.quantization == ModelSpec.from_dir(bases[row]).quantization
    assert (out / "perf").is_dir() and any((out / "perf").iterdir())


def assert_passed_through(base: Path, served: Path) -> None:
    """`served` is the base itself, or its copy with both RoPE layouts in config.json (build/served_base.py): every
    other file a link to the original, the quantization config unchanged."""
    if served == base.resolve():
        return
    original = json.loads((base / "config.json").read_text())
    assert json.loads((served / "config.json").read_text()).get("quantization_config") == \
        original.get("quantization_config")
    for item in base.iterdir():
        if item.name != "config.json":
            assert (served / item.name).resolve() == item.resolve(), item.name


@pytest.mark.parametrize("row", ["Model-Optimizer FP8 (+ FP8 KV cache)", "Model-Optimizer NVFP4",
                                 "compressed-tensors W4A16 (pack-quantized)", "AutoAWQ INT4 (GEMM)"])
def test_vllm_bundle_passes_the_quantized_base_through(bases, drafts, tmp_path, row):
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["build", "--base", str(bases[row]), "--draft", str(drafts[row]), "-o", str(out),
                                    "--engine", "vllm", "--tree", "chain:3"])
    assert res.exit_code == 0, res.output
    model = json.loads((out / "model_repository/eagle_model/1/model.json").read_text())
    spec = BuildSpec.load(out / SPEC_FILE)
    assert model["model"] == str(spec.engine_base_path) and "quantization" not in model  # vLLM reads the config
    assert_passed_through(bases[row], spec.engine_base_path)
    assert model["speculative_config"]["model"] == str(drafts[row].resolve())
    assert spec.base.quantization is not None


@pytest.mark.parametrize("args", [["--base-only"], ["--draft", "EAGLE1"]])
def test_convert_refuses_a_quantized_base_by_name_and_writes_nothing(bases, tmp_path, args):
    """The silent FP8 convert: now exit 1 naming the scheme, pointing only at routes that run it."""
    base = bases["Model-Optimizer FP8 (+ FP8 KV cache)"]
    if args[0] == "--draft":
        args = ["--draft", str(builders.make_eagle1_draft(tmp_path / "e1", base))]
    out = tmp_path / "ckpt"
    res = CliRunner().invoke(main, ["convert", "--base", str(base), "-o", str(out), *args])
    assert res.exit_code == 1, res.output
    assert "Model-Optimizer FP8" in res.output and "convert_checkpoint.py" in res.output
    assert "--engine pytorch" in res.output and "--engine trtllm" not in res.output.split("hint:")[1]
    assert not out.exists() and not list(tmp_path.glob(".ckpt*"))


def test_inspect_names_the_scheme(bases):
    res = CliRunner().invoke(main, ["inspect", "--base", str(bases["Model-Optimizer FP8 (+ FP8 KV cache)"]), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    quant = report["base"]["quantization"]
    assert (quant["method"], quant["algo"], quant["kv_cache"]) == ("modelopt", "FP8", "FP8")
    assert "lm_head" in quant["excluded"] and "FP8 weights, per tensor" in quant["summary"]
    assert not report["engines"]["trtllm"]["ok"] and report["engines"]["pytorch"]["ok"]
    res = CliRunner().invoke(main, ["inspect", "--base", str(bases["Model-Optimizer NVFP4"]), "--engine", "trtllm"])
    assert res.exit_code == 1
    assert "--engine trtllm cannot run this base" in res.output and "Model-Optimizer NVFP4" in res.output
    assert "base and draft" not in res.output
