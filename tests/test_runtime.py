"""The PyTorch EAGLE runtime on tiny models: greedy identity (random, oracle drafts; HF transformers), stops,
budgets, trees, bad input."""

import pytest
import torch

from eagle_trt.errors import EagleTrtError
from eagle_trt.runtime import EagleDecoder, SamplingParams
from eagle_trt.runtime.draft import DraftCall
from eagle_trt.runtime.drafting import dynamic_tree, run_alone
from runtime_helpers import OracleDraft, tiny_decoder

TREES = ["chain:1", "chain:4", "static:mc_sim_7b_63", "static:eagle_default", "static:[[0],[1],[0,0],[0,1],[1,0]]",
         "dynamic:3,4,10", "dynamic:5,8,48", "chain:2+suffix:1,4", "dynamic:3,4,10+suffix:2,6"]
PROMPTS = [list(range(5, 30)), [1, 77, 88, 99, 2], [300, 12]]


@pytest.fixture(scope="module")
def plain_outputs(tiny_base):
    decoder = EagleDecoder.load(tiny_base, None)
    return {tuple(p): decoder.generate_all(p, 48).token_ids for p in PROMPTS}


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("draft_name", ["eagle1_draft", "eagle1_draft_nobias", "eagle3_draft"])
def test_greedy_identity_with_random_draft(request, tiny_base, plain_outputs, tree, draft_name):
    decoder = EagleDecoder.load(tiny_base, request.getfixturevalue(draft_name), tree=tree)
    for prompt in PROMPTS:
        result = decoder.generate_all(prompt, 48)
        assert result.token_ids == plain_outputs[tuple(prompt)]
        assert result.finish_reason == "length" and len(result.token_ids) == 48
        lengths = result.stats.accepted_lengths  # the root from prefill, then each step's tokens; the last one cut
        assert result.stats.steps == len(lengths) and 1 + sum(lengths[:-1]) < 48 <= 1 + sum(lengths)


def test_suffix_candidates_are_verified_and_accepted(tiny_base, eagle1_draft, plain_outputs):
    """The tiny model's greedy text repeats itself: the automaton proposes, the base accepts some, output unchanged."""
    decoder = EagleDecoder.load(tiny_base, eagle1_draft, tree="chain:1+suffix:2,8")
    proposed = accepted = 0
    for prompt in PROMPTS:
        result = decoder.generate_all(prompt, 48)
        assert result.token_ids == plain_outputs[tuple(prompt)]
        proposed += result.stats.num_suffix_tokens
        accepted += result.stats.num_accepted_suffix_tokens
        assert result.stats.num_accepted_suffix_tokens <= result.stats.num_accepted_draft_tokens
    assert proposed > 0 and accepted > 0, (proposed, accepted)
    without = EagleDecoder.load(tiny_base, eagle1_draft, tree="chain:1").generate_all(PROMPTS[0], 48).stats
    assert without.num_suffix_tokens == 0


def _drive(decoder, prompt, max_tokens):
    """Run one request by hand: (its tokens, every DraftCall it made)."""
    from eagle_trt.runtime.generation import StepOutput

    gen, tokens, calls = decoder.generate(prompt, max_tokens), [], []
    with torch.inference_mode():
        while True:
            try:
                item = gen.advance()
            except StopIteration:
                return tokens, calls
            if isinstance(item, StepOutput):
                tokens = tokens[:len(tokens) - item.retract] + item.token_ids
            elif isinstance(item, DraftCall):
                calls.append(item)
                gen.answer(decoder.draft.forward_packed([item])[0])
            else:
                gen.answer(decoder.base.forward_packed([item], decoder.capture)[0])


