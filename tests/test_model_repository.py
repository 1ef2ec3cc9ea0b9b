"""The Triton model repository without a server: schema round trip, golden configs per engine kind, ensemble
wiring, and the python models' pure parts (stop-word packing, incremental detokenization).

Regenerate the golden files with `EAGLE_TRT_UPDATE_GOLDEN=1 pytest tests/test_model_repository.py`.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from eagle_trt.build_spec import BuildSpec
from eagle_trt.errors import EagleTrtError
from eagle_trt.engines import NAMES as ENGINE_KINDS, write_model_repository
from eagle_trt.model_repository import ServingOptions, configs as C

from builders import fixed_build_spec

GOLDEN = Path(__file__).parent / "golden"


def fixed_spec(engine: str, backend_version: str = "1.2"):
    """A real BuildSpec with fixed paths, so the golden files do not depend on the machine."""
    return fixed_build_spec(engine, backend_version=backend_version)


def write_repo(engine: str, tmp_path: Path) -> Path:
    repo = tmp_path / engine
    write_model_repository(fixed_spec(engine), repo, bundle_dir=Path("/bundle"))
    return repo


def pbtxt_files(repo: Path) -> dict[str, str]:
    return {p.relative_to(repo).as_posix(): p.read_text() for p in sorted(repo.rglob("*"))
            if p.is_file() and p.suffix in (".pbtxt", ".json")}


@pytest.mark.parametrize("engine", ENGINE_KINDS)
def test_golden_configs(engine, tmp_path):
    files = pbtxt_files(write_repo(engine, tmp_path))
    golden_dir = GOLDEN / engine
    if os.environ.get("EAGLE_TRT_UPDATE_GOLDEN") == "1":
        for rel, text in files.items():
            (golden_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (golden_dir / rel).write_text(text)
    expected = {p.relative_to(golden_dir).as_posix(): p.read_text() for p in sorted(golden_dir.rglob("*"))
                if p.is_file()}
    assert sorted(files) == sorted(expected), "set of config files changed (EAGLE_TRT_UPDATE_GOLDEN=1 to accept)"
    for rel, text in files.items():
        assert text == expected[rel], f"{engine}/{rel} differs from the golden file"


@pytest.mark.parametrize("engine", ENGINE_KINDS)
def test_every_config_parses_back_and_has_no_placeholder(engine, tmp_path):
    repo = write_repo(engine, tmp_path)
    configs = list(repo.glob("*/config.pbtxt"))
    assert {p.parent.name for p in configs} >= {"eagle_model", "base_model"}
    for path in configs:
        text = path.read_text()
        assert "${" not in text and "$(" not in text, path
        config = C.parse(text)
        assert config.name == path.parent.name
        assert "max_batch_size:" in text  # written even when 0 (proto3 would drop it)
        assert C.render(config) == text  # stable round trip
        assert (path.parent / "1").is_dir()


def _ensemble_problems(repo: Path) -> list[str]:
    """Every map key must be a tensor of the composing model; every input value an ensemble input or an earlier
    step's output; every ensemble output produced by some step."""
    problems = []
    for path in repo.glob("*/config.pbtxt"):
        ens = C.parse(path.read_text())
        if ens.platform != "ensemble":
            continue
        available = {t.name for t in ens.input}
        for step in ens.ensemble_scheduling.step:
            model = C.parse((repo / step.model_name / "config.pbtxt").read_text())
            model_inputs = {t.name: t for t in model.input}
            model_outputs = {t.name for t in model.output}
            for key, value in step.input_map.items():
                if key not in model_inputs:
                    problems.append(f"{ens.name}: {step.model_name} has no input {key}")
                if value not in available:
                    problems.append(f"{ens.name}: {step.model_name}.{key} <- {value} which nothing provides")
            for required in (n for n, t in model_inputs.items() if not t.optional):
                if required not in step.input_map:
                    problems.append(f"{ens.name}: required {step.model_name}.{required} is not mapped")
            for key, value in step.output_map.items():
                if key not in model_outputs:
                    problems.append(f"{ens.name}: {step.model_name} has no output {key}")
                available.add(value)
        for out in ens.output:
            if out.name not in available:
                problems.append(f"{ens.name}: output {out.name} is produced by no step")
    return problems


