"""Client for eagle_model / base_model on a Triton server: HTTP generate / generate_stream and gRPC streaming.

Requests use the tensorrtllm ensemble's names (text_input, max_tokens, stream, temperature, top_k, top_p, seed,
stop_words, chat_template, return_perf_metrics); the reply gathers the text chunks as they arrive and the
acceptance figures of the last response (acceptance_rate, total_accepted_draft_tokens, total_draft_tokens).

    reply = generate("http://127.0.0.1:8000", "eagle_model", "Hello", max_tokens=64, stream=True,
                     on_chunk=lambda text: print(text, end=""))

TensorRT-LLM's LLM-API model (the llmapi engine kind) differs in two ways the client absorbs: called directly it
takes sampling_param_* names (`llmapi_body` translates), and when streaming each text_output is the text so far,
not the new piece (`cumulative=True`); its acceptance figures may arrive as strings.
"""

from __future__ import annotations

import http.client
import json
import queue
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from eagle_trt.errors import EagleTrtError, missing_extra

ACCEPTANCE_FIELDS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")


@dataclass
class GenerationReply:
    text: str
    chunks: list[str] = field(default_factory=list)
    acceptance_rate: float | None = None
    total_accepted_draft_tokens: int | None = None
    total_draft_tokens: int | None = None
    first_chunk_s: float | None = None  # seconds from sending to the first non-empty chunk
    total_s: float = 0.0

    def to_dict(self) -> dict:
        return {"text": self.text, "chunks": len(self.chunks), "acceptance_rate": self.acceptance_rate,
                "total_accepted_draft_tokens": self.total_accepted_draft_tokens,
                "total_draft_tokens": self.total_draft_tokens, "first_chunk_s": self.first_chunk_s,
                "total_s": self.total_s}


def request_body(prompt: str, *, max_tokens: int, stream: bool, chat: bool | None = None,
                 temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, stop_words: list[str] | None = None, **extra) -> dict:
    body = {"text_input": prompt, "max_tokens": max_tokens, "stream": stream, "return_perf_metrics": True}
    for key, value in (("chat_template", chat), ("temperature", temperature), ("top_k", top_k), ("top_p", top_p),
                       ("seed", seed), ("stop_words", stop_words)):
        if value is not None:
            body[key] = value
    body.update(extra)
    return body


def llmapi_body(body: dict) -> dict:
    """A tensorrtllm-named request body in the LLM-API model's names (text_input, streaming, sampling_param_*)."""
    from eagle_trt.engines.llmapi import LLMAPI_FROM_ENSEMBLE

    names = {ours: theirs for theirs, ours in LLMAPI_FROM_ENSEMBLE.items()}
    unknown = sorted(set(body) - set(names))
    if unknown:
        raise EagleTrtError(f"the LLM-API model takes no {unknown}", f"use only {sorted(names)}")
    return {names[key]: value for key, value in body.items()}


def generate(url: str, model: str, prompt: str, *, max_tokens: int = 128, stream: bool = False,
             protocol: str = "http", on_chunk: Callable[[str], None] | None = None, timeout: float = 600.0,
             cumulative: bool = False, **options) -> GenerationReply:
    """One request; `protocol` "http" (generate / generate_stream) or "grpc" (bidirectional streaming);
    `cumulative`: each streamed text_output repeats the text so far (the LLM-API model)."""
    body = request_body(prompt, max_tokens=max_tokens, stream=stream, **options)
    if protocol == "grpc":
        return _grpc_generate(url, model, body, on_chunk, timeout, cumulative)
    return _http_generate(url, model, body, on_chunk, timeout, cumulative)


