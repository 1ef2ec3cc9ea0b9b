"""Issue 18 (3): a dropped or cancelled eagle_model request stops its generation (real tritonserver, tiny bundle).

Triton 2.51 cancels the eagle_model request on an HTTP disconnect (http_server.cc RequestFiniHook) and on a gRPC
cancel, but its ensemble passes the cancellation only to steps it schedules afterwards, never into the running
engine step; postprocessing (that next step) asks the engine to stop the stream (python_models/engine.py).
"""

from __future__ import annotations

import http.client
import json
import queue
import re
import socket
import time

import numpy as np
import pytest

from eagle_trt.serving import TritonServer

from builders import build_tiny_bundle

pytestmark = pytest.mark.server

CANCELLED = re.compile(r"request cancelled by the client (after (\d+) of (\d+) tokens|before it started)")
LONG = {"text_input": "Hello", "max_tokens": 400, "end_id": 1}  # no end-of-sequence token: all 400 tokens


@pytest.fixture(scope="module")
def server(tiny_base, eagle1_draft, tmp_path_factory):
    out = build_tiny_bundle(tmp_path_factory, "cancel", tiny_base, eagle1_draft)
    with TritonServer(out / "model_repository", models=["eagle_model"], log_file=out.parent / "triton.log") as running:
        yield running


def timed(server, body, *, stream: bool = False) -> float:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", server.ports["http"], timeout=600)
    path = "/v2/models/eagle_model/generate_stream" if stream else "/v2/models/eagle_model/generate"
    conn.request("POST", path, json.dumps(dict(body, stream=stream)))
    response = conn.getresponse()
    data = response.read()
    assert response.status == 200 and b'"error"' not in data, data[-500:]
    return time.perf_counter() - started


def cancellations(server) -> list[re.Match]:
    return [m for m in map(CANCELLED.search, server.log_text().splitlines()) if m]


def wait_for_cancellations(server, count: int, timeout: float) -> list[re.Match]:
    deadline = time.monotonic() + timeout
    while len(found := cancellations(server)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_grpc_cancel_of_eagle_model_stops_the_engine(server):
    import tritonclient.grpc as grpcclient

    def tensor(name, value, triton_type, dtype):
        array = np.array([[value]], dtype=dtype)  # [1, 1]
        t = grpcclient.InferInput(name, list(array.shape), triton_type)
        t.set_data_from_numpy(array)
        return t

    before = len(cancellations(server))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("eagle_model", [
        tensor("text_input", b"Hello", "BYTES", object), tensor("max_tokens", 400, "INT64", np.int64),
        tensor("stream", True, "BOOL", bool), tensor("end_id", 1, "INT64", np.int64)])
    result, error = results.get(timeout=60)
    assert error is None and result.as_numpy("text_output") is not None
    client.stop_stream(cancel_requests=True)
    client.close()
    found = wait_for_cancellations(server, before + 1, 30)
    assert len(found) == before + 1, server.log_text()[-2000:]
    generated, limit = found[-1].group(2), found[-1].group(3)
    assert generated is not None and int(generated) < int(limit) == 400  # stopped early, not at max_tokens
    print(f"gRPC cancel of eagle_model: the engine stopped after {generated} of {limit} tokens")


def test_50_dropped_streams_do_not_stall_the_next_request(server):
    short = {"text_input": "Hello", "max_tokens": 8}
    baseline = min(timed(server, short) for _ in range(3))
    long_s = timed(server, LONG, stream=True)  # what one abandoned stream cost before: all of it
    before = len(cancellations(server))
    body = json.dumps(dict(LONG, stream=True)).encode()
    head = (b"POST /v2/models/eagle_model/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    for _ in range(50):  # each client sends its request and goes away
        with socket.create_connection(("127.0.0.1", server.ports["http"]), timeout=10) as sock:
            sock.sendall(head + body)
    next_s = timed(server, short)
    found = wait_for_cancellations(server, before + 50, 60)[before:]
    tokens = [int(m.group(2)) for m in found if m.group(2) is not None]
    print(f"50 dropped streams: the next request took {next_s:.2f} s (baseline "
          f"{baseline:.2f} s; one full 400-token stream {long_s:.2f} s, 50 of them {50 * long_s:.1f} s); "
          f"{len(found)} cancellations in the engine log, tokens generated for nobody: max {max(tokens, default=0)}, "
          f"total {sum(tokens)} (without cancellation: {50 * 400})")
    assert len(found) == 50, server.log_text()[-2000:]
    assert sum(tokens) < 50 * 400 / 10  # each abandoned stream stopped within a few verify steps
    assert next_s < 50 * long_s / 5, (next_s, long_s)  # was ~50 * long_s before: it waited for them all
    assert timed(server, short) < 3 * baseline + 0.25