@pytest.mark.parametrize("engine", ("pytorch", "trtllm", "llmapi"))
def test_ensemble_maps_reference_existing_tensors(engine, tmp_path):
    assert _ensemble_problems(write_repo(engine, tmp_path)) == []


def test_ensemble_check_catches_a_broken_map(tmp_path):
    repo = write_repo("pytorch", tmp_path)
    path = repo / "eagle_model" / "config.pbtxt"
    path.write_text(path.read_text().replace('key: "input_lengths"', 'key: "input_length"'))
    assert any("has no input input_length" in p for p in _ensemble_problems(repo))


def test_trtllm_engine_parameters(tmp_path):
    repo = write_repo("trtllm", tmp_path)
    eagle = C.parse((repo / "eagle_engine" / "config.pbtxt").read_text())
    base = C.parse((repo / "base_engine" / "config.pbtxt").read_text())
    params = {k: v.string_value for k, v in eagle.parameters.items()}
    assert eagle.backend == "tensorrtllm" and eagle.model_transaction_policy.decoupled
    assert params["decoding_mode"] == "eagle"
    assert params["eagle_choices"] == "{0}, {1}, {0, 0}, {0, 1}, {0, 0, 0}"
    assert params["gpt_model_path"] == "/bundle/engines/eagle"
    assert params["exclude_input_in_output"] == "true" and params["kv_cache_free_gpu_mem_fraction"] == "0.9"
    base_params = {k: v.string_value for k, v in base.parameters.items()}
    assert "decoding_mode" not in base_params and base_params["gpt_model_path"] == "/bundle/engines/base"
    assert eagle.max_batch_size == base.max_batch_size == 8


def test_shared_values_come_from_the_spec(tmp_path):
    repo = write_repo("pytorch", tmp_path)
    sizes = {p.parent.name: C.parse(p.read_text()).max_batch_size for p in repo.glob("*/config.pbtxt")}
    assert set(sizes.values()) == {8}
    params = {name: {k: v.string_value for k, v in C.parse((repo / name / "config.pbtxt").read_text())
                     .parameters.items()} for name in ("preprocessing", "postprocessing", "eagle_engine", "base_engine")}
    # every python model reads its values from the bundle's spec; config.pbtxt names the spec and adds only what
    # differs between the two engine models (speculation, the trees by batch size) and the serving knobs
    spec_file = "/bundle/eagle_trt_spec.json"
    assert params["preprocessing"] == params["postprocessing"] == {"bundle_spec": spec_file}
    eagle, base = params["eagle_engine"], params["base_engine"]
    assert set(eagle) == set(base) == {"bundle_spec", "speculative", "load_policy", "backoff", "batch_backoff",
                                        "threads", "engines_sharing", "prefix_reuse"}
    assert eagle["prefix_reuse"] == base["prefix_reuse"] == "true"  # both or neither: the comparison stays even
    assert eagle["bundle_spec"] == base["bundle_spec"] == spec_file
    assert (eagle["speculative"], base["speculative"]) == ("true", "false")
    assert (eagle["batch_backoff"], base["batch_backoff"]) == ("true", "false")  # auto: batches back off
    assert (eagle["backoff"], base["backoff"]) == ("true", "false")  # and each request alone
    differ = ("speculative", "load_policy", "backoff", "batch_backoff")
    assert {k: v for k, v in eagle.items() if k not in differ} == {k: v for k, v in base.items() if k not in differ}
    assert (repo / "eagle_engine" / "1" / "model.py").read_text() == (repo / "base_engine" / "1" / "model.py").read_text()


