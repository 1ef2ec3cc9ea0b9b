"""The Prometheus metrics a served bundle exports on Triton's metrics port, named once for every reader.

The engine/postprocessing python models register them (`pb_utils.MetricFamily`), the server test scrapes them, the
Grafana dashboard and the PrometheusRule under `OUT/deploy/kubernetes/` query them. Names follow Prometheus
conventions: counters end in `_total`, units are base units. Every family carries the labels in METRIC_LABELS:
`model` (eagle_model / base_model), `tree` (the tree label the bundle serves, "none" for plain decoding) and
`dtype`.

Triton's own metrics used beside ours (queue time, compute time, request counts) are listed in TRITON_METRICS so
that the dashboard and the rule name nothing a server does not export.

`CumulativeTotals` turns the per-request running totals a TensorRT-LLM engine repeats on every response into
increments, keyed by the request's arrival time (the trtllm/llmapi acceptance step).

`parse_metrics` reads the text a metrics endpoint answers and `AcceptanceCounts.from_metrics` sums our counters for
one model, so that a perf run can difference a scrape before and after (`delta`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from eagle_trt.errors import EagleTrtError

METRIC_LABELS = ("model", "tree", "dtype")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str  # "counter" | "gauge" | "histogram" (pb_utils.MetricFamily kinds)
    help: str
    buckets: tuple[float, ...] = field(default=())  # histogram upper bounds (le), ascending


REQUESTS = MetricSpec("eagle_trt_requests_total", "counter", "Requests finished by the engine.")
OUTPUT_TOKENS = MetricSpec("eagle_trt_output_tokens_total", "counter", "Tokens generated (committed) by the engine.")
VERIFY_STEPS = MetricSpec("eagle_trt_verify_steps_total", "counter",
                          "Base-model forward passes that committed tokens (one per decoding step).")
DRAFT_TOKENS = MetricSpec("eagle_trt_draft_tokens_total", "counter", "Draft tokens proposed for verification.")
ACCEPTED_DRAFT_TOKENS = MetricSpec("eagle_trt_accepted_draft_tokens_total", "counter",
                                   "Draft tokens the base model accepted.")
# Of the draft tokens above: the candidates the suffix automaton added to the tree (pytorch engine, runtime/suffix.py)
SUFFIX_TOKENS = MetricSpec("eagle_trt_suffix_tokens_total", "counter",
                           "Draft tokens proposed by the suffix automaton (included in eagle_trt_draft_tokens_total).")
ACCEPTED_SUFFIX_TOKENS = MetricSpec("eagle_trt_accepted_suffix_tokens_total", "counter",
                                    "Suffix-automaton draft tokens the base model accepted (included in "
                                    "eagle_trt_accepted_draft_tokens_total).")
# Prompt tokens the pytorch engine did not prefill: a finished request's cache held them (runtime/prefix.py)
CACHED_PROMPT_TOKENS = MetricSpec("eagle_trt_cached_prompt_tokens_total", "counter",
                                  "Prompt tokens served from a finished request's KV cache (the conversation so far) "
                                  "instead of prefilled.")

EAGLE_METRICS = (REQUESTS, OUTPUT_TOKENS, VERIFY_STEPS, DRAFT_TOKENS, ACCEPTED_DRAFT_TOKENS, SUFFIX_TOKENS,
                 ACCEPTED_SUFFIX_TOKENS, CACHED_PROMPT_TOKENS)
# What a trtllm / llmapi bundle's acceptance step can count exactly from the engine's per-request totals (see
# python_models/acceptance_step.py): no verify steps, no per-step histogram, no suffix candidates apart from the
# drafts. llmapi answers text only, so its output tokens are not counted either.
TRTLLM_METRICS = (REQUESTS, OUTPUT_TOKENS, DRAFT_TOKENS, ACCEPTED_DRAFT_TOKENS)
LLMAPI_METRICS = (REQUESTS, DRAFT_TOKENS, ACCEPTED_DRAFT_TOKENS)

# Tokens one verify step commits: its accepted draft tokens + the base model's own (bonus) token, so 1 for plain
# decoding; a tree of depth d commits at most d + 1. Exported as _bucket{le=...}, _sum, _count.
ACCEPTED_TOKENS_PER_STEP = MetricSpec("eagle_trt_accepted_tokens_per_step", "histogram",
                                      "Tokens committed per verify step (accepted draft tokens + 1).",
                                      buckets=(1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16))
EAGLE_HISTOGRAMS = (ACCEPTED_TOKENS_PER_STEP,)
ALL_EAGLE_METRICS = EAGLE_METRICS + EAGLE_HISTOGRAMS

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


# ---- counting from running totals ----------------------------------------------------------------------------
MAX_OPEN_REQUESTS = 4096  # request keys remembered, oldest forgotten first (no response says it is a request's last)


class CumulativeTotals:
    """Increments from responses that each carry a request's totals so far (TensorRT-LLM's perf-metrics outputs:
    total_draft_tokens, total_accepted_draft_tokens, the same arrival_time_ns on every response of a request).

    `response(key, drafted, accepted)` -> (new_request, new drafted, new accepted): a key not seen before is a new
    request; each figure is what the response adds to the last one seen for the key. Streamed (many responses) or
    not (one), a request's increments add up to its final totals."""

    def __init__(self, max_open: int = MAX_OPEN_REQUESTS):
        self.max_open = max_open
        self.seen: dict = {}  # key -> (drafted, accepted), insertion-ordered (oldest first)

    def response(self, key, drafted: int, accepted: int) -> tuple[bool, int, int]:
        before = self.seen.pop(key, None)
        self.seen[key] = (drafted, accepted)
        while len(self.seen) > self.max_open:
            self.seen.pop(next(iter(self.seen)))
        if before is None:
            return True, drafted, accepted
        return False, max(0, drafted - before[0]), max(0, accepted - before[1])


