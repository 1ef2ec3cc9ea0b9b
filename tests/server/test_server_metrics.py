"""The acceptance metrics on the real tritonserver's metrics port (docs/metrics.md): after a few requests to
eagle_model and base_model, the scraped counters equal the sums of the per-request acceptance outputs and token
counts, and base_model's acceptance stays zero. Uses the shared pytorch bundle of the OpenAI tests (tree chain:3),
with base_model loaded for this module and unloaded after it; every figure is a difference of two scrapes, so the
requests of other tests do not matter. The suffix counters are checked on a second bundle drafting chain:2 with
suffix-automaton candidates (+suffix:1,4), eagle_model only.
"""

from __future__ import annotations

import http.client
import json
import urllib.request

import pytest

from eagle_trt.metrics import (ACCEPTED_SUFFIX_TOKENS, ACCEPTED_TOKENS_PER_STEP, EAGLE_METRICS, REQUESTS,
                               SUFFIX_TOKENS, AcceptanceCounts, metric_sum, parse_metrics)

pytestmark = pytest.mark.server

PROMPTS = ("Describe five key principles in evaluating an argument.", "Write a haiku about the sea.",
           "What is machine learning?")
HISTOGRAM = ACCEPTED_TOKENS_PER_STEP.name


@pytest.fixture(scope="module")
def server(openai_stack):
    server, _ = openai_stack
    server.load("base_model")
    yield server
    server.unload("base_model")
    server.models.remove("base_model")


def scrape(server) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        return response.read().decode()


def ask(server, model: str, prompt: str, *, stream: bool) -> dict:
    """One request; its final acceptance outputs and the output_token_count of all its responses added up."""
    conn = http.client.HTTPConnection("127.0.0.1", server.ports["http"], timeout=120)
    body = {"text_input": prompt, "max_tokens": 12, "stream": stream, "temperature": 0.0}
    conn.request("POST", f"/v2/models/{model}/generate" + ("_stream" if stream else ""), json.dumps(body))
    response = conn.getresponse()
    data = response.read()
    conn.close()
    assert response.status == 200, data
    events = [json.loads(line[5:]) for line in data.splitlines() if line.startswith(b"data:")] if stream \
        else [json.loads(data)]
    assert events and all("error" not in e for e in events), data
    last = events[-1]
    return {"requests": 1, "output_tokens": sum(e["output_token_count"] for e in events),
            "draft_tokens": last["total_draft_tokens"], "accepted_draft_tokens": last["total_accepted_draft_tokens"]}


def test_scraped_metrics_equal_the_sums_of_the_per_request_outputs(server):
    before = scrape(server)
    expected = {}
    for model in ("eagle_model", "base_model"):
        answers = [ask(server, model, prompt, stream=i == 0) for i, prompt in enumerate(PROMPTS)]
        expected[model] = {key: sum(a[key] for a in answers) for key in answers[0]}
    after = scrape(server)
    old, new = parse_metrics(before), parse_metrics(after)

    eagle, base = (AcceptanceCounts.from_metrics(after, m).delta(AcceptanceCounts.from_metrics(before, m))
                   for m in ("eagle_model", "base_model"))
    for model, counts in (("eagle_model", eagle), ("base_model", base)):
        got = {key: getattr(counts, key) for key in expected[model]}
        assert got == expected[model], (model, got, expected[model])
    assert expected["eagle_model"]["draft_tokens"] > 0 and eagle.verify_steps > 0
    assert base.draft_tokens == base.accepted_draft_tokens == 0 and base.verify_steps > 0
    assert eagle.draft_tokens == 3 * eagle.verify_steps  # chain:3 drafts 3 tokens every verify step
    for model in ("eagle_model", "base_model"):  # no +suffix in this bundle's tree, none in plain decoding
        for spec in (SUFFIX_TOKENS, ACCEPTED_SUFFIX_TOKENS):
            assert metric_sum(new, spec.name, model=model) == metric_sum(old, spec.name, model=model) == 0

    def histogram(model, suffix, **labels):
        return (metric_sum(new, HISTOGRAM + suffix, model=model, **labels)
                - metric_sum(old, HISTOGRAM + suffix, model=model, **labels))

    # one observation per verify step, each the tokens it committed: accepted draft tokens + 1
    assert histogram("eagle_model", "_count") == eagle.verify_steps
    assert histogram("eagle_model", "_sum") == eagle.accepted_draft_tokens + eagle.verify_steps
    assert histogram("base_model", "_count") == histogram("base_model", "_bucket", le="1") == base.verify_steps


