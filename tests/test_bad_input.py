"""Malformed inputs: each is rejected before any heavy work with a message naming the file, the bad value, what
was expected and what to do. Checked through the Python API and through the CLI (exit code 1, no traceback)."""

import json
import os
import pickle
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

import builders
from eagle_trt.cli import main
from eagle_trt.errors import EagleTrtError
from eagle_trt.spec import DraftSpec, ModelSpec, require_compatible

SENTINEL = Path("/tmp/eagle_trt_pickle_sentinel")


class RunsCode:
    """Unpickling this would create the sentinel file (it must never happen)."""

    def __reduce__(self):
        return (os.system, (f"touch {SENTINEL}",))


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_config(d: Path, **changes) -> Path:
    cfg = json.loads((d / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def base_case(name, tmp, tiny_base, tiny_base_tied):
    """Build one malformed base directory; returns (path, words the message must contain)."""
    d = tmp / name
    if name == "missing_config":
        copy(tiny_base, d)
        (d / "config.json").unlink()
        return d, ["no config.json", str(d)]
    if name == "invalid_json_config":
        copy(tiny_base, d)
        (d / "config.json").write_text("{hidden_size: 64")
        return d, ["config.json is not valid JSON"]
    if name == "config_not_object":
        copy(tiny_base, d)
        (d / "config.json").write_text("[1, 2]")
        return d, ["must hold a JSON object", "list"]
    if name == "config_missing_hidden":
        return edit_config(copy(tiny_base, d), hidden_size=None), ["has no 'hidden_size'"]
    if name == "config_bad_layers":
        return edit_config(copy(tiny_base, d), num_hidden_layers=-2), ["num_hidden_layers = -2", "positive integer"]
    if name == "config_string_heads":
        return edit_config(copy(tiny_base, d), num_attention_heads="four"), ["num_attention_heads = 'four'"]
    if name == "no_weights":
        copy(tiny_base, d)
        (d / "model.safetensors").unlink()
        return d, ["no weights in", "model.safetensors"]
    if name == "truncated_safetensors":
        copy(tiny_base, d)
        data = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(data[: len(data) // 2])
        return d, ["is truncated", "model.safetensors", "re-download"]
    if name == "tiny_safetensors":
        copy(tiny_base, d)
        (d / "model.safetensors").write_bytes(b"\x01\x02")
        return d, ["truncated", "not even a safetensors header"]
    if name == "corrupt_header_length":
        copy(tiny_base, d)
        data = bytearray((d / "model.safetensors").read_bytes())
        data[:8] = struct.pack("<Q", 10**12)
        (d / "model.safetensors").write_bytes(bytes(data))
        return d, ["corrupt safetensors header", "claims 1000000000000 header bytes"]
    if name == "corrupt_header_json":
        copy(tiny_base, d)
        data = bytearray((d / "model.safetensors").read_bytes())
        data[8:12] = b"\xff\xfe{{"
        (d / "model.safetensors").write_bytes(bytes(data))
        return d, ["corrupt safetensors header", "not JSON"]
    if name == "index_missing_shard":
        copy(tiny_base_tied, d)
        next(d.glob("model-00002-*.safetensors")).unlink()
        return d, ["points to a missing shard", "model-00002-of-00002.safetensors"]
    if name == "index_invalid":
        copy(tiny_base_tied, d)
        (d / "model.safetensors.index.json").write_text('{"metadata": {}}')
        return d, ["not a valid weight index", "weight_map"]
    if name == "empty_dir":
        d.mkdir()
        return d, ["is empty", str(d)]
    if name == "path_is_file":
        d.write_text("hello")
        return d, ["is a file, not a directory"]
    if name == "missing_dir":
        return d, ["does not exist"]
    if name == "base_is_draft":
        return builders.make_eagle1_draft(d, tiny_base), ["is an EAGLE draft, not a base model"]
    if name == "two_ggufs":
        d.mkdir()
        (d / "config.json").write_text(json.dumps(json.loads((tiny_base / "config.json").read_text())))
        (d / "a.gguf").write_bytes(b"x")
        (d / "b.gguf").write_bytes(b"y")
        return d, ["holds 2 GGUF files"]
    if name == "broken_gguf":
        d.mkdir()
        (d / "config.json").write_text((tiny_base / "config.json").read_text())
        (d / "m.gguf").write_bytes(b"GGUF\x03\x00\x00\x00garbage")
        return d, ["is not a readable GGUF file"]
    raise AssertionError(name)


BASE_CASES = ["missing_config", "invalid_json_config", "config_not_object", "config_missing_hidden",
              "config_bad_layers", "config_string_heads", "no_weights", "truncated_safetensors", "tiny_safetensors",
              "corrupt_header_length", "corrupt_header_json", "index_missing_shard", "index_invalid", "empty_dir",
              "path_is_file", "missing_dir", "base_is_draft", "two_ggufs", "broken_gguf"]


@pytest.mark.parametrize("name", BASE_CASES)
def test_bad_base(name, tmp_path, tiny_base, tiny_base_tied):
    path, words = base_case(name, tmp_path, tiny_base, tiny_base_tied)
    with pytest.raises(EagleTrtError) as err:
        ModelSpec.from_dir(path)
    for w in words:
        assert w in str(err.value), (w, str(err.value))
    assert err.value.hint, "every error carries a hint on what to do"
    res = CliRunner().invoke(main, ["inspect", "--base", str(path)])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "Error:" in res.output and "hint:" in res.output


def test_pickle_with_code_is_refused_and_never_runs(tmp_path, tiny_base):
    SENTINEL.unlink(missing_ok=True)
    d = builders.make_eagle1_draft(tmp_path / "evil", tiny_base)
    (d / "model.safetensors").unlink()
    with open(d / "pytorch_model.bin", "wb") as fh:
        pickle.dump({"fc.weight": RunsCode()}, fh)
    with pytest.raises(EagleTrtError, match="refused to load .*pytorch_model.bin") as err:
        DraftSpec.from_dir(d)
    assert "weights_only" in err.value.hint
    assert not SENTINEL.exists(), "the pickled code ran"
    res = CliRunner().invoke(main, ["inspect", "--base", str(tiny_base), "--draft", str(d)])
    assert res.exit_code == 1 and not SENTINEL.exists()


def test_plain_bin_draft_loads(tiny_base, eagle1_draft_bin):
    spec = DraftSpec.from_dir(eagle1_draft_bin)
    assert spec.format == "eagle1" and spec.weight_format == "bin"


def make_unreadable(path, monkeypatch) -> None:
    """chmod 000 where that stops the reader; as root (whom modes do not stop) every open of `path` raises the
    EACCES error a non-root reader would get, so the test runs the same checks either way."""
    if os.geteuid() != 0:
        path.chmod(0)
        return
    import builtins
    import io

    real_open = builtins.open

    def deny(file, *a, **k):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", deny)
    monkeypatch.setattr(io, "open", deny)  # pathlib opens through io.open


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_unreadable_file_is_reported_by_name(tmp_path, tiny_base, monkeypatch, name):
    d = copy(tiny_base, tmp_path / "b")
    make_unreadable(d / name, monkeypatch)
    with pytest.raises(EagleTrtError, match="permission denied") as err:
        ModelSpec.from_dir(d)
    assert name in str(err.value)


def draft_case(name, tmp, tiny_base):
    d = tmp / name
    if name == "draft_hidden_mismatch":
        other = builders.make_base(tmp / "other", builders.TinyDims(hidden_size=32, num_attention_heads=2,
                                                                     num_key_value_heads=1))
        return builders.make_eagle1_draft(d, other), ["draft hidden_size 32 != base hidden_size 64"]
    if name == "draft_vocab_mismatch":
        return edit_config(builders.make_eagle1_draft(d, tiny_base), vocab_size=999), ["vocab_size 999 != base"]
    if name == "eagle3_fc_mismatch":
        other = builders.make_base(tmp / "other3", builders.TinyDims(hidden_size=32, num_attention_heads=2,
                                                                      num_key_value_heads=1))
        d3 = builders.make_eagle3_draft(d, other)
        return edit_config(d3, hidden_size=64, num_attention_heads=4, head_dim=16), \
            ["fc takes 96 inputs, expected 3 captured layers x base hidden = 192"]
    if name == "unknown_layout":
        d.mkdir()
        from safetensors.torch import save_file
        import torch

        save_file({"something.weight": torch.zeros(2, 2)}, str(d / "model.safetensors"))
        (d / "config.json").write_text((tiny_base / "config.json").read_text())
        return d, ["unknown draft layout", "something.weight"]
    if name == "draft_is_base":
        return copy(tiny_base, d), ["looks like a base model", "model.layers"]
    raise AssertionError(name)


# (a draft's own head count and head_dim need not be the base's: its layer attends over the draft's own cache)
DRAFT_CASES = ["draft_hidden_mismatch", "draft_vocab_mismatch", "eagle3_fc_mismatch",
               "unknown_layout", "draft_is_base"]


@pytest.mark.parametrize("name", DRAFT_CASES)
def test_bad_draft(name, tmp_path, tiny_base):
    path, words = draft_case(name, tmp_path, tiny_base)
    with pytest.raises(EagleTrtError) as err:
        require_compatible(ModelSpec.from_dir(tiny_base), DraftSpec.from_dir(path))
    for w in words:
        assert w in str(err.value), (w, str(err.value))
    res = CliRunner().invoke(main, ["inspect", "--base", str(tiny_base), "--draft", str(path)])
    assert res.exit_code == 1 and "Traceback" not in res.output


def test_non_llama_base_for_trtllm(tmp_path):
    import hf_builders

    d = hf_builders.make_hf_base(tmp_path / "qwen", "qwen2")
    draft = builders.make_eagle1_draft(tmp_path / "draft", d)
    res = CliRunner().invoke(main, ["inspect", "--base", str(d), "--draft", str(draft), "--engine", "trtllm"])
    assert res.exit_code == 1
    assert "the trtllm engine does not run Qwen2 / Qwen2.5 bases (Qwen2ForCausalLM)" in res.output
    assert "--engine pytorch or --engine vllm" in res.output  # only routes that run it
