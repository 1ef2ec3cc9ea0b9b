"""The acceptance step of trtllm and llmapi bundles on the real tritonserver (docs/metrics.md). TensorRT-LLM cannot
load here, so only the python steps `eagle-trt build` writes after it (eagle_acceptance, base_acceptance) are loaded,
and each is sent the tensors the TensorRT-LLM model answers, with the names, types and shapes of the configs the
build wrote: a streamed request (three responses repeating its running totals under one arrival_time_ns), a
non-streamed one, and a response without perf metrics. The scraped counters equal the final totals of the counted
requests, base_model's acceptance stays zero, the figures the engine cannot give (verify steps, the per-step
histogram, llmapi's output tokens) are not exported at all, and the acceptance outputs come back unchanged.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from eagle_trt.metrics import (ACCEPTED_DRAFT_TOKENS, ACCEPTED_TOKENS_PER_STEP, DRAFT_TOKENS, LLMAPI_METRICS,
                               OUTPUT_TOKENS, REQUESTS, SUFFIX_TOKENS, TRTLLM_METRICS, VERIFY_STEPS, metric_sum,
                               parse_metrics)
from eagle_trt.engines import write_model_repository
from eagle_trt.model_repository import configs as C
from eagle_trt.model_repository.layout import ACCEPTANCE_STEPS

from builders import fixed_build_spec

pytestmark = pytest.mark.server

STEPS = sorted(ACCEPTANCE_STEPS.values())  # base_acceptance, eagle_acceptance
LLMAPI_PREFIX = "llmapi_"  # the llmapi bundle's steps, renamed to share one server with the trtllm ones
NUMPY_TO_JSON = {"TYPE_FP32": "FP32", "TYPE_INT32": "INT32", "TYPE_INT64": "INT64", "TYPE_STRING": "BYTES"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from eagle_trt.serving import TritonServer

    root = tmp_path_factory.mktemp("acceptance_step")
    repo = root / "repo"
    for engine in ("trtllm", "llmapi"):
        bundle_repo = root / engine
        write_model_repository(fixed_build_spec(engine), bundle_repo, bundle_dir=Path("/bundle"))
        for step in STEPS:
            name = (LLMAPI_PREFIX if engine == "llmapi" else "") + step
            shutil.copytree(bundle_repo / step, repo / name)
            config = repo / name / "config.pbtxt"
            config.write_text(config.read_text().replace(f'name: "{step}"', f'name: "{name}"'))
    models = STEPS + [LLMAPI_PREFIX + s for s in STEPS]
    with TritonServer(repo, models=models, log_file=root / "tritonserver.log") as started:
        yield started


def scrape(server) -> list:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        return parse_metrics(response.read().decode())


def config_inputs(server, model: str) -> dict:
    """name -> (JSON datatype, shape of one response) from the config the build wrote."""
    config = C.parse((server.repo / model / "config.pbtxt").read_text())
    batch = [1] if config.max_batch_size > 0 else []
    from tritonclient.grpc.model_config_pb2 import DataType

    return {t.name: (NUMPY_TO_JSON[DataType.Name(t.data_type)], batch + [1]) for t in config.input}


def engine_response(server, model: str, **values) -> dict:
    """Send one engine response's tensors (those given) to `model`; its outputs by name."""
    types = config_inputs(server, model)
    inputs = [{"name": name, "datatype": types[name][0], "shape": types[name][1],
               "data": [str(value) if types[name][0] == "BYTES" else value]}  # the LLM-API model's form: text
              for name, value in values.items()]
    request = urllib.request.Request(f"{server.http_url}/v2/models/{model}/infer",
                                     data=json.dumps({"inputs": inputs}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    return {out["name"]: out["data"][0] for out in answer.get("outputs", [])}


# (arrival_time_ns, total_draft_tokens, total_accepted_draft_tokens, sequence_length) per engine response
STREAMED = [(1_700_000_000_000_000_001, 0, 0, 1), (1_700_000_000_000_000_001, 5, 3, 4),
            (1_700_000_000_000_000_001, 10, 4, 2)]  # running totals, new tokens per response
NOT_STREAMED = [(1_700_000_000_000_000_002, 15, 9, 12)]


def send(server, model: str, responses, *, tokens: bool) -> list[dict]:
    answers = []
    for key, drafted, accepted, length in responses:
        values = {"acceptance_rate": accepted / drafted if drafted else 0.0, "total_accepted_draft_tokens": accepted,
                  "total_draft_tokens": drafted, "arrival_time_ns": key}
        answers.append(engine_response(server, model, **values, **({"sequence_length": length} if tokens else {})))
    return answers


def delta(before, after, spec, model: str) -> float:
    return metric_sum(after, spec.name, model=model) - metric_sum(before, spec.name, model=model)


@pytest.mark.parametrize("engine, prefix", (("trtllm", ""), ("llmapi", LLMAPI_PREFIX)))
def test_scraped_counters_equal_the_final_totals_of_the_counted_requests(server, engine, prefix):
    """trtllm's engine sends numbers, the LLM-API model BYTES holding them: both are counted, and both come back as
    the numbers the ensemble declares."""
    tokens = engine == "trtllm"
    expected_form = "INT32" if engine == "trtllm" else "BYTES"
    assert config_inputs(server, prefix + ACCEPTANCE_STEPS["eagle_model"])["total_draft_tokens"][0] == expected_form
    before = scrape(server)
    eagle = prefix + ACCEPTANCE_STEPS["eagle_model"]
    answers = send(server, eagle, STREAMED + NOT_STREAMED, tokens=tokens)
    assert [a["total_draft_tokens"] for a in answers] == [0, 5, 10, 15]  # passed through, as numbers
    assert answers[1]["acceptance_rate"] == pytest.approx(0.6)
    send(server, prefix + ACCEPTANCE_STEPS["base_model"], [(1_700_000_000_000_000_003, 0, 0, 7)], tokens=tokens)
    if tokens:  # no perf metrics asked: nothing to key the request by, so it is not counted and nothing comes back
        assert engine_response(server, eagle, sequence_length=9) == {}
    after = scrape(server)

    assert delta(before, after, REQUESTS, "eagle_model") == 2
    assert delta(before, after, DRAFT_TOKENS, "eagle_model") == 10 + 15  # final totals, not the sum of every response
    assert delta(before, after, ACCEPTED_DRAFT_TOKENS, "eagle_model") == 4 + 9
    assert delta(before, after, REQUESTS, "base_model") == 1
    assert delta(before, after, DRAFT_TOKENS, "base_model") == delta(before, after, ACCEPTED_DRAFT_TOKENS,
                                                                     "base_model") == 0
    if tokens:
        assert delta(before, after, OUTPUT_TOKENS, "eagle_model") == 1 + 4 + 2 + 12
        assert delta(before, after, OUTPUT_TOKENS, "base_model") == 7


def test_only_what_the_engine_gives_exactly_is_exported_with_the_bundle_labels(server):
    send(server, ACCEPTANCE_STEPS["eagle_model"], NOT_STREAMED, tokens=True)
    samples = scrape(server)
    names = {name for name, _, _ in samples}
    assert {spec.name for spec in TRTLLM_METRICS} <= names and set(LLMAPI_METRICS) <= set(TRTLLM_METRICS)
    for absent in (VERIFY_STEPS, SUFFIX_TOKENS):
        assert absent.name not in names
    assert not any(n.startswith(ACCEPTED_TOKENS_PER_STEP.name) for n in names)
    labels = {(ls["model"], ls["tree"], ls["dtype"]) for name, ls, _ in samples if name == REQUESTS.name}
    spec = fixed_build_spec("trtllm")
    assert ("eagle_model", spec.tree.label(), "float16") in labels and ("base_model", "none", "float16") in labels
