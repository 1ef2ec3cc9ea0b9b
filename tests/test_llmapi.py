"""The LLM-API (EAGLE-3) route: Eagle3DecodingConfig fields, the capture-layer conventions, tree mapping, the YAML
and the dry-run bundle. TensorRT-LLM cannot run here, so its contract is pinned from its source:

NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py (read at commit fcd3f316, Eagle3DecodingConfig(EagleDecodingConfig)
and DecodingBaseConfig): `speculative_model` (validation alias `speculative_model_dir`), `max_draft_len`,
`max_total_draft_tokens`, `eagle_choices` (List[List[int]]; max_draft_len reset to its depth, max_total_draft_tokens to
its length), `use_dynamic_tree` + `dynamic_tree_max_topK` (needs max_draft_len <= max_total_draft_tokens <=
topK * max_draft_len), `eagle3_layers_to_capture` ("Defaults to {1, num_layers//2-1, num_layers-4}", layer outputs).
NVIDIA/TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/1/model.py: model.yaml is yaml.safe_load-ed;
`triton_config` (max_batch_size, decoupled) goes to Triton, every other key to LLM(**args).
"""

import json

import pytest
import yaml
from click.testing import CliRunner

from eagle_trt.engines import create_spec, get, llmapi_config as llmapi
from eagle_trt.build_spec import BuildSpec
from eagle_trt.cli import main
from eagle_trt.draft_layouts import standard_capture_layers
from eagle_trt.errors import EagleTrtError
from eagle_trt.engines.llmapi_release import llmapi_release
from eagle_trt.tree_config import resolve

# Eagle3DecodingConfig / DecodingBaseConfig fields we may write (llm_args.py at fcd3f316); "decoding_type" selects it
EAGLE3_FIELDS = {"decoding_type", "max_draft_len", "max_total_draft_tokens", "speculative_model", "eagle_choices",
                 "use_dynamic_tree", "dynamic_tree_max_topK", "eagle3_layers_to_capture"}
LLM_ARGS = {"model", "backend", "tensor_parallel_size", "pipeline_parallel_size", "max_batch_size", "max_seq_len",
            "max_num_tokens", "speculative_config"}


def eagle3_forward_capture(num_layers: int, output_indices) -> list[str]:
    """What a base forward hands the draft when it keeps the OUTPUT of the given layers (TensorRT-LLM's convention)."""
    return [f"after layer {i}" for i in sorted(output_indices)]


def eagle3_reference_capture(num_layers: int, input_indices) -> list[str]:
    """The same for the INPUT of the given layers (EAGLE's reference code, vLLM, our runtime): input of layer i is the
    output of layer i-1."""
    return [f"after layer {i - 1}" for i in sorted(input_indices)]


@pytest.mark.parametrize("num_layers", [30, 32])
def test_both_capture_conventions_name_the_same_states(num_layers):
    inputs = standard_capture_layers(num_layers)
    outputs = llmapi.trtllm_default_capture_outputs(num_layers)
    assert inputs == ((2, 15, 27) if num_layers == 30 else (2, 16, 29))
    assert outputs == ((1, 14, 26) if num_layers == 30 else (1, 15, 28))
    assert eagle3_reference_capture(num_layers, inputs) == eagle3_forward_capture(num_layers, outputs)
    # writing the input indices into eagle3_layers_to_capture would feed the draft other states: the old bug
    assert eagle3_forward_capture(num_layers, inputs) != eagle3_reference_capture(num_layers, inputs)
    assert llmapi.layers_to_capture(None, num_layers) is None  # standard draft: leave TensorRT-LLM's default
    assert llmapi.layers_to_capture(inputs, num_layers) is None  # named explicitly, still the default


@pytest.mark.parametrize("num_layers, named, written", [(32, (3, 17, 30), [2, 16, 29]), (30, (30, 1, 10), [0, 9, 29])])
def test_other_layers_are_converted_to_outputs(num_layers, named, written):
    assert llmapi.layers_to_capture(named, num_layers) == written
    assert eagle3_forward_capture(num_layers, written) == eagle3_reference_capture(num_layers, named)


def test_layers_trtllm_cannot_name_are_refused():
    with pytest.raises(EagleTrtError, match="input 0, the embeddings"):
        llmapi.layers_to_capture((0, 16, 29), 32)
    with pytest.raises(EagleTrtError, match="cannot name"):
        llmapi.layers_to_capture((2, 16, 33), 32)


