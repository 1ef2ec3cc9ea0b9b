"""The OpenAI-compatible route (`eagle-trt serve --openai-port`) with the real `openai` client against the real
tritonserver: models list, chat and completions with and without streaming, usage, greedy output equal to
/v2/models/eagle_model/generate, OpenAI's 400 and 404 errors, and the CLI option."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from eagle_trt.client import generate
from eagle_trt.chat import encode_chat

pytestmark = pytest.mark.server
openai = pytest.importorskip("openai")

PROMPT = "Write a haiku about the sea."


def body(exc) -> dict:
    """OpenAI's error object from a client exception (the client may or may not unwrap {"error": ...})."""
    return exc.body.get("error", exc.body)


@pytest.fixture(scope="module")
def client(openai_stack):
    _, route = openai_stack
    return openai.OpenAI(base_url=route.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_models_list(client, openai_stack):
    assert [m.id for m in client.models.list().data] == ["eagle_model"]
    assert client.models.retrieve("eagle_model").owned_by == "eagle-trt"


def test_chat_non_streaming_and_streaming_agree_with_usage(client, openai_stack):
    _, route = openai_stack
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}]
    reply = client.chat.completions.create(model="eagle_model", messages=messages, max_tokens=12, temperature=0)
    text = reply.choices[0].message.content
    assert reply.object == "chat.completion" and reply.choices[0].message.role == "assistant" and text
    prompt_ids = encode_chat(route.limits.tokenizer, messages)
    assert reply.usage.prompt_tokens == len(prompt_ids)
    assert 1 <= reply.usage.completion_tokens <= 12
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.choices[0].finish_reason == ("length" if reply.usage.completion_tokens == 12 else "stop")

    chunks = list(client.chat.completions.create(model="eagle_model", messages=messages, max_tokens=12,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len([d for d in deltas if d]) > 1  # streamed in pieces, not one buffered answer
    assert "".join(deltas) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == reply.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == reply.usage.model_dump()


def test_a_next_turn_reports_the_prompt_tokens_its_cache_held(client, tiny_base):
    """usage.prompt_tokens_details.cached_tokens: none on a first turn; on the next turn, unary or streamed, the
    conversation so far, which the engine did not prefill again (runtime.prefix; where the bundle's fp32 engine is
    batch-invariant on this CPU, else none)."""
    from eagle_trt.runtime import EagleDecoder

    invariant = EagleDecoder.load(tiny_base, None, tree="chain:1", dtype="float32", max_seq_len=64).base.batch_invariant
    for question, stream in (("Name three colours.", False), ("Name three rivers.", True)):
        turns = [{"role": "user", "content": question}]
        first = client.chat.completions.create(model="eagle_model", messages=turns, max_tokens=8, temperature=0)
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        turns += [{"role": "assistant", "content": first.choices[0].message.content},
                  {"role": "user", "content": "Three more, please."}]
        if stream:
            chunks = list(client.chat.completions.create(model="eagle_model", messages=turns, max_tokens=8,
                                                         temperature=0, stream=True,
                                                         stream_options={"include_usage": True}))
            usage = chunks[-1].usage
        else:
            usage = client.chat.completions.create(model="eagle_model", messages=turns, max_tokens=8,
                                                   temperature=0).usage
        cached = usage.prompt_tokens_details.cached_tokens
        assert (first.usage.prompt_tokens <= cached < usage.prompt_tokens) if invariant else cached == 0, (
            stream, cached, usage, invariant)


def test_completions_non_streaming_and_streaming(client):
    reply = client.completions.create(model="eagle_model", prompt=PROMPT, max_tokens=10, temperature=0)
    assert reply.object == "text_completion" and reply.choices[0].text
    assert reply.usage.completion_tokens == 10 and reply.choices[0].finish_reason == "length"
    streamed = list(client.completions.create(model="eagle_model", prompt=PROMPT, max_tokens=10, temperature=0,
                                              stream=True))
    assert "".join(c.choices[0].text for c in streamed) == reply.choices[0].text
    assert streamed[-1].choices[0].finish_reason == "length"


def test_greedy_output_equals_the_generate_endpoint(client, openai_stack):
    server, _ = openai_stack
    chat = client.chat.completions.create(model="eagle_model", messages=[{"role": "user", "content": PROMPT}],
                                          max_tokens=16, temperature=0)
    direct = generate(server.http_url, "eagle_model", PROMPT, max_tokens=16, temperature=0.0)
    assert chat.choices[0].message.content == direct.text
    completion = client.completions.create(model="eagle_model", prompt=PROMPT, max_tokens=16, temperature=0)
    raw = generate(server.http_url, "eagle_model", PROMPT, max_tokens=16, temperature=0.0, chat=False)
    assert completion.choices[0].text == raw.text


@pytest.mark.parametrize("kwargs, param, words", [
    ({"max_tokens": 0}, "max_tokens", "'max_tokens' must be between 1 and"),
    ({"max_tokens": 2**32 + 4}, "max_tokens", "got 4294967300"),
    ({"temperature": 3}, "temperature", "'temperature' must be between 0 and 2"),
    ({"top_p": 0}, "top_p", "'top_p' must be in (0, 1]"),
    ({"n": 2}, "n", "is not supported"),
    ({"extra_body": {"frequency_penalty": 0.5}}, "frequency_penalty", "is not supported"),
    ({"extra_body": {"max_new_tokens": 5}}, "max_new_tokens", "Unrecognized request argument"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role", "must be one of"),
    ({"messages": [{"role": "user", "content": "x" * 10_000}]}, "messages", "bytes; a prompt of at most 256"),
])
def test_bad_requests_are_400_naming_the_parameter(client, kwargs, param, words):
    request = {"model": "eagle_model", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4} | kwargs
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**request)
    error = body(info.value)
    assert info.value.status_code == 400 and error["param"] == param and words in error["message"], error
    assert error["type"] == "invalid_request_error"


def test_unknown_model_is_404_in_openai_format(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="gpt-4o", prompt="Hi", max_tokens=4)
    error = body(info.value)
    assert info.value.status_code == 404 and error["code"] == "model_not_found" and error["param"] == "model"
    assert "eagle_model" in error["message"]


def test_serve_cli_starts_the_openai_route(openai_stack, tmp_path):
    """`eagle-trt serve OUT --openai-port N`: the endpoint is announced and answers; Ctrl-C stops both."""
    from eagle_trt.serving import free_port

    server, _ = openai_stack
    bundle = server.repo.parent
    ports = [free_port() for _ in range(4)]
    cmd = [str(Path(sys.executable).parent / "eagle-trt"), "serve", str(bundle), "--load", "eagle_model",
           "--http-port", str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2]),
           "--openai-port", str(ports[3]), "--log-file", str(tmp_path / "triton.log"), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline() or proc.stderr.read())
        assert ready["openai"] == f"http://127.0.0.1:{ports[3]}/v1"
        with urllib.request.urlopen(ready["openai"] + "/models", timeout=30) as response:
            assert [m["id"] for m in json.loads(response.read())["data"]] == ["eagle_model"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)
    time.sleep(0.5)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{ports[3]}/v1/models", timeout=2)


def test_concurrent_requests_all_answer_the_same_greedy_text(client):
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> str:
        messages = [{"role": "user", "content": PROMPT}]
        if i % 2:
            stream = client.chat.completions.create(model="eagle_model", messages=messages, max_tokens=8,
                                                    temperature=0, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        reply = client.chat.completions.create(model="eagle_model", messages=messages, max_tokens=8, temperature=0)
        return reply.choices[0].message.content

    with ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(one, range(16)))
    assert len(set(texts)) == 1 and texts[0]
