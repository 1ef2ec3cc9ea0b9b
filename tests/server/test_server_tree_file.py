"""A bundle built with `--tree my.json` serves that tree from any working directory, after the file is gone.

The build resolves the file once (tree.resolve) and the bundle stores its choices: the served engine never looks
for my.json (it used to, as `static:my.json`, relative to tritonserver's working directory).
"""

from __future__ import annotations

import json

import pytest

from eagle_trt.client import generate

pytestmark = pytest.mark.server

CHOICES = [[0], [1], [0, 0], [0, 1], [0, 0, 0], [0, 0, 1], [0, 0, 0, 0]]  # 7 draft nodes per step


def test_tree_file_bundle_serves_from_another_directory(tiny_base, eagle1_draft, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from eagle_trt.cli import main
    from eagle_trt.serving import TritonServer

    work, elsewhere, out = tmp_path / "work", tmp_path / "elsewhere", tmp_path / "bundle"
    work.mkdir()
    elsewhere.mkdir()
    (work / "my.json").write_text(json.dumps(CHOICES))
    monkeypatch.chdir(work)
    result = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o", str(out),
                                       "--engine", "pytorch", "--max-seq-len", "512", "--tree", "my.json"])
    assert result.exit_code == 0, result.output
    (work / "my.json").unlink()
    monkeypatch.chdir(elsewhere)
    saved = json.loads((out / "eagle_trt_spec.json").read_text())
    assert saved["tree"] == {"kind": "static", "choices": CHOICES, "source": str(work / "my.json")}
    with TritonServer(out / "model_repository", models=["eagle_model", "base_model"],
                      log_file=tmp_path / "tritonserver.log") as server:
        prompt = "Describe five key principles in evaluating an argument in analytical writing."
        eagle = generate(server.http_url, "eagle_model", prompt, max_tokens=24, temperature=0.0)
        base = generate(server.http_url, "base_model", prompt, max_tokens=24, temperature=0.0)
    assert eagle.text == base.text and eagle.text
    # every verify step proposed the file's 7 nodes (the default tree would propose 48)
    assert eagle.total_draft_tokens > 0 and eagle.total_draft_tokens % len(CHOICES) == 0
