"""The bundle on the real tritonserver (nvidia-pytriton's), loopback, free ports; one server for the module.

Covers: `--load-model eagle_model` alone brings up the ensemble and its composing models; generate,
generate_stream and gRPC streaming answer; eagle_model and base_model give the same greedy text; acceptance
outputs are filled; bad requests get clear errors and the server keeps serving; 200 mixed requests at
concurrency 8 without an error; a client that disconnects mid-stream leaves no stuck request.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest

from eagle_trt.client import generate
from eagle_trt.errors import EagleTrtError

pytestmark = pytest.mark.server

MT_BENCH_PROMPTS = [  # first turns of MT-bench questions (writing, reasoning, coding, STEM)
    "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences "
    "and must-see attractions.",
    "Imagine you are participating in a race with a group of people. If you have just overtaken the second "
    "person, what's your current position? Where is the person you just overtook?",
    "Develop a Python program that reads all the text files under a directory and returns top-5 words with "
    "the most number of occurrences.",
    "Describe five key principles in evaluating an argument in analytical writing.",
]


@pytest.fixture(scope="module")
def bundle(tiny_base, eagle1_draft, tmp_path_factory):
    """`eagle-trt build --engine pytorch` of the tiny base + EAGLE-1 draft (the real CLI). `--backoff batches`: the
    random draft accepts little, so a request's own backoff (the default) would run it plainly, and these tests check
    what the engine reports about its drafts."""
    from click.testing import CliRunner

    from eagle_trt.cli import main

    out = tmp_path_factory.mktemp("served") / "bundle"
    result = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o",
                                       str(out), "--engine", "pytorch", "--max-seq-len", "512",
                                       "--max-input-len", "256", "--max-batch-size", "8", "--tree", "chain:3",
                                       "--backoff", "batches"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def server(bundle):
    from eagle_trt.serving import TritonServer

    with TritonServer(bundle / "model_repository", models=["eagle_model"],
                      log_file=bundle.parent / "tritonserver.log") as running:
        yield running


def post(url: str, model: str, body, *, stream: bool = False, raw: bytes | None = None):
    """(status, parsed JSON or list of SSE events) of one generate / generate_stream request."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    path = f"/v2/models/{model}/generate_stream" if stream else f"/v2/models/{model}/generate"
    conn.request("POST", path, raw if raw is not None else json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    if stream and response.status == 200:
        return 200, [json.loads(line[5:]) for line in data.splitlines() if line.startswith(b"data:")]
    return response.status, json.loads(data)


def test_eagle_model_alone_brings_up_what_it_composes(server):
    states = server.model_states()
    for model in ("eagle_model", "eagle_engine", "preprocessing", "postprocessing"):
        assert states.get(model) == "READY", states
    assert states.get("base_engine") != "READY" and states.get("base_model") != "READY", states


def test_generate_and_generate_stream(server):
    body = {"text_input": MT_BENCH_PROMPTS[0], "max_tokens": 24, "return_perf_metrics": True}
    status, reply = post(server.http_url, "eagle_model", body)
    assert status == 200, reply
    assert isinstance(reply["text_output"], str) and reply["text_output"]
    assert reply["total_draft_tokens"] > 0 and 0 <= reply["total_accepted_draft_tokens"] <= reply["total_draft_tokens"]
    assert reply["acceptance_rate"] == pytest.approx(reply["total_accepted_draft_tokens"] / reply["total_draft_tokens"])
    status, events = post(server.http_url, "eagle_model", dict(body, stream=True), stream=True)
    assert status == 200 and all("error" not in e for e in events), events
    assert len(events) > 2  # several chunks, not one buffered answer
    assert "".join(e["text_output"] for e in events) == reply["text_output"]
    assert events[-1]["total_draft_tokens"] == reply["total_draft_tokens"]


def test_grpc_streaming_client(server):
    chunks = []
    reply = generate(server.grpc_url, "eagle_model", MT_BENCH_PROMPTS[1], max_tokens=16, stream=True,
                     protocol="grpc", on_chunk=chunks.append)
    http_reply = generate(server.http_url, "eagle_model", MT_BENCH_PROMPTS[1], max_tokens=16)
    unary = generate(server.grpc_url, "eagle_model", MT_BENCH_PROMPTS[1], max_tokens=16, protocol="grpc")
    assert reply.text == http_reply.text == unary.text and "".join(chunks) == reply.text
    assert len(reply.chunks) > len(unary.chunks) == 1
    assert reply.total_draft_tokens and reply.total_draft_tokens > 0


def test_eagle_and_base_give_identical_greedy_text(server):
    server.load("base_model")
    assert server.model_states().get("base_engine") == "READY"
    for prompt in MT_BENCH_PROMPTS:
        eagle = generate(server.http_url, "eagle_model", prompt, max_tokens=40, temperature=0.0)
        base = generate(server.http_url, "base_model", prompt, max_tokens=40, temperature=0.0)
        assert eagle.text == base.text, prompt
        assert base.total_draft_tokens == 0 and eagle.total_draft_tokens > 0


BAD_REQUESTS = {
    "missing text_input": ({"max_tokens": 8}, "send exactly one of 'text_input' and 'messages'"),
    "max_tokens 0": ({"text_input": "Hi", "max_tokens": 0}, "'max_tokens' must be between 1 and"),
    "max_tokens negative": ({"text_input": "Hi", "max_tokens": -5}, "'max_tokens' must be between 1 and"),
    "max_tokens beyond the limit": ({"text_input": "Hi", "max_tokens": 100000}, "'max_tokens' must be between 1"),
    "max_tokens as a string": ({"text_input": "Hi", "max_tokens": "8"}, "unable to parse"),
    "temperature as a string": ({"text_input": "Hi", "max_tokens": 8, "temperature": "hot"}, "unable to parse"),
    "empty prompt": ({"text_input": "", "max_tokens": 8}, "'text_input' is empty"),
    "blank prompt": ({"text_input": "  \n", "max_tokens": 8}, "'text_input' is empty"),
    "unknown parameter": ({"text_input": "Hi", "max_tokens": 8, "max_new_tokens": 8}, "unknown parameter"),
    "negative temperature": ({"text_input": "Hi", "max_tokens": 8, "temperature": -0.5}, "'temperature' must be"),
    "top_p above 1": ({"text_input": "Hi", "max_tokens": 8, "top_p": 1.5}, "'top_p' must be in"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_request_gets_a_clear_error_and_the_server_keeps_serving(server, case):
    body, message = BAD_REQUESTS[case]
    status, reply = post(server.http_url, "eagle_model", body)
    assert status in (400, 500), reply  # Triton answers 500 to a JSON value of the wrong type
    assert message.lower() in reply["error"].lower()
    ok_status, ok = post(server.http_url, "eagle_model", {"text_input": "Hello", "max_tokens": 4})
    assert ok_status == 200 and "text_output" in ok


def test_invalid_utf8_prompt_is_rejected(server):
    raw = b'{"text_input": "caf\xc3 \xff\xfe", "max_tokens": 4}'
    status, reply = post(server.http_url, "eagle_model", None, raw=raw)
    assert status == 400 and "utf-8" in reply["error"].lower(), reply
    assert post(server.http_url, "eagle_model", {"text_input": "Hello", "max_tokens": 4})[0] == 200


def test_client_raises_the_server_message(server):
    with pytest.raises(EagleTrtError, match="max_tokens"):
        generate(server.http_url, "eagle_model", "Hello", max_tokens=0)


def test_200_mixed_requests_at_concurrency_8(server):
    def one(i: int):
        stream = i % 2 == 0
        body = {"text_input": MT_BENCH_PROMPTS[i % 4] + f" ({i})", "max_tokens": 6, "stream": stream}
        status, reply = post(server.http_url, "eagle_model", body, stream=stream)
        events = reply if stream else [reply]
        errors = [e for e in events if "error" in e] if status == 200 else [reply]
        return errors, events

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(200)))
    errors = [e for errs, _ in results for e in errs]
    assert errors == []
    assert all(events and "total_draft_tokens" in events[-1] for _, events in results)


def test_disconnect_mid_stream_leaves_no_stuck_request(server):
    """The abandoned stream costs at most its own answer (bounded by max_tokens), then the next requests run at
    normal speed. (Triton cancels eagle_model on the disconnect; postprocessing passes the cancellation on to the
    engine, which stops within a few steps: tests/server/test_server_cancel.py measures that.)"""
    def timed(body) -> float:
        started = time.perf_counter()
        status, reply = post(server.http_url, "eagle_model", body)
        assert status == 200, reply
        return time.perf_counter() - started

    short = {"text_input": "Hello", "max_tokens": 8}
    long = {"text_input": "Hello", "max_tokens": 400, "end_id": 1}  # no end-of-sequence: all 400 tokens
    baseline = min(timed(short) for _ in range(3))
    long_s = timed(long)
    parts = urlsplit(server.http_url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
    body = json.dumps(dict(long, stream=True)).encode()
    sock.sendall(b"POST /v2/models/eagle_model/generate_stream HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    received = b""
    while b"data:" not in received:  # the first chunk, then the client goes away
        chunk = sock.recv(4096)
        assert chunk, received
        received += chunk
    sock.close()
    first_after = timed(short)
    assert first_after < long_s + baseline + 2.0, (first_after, long_s)  # waits at most for the abandoned answer
    assert min(timed(short) for _ in range(3)) < 3 * baseline + 0.25, baseline  # then normal speed again


def test_grpc_cancellation_stops_the_engine(server):
    """A cancelled gRPC stream to the engine model itself stops generation at the next verify step (through
    eagle_model: tests/server/test_server_cancel.py)."""
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    def tensor(name, values, triton_type, dtype):
        array = np.array([values], dtype=dtype)  # [1, n]
        t = grpcclient.InferInput(name, list(array.shape), triton_type)
        t.set_data_from_numpy(array)
        return t

    before = server.log_text().count("cancelled by the client")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("eagle_engine", [
        tensor("input_ids", [5, 6, 7, 8], "INT32", np.int32), tensor("input_lengths", [4], "INT32", np.int32),
        tensor("request_output_len", [400], "INT32", np.int32), tensor("streaming", [True], "BOOL", bool),
        tensor("end_id", [1], "INT32", np.int32)])
    result, error = results.get(timeout=60)
    assert error is None and result.as_numpy("output_ids").size > 0
    client.stop_stream(cancel_requests=True)
    client.close()
    deadline = time.monotonic() + 30
    while server.log_text().count("cancelled by the client") == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server.log_text().count("cancelled by the client") == before + 1
    assert post(server.http_url, "eagle_model", {"text_input": "Hello", "max_tokens": 4})[0] == 200


def test_remote_generation_prints_text_then_figures(server, capsys):
    from eagle_trt.client import print_remote_generation

    reply = print_remote_generation(server.http_url, "eagle_model", MT_BENCH_PROMPTS[3], max_tokens=12, stream=True)
    captured = capsys.readouterr()
    assert captured.out == reply.text + "\n"
    assert "acceptance rate" in captured.err and f"/{reply.total_draft_tokens} draft tokens" in captured.err
    print_remote_generation(server.http_url, "eagle_model", MT_BENCH_PROMPTS[3], max_tokens=12, as_json=True)
    as_json = json.loads(capsys.readouterr().out)
    assert as_json["text"] == reply.text and as_json["total_draft_tokens"] == reply.total_draft_tokens
