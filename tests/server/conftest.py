"""The tests that start a real tritonserver on loopback (and the OpenAI route, AIPerf, the supervisor in front of
it). Every test in this folder carries the `server` mark (`-m "not server"` leaves them out); the bundle and the
server they share are built here once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

SERVER_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SERVER_TESTS in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.server)


@pytest.fixture(scope="session")
def openai_stack(tiny_base, eagle1_draft, tmp_path_factory):
    """A pytorch bundle of the tiny base + EAGLE-1 draft on the real tritonserver (eagle_model loaded) with the
    OpenAI route in front: (server, route). Shared by the server-answer and OpenAI tests (one server start).
    `--backoff batches`: a request alone keeps drafting (the random draft would back off to plain steps), so the
    metrics tests see drafted tokens in every request."""
    from click.testing import CliRunner

    from eagle_trt.cli import main
    from eagle_trt.serving import TritonServer, free_port
    from eagle_trt.serving.openai_api import OpenAIRoute

    out = tmp_path_factory.mktemp("openai_stack") / "bundle"
    result = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o",
                                       str(out), "--engine", "pytorch", "--max-seq-len", "512",
                                       "--max-input-len", "256", "--tree", "chain:3", "--backoff", "batches"])
    assert result.exit_code == 0, result.output
    with TritonServer(out / "model_repository", models=["eagle_model"],
                      log_file=out.parent / "tritonserver.log") as server:
        route = OpenAIRoute.from_bundle(out, triton_url=server.http_url, models=list(server.models))
        route.start(port=free_port())
        try:
            yield server, route
        finally:
            route.stop()
