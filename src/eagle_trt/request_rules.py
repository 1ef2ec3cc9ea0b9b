"""What one generation request may ask for, checked in one place.

Used by the preprocessing model (every request to eagle_model / base_model, whatever the endpoint), by the
OpenAI-compatible route (serving/openai_api.py, which checks before it forwards, so its 400s name OpenAI's
parameter) and by the CLI. Every check raises `bad_request(param, ...)`: an EagleTrtError naming the field, the
value and what to do, with `.param` set so a front end can report the field on its own.

Bounds come before work that grows with the input: a prompt's UTF-8 size is checked against `prompt_byte_cap`
(max_input_len x the tokenizer's longest token in bytes, so no prompt that could fit is refused) before it is
tokenized, and the number and size of stop words are checked before they are.

Encoding the checked messages is `eagle_trt.chat`'s job.
"""

from __future__ import annotations

import json
import math

from eagle_trt.errors import EagleTrtError

MAX_TEMPERATURE = 2.0  # OpenAI's range; 0 = greedy
MAX_STOP_WORDS = 16
MAX_STOP_WORD_BYTES = 256
MAX_SEED = 2**64 - 1  # the seed tensor is UINT64
MIN_BYTES_PER_TOKEN_BOUND = 8  # floor of the bytes-per-token bound behind the prompt byte cap
CHAT_ROLES = ("system", "user", "assistant")


def bad_request(param: str, message: str, hint: str) -> EagleTrtError:
    """The error for a bad request field; `param` is the request's name for the field."""
    error = EagleTrtError(message, hint)
    error.param = param
    return error


