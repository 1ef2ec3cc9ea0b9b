"""`eagle-trt inspect`: human and JSON output, pinned JSON keys, verdicts per engine."""

import json

from click.testing import CliRunner

from eagle_trt.cli import main

BASE_KEYS = {"path", "architecture", "model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
             "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "rms_norm_eps", "rope_theta",
             "rope_scaling", "max_position_embeddings", "tie_word_embeddings", "torch_dtype", "bos_token_id",
             "eos_token_ids", "has_tokenizer", "has_chat_template", "weight_format", "family", "qkv_bias", "o_bias",
             "mlp_bias", "qk_norm", "sliding_window", "sliding_layers", "hub_source", "quantization"}
DRAFT_KEYS = {"path", "format", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
              "intermediate_size", "vocab_size", "draft_vocab_size", "target_hidden_size", "fc_in_features",
              "has_fc_bias", "has_embed_tokens", "rms_norm_eps", "rope_theta", "num_hidden_layers", "weight_format",
              "capture_layers", "max_position_embeddings", "capture_source", "layout", "layer_prefix", "rope_scaling",
              "qkv_bias", "o_bias", "mlp_bias", "qk_norm", "norm_before_residual", "input_norm", "fc_norm",
              "norm_output", "final_norm", "hub_source"}


def run(*args):
    return CliRunner().invoke(main, ["inspect", *map(str, args)])


def test_json_keys_are_stable(tiny_base, eagle1_draft):
    res = run("--base", tiny_base, "--draft", eagle1_draft, "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert set(report) == {"base", "draft", "compatible", "problems", "engines", "tensorrt_llm"}
    assert set(report["tensorrt_llm"]) == {"version", "trtllm_build", "engine_path", "summary", "auto_engine_on_gpu"}
    assert set(report["base"]) == BASE_KEYS and set(report["draft"]) == DRAFT_KEYS
    assert set(report["engines"]) == {"trtllm", "llmapi", "pytorch", "vllm"}
    assert report["compatible"] and report["problems"] == []
    assert report["base"]["eos_token_ids"] == [2] and report["base"]["has_chat_template"]
    assert report["base"]["quantization"] is None
    assert report["draft"]["format"] == "eagle1" and report["draft"]["has_fc_bias"]
    assert report["engines"]["trtllm"]["ok"] and not report["engines"]["llmapi"]["ok"]


def test_eagle3_and_nobias_drafts(tiny_base, eagle3_draft, eagle1_draft_nobias):
    r3 = json.loads(run("--base", tiny_base, "--draft", eagle3_draft, "--json").output)
    assert r3["draft"]["format"] == "eagle3" and r3["draft"]["draft_vocab_size"] == 200
    assert r3["draft"]["fc_in_features"] == 3 * 64 and not r3["draft"]["has_embed_tokens"]
    assert not r3["engines"]["trtllm"]["ok"] and r3["engines"]["llmapi"]["ok"]
    r1 = json.loads(run("--base", tiny_base, "--draft", eagle1_draft_nobias, "--json").output)
    assert not r1["draft"]["has_fc_bias"] and not r1["draft"]["has_embed_tokens"]


def test_engine_option_and_exit_code(tiny_base, eagle3_draft):
    res = run("--base", tiny_base, "--draft", eagle3_draft, "--engine", "trtllm")
    assert res.exit_code == 1
    assert "EAGLE-3 drafts are not supported by the TensorRT-LLM engine" in res.output
    assert "--engine llmapi" in res.output


def test_human_output(tiny_base_tied):
    res = run("--base", tiny_base_tied)
    assert res.exit_code == 0, res.output
    assert "tie_word_embeddings" in res.output and "verdict: compatible" in res.output
    assert "engine trtllm: ok" in res.output


def test_a_current_container_is_told_before_building(tiny_base, eagle1_draft, eagle3_draft, tmp_path, monkeypatch):
    """A stand-in TensorRT-LLM 1.3 (dist-info metadata, no trtllm-build): inspect says what build would do."""
    site = tmp_path / "site"
    (site / "tensorrt_llm").mkdir(parents=True)
    (site / "tensorrt_llm" / "__init__.py").write_text("")
    (site / "tensorrt_llm-1.3.0.dist-info").mkdir()
    (site / "tensorrt_llm-1.3.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorrt_llm\n"
                                                                     "Version: 1.3.0\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PATH", str(tmp_path))
    r1 = json.loads(run("--base", tiny_base, "--draft", eagle1_draft, "--json").output)
    assert r1["tensorrt_llm"]["version"] == "1.3.0" and not r1["tensorrt_llm"]["engine_path"]
    assert not r1["engines"]["trtllm"]["ok"] and r1["engines"]["pytorch"]["ok"]
    assert "has no TensorRT engine path" in r1["engines"]["trtllm"]["problems"][0]["message"]
    assert r1["tensorrt_llm"]["auto_engine_on_gpu"].startswith("none: cannot serve an EAGLE-1/2 draft")
    r3 = json.loads(run("--base", tiny_base, "--draft", eagle3_draft, "--json").output)
    assert r3["tensorrt_llm"]["auto_engine_on_gpu"] == "llmapi" and r3["engines"]["llmapi"]["ok"]
    human = run("--base", tiny_base, "--draft", eagle1_draft, "--engine", "trtllm")
    assert human.exit_code == 1 and "TensorRT-LLM 1.3.0" in human.output and "--format eagle3" in human.output


def test_an_unsupported_rope_scaling_is_refused_by_inspect_and_build(tiny_base, eagle1_draft, tmp_path):
    import shutil

    base = tmp_path / "yarn_base"
    shutil.copytree(tiny_base, base)
    cfg = json.loads((base / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "dynamic", "factor": 4.0}
    (base / "config.json").write_text(json.dumps(cfg))
    words = "rope_type 'dynamic' is not supported: dynamic NTK scaling changes the frequencies"
    for args in (("--base", base, "--draft", eagle1_draft), ("--base", base, "--json")):
        res = run(*args)
        assert res.exit_code == 1 and words in res.output and "Traceback" not in res.output
    built = CliRunner().invoke(main, ["build", "--base", str(base), "--draft", str(eagle1_draft), "-o",
                                      str(tmp_path / "out"), "--engine", "pytorch", "--tree", "chain:2"])
    assert built.exit_code == 1 and words in built.output
    assert "llama3" in built.output and not (tmp_path / "out").exists()  # the hint names what works
