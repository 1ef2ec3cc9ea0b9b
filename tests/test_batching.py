"""runtime.batching: several requests, one packed base forward per round; outputs equal each request run alone."""

import json
import math

import pytest
import torch

from eagle_trt.errors import EagleTrtError
from eagle_trt.runtime import EagleDecoder
from eagle_trt.load_policy import LoadPolicy, resolve_load_policy
from eagle_trt.runtime.batching import Batcher
from eagle_trt.runtime.model import BaseCall
from eagle_trt.tree_config import resolve

PROMPTS = [[5, 17, 42, 9], [3, 3, 8], [100, 7, 64, 12, 33, 2, 11], [21]]


@pytest.fixture(scope="module")
def int8_decoder(tiny_base, eagle1_draft):
    return EagleDecoder.load(tiny_base, eagle1_draft, tree="chain:3", dtype="int8", max_seq_len=128)


def _plain_alone(decoder, prompt, n):
    return decoder.with_tree("chain:1", speculative=False).generate_all(prompt, n).token_ids


def test_packed_forward_equals_separate_forwards(tiny_base):
    decoder = EagleDecoder.load(tiny_base, None, tree="chain:1", max_seq_len=64)
    base = decoder.base
    a, b = torch.tensor([5, 17, 42]), torch.tensor([9, 1])  # [3], [2]
    caches = [base.new_cache(64), base.new_cache(64)]
    with torch.inference_mode():
        packed = base.forward_packed([BaseCall(a, torch.arange(3), 0, None, caches[0]),
                                      BaseCall(b, torch.arange(2), 0, None, caches[1])])
        alone_a = base.forward_packed([BaseCall(a, torch.arange(3), 0, None, base.new_cache(64))])[0]
        alone_b = base.forward_packed([BaseCall(b, torch.arange(2), 0, None, base.new_cache(64))])[0]
    assert packed[0][0].shape == (3, base.args.vocab_size) and packed[1][0].shape == (2, base.args.vocab_size)
    torch.testing.assert_close(packed[0][0], alone_a[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed[1][0], alone_b[0], rtol=1e-5, atol=1e-5)
    assert caches[1].k[:, :, 2:].abs().sum() == 0  # b wrote its 2 rows into its own cache only


def test_batched_eagle_is_identical_to_plain_decoding_alone(int8_decoder):
    """Four requests admitted at once: the policy gives them different trees (and plain decoding); every output
    equals the same engine's plain int8 decoding of that prompt alone, token for token."""
    batcher = Batcher(int8_decoder, max_batch=4, policy=LoadPolicy.parse("chain:3;dynamic:2,2,4;chain:1;chain:2"))
    slots = [batcher.start(p, 12, key=i) for i, p in enumerate(PROMPTS)]
    assert [s.tree_label for s in slots] == ["chain:3", "dynamic:2,2,4", "chain:1", "chain:2"]
    assert slots[0].tree == resolve("chain:3")
    tokens = {i: [] for i in range(len(PROMPTS))}
    rounds = 0
    while batcher.active:
        for slot, step in batcher.round():
            tokens[slot.key] += step.token_ids
        rounds += 1
    assert all(s.done and s.error is None for s in slots)
    for i, prompt in enumerate(PROMPTS):
        assert tokens[i] == _plain_alone(int8_decoder, prompt, 12), f"request {i} ({slots[i].tree_label})"
    assert rounds <= 13  # one base forward per round for all four, not one per request


def test_emit_hands_out_each_step_before_the_next_forward_runs(int8_decoder, monkeypatch):
    """With `emit`, a step's tokens leave the round before the next base forward (the first token right after the
    prefill: returned at the round's end, it would wait for a whole verify step); the tokens are those of `round()`
    without it, and none comes twice."""
    forwards = []
    packed = int8_decoder.base.forward_packed
    monkeypatch.setattr(int8_decoder.base, "forward_packed",
                        lambda calls, capture=(): forwards.append(len(calls)) or packed(calls, capture))
    batcher = Batcher(int8_decoder, max_batch=2, policy=LoadPolicy.parse("chain:3;chain:2"))
    slots = [batcher.start(p, 10, key=i) for i, p in enumerate(PROMPTS[:2])]
    tokens, seen_after = {0: [], 1: []}, []

    def emit(events):
        for slot, step in events:
            tokens[slot.key] += step.token_ids
            seen_after.append(len(forwards))

    while batcher.active:
        returned = batcher.round(emit=emit)
        assert returned == []  # every output went through emit
    assert all(s.done and s.error is None for s in slots)
    assert seen_after[:2] == [1, 1]  # both first tokens after the one packed prefill, before any verify forward
    for i, prompt in enumerate(PROMPTS[:2]):
        assert tokens[i] == _plain_alone(int8_decoder, prompt, 10)


def test_running_requests_decode_plainly_while_the_batch_is_a_plain_one(int8_decoder):
    """Policy chain:3 alone, plain at 2: a request that started alone takes plain steps while a second one runs, and
    speculates again once it is alone; outputs stay those of plain decoding alone."""
    batcher = Batcher(int8_decoder, max_batch=2, policy=LoadPolicy.parse("chain:3;none"))
    first = batcher.start(PROMPTS[0], 40, key=0)
    tokens = {0: [], 1: []}
    for _ in range(2):  # alone: it speculates
        for slot, step in batcher.round():
            tokens[slot.key] += step.token_ids
    second = batcher.start(PROMPTS[1], 6, key=1)
    assert second.tree is None
    while batcher.active:
        for slot, step in batcher.round():
            tokens[slot.key] += step.token_ids
    stats = first.generation.stats
    assert tokens[0] == _plain_alone(int8_decoder, PROMPTS[0], 40)
    assert tokens[1] == _plain_alone(int8_decoder, PROMPTS[1], 6)
    assert 0 < stats.num_plain_steps < stats.steps  # plain beside the second request, speculative alone
    assert max(stats.accepted_lengths) > 1 or stats.num_draft_tokens > 0


def _draft_tokens_per_round(batcher, slots):
    """Run `batcher` to the end: per round, (the tree its requests drafted, as the Batcher set it: a label or None,
    {key: draft tokens that request's tree held}) and each request's tokens. A step's figures are counted when its
    verify answer is read, at the start of the next round."""
    rounds, tokens, tree = [], {s.key: [] for s in slots}, None
    view = next(iter(batcher.views.values()))
    while batcher.active:
        before = {s.key: s.generation.stats.num_draft_tokens for s in slots}
        for slot, step in batcher.round():
            tokens[slot.key] += step.token_ids
        if rounds or tree is not None:
            rounds.append((tree, {s.key: s.generation.stats.num_draft_tokens - before[s.key] for s in slots}))
        tree = None if view.plain_now or view.tree_now is None else view.tree_now.tree.label()
    return rounds, tokens


def test_every_request_drafts_the_tree_of_the_rounds_batch(int8_decoder):
    """Policy chain:3 alone, chain:1 at 2: a request that started alone drafts one token a step while a second one
    runs, and whichever runs alone at the end drafts three. Outputs stay those of plain decoding alone."""
    batcher = Batcher(int8_decoder, max_batch=2, policy=LoadPolicy.parse("chain:3;chain:1"))
    first = batcher.start(PROMPTS[0], 30, key=0)
    batcher.round()  # its prefill
    second = batcher.start(PROMPTS[2], 12, key=1)
    assert (first.tree_label, second.tree_label) == ("chain:3", "chain:1")  # the policy's tree when each started
    rounds, tokens = _draft_tokens_per_round(batcher, [first, second])
    both = [d for tree, d in rounds if tree == "chain:1"]
    assert both and all(n in (0, 1) for d in both for n in d.values()), rounds  # the first drafts chain:1 too
    assert any(d[0] == 1 for d in both) and any(d[1] == 1 for d in both), rounds
    alone = [d for tree, d in rounds if tree == "chain:3"]
    assert any(d[0] == 3 for d in alone) and all(n in (0, 3) for d in alone for n in d.values()), rounds
    assert tokens[0] == _plain_alone(int8_decoder, PROMPTS[0], 30)
    assert tokens[1] == _plain_alone(int8_decoder, PROMPTS[2], 12)


def test_a_request_started_in_a_plain_batch_drafts_once_the_batch_shrinks(int8_decoder):
    """Policy chain:2 alone, plain at 2: the request that starts second (plain by the policy) takes plain steps beside
    the first, and drafts (its draft catching up on the prompt and the steps it skipped) once it runs alone."""
    batcher = Batcher(int8_decoder, max_batch=2, policy=LoadPolicy.parse("chain:2;none"))
    first = batcher.start(PROMPTS[0], 4, key=0)
    second = batcher.start(PROMPTS[1], 40, key=1)
    assert second.tree is None
    rounds, tokens = _draft_tokens_per_round(batcher, [first, second])
    assert any(d[1] == 2 for tree, d in rounds if tree == "chain:2"), rounds
    stats = second.generation.stats
    assert 0 < stats.num_plain_steps < stats.steps and stats.num_draft_tokens > 0  # (its τ: tests/test_backoff.py)
    assert tokens[1] == _plain_alone(int8_decoder, PROMPTS[1], 40)


def _fake_round_clock(monkeypatch, decoder, seconds_of) -> list[float]:
    """A fake clock for a Batcher: time moves only in the base forward, by `seconds_of(calls)` (a round's seconds,
    all of them charged to its verify forward). Returns the clock's [now]."""
    now = [0.0]
    forward = decoder.base.forward_packed

    def timed(calls, *args, **kwargs):
        now[0] += seconds_of(calls)
        return forward(calls, *args, **kwargs)

    monkeypatch.setattr(decoder.base, "forward_packed", timed)
    return now


@pytest.mark.parametrize("owner", ["decoder", "batcher"])
def test_a_batch_backs_off_to_plain_rounds_while_they_commit_more_per_second(int8_decoder, owner, monkeypatch):
    """With backoff, a batch of 2 times its rounds (a fake clock here: plain rounds 10 ms, speculative ones 20 ms or
    5 ms, 50 ms more for one after plain rounds) and speculates only while that commits more tokens per second per
    request. The tiny random draft accepts little: at 20 ms the batch runs plain rounds after its first
    measurements, at 5 ms it keeps speculating. Outputs
    equal plain decoding alone either way. The backoff is the decoder's (which also backs off a request alone) or
    the Batcher's `batch_backoff` (what a served engine gets by default): then a request alone keeps drafting."""
    from eagle_trt.runtime.backoff import BATCH_PROBE_ROUNDS, Backoff

    plain_rounds = {}
    backoff = Backoff(first_probe=3, probe_steps=2, interval=8, max_interval=32)
    for spec_s in (0.02, 0.005):
        decoder = int8_decoder.with_backoff(backoff) if owner == "decoder" else int8_decoder
        batcher = Batcher(decoder, max_batch=2, policy=LoadPolicy.parse("chain:3;chain:3"),
                          batch_backoff=backoff if owner == "batcher" else None)
        view = batcher.views[resolve("chain:3")]
        last_plain = [False]

        def seconds_of(calls, view=view, spec_s=spec_s, last_plain=last_plain):  # its mode's, + the drafts'
            catch_up = 0.05 if last_plain[0] and not view.plain_now else 0.0  # catch-up after plain rounds
            last_plain[0] = view.plain_now
            return (0.01 if view.plain_now else spec_s) + catch_up

        now = _fake_round_clock(monkeypatch, int8_decoder, seconds_of)
        batcher.clock = lambda now=now: now[0]
        slots = [batcher.start(p, 40, key=i) for i, p in enumerate(PROMPTS[:2])]
        tokens, modes = {0: [], 1: []}, []
        while batcher.active:
            for slot, step in batcher.round():
                tokens[slot.key] += step.token_ids
            modes.append(view.plain_now)
        assert all(s.error is None for s in slots)
        for i in range(2):
            assert tokens[i] == _plain_alone(int8_decoder, PROMPTS[i], 40)
        plain_rounds[spec_s] = (modes.count(True), len(modes))
        # a round speculating after plain ones (the drafts' catch-up) is not timed as a speculative round
        assert 2 in batcher.batch_backoff and batcher.batch_backoff[2].times.seconds[True] == pytest.approx(spec_s)
        assert batcher.batch_backoff[2].cfg == backoff.for_batches()  # either owner's schedule, with the batch margin
        assert batcher.batch_backoff[2].price() == batcher.rows[2].spec_rate(2)  # probes priced by its row costs
        alone = batcher.start(PROMPTS[2], 30, key=2)  # under the same clock, alone
        while batcher.active:
            batcher.round()
        assert alone.error is None and alone.generation.stats.steps > 0
        if owner == "batcher":
            assert alone.generation.stats.num_plain_steps == 0, "a request alone backed off without per-request backoff"
    slow, fast = plain_rounds[0.02], plain_rounds[0.005]
    assert slow[0] > slow[1] // 2, plain_rounds  # mostly plain where speculating loses
    # plain probes (Backoff.for_batches: BATCH_PROBE_ROUNDS timed rounds after an untimed first) only where the
    # plain time went stale: two in 40 rounds
    assert fast[0] <= 2 * (BATCH_PROBE_ROUNDS + 1) < slow[0], plain_rounds


def test_a_batch_verifies_the_draft_nodes_its_rows_pay_for(int8_decoder, monkeypatch):
    """runtime.batch_backoff: a draft that is an oracle for one prompt (its chain:2 nodes at log-prob 0, accepted)
    and proposes fillers at log-prob -3 for the other; a fake clock charges a base forward 5 ms + 2 ms per draft row.
    Once plain and speculative rounds are timed, a round verifies the good request's 2 nodes and none of the other's
    (4 tokens in 9 ms against 4.05 in 13 ms with all, 3 in 7 ms with one, 2 in 5 ms with none), and both outputs
    equal plain decoding alone."""
    from eagle_trt.runtime.backoff import Backoff
    from runtime_helpers import OracleDraft

    good, other = PROMPTS[0], PROMPTS[2]
    expected = {0: _plain_alone(int8_decoder, good, 120), 1: _plain_alone(int8_decoder, other, 60)}
    decoder = int8_decoder.with_draft(OracleDraft(good + expected[0], int8_decoder.base.args.vocab_size, -3.0))
    batcher = Batcher(decoder, max_batch=2, policy=LoadPolicy.parse("chain:2;chain:2"),
                      batch_backoff=Backoff(first_probe=3, probe_steps=2, interval=8, max_interval=32))
    batcher.spare.clear()  # the decoder's own caches belong to the module's other Batchers
    verified = []  # per round of 2: draft rows of each request

    def seconds_of(calls):
        rows = [call.input_ids.numel() - 1 for call in calls]
        if len(calls) == 2 and all(call.start > 0 for call in calls):
            verified.append(rows)
        return 0.005 + 0.002 * sum(rows)

    now = _fake_round_clock(monkeypatch, int8_decoder, seconds_of)
    batcher.clock = lambda: now[0]
    slots = [batcher.start(p, len(expected[i]), key=i) for i, p in enumerate((good, other))]
    tokens = {0: [], 1: []}
    while batcher.active:
        for slot, step in batcher.round():
            tokens[slot.key] += step.token_ids
    assert all(s.error is None for s in slots)
    assert tokens == expected
    rows = batcher.rows[2]
    assert rows.verify[0] == pytest.approx(0.005) and rows.verify[4] == pytest.approx(0.013) and rows.rest == 0
    late = verified[len(verified) // 2:]
    assert late.count([2, 0]) >= 0.8 * len(late), verified
    good_stats = slots[0].generation.stats  # its speculative rounds commit its 2 nodes and the bonus token
    spec_steps = good_stats.steps - good_stats.num_plain_steps
    assert (sum(good_stats.accepted_lengths) - good_stats.num_plain_steps) / spec_steps > 2.5


def test_prune_keeps_the_most_likely_connected_nodes():
    """runtime.drafting.prune: a tree root - a (-0.1) - b (-0.5), root - c (-0.3) - d (-1.2): the best 2 are a and
    c, the best 3 add b (its parent a kept); scores, tokens and parents follow; keep 0 is the bare root."""
    from eagle_trt.runtime.drafting import DraftTree, prune

    tree = DraftTree.from_parents(torch.tensor([7, 11, 12, 13, 14]), [-1, 0, 1, 0, 3], "cpu",
                                  torch.tensor([-0.1, -0.5, -0.3, -1.2]))
    two = prune(tree, 2)
    assert two.tokens.tolist() == [7, 11, 13] and two.parents == [-1, 0, 0]
    assert two.scores.tolist() == pytest.approx([-0.1, -0.3])
    three = prune(tree, 3)
    assert three.tokens.tolist() == [7, 11, 12, 13] and three.parents == [-1, 0, 1, 0]
    assert three.mask.tolist()[2] == [True, True, True, False]  # b sees the root, a and itself
    assert prune(tree, 4) is tree and prune(tree, 9) is tree
    bare = prune(tree, 0)
    assert bare.tokens.tolist() == [7] and bare.num_draft_tokens == 0


def test_a_request_iterated_alone_verifies_its_whole_offered_tree(int8_decoder):
    """A decoder left `batched` by a Batcher and then run alone: its requests still offer their trees (TreeOffer)
    and Generation answers them with every node, so the output equals plain decoding and whole trees are verified."""
    view = int8_decoder.with_tree("chain:3")
    view.batched = True
    result = view.generate_all(PROMPTS[1], 20)
    assert result.token_ids == _plain_alone(int8_decoder, PROMPTS[1], 20)
    assert result.stats.num_draft_tokens == 3 * result.stats.steps


def test_verify_rows_price_each_row_count_and_choose_the_best_rate():
    from eagle_trt.runtime.batch_backoff import VerifyRows

    rows = VerifyRows(alpha=0.5)
    log_probs = [0.0, math.log(0.5), math.log(0.1)]
    assert rows.choose(log_probs, 2) == 3  # nothing timed: the whole trees
    rows.record(3, 0.010, 0.012)  # a speculative round: 2 ms besides its base forward
    assert rows.rest == pytest.approx(0.002) and rows.cost(1) is None
    assert rows.choose(log_probs, 2) == 3  # no row count below 3 is priced yet
    rows.record(0, 0.004, None)  # a plain round: its forward only
    assert rows.cost(1) == pytest.approx(0.006) and rows.cost(2) == pytest.approx(0.008)
    # (2 + 1) / 8 ms = 375, (2 + 1.5) / 10 ms = 350, 2 / 6 ms = 333, (2 + 1.6) / 12 ms = 300 tokens/s
    assert rows.choose(log_probs, 2) == 1
    rows.record(2, 0.0045, 0.0065)  # two rows measured nearly free: (2 + 1.5) / 6.5 ms = 538
    assert rows.choose(log_probs, 2) == 2
    assert rows.choose([math.log(0.01)] * 3, 2) == 0  # unlikely nodes are not worth a row


def test_verify_rows_price_a_speculative_round_from_its_nodes_by_rank():
    """VerifyRows.spec_rate: the tokens per second per request a speculative round would commit, from the average
    probability of its k-th likeliest node over the rounds choose() saw and the measured costs of verifying that
    many; what a batch's backoff skips a probe on (runtime.backoff)."""
    from eagle_trt.runtime.batch_backoff import VerifyRows

    rows = VerifyRows(alpha=0.5)
    assert rows.spec_rate(2) is None  # nothing seen
    rows.choose([math.log(0.8), math.log(0.4)], 2)
    rows.choose([math.log(0.6)], 2)  # a round with one node: rank 2 counts 0
    assert rows.rank_probs == pytest.approx([0.7, 0.2])
    assert rows.spec_rate(2) is None  # no speculative round timed
    rows.record(0, 0.004, None)
    rows.record(2, 0.008, 0.010)  # rest 2 ms
    # 0 rows: 2 / 6 ms = 333; 1 row (6 ms, between): 2.7 / 8 ms = 337.5; 2 rows: 2.9 / 10 ms = 290; per request / 2
    assert rows.spec_rate(2) == pytest.approx(2.7 / 0.008 / 2)


class CountingPolicy:
    """A test per-request backoff: always speculates, counts the steps it is asked to judge."""

    alpha = 0.25

    def __init__(self):
        self.judged: list[list[bool]] = []  # per request, the modes recorded

    def start(self, times=None):
        judged = []
        self.judged.append(judged)
        return type("State", (), {"speculate": lambda _self: True,
                                  "record": lambda _self, spec, tokens, seconds: judged.append(spec)})()


def test_a_requests_own_backoff_judges_only_the_steps_it_runs_alone(int8_decoder):
    """In a round of 2+ requests the batch decides (its tree, its backoff) and a step's seconds are the batch's: a
    request's own backoff neither decides nor records there, and takes over once the request runs alone."""
    from eagle_trt.runtime.backoff import Backoff

    policy = CountingPolicy()
    batcher = Batcher(int8_decoder.with_backoff(policy), max_batch=2, policy=LoadPolicy.parse("chain:3;chain:2"),
                      batch_backoff=Backoff())
    short, long = batcher.start(PROMPTS[0], 12, key=0), batcher.start(PROMPTS[1], 60, key=1)
    alone_rounds = 0
    while batcher.active:
        alone_rounds += len(batcher.active) == 1 and long.generation.stats.steps > 0
        batcher.round()
    assert short.error is None and long.error is None
    judged = sorted(len(j) for j in policy.judged)
    assert judged[0] == 0, "a request that never ran alone had its own backoff record batch rounds"
    assert 0 < judged[1] < long.generation.stats.steps and judged[1] >= alone_rounds - 1


def test_requests_join_and_leave_between_rounds(int8_decoder):
    batcher = Batcher(int8_decoder, max_batch=2, policy=LoadPolicy.parse("chain:3"))
    first = batcher.start(PROMPTS[0], 20, key="first")
    batcher.round()
    batcher.round()
    late = batcher.start(PROMPTS[2], 6, key="late")
    with pytest.raises(EagleTrtError, match=r"2 requests already running \(max_batch 2\)"):
        batcher.start(PROMPTS[1], 4)
    out = {"first": [], "late": []}
    while batcher.active:
        for slot, step in batcher.round():
            out[slot.key] += step.token_ids
    assert late.done and first.done
    assert out["late"] == _plain_alone(int8_decoder, PROMPTS[2], 6)
    # kept for the next requests: the decoder's own pair (an earlier test's request left tokens in it, so both got
    # new pairs, up to max_batch + 1 in all: finished conversations stay held) and the two new ones
    assert len(batcher.spare) == 3 and {id(first.caches), id(late.caches)} <= {id(c) for c in batcher.spare}


def test_cancel_frees_the_slot(int8_decoder):
    batcher = Batcher(int8_decoder, max_batch=1, policy=LoadPolicy.parse("chain:2"))
    slot = batcher.start(PROMPTS[0], 50)
    batcher.round()
    batcher.cancel(slot)
    assert slot.done and not batcher.active
    again = batcher.start(PROMPTS[1], 5)
    while batcher.active:
        batcher.round()
    assert again.done and again.error is None


def test_policy_parsing():
    policy = LoadPolicy.parse(" chain:2 ; chain:1;none ")
    assert [policy.tree_for(b) for b in (1, 2, 3, 9)] == [resolve("chain:2"), resolve("chain:1"), None, None]
    assert policy.to_arg() == "chain:2;chain:1;none"
    assert LoadPolicy.from_list(json.loads(json.dumps(policy.to_list()))) == policy
    with pytest.raises(EagleTrtError, match="names no tree"):
        LoadPolicy.parse(" ; ")
    with pytest.raises(EagleTrtError, match="load policy 'chain:2;bogus:3'"):
        LoadPolicy.parse("chain:2;bogus:3")
    assert resolve_load_policy(resolve("dynamic:3,2,4")).to_arg().startswith("dynamic:3,2,4;")
    assert resolve_load_policy(resolve("chain:3"), "chain:3;none").to_arg() == "chain:3;none"
    native = resolve_load_policy(resolve("chain:2+suffix:2,6"), native=True)  # its own measured tail, no suffix
    assert native.to_arg() == "chain:2+suffix:2,6;chain:2;chain:1;chain:1;none"
    assert native.tree_for(4) is not None and native.tree_for(5) is None and native.tree_for(9) is None
    # no entry drafts more rows than the batch-1 tree (the tuner's chain:1 caps the tail's chain:2 at batch 2)
    assert resolve_load_policy(resolve("chain:1+suffix:4,8"), native=True).to_arg() == \
        "chain:1+suffix:4,8;chain:1;chain:1;chain:1;none"
    assert resolve_load_policy(resolve("chain:1")).to_arg() == ";".join(["chain:1"] * 9)  # AUTO_TAIL's chain:2 too
    assert resolve_load_policy(resolve("dynamic:3,2,4")).to_arg().startswith("dynamic:3,2,4;chain:2;chain:2;chain:2;")
    assert resolve_load_policy(resolve("chain:2")).tree_for(5) is not None


def test_a_request_gets_caches_for_what_it_can_commit_not_max_seq_len(tiny_base, eagle1_draft):
    """Caches sized by prompt + max_new_tokens (a power of two from MIN_CACHE_TOKENS) plus the widest tree; spares
    are reused (runtime.batching's order: one holding nothing, else a new pair up to max_batch + 1, giving up one
    that holds nothing or finished first at the cap); outputs stay those of plain decoding alone, also at a bucket's edge."""
    from eagle_trt.runtime.batching import MIN_CACHE_TOKENS

    decoder = EagleDecoder.load(tiny_base, eagle1_draft, tree="chain:3", dtype="int8", max_seq_len=1024)
    batcher = Batcher(decoder, max_batch=2, policy=LoadPolicy.parse("chain:3;none"))
    (own,) = batcher.spare  # the decoder's own caches, max_seq_len long
    own_room = EagleDecoder.cache_lengths(1024, 3)
    assert (own[0].max_len, own[1].max_len) == own_room
    first = batcher.start(PROMPTS[0], 12, key="first")  # 16 tokens: takes the only spare (the own, long pair)
    edge = batcher.start([7] * (2 * MIN_CACHE_TOKENS - 20), 20, key="edge")  # exactly 2 x MIN_CACHE_TOKENS tokens
    assert first.caches is own
    assert (edge.caches[0].max_len, edge.caches[1].max_len) == EagleDecoder.cache_lengths(2 * MIN_CACHE_TOKENS, 3)
    out = {"first": [], "edge": []}
    while batcher.active:
        for slot, step in batcher.round():
            out[slot.key] += step.token_ids
    assert first.error is None and edge.error is None
    assert out["first"] == _plain_alone(decoder, PROMPTS[0], 12)
    assert out["edge"] == _plain_alone(decoder, [7] * (2 * MIN_CACHE_TOKENS - 20), 20)
    small = batcher.start(PROMPTS[1], 4)  # both spares hold a finished request: a new pair, the pool is < 3 pairs
    assert small.caches[0].max_len == EagleDecoder.cache_lengths(MIN_CACHE_TOKENS, 3)[0]
    batcher.cancel(small)  # before its prefill ran: its pair holds nothing
    big = batcher.start([5] * 600, 100)  # 700 tokens: only the own pair fits, and it holds a request: the pool
    assert big.caches is not own and big.caches[0].max_len == own[0].max_len  # gives up small's (empty) for a new one
    assert small.caches not in batcher.spare
    batcher.cancel(big)
    again = batcher.start([9, 9], 4)  # the fitting spare that holds nothing (big's, cancelled before its prefill)
    assert again.caches is big.caches
    batcher.cancel(again)
    for n in range(4):  # at most max_batch + 1 spares are kept; those holding nothing go first
        batcher._keep((decoder.base.new_cache(10 + n), decoder.draft.new_cache(10 + n)))
    assert len(batcher.spare) == 3 and batcher.spare[:2] == [own, edge.caches] and batcher.spare[2][0].max_len == 13
    no_reuse = Batcher(decoder, max_batch=2, policy=LoadPolicy.parse("chain:3"), reuse_prefix=False)
    for pair in [edge.caches] + [(decoder.base.new_cache(10 + n), decoder.draft.new_cache(10 + n)) for n in range(3)]:
        no_reuse._keep(pair)  # without prefix reuse the smallest go first
    assert len(no_reuse.spare) == 3 and own in no_reuse.spare and edge.caches in no_reuse.spare
