"""BuildSpec: defaults derived from the tree and the base, validation, and the JSON round trip."""

import dataclasses
import json

import pytest

from eagle_trt.build_spec import SPEC_FILE, BuildSpec, TrtllmSettings
from eagle_trt.errors import EagleTrtError
from eagle_trt.tree import Tree
from eagle_trt.engines import create_spec


def test_trtllm_defaults_follow_the_default_tree(tiny_base, eagle1_draft):
    spec = create_spec(tiny_base, eagle1_draft, engine="trtllm", max_seq_len=512, max_input_len=256)
    assert spec.tree.tree == Tree.named("mc_sim_7b_63") and spec.tree.source == "mc_sim_7b_63"
    assert spec.trtllm == TrtllmSettings(max_draft_len=63, num_eagle_layers=4, max_non_leaves_per_layer=10)
    assert spec.dtype == "float16"  # fp32 base -> fp16 engine
    assert spec.draft_format == "eagle1"


def test_pytorch_cpu_defaults_to_fp32(tiny_base, eagle1_draft):
    spec = create_spec(tiny_base, eagle1_draft, engine="pytorch", tree="chain:3")
    assert spec.dtype == "float32" and spec.max_seq_len == 512 and spec.max_input_len == 256
    assert spec.tree.kind == "chain" and spec.trtllm is None  # TensorRT-LLM's sizes only in trtllm bundles


def test_round_trip_through_json(tiny_base, eagle3_draft, tmp_path):
    spec = create_spec(tiny_base, eagle3_draft, engine="llmapi", tree="chain:4")
    path = spec.save(tmp_path)
    assert path.name == SPEC_FILE
    json.loads(path.read_text())  # plain JSON
    assert BuildSpec.load(tmp_path) == spec


def test_round_trip_without_draft(tiny_base, tmp_path):
    spec = create_spec(tiny_base, None, engine="pytorch")
    assert BuildSpec.load(spec.save(tmp_path / "s.json")) == spec


def test_every_problem_is_listed(tiny_base, eagle1_draft):
    with pytest.raises(EagleTrtError) as err:
        create_spec(tiny_base, eagle1_draft, engine="trtllm", tp_size=3, max_seq_len=4096,
                         num_eagle_layers=2, max_input_len=100)
    msg = str(err.value)
    assert "tp_size 3 does not divide the base's num_attention_heads 4" in msg
    assert "max_seq_len 4096 > the base's max_position_embeddings 512" in msg
    assert "depth 4 != num_eagle_layers 2" in msg


@pytest.mark.parametrize("options, words", [
    ({"engine": "tensorrt"}, "unknown engine"),
    ({"engine": "pytorch", "dtype": "int4"}, "dtype 'int4'"),
    ({"engine": "pytorch", "dtype": "int8", "device": "cuda"}, "dtype int8 is the pytorch engine's CPU mode"),
    ({"engine": "pytorch", "device": "tpu"}, "device 'tpu'"),
    ({"engine": "pytorch", "max_batch_size": 0}, "max_batch_size must be a positive integer"),
    ({"engine": "pytorch", "max_input_len": 300, "max_seq_len": 300}, "must be < max_seq_len"),
    ({"engine": "pytorch", "tree": "dynamic:1"}, "tree: invalid dynamic tree"),
    ({"engine": "pytorch", "max_draft_len": 8}, "describe TensorRT-LLM engines"),
    ({"engine": "pytorch", "backend_version": "0.18"}, "names the TensorRT-LLM release of a trtllm or llmapi"),
    ({"engine": "llmapi", "backend_version": "0.18"}, "not a TensorRT-LLM release line"),
    ({"engine": "trtllm", "backend_version": "one"}, "backend"),
    ({"engine": "trtllm", "max_draft_len": 300}, "max_draft_len 300 > 256"),
    ({"engine": "trtllm", "tree": "dynamic:5,8,48"}, "needs a static tree"),
    ({"engine": "pytorch", "tp_size": 2}, "tp_size must be 1"),
])
def test_invalid_options(tiny_base, eagle1_draft, options, words):
    with pytest.raises(EagleTrtError, match=words):
        create_spec(tiny_base, eagle1_draft, **options)


def test_unknown_keys_are_rejected(tiny_base, eagle1_draft, tmp_path):
    spec = create_spec(tiny_base, eagle1_draft, engine="pytorch")
    data = spec.to_dict() | {"surprise": 1}
    (tmp_path / SPEC_FILE).write_text(json.dumps(data))
    with pytest.raises(EagleTrtError, match="unknown keys"):
        BuildSpec.load(tmp_path)
    with pytest.raises(EagleTrtError, match="no build spec"):
        BuildSpec.load(tmp_path / "nowhere")


def test_spec_is_frozen(tiny_base, eagle1_draft):
    spec = create_spec(tiny_base, eagle1_draft, engine="pytorch")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.dtype = "float16"
    assert dataclasses.replace(spec, max_batch_size=4).max_batch_size == 4


def test_vllm_drafts_chains_only(tiny_base, eagle1_draft):
    """vLLM's EAGLE is a chain of num_speculative_tokens (its tree attention was removed): chain:3 by default, and a
    tree is refused rather than silently served as a chain."""
    assert create_spec(tiny_base, eagle1_draft, engine="vllm").tree.to_arg() == "chain:3"
    with pytest.raises(EagleTrtError, match=r"vLLM drafts chains only.*dynamic:3,4,10.*chain:N"):
        create_spec(tiny_base, eagle1_draft, engine="vllm", tree="dynamic:3,4,10")


def test_a_tree_file_is_stored_resolved(tiny_base, eagle1_draft, tmp_path, monkeypatch):
    """`--tree my.json` (relative, a static tree for our engine): the spec holds the file's choices, so the saved
    bundle means the same tree from any working directory and after the file is gone."""
    (tmp_path / "my.json").write_text("[[0], [1], [0, 0]]")
    monkeypatch.chdir(tmp_path)
    spec = create_spec(tiny_base, eagle1_draft, engine="pytorch", tree="my.json")
    spec.save(tmp_path / SPEC_FILE)
    (tmp_path / "my.json").unlink()
    monkeypatch.chdir("/")
    saved = json.loads((tmp_path / SPEC_FILE).read_text())
    assert saved["tree"]["choices"] == [[0], [1], [0, 0]] and saved["trtllm"] is None
    assert BuildSpec.load(tmp_path) == spec and spec.tree.tree == Tree.from_choices([[0], [1], [0, 0]])


def test_an_old_spec_with_runtime_tree_is_refused(tiny_base, eagle1_draft, tmp_path):
    data = create_spec(tiny_base, eagle1_draft, engine="pytorch").to_dict() | {"runtime_tree": "chain:3"}
    (tmp_path / SPEC_FILE).write_text(json.dumps(data))
    with pytest.raises(EagleTrtError, match="unknown keys.*runtime_tree") as err:
        BuildSpec.load(tmp_path)
    assert "rebuild" in err.value.hint
