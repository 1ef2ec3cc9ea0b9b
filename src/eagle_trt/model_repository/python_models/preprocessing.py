"""Triton python model `preprocessing`: validate a request, apply the chat template, tokenize, pick end/pad/stop ids.

Inputs/outputs follow tensorrtllm_backend's preprocessing (QUERY, REQUEST_OUTPUT_LEN, STOP_WORDS_DICT, END_ID,
PAD_ID -> INPUT_ID, REQUEST_INPUT_LEN, REQUEST_OUTPUT_LEN, STOP_WORDS_IDS, OUT_END_ID, OUT_PAD_ID) plus ours:
CHAT_TEMPLATE (per-request switch; the bundle default is the `chat_template` parameter), TEMPERATURE/TOP_K/TOP_P
(only validated here; the engine reads them from the request) and STREAM_KEY (a random id that the python engine
passes through to postprocessing for incremental detokenization).

STOP_WORDS_IDS uses TensorRT-LLM's layout, [2, L] int32: row 0 the concatenated token ids of every stop sequence,
row 1 the end offset of each sequence, both padded with -1. The chat model's end-of-turn tokens (the spec's eos ids
beyond the first, and special tokens the chat template closes a turn with) are always stop sequences.
Copied by `eagle-trt build` as model_repository/preprocessing/1/model.py.
"""

import json
import random

import numpy as np
import triton_python_backend_utils as pb_utils
from model_params import local_dir, parameters  # beside model.py (layout.py copies it)

KNOWN_INPUTS = {"text_input", "max_tokens", "stream", "temperature", "top_k", "top_p", "seed", "stop_words",
                "end_id", "pad_id", "return_perf_metrics", "exclude_input_in_output", "chat_template"}
END_OF_TURN_CANDIDATES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>")


class RequestError(ValueError):
    """A bad request: the message goes back to the client."""