def print_remote_generation(url: str, model: str, prompt: str, *, max_tokens: int = 128, stream: bool = False,
                            chat: bool | None = None, as_json: bool = False, protocol: str = "http",
                            **options) -> GenerationReply:
    """The remote branch of `eagle-trt generate --url`: text to stdout as it arrives, figures to stderr at the end
    (or one JSON object on stdout with --json)."""
    import click

    on_chunk = None if as_json else (lambda text: click.echo(text, nl=False))
    reply = generate(url, model, prompt, max_tokens=max_tokens, stream=stream, chat=chat, protocol=protocol,
                     on_chunk=on_chunk, **options)
    if as_json:
        click.echo(json.dumps(dict(reply.to_dict(), model=model, url=url)))
        return reply
    click.echo()
    if reply.total_draft_tokens:
        click.echo(f"[{model}] acceptance rate {reply.acceptance_rate:.3f} "
                   f"({reply.total_accepted_draft_tokens}/{reply.total_draft_tokens} draft tokens accepted), "
                   f"{len(reply.chunks)} chunks in {reply.total_s:.2f} s", err=True)
    else:
        click.echo(f"[{model}] {len(reply.chunks)} chunks in {reply.total_s:.2f} s (no draft tokens)", err=True)
    return reply


# ---- HTTP (the generate extension) ----------------------------------------------------------------------------
def _connection(url: str, timeout: float) -> http.client.HTTPConnection:
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EagleTrtError(f"bad server URL {url!r}", "pass e.g. http://127.0.0.1:8000")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port or (443 if parts.scheme == "https" else 8000), timeout=timeout)


def _http_generate(url, model, body, on_chunk, timeout, cumulative=False) -> GenerationReply:
    stream = body.get("stream", body.get("streaming", False))
    path = f"/v2/models/{model}/generate_stream" if stream else f"/v2/models/{model}/generate"
    conn = _connection(url, timeout)
    started = time.perf_counter()
    reply = GenerationReply(text="")
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise _server_error(url, model, response.status, response.read())
        if stream:
            for event in _sse_events(response):
                _add(reply, event, on_chunk, started, cumulative)
        else:
            _add(reply, json.loads(response.read()), on_chunk, started, cumulative)
    except OSError as exc:
        raise EagleTrtError(f"cannot reach the Triton server at {url}: {exc}",
                            "start it with `eagle-trt serve OUT` and check --url") from None
    finally:
        conn.close()
    reply.total_s = time.perf_counter() - started
    return reply


def _sse_events(response):
    """`data: {json}` lines of a text/event-stream body (Triton sends no [DONE] sentinel)."""
    while True:
        line = response.readline()
        if not line:
            return
        line = line.strip()
        if line.startswith(b"data:"):
            yield json.loads(line[5:].strip())


def _server_error(url, model, status, raw: bytes) -> EagleTrtError:
    try:
        message = json.loads(raw).get("error", raw.decode(errors="replace"))
    except (ValueError, AttributeError):
        message = raw.decode(errors="replace")
    hint = "check the request fields" if status == 400 else f"is '{model}' loaded? see the server log"
    return EagleTrtError(f"the server at {url} answered {status}: {message}", hint)


def new_text(so_far: str, text: str, cumulative: bool) -> str:
    """The new piece of a streamed text_output: all of it, or (cumulative) what follows the text so far."""
    if cumulative and text.startswith(so_far):
        return text[len(so_far):]
    return text


def _number(value):
    """Acceptance figures as numbers (the LLM-API model sends them in text_output's string type)."""
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        value = float(value) if any(c in value for c in ".eE") else int(value)
    return value


def _add(reply: GenerationReply, event: dict, on_chunk, started: float, cumulative: bool = False) -> None:
    if "error" in event:
        raise EagleTrtError(f"the server reported an error: {event['error']}", "see the server log")
    text = event.get("text_output", "")
    if isinstance(text, list):
        text = "".join(text)
    text = new_text(reply.text, text, cumulative)
    reply.chunks.append(text)
    reply.text += text
    if text and reply.first_chunk_s is None:
        reply.first_chunk_s = time.perf_counter() - started
    for name in ACCEPTANCE_FIELDS:
        value = _number(event.get(name))
        if value is not None:
            setattr(reply, name, value)
    if text and on_chunk is not None:
        on_chunk(text)


