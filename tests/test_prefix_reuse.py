"""Prefix reuse between the turns of a conversation (runtime.prefix): a request whose prompt continues a finished one
prefills only what is new, on batch-invariant engines, and its output is the bits a full prefill gives."""

import pytest

from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.runtime.prefix import HeldTokens, reusable_prefix

FIRST = [5, 17, 42, 9, 3, 3, 8, 100, 7, 64]


def _run(batcher: Batcher, prompt: list[int], n: int):
    """(tokens, the request's stats, prompt rows its prefill ran)."""
    slot = batcher.start(prompt, n)
    rows = []
    forward = batcher.decoder.base.forward_packed

    def counting(calls, capture=()):
        rows.extend(c.input_ids.shape[0] for c in calls if c.last_logits_only)
        return forward(calls, capture)

    batcher.decoder.base.forward_packed = counting
    try:
        tokens = []
        while batcher.active:
            for _, step in batcher.round():
                tokens = tokens[:len(tokens) - step.retract] + step.token_ids
    finally:
        del batcher.decoder.base.forward_packed
    assert slot.error is None
    return tokens, slot.generation.stats, rows


def _alone(decoder: EagleDecoder, prompt: list[int], n: int) -> list[int]:
    """Plain decoding of `prompt` from a full prefill (generate alone does not reuse)."""
    return decoder.with_tree("chain:1", speculative=False).generate_all(prompt, n).token_ids


def test_continuation_rule():
    held = HeldTokens(3, (1, 2, 3, 4, 5, 6))
    assert reusable_prefix(held, [1, 2, 3, 4, 5, 9, 9]) == 5  # goes on past the prompt: the common prefix
    assert reusable_prefix(held, [1, 2, 3, 4, 5, 6, 7, 8]) == 6  # all of it
    assert reusable_prefix(held, [1, 2, 3, 4, 5, 6]) == 5  # the last token still runs: its logits are the answer
    assert reusable_prefix(held, [1, 2, 3]) == 0  # the same prompt again: a re-sent request, prefilled again
    assert reusable_prefix(held, [1, 2]) == 0
    assert reusable_prefix(held, [1, 2, 4, 4, 5]) == 0  # parts inside that request's prompt: another conversation
    assert reusable_prefix(None, [1, 2, 3, 4]) == 0


@pytest.mark.parametrize("draft_fixture", ["eagle1_draft", "eagle3_draft"])
@pytest.mark.parametrize("policy", ["chain:3", "none"])
def test_a_next_turn_prefills_only_what_is_new_and_computes_the_same_bits(tiny_base, draft_fixture, policy, request):
    decoder = EagleDecoder.load(tiny_base, request.getfixturevalue(draft_fixture), tree="chain:3", dtype="int8",
                                max_seq_len=512)
    batcher = Batcher(decoder, max_batch=2, policy=LoadPolicy.parse(policy))
    answer, stats, rows = _run(batcher, FIRST, 12)
    assert stats.cached_prompt_tokens == 0 and rows == [len(FIRST)]
    second = FIRST + answer[:10] + [11, 12, 13]  # the conversation so far, then the next turn's words
    held = reusable_prefix(decoder.base.cache.held, second)
    assert held >= len(FIRST) + 10
    tokens, stats, rows = _run(batcher, second, 16)
    assert stats.cached_prompt_tokens == held and rows == [len(second) - held]  # only the new turn ran
    assert tokens == _alone(decoder, second, 16)
    again, stats, rows = _run(batcher, list(second), 4)  # re-sent as it was: a full prefill
    assert stats.cached_prompt_tokens == 0 and rows == [len(second)]
    assert again == tokens[:4]


