"""The Prometheus metrics a served bundle exports on Triton's metrics port, named once for every reader.

The engine/postprocessing python models register them (`pb_utils.MetricFamily`), the server test scrapes them, the
Grafana dashboard and the PrometheusRule under `OUT/deploy/kubernetes/` query them. Names follow Prometheus
conventions: counters end in `_total`, units are base units. Every family carries the labels in METRIC_LABELS:
`model` (eagle_model / base_model), `tree` (the tree label the bundle serves, "none" for plain decoding) and
`dtype`.

Triton's own metrics used beside ours (queue time, compute time, request counts) are listed in TRITON_METRICS so
that the dashboard and the rule name nothing a server does not export.
"""

from __future__ import annotations

from dataclasses import dataclass

METRIC_LABELS = ("model", "tree", "dtype")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str  # "counter" | "gauge" | "histogram" (pb_utils.MetricFamily kinds)
    help: str


REQUESTS = MetricSpec("eagle_trt_requests_total", "counter", "Requests finished by the engine.")
OUTPUT_TOKENS = MetricSpec("eagle_trt_output_tokens_total", "counter", "Tokens generated (committed) by the engine.")
VERIFY_STEPS = MetricSpec("eagle_trt_verify_steps_total", "counter",
                          "Base-model forward passes that committed tokens (one per decoding step).")
DRAFT_TOKENS = MetricSpec("eagle_trt_draft_tokens_total", "counter", "Draft tokens proposed for verification.")
ACCEPTED_DRAFT_TOKENS = MetricSpec("eagle_trt_accepted_draft_tokens_total", "counter",
                                   "Draft tokens the base model accepted.")

EAGLE_METRICS = (REQUESTS, OUTPUT_TOKENS, VERIFY_STEPS, DRAFT_TOKENS, ACCEPTED_DRAFT_TOKENS)

# Triton core's per-model metrics (Triton metrics docs, "Inference Request Metrics"); microsecond counters.
TRITON_METRICS = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_infer_duration_us",
    # a histogram (_bucket/_sum/_count) of the time to a request's first response, exported only with
    # `tritonserver --metrics-config histogram_latencies=true` (Triton metrics docs, "Histograms")
    "nv_inference_first_response_histogram_ms",
)
