"""`eagle-trt serve` and the server wrapper's failure modes, with the real tritonserver on loopback."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from eagle_trt.cli import main
from eagle_trt.errors import EagleTrtError
from eagle_trt.metrics import AcceptanceCounts
from eagle_trt.serving import TritonServer, free_port

from builders import build_tiny_bundle

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def bundle(tiny_base, eagle1_draft, tmp_path_factory):
    out = build_tiny_bundle(tmp_path_factory, "serve_cli", tiny_base, eagle1_draft)
    return out


def test_serve_prints_endpoints_answers_and_stops_on_ctrl_c(bundle, tmp_path):
    ports = [free_port() for _ in range(3)]
    cmd = [str(Path(sys.executable).parent / "eagle-trt"), "serve", str(bundle), "--load", "eagle_model",
           "--http-port", str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2]),
           "--log-file", str(tmp_path / "triton.log"), "--json"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        ready = json.loads(line)
        wall = time.monotonic() - started
        assert ready["http"] == f"http://127.0.0.1:{ports[0]}" and ready["models"] == ["eagle_model"]
        assert 0 < ready["ready_s"] <= wall
        print(f"eagle-trt serve -> ready in {ready['ready_s']} s (wall {wall:.1f} s)")
        result = CliRunner().invoke(main, ["generate", "--url", ready["http"], "--model", "eagle_model", "--json",
                                           "Hello there"]) if _has_remote_generate() else None
        if result is not None:
            assert result.exit_code == 0, result.output
            assert json.loads(result.output.strip().splitlines()[-1])["text"]
            with urllib.request.urlopen(ready["metrics"], timeout=10) as response:  # the printed metrics endpoint
                scraped = AcceptanceCounts.from_metrics(response.read().decode(), "eagle_model")
            assert scraped.requests == 1 and scraped.draft_tokens > 0
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        assert "tritonserver stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:  # SIGTERM takes the same clean path (a SIGKILL would orphan tritonserver)
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", ports[0]), timeout=2).close()


def _has_remote_generate() -> bool:
    try:
        from eagle_trt.commands import generate
    except ImportError:
        return False
    return any(p.name == "url" for p in generate.generate_cmd.params)


def test_port_in_use_is_a_clear_error(bundle):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", str(bundle), "--http-port", str(port),
                                           "--grpc-port", str(free_port()), "--metrics-port", str(free_port())])
    assert result.exit_code == 1
    assert f"http port {port} on 127.0.0.1 is already in use" in result.output


def test_missing_server_is_a_clear_error(bundle, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "pytriton", None)  # `import pytriton` raises ImportError
    result = CliRunner().invoke(main, ["serve", str(bundle)])
    assert result.exit_code == 1 and "no tritonserver found" in result.output


def test_unknown_model_is_a_clear_error(bundle):
    result = CliRunner().invoke(main, ["serve", str(bundle), "--load", "no_such_model"])
    assert result.exit_code == 1 and "no_such_model" in result.output and "eagle_model" in result.output


def test_a_model_that_fails_to_load_shows_tritons_reason(bundle, tmp_path):
    """The preprocessing model reads its tokenizer from the base the bundle's spec names: a spec naming a base that
    is gone fails the model's load, and Triton's reason reaches the user."""
    from eagle_trt.model_repository.configs import parse

    repo = tmp_path / "repo"
    shutil.copytree(bundle / "model_repository" / "preprocessing", repo / "preprocessing")
    config = repo / "preprocessing" / "config.pbtxt"
    spec_path = parse(config.read_text()).parameters["bundle_spec"].string_value
    spec = json.loads(Path(spec_path).read_text())
    spec["base"]["path"] = str(tmp_path / "missing_tokenizer")
    moved = tmp_path / "eagle_trt_spec.json"
    moved.write_text(json.dumps(spec))
    config.write_text(config.read_text().replace(spec_path, str(moved)))
    server = TritonServer(repo, models=["preprocessing"], log_file=tmp_path / "triton.log")
    with pytest.raises(EagleTrtError) as info:
        server.start(timeout=120)
    message = str(info.value)
    assert "preprocessing" in message and "missing_tokenizer" in message, message
    assert server.process.poll() is not None  # nothing left running


def test_a_bundle_for_another_backend_is_refused_with_a_hint(tmp_path):
    from builders import fixed_build_spec
    from eagle_trt.engines import write_model_repository

    spec = fixed_build_spec("trtllm", backend_version="0.19", base_path=tmp_path, draft_path=tmp_path)
    write_model_repository(spec, tmp_path / "repo", bundle_dir=tmp_path)
    with pytest.raises(EagleTrtError, match=r"backend\(s\) \['tensorrtllm'\]"):
        TritonServer(tmp_path / "repo", models=["eagle_model"]).start()
