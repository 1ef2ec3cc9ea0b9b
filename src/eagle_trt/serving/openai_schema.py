"""OpenAI request validation and response shapes for the OpenAI-compatible route (openai_api.py).

`plan_request` turns a /v1/chat/completions or /v1/completions body into a `Plan`: the Triton ensemble request
(eagle_model's names: messages or text_input, max_tokens, stream, ...) plus what the answer needs (the model, the
prompt's token count, the max_tokens granted). Every range check is eagle_trt.request_rules' (the same the
preprocessing model applies), so a bad value is refused here with OpenAI's error JSON naming OpenAI's parameter,
before anything is forwarded. Parameters this server cannot honour (n > 1, logprobs, tools, penalties, ...) are
refused by name rather than silently ignored; unknown ones are refused as OpenAI does.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from eagle_trt import chat
from eagle_trt import request_rules as rules
from eagle_trt.errors import EagleTrtError

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat defaults to the room left
ACCEPTED_IGNORED = {"user", "metadata", "store", "service_tier", "parallel_tool_calls"}
# parameter -> its only value we can honour (a value equal to it, or null, is accepted)
UNSUPPORTED = {"n": 1, "best_of": 1, "logprobs": None, "top_logprobs": None, "echo": False, "suffix": None,
               "tools": None, "tool_choice": None, "functions": None, "function_call": None, "logit_bias": None,
               "presence_penalty": 0, "frequency_penalty": 0, "response_format": None, "audio": None,
               "modalities": None, "prediction": None, "reasoning_effort": None, "web_search_options": None}
COMMON = {"model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop"}
KNOWN = {"chat": COMMON | {"messages", "max_completion_tokens"}, "completion": COMMON | {"prompt"}}


@dataclass
class Limits:
    """What the bundle allows, from its spec and tokenizer (loaded once by the route)."""

    tokenizer: object
    max_input_len: int
    max_seq_len: int
    vocab_size: int
    byte_cap: int
    specials: list = field(default_factory=list)
    add_special_tokens: bool = True
    has_chat_template: bool = True


@dataclass
class Plan:
    kind: str  # "chat" | "completion"
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int
    prompt_tokens: int
    triton_body: dict
    id: str = ""
    created: int = 0

    def __post_init__(self):
        self.id = ("chatcmpl-" if self.kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())


def openai_error(message: str, *, param: str | None = None, kind: str = "invalid_request_error",
                 code: str | None = None) -> dict:
    """OpenAI's error body."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_from(exc: EagleTrtError) -> dict:
    message = f"{exc.message}; {exc.hint}" if exc.hint else exc.message
    return openai_error(message, param=getattr(exc, "param", None))


def plan_request(kind: str, body, limits: Limits, models: list[str]) -> Plan:
    """Validate an OpenAI request body; raises EagleTrtError (with .param) or ModelNotFound."""
    if not isinstance(body, dict):
        raise rules.bad_request(None, f"the request body must be a JSON object, got {type(body).__name__}",
                                "send {\"model\": ..., " + ('"messages"' if kind == "chat" else '"prompt"') + ": ...}")
    _check_known(kind, body)
    model = body.get("model", models[0])
    if not isinstance(model, str):
        raise rules.bad_request("model", f"'model' must be a string, got {rules.describe(model)}",
                                f"send one of {models}")
    if model not in models:
        raise ModelNotFound(model, models)
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or not stream):
        raise rules.bad_request("stream_options", "'stream_options' is allowed only with stream: true and must "
                                "be an object", 'send {"include_usage": true} with "stream": true')
    include_usage = bool(options and options.get("include_usage"))
    triton: dict = {}
    if kind == "chat":
        if not limits.has_chat_template:
            raise rules.bad_request("messages", "this model has no chat template", "use /v1/completions")
        messages = rules.check_messages("messages", body.get("messages"))
        rules.check_prompt_bytes("messages", chat.content_bytes(messages), limits.byte_cap, limits.max_input_len)
        prompt_ids = chat.encode_chat(limits.tokenizer, messages, specials=limits.specials)
        triton["messages"] = json.dumps(messages)
        param = "messages"
    else:
        prompt = _prompt(body.get("prompt"))
        rules.check_prompt_bytes("prompt", len(prompt.encode("utf-8")), limits.byte_cap, limits.max_input_len)
        prompt_ids = limits.tokenizer.encode(prompt, add_special_tokens=limits.add_special_tokens)
        triton.update(text_input=prompt, chat_template=False)
        param = "prompt"
    rules.check_prompt_tokens(param, len(prompt_ids), limits.max_input_len)
    max_tokens = _max_tokens(kind, body, len(prompt_ids), limits)
    triton.update(max_tokens=max_tokens, stream=stream)
    if body.get("temperature") is not None:
        triton["temperature"] = rules.check_temperature("temperature", body["temperature"])
    if body.get("top_p") is not None:
        triton["top_p"] = rules.check_top_p("top_p", body["top_p"])
    if body.get("top_k") is not None:
        triton["top_k"] = rules.check_top_k("top_k", body["top_k"], limits.vocab_size)
    if body.get("seed") is not None:
        triton["seed"] = rules.check_seed("seed", body["seed"])
    if body.get("stop") is not None:
        stop = rules.check_stop_words("stop", body["stop"])
        if stop:
            triton["stop_words"] = stop
    return Plan(kind=kind, model=model, stream=stream, include_usage=include_usage, max_tokens=max_tokens,
                prompt_tokens=len(prompt_ids), triton_body=triton)