def test_vllm_model_json_uses_the_tutorial_keys(tmp_path):
    """vLLM's speculative_config (method, model, num_speculative_tokens = our chain length), not the removed
    top-level speculative_model keys."""
    repo = write_repo("vllm", tmp_path)
    eagle = json.loads((repo / "eagle_model" / "1" / "model.json").read_text())
    base = json.loads((repo / "base_model" / "1" / "model.json").read_text())
    assert eagle["model"] == base["model"] == "/models/base"
    assert eagle["speculative_config"] == {"method": "eagle", "model": "/models/draft", "num_speculative_tokens": 3,
                                           "draft_tensor_parallel_size": 1}
    assert "speculative_model" not in eagle and "speculative_config" not in base
    assert C.parse((repo / "eagle_model" / "config.pbtxt").read_text()).backend == "vllm"


def test_schema_rejects_unknown_fields():
    with pytest.raises(EagleTrtError, match="schema"):
        C.build({"name": "x", "backend": "python", "no_such_field": 1})


def test_max_batch_size_zero_is_written():
    text = C.render(C.build({"name": "x", "backend": "python", "max_batch_size": 0}))
    assert "max_batch_size: 0" in text and C.parse(text).max_batch_size == 0


def test_serving_options_are_validated():
    with pytest.raises(EagleTrtError, match="engine-instances"):
        ServingOptions(engine_instances=0).validate()
    with pytest.raises(EagleTrtError, match="kv-cache-fraction"):
        ServingOptions(kv_cache_free_gpu_mem_fraction=1.5).validate()


# ---- the python models' pure parts (pb_utils exists only in the stub: stub the module to import them) ----------
@pytest.fixture(scope="module")
def python_models():
    fake = types.ModuleType("triton_python_backend_utils")
    saved = sys.modules.get("triton_python_backend_utils")
    sys.modules["triton_python_backend_utils"] = fake
    import eagle_trt.model_repository.python_models as sources

    sys.path.insert(0, str(Path(sources.__file__).parent))  # the stub's sys.path: model_params.py beside model.py
    from eagle_trt.model_repository.python_models import engine, postprocessing, preprocessing
    yield SimpleNamespace(engine=engine, pre=preprocessing, post=postprocessing)
    sys.path.remove(str(Path(sources.__file__).parent))
    if saved is None:
        del sys.modules["triton_python_backend_utils"]


def test_stop_words_round_trip(python_models):
    sequences = [[2], [10, 11, 12], [7]]
    packed = python_models.pre.pack_stop_words(sequences)
    assert packed.shape == (2, 5) and packed.dtype.name == "int32"
    assert packed[1].tolist() == [1, 4, 5, -1, -1]
    assert python_models.engine.unpack_stop_words(packed) == sequences
    assert python_models.engine.unpack_stop_words(python_models.pre.pack_stop_words([])) == []


def test_incremental_detokenizer_chunks_are_valid_utf8(python_models, tiny_base):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_base))
    text = "Héllo wörld — 你好 🦅 EAGLE drafts the tree; the base verifies it."
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) > len(text) // 4  # byte-level pieces: multi-byte characters span several tokens
    detok = python_models.post.IncrementalDetokenizer(tokenizer)
    for chunk_size in (1, 2, 3):
        chunks = []
        for start in range(0, len(ids), chunk_size):
            last = start + chunk_size >= len(ids)
            chunks.append(detok.step(42 + chunk_size, ids[start:start + chunk_size], finished=last))
        for chunk in chunks:
            assert "\ufffd" not in chunk
            chunk.encode("utf-8")
        assert "".join(chunks) == tokenizer.decode(ids)
    assert not detok.streams  # finished streams leave no state


# ---- `eagle-trt build` (pytorch engine: no GPU needed) -----------------------------------------------------------
def _build(args):
    from click.testing import CliRunner

    from eagle_trt.cli import main

    return CliRunner().invoke(main, ["build", *map(str, args)])


