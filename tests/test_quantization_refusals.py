"""Quantized checkpoints eagle-trt cannot read, and damaged ones, are refused by name before any work: the message
names the scheme (or the tensor and its layout), never blames the download for a layout, and the build writes
nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

import builders
import hf_builders
import quant_builders as qb
from eagle_trt.cli import main
from eagle_trt.errors import EagleTrtError
from eagle_trt.runtime.loading import shape_problems
from eagle_trt.spec import DraftSpec, ModelSpec


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return hf_builders.make_hf_base(tmp_path_factory.mktemp("refusal_src") / "llama31", "llama31")


@pytest.fixture(scope="module")
def fp8(source, tmp_path_factory):
    return qb.write_modelopt(source, tmp_path_factory.mktemp("refusal_fp8") / "fp8", "FP8")[0]


@pytest.fixture(scope="module")
def awq(source, tmp_path_factory):
    return qb.write_awq(source, tmp_path_factory.mktemp("refusal_awq") / "awq")[0]


def _copy(base: Path, out: Path) -> Path:
    shutil.copytree(base, out)
    return out


def _set_quant_config(base: Path, out: Path, **changes) -> Path:
    path = _copy(base, out)
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"] = {**cfg["quantization_config"], **changes}
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _rewrite_tensors(path: Path, change) -> None:
    f = path / "model.safetensors"
    tensors = load_file(str(f))
    change(tensors)
    save_file(tensors, str(f), metadata={"format": "pt"})


@pytest.mark.parametrize("changes, words", [
    ({"version": "gemv"}, "an AWQ INT4 base in AutoAWQ's GEMV layout"),
    ({"bits": 3}, "an AWQ base with bits = 3"),
    ({"zero_point": False}, "without zero points"),
])
def test_awq_layouts_we_do_not_read_are_refused_by_name(awq, tmp_path, changes, words):
    path = _set_quant_config(awq, tmp_path / "b", **changes)
    with pytest.raises(EagleTrtError, match=words) as err:
        ModelSpec.from_dir(path)
    assert "download" not in str(err.value) and "docs/quantization.md" in err.value.hint


@pytest.mark.parametrize("quantization_config, words", [
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "a bitsandbytes base"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 32, "checkpoint_format": "marlin"}, "'marlin' checkpoint"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 32, "dynamic": {"-:.*down": {}}}, "per-module overrides"),
    ({"quant_method": "fp8", "weight_block_size": None}, "weight_block_size None"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "sparsity_config": {"format": "sparse-24"},
      "config_groups": {}}, "with sparsity"),
    ({"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
      "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float"}}}},
     "a compressed-tensors mxfp4-pack-quantized base"),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_MXFP4_FP8"}, "a Model-Optimizer W4A8_MXFP4_FP8 base"),
])
def test_schemes_we_do_not_read_are_refused_by_name(source, tmp_path, quantization_config, words):
    path = _copy(source, tmp_path / "b")
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(cfg | {"quantization_config": quantization_config}))
    with pytest.raises(EagleTrtError, match=words):
        ModelSpec.from_dir(path)
    res = CliRunner().invoke(main, ["build", "--base", str(path), "-o", str(tmp_path / "out"), "--engine", "pytorch"])
    assert res.exit_code == 1 and not (tmp_path / "out").exists()


def test_an_awq_base_without_its_config_is_not_blamed_on_the_download(awq, tmp_path):
    """The issue's AutoAWQ case: qweight/qzeros/scales where q_proj.weight should be."""
    path = _copy(awq, tmp_path / "b")
    cfg = json.loads((path / "config.json").read_text())
    del cfg["quantization_config"]
    (path / "config.json").write_text(json.dumps(cfg))
    problems = shape_problems(ModelSpec.from_dir(path))
    unread = [p for p in problems if "quantization tensors" in p.message]
    assert unread and "has no quantization config" in unread[0].message
    assert "quantization_config" in unread[0].hint and "re-download the checkpoint, or fix" not in unread[0].hint


def test_an_fp8_base_without_its_config_is_refused_not_read_as_weights(fp8, tmp_path):
    path = _copy(fp8, tmp_path / "b")
    (path / "hf_quant_config.json").unlink()
    cfg = json.loads((path / "config.json").read_text())
    del cfg["quantization_config"]
    (path / "config.json").write_text(json.dumps(cfg))
    messages = " ".join(p.message for p in shape_problems(ModelSpec.from_dir(path)))
    assert "is stored as float8_e4m3fn, but no quantization config says how to dequantize it" in messages
    res = CliRunner().invoke(main, ["convert", "--base", str(path), "--base-only", "-o", str(tmp_path / "ckpt")])
    assert res.exit_code == 1 and not (tmp_path / "ckpt").exists()


def test_a_missing_scale_tensor_is_named_with_its_layout(fp8, tmp_path):
    path = _copy(fp8, tmp_path / "b")
    _rewrite_tensors(path, lambda t: t.pop("model.layers.1.mlp.down_proj.weight_scale"))
    messages = [p.message for p in shape_problems(ModelSpec.from_dir(path))]
    assert messages == ["Model-Optimizer FP8 base tensor 'model.layers.1.mlp.down_proj.weight_scale' is missing (FP8 "
                        "weights, per tensor stores float32/float16/bfloat16 [] or [1] there)"]


def test_a_scale_of_the_wrong_shape_and_a_stray_tensor_are_named(awq, tmp_path):
    path = _copy(awq, tmp_path / "b")

    def damage(tensors):
        tensors["model.layers.0.self_attn.q_proj.scales"] = tensors["model.layers.0.self_attn.q_proj.scales"][:1]
        tensors["model.layers.0.self_attn.q_proj.stray"] = tensors["model.norm.weight"].clone()
    _rewrite_tensors(path, damage)
    messages = " ".join(p.message for p in shape_problems(ModelSpec.from_dir(path)))
    assert "tensor 'model.layers.0.self_attn.q_proj.scales' is float16 [1, 64]" in messages
    assert "'model.layers.0.self_attn.q_proj.stray'" in messages and "AWQ INT4 (AutoAWQ GEMM)" in messages


def test_a_quantized_draft_is_refused_by_name(source, tmp_path):
    draft = builders.make_eagle3_draft(tmp_path / "draft", source)
    cfg = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps(cfg | {"quantization_config": {"quant_method": "fp8"}}))
    with pytest.raises(EagleTrtError, match="the draft is quantized \\(fp8\\)") as err:
        DraftSpec.from_dir(draft)
    assert "BF16" in err.value.hint


def test_refusal_hints_name_only_the_routes_that_run_the_pair(fp8, tmp_path):
    """An FP8 base with an EAGLE-1 draft: the LLM API runs EAGLE-3 only, TensorRT-LLM's engine path no FP8."""
    e1 = builders.make_eagle1_draft(tmp_path / "e1", fp8)
    res = CliRunner().invoke(main, ["build", "--base", str(fp8), "--draft", str(e1), "-o", str(tmp_path / "o"),
                                    "--engine", "trtllm", "--dry-run"])
    assert res.exit_code == 1 and "a Model-Optimizer FP8 base" in res.output
    hint = res.output.split("hint:")[1]
    assert "--engine pytorch" in hint and "--engine vllm" in hint and "llmapi" not in hint and "trtllm" not in hint
    e3 = builders.make_eagle3_draft(tmp_path / "e3", fp8)
    res = CliRunner().invoke(main, ["inspect", "--base", str(fp8), "--draft", str(e3), "--engine", "trtllm"])
    assert "--engine llmapi --backend-version 1.2" in res.output.split("hint:")[1]