def test_metrics_carry_the_model_tree_and_dtype_labels_and_types(server):
    ask(server, "base_model", PROMPTS[0], stream=False)
    text = scrape(server)
    for spec in EAGLE_METRICS:
        assert f"# TYPE {spec.name} counter" in text, spec.name
    assert f"# TYPE {HISTOGRAM} histogram" in text
    labels = {(ls["model"], ls["tree"], ls["dtype"]) for name, ls, _ in parse_metrics(text) if name == REQUESTS.name}
    assert labels == {("eagle_model", "chain:3", "float32"), ("base_model", "none", "float32")}


def test_perf_reads_acceptance_from_the_metrics_when_responses_carry_none(server, tmp_path):
    """perf's fallback on the real endpoint: runs whose requests hold no per-step figures (as a trtllm bundle
    before 0.19 gives) take the mean accepted length from the scrapes around them."""
    from eagle_trt.perf.aiperf_run import RequestResult, RunResult
    from eagle_trt.perf.report import build_report
    from eagle_trt.perf.server_metrics import around, scrape_acceptance

    answers = {}

    def run(model):
        answers[model] = [ask(server, model, prompt, stream=False) for prompt in PROMPTS[:2]]
        requests = [RequestResult(p, "", a["output_tokens"], 100.0, None, None) for p, a in zip(PROMPTS, answers[model])]
        return RunResult(model, {}, requests, tmp_path)

    before = scrape(server)
    eagle, base = (around(server.metrics_url, m, lambda m=m: run(m)) for m in ("eagle_model", "base_model"))
    steps = metric_sum(parse_metrics(scrape(server)), HISTOGRAM + "_count", model="eagle_model") - metric_sum(
        parse_metrics(before), HISTOGRAM + "_count", model="eagle_model")
    accepted = sum(a["accepted_draft_tokens"] for a in answers["eagle_model"])
    assert eagle.scraped.verify_steps == steps > 0 and eagle.scraped.accepted_draft_tokens == accepted
    report = build_report(eagle, base)
    assert report["acceptance_source"] == "metrics"
    assert report["mean_accepted_length"] == pytest.approx((accepted + steps) / steps)
    assert report["base"]["scraped_metrics"]["mean_accepted_length"] == 1.0  # plain decoding: one token a step
    assert scrape_acceptance("http://127.0.0.1:9/metrics", "eagle_model") is None  # nothing listens: no figures


SUFFIX_TREE = "chain:2+suffix:1,4"  # any repeated token starts a match (a candidate counts where the chain lacks it)
SUFFIX_PROMPTS = PROMPTS + ("red green blue red green blue red green blue red", "1 2 3 4 1 2 3 4 1 2 3 4 1 2")


@pytest.fixture(scope="module")
def suffix_server(tiny_base, eagle1_draft, tmp_path_factory):
    from click.testing import CliRunner

    from eagle_trt.cli import main
    from eagle_trt.serving import TritonServer

    out = tmp_path_factory.mktemp("suffix_bundle") / "bundle"
    result = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o",
                                       str(out), "--engine", "pytorch", "--max-seq-len", "512",
                                       "--max-input-len", "256", "--tree", SUFFIX_TREE, "--backoff", "batches"])
    assert result.exit_code == 0, result.output
    with TritonServer(out / "model_repository", models=["eagle_model"],
                      log_file=out.parent / "tritonserver.log") as server:
        yield server