def test_build_dry_run_writes_nothing(tiny_base, eagle1_draft, tmp_path):
    out = tmp_path / "bundle"
    result = _build(["--base", tiny_base, "--draft", eagle1_draft, "-o", out, "--engine", "pytorch", "--dry-run",
                     "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["engine"] == "pytorch" and plan["spec"]["max_batch_size"] == 8
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_build_writes_a_bundle_and_refuses_to_overwrite(tiny_base, eagle1_draft, tmp_path):
    out = tmp_path / "bundle"
    args = ["--base", tiny_base, "--draft", eagle1_draft, "-o", out, "--engine", "pytorch", "--max-seq-len", "512",
            "--tree", "chain:3", "--max-batch-size", "4"]
    result = _build(args)
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "eagle_trt_spec.json").read_text())
    assert saved["engine"] == "pytorch" and saved["max_batch_size"] == 4
    assert saved["tree"] == {"kind": "chain", "choices": [[0], [0, 0], [0, 0, 0]]} and saved["trtllm"] is None
    repo = out / "model_repository"
    assert {p.name for p in repo.iterdir()} >= {"eagle_model", "base_model", "preprocessing", "postprocessing",
                                                "eagle_engine", "base_engine"}
    assert _ensemble_problems(repo) == []
    engine = C.parse((repo / "eagle_engine" / "config.pbtxt").read_text())
    served = BuildSpec.load(engine.parameters["bundle_spec"].string_value)  # what the engine model builds from
    assert served.base.path == Path(tiny_base).resolve() and served.draft.path == Path(eagle1_draft).resolve()
    assert served.max_seq_len == 512 and engine.max_batch_size == served.max_batch_size == 4

    marker = out / "keep.txt"
    marker.write_text("user data")
    again = _build(args)
    assert again.exit_code == 1 and "already exists" in again.output and marker.exists()
    forced = _build(args + ["--force"])
    assert forced.exit_code == 0, forced.output
    assert not marker.exists() and (out / "eagle_trt_spec.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]  # no temporary siblings left


def test_failed_build_leaves_nothing(tiny_base, eagle1_draft, tmp_path):
    out = tmp_path / "bundle"
    result = _build(["--base", tiny_base, "--draft", eagle1_draft, "-o", out, "--engine", "pytorch",
                     "--engine-instances", "0"])
    assert result.exit_code == 2 and "Invalid value for '--engine-instances': 0" in result.output
    assert list(tmp_path.iterdir()) == []


# TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt (NVIDIA/TensorRT-LLM, stored version at
# commit 0a710573): the inputs and outputs we use, with their types. helpers.py (same dir, 1/) reads every
# sampling_param_<x> as SamplingParams(<x>=...), return_perf_metrics included; model.py answers acceptance_rate,
# total_accepted_draft_tokens and total_draft_tokens (and arrival_time_ns, which the acceptance step keys requests
# by) when the request asked for perf metrics.
UPSTREAM_LLMAPI_INPUTS = {
    "text_input": "TYPE_STRING", "streaming": "TYPE_BOOL", "sampling_param_temperature": "TYPE_FP32",
    "sampling_param_top_k": "TYPE_INT32", "sampling_param_top_p": "TYPE_FP32", "sampling_param_max_tokens": "TYPE_INT32",
    "sampling_param_stop": "TYPE_STRING", "sampling_param_seed": "TYPE_UINT64",
    "sampling_param_exclude_input_from_output": "TYPE_BOOL", "sampling_param_return_perf_metrics": "TYPE_BOOL",
    "return_finish_reason": "TYPE_BOOL"}
# the upstream config.pbtxt declares the perf metrics as FP32 / INT32 / INT64, but its model.py builds each with
# text_output's dtype (np.object_: BYTES) in every release read (eagle_trt.engines.llmapi_release): we declare what it sends
UPSTREAM_LLMAPI_OUTPUTS = {"text_output": "TYPE_STRING", "finish_reason": "TYPE_STRING",
                           "acceptance_rate": "TYPE_STRING", "total_accepted_draft_tokens": "TYPE_STRING",
                           "total_draft_tokens": "TYPE_STRING", "arrival_time_ns": "TYPE_STRING"}


def test_llmapi_models_speak_the_upstream_contract(tmp_path):
    from tritonclient.grpc.model_config_pb2 import DataType

    repo = write_repo("llmapi", tmp_path)
    assert sorted(p.name for p in repo.iterdir()) == ["base_acceptance", "base_engine", "base_model",
                                                      "eagle_acceptance", "eagle_engine", "eagle_model"]
    for engine in ("eagle_engine", "base_engine"):
        config = C.parse((repo / engine / "config.pbtxt").read_text())
        assert config.backend == "python" and config.max_batch_size == 0
        assert {t.name: DataType.Name(t.data_type) for t in config.input} == UPSTREAM_LLMAPI_INPUTS
        assert {t.name: DataType.Name(t.data_type) for t in config.output} == UPSTREAM_LLMAPI_OUTPUTS
        readme = (repo / engine / "1" / "README.md").read_text()
        assert "1/model.py" in readme and "1/helpers.py" in readme and "--load-model eagle_model" in readme
    ensemble = C.parse((repo / "eagle_model" / "config.pbtxt").read_text())
    step = ensemble.ensemble_scheduling.step[0]
    assert step.model_name == "eagle_engine"
    assert step.input_map["sampling_param_return_perf_metrics"] == "return_perf_metrics"
    assert step.input_map["sampling_param_max_tokens"] == "max_tokens" and step.input_map["streaming"] == "stream"
    assert {"acceptance_rate", "total_draft_tokens", "arrival_time_ns"} <= set(step.output_map)
    counting = ensemble.ensemble_scheduling.step[1]  # the acceptance outputs reach the client through the step
    assert counting.model_name == "eagle_acceptance" and set(counting.input_map) == set(step.output_map) - {"text_output"}
    assert set(counting.output_map.values()) == {"acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens"}
    step_config = C.parse((repo / "eagle_acceptance" / "config.pbtxt").read_text())
    assert {t.name: DataType.Name(t.data_type) for t in step_config.input} == {  # what the engine sends: BYTES
        n: "TYPE_STRING" for n in ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens",
                                   "arrival_time_ns")}
    assert {t.name: DataType.Name(t.data_type) for t in step_config.output} == {  # numbers to the client
        "acceptance_rate": "TYPE_FP32", "total_accepted_draft_tokens": "TYPE_INT32", "total_draft_tokens": "TYPE_INT32"}


