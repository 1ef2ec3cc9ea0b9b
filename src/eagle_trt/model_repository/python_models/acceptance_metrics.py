"""The acceptance metrics of eagle_trt.metrics on Triton's metrics port, from inside a python model
(`pb_utils.MetricFamily`, the python backend's custom metrics).

The pytorch engine model counts true per-step figures from the runtime's GenerationStats (`RequestCounter`): every
verify step, its draft tokens, its accepted ones (and, of those, the suffix automaton's candidates: num_suffix_tokens,
num_accepted_suffix_tokens) and the accepted-length histogram, step by step; a request and its output tokens when it
ends (finished or cancelled; a failed request is Triton's nv_inference_request_failure). The trtllm / llmapi
acceptance step (acceptance_step.py) registers only the families its engine's outputs give exactly
(metrics.TRTLLM_METRICS / LLMAPI_METRICS) and no histogram.
Every family carries the labels model (eagle_model / base_model), tree ("none" for plain decoding) and dtype.
Each increment or observation is a round trip from the stub to tritonserver (pb_stub's SendCustomMetricsMessage):
the engine's thread spent 3-6 % of a served run at 4 streams in them, one per counter per request and step
(py-spy, docs/load.md "Served rounds pay less to Triton"). So figures gather in the stub: `take` hands over the
counters' sums and the histogram's observations since the last take, `send` sends them (one increment per counter
that grew), on whatever thread the caller chooses; `flush` does both. The engine takes once per round and before any
final response, so a client that has its answer reads counters that count it.
Imported inside the Triton python stub only (it needs triton_python_backend_utils).
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from eagle_trt.metrics import (ACCEPTED_DRAFT_TOKENS, ACCEPTED_SUFFIX_TOKENS, ACCEPTED_TOKENS_PER_STEP,
                               CACHED_PROMPT_TOKENS, DRAFT_TOKENS,
                               EAGLE_METRICS, OUTPUT_TOKENS, REQUESTS, SUFFIX_TOKENS, VERIFY_STEPS)


def histogram_supported() -> bool:
    """Whether this python backend has histogram metrics (MetricFamily.HISTOGRAM; Triton 24.08 and later)."""
    return hasattr(pb_utils.MetricFamily, "HISTOGRAM")


class AcceptanceMetrics:
    """One model's metrics: a counter per family of `counters` (all of EAGLE_METRICS by default) and, with
    `histogram`, the accepted-length histogram (when the backend has histograms; without it, mean accepted length =
    (accepted + steps) / steps from the counters)."""

    def __init__(self, model: str, tree: str, dtype: str, *, counters=EAGLE_METRICS, histogram: bool = True):
        self.labels = {"model": model, "tree": tree, "dtype": dtype}
        self.families, self.metrics, self.pending, self.observed = [], {}, {}, []
        for spec in counters:
            family = pb_utils.MetricFamily(name=spec.name, description=spec.help, kind=pb_utils.MetricFamily.COUNTER)
            self.families.append(family)
            self.metrics[spec.name] = family.Metric(labels=self.labels)
        self.histogram = None
        if histogram and histogram_supported():
            spec = ACCEPTED_TOKENS_PER_STEP
            family = pb_utils.MetricFamily(name=spec.name, description=spec.help,
                                           kind=pb_utils.MetricFamily.HISTOGRAM)
            self.families.append(family)
            self.histogram = family.Metric(labels=self.labels, buckets=[float(b) for b in spec.buckets])

    def add(self, spec, value: float) -> None:
        """Count `value` on the counter `spec` (sent with the next `take`)."""
        if value:
            self.pending[spec.name] = self.pending.get(spec.name, 0) + value

    def take(self) -> tuple[dict, list] | None:
        """(counter name -> sum, histogram observations) gathered since the last take; None when nothing was."""
        if not self.pending and not self.observed:
            return None
        taken = (self.pending, self.observed)
        self.pending, self.observed = {}, []
        return taken

    def send(self, taken: tuple[dict, list] | None) -> None:
        """Send what `take` returned: one increment per counter that grew, one observation per step."""
        if taken is None:
            return
        sums, observed = taken
        for name, value in sums.items():
            self.metrics[name].increment(float(value))
        if self.histogram is not None:
            for length in observed:
                self.histogram.observe(float(length))

    def flush(self) -> None:
        self.send(self.take())

    def observe_steps(self, accepted_lengths) -> None:
        """Count verify steps, each with the tokens it committed (accepted draft tokens + 1)."""
        self.add(VERIFY_STEPS, len(accepted_lengths))
        if self.histogram is not None:
            self.observed.extend(accepted_lengths)

    def request_done(self, output_tokens: int) -> None:
        self.add(REQUESTS, 1)
        self.add(OUTPUT_TOKENS, output_tokens)

    def close(self) -> None:
        """Send what is gathered, then drop the metrics before their families (the python backend's required
        order)."""
        self.flush()
        self.metrics.clear()
        self.histogram = None
        self.families.clear()


class RequestCounter:
    """What one request has already counted, so that each step adds only its own figures."""

    __slots__ = ("metrics", "steps", "counted")

    # GenerationStats field -> the counter its growth goes to
    TOTALS = (("num_draft_tokens", DRAFT_TOKENS), ("num_accepted_draft_tokens", ACCEPTED_DRAFT_TOKENS),
              ("num_suffix_tokens", SUFFIX_TOKENS), ("num_accepted_suffix_tokens", ACCEPTED_SUFFIX_TOKENS),
              ("cached_prompt_tokens", CACHED_PROMPT_TOKENS))

    def __init__(self, metrics: AcceptanceMetrics):
        self.metrics, self.steps = metrics, 0
        self.counted = {field: 0 for field, _ in self.TOTALS}

    def step(self, stats) -> None:
        """Add what the request's GenerationStats hold beyond what was counted (new verify steps, drafts, suffix
        candidates)."""
        self.metrics.observe_steps(stats.accepted_lengths[self.steps:])
        self.steps = len(stats.accepted_lengths)
        for field, spec in self.TOTALS:
            total = int(getattr(stats, field))
            self.metrics.add(spec, total - self.counted[field])
            self.counted[field] = total
