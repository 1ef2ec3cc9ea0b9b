"""Triton python model `postprocessing`: token ids -> text, incrementally when streaming.

Inputs follow tensorrtllm_backend's postprocessing (TOKENS_BATCH [batch, beam, tokens], SEQUENCE_LENGTH
[batch, beam] -> OUTPUT) plus two optional ones from our python engine: STREAM_KEY (the request's random id) and
FINISHED (last response of the request). With a key, the model keeps the request's token ids and emits only the
newly completed text: a chunk that would end inside a multi-byte character (the decoder yields U+FFFD) is held
back until the next tokens complete it, so every streamed chunk is valid UTF-8 and the chunks join to the full
text (the prefix-window method of vLLM's detokenize_incrementally). Without a key (the tensorrtllm engine) each
response's tokens are decoded on their own. OUTPUT_TOKEN_COUNT says how many token ids a response carried (the
ensemble's output_token_count; OpenAI's usage adds them up). Copied as model_repository/postprocessing/1/model.py.
"""

import threading
from collections import OrderedDict

import numpy as np
import triton_python_backend_utils as pb_utils
from model_params import bundle_spec, checked_dir, parameters  # beside model.py (layout.py copies it)


MAX_OPEN_STREAMS = 4096  # state of streams whose final response never came (cancelled) is dropped oldest-first
PREFIX_WINDOW = 6  # tokens of context decoded before the new ones (enough for merges and leading spaces)


class StreamState:
    __slots__ = ("ids", "prefix_offset", "read_offset")

    def __init__(self):
        self.ids: list = []
        self.prefix_offset = 0
        self.read_offset = 0


class IncrementalDetokenizer:
    """Per-stream incremental decoding (also usable without Triton; see tests)."""

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.streams: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=self.skip)

    def step(self, key, new_ids, finished: bool) -> str:
        with self.lock:
            state = self.streams.pop(key, None) or StreamState()
            if not finished:
                self.streams[key] = state
                while len(self.streams) > MAX_OPEN_STREAMS:
                    self.streams.popitem(last=False)
        state.ids.extend(int(i) for i in new_ids)
        prefix_text = self.decode(state.ids[state.prefix_offset:state.read_offset])
        full_text = self.decode(state.ids[state.prefix_offset:])
        if full_text.endswith("\ufffd") and not finished:
            return ""  # an incomplete character: wait for the tokens that complete it
        delta = full_text[len(prefix_text):]
        state.read_offset = len(state.ids)
        state.prefix_offset = max(0, state.read_offset - PREFIX_WINDOW)
        return delta


class TritonPythonModel:
    def initialize(self, args):
        from transformers import AutoTokenizer

        spec = bundle_spec(parameters(args))
        tokenizer = AutoTokenizer.from_pretrained(checked_dir(spec.base.path, "base"), trust_remote_code=False,
                                                  local_files_only=True)
        self.detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=True)
        self.cancelled = OrderedDict()  # stream keys whose engine was already asked to stop

    def execute(self, requests):
        responses = []
        for request in requests:
            if request.is_cancelled():
                responses.append(self._cancel(request))
                continue
            try:
                text, count = self._text(request)
                out = pb_utils.Tensor("OUTPUT", np.array([[text.encode("utf-8")]], dtype=object))  # [1, 1]
                tokens = pb_utils.Tensor("OUTPUT_TOKEN_COUNT", np.array([[count]], dtype=np.int32))  # [1, 1]
                responses.append(pb_utils.InferenceResponse(output_tensors=[out, tokens]))
            except Exception as exc:  # noqa: BLE001 - must answer every request
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"postprocessing failed: {type(exc).__name__}: {exc}")))
        return responses

    def _cancel(self, request):
        """Stop the engine stream behind a cancelled request; answer CANCELLED."""
        from eagle_trt.model_repository.layout import ENSEMBLES
        from eagle_trt.model_repository.python_models.engine import cancel_request

        key_tensor = pb_utils.get_input_tensor_by_name(request, "STREAM_KEY")
        key = None if key_tensor is None else int(key_tensor.as_numpy().reshape(-1)[0])
        with self.detok.lock:
            self.detok.streams.pop(key, None)  # its text will not be needed
            first = key is not None and key not in self.cancelled
            if first:
                self.cancelled[key] = None
                while len(self.cancelled) > MAX_OPEN_STREAMS:
                    self.cancelled.popitem(last=False)
        if first:  # the engine's responses queued behind the first cancelled one need no second cancel
            for engine in ENSEMBLES.values():  # the key is random: only the engine running it has it
                try:
                    for _ in cancel_request(engine, key).exec(decoupled=True):
                        pass
                except Exception as exc:  # noqa: BLE001 - e.g. base_engine not loaded
                    pb_utils.Logger.log_verbose(f"cancel of stream {key} on {engine}: {exc}")
            pb_utils.Logger.log_info(f"ensemble request cancelled: asked the engine to stop stream {key}")
        return pb_utils.InferenceResponse(error=pb_utils.TritonError("request cancelled by the client",
                                                                     pb_utils.TritonError.CANCELLED))

    def _text(self, request) -> tuple[str, int]:
        """(text of this response, number of token ids it carries)."""
        tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()  # [1, beam, tokens]
        lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()  # [1, beam]
        while tokens.ndim > 1:  # first request of the batch, first beam
            tokens = tokens[0]
        length = int(lengths.reshape(-1)[0]) if lengths.size else tokens.shape[0]
        new_ids = [int(t) for t in tokens[:length] if t >= 0]
        key_tensor = pb_utils.get_input_tensor_by_name(request, "STREAM_KEY")
        if key_tensor is None:
            return self.detok.decode(new_ids), len(new_ids)
        finished_tensor = pb_utils.get_input_tensor_by_name(request, "FINISHED")
        finished = bool(finished_tensor.as_numpy().reshape(-1)[0]) if finished_tensor is not None else True
        return self.detok.step(int(key_tensor.as_numpy().reshape(-1)[0]), new_ids, finished), len(new_ids)
