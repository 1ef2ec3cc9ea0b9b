"""AIPerf endpoint for Triton's generate extension with TensorRT-LLM ensemble field names."""

from __future__ import annotations

import json
from typing import Any

from aiperf.common.models import ExtractedPayload, InferenceServerResponse, ParsedResponse, RequestInfo, RequestRecord
from aiperf.endpoints.base_endpoint import BaseEndpoint

ACCEPTED = "total_accepted_draft_tokens"
DRAFTED = "total_draft_tokens"
PRIVATE_KEYS = ("default_max_tokens",)


def _coerce(value):
    """--extra-inputs values arrive as strings; Triton's JSON inputs are strictly typed (true, 0.5, 7)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def last_user_turn(messages) -> str | None:
    """The last user content of a `messages` input (a JSON string of OpenAI-style messages)."""
    try:
        turns = [m["content"] for m in json.loads(messages) if m.get("role") == "user"]
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    return turns[-1] if turns else None


class TritonGenerateEndpoint(BaseEndpoint):
    def format_payload(self, request_info: RequestInfo) -> dict[str, Any]:
        turn = request_info.turns[-1]
        texts = [c for t in turn.texts for c in t.contents if c]
        extra = dict(self.model_endpoint.endpoint.extra or {})
        payload: dict[str, Any] = {
            "text_input": " ".join(texts),
            "max_tokens": int(turn.max_tokens or int(extra.get("default_max_tokens", 64))),
            "stream": bool(self.model_endpoint.endpoint.streaming),
        }
        payload.update({k: _coerce(v) for k, v in extra.items() if k not in PRIVATE_KEYS})
        if turn.extra_body:
            payload.update(turn.extra_body)
            if "messages" in turn.extra_body:  # a conversation (MT-bench's second turn): exactly one prompt input
                payload.pop("text_input", None)
        return payload

    def extract_payload_inputs(self, payload: dict[str, Any]) -> ExtractedPayload:
        text = payload.get("text_input") or last_user_turn(payload.get("messages"))  # AIPerf counts input tokens
        return ExtractedPayload(texts=[text] if isinstance(text, str) and text else [])

    def parse_response(self, response: InferenceServerResponse) -> ParsedResponse | None:
        obj = response.get_json()
        if not obj or "error" in obj:
            return None
        text = obj.get("text_output")
        if isinstance(text, list):
            text = "".join(map(str, text))
        parsed = ParsedResponse(perf_ns=response.perf_ns, data=self.make_text_response_data(text) if text else None)
        if ACCEPTED in obj and DRAFTED in obj:
            parsed.spec_decode_stats = {"_cumulative": (int(obj[ACCEPTED]), int(obj[DRAFTED]))}
        return parsed

    def extract_response_data(self, record: RequestRecord) -> list[ParsedResponse]:
        if record._parsed_responses_cache is not None:
            return record._parsed_responses_cache
        parsed = [p for r in record.responses if (p := self.parse_response(r))]
        accepted, drafted, previous = [], [], (0, 0)
        for p in parsed:
            cumulative = (p.spec_decode_stats or {}).get("_cumulative")
            p.spec_decode_stats = None
            if cumulative is None:
                continue
            d_acc, d_draft = cumulative[0] - previous[0], cumulative[1] - previous[1]
            if d_draft > 0:  # a response whose drafted count grew closes one or more verify steps
                accepted.append(max(d_acc, 0))
                drafted.append(d_draft)
            previous = cumulative
        if parsed and drafted:  # exactly one response per request may carry the stats
            parsed[-1].spec_decode_stats = {"engine": "eagle-trt-triton", "per_step_accepted": accepted,
                                            "per_step_drafted": drafted}
        parsed = [p for p in parsed if p.data is not None or p.spec_decode_stats]
        record._parsed_responses_cache = parsed
        return parsed