# ---- reading a scrape -------------------------------------------------------------------------------------------
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition: (name, labels, value) per line; comments skipped."""
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise EagleTrtError(f"line {number} of the metrics text is not a Prometheus sample: {line[:120]!r}",
                                "pass the text a Triton metrics endpoint (/metrics) answers")
        name, labels, value = match.groups()
        samples.append((name, {k: v.replace('\\"', '"') for k, v in _LABEL.findall(labels or "")}, float(value)))
    return samples


def metric_sum(samples, name: str, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels` (0 when there is none)."""
    return sum((v for n, ls, v in samples if n == name and all(ls.get(k) == w for k, w in labels.items())), 0.0)


# AcceptanceCounts' fields, each the metric it sums
COUNTED_METRICS = {"requests": REQUESTS, "output_tokens": OUTPUT_TOKENS, "verify_steps": VERIFY_STEPS,
                   "draft_tokens": DRAFT_TOKENS, "accepted_draft_tokens": ACCEPTED_DRAFT_TOKENS,
                   "cached_prompt_tokens": CACHED_PROMPT_TOKENS}


@dataclass(frozen=True)
class AcceptanceCounts:
    """Our counters for one model (every tree and dtype label summed), from one scrape or the difference of two.
    Each field is the metric of the same name in COUNTED_METRICS."""

    requests: float
    output_tokens: float
    verify_steps: float
    draft_tokens: float
    accepted_draft_tokens: float
    cached_prompt_tokens: float = 0.0

    @classmethod
    def from_metrics(cls, text: str, model: str) -> AcceptanceCounts:
        samples = parse_metrics(text)
        return cls(**{name: metric_sum(samples, spec.name, model=model) for name, spec in COUNTED_METRICS.items()})

    def delta(self, before: AcceptanceCounts) -> AcceptanceCounts:
        return AcceptanceCounts(**{name: getattr(self, name) - getattr(before, name) for name in COUNTED_METRICS})

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_draft_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens committed per verify step (accepted drafts + the bonus token), as the runtime counts it."""
        return (self.accepted_draft_tokens + self.verify_steps) / self.verify_steps if self.verify_steps else None

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in COUNTED_METRICS} | {
            "acceptance_rate": self.acceptance_rate, "mean_accepted_length": self.mean_accepted_length}
