"""SmolLM2-135M-Instruct + our shipped EAGLE draft on the real tritonserver: eagle_model and base_model give the
same greedy text on MT-bench prompts, with drafts accepted. Slow (real model on CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from eagle_trt.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.server]

PROMPTS = [
    "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences and "
    "must-see attractions.",
    "Describe five key principles in evaluating an argument in analytical writing.",
    "Develop a Python program that reads all the text files under a directory and returns top-5 words with the "
    "most number of occurrences.",
]


def _demo_dir(*extra: str) -> Path:
    result = CliRunner().invoke(main, ["demo-model", *extra])
    if result.exit_code != 0:
        pytest.skip(f"eagle-trt demo-model {' '.join(extra)} is not available: {result.output[-300:]}")
    return Path(result.output.strip().splitlines()[-1])


def _serve(tmp_path_factory, name: str, *options: str):
    """Build a SmolLM2 bundle (our draft, pytorch engine) with `options` and serve eagle_model and base_model."""
    from eagle_trt.serving import TritonServer

    base, draft = _demo_dir(), _demo_dir("--draft")
    out = tmp_path_factory.mktemp(name) / "bundle"
    result = CliRunner().invoke(main, ["build", "--base", str(base), "--draft", str(draft), "-o", str(out),
                                       "--engine", "pytorch", "--max-seq-len", "1024", "--max-input-len", "512",
                                       *options])
    assert result.exit_code == 0, result.output
    log = out.parent / "tritonserver.log"
    with TritonServer(out / "model_repository", models=["eagle_model", "base_model"], log_file=log) as server:
        yield server, log


@pytest.fixture(scope="module")
def smollm2_server(tmp_path_factory):
    for server, _ in _serve(tmp_path_factory, "smollm2", "--tree", "chain:2"):
        yield server


def test_smollm2_eagle_and_base_agree_token_for_token(smollm2_server):
    from eagle_trt.client import generate

    accepted = 0
    for prompt in PROMPTS:
        eagle = generate(smollm2_server.http_url, "eagle_model", prompt, max_tokens=48, stream=True)
        base = generate(smollm2_server.http_url, "base_model", prompt, max_tokens=48)
        assert eagle.text == base.text, prompt
        assert eagle.text.strip()
        accepted += eagle.total_accepted_draft_tokens or 0
    assert accepted > 0  # the draft is actually used


def test_smollm2_openai_chat_applies_the_chat_template(smollm2_server):
    """The OpenAI route on SmolLM2: chat goes through the base's chat template (prompt tokens counted as
    preprocessing encodes them) and greedy text equals /v2/models/eagle_model/generate for the same prompt."""
    openai = pytest.importorskip("openai")
    from eagle_trt.client import generate
    from eagle_trt.chat import encode_chat
    from eagle_trt.serving import free_port
    from eagle_trt.serving.openai_api import OpenAIRoute

    route = OpenAIRoute.from_bundle(smollm2_server.repo.parent, triton_url=smollm2_server.http_url,
                                    models=list(smollm2_server.models)).start(port=free_port())
    try:
        client = openai.OpenAI(base_url=route.url + "/v1", api_key="unused", max_retries=0, timeout=300)
        messages = [{"role": "user", "content": PROMPTS[1]}]
        reply = client.chat.completions.create(model="eagle_model", messages=messages, max_tokens=24, temperature=0)
        direct = generate(smollm2_server.http_url, "eagle_model", PROMPTS[1], max_tokens=24, temperature=0.0)
        assert reply.choices[0].message.content == direct.text and direct.text.strip()
        ids = encode_chat(route.limits.tokenizer, messages)
        assert reply.usage.prompt_tokens == len(ids) and ids.count(1) == 3  # system (template default), user, reply
    finally:
        route.stop()


@pytest.fixture(scope="module")
def smollm2_int8_server(tmp_path_factory):
    yield from _serve(tmp_path_factory, "smollm2-int8", "--dtype", "int8", "--tree", "chain:3",
                      "--load-policy", "chain:3;chain:2;none")


def test_smollm2_concurrent_requests_are_batched_and_identical(smollm2_int8_server):
    """Three requests at once on each model run batched (one packed forward per round, trees by the load policy);
    every text equals the same model's answer to the prompt alone, and eagle_model's equal base_model's (int8:
    batch-invariant, so bit-exact)."""
    from concurrent.futures import ThreadPoolExecutor

    from eagle_trt.client import generate

    server, log = smollm2_int8_server
    alone = {p: generate(server.http_url, "base_model", p, max_tokens=40).text for p in PROMPTS}
    for model in ("eagle_model", "base_model"):
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            together = list(pool.map(lambda p: generate(server.http_url, model, p, max_tokens=40, stream=True).text,
                                     PROMPTS))
        assert together == [alone[p] for p in PROMPTS], model
    text = log.read_text(errors="replace")
    assert "request started with 3 running, tree none" in text  # eagle_model's third: the load policy's plain entry
    assert "request started with 2 running, tree chain:2" in text