def scalar(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    values = tensor.as_numpy().reshape(-1)
    if values.size != 1:
        raise RequestError(f"'{name}' must hold one value, got {values.size}")
    return values[0]


def strings(request, name) -> list:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return [] if tensor is None else list(tensor.as_numpy().reshape(-1))


def as_text(value, name) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError(f"'{name}' is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    return str(value)


def pack_stop_words(sequences) -> np.ndarray:
    """[[ids], ...] -> [2, L] int32 (flat ids / end offsets, -1 padded); L >= 1."""
    flat, offsets = [], []
    for seq in sequences:
        flat.extend(seq)
        offsets.append(len(flat))
    width = max(len(flat), 1)
    packed = np.full((2, width), -1, dtype=np.int32)  # [2, L]
    packed[0, :len(flat)] = flat
    packed[1, :len(offsets)] = offsets
    return packed


class TritonPythonModel:
    def initialize(self, args):
        from transformers import AutoTokenizer

        param = parameters(args)
        self.tokenizer = AutoTokenizer.from_pretrained(local_dir(param, "tokenizer_dir"), trust_remote_code=False,
                                                       local_files_only=True)
        self.chat_default = param.get("chat_template", "true") == "true"
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.add_special_tokens = param.get("add_special_tokens", "true") == "true"
        self.max_input_len = int(param["max_input_len"])
        self.max_seq_len = int(param["max_seq_len"])
        end_ids = [int(x) for x in param.get("end_ids", "").split(",") if x.strip()]
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in end_ids:
            end_ids.append(self.tokenizer.eos_token_id)
        if not end_ids:
            raise pb_utils.TritonModelException("no end id: the base has no eos_token_id and none was configured")
        self.end_id = end_ids[0]
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.end_id
        self.stop_ids = [[i] for i in end_ids[1:]] + [[i] for i in self._end_of_turn_ids() if i not in end_ids]

    def _end_of_turn_ids(self) -> list:
        template = self.tokenizer.chat_template if isinstance(self.tokenizer.chat_template, str) else ""
        found = []
        for token in END_OF_TURN_CANDIDATES:
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if token in template and isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id:
                found.append(token_id)
        return found

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(pb_utils.InferenceResponse(output_tensors=self._process(request)))
            except RequestError as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"bad request: {exc}")))
            except Exception as exc:  # noqa: BLE001 - any failure must become an error response, not a crash
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"preprocessing failed: {type(exc).__name__}: {exc}")))
        return responses

    def _check_parameters(self, request) -> None:
        raw = request.parameters() if hasattr(request, "parameters") else "{}"
        unknown = sorted(set(json.loads(raw or "{}")) - KNOWN_INPUTS)
        if unknown:
            raise RequestError(f"unknown parameter(s) {unknown}; the inputs are {sorted(KNOWN_INPUTS)}")

    def _process(self, request):
        self._check_parameters(request)
        prompt = as_text(scalar(request, "QUERY"), "text_input")
        if not prompt.strip():
            raise RequestError("'text_input' is empty; send a non-empty prompt")
        max_tokens = int(scalar(request, "REQUEST_OUTPUT_LEN"))
        self._check_sampling(request)
        use_chat = bool(scalar(request, "CHAT_TEMPLATE", self.chat_default))
        if use_chat and self.has_chat_template:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                      add_generation_prompt=True)
            input_ids = self.tokenizer.encode(text, add_special_tokens=False)
        else:
            input_ids = self.tokenizer.encode(prompt, add_special_tokens=self.add_special_tokens)
        if len(input_ids) > self.max_input_len:
            raise RequestError(f"the prompt has {len(input_ids)} tokens, more than max_input_len "
                               f"{self.max_input_len}; shorten it")
        limit = self.max_seq_len - len(input_ids)
        if max_tokens < 1 or max_tokens > limit:
            raise RequestError(f"'max_tokens' must be between 1 and {limit} (max_seq_len {self.max_seq_len} minus "
                               f"{len(input_ids)} prompt tokens), got {max_tokens}")
        end_id = int(scalar(request, "END_ID", self.end_id))
        pad_id = int(scalar(request, "PAD_ID", self.pad_id))
        stop_ids = list(self.stop_ids)
        for word in strings(request, "STOP_WORDS_DICT"):
            word = as_text(word, "stop_words")
            if word:
                stop_ids.append(self.tokenizer.encode(word, add_special_tokens=False))
        return [
            pb_utils.Tensor("INPUT_ID", np.array([input_ids], dtype=np.int32)),  # [1, input_len]
            pb_utils.Tensor("REQUEST_INPUT_LEN", np.array([[len(input_ids)]], dtype=np.int32)),
            pb_utils.Tensor("REQUEST_OUTPUT_LEN", np.array([[max_tokens]], dtype=np.int32)),
            pb_utils.Tensor("STOP_WORDS_IDS", pack_stop_words(stop_ids)[None]),  # [1, 2, L]
            pb_utils.Tensor("OUT_END_ID", np.array([[end_id]], dtype=np.int32)),
            pb_utils.Tensor("OUT_PAD_ID", np.array([[pad_id]], dtype=np.int32)),
            pb_utils.Tensor("STREAM_KEY", np.array([[random.getrandbits(63)]], dtype=np.uint64)),
        ]

    def _check_sampling(self, request) -> None:
        temperature = scalar(request, "TEMPERATURE")
        if temperature is not None and not float(temperature) >= 0.0:
            raise RequestError(f"'temperature' must be >= 0 (0 = greedy), got {float(temperature)}")
        top_k = scalar(request, "TOP_K")
        if top_k is not None and int(top_k) < 0:
            raise RequestError(f"'top_k' must be >= 0 (0 = off), got {int(top_k)}")
        top_p = scalar(request, "TOP_P")
        if top_p is not None and not 0.0 < float(top_p) <= 1.0:
            raise RequestError(f"'top_p' must be in (0, 1], got {float(top_p)}")
