"""Shared fixtures: tiny random Llama bases and EAGLE drafts built once per session (no downloads)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")

import builders  # noqa: E402  (tests/ is on sys.path: pytest's rootdir-relative import mode)


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory):
    """Untied tiny Llama base: 2 layers, hidden 64, 4 heads / 2 KV heads, vocab from a trained BPE tokenizer."""
    return builders.make_base(tmp_path_factory.mktemp("tiny_base"))


@pytest.fixture(scope="session")
def tiny_base_tied(tmp_path_factory):
    """Tied-embedding tiny base (no lm_head.weight), sharded in two safetensors files with an index."""
    return builders.make_base(tmp_path_factory.mktemp("tiny_base_tied"), tie_word_embeddings=True, seed=3, shards=2)


@pytest.fixture(scope="session")
def eagle1_draft(tiny_base, tmp_path_factory):
    """EAGLE-1 draft with fc.bias and embed_tokens (Vicuna-style)."""
    return builders.make_eagle1_draft(tmp_path_factory.mktemp("eagle1"), tiny_base)


@pytest.fixture(scope="session")
def eagle1_draft_nobias(tiny_base, tmp_path_factory):
    """EAGLE-1 draft without fc.bias ("bias": false) and without embed_tokens (Llama-3-style)."""
    return builders.make_eagle1_draft(tmp_path_factory.mktemp("eagle1_nobias"), tiny_base, bias=False,
                                      with_embed=False)


@pytest.fixture(scope="session")
def eagle1_draft_bin(tiny_base, tmp_path_factory):
    """EAGLE-1 draft shipped as pytorch_model.bin (loaded only with weights_only=True)."""
    return builders.make_eagle1_draft(tmp_path_factory.mktemp("eagle1_bin"), tiny_base, fmt="bin")


@pytest.fixture(scope="session")
def eagle3_draft(tiny_base, tmp_path_factory):
    """EAGLE-3 draft with a 200-token draft vocabulary (d2t/t2d)."""
    return builders.make_eagle3_draft(tmp_path_factory.mktemp("eagle3"), tiny_base)


@pytest.fixture(scope="session")
def pytorch_bundle(tiny_base, eagle1_draft, tmp_path_factory):
    """A pytorch bundle of the tiny base + EAGLE-1 draft (chain:3), built by the CLI: the perf harness tests read it
    and the AIPerf run writes its report into it. `--backoff batches`: a request alone keeps drafting (the random
    draft would back off to plain steps, leaving the per-request acceptance figures empty)."""
    from click.testing import CliRunner

    from eagle_trt.cli import main

    out = tmp_path_factory.mktemp("perf") / "bundle"
    res = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o", str(out),
                                    "--engine", "pytorch", "--tree", "chain:3", "--backoff", "batches"])
    assert res.exit_code == 0, res.output
    return out
