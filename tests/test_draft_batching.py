"""Packed drafting (runtime.batching + DraftHead.forward_packed): the draft forwards of several requests run as one
forward, each request's rows over its own draft cache, and every output equals that request run alone, token for
token: greedy (= plain decoding) and seeded sampling, EAGLE-1 and EAGLE-3 drafts, static and dynamic trees, and
trees that change from round to round with the batch by the load policy (none of these batches reaches a plain
entry: a running request then takes plain steps, tests/test_batching.py). Under sampling, "alone" drafts the trees its
rounds gave it, step by step."""

import contextlib

import pytest
import torch

from eagle_trt.load_policy import LoadPolicy
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.batching import Batcher
from eagle_trt.runtime.draft import DraftCall
from eagle_trt.runtime.verify import SamplingParams

PROMPTS = [[5, 17, 42, 9], [3, 3, 8], [100, 7, 64, 12, 33, 2, 11], [21]]


@pytest.fixture(scope="module", params=["eagle1", "eagle3"])
def decoder(request, tiny_base):
    draft = request.getfixturevalue(f"{request.param}_draft")
    return EagleDecoder.load(tiny_base, draft, tree="chain:3", dtype="int8", max_seq_len=128)


@contextlib.contextmanager
def _counted_draft_forwards(decoder):
    """A list that gets an entry per packed draft forward: per call into C where the draft runs there (an EAGLE-1
    draft under int8 where native-q8 runs), else per call of its layer's MLP."""
    forwards = []
    native = decoder.draft.native
    if native is not None:
        packed = native.forward_packed
        native.forward_packed = lambda head, calls: forwards.append(1) or packed(head, calls)
        try:
            yield forwards
        finally:
            del native.forward_packed  # the class's again
        return
    hook = getattr(decoder.draft, decoder.draft.layer_module).mlp.register_forward_hook(
        lambda *_: forwards.append(1))
    try:
        yield forwards
    finally:
        hook.remove()


def _recording(view, record: dict):
    """`view`'s tree generator, noting in `record` (draft cache id -> views) which view's tree each step drafted."""
    def tree_steps(root, root_draft, length, skipped, draft_cache):
        record.setdefault(id(draft_cache), []).append(view)
        return type(view)._tree_steps(view, root, root_draft, length, skipped, draft_cache)
    return tree_steps


def _run_batched(decoder, policy: str, n, sampling=SamplingParams(), record: dict | None = None):
    """Every prompt admitted at once, `n` tokens each (or n[i]); returns (tokens per request, trees, rounds, draft
    forwards); with `record`, (tokens, trees, the batcher, the slots) and record: per request's draft cache, the
    views whose trees it drafted, step by step."""
    with _counted_draft_forwards(decoder) as forwards:
        batcher = Batcher(decoder, max_batch=len(PROMPTS), policy=LoadPolicy.parse(policy))
        for view in batcher.views.values() if record is not None else ():
            if view.draft is not None:
                view._tree_steps = _recording(view, record)
        slots = [batcher.start(p, n[i] if isinstance(n, list) else n, SamplingParams(sampling.temperature, sampling.top_k, sampling.top_p,
                                                     None if sampling.seed is None else sampling.seed + i), key=i)
                 for i, p in enumerate(PROMPTS)]
        tokens, rounds = {i: [] for i in range(len(PROMPTS))}, 0
        while batcher.active:
            for slot, step in batcher.round():
                tokens[slot.key] += step.token_ids
            rounds += 1
    assert all(s.done and s.error is None for s in slots), [s.error for s in slots]
    if record is not None:
        return tokens, [s.tree for s in slots], batcher, slots
    return tokens, [s.tree for s in slots], rounds, len(forwards)


def _replayed(start, views, prompt, n, sampling):
    """The request alone on `start`'s tree (and root top-k), drafting step by step the trees of `views`."""
    queue = list(views)
    replay = start.with_tree(start.tree)
    replay.root_k_floor = start.root_k_floor
    replay._tree_steps = lambda *args: type(queue[0])._tree_steps(queue.pop(0), *args)
    out = replay.generate_all(prompt, n, sampling).token_ids
    assert not queue, f"{len(queue)} recorded trees left"
    return out


def _alone(decoder, tree, prompt, n, sampling=SamplingParams()):
    """`tree`: a TreeConfig, a --tree value, or None / "none" for plain decoding."""
    plain = tree is None or tree == "none"
    view = decoder.with_tree("chain:1" if plain else tree, speculative=not plain)
    return view.generate_all(prompt, n, sampling).token_ids