def test_suffix_counters_count_the_candidates_the_runtime_added(suffix_server):
    """The pytorch engine counts GenerationStats.num_suffix_tokens / num_accepted_suffix_tokens: part of the drafts
    (chain:2 drafts 2 tokens a step, the automaton's candidates come on top) and of the accepted drafts."""
    before = scrape(suffix_server)
    answers = [ask(suffix_server, "eagle_model", prompt, stream=i == 0) for i, prompt in enumerate(SUFFIX_PROMPTS)]
    after = scrape(suffix_server)
    old, new = parse_metrics(before), parse_metrics(after)
    counts = AcceptanceCounts.from_metrics(after, "eagle_model").delta(AcceptanceCounts.from_metrics(before,
                                                                                                   "eagle_model"))
    suffix, accepted_suffix = (metric_sum(new, spec.name, model="eagle_model")
                               - metric_sum(old, spec.name, model="eagle_model")
                               for spec in (SUFFIX_TOKENS, ACCEPTED_SUFFIX_TOKENS))
    assert counts.draft_tokens == sum(a["draft_tokens"] for a in answers)
    assert suffix > 0 and counts.draft_tokens == 2 * counts.verify_steps + suffix
    assert 0 <= accepted_suffix <= min(suffix, counts.accepted_draft_tokens)
    text = scrape(suffix_server)
    assert f"# TYPE {SUFFIX_TOKENS.name} counter" in text and f"# TYPE {ACCEPTED_SUFFIX_TOKENS.name} counter" in text
    labels = {ls["tree"] for name, ls, _ in parse_metrics(text) if name == SUFFIX_TOKENS.name}
    assert labels == {SUFFIX_TREE}


def test_the_dashboard_queries_only_eagle_trt_metrics_this_server_exports(server):
    """Every eagle_trt_* series the Grafana dashboard reads is on the real endpoint (the pytorch engine exports all
    of them; Triton's nv_inference_* names are checked against metrics.TRITON_METRICS in tests/test_deploy.py)."""
    from eagle_trt.deploy.observability import grafana_dashboard, promql_exprs

    from test_deploy import _metric_names

    ask(server, "eagle_model", PROMPTS[1], stream=False)
    exported = {name for name, _, _ in parse_metrics(scrape(server))}
    names = {n for e in promql_exprs(grafana_dashboard("t"), []) for n in _metric_names(e)}
    queried = {n for n in names if n.startswith("eagle_trt_")}
    assert {SUFFIX_TOKENS.name, ACCEPTED_SUFFIX_TOKENS.name, REQUESTS.name} <= queried
    assert queried - exported == set()




def chat(server, model: str, messages: list[dict]) -> str:
    """One conversation through the ensemble's `messages` input (greedy, 12 tokens): the answer's text."""
    conn = http.client.HTTPConnection("127.0.0.1", server.ports["http"], timeout=120)
    body = {"messages": json.dumps(messages), "max_tokens": 12, "temperature": 0.0, "exclude_input_in_output": True}
    conn.request("POST", f"/v2/models/{model}/generate", json.dumps(body))
    response = conn.getresponse()
    data = response.read()
    conn.close()
    assert response.status == 200, data
    return json.loads(data)["text_output"]


def test_a_next_turn_prefills_only_what_is_new(server, tiny_base):
    """A chat's second turn: each model counts the conversation so far as cached prompt tokens (runtime.prefix)
    where the bundle's fp32 engine is batch-invariant on this CPU (else none), and eagle_model answers both turns as
    base_model does (there exactly)."""
    from eagle_trt.metrics import CACHED_PROMPT_TOKENS
    from eagle_trt.runtime import EagleDecoder

    turns = [{"role": "user", "content": PROMPTS[0]}]
    answers = {}
    before = parse_metrics(scrape(server))
    for model in ("eagle_model", "base_model"):
        first = chat(server, model, turns)
        answers[model] = (first, chat(server, model, turns + [{"role": "assistant", "content": first},
                                                               {"role": "user", "content": PROMPTS[1]}]))
    after = parse_metrics(scrape(server))
    invariant = EagleDecoder.load(tiny_base, None, tree="chain:1", dtype="float32", max_seq_len=64).base.batch_invariant
    assert answers["eagle_model"] == answers["base_model"] or not invariant  # else equal up to near-ties only
    for model in ("eagle_model", "base_model"):
        cached = metric_sum(after, CACHED_PROMPT_TOKENS.name, model=model) - metric_sum(
            before, CACHED_PROMPT_TOKENS.name, model=model)
        assert cached > 0 if invariant else cached == 0, (model, cached, invariant)