def test_a_held_prefix_moves_to_a_larger_cache_when_the_conversation_outgrows_its_own(tiny_base, eagle1_draft):
    from eagle_trt.runtime.batching import MIN_CACHE_TOKENS

    decoder = EagleDecoder.load(tiny_base, eagle1_draft, tree="chain:3", dtype="int8", max_seq_len=1024)
    batcher = Batcher(decoder, max_batch=1, policy=LoadPolicy.parse("chain:3"))
    batcher.spare.clear()  # no max_seq_len pair: every request gets a bucket of its size
    answer, _, _ = _run(batcher, FIRST, 12)  # a MIN_CACHE_TOKENS bucket
    (held,) = batcher.spare
    assert held[0].max_len < 2 * MIN_CACHE_TOKENS
    second = FIRST + answer + [11] * (MIN_CACHE_TOKENS - len(FIRST))  # too long for that bucket
    reused = reusable_prefix(held[0].held, second)
    assert reused >= len(FIRST) + len(answer) - 1  # all but the last answer token (never fed) at least
    tokens, stats, rows = _run(batcher, second, 20)
    assert stats.cached_prompt_tokens == reused and rows == [len(second) - reused]
    assert len(batcher.spare) == 2 and held in batcher.spare  # a new, larger pair, and the old one
    assert held[0].held is None  # the conversation went on: what the old pair held is superseded
    assert tokens == _alone(decoder, second, 20)
    other = batcher.start([1, 2, 3], 4)  # a pair that holds nothing comes first
    assert other.caches is held
    batcher.cancel(other)
    third = second + tokens + [12]
    unrelated = batcher.start([1, 2, 3, 4], 4)  # the pool is full (max_batch + 1): the pair that finished first
    assert unrelated.caches is held  # (it holds nothing: `other` was cancelled before its prefill)
    while batcher.active:
        batcher.round()
    assert _run(batcher, third, 4)[1].cached_prompt_tokens >= len(second) + len(tokens) - 1  # still held


def test_no_reuse_where_the_engine_is_not_batch_invariant_or_it_is_off(tiny_base, eagle1_draft):
    decoder = EagleDecoder.load(tiny_base, eagle1_draft, tree="chain:3", dtype="int8", max_seq_len=256)
    answer, _, _ = _run(Batcher(decoder, 1, LoadPolicy.parse("chain:3")), FIRST, 8)
    second = FIRST + answer + [11, 12]
    off = Batcher(decoder, 1, LoadPolicy.parse("chain:3"), reuse_prefix=False)
    assert _run(off, second, 4)[1].cached_prompt_tokens == 0
    decoder.base.batch_invariant = False  # e.g. bf16 on a GPU: a token's K/V depend on the block it ran in
    try:
        _run(Batcher(decoder, 1, LoadPolicy.parse("chain:3")), FIRST, 8)
        assert _run(Batcher(decoder, 1, LoadPolicy.parse("chain:3")), second, 4)[1].cached_prompt_tokens == 0
    finally:
        decoder.base.batch_invariant = True


def test_native_engines_reuse_a_turn_exactly():
    """The fused C forward on the demo GGUF (native-q8 where this CPU runs it, else native): a second turn's output
    from a held prefix equals its output from a full prefill."""
    from transformers import AutoTokenizer

    from eagle_trt.datasets import encode_conversation, mtbench_prompts
    from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
    from eagle_trt.kernels.cpu_build import cpu_supports_native

    gguf = materialize_demo_gguf_base()
    dtype = "native" if cpu_supports_native(q8=True) else "native-q8"
    decoder = EagleDecoder.load(gguf, shipped_draft_dir("eagle1"), tree="chain:3", dtype=dtype, max_seq_len=512)
    tok = AutoTokenizer.from_pretrained(gguf)
    prompt = mtbench_prompts()[2]
    batcher = Batcher(decoder, 2, LoadPolicy.parse("chain:3"))
    answer, _, _ = _run(batcher, encode_conversation(tok, [prompt.text], []), 24)
    second = encode_conversation(tok, list(prompt.turns), [tok.decode(answer, skip_special_tokens=True)])
    tokens, stats, _ = _run(batcher, second, 24)
    assert stats.cached_prompt_tokens > len(second) // 2
    assert tokens == _alone(decoder, second, 24)