def test_engine_threads_share_the_cores(monkeypatch):
    """eagle_engine and base_engine split the cores (OpenMP oversubscription is what slowed EAGLE under load);
    an explicit --engine-threads wins; an instance never gets 0 threads."""
    threads = C.cpu_threads
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert threads(0, 2) == 4 and threads(0, 4) == 2 and threads(0, 1) == 8
    assert threads(3, 2) == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert threads(0, 2) == 1


def test_engine_threads_in_the_repository(tmp_path):
    repo = tmp_path / "repo"
    write_model_repository(fixed_spec("pytorch"), repo, bundle_dir=Path("/bundle"),
                           options=ServingOptions(engine_threads=3, engine_instances=2))
    config = C.parse((repo / "eagle_engine" / "config.pbtxt").read_text())
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params["threads"] == "3" and params["engines_sharing"] == "4"
    with pytest.raises(EagleTrtError, match="engine-threads must be >= 0, got -1"):
        ServingOptions(engine_threads=-1).validate()


def test_load_policy_in_the_repository(tmp_path):
    """The engine config records the load policy: auto = the runtime tree, then the measured tail; the base engine
    decodes plainly at every batch size; a bad policy is refused naming the tree."""
    from eagle_trt.load_policy import AUTO_TAIL, LoadPolicy
    from eagle_trt.tree_config import resolve

    repo = tmp_path / "repo"
    write_model_repository(fixed_spec("pytorch"), repo, bundle_dir=Path("/bundle"))
    params = {name: {k: v.string_value for k, v in C.parse((repo / name / "config.pbtxt").read_text())
                     .parameters.items()} for name in ("eagle_engine", "base_engine")}
    eagle = LoadPolicy.from_list(json.loads(params["eagle_engine"]["load_policy"]))
    assert eagle.to_arg() == ";".join(("dynamic:5,8,48", *AUTO_TAIL))
    assert LoadPolicy.from_list(json.loads(params["base_engine"]["load_policy"])).trees == (None,)
    assert fixed_spec("pytorch").tree == eagle.trees[0] == resolve("dynamic:5,8,48")  # batch 1: the bundle's tree
    with pytest.raises(EagleTrtError, match="load policy 'chain:2;chain:x'"):
        ServingOptions(load_policy="chain:2;chain:x").validate()