class ModelNotFound(EagleTrtError):
    def __init__(self, model: str, models: list[str]):
        super().__init__(f"The model '{model}' does not exist", f"use one of {models} (GET /v1/models)")
        self.param = "model"


def _check_known(kind: str, body: dict) -> None:
    for name, value in body.items():
        if name in KNOWN[kind] or name in ACCEPTED_IGNORED:
            continue
        if name in UNSUPPORTED:
            allowed = UNSUPPORTED[name]
            if value is None or value == allowed or (allowed is None and value in (False, [], {})):
                continue
            raise rules.bad_request(name, f"'{name}' = {rules.describe(value)} is not supported by this server",
                                    f"leave '{name}' out" + ("" if allowed is None else f" or send {allowed!r}"))
        raise rules.bad_request(name, f"Unrecognized request argument supplied: {name}",
                                f"the {kind} parameters are {sorted(KNOWN[kind])}")


def _bool(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise rules.bad_request(name, f"'{name}' must be true or false, got {rules.describe(value)}",
                                "send a JSON boolean")
    return value


def _prompt(value) -> str:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]
    if isinstance(value, list):
        raise rules.bad_request("prompt", "'prompt' must be one string (batches and token ids are not supported)",
                                "send one prompt string per request")
    return rules.check_text("prompt", value)


def _max_tokens(kind: str, body: dict, prompt_tokens: int, limits: Limits) -> int:
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(name)
    room = limits.max_seq_len - prompt_tokens
    if value is None:
        return max(1, min(room, COMPLETIONS_DEFAULT_MAX_TOKENS) if kind == "completion" else room)
    return rules.check_max_tokens(name, value, prompt_tokens, limits.max_seq_len)


# ---- answers ----------------------------------------------------------------------------------------------------
def finish_reason(plan: Plan, completion_tokens: int) -> str:
    return "length" if completion_tokens >= plan.max_tokens else "stop"


def usage(plan: Plan, completion_tokens: int, cached_tokens: int | None = None) -> dict:
    """OpenAI's usage; `cached_tokens` (where the engine reports them: the pytorch engine's prompt tokens an earlier
    turn's cache held) as prompt_tokens_details.cached_tokens."""
    out = {"prompt_tokens": plan.prompt_tokens, "completion_tokens": completion_tokens,
           "total_tokens": plan.prompt_tokens + completion_tokens}
    return out if cached_tokens is None else out | {"prompt_tokens_details": {"cached_tokens": cached_tokens}}


def full_answer(plan: Plan, text: str, completion_tokens: int, cached_tokens: int | None = None) -> dict:
    reason = finish_reason(plan, completion_tokens)
    if plan.kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": reason}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        obj = "text_completion"
    return {"id": plan.id, "object": obj, "created": plan.created, "model": plan.model, "choices": [choice],
            "usage": usage(plan, completion_tokens, cached_tokens)}


def chunk(plan: Plan, text: str | None, *, reason: str | None = None, first: bool = False,
          usage_tokens: int | None = None, cached_tokens: int | None = None) -> dict:
    """One streamed chunk; `usage_tokens` set: the final usage-only chunk (choices empty)."""
    obj = "chat.completion.chunk" if plan.kind == "chat" else "text_completion"
    out = {"id": plan.id, "object": obj, "created": plan.created, "model": plan.model}
    if usage_tokens is not None:
        return out | {"choices": [], "usage": usage(plan, usage_tokens, cached_tokens)}
    if plan.kind == "chat":
        delta = ({"role": "assistant", "content": text or ""} if first else
                 ({} if text is None else {"content": text}))
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
    return out | {"choices": [choice]} | ({"usage": None} if plan.include_usage else {})