@pytest.mark.parametrize("tree", ["chain:3", "dynamic:3,4,10+suffix:2,6"])
@pytest.mark.parametrize("draft_name", ["eagle1_draft", "eagle3_draft"])
def test_draft_window_reads_sinks_and_latest_positions(request, tiny_base, plain_outputs, tree, draft_name):
    """A draft window of 8 on a 25-token prompt: the draft's prompt pass reads positions 0-3 and 21-24 into slots
    0-7, every later draft row keeps its true position 17 past its slot, and the output is plain decoding's."""
    decoder = EagleDecoder.load(tiny_base, request.getfixturevalue(draft_name), tree=tree)
    decoder.draft_window = 8
    prompt = PROMPTS[0]
    tokens, calls = _drive(decoder, prompt, 48)
    assert tokens == plain_outputs[tuple(prompt)]
    assert calls[0].positions.tolist() == [0, 1, 2, 3, 21, 22, 23, 24] and calls[0].start == 0
    updates = [c for c in calls[1:] if c.mask is None]  # the accepted paths (trees carry a mask)
    assert updates and all(c.positions.tolist() == list(range(c.start + 17, c.start + 17 + len(c.positions)))
                           for c in updates)
    if tree == "chain:3":  # one row per depth: row d sits at slot stable + d - 1, position 17 further
        assert all(c.positions.tolist() == [c.start + 17] for c in calls[1:] if c.mask is not None)
    whole = decoder.with_tree(tree)
    whole.draft_window = 0
    assert _drive(whole, prompt, 8)[1][0].positions.tolist() == list(range(25))


def test_plain_decoding_equals_hf_transformers(tiny_base, plain_outputs):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    for prompt in PROMPTS:
        out = model.generate(torch.tensor([prompt]), max_new_tokens=48, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(prompt):].tolist()
        assert out == plain_outputs[tuple(prompt)]


@pytest.mark.parametrize("tree, depth", [("chain:4", 4), ("static:mc_sim_7b_63", 4), ("static:eagle_default", 5),
                                         ("dynamic:3,4,10", 4)])
def test_oracle_draft_reaches_tree_depth(tiny_base, plain_outputs, tree, depth):
    prompt = PROMPTS[0]
    seq = prompt + plain_outputs[tuple(prompt)]
    decoder = EagleDecoder.load(tiny_base, None, tree=tree)
    decoder = decoder.with_draft(OracleDraft(seq, decoder.base.args.vocab_size))
    result = decoder.generate_all(prompt, 48)
    assert result.token_ids == plain_outputs[tuple(prompt)]
    lengths = result.stats.accepted_lengths
    assert all(a == depth + 1 for a in lengths[:-1]), lengths  # every full step accepts a whole path
    assert result.stats.mean_accepted_length > depth
    assert result.stats.acceptance_rate > 0


def test_stop_token_inside_accepted_path(tiny_base, plain_outputs):
    prompt = PROMPTS[0]
    seq = prompt + plain_outputs[tuple(prompt)]
    stop = plain_outputs[tuple(prompt)][10]
    first = plain_outputs[tuple(prompt)].index(stop)
    decoder = EagleDecoder.load(tiny_base, None, tree="chain:6")
    decoder = decoder.with_draft(OracleDraft(seq, decoder.base.args.vocab_size))
    result = decoder.generate_all(prompt, 48, stop_token_ids=[stop])
    assert result.token_ids == plain_outputs[tuple(prompt)][: first + 1]
    assert result.finish_reason == "stop"


@pytest.mark.parametrize("budget", [1, 2, 5, 7, 13])
def test_max_tokens_is_exact_with_long_accepts(tiny_base, plain_outputs, budget):
    prompt = PROMPTS[0]
    decoder = EagleDecoder.load(tiny_base, None, tree="chain:6")
    decoder = decoder.with_draft(OracleDraft(prompt + plain_outputs[tuple(prompt)], decoder.base.args.vocab_size))
    result = decoder.generate_all(prompt, budget)
    assert result.token_ids == plain_outputs[tuple(prompt)][:budget] and result.finish_reason == "length"


def test_stop_string(tiny_base, eagle1_draft):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base)
    decoder = EagleDecoder.load(tiny_base, eagle1_draft, tree="chain:3")
    full = decoder.generate_all(PROMPTS[0], 30)
    text = tok.decode(full.token_ids)
    needle = text[len(text) // 2: len(text) // 2 + 2]
    cut = decoder.generate_all(PROMPTS[0], 30, stop_strings=[needle], tokenizer=tok)
    assert cut.finish_reason == "stop" and needle in tok.decode(cut.token_ids)
    assert needle not in tok.decode(cut.token_ids[:-1])
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)]