def test_auto_load_policy_keeps_the_trees_suffix_candidates_at_small_batches():
    from eagle_trt.load_policy import AUTO_TAIL, AUTO_TAIL_SUFFIX_UP_TO, LoadPolicy
    from eagle_trt.tree_config import Suffix, resolve

    policy = LoadPolicy.auto(resolve("dynamic:3,2,4+suffix:2,6"))
    assert [t.suffix for t in policy.trees] == ([Suffix(2, 6)] * AUTO_TAIL_SUFFIX_UP_TO
                                                + [None] * (1 + len(AUTO_TAIL) - AUTO_TAIL_SUFFIX_UP_TO))
    assert policy.tree_for(3).suffix == Suffix(2, 6) and policy.tree_for(4).suffix is None  # 4+ rows a request cost
    assert [t.drafted.to_arg() for t in policy.trees[1:]] == list(AUTO_TAIL)
    assert LoadPolicy.from_list(policy.to_list()) == policy
    assert all(t.suffix is None for t in LoadPolicy.auto(resolve("chain:3")).trees)


@pytest.mark.parametrize("dtype, backoff, on, batch_on", [
    ("float32", "auto", True, True), ("native-q8", "auto", True, True), ("int8", "on", True, True),
    ("native-q8", "batches", False, True), ("native", "off", False, False)])
def test_the_backoff_parameter_follows_the_option_on_every_precision(tmp_path, dtype, backoff, on, batch_on):
    import dataclasses

    from eagle_trt.engines import get
    from eagle_trt.load_policy import LoadPolicy

    repo = tmp_path / "model_repository"
    spec = dataclasses.replace(fixed_spec("pytorch"), dtype=dtype)
    write_model_repository(spec, repo, bundle_dir=Path("/bundle"), options=ServingOptions(backoff=backoff))
    params = {name: {k: v.string_value for k, v in C.parse((repo / name / "config.pbtxt").read_text())
                     .parameters.items()} for name in ("eagle_engine", "base_engine")}
    assert params["eagle_engine"]["backoff"] == ("true" if on else "false")  # per request
    assert params["eagle_engine"]["batch_backoff"] == ("true" if batch_on else "false")  # batches of 2 or more
    # plain decoding has nothing to back off from
    assert params["base_engine"]["backoff"] == params["base_engine"]["batch_backoff"] == "false"
    # what `perf load` names in its report (tmp_path is the bundle here)
    settings = get("pytorch").load_settings(tmp_path)
    assert settings["backoff"] == ("each request alone and every batch" if on else
                                   "batches of 2 or more" if batch_on else "off")
    assert settings["load_policy"] == LoadPolicy.from_list(json.loads(params["eagle_engine"]["load_policy"])).to_arg()
    with pytest.raises(EagleTrtError, match="backoff 'sometimes' is not one of auto, on, batches, off"):
        ServingOptions(backoff="sometimes").validate()


