"""Chat encoding: messages -> token ids through the base's chat template.

User text is encoded so that it cannot forge control tokens: `encode_chat` renders the chat template around
placeholders, and the special-token strings that came from message contents (e.g. ``<|im_end|><|im_start|>system``
inside a user message) are tokenized as plain text, while the template's own control tokens stay real.
`encode_conversation` renders a multi-turn benchmark conversation (MT-bench's second turn sees the model's own first
answer); `user_turn` is one user prompt rendered for generation (training data, tuning prompts).
Checking what a request may send is `request_rules`' job; this module only encodes.
"""

from __future__ import annotations

import re
import secrets

from eagle_trt.errors import EagleTrtError


def content_bytes(messages: list[dict]) -> int:
    return sum(len(m["content"].encode("utf-8")) for m in messages)



def conversation(turns: list[str], answers: list[str]) -> list[dict]:
    """OpenAI-style messages: user turn, assistant answer, ..., ending with the user turn being answered."""
    messages = []
    for i, turn in enumerate(turns):
        messages.append({"role": "user", "content": turn})
        if i < len(answers) and i < len(turns) - 1:
            messages.append({"role": "assistant", "content": answers[i]})
    return messages


def encode_conversation(tokenizer, turns: list[str], answers: list[str]) -> list[int]:
    """Token ids of a multi-turn conversation through the base's chat template (MT-bench's second turn sees the
    model's own first answer: turns [q1, q2], answers [a1])."""
    if not getattr(tokenizer, "chat_template", None):
        raise EagleTrtError("--chat was requested but the base has no chat template",
                            "pass --no-chat, or use a base directory with a chat template")
    text = tokenizer.apply_chat_template(conversation(turns, answers), tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def special_strings(tokenizer) -> list[str]:
    """The special (control) token strings of a tokenizer, longest first."""
    specials = {t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if t.special}
    specials.update(getattr(tokenizer, "all_special_tokens", []))
    return sorted((s for s in specials if s), key=len, reverse=True)


def encode_chat(tokenizer, messages: list[dict], *, add_generation_prompt: bool = True,
                specials: list[str] | None = None) -> list[int]:
    """Token ids of `messages` under the tokenizer's chat template; control-token strings inside message contents
    are encoded as plain text. Without such strings the ids equal encoding the rendered template in one piece."""
    nonce = secrets.token_hex(8)
    marked = [dict(m, content=f"\u2060{nonce}:{i}\u2060") for i, m in enumerate(messages)]
    rendered = tokenizer.apply_chat_template(marked, tokenize=False, add_generation_prompt=add_generation_prompt)
    text, content_spans, pos = [], [], 0
    for match in re.finditer(f"\u2060{nonce}:(\\d+)\u2060", rendered):
        text.append(rendered[pos:match.start()])
        start = sum(len(t) for t in text)
        content = messages[int(match.group(1))]["content"]
        text.append(content)
        content_spans.append((start, start + len(content)))
        pos = match.end()
    text.append(rendered[pos:])
    return encode_spans(tokenizer, "".join(text), content_spans, specials)


def encode_spans(tokenizer, text: str, user_spans: list[tuple[int, int]], specials: list[str] | None) -> list[int]:
    """Encode `text` with special tokens parsed, except those whose strings lie inside `user_spans`."""
    specials = special_strings(tokenizer) if specials is None else specials
    forged = []
    if specials:
        pattern = re.compile("|".join(re.escape(s) for s in specials))
        for start, end in user_spans:
            forged.extend((m.start(), m.end()) for m in pattern.finditer(text, start, end))
    ids, pos = [], 0
    for start, end in forged:
        if start > pos:
            ids += tokenizer.encode(text[pos:start], add_special_tokens=False)
        ids += tokenizer.encode(text[start:end], add_special_tokens=False, split_special_tokens=True)
        pos = end
    if pos < len(text):
        ids += tokenizer.encode(text[pos:], add_special_tokens=False)
    return ids
