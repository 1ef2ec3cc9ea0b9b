"""Checkpoints checked at the door: every tensor's shape against its config.json, before any weight is loaded."""

import json
import shutil

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from eagle_trt.cli import main
from eagle_trt.errors import EagleTrtError
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.loading import expected_shapes, shape_problems
from eagle_trt.spec import DraftSpec, ModelSpec


def _resave(src, dst, edit):
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


@pytest.fixture()
def bad_q_draft(eagle1_draft, tmp_path):
    """An EAGLE-1 draft whose q_proj has one head too few for the head count its config.json states."""
    def drop_a_head(t):
        q = t["layers.0.self_attn.q_proj.weight"]
        head_dim = json.loads((eagle1_draft / "config.json").read_text())["hidden_size"] // json.loads(
            (eagle1_draft / "config.json").read_text())["num_attention_heads"]
        t["layers.0.self_attn.q_proj.weight"] = q[:-head_dim].clone()
    return _resave(eagle1_draft, tmp_path / "bad_draft", drop_a_head)


def test_expected_shapes_match_a_good_pair(tiny_base, eagle1_draft, eagle3_draft):
    base = ModelSpec.from_dir(tiny_base)
    for draft_dir in (eagle1_draft, eagle3_draft):
        draft = DraftSpec.from_dir(draft_dir)
        want_base, want_draft = expected_shapes(base, draft)
        assert want_base["model.layers.0.self_attn.q_proj.weight"] == (
            base.num_attention_heads * base.head_dim, base.hidden_size)
        assert "fc.weight" in want_draft
        assert shape_problems(base, draft) == []


def test_a_draft_contradicting_its_config_is_named(tiny_base, bad_q_draft):
    problems = shape_problems(ModelSpec.from_dir(tiny_base), DraftSpec.from_dir(bad_q_draft))
    assert len(problems) == 1
    cfg = json.loads((bad_q_draft / "config.json").read_text())
    heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
    found = [(heads - 1) * hidden // heads, hidden]
    assert "'layers.0.self_attn.q_proj.weight'" in problems[0].message
    assert f"shape {found}" in problems[0].message and f"expected {[hidden, hidden]}" in problems[0].message


def test_inspect_build_and_load_stop_at_the_door(tiny_base, bad_q_draft, tmp_path):
    result = CliRunner().invoke(main, ["inspect", "--base", str(tiny_base), "--draft", str(bad_q_draft), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.output[:result.output.rindex("}") + 1])
    assert not report["compatible"]
    assert any("q_proj" in p["message"] for p in report["problems"])

    out = tmp_path / "bundle"
    result = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(bad_q_draft), "-o", str(out),
                                       "--engine", "pytorch", "--tree", "chain:2"])
    assert result.exit_code == 1
    assert "q_proj" in result.output and "config.json" in result.output
    assert not out.exists()  # nothing half-written

    with pytest.raises(EagleTrtError, match="q_proj"):
        EagleDecoder.load(tiny_base, bad_q_draft, tree="chain:2")


def test_a_base_with_a_wrong_mlp_is_named(tiny_base, tmp_path):
    def widen(t):
        w = t["model.layers.1.mlp.down_proj.weight"]  # [hidden, inter]
        t["model.layers.1.mlp.down_proj.weight"] = torch.cat((w, w[:, :1]), dim=1)
    bad = _resave(tiny_base, tmp_path / "bad_base", widen)
    problems = shape_problems(ModelSpec.from_dir(bad))
    assert len(problems) == 1 and "model.layers.1.mlp.down_proj.weight" in problems[0].message
