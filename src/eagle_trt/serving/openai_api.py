"""An OpenAI-compatible HTTP route in front of a served bundle: /v1/models, /v1/chat/completions, /v1/completions.

`eagle-trt serve OUT --openai-port N` starts it beside tritonserver. Each request is validated here
(openai_schema.plan_request: OpenAI's 400 error JSON naming the parameter; an unknown model is a 404), then
forwarded to Triton's generate / generate_stream endpoint of the model it names (eagle_model by default) with the
ensemble's request names: chat as `messages` (the preprocessing model applies the base's chat template, with
message contents unable to forge control tokens), completions as `text_input` without the template. Streaming
answers are server-sent events in OpenAI's chunk format, ending with `data: [DONE]`. `usage` counts the prompt
tokens (tokenized here exactly as preprocessing does, with the same functions) and the generated tokens (the sum
of the ensemble's output_token_count); where the engine reports cached_prompt_tokens (pytorch: prompt tokens an
earlier turn's cache held), also `usage.prompt_tokens_details.cached_tokens`.

    route = OpenAIRoute.from_bundle(bundle_dir, triton_url="http://127.0.0.1:8000", models=["eagle_model"])
    route.start(port=9000)      # a background thread with its own event loop
    ...
    route.stop()
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path

from eagle_trt import chat
from eagle_trt import request_rules as rules
from eagle_trt.errors import EagleTrtError, missing_extra
from eagle_trt.serving import openai_schema as S

log = logging.getLogger(__name__)

TRITON_TIMEOUT_S = 3600  # one generation may be long on a CPU; the client decides when to give up


class OpenAIRoute:
    """The aiohttp application and the thread that serves it."""

    def __init__(self, limits: S.Limits, *, triton_url: str, models: list[str]):
        self.limits = limits
        self.triton_url = triton_url.rstrip("/")
        self.models = list(models)
        self.created = int(time.time())
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner = None
        self._session = None
        self._tokenizer_lock = threading.Lock()  # a fast tokenizer is not safe to call from two threads at once
        self.url: str | None = None

    @classmethod
    def from_bundle(cls, bundle_dir: str | Path, *, triton_url: str, models: list[str]) -> OpenAIRoute:
        """Limits from the bundle's spec and the base's tokenizer (the one preprocessing loads)."""
        from eagle_trt.build_spec import BuildSpec

        spec = BuildSpec.load(bundle_dir)
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise missing_extra("transformers", "runtime") from None
        tokenizer = AutoTokenizer.from_pretrained(str(spec.base.path), trust_remote_code=False,
                                                  local_files_only=True)
        limits = S.Limits(tokenizer=tokenizer, max_input_len=spec.max_input_len, max_seq_len=spec.max_seq_len,
                          vocab_size=len(tokenizer),
                          byte_cap=rules.prompt_byte_cap(spec.max_input_len, rules.longest_token_bytes(tokenizer)),
                          specials=chat.special_strings(tokenizer),
                          has_chat_template=bool(getattr(tokenizer, "chat_template", None)))
        return cls(limits, triton_url=triton_url, models=models)

    @property
    def max_body(self) -> int:
        """Largest request body read: room for a prompt at the byte cap, JSON-escaped, and the other fields."""
        return max(1 << 20, 2 * self.limits.byte_cap + (64 << 10))

    # ---- lifecycle --------------------------------------------------------------------------------------------
    def app(self):
        from aiohttp import web

        app = web.Application(client_max_size=self.max_body, middlewares=[self._errors])
        app.router.add_get("/v1/models", self.list_models)
        app.router.add_get("/v1/models/{model}", self.get_model)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.on_cleanup.append(self._close_session)
        return app

    def start(self, host: str = "127.0.0.1", port: int = 9000, timeout: float = 30.0) -> OpenAIRoute:
        try:
            from aiohttp import web
        except ImportError:
            raise missing_extra("aiohttp", "serving") from None
        from eagle_trt.serving.tritonserver import check_port

        check_port(host, port, "openai")
        ready, failure = threading.Event(), []

        def run():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            try:
                self._runner = web.AppRunner(self.app(), access_log=None)
                self._loop.run_until_complete(self._runner.setup())
                self._loop.run_until_complete(web.TCPSite(self._runner, host, port).start())
            except Exception as exc:  # noqa: BLE001 - reported to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=run, name="openai-route", daemon=True)
        self._thread.start()
        if not ready.wait(timeout) or failure:
            raise EagleTrtError(f"the OpenAI route could not listen on {host}:{port}: "
                                f"{failure[0] if failure else 'timed out'}", "pass another --openai-port")
        self.url = f"http://{host}:{port}"
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    async def _close_session(self, app) -> None:
        if self._session is not None:
            await self._session.close()

    def session(self):
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TRITON_TIMEOUT_S),
                                                  read_bufsize=1 << 20)  # one SSE event is one line
        return self._session

    # ---- handlers ---------------------------------------------------------------------------------------------
    @staticmethod
    def _json(body: dict, status: int = 200):
        from aiohttp import web

        return web.json_response(body, status=status)

    async def list_models(self, request):
        return self._json({"object": "list", "data": [self._model_card(m) for m in self.models]})

    async def get_model(self, request):
        name = request.match_info["model"]
        if name not in self.models:
            return self._not_found(S.ModelNotFound(name, self.models))
        return self._json(self._model_card(name))

    def _model_card(self, name: str) -> dict:
        return {"id": name, "object": "model", "created": self.created, "owned_by": "eagle-trt"}

    async def chat(self, request):
        return await self._generate(request, "chat")

    async def completions(self, request):
        return await self._generate(request, "completion")

    async def _generate(self, request, kind: str):
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError) as exc:
            return self._json(S.openai_error(f"the request body is not valid JSON: {exc}", code="invalid_json"), 400)
        try:  # tokenizing is bounded by the byte cap, but still off the event loop
            plan = await asyncio.get_running_loop().run_in_executor(None, self._plan, kind, body)
        except S.ModelNotFound as exc:
            return self._not_found(exc)
        except EagleTrtError as exc:
            return self._json(S.error_from(exc), 400)
        if plan.stream:
            return await self._stream(request, plan)
        return await self._unary(plan)

    def _plan(self, kind: str, body) -> S.Plan:
        with self._tokenizer_lock:
            return S.plan_request(kind, body, self.limits, self.models)

    def _not_found(self, exc: EagleTrtError):
        return self._json(S.openai_error(f"{exc.message}; {exc.hint}", param="model", code="model_not_found"), 404)

    async def _unary(self, plan: S.Plan):
        url = f"{self.triton_url}/v2/models/{plan.model}/generate"
        async with self.session().post(url, json=plan.triton_body) as response:
            raw = await response.read()
        reply = _parse(raw)
        if response.status != 200 or "error" in reply:
            return self._triton_error(response.status, reply)
        text = reply.get("text_output", "")
        text = "".join(text) if isinstance(text, list) else text
        return self._json(S.full_answer(plan, text, _count(reply), _number(reply, "cached_prompt_tokens")))

    async def _stream(self, request, plan: S.Plan):
        from aiohttp import web

        url = f"{self.triton_url}/v2/models/{plan.model}/generate_stream"
        async with self.session().post(url, json=plan.triton_body) as upstream:
            if upstream.status != 200:
                return self._triton_error(upstream.status, _parse(await upstream.read()))
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await response.prepare(request)
            tokens, first, cached = 0, True, None
            async for event in _sse_events(upstream):
                if "error" in event:
                    await _send(response, S.openai_error(f"the model failed: {event['error']}", kind="server_error"))
                    break
                text = event.get("text_output", "")
                text = "".join(text) if isinstance(text, list) else text
                tokens += _count(event)
                cached = _number(event, "cached_prompt_tokens", cached)
                if text or first:
                    await _send(response, S.chunk(plan, text, first=first))
                    first = False
            else:
                await _send(response, S.chunk(plan, None, reason=S.finish_reason(plan, tokens)))
                if plan.include_usage:
                    await _send(response, S.chunk(plan, None, usage_tokens=tokens, cached_tokens=cached))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response

    def _triton_error(self, status: int, reply: dict):
        message = reply.get("error", reply)
        if status == 400 or (status == 200 and "bad request" in str(message)):
            return self._json(S.openai_error(f"{message}"), 400)
        if status == 404:
            return self._json(S.openai_error(f"{message}", param="model", code="model_not_found"), 404)
        return self._json(S.openai_error(f"the model server failed: {message}", kind="server_error"), 502)

    # ---- every other failure in OpenAI's format ---------------------------------------------------------------
    @property
    def _errors(self):
        from aiohttp import web

        @web.middleware
        async def middleware(request, handler):
            try:
                return await handler(request)
            except web.HTTPRequestEntityTooLarge:
                return self._json(S.openai_error(
                    f"the request body is larger than {self.max_body} bytes, more than any prompt of at most "
                    f"{self.limits.max_input_len} tokens (max_input_len) needs; shorten the prompt",
                    code="request_too_large"), 413)
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                return self._json(S.openai_error(f"{exc.reason}: {request.method} {request.path}",
                                                 code=str(exc.status)), exc.status)
            except Exception as exc:  # noqa: BLE001 - a client gets JSON, the log gets the traceback
                log.exception("OpenAI route failed on %s", request.path)
                return self._json(S.openai_error(f"internal error: {type(exc).__name__}: {exc}",
                                                 kind="server_error"), 500)
        return middleware


def _parse(raw: bytes) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        return {"error": raw.decode(errors="replace")}
    return value if isinstance(value, dict) else {"error": value}


def _count(event: dict) -> int:
    return _number(event, "output_token_count", 0)


def _number(event: dict, name: str, default: int | None = None) -> int | None:
    """An ensemble output of one number (Triton's JSON gives it bare or in a list); `default` where it is absent
    (e.g. cached_prompt_tokens, which only pytorch ensembles answer)."""
    value = event.get(name)
    if isinstance(value, list):
        value = value[0] if value else None
    return default if value is None else int(value)


async def _sse_events(response):
    """`data: {json}` events of Triton's generate_stream answer."""
    async for line in response.content:
        line = line.strip()
        if line.startswith(b"data:"):
            yield _parse(line[5:].strip())


async def _send(response, payload: dict) -> None:
    await response.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
