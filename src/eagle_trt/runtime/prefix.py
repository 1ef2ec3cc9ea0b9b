"""Prefix reuse between the turns of a conversation. A finished request's base KV cache still holds the keys and values
of every token it fed (its prompt, then the committed tokens); the next turn's prompt repeats the conversation so far,
so a request whose prompt *continues* a finished one (starts with that request's whole prompt and goes on) prefills
only from where the two token sequences part.

Only on batch-invariant engines (int8, native, native-q8, row-independent fp32: `Llama.batch_invariant`): there a
token's K/V are the same bits whether a prefill block, a verify tree or a plain step computed them, so a reused prefix
gives the output a full prefill gives, bit for bit, and EAGLE still equals plain decoding. A prompt equal to (or a
prefix of) a finished one is prefilled again: re-sending a request is not a conversation going on, and a benchmark that
repeats its prompts measures what a first turn costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HeldTokens:
    """What a KVCache holds at slots 0..len(tokens)-1: the K/V of `tokens`, of which the first `prompt_len` were the
    prompt of the request that wrote them."""

    prompt_len: int
    tokens: tuple[int, ...]


def reusable_prefix(held: HeldTokens | None, prompt: Sequence[int]) -> int:
    """How many leading tokens of `prompt` a cache holding `held` serves: 0 unless `prompt` continues that request
    (its whole prompt, then more), else the common prefix, leaving at least the prompt's last token to run (its logits
    give the first new token)."""
    n = 0 if held is None else held.prompt_len
    if held is None or len(prompt) <= n or tuple(prompt[:n]) != held.tokens[:n]:
        return 0
    limit = min(len(held.tokens), len(prompt) - 1)
    while n < limit and held.tokens[n] == prompt[n]:
        n += 1
    return n


def copy_prefix(src, dst, tokens: int) -> None:
    """Copy the K/V of the first `tokens` slots of KVCache `src` into `dst` (a larger cache for a longer request), and
    what they hold."""
    dst.k[:, :, :tokens] = src.k[:, :, :tokens]  # [layers, kv_heads, tokens, head_dim]
    dst.v[:, :, :tokens] = src.v[:, :, :tokens]
    dst.held = HeldTokens(src.held.prompt_len, src.held.tokens[:tokens])