def test_streaming_steps_concatenate_to_the_result(tiny_base, eagle1_draft):
    decoder = EagleDecoder.load(tiny_base, eagle1_draft, tree="dynamic:3,4,10")
    steps = list(decoder.generate(PROMPTS[1], 20))
    assert [t for s in steps for t in s.token_ids] == decoder.generate_all(PROMPTS[1], 20).token_ids
    assert steps[-1].finish_reason == "length" and all(s.finish_reason is None for s in steps[:-1])


def test_seeded_sampling_is_reproducible(tiny_base, eagle1_draft):
    decoder = EagleDecoder.load(tiny_base, eagle1_draft, tree="dynamic:3,4,10")
    params = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=7)
    a = decoder.generate_all(PROMPTS[0], 30, params).token_ids
    assert a == decoder.generate_all(PROMPTS[0], 30, params).token_ids
    assert a != decoder.generate_all(PROMPTS[0], 30, SamplingParams(temperature=0.9, seed=8)).token_ids


def test_dynamic_tree_node_count_and_parents_first():
    decoder = tiny_decoder("dynamic:4,3,12", vocab=50)
    decoder.base.setup_cache(64)
    prompt = [1, 2, 3, 4]
    torch.manual_seed(0)
    ids = torch.tensor(prompt)
    _, hidden, _ = decoder.base(ids, torch.arange(4), 0)
    cache = decoder.draft.cache
    root = decoder.draft.forward_packed([DraftCall(torch.tensor([2, 3, 4, 5]), hidden, torch.arange(4), 0, cache,
                                                  top_k=3, last_only=True)])[0]
    tree = run_alone(decoder.draft, dynamic_tree(4, 3, 12, 5, root, 4, cache))
    assert tree.num_draft_tokens == 12 and tree.tokens[0].item() == 5
    assert all(0 <= p < i for i, p in enumerate(tree.parents) if i)  # parents come first
    assert tree.depths.max().item() <= 5
    mask = tree.mask
    assert torch.equal(mask, mask.tril()) and mask[:, 0].all()
    assert all(mask[i].sum().item() == tree.depths[i].item() + 1 for i in range(len(tree.parents)))


@pytest.mark.parametrize("kwargs, words", [
    ({"max_new_tokens": 0}, "'max_new_tokens' must be between 1 and 509"),
    ({"max_new_tokens": -3}, "'max_new_tokens' must be between 1"),
    ({"max_new_tokens": 2.5}, "'max_new_tokens' must be an integer"),
    ({"input_ids": []}, "empty"),
    ({"input_ids": [10**6]}, "'input_ids' must be between 0 and"),
    ({"input_ids": list(range(5, 300)) * 2}, r"max_seq_len 512 minus 590 prompt tokens"),
    ({"stop_strings": ["x"]}, "need a tokenizer"),
])
def test_bad_requests(tiny_base, eagle1_draft, kwargs, words):
    decoder = EagleDecoder.load(tiny_base, eagle1_draft, tree="chain:2", max_seq_len=512)
    args = {"input_ids": [5, 6, 7], "max_new_tokens": 10} | kwargs
    with pytest.raises(EagleTrtError, match=words):
        decoder.generate_all(**args)


def test_bad_sampling_params():
    with pytest.raises(EagleTrtError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(EagleTrtError, match="top_p"):
        SamplingParams(temperature=1, top_p=0)
    with pytest.raises(EagleTrtError, match="top_k"):
        SamplingParams(temperature=1, top_k=-2)


def test_mismatched_draft_is_refused(tiny_base, tmp_path):
    import builders

    other = builders.make_base(tmp_path / "other", builders.TinyDims(hidden_size=32, num_attention_heads=2,
                                                                       num_key_value_heads=1))
    draft = builders.make_eagle1_draft(tmp_path / "d", other)
    with pytest.raises(EagleTrtError, match="hidden_size 32 != base hidden_size 64"):
        EagleDecoder.load(tiny_base, draft)
    with pytest.raises(EagleTrtError, match="unknown tree 'bogus'"):
        EagleDecoder.load(tiny_base, None, tree="bogus")
