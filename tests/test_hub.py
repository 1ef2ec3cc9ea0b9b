"""Hub ids for --base and --draft (eagle_trt.hub), against a Hugging Face cache laid out on disk as huggingface_hub
writes it (models--ORG--NAME/refs/REF -> commit, snapshots/COMMIT/...), offline: no network is touched."""

import json
import os
import shutil
import subprocess
import sys

import pytest

COMMIT, OTHER = "1" * 40, "2" * 40


def _cache_repo(cache, repo, src, refs):
    """`src` as the snapshot of every commit in refs {ref: commit} of `repo` in the cache."""
    root = cache / f"models--{repo.replace('/', '--')}"
    for ref, commit in refs.items():
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / ref).write_text(commit)
        if not (root / "snapshots" / commit).exists():
            shutil.copytree(src, root / "snapshots" / commit)
    return root


@pytest.fixture()
def cache(tmp_path, tiny_base, eagle1_draft):
    hub = tmp_path / "hub"
    _cache_repo(hub, "acme/tiny-llama", tiny_base, {"main": COMMIT})
    _cache_repo(hub, "acme/tiny-eagle", eagle1_draft, {"main": COMMIT, "v2": OTHER})
    return hub


def _cli(cache, *args):
    env = dict(os.environ, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "eagle_trt.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_hub_ids_resolve_through_the_cache(cache, tmp_path):
    res = _cli(cache, "inspect", "--base", "acme/tiny-llama", "--draft", "acme/tiny-eagle@v2", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["base"]["path"] == str(cache / "models--acme--tiny-llama" / "snapshots" / COMMIT)
    assert report["base"]["hub_source"] == f"acme/tiny-llama@{COMMIT}"
    assert report["draft"]["hub_source"] == f"acme/tiny-eagle@{OTHER}"  # the branch's commit, not main's
    out = tmp_path / "bundle"
    res = _cli(cache, "build", "--base", "acme/tiny-llama", "--draft", f"acme/tiny-eagle@{COMMIT}", "-o", str(out),
               "--engine", "pytorch", "--tree", "chain:2", "--max-seq-len", "256")
    assert res.returncode == 0, res.stderr
    spec = json.loads((out / "eagle_trt_spec.json").read_text())
    assert (spec["base"]["hub_source"], spec["draft"]["hub_source"]) == (f"acme/tiny-llama@{COMMIT}",
                                                                         f"acme/tiny-eagle@{COMMIT}")


def test_a_hub_id_not_in_the_cache_offline_says_how_to_fetch_it(cache, tmp_path):
    res = _cli(cache, "inspect", "--base", "acme/missing-model@v1")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"not in the Hugging Face cache {cache}" in res.stderr
    assert "hf download acme/missing-model --revision v1" in res.stderr
    res = _cli(cache, "build", "--base", "acme/tiny-llama", "--draft", "acme/tiny-eagle@v3", "-o",
               str(tmp_path / "out"), "--engine", "pytorch")
    assert res.returncode == 1 and "acme/tiny-eagle@v3" in res.stderr and not (tmp_path / "out").exists()


def test_a_local_directory_wins_and_paths_are_not_hub_ids(tiny_base, tmp_path, monkeypatch):
    from eagle_trt.hub import hub_source, resolve_checkpoint

    monkeypatch.chdir(tmp_path)
    (tmp_path / "acme").mkdir()
    shutil.copytree(tiny_base, tmp_path / "acme" / "local")
    assert resolve_checkpoint("acme/local", "base").resolve() == (tmp_path / "acme" / "local").resolve()
    assert hub_source(tmp_path / "acme" / "local") is None
    assert str(resolve_checkpoint("./no/such/dir", "base")) == "no/such/dir"  # not a hub id: the path's own error
