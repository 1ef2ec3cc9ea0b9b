#!/usr/bin/env python3
"""Issue 18 fault runs against a real `eagle-trt serve` (not in CI): server crash, engine kill (idle and with
requests in flight), 50 dropped streams, Ctrl-C with a keep-alive client then a restart on the same ports.
Prints one table row per run with the measured recovery times.

    PYTHONPATH=$PWD/src .venv/bin/python scripts/fault_runs.py BUNDLE [--model eagle_model]

BUNDLE: any bundle of `eagle-trt build --engine pytorch` (the tiny test bundle, or SmolLM2's from `make demo`).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from eagle_trt.serving import free_port
from eagle_trt.serving.supervisor import children

DEEP_JSON = b'{"text_input": ' + b"[" * 150_000 + b"]" * 150_000 + b"}"
LONG = {"text_input": "Tell me a long story.", "max_tokens": 400, "end_id": 1}


def request(port, model, body, path="generate", timeout=300):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", f"/v2/models/{model}/{path}", body if isinstance(body, bytes) else json.dumps(body))
    response = conn.getresponse()
    return response.status, response.read()


def ready(port, model) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", f"/v2/models/{model}/ready")
        return conn.getresponse().status == 200
    except OSError:
        return False


def until(predicate, timeout=600.0, step=0.05) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError
        time.sleep(step)
    return time.monotonic() - started


def ok(port, model) -> bool:
    try:
        return request(port, model, {"text_input": "Hello", "max_tokens": 8})[0] == 200
    except OSError:
        return False


def engine_stub(serve_pid: int, engine: str) -> int:
    for server_pid, _ in children(serve_pid):
        for pid, argv in children(server_pid):
            if len(argv) > 1 and f"/{engine}/1/model.py" in argv[1] and any(a.startswith(engine + "_") for a in argv):
                return pid
    raise RuntimeError(f"no stub process for {engine}")


def start(bundle: Path, model: str, ports: list[int], log: Path) -> subprocess.Popen:
    cmd = [str(Path(sys.executable).parent / "eagle-trt"), "serve", str(bundle), "--load", model, "--json",
           "--http-port", str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2])]
    print("$", " ".join(cmd), file=sys.stderr)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(log, "a"), text=True)
    assert proc.stdout.readline(), f"serve failed; see {log}"
    return proc


def in_flight(port, model, n=6):
    results = []

    def one():
        started = time.monotonic()
        try:
            status, data = request(port, model, dict(LONG, stream=True), "generate_stream", timeout=600)
            outcome = "error" if status != 200 or b'"error"' in data else "ok"
        except (OSError, http.client.HTTPException):
            outcome = "connection closed"
        results.append((outcome, time.monotonic() - started))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    return threads, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--model", default="eagle_model")
    args = parser.parse_args()
    model, engine = args.model, {"eagle_model": "eagle_engine", "base_model": "base_engine"}[args.model]
    ports, log = [free_port() for _ in range(3)], args.bundle / "fault_runs.serve.log"
    rows = []
    proc = start(args.bundle, model, ports, log)
    port = ports[0]
    try:
        # 1. server crash: the deep-nesting body
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /v2/models/%s/generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                         % (model.encode(), len(DEEP_JSON)) + DEEP_JSON)
            t0 = time.monotonic()
            sock.settimeout(30)
            reply = sock.recv(100)
        down = until(lambda: not ready(port, model), 30)
        until(lambda: ok(port, model))  # back up before the next fault
        rows.append(("server crash (150k-deep JSON)", f"reply {reply!r}, readiness false after {down:.1f} s",
                     f"{time.monotonic() - t0:.1f} s to the first 200"))
        # 2a. engine kill, nothing in flight
        os.kill(engine_stub(proc.pid, engine), signal.SIGKILL)
        t0 = time.monotonic()
        down = until(lambda: not ready(port, model), 30)
        until(lambda: ready(port, model) and ok(port, model))
        rows.append((f"kill -9 {engine} stub, idle", f"readiness false after {down:.1f} s",
                     f"{time.monotonic() - t0:.1f} s to the first 200"))
        # 2b. engine kill with 6 long streams in flight
        threads, results = in_flight(port, model)
        time.sleep(1.0)
        os.kill(engine_stub(proc.pid, engine), signal.SIGKILL)
        t0 = time.monotonic()
        down = until(lambda: not ready(port, model), 30)
        until(lambda: ready(port, model) and ok(port, model))
        recovered = time.monotonic() - t0
        for t in threads:
            t.join()
        outcomes = ", ".join(f"{o} {s:.1f} s" for o, s in sorted(results))
        rows.append((f"kill -9 {engine} stub, 6 streams in flight", f"readiness false after {down:.1f} s; "
                     f"clients: {outcomes}", f"{recovered:.1f} s to the first 200"))
        # 3. 50 dropped streams
        body = json.dumps(dict(LONG, stream=True)).encode()
        t_full = time.monotonic()
        request(port, model, dict(LONG, stream=True), "generate_stream")
        full = time.monotonic() - t_full
        for _ in range(50):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(b"POST /v2/models/%s/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                             % (model.encode(), len(body)) + body)
        t0 = time.monotonic()
        assert ok(port, model)
        rows.append(("50 dropped streams (400 tokens each)", f"one full stream {full:.2f} s (x50 = {50 * full:.0f} s)",
                     f"next request {time.monotonic() - t0:.2f} s"))
        # 5. Ctrl-C with a keep-alive client, restart on the same ports
        keep = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        keep.request("POST", f"/v2/models/{model}/generate", json.dumps({"text_input": "Hi", "max_tokens": 4}))
        keep.getresponse().read()
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
        t0 = time.monotonic()
        proc = start(args.bundle, model, ports, log)
        rows.append(("Ctrl-C with a keep-alive client, serve again on the same ports", "started",
                     f"{time.monotonic() - t0:.1f} s to ready"))
        keep.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(120)
    print("| fault | what happened | recovery |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"(serve's log lines: {log})")


if __name__ == "__main__":
    main()