class _RecordingMetric:
    def __init__(self, calls, name):
        self.calls, self.name = calls, name

    def increment(self, value):
        self.calls.append(("increment", self.name, value))

    def observe(self, value):
        self.calls.append(("observe", self.name, value))


def _recording_metric_family(calls):
    class MetricFamily:
        COUNTER, HISTOGRAM = "counter", "histogram"

        def __init__(self, name, description, kind):
            self.name = name

        def Metric(self, labels, buckets=None):  # noqa: N802 - pb_utils' name
            return _RecordingMetric(calls, self.name)

    return MetricFamily


def test_acceptance_metrics_gather_in_the_stub_and_go_out_summed(python_models, monkeypatch):
    """Each pb_utils metric call is a round trip to tritonserver: a round's counters go out as one increment per
    counter that grew (summed over its requests), its histogram observations one per step, only when sent."""
    from eagle_trt.metrics import ACCEPTED_TOKENS_PER_STEP, DRAFT_TOKENS, OUTPUT_TOKENS, REQUESTS, VERIFY_STEPS

    calls = []
    monkeypatch.setattr(sys.modules["triton_python_backend_utils"], "MetricFamily", _recording_metric_family(calls),
                        raising=False)
    from eagle_trt.model_repository.python_models.acceptance_metrics import AcceptanceMetrics, RequestCounter

    metrics = AcceptanceMetrics("eagle_model", "chain:3", "int8")
    first, second = RequestCounter(metrics), RequestCounter(metrics)
    for counter, lengths, drafted in ((first, [3, 1], 6), (second, [2], 3)):
        counter.step(SimpleNamespace(accepted_lengths=lengths, num_draft_tokens=drafted, num_accepted_draft_tokens=0,
                                     num_suffix_tokens=0, num_accepted_suffix_tokens=0, cached_prompt_tokens=0))
    metrics.request_done(12)
    assert calls == []  # nothing leaves before it is sent
    taken = metrics.take()
    assert metrics.take() is None  # taken once
    metrics.send(taken)
    increments = {name: value for kind, name, value in calls if kind == "increment"}
    assert increments == {VERIFY_STEPS.name: 3.0, DRAFT_TOKENS.name: 9.0, REQUESTS.name: 1.0, OUTPUT_TOKENS.name: 12.0}
    assert len([c for c in calls if c[0] == "increment"]) == 4
    assert [value for kind, _, value in calls if kind == "observe"] == [3.0, 1.0, 2.0]
    first.step(SimpleNamespace(accepted_lengths=[3, 1, 4], num_draft_tokens=9, num_accepted_draft_tokens=0,
                               num_suffix_tokens=0, num_accepted_suffix_tokens=0, cached_prompt_tokens=0))
    calls.clear()
    metrics.close()  # sends what is left (only the new step), then drops the metrics
    assert calls == [("increment", VERIFY_STEPS.name, 1.0), ("increment", DRAFT_TOKENS.name, 3.0),
                     ("observe", ACCEPTED_TOKENS_PER_STEP.name, 4.0)]


def test_engine_outbox_runs_in_order_and_survives_a_failure(python_models, monkeypatch):
    """Responses and metrics leave through the outbox thread in the order the worker posted them; a failed send is
    logged and the ones after it still go."""
    import queue
    import threading

    logged = []
    monkeypatch.setattr(sys.modules["triton_python_backend_utils"], "Logger",
                        SimpleNamespace(log_error=logged.append), raising=False)
    model = python_models.engine.TritonPythonModel()
    model.outbox = queue.SimpleQueue()
    done = []

    def fail():
        raise RuntimeError("client gone")

    for i in range(50):
        model._post(done.append, i)
    model._post(fail)
    model._post(done.append, "after")
    model.outbox.put(None)
    thread = threading.Thread(target=model._send_loop)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive() and done == [*range(50), "after"]
    assert len(logged) == 1 and "client gone" in logged[0]