@pytest.mark.parametrize("arg, fields", [
    ("chain:4", {"max_draft_len": 4}),
    ("static:[[0],[1],[0,0],[0,0,0]]", {"max_draft_len": 3, "eagle_choices": [[0], [1], [0, 0], [0, 0, 0]]}),
    ("dynamic:5,8,40", {"max_draft_len": 6, "use_dynamic_tree": True, "dynamic_tree_max_topK": 8,
                        "max_total_draft_tokens": 40}),
])
def test_tree_mapping(arg, fields):
    release = llmapi_release("1.3")  # the last release line with static trees
    assert llmapi.tree_fields(get("llmapi").tree(arg, "1.3"), release) == fields
    assert set(fields) <= EAGLE3_FIELDS and set(fields) <= release.fields


@pytest.mark.parametrize("arg", ["dynamic:5,8,49", "dynamic:4,2,4", "dynamic:3,2,9"])
def test_dynamic_trees_trtllm_refuses(arg, tiny_base, eagle3_draft):
    """TensorRT-LLM's bounds with its max_draft_len = our DEPTH + 1: 6 <= T <= 48; 5 <= T; T <= 8."""
    with pytest.raises(EagleTrtError, match=r"DEPTH\+1 <= TOKENS <= TOPK x \(DEPTH\+1\)"):
        llmapi.tree_fields(resolve(arg), llmapi_release())
    with pytest.raises(EagleTrtError, match=r"tree: TensorRT-LLM's dynamic tree needs"):
        create_spec(tiny_base, eagle3_draft, engine="llmapi", tree=arg)


def test_yaml_round_trip_and_keys(tiny_base, eagle3_draft, tmp_path):
    spec = create_spec(tiny_base, eagle3_draft, engine="llmapi", tree="static:eagle_default")
    path = llmapi.write_llmapi_config(spec, tmp_path / "1" / "model.yaml")
    data = yaml.safe_load(path.read_text())
    assert data == llmapi.model_yaml(spec)  # the file is the dict, through a YAML library
    assert set(data) - {"triton_config"} <= LLM_ARGS and data["triton_config"] == {"max_batch_size": 0,
                                                                                   "decoupled": True}
    sc = data["speculative_config"]
    assert set(sc) == {"decoding_type", "max_draft_len", "eagle_choices", "speculative_model"} <= EAGLE3_FIELDS
    tree = spec.tree.tree
    assert sc["eagle_choices"] == tree.to_list() and sc["max_draft_len"] == tree.depth == 5
    serve = yaml.safe_load((tmp_path / "1" / llmapi.SERVE_YAML).read_text())
    assert serve["speculative_config"] == sc and "triton_config" not in serve and "model" not in serve
    base = llmapi.model_yaml(spec, speculative=False, decoupled=False)
    assert "speculative_config" not in base and base["triton_config"]["decoupled"] is False


def test_a_draft_naming_its_layers(tiny_base, eagle3_draft, tmp_path):
    """eagle_aux_hidden_state_layer_ids in the draft's config (vLLM/speculators, layer inputs) is converted."""
    import shutil

    draft = tmp_path / "draft"
    shutil.copytree(eagle3_draft, draft)
    cfg = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps(cfg | {"eagle_aux_hidden_state_layer_ids": [1, 2, 2]}))
    spec = create_spec(tiny_base, draft, engine="llmapi")
    assert spec.draft.capture_layers == (1, 2, 2)
    assert llmapi.speculative_config(spec)["eagle3_layers_to_capture"] == [0, 1, 1]
    (draft / "config.json").write_text(json.dumps(cfg | {"eagle_aux_hidden_state_layer_ids": "2,3"}))
    with pytest.raises(EagleTrtError, match="not a list of layer indices"):
        create_spec(tiny_base, draft, engine="llmapi")


def test_build_dry_run_writes_the_repository(tiny_base, eagle3_draft, tmp_path):
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle3_draft), "-o", str(out),
                                    "--engine", "llmapi", "--tree", "dynamic:3,4,10", "--dry-run"])
    assert res.exit_code == 0, res.output
    eagle = yaml.safe_load((out / "model_repository/eagle_engine/1/model.yaml").read_text())
    assert eagle == {
        "model": str(tiny_base.resolve()), "backend": "pytorch", "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1, "max_batch_size": 8, "max_seq_len": 512, "max_num_tokens": 8192,
        "speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 4, "use_dynamic_tree": True,
                               "dynamic_tree_max_topK": 4, "max_total_draft_tokens": 10,
                               "speculative_model": str(eagle3_draft.resolve())},
        "triton_config": {"max_batch_size": 0, "decoupled": True}}
    base = yaml.safe_load((out / "model_repository/base_engine/1/model.yaml").read_text())
    assert base == {k: v for k, v in eagle.items() if k != "speculative_config"}
    assert "speculative_config:" in res.output and "README.md" in res.output
    assert BuildSpec.load(out).engine == "llmapi"
