"""--backend-version: the trtllm bundle's tensorrt_llm model and ensembles per tensorrtllm backend release.

Regenerate the golden files with `EAGLE_TRT_UPDATE_GOLDEN=1 pytest tests/test_backend_versions.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eagle_trt.engines.trtllm_backend import DEFAULT_BACKEND_VERSION, backend_contract, parse_backend_version
from eagle_trt.errors import EagleTrtError
from eagle_trt.engines import get, write_model_repository
from eagle_trt.model_repository import configs as C
from eagle_trt.perf.harness_files import aiperf_command, genai_perf_command

from test_model_repository import _ensemble_problems, fixed_spec, pbtxt_files

GOLDEN = Path(__file__).parent / "golden"
ACCEPTANCE = {"acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens"}

# What the upstream tensorrt_llm model declares, per source read (names only; types as in configs.ENGINE_INPUTS):
# - tensorrtllm_backend tags v0.16.0 .. v0.18.2, all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt:
#   input "random_seed", no "return_perf_metrics", no acceptance outputs; inflight_batcher_llm/src/utils.cc at
#   v0.18.2 sets returnPerfMetrics from "return_kv_cache_reuse_stats" only.
# - tag v0.19.0, same file: "random_seed", "return_perf_metrics" and outputs acceptance_rate,
#   total_accepted_draft_tokens, total_draft_tokens and arrival_time_ns (INT64 [1]; model_instance_state.cc fills it
#   with the others on every response that has perf metrics; the acceptance step keys requests by it); the 0.20 line still declared "random_seed" when the models
#   moved into TensorRT-LLM (tensorrtllm_backend c4a49e8^, 2025-06-04).
# - main after tensorrtllm_backend c2e65b8 (PR #749, 2025-05-13; not in any v0.x tag of that repo) and
#   NVIDIA/TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt (stored version
#   at 0c8de69a) and triton_backend/inflight_batcher_llm/src/utils.h (InputFieldsNames::seed = "seed"): "seed".
UPSTREAM_COMMON = {"input_ids", "input_lengths", "request_output_len", "end_id", "pad_id", "streaming",
                   "temperature", "runtime_top_k", "runtime_top_p", "stop_words_list", "exclude_input_in_output"}
UPSTREAM = {
    "0.18": {"inputs": UPSTREAM_COMMON | {"random_seed"}, "outputs": {"output_ids", "sequence_length"}},
    "0.19": {"inputs": UPSTREAM_COMMON | {"random_seed", "return_perf_metrics"},
             "outputs": {"output_ids", "sequence_length", "arrival_time_ns"} | ACCEPTANCE},
    "1.2": {"inputs": UPSTREAM_COMMON | {"seed", "return_perf_metrics"},
            "outputs": {"output_ids", "sequence_length", "arrival_time_ns"} | ACCEPTANCE},
}


def write_trtllm(version: str, tmp_path: Path) -> Path:
    repo = tmp_path / f"trtllm-{version}"
    write_model_repository(fixed_spec("trtllm", version), repo, bundle_dir=Path("/bundle"))
    return repo


@pytest.mark.parametrize("version, seed, perf", [
    ("0.16", "random_seed", False), ("0.18.2", "random_seed", False), ("0.19.0", "random_seed", True),
    ("0.20", "random_seed", True), ("0.21", "seed", True), ("1.0", "seed", True), ("1.2.0rc6", "seed", True)])
def test_contract_boundaries(version, seed, perf):
    contract = backend_contract(version)
    assert (contract.seed_input, contract.perf_metrics) == (seed, perf)


def test_default_is_the_newest_engine_path_release():
    assert DEFAULT_BACKEND_VERSION == "1.2" and parse_backend_version(DEFAULT_BACKEND_VERSION) == (1, 2)


@pytest.mark.parametrize("bad, what", [("0.15", "outside"), ("1.3", "outside"), ("two", "not a version"),
                                       ("1", "not a version")])
def test_bad_versions_name_the_value(bad, what):
    with pytest.raises(EagleTrtError, match=what) as info:
        parse_backend_version(bad)
    assert bad in info.value.message and info.value.hint


@pytest.mark.parametrize("version", sorted(UPSTREAM))
def test_engine_model_declares_what_that_backend_has(version, tmp_path):
    repo = write_trtllm(version, tmp_path)
    for engine in ("eagle_engine", "base_engine"):
        config = C.parse((repo / engine / "config.pbtxt").read_text())
        assert {t.name for t in config.input} == UPSTREAM[version]["inputs"]
        assert {t.name for t in config.output} == UPSTREAM[version]["outputs"]
    assert _ensemble_problems(repo) == []


@pytest.mark.parametrize("version", sorted(UPSTREAM))
def test_ensemble_interface_per_version(version, tmp_path):
    repo = write_trtllm(version, tmp_path)
    ensemble = C.parse((repo / "eagle_model" / "config.pbtxt").read_text())
    step = next(s for s in ensemble.ensemble_scheduling.step if s.model_name == "eagle_engine")
    seed_input = backend_contract(version).seed_input
    assert step.input_map[seed_input] == "seed"  # clients keep sending `seed`
    perf = version != "0.18"
    assert ("return_perf_metrics" in {t.name for t in ensemble.input}) is perf
    assert (ACCEPTANCE <= {t.name for t in ensemble.output}) is perf
    assert (ACCEPTANCE <= set(step.output_map)) is perf
    counting = [s.model_name for s in ensemble.ensemble_scheduling.step if s.model_name == "eagle_acceptance"]
    assert (counting == ["eagle_acceptance"]) is perf  # no acceptance outputs, nothing to count
    if not perf:
        assert not ACCEPTANCE & {t.name for t in ensemble.output}


@pytest.mark.parametrize("version", ("0.18", "0.19"))
def test_golden_configs_per_backend_version(version, tmp_path):
    files = pbtxt_files(write_trtllm(version, tmp_path))
    golden_dir = GOLDEN / f"trtllm-{version}"
    if os.environ.get("EAGLE_TRT_UPDATE_GOLDEN") == "1":
        for rel, text in files.items():
            (golden_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (golden_dir / rel).write_text(text)
    expected = {p.relative_to(golden_dir).as_posix(): p.read_text() for p in golden_dir.rglob("*") if p.is_file()}
    assert files == expected
    for text in files.values():
        assert C.render(C.parse(text)) == text


def test_newest_version_matches_the_trtllm_golden(tmp_path):
    assert pbtxt_files(write_trtllm("1.2", tmp_path)) == {
        p.relative_to(GOLDEN / "trtllm").as_posix(): p.read_text() for p in (GOLDEN / "trtllm").rglob("*")
        if p.is_file()}


def test_perf_harness_asks_for_acceptance_only_where_it_exists():
    figures = lambda spec: get(spec.engine).acceptance_figures(spec)  # noqa: E731
    assert not figures(fixed_spec("trtllm", "0.18"))
    assert figures(fixed_spec("trtllm", "0.19"))
    assert figures(fixed_spec("pytorch", "0.18"))  # not a trtllm bundle
    for cmd in (genai_perf_command("eagle_model", "in.jsonl", "/tok", 8, perf_metrics=False),
                aiperf_command("eagle_model", "in.jsonl", "/tok", perf_metrics=False)):
        assert "return_perf_metrics:true" not in cmd
    assert "return_perf_metrics:true" in aiperf_command("eagle_model", "in.jsonl", "/tok")
