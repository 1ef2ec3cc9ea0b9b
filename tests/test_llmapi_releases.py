"""The TensorRT-LLM release line is an input of the LLM-API route (`--backend-version` 1.2 / 1.3 / 1.4): each
release's Eagle3DecodingConfig field set, pinned here from its source, and bundles that write only those fields.

Sources (TensorRT-LLM's `Eagle3DecodingConfig` forbids unknown keys: "Extra inputs are not permitted"):
- 1.2: NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py as of December 2025 (release/1.2's branch point; no
  versioned API page exists for 1.2): DecodingBaseConfig + EagleDecodingConfig, acceptance_window /
  acceptance_length_threshold, eagle_choices, greedy_sampling, posterior_threshold, num_eagle_layers,
  eagle3_one_model; no sa_config.
- 1.3: nvidia.github.io/TensorRT-LLM/1.3.0rc27/llm-api/reference/Eagle3DecodingConfig.html (+ moe_backend from the
  1.3.0rc29 DecodingBaseConfig page).
- 1.4: nvidia.github.io/TensorRT-LLM/1.4.0rc4/llm-api/reference/Eagle3DecodingConfig.html: eagle_choices gone from
  1.4.0rc1, num_eagle_layers by rc4.
"""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from eagle_trt.engines import create_spec, llmapi_config as llmapi
from eagle_trt.build_spec import BuildSpec
from eagle_trt.cli import main
from eagle_trt.deploy.images import dockerfile, serving_image
from eagle_trt.engines.images import TRTLLM_CONTAINERS
from eagle_trt.errors import EagleTrtError
from eagle_trt.engines.llmapi_release import DEFAULT_LLMAPI_VERSION, LLMAPI_RELEASES, llmapi_release

COMMON = {"max_draft_len", "max_total_draft_tokens", "speculative_model", "max_concurrency", "draft_len_schedule",
          "load_format", "allow_advanced_sampling", "decoding_type", "use_dynamic_tree", "dynamic_tree_max_topK",
          "max_non_leaves_per_layer", "eagle3_layers_to_capture", "eagle3_model_arch"}
FIELDS = {
    "1.2": COMMON | {"acceptance_window", "acceptance_length_threshold", "eagle_choices", "greedy_sampling",
                     "posterior_threshold", "num_eagle_layers", "eagle3_one_model"},
    "1.3": COMMON | {"acceptance_rate_window_size", "acceptance_rate_threshold", "use_rejection_sampling",
                     "advanced_sampling_mode", "enable_penalty", "moe_backend", "eagle_choices", "num_eagle_layers",
                     "sa_config"},
    "1.4": COMMON | {"acceptance_rate_window_size", "acceptance_rate_threshold", "use_rejection_sampling",
                     "advanced_sampling_mode", "enable_penalty", "moe_backend", "moe_tactic", "spec_dec_variant",
                     "sa_config"},
}
REMOVED_IN_14 = {"eagle_choices", "num_eagle_layers", "eagle3_one_model", "greedy_sampling", "posterior_threshold"}
TREES = {"chain:3": ("1.2", "1.3", "1.4"), "dynamic:3,2,4": ("1.2", "1.3", "1.4"),
         "static:[[0],[1],[0,0],[0,1]]": ("1.2", "1.3"), "chain:3+suffix:2,3": ("1.3", "1.4")}


def test_each_release_has_the_field_set_of_its_source():
    assert {r.version: set(r.fields) for r in LLMAPI_RELEASES.values()} == FIELDS
    assert not REMOVED_IN_14 & LLMAPI_RELEASES[(1, 4)].fields
    assert llmapi_release().version == DEFAULT_LLMAPI_VERSION == "1.2"
    assert tuple(map(int, DEFAULT_LLMAPI_VERSION.split("."))) == max(TRTLLM_CONTAINERS)  # the newest Triton's
    assert llmapi_release("1.4.0rc4") is llmapi_release("1.4")
    with pytest.raises(EagleTrtError, match="not a TensorRT-LLM release line"):
        llmapi_release("1.5")


@pytest.mark.parametrize("version", list(FIELDS))
@pytest.mark.parametrize("tree", list(TREES))
def test_bundles_write_only_their_release_fields(tiny_base, eagle3_draft, tmp_path, tree, version):
    if version not in TREES[tree]:
        with pytest.raises(EagleTrtError, match=f"TensorRT-LLM {version} has no"):
            create_spec(tiny_base, eagle3_draft, engine="llmapi", tree=tree, backend_version=version)
        return
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle3_draft), "-o", str(out),
                                    "--engine", "llmapi", "--backend-version", version, "--tree", tree, "--dry-run"])
    assert res.exit_code == 0, res.output
    for name in ("model.yaml", llmapi.SERVE_YAML):
        speculative = yaml.safe_load((out / "model_repository/eagle_engine/1" / name).read_text())["speculative_config"]
        assert set(speculative) <= FIELDS[version], set(speculative) - FIELDS[version]
        if version == "1.4":
            assert not REMOVED_IN_14 & set(speculative)
    assert BuildSpec.load(out).backend_version == version


def test_a_static_tree_on_14_is_refused_with_the_nearest_tree_it_runs(tiny_base, eagle3_draft):
    tree = "static:[[0],[1],[2],[0,0],[0,1],[1,0],[0,0,0]]"  # depth 3, 7 nodes, 3 children at the root
    with pytest.raises(EagleTrtError, match="TensorRT-LLM 1.4 has no static trees") as err:
        create_spec(tiny_base, eagle3_draft, engine="llmapi", tree=tree, backend_version="1.4")
    assert "--tree dynamic:2,3,7" in err.value.hint and "chain:3" in err.value.hint
    spec = create_spec(tiny_base, eagle3_draft, engine="llmapi", tree="dynamic:2,3,7", backend_version="1.4")
    assert llmapi.speculative_config(spec)["max_total_draft_tokens"] == 7
    create_spec(tiny_base, eagle3_draft, engine="llmapi", tree=tree, backend_version="1.3")  # 1.3 still has it


@pytest.mark.parametrize("version, installs", [("1.2", None), ("1.3", "1.3.0rc29"), ("1.4", "1.4.0rc4")])
def test_the_deploy_image_ships_the_release(tiny_base, eagle3_draft, version, installs):
    """1.2's Triton container ships TensorRT-LLM; 1.3 / 1.4 are installed on the newest one, with their own LLM-API
    model files; every one adds eagle-trt, which the acceptance steps import."""
    spec = create_spec(tiny_base, eagle3_draft, engine="llmapi", backend_version=version)
    image = serving_image(spec, openai=False)
    assert image.derived and image.base == "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"
    text = dockerfile(image)
    assert "pip install --no-cache-dir --no-deps /opt/eagle-trt" in text
    if installs:
        assert f'"tensorrt_llm=={installs}"' in text and f"--branch v{installs}" in text
        assert "triton_backend/all_models/llmapi" in text and installs in image.image
    else:
        assert "tensorrt_llm==" not in text and image.image == "eagle-trt-triton:26.07-trtllm-python-py3"


def test_backend_version_is_refused_where_no_release_applies(tiny_base, eagle1_draft):
    with pytest.raises(EagleTrtError, match="names the TensorRT-LLM release of a trtllm or llmapi bundle"):
        create_spec(tiny_base, eagle1_draft, engine="pytorch", backend_version="1.3")
