"""The client and the perf reader against TensorRT-LLM's LLM-API model, without a server: its request names, its
streamed text_output that repeats the text so far, and acceptance figures sent as strings (model.py builds them in
text_output's dtype: triton_backend/all_models/llmapi/tensorrt_llm/1/model.py, _create_response)."""

import json

import pytest

from eagle_trt.client.triton import GenerationReply, _add, _NUMPY_TYPES, llmapi_body, new_text, request_body
from eagle_trt.errors import EagleTrtError
from eagle_trt.engines.llmapi import LLMAPI_INPUTS
from eagle_trt.perf.aiperf_run import _read_raw


def test_llmapi_body_uses_the_models_names():
    body = llmapi_body(request_body("Hi", max_tokens=16, stream=True, temperature=0.0, seed=3))
    assert body == {"text_input": "Hi", "sampling_param_max_tokens": 16, "streaming": True,
                    "sampling_param_return_perf_metrics": True, "sampling_param_temperature": 0.0,
                    "sampling_param_seed": 3}
    assert set(body) <= {name for name, *_ in LLMAPI_INPUTS}
    assert set(body) <= set(_NUMPY_TYPES)  # the gRPC path can type every one
    with pytest.raises(EagleTrtError, match="chat_template"):
        llmapi_body(request_body("Hi", max_tokens=4, stream=False, chat=True))


def test_cumulative_stream_is_turned_into_pieces():
    reply, pieces = GenerationReply(text=""), []
    for event in ({"text_output": "The"}, {"text_output": "The quick"}, {"text_output": "The quick fox"},
                  {"text_output": "The quick fox", "acceptance_rate": "0.5", "total_accepted_draft_tokens": "3",
                   "total_draft_tokens": ["6"]}):
        _add(reply, event, pieces.append, 0.0, cumulative=True)
    assert reply.text == "The quick fox" and pieces == ["The", " quick", " fox"]
    assert (reply.acceptance_rate, reply.total_accepted_draft_tokens, reply.total_draft_tokens) == (0.5, 3, 6)
    delta = GenerationReply(text="")
    for piece in ("The", "The", " end"):  # a delta stream is never taken for a cumulative one
        _add(delta, {"text_output": piece}, None, 0.0)
    assert delta.text == "TheThe end"
    assert new_text("abc", "xyz", cumulative=True) == "xyz"  # not a continuation: keep it whole


def test_perf_reader_takes_the_last_cumulative_response(tmp_path):
    events = [{"text_output": "a", "total_accepted_draft_tokens": "0", "total_draft_tokens": "0"},
              {"text_output": "a b c", "total_accepted_draft_tokens": "2", "total_draft_tokens": "3"},
              {"text_output": "a b c d", "total_accepted_draft_tokens": "2", "total_draft_tokens": "6"}]
    record = {"metadata": {"x_request_id": "r1"}, "payload": {"text_input": "go"},
              "responses": [{"packets": [{"value": json.dumps(e)} for e in events]}],
              "metrics": {"output_sequence_length": {"value": 4}, "request_latency": {"value": 10.0}}}
    raw = tmp_path / "profile_export_raw.jsonl"
    raw.write_text(json.dumps(record) + "\n")
    [cumulative] = _read_raw(raw, {}, cumulative=True)
    assert cumulative.text == "a b c d" and cumulative.accepted_lengths == [3, 1]
    [delta] = _read_raw(raw, {})
    assert delta.text == "aa b ca b c d"  # what joining would have made of it
