"""TritonServer.wait_ready: ready means the health and model endpoints answer *and* the metrics port does (Triton
starts its metrics service after the HTTP one; a scrape right after readiness was once refused in CI). Stand-in
endpoints on loopback, the metrics one started late; no tritonserver needed."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from eagle_trt.errors import EagleTrtError
from eagle_trt.serving.tritonserver import TritonServer


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def _serve() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _server(tmp_path, http_port: int, metrics_port: int) -> TritonServer:
    (tmp_path / "eagle_model").mkdir()
    (tmp_path / "eagle_model" / "config.pbtxt").write_text('name: "eagle_model"\n')
    server = TritonServer(tmp_path, models=["eagle_model"], http_port=http_port, metrics_port=metrics_port)
    server.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    return server


def test_ready_waits_for_the_metrics_port(tmp_path):
    http = _serve()
    probe = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)  # reserve a port for the late metrics service
    metrics_port = probe.server_address[1]
    probe.server_close()
    server = _server(tmp_path, http.server_address[1], metrics_port)
    late = []

    def start_metrics():
        time.sleep(0.6)
        late.append(ThreadingHTTPServer(("127.0.0.1", metrics_port), _Ok))
        threading.Thread(target=late[0].serve_forever, daemon=True).start()

    threading.Thread(target=start_metrics, daemon=True).start()
    started = time.monotonic()
    try:
        server.wait_ready(10)
        assert time.monotonic() - started >= 0.5  # not before the metrics port answered
        assert TritonServer._url_ok(server.metrics_url)
    finally:
        server.process.kill()
        http.shutdown()
        for s in late:
            s.shutdown()


def test_ready_times_out_without_a_metrics_port(tmp_path):
    http = _serve()
    probe = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    dead_port = probe.server_address[1]
    probe.server_close()
    server = _server(tmp_path, http.server_address[1], dead_port)
    try:
        with pytest.raises(EagleTrtError, match="was not ready after 1 s"):
            server.wait_ready(1)
    finally:
        server.process.kill()
        http.shutdown()