def describe(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---- numbers ----------------------------------------------------------------------------------------------------
def check_int(param: str, value, low: int, high: int, hint: str) -> int:
    """An integer (not a bool, not a float with a fraction) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        elif hasattr(value, "item") and not isinstance(value.item(), (bool, float)):  # numpy integer
            value = int(value)
        else:
            raise bad_request(param, f"'{param}' must be an integer, got {describe(value)}", "send a JSON integer")
    if not low <= value <= high:
        raise bad_request(param, f"'{param}' must be between {low} and {high}, got {value}", hint)
    return value


def check_max_tokens(param: str, value, prompt_tokens: int, max_seq_len: int) -> int:
    limit = max(max_seq_len - prompt_tokens, 0)
    try:
        return check_int(param, value, 1, limit, "ask for fewer tokens or send a shorter prompt")
    except EagleTrtError as exc:
        if isinstance(value, int) and not isinstance(value, bool):
            exc.message += f" (max_seq_len {max_seq_len} minus {prompt_tokens} prompt tokens)"
        raise


def check_temperature(param: str, value) -> float:
    value = _number(param, value, "send a number from 0 (greedy) to 2")
    if not 0.0 <= value <= MAX_TEMPERATURE:  # also refuses nan and inf
        raise bad_request(param, f"'{param}' must be between 0 and {MAX_TEMPERATURE:g}, got {value}",
                          "send 0 for greedy decoding or a finite temperature up to 2")
    return value


def check_top_p(param: str, value) -> float:
    value = _number(param, value, "send a number in (0, 1]")
    if not 0.0 < value <= 1.0:
        raise bad_request(param, f"'{param}' must be in (0, 1], got {value}", "send e.g. 0.9, or 1 for no top-p")
    return value


def check_top_k(param: str, value, vocab_size: int) -> int:
    return check_int(param, value, 0, vocab_size, f"send 0 (off) or a count up to the vocabulary size {vocab_size}")


def check_token_id(param: str, value, vocab_size: int) -> int:
    return check_int(param, value, 0, vocab_size - 1, f"send a token id of this model (0 to {vocab_size - 1}) "
                                                      "or leave it out for the model's own")


def check_seed(param: str, value) -> int:
    return check_int(param, value, 0, MAX_SEED, "send a non-negative integer below 2^64")


def _number(param: str, value, hint: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "item"):
        raise bad_request(param, f"'{param}' must be a number, got {describe(value)}", hint)
    value = float(value)
    if not math.isfinite(value):
        raise bad_request(param, f"'{param}' must be a finite number, got {value}", hint)
    return value


# ---- text -------------------------------------------------------------------------------------------------------
def longest_token_bytes(tokenizer) -> int:
    """UTF-8 size of the tokenizer's longest vocabulary entry: an upper bound on the bytes one token covers."""
    longest = max((len(token.encode("utf-8")) for token in tokenizer.get_vocab()), default=0)
    return max(longest, MIN_BYTES_PER_TOKEN_BOUND)


def prompt_byte_cap(max_input_len: int, bytes_per_token: int) -> int:
    """Largest prompt (UTF-8 bytes) that could still fit in max_input_len tokens."""
    return max_input_len * bytes_per_token


def check_prompt_bytes(param: str, size: int, cap: int, max_input_len: int) -> None:
    if size > cap:
        raise bad_request(param, f"'{param}' is {size} bytes; a prompt of at most {max_input_len} tokens "
                                 f"(max_input_len) is at most {cap} bytes for this tokenizer",
                          "shorten the prompt (or rebuild the bundle with a larger --max-input-len)")


def check_prompt_tokens(param: str, count: int, max_input_len: int) -> None:
    if count > max_input_len:
        raise bad_request(param, f"'{param}' has {count} tokens, more than max_input_len {max_input_len}",
                          "shorten the prompt (or rebuild the bundle with a larger --max-input-len)")


def check_text(param: str, value, *, allow_empty: bool = False) -> str:
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise bad_request(param, f"'{param}' is not valid UTF-8 ({exc.reason} at byte {exc.start})",
                              "send the text UTF-8 encoded") from None
    if not isinstance(value, str):
        raise bad_request(param, f"'{param}' must be a string, got {describe(value)}", "send text")
    if not allow_empty and not value.strip():
        raise bad_request(param, f"'{param}' is empty", "send a non-empty prompt")
    return value


def check_stop_words(param: str, words) -> list[str]:
    if isinstance(words, (str, bytes)):
        words = [words]
    if not isinstance(words, (list, tuple)):
        raise bad_request(param, f"'{param}' must be a string or a list of strings, got {describe(words)}",
                          "send e.g. [\"\\n\\n\"]")
    if len(words) > MAX_STOP_WORDS:
        raise bad_request(param, f"'{param}' holds {len(words)} stop sequences, more than {MAX_STOP_WORDS}",
                          f"send at most {MAX_STOP_WORDS}")
    out = []
    for word in words:
        word = check_text(param, word, allow_empty=True)
        if len(word.encode("utf-8")) > MAX_STOP_WORD_BYTES:
            raise bad_request(param, f"a stop sequence in '{param}' is {len(word.encode('utf-8'))} bytes, more than "
                                     f"{MAX_STOP_WORD_BYTES}", "send shorter stop sequences")
        if word:
            out.append(word)
    return out


def check_messages(param: str, value) -> list[dict]:
    """OpenAI-style chat messages -> [{"role", "content"}] (content parts of type "text" joined)."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            raise bad_request(param, f"'{param}' is not JSON", "send a JSON list of {role, content} objects") from None
    if not isinstance(value, list) or not value:
        raise bad_request(param, f"'{param}' must be a non-empty list of messages, got {describe(value)}",
                          'send e.g. [{"role": "user", "content": "Hello"}]')
    out = []
    for i, message in enumerate(value):
        where = f"{param}[{i}]"
        if not isinstance(message, dict):
            raise bad_request(where, f"'{where}' must be an object, got {describe(message)}",
                              'send {"role": "user", "content": "..."}')
        role = "system" if message.get("role") == "developer" else message.get("role")
        if role not in CHAT_ROLES:
            raise bad_request(f"{where}.role", f"'{where}.role' must be one of {list(CHAT_ROLES)}, got "
                                               f"{describe(message.get('role'))}", "use system, user or assistant")
        out.append({"role": role, "content": _content(f"{where}.content", message.get("content"))})
    return out


def _content(param: str, content) -> str:
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request(param, f"'{param}' holds a part that is not text: {describe(part)}",
                                  'this model reads text only: send {"type": "text", "text": "..."} parts')
            parts.append(part["text"])
        content = "".join(parts)
    return check_text(param, content, allow_empty=True)
