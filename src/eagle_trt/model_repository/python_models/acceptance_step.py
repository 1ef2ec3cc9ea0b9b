"""Triton python model `eagle_acceptance` / `base_acceptance` of trtllm and llmapi bundles: the ensemble step after
the TensorRT-LLM engine that passes its acceptance outputs through to the ensemble and counts them on Triton's
metrics port under the same names and labels as the pytorch engine (eagle_trt.metrics, acceptance_metrics.py).

One step per ensemble, so that its `model` label says which ensemble (eagle_model / base_model) it serves; its config
parameters give model, tree and dtype, and `count_output_tokens` whether the engine answers token ids it can count
(trtllm's sequence_length; the LLM-API model answers text only).

Inputs, one request per engine response (the tensors TensorRT-LLM's model answers, docs/trtllm_formats.md §4):
acceptance_rate, total_accepted_draft_tokens, total_draft_tokens, arrival_time_ns (each [1]; they come only when the
request asked return_perf_metrics) and, trtllm only, sequence_length INT32 [beam] (the token ids the response
carries). Each comes as the engine sends it: numbers (FP32 / INT32 / INT64) from the tensorrtllm backend, BYTES
holding the number's text from the LLM-API model (its model.py builds them with text_output's dtype; the config
typing them is layout.perf_output_types). Outputs: the three acceptance tensors as the numbers this step's config
declares (FP32, INT32, INT32), whichever form came in.

What is counted, and what cannot be:
- The engine repeats the request's running totals on every response (streamed or not) and no response says it is
  the last, so requests are told apart by arrival_time_ns (the same on every response of a request): a new key is
  a new request, and each response adds what its totals grew by (metrics.CumulativeTotals). Exact: requests,
  draft tokens, accepted draft tokens and (trtllm) output tokens = the sum of sequence_length, the ensemble's
  output_token_count.
- Only responses that carry the perf-metrics outputs are counted (a request without return_perf_metrics has no
  key to count it by); Triton's nv_inference_request_success counts every request.
- Not emitted: verify steps and the accepted-length histogram (the engine reports per-request totals, not steps;
  dividing drafts by the tree's size would assume every step drafts the whole tree), the suffix counters (an
  llmapi bundle with +suffix runs TensorRT-LLM's sa_config, whose candidates its outputs do not count apart from
  the drafts), and for llmapi output tokens (its model answers text, no token ids).
Copied as model_repository/{eagle,base}_acceptance/1/model.py (trtllm with acceptance outputs, and llmapi).
"""

import json

import triton_python_backend_utils as pb_utils
from model_params import parameters  # beside model.py (layout.py copies it)

ACCEPTANCE_NAMES = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")
REQUEST_KEY = "arrival_time_ns"
TOKEN_COUNT = "sequence_length"


def as_number(value):
    """A perf-metrics value as a Python number: numpy numbers as they are, BYTES / str holding a number's text (the
    LLM-API model's form, e.g. b"0.75", b"76735374300000") parsed; an integer's text stays exact."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            return float(text)
    return value.item() if hasattr(value, "item") else value


def numbers(values, dtype):
    """An input's values (numbers or BYTES) as a numpy array of `dtype`, same shape."""
    import numpy as np

    return np.array([as_number(v) for v in values.reshape(-1)], dtype=dtype).reshape(values.shape)


def _first(request, name):
    """The first element of an input (a [1, 1] or [1] tensor) as a number, or None when the response did not
    carry it."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    return as_number(values[0]) if values.size else None


class TritonPythonModel:
    def initialize(self, args):
        from eagle_trt.metrics import LLMAPI_METRICS, TRTLLM_METRICS, CumulativeTotals
        from eagle_trt.model_repository.python_models.acceptance_metrics import AcceptanceMetrics

        param = parameters(args)
        self.count_tokens = param["count_output_tokens"] == "true"
        counters = TRTLLM_METRICS if self.count_tokens else LLMAPI_METRICS
        self.metrics = AcceptanceMetrics(param["model"], param["tree"], param["dtype"], counters=counters,
                                         histogram=False)
        self.totals = CumulativeTotals()
        config = json.loads(args["model_config"])
        self.out_dtypes = {name: pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, name)["data_type"]) for name in ACCEPTANCE_NAMES}

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                self._count(request)
                passed = [pb_utils.Tensor(name, numbers(tensor.as_numpy(), self.out_dtypes[name]))  # [batch, 1]
                          for name in ACCEPTANCE_NAMES
                          if (tensor := pb_utils.get_input_tensor_by_name(request, name)) is not None]
                responses.append(pb_utils.InferenceResponse(output_tensors=passed))
            except Exception as exc:  # noqa: BLE001 - must answer every request
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"acceptance step failed: {type(exc).__name__}: {exc}")))
        self.metrics.flush()  # the batch's counts, before its responses go back
        return responses

    def _count(self, request) -> None:
        from eagle_trt.metrics import ACCEPTED_DRAFT_TOKENS, DRAFT_TOKENS, OUTPUT_TOKENS, REQUESTS

        key = _first(request, REQUEST_KEY)
        drafted, accepted = _first(request, "total_draft_tokens"), _first(request, "total_accepted_draft_tokens")
        if key is None or drafted is None or accepted is None:
            return  # no perf metrics asked: nothing to tell this request's responses apart by
        new_request, more_drafted, more_accepted = self.totals.response(int(key), int(drafted), int(accepted))
        self.metrics.add(REQUESTS, int(new_request))
        self.metrics.add(DRAFT_TOKENS, more_drafted)
        self.metrics.add(ACCEPTED_DRAFT_TOKENS, more_accepted)
        if self.count_tokens:
            tokens = _first(request, TOKEN_COUNT)
            self.metrics.add(OUTPUT_TOKENS, 0 if tokens is None else max(0, int(tokens)))

    def finalize(self):
        self.metrics.close()
