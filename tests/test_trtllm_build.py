"""The trtllm-build boundary: exact argv for the EAGLE and base engines, a stand-in trtllm-build on PATH that
checks the argv and the checkpoint (and fails loudly otherwise), environment checks (the LLM-API route: test_llmapi.py)."""

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from eagle_trt.engines import create_spec, trtllm_build as trtllm
from eagle_trt.cli import main
from eagle_trt.errors import EagleTrtError

FAKE = Path(__file__).parent / "fake_trtllm"


@pytest.fixture
def spec(tiny_base, eagle1_draft):
    return create_spec(tiny_base, eagle1_draft, engine="trtllm", max_seq_len=512, max_input_len=256,
                            max_batch_size=4, dtype="float16")


def test_exact_argv(spec, tmp_path):
    eagle = trtllm.trtllm_build_argv(spec, tmp_path / "ck/eagle", tmp_path / "en/eagle", speculative=True)
    assert eagle == ["trtllm-build", "--checkpoint_dir", str(tmp_path / "ck/eagle"),
                     "--output_dir", str(tmp_path / "en/eagle"), "--speculative_decoding_mode", "eagle",
                     "--gemm_plugin", "float16", "--gpt_attention_plugin", "float16", "--kv_cache_type", "paged",
                     "--use_paged_context_fmha", "enable", "--remove_input_padding", "enable",
                     "--context_fmha", "enable", "--max_beam_width", "1", "--max_batch_size", "4",
                     "--max_input_len", "256", "--max_seq_len", "512", "--max_num_tokens", "8192", "--workers", "1"]
    base = trtllm.trtllm_build_argv(spec, tmp_path / "ck/base", tmp_path / "en/base", speculative=False)
    assert "--speculative_decoding_mode" not in base
    assert base[5:] == eagle[7:]  # everything else identical: a fair comparison


def test_stand_in_builds_both_engines(spec, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKE}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(trtllm, "check_environment", lambda s: [])
    result = trtllm.build_trtllm_engines(spec, tmp_path)
    assert result.ran and set(result.engine_dirs) == {"eagle", "base"}
    for name in ("eagle", "base"):
        engine_cfg = json.loads((tmp_path / "engines" / name / "config.json").read_text())
        assert engine_cfg["pretrained_config"]["architecture"] == (
            "EagleForCausalLM" if name == "eagle" else "LlamaForCausalLM")
        assert (tmp_path / "engines" / name / "rank0.engine").exists()


def test_stand_in_rejects_a_broken_contract(spec, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKE}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(trtllm, "check_environment", lambda s: [])
    real = trtllm.trtllm_build_argv
    monkeypatch.setattr(trtllm, "trtllm_build_argv", lambda *a, **k: real(*a, **k) + ["--max_draft_len", "63"])
    with pytest.raises(EagleTrtError, match="must not be passed"):
        trtllm.build_trtllm_engines(spec, tmp_path)
    monkeypatch.setattr(trtllm, "trtllm_build_argv",
                        lambda s, c, e, speculative: real(s, c, e, speculative=not speculative))
    with pytest.raises(EagleTrtError, match="speculative_decoding_mode"):
        trtllm.build_trtllm_engines(spec, tmp_path / "again")


def test_dry_run_converts_and_returns_commands(spec, tmp_path):
    result = trtllm.build_trtllm_engines(spec, tmp_path, build=False)
    assert not result.ran and (tmp_path / "checkpoint/eagle/rank0.safetensors").exists()
    assert (tmp_path / "checkpoint/base/config.json").exists()
    assert result.commands["eagle"][0] == "trtllm-build" and not (tmp_path / "engines").exists()


def test_missing_tensorrt_llm_is_a_clear_error(spec, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EagleTrtError) as err:
        trtllm.build_trtllm_engines(spec, tmp_path)
    assert "tensorrt_llm package is not installed" in str(err.value) and "--dry-run" in err.value.hint
    assert not (tmp_path / "checkpoint").exists(), "nothing heavy happens before the check"


@pytest.mark.parametrize("version, words", [("0.16.0", "before 0.19"), ("0.21.0", None), ("1.0.0", None)])
def test_version_warnings(version, words):
    warnings = trtllm.version_warnings(version, max_batch_size=8)
    assert (words in " ".join(warnings)) if words else warnings == []
    with pytest.raises(EagleTrtError, match="no EAGLE support"):
        trtllm.version_warnings("0.14.0", 1)


def test_convert_cli(tmp_path, tiny_base, eagle1_draft):
    res = CliRunner().invoke(main, ["convert", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o",
                                    str(tmp_path / "ck"), "--tp", "2", "--dtype", "float16"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["config.json", "rank0.safetensors",
                                                                   "rank1.safetensors"]
    again = CliRunner().invoke(main, ["convert", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o",
                                      str(tmp_path / "ck")])
    assert again.exit_code == 1 and "already exists" in again.output and "--force" in again.output
    usage = CliRunner().invoke(main, ["convert", "--base", str(tiny_base), "-o", str(tmp_path / "x")])
    assert usage.exit_code == 2


def test_build_dry_run_writes_checkpoint_and_prints_commands(tmp_path, tiny_base, eagle1_draft):
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o", str(out),
                                    "--engine", "trtllm", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["dry_run"] and len(report["commands"]) == 2
    assert report["commands"][0].startswith(f"trtllm-build --checkpoint_dir {out}/checkpoint/eagle")
    assert "checkpoint/eagle/rank0.safetensors" in report["files"] and "plugins/tree_attention.json" in report["files"]
    assert not (out / "engines" / "eagle").exists()
    plugin = json.loads((out / "plugins" / "tree_attention.json").read_text())
    assert plugin["name"] == "eagle_trt::tree_attention" and "register" in plugin


def test_full_build_through_the_stand_in(tmp_path, tiny_base, eagle1_draft, monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKE}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(trtllm, "check_environment", lambda s: [])
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o", str(out),
                                    "--engine", "trtllm", "--max-seq-len", "512"])
    assert res.exit_code == 0, res.output
    for name in ("eagle", "base"):
        assert (out / "engines" / name / "rank0.engine").exists()
    cfg = (out / "model_repository" / "eagle_engine" / "config.pbtxt").read_text()
    assert str(out / "engines" / "eagle") in cfg and "eagle_choices" in cfg
