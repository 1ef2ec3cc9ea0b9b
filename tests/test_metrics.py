"""eagle_trt.metrics: the names follow Prometheus conventions, and a scrape's text reads back into the counters
perf differences (the real endpoint's text is read in tests/server/test_server_metrics.py)."""

import pytest

from eagle_trt.errors import EagleTrtError
from eagle_trt.metrics import (ACCEPTED_TOKENS_PER_STEP, ALL_EAGLE_METRICS, EAGLE_METRICS, AcceptanceCounts,
                               metric_sum, parse_metrics)

SCRAPE = """# HELP eagle_trt_requests_total Requests finished by the engine.
# TYPE eagle_trt_requests_total counter
eagle_trt_requests_total{dtype="float32",model="eagle_model",tree="chain:3"} 4
eagle_trt_requests_total{dtype="float32",model="base_model",tree="none"} 2
eagle_trt_verify_steps_total{dtype="float32",model="eagle_model",tree="chain:3"} 10
eagle_trt_draft_tokens_total{dtype="float32",model="eagle_model",tree="chain:3"} 30
eagle_trt_accepted_draft_tokens_total{dtype="float32",model="eagle_model",tree="chain:3"} 15
eagle_trt_accepted_tokens_per_step_bucket{dtype="float32",model="eagle_model",tree="chain:3",le="1"} 3
nv_inference_count{model="eagle_model",version="1"} 4
odd{path="a \\"quoted\\" b"} 1.5e3
"""


def test_names_follow_prometheus_conventions():
    names = [spec.name for spec in ALL_EAGLE_METRICS]
    assert len(set(names)) == len(names) and all(n.startswith("eagle_trt_") for n in names)
    assert all(spec.kind == "counter" and spec.name.endswith("_total") for spec in EAGLE_METRICS)
    buckets = ACCEPTED_TOKENS_PER_STEP.buckets
    assert ACCEPTED_TOKENS_PER_STEP.kind == "histogram" and list(buckets) == sorted(set(buckets)) and buckets[0] == 1


def test_a_scrape_reads_back_into_counters_and_differences():
    samples = parse_metrics(SCRAPE)
    assert metric_sum(samples, "odd", path='a "quoted" b') == 1500.0
    assert metric_sum(samples, "eagle_trt_accepted_tokens_per_step_bucket", model="eagle_model", le="1") == 3
    eagle = AcceptanceCounts.from_metrics(SCRAPE, "eagle_model")
    assert (eagle.requests, eagle.verify_steps, eagle.draft_tokens, eagle.output_tokens) == (4, 10, 30, 0)
    assert eagle.acceptance_rate == 0.5 and eagle.mean_accepted_length == 2.5  # (15 + 10) / 10
    delta = eagle.delta(AcceptanceCounts(requests=1, output_tokens=0, verify_steps=5, draft_tokens=15,
                                          accepted_draft_tokens=5))
    assert delta.to_dict()["mean_accepted_length"] == 3.0 and delta.requests == 3
    base = AcceptanceCounts.from_metrics(SCRAPE, "base_model")
    assert base.requests == 2 and base.acceptance_rate is None and base.mean_accepted_length is None


def test_a_text_that_is_not_a_scrape_is_a_clear_error():
    with pytest.raises(EagleTrtError, match="line 2 of the metrics text is not a Prometheus sample"):
        parse_metrics("ok 1\n<html>not metrics</html>\n")


def test_running_totals_turn_into_increments_per_request():
    """A TensorRT-LLM engine repeats a request's totals on every response: each request counts once, its figures
    add up to its final totals, and a forgotten key (oldest first) counts as a new request."""
    from eagle_trt.metrics import CumulativeTotals

    totals = CumulativeTotals(max_open=2)
    assert totals.response(1, 0, 0) == (True, 0, 0)
    assert totals.response(1, 5, 3) == (False, 5, 3) and totals.response(2, 4, 4) == (True, 4, 4)
    assert totals.response(1, 10, 4) == (False, 5, 1)  # key 1 used last: key 2 is now the oldest
    assert totals.response(3, 1, 1) == (True, 1, 1) and list(totals.seen) == [1, 3]
    assert totals.response(2, 6, 5) == (True, 6, 5)