def test_packed_draft_forward_equals_each_call_alone(decoder):
    """Two requests' draft calls (different prefixes, a tree block with a mask, top-k of different k) in one
    forward: outputs, top-k and the K/V written equal each call run alone, bit for bit."""
    draft, hidden = decoder.draft, decoder.base.args.hidden_size
    gen = torch.Generator().manual_seed(0)
    feats = draft.base_features(torch.randn(9, hidden, generator=gen),
                                torch.randn(9, 3 * hidden, generator=gen) if draft.format == "eagle3" else None)
    caches = {name: [draft.new_cache(64), draft.new_cache(64)] for name in ("packed", "alone")}
    for cs in caches.values():  # the same prefixes in both copies: 4 and 2 rows
        draft.forward_packed([DraftCall(torch.tensor([5, 17, 42, 9]), feats[:4], torch.arange(4), 0, cs[0]),
                              DraftCall(torch.tensor([3, 8]), feats[4:6], torch.arange(2), 0, cs[1])])
    mask = torch.cat((torch.ones(2, 4, dtype=torch.bool), torch.eye(2, dtype=torch.bool)), dim=1)  # [2, 6] siblings

    def calls(cs):
        return [DraftCall(torch.tensor([7, 11]), feats[6:8], torch.tensor([4, 4]), 4, cs[0], mask, top_k=3),
                DraftCall(torch.tensor([13]), feats[8:9], torch.tensor([2]), 2, cs[1], top_k=2, last_only=True)]
    packed = draft.forward_packed(calls(caches["packed"]))
    alone = [draft.forward_packed([c])[0] for c in calls(caches["alone"])]
    assert packed[0].ids.shape == (2, 3) and packed[1].ids.shape == (1, 2) and packed[1].out.shape[0] == 1
    for p, a in zip(packed, alone):
        assert torch.equal(p.out, a.out) and torch.equal(p.scores, a.scores) and torch.equal(p.ids, a.ids)
    for p, a in zip(caches["packed"], caches["alone"]):
        assert torch.equal(p.k, a.k) and torch.equal(p.v, a.v)
    assert caches["packed"][1].k[:, :, 3:].abs().sum() == 0  # the 1-row call wrote slot 2 of its own cache only


@pytest.mark.parametrize("policy", ["chain:3", "dynamic:2,2,4",
                                    "chain:3;dynamic:2,2,4;static:[[0],[1],[0,0]];chain:2;none"],
                         ids=["static", "dynamic", "mixed"])
def test_packed_drafting_greedy_equals_plain_decoding_alone(decoder, policy):
    """Greedy: every request equals plain decoding of its prompt alone (and the same tree alone); the draft forwards
    of all requests are packed, so a round runs as many draft forwards as the deepest tree needs, not one per
    request and depth."""
    tokens, trees, rounds, forwards = _run_batched(decoder, policy, 12)
    for i, prompt in enumerate(PROMPTS):
        plain = _alone(decoder, "none", prompt, 12)
        assert tokens[i] == plain, f"request {i} ({trees[i]})"
        assert _alone(decoder, trees[i], prompt, 12) == plain
    assert 0 < forwards <= 3 * rounds, (forwards, rounds)  # 3: the update + one forward per expanded depth (at most 2)
    assert rounds <= 13


@pytest.mark.parametrize("policy", ["dynamic:2,2,4", "chain:3;dynamic:2,2,4;chain:2;chain:1;none"],
                         ids=["dynamic", "mixed"])
def test_packed_drafting_sampling_equals_each_request_alone(decoder, policy):
    """Seeded sampling: each request's tokens equal the same request (seed, and the trees its rounds gave it step by
    step) run alone; with one tree, simply the request alone."""
    sampling = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=11)
    record, lengths = {}, [10, 14, 18, 22]  # the batch shrinks 4 -> 3 -> 2 -> 1 as they finish
    tokens, trees, batcher, slots = _run_batched(decoder, policy, lengths, sampling, record)
    for view in batcher.views.values():
        view.tree_now = None  # as the last round left them: the replay drafts what it is given
    for i, prompt in enumerate(PROMPTS):
        seeded = SamplingParams(temperature=0.9, top_k=50, top_p=0.95, seed=11 + i)
        views = record[id(slots[i].caches[1])]
        assert tokens[i] == _replayed(batcher.views[trees[i]], views, prompt, lengths[i], seeded), f"request {i}"
        if ";" not in policy:  # one tree throughout: the request alone, as it would run by itself
            assert tokens[i] == _alone(decoder, trees[i], prompt, lengths[i], seeded), f"request {i} ({trees[i]})"
    changed = [len({v.tree for v in record[id(s.caches[1])]}) > 1 for s in slots]
    assert sum(changed) == (3 if ";" in policy else 0), changed  # the last to finish drafts 4 trees, ..., the first 1
    assert len({tuple(t) for t in tokens.values()}) == len(PROMPTS)  # the requests did not all sample the same


def test_no_draft_cache_is_swapped(decoder):
    """The draft module's own cache is never replaced by a request's: requests carry theirs in their calls."""
    own = decoder.draft.cache
    _run_batched(decoder, "chain:3;dynamic:2,2,4", 6)
    assert decoder.draft.cache is own
