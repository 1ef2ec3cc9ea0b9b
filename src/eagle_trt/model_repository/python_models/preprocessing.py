"""Triton python model `preprocessing`: validate a request, apply the chat template, tokenize, pick end/pad/stop ids.

Inputs/outputs follow tensorrtllm_backend's preprocessing (QUERY, REQUEST_OUTPUT_LEN, STOP_WORDS_DICT, END_ID,
PAD_ID -> INPUT_ID, REQUEST_INPUT_LEN, REQUEST_OUTPUT_LEN, STOP_WORDS_IDS, OUT_END_ID, OUT_PAD_ID) plus ours:
CHAT_TEMPLATE (per-request switch; the bundle default is the `chat_template` parameter), MESSAGES (a JSON list of
{role, content}: a whole conversation under the chat template, instead of QUERY), TEMPERATURE/TOP_K/TOP_P (only
validated here; the engine reads them from the request) and STREAM_KEY (a random id that the python engine passes
through to postprocessing for incremental detokenization).

Every check is eagle_trt.request_rules' (shared with the OpenAI route): a bad request is answered with
INVALID_ARG (HTTP 400) naming the field, the value and what to do. Sizes are checked before tokenizing (the prompt's
bytes against max_input_len x the longest token), and message contents cannot forge control tokens.

STOP_WORDS_IDS uses TensorRT-LLM's layout, [2, L] int32: row 0 the concatenated token ids of every stop sequence,
row 1 the end offset of each sequence, both padded with -1. The chat model's end-of-turn tokens (the spec's eos ids
beyond the first, and special tokens the chat template closes a turn with) are always stop sequences.
Copied by `eagle-trt build` as model_repository/preprocessing/1/model.py.
"""

import json
import random

import numpy as np
import triton_python_backend_utils as pb_utils
from model_params import bundle_spec, checked_dir, parameters  # beside model.py (layout.py copies it)

from eagle_trt import chat
from eagle_trt import request_rules as rules
from eagle_trt.errors import EagleTrtError

KNOWN_INPUTS = {"text_input", "max_tokens", "stream", "temperature", "top_k", "top_p", "seed", "stop_words",
                "end_id", "pad_id", "return_perf_metrics", "exclude_input_in_output", "chat_template",
                "messages"}
END_OF_TURN_CANDIDATES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>")


def scalar(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    values = tensor.as_numpy().reshape(-1)
    if values.size != 1:
        raise rules.bad_request(name, f"'{name}' must hold one value, got {values.size}", "send a single value")
    return values[0]


def strings(request, name) -> list:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return [] if tensor is None else list(tensor.as_numpy().reshape(-1))


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

        spec = bundle_spec(parameters(args))
        self.tokenizer = AutoTokenizer.from_pretrained(checked_dir(spec.base.path, "base"), trust_remote_code=False,
                                                       local_files_only=True)
        self.chat_default = spec.chat_template
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.max_input_len = spec.max_input_len
        self.max_seq_len = spec.max_seq_len
        self.vocab_size = len(self.tokenizer)
        self.specials = chat.special_strings(self.tokenizer)
        self.byte_cap = rules.prompt_byte_cap(self.max_input_len, rules.longest_token_bytes(self.tokenizer))
        self.messages_byte_cap = 2 * self.byte_cap + 64 * 1024  # the JSON around the contents, escapes included
        end_ids = list(spec.base.eos_token_ids)
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
            except EagleTrtError as exc:  # a bad request: 400 naming the field, the value and what to do
                message = f"bad request: {exc.message}; {exc.hint}" if exc.hint else f"bad request: {exc.message}"
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)))
            except Exception as exc:  # noqa: BLE001 - any failure must become an error response, not a crash
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"preprocessing failed: {type(exc).__name__}: {exc}", pb_utils.TritonError.INTERNAL)))
        return responses

    def _check_parameters(self, request) -> None:
        raw = request.parameters() if hasattr(request, "parameters") else "{}"
        unknown = sorted(set(json.loads(raw or "{}")) - KNOWN_INPUTS)
        if unknown:
            raise rules.bad_request(unknown[0], f"unknown parameter(s) {unknown}",
                                    f"send only the inputs {sorted(KNOWN_INPUTS)}")

    def _process(self, request):
        self._check_parameters(request)
        prompt, messages = self._prompt(request)
        use_chat = messages is not None or (bool(scalar(request, "CHAT_TEMPLATE", self.chat_default))
                                            and self.has_chat_template)
        if messages is not None and not self.has_chat_template:
            raise rules.bad_request("messages", "'messages' needs a chat template, and this base has none",
                                    "send the prompt as 'text_input'")
        stop_words = rules.check_stop_words("stop_words", strings(request, "STOP_WORDS_DICT"))
        self._check_sampling(request)
        end_id = rules.check_token_id("end_id", scalar(request, "END_ID", self.end_id), self.vocab_size)
        pad_id = rules.check_token_id("pad_id", scalar(request, "PAD_ID", self.pad_id), self.vocab_size)
        if use_chat:
            messages = messages or [{"role": "user", "content": prompt}]
            input_ids = chat.encode_chat(self.tokenizer, messages, specials=self.specials)
        else:
            input_ids = self.tokenizer.encode(prompt, add_special_tokens=True)
        rules.check_prompt_tokens("messages" if prompt is None else "text_input", len(input_ids),
                                  self.max_input_len)
        max_tokens = rules.check_max_tokens("max_tokens", scalar(request, "REQUEST_OUTPUT_LEN"), len(input_ids),
                                            self.max_seq_len)
        stop_ids = list(self.stop_ids)
        for word in stop_words:
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

    def _prompt(self, request):
        """(text_input or None, messages or None), exactly one given; sizes checked before any tokenizing."""
        query, raw_messages = scalar(request, "QUERY"), scalar(request, "MESSAGES")
        if (query is None) == (raw_messages is None):
            raise rules.bad_request("text_input", "send exactly one of 'text_input' and 'messages'",
                                    "'text_input': a prompt string; 'messages': a JSON list of {role, content}")
        if query is not None:
            size = len(query) if isinstance(query, bytes) else len(str(query).encode("utf-8"))
            rules.check_prompt_bytes("text_input", size, self.byte_cap, self.max_input_len)
            return rules.check_text("text_input", query), None
        size = len(raw_messages) if isinstance(raw_messages, bytes) else len(str(raw_messages).encode("utf-8"))
        rules.check_prompt_bytes("messages", size, self.messages_byte_cap, self.max_input_len)
        messages = rules.check_messages("messages", rules.check_text("messages", raw_messages))
        rules.check_prompt_bytes("messages", chat.content_bytes(messages), self.byte_cap, self.max_input_len)
        if not any(m["content"].strip() for m in messages):
            raise rules.bad_request("messages", "every message in 'messages' is empty", "send a non-empty message")
        return None, messages

    def _check_sampling(self, request) -> None:
        for name, check in (("TEMPERATURE", rules.check_temperature), ("TOP_P", rules.check_top_p)):
            value = scalar(request, name)
            if value is not None:
                check(name.lower(), value)
        top_k = scalar(request, "TOP_K")
        if top_k is not None:
            rules.check_top_k("top_k", top_k, self.vocab_size)