# ---- gRPC (tritonclient streaming) ------------------------------------------------------------------------------
_NUMPY_TYPES = {"text_input": ("BYTES", object), "max_tokens": ("INT64", "int64"), "stream": ("BOOL", bool),
                "return_perf_metrics": ("BOOL", bool), "chat_template": ("BOOL", bool),
                "temperature": ("FP32", "float32"), "top_p": ("FP32", "float32"), "top_k": ("INT32", "int32"),
                "seed": ("UINT64", "uint64"), "stop_words": ("BYTES", object), "end_id": ("INT64", "int64"),
                "pad_id": ("INT64", "int64"), "exclude_input_in_output": ("BOOL", bool),
                "messages": ("BYTES", object),
                # the LLM-API model's own names (llmapi_body)
                "streaming": ("BOOL", bool), "sampling_param_max_tokens": ("INT32", "int32"),
                "sampling_param_temperature": ("FP32", "float32"), "sampling_param_top_k": ("INT32", "int32"),
                "sampling_param_top_p": ("FP32", "float32"), "sampling_param_seed": ("UINT64", "uint64"),
                "sampling_param_stop": ("BYTES", object), "sampling_param_return_perf_metrics": ("BOOL", bool),
                "sampling_param_exclude_input_from_output": ("BOOL", bool)}


_NUMPY_OF = {"INT32": "int32", "INT64": "int64", "UINT64": "uint64", "FP32": "float32", "BOOL": bool,
             "BYTES": object}


def _declared_types(grpcclient, server_error, target: str, model: str) -> dict[str, str]:
    """Input name -> datatype as the served model declares it (empty when the server does not say)."""
    client = grpcclient.InferenceServerClient(target)
    try:
        metadata = client.get_model_metadata(model, as_json=True)
    except server_error as exc:
        raise EagleTrtError(f"cannot use the gRPC endpoint {target} for {model!r}: {exc}",
                            "start it with `eagle-trt serve` and check --url and --model") from None
    finally:
        client.close()
    return {i["name"]: i["datatype"] for i in metadata.get("inputs", [])}


def _grpc_generate(url, model, body, on_chunk, timeout, cumulative=False) -> GenerationReply:
    try:
        import numpy as np
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException
    except ImportError:
        raise missing_extra("tritonclient", "serving") from None
    target = urlsplit(url).netloc if "://" in url else url
    declared = _declared_types(grpcclient, InferenceServerException, target, model)
    inputs = []
    for name, value in body.items():
        if name not in _NUMPY_TYPES:
            raise EagleTrtError(f"unknown request field {name!r}", f"use one of {sorted(_NUMPY_TYPES)}")
        triton_type, np_type = _NUMPY_TYPES[name]
        if declared.get(name, triton_type) != triton_type:  # e.g. max_tokens: INT64 (ours), INT32 (llmapi bundles)
            triton_type = declared[name]
            np_type = _NUMPY_OF.get(triton_type, np_type)
        values = value if isinstance(value, list) else [value]
        if np_type is object:
            values = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
        array = np.array([values], dtype=np_type)  # [1, n]: the batch dimension of the ensemble
        tensor = grpcclient.InferInput(name, list(array.shape), triton_type)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(target)
    reply = GenerationReply(text="")
    started = time.perf_counter()
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer(model, inputs, enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=timeout)
            if error is not None:
                raise EagleTrtError(f"the server at {url} reported: {error}", "check the request and the server log")
            response = result.get_response()
            event = {}
            for output in response.outputs:
                array = result.as_numpy(output.name)
                if array is not None and array.size:
                    value = array.reshape(-1)[0]
                    event[output.name] = value.decode("utf-8") if isinstance(value, bytes) else value.item()
            if event:
                _add(reply, event, on_chunk, started, cumulative)
            final = response.parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                break
    except InferenceServerException as exc:
        raise EagleTrtError(f"cannot use the gRPC endpoint {target}: {exc}", "start it with `eagle-trt serve`") from None
    except queue.Empty:
        raise EagleTrtError(f"no response from {target} within {timeout:.0f} s", "see the server log") from None
    finally:
        client.stop_stream()
        client.close()
    reply.total_s = time.perf_counter() - started
    return reply
