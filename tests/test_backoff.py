"""runtime/backoff.py: per request, plain steps where they commit more tokens per second than speculative ones.

- The schedule: speculate, probe plain after `first_probe` steps, keep the faster mode, probe the other again with
  a doubling interval, switch back when it wins; a later request of a decoder that found plain faster starts plain
  (the decoder-wide accepted length is its prior) and still finds out when its own drafts pay.
- On the demo model (native precision): output equals plain decoding whatever the steps do; when the draft catches
  up after plain steps (one joined draft call), its proposals are as good as without pauses.
- A draft that never helps (a random tiny draft) ends up mostly in plain steps.
"""

import pytest
import torch

from eagle_trt.runtime.backoff import Backoff


def drive(state, tau: float, spec_s: float, plain_s: float, steps: int, plain_tokens: int = 1) -> list[bool]:
    """Run `steps` steps: a speculative one commits `tau` tokens in `spec_s`, a plain one `plain_tokens` in
    `plain_s`."""
    modes = []
    for _ in range(steps):
        spec = state.speculate()
        modes.append(spec)
        state.record(spec, tau if spec else plain_tokens, spec_s if spec else plain_s)
    return modes


def test_keeps_speculating_while_it_pays_and_later_requests_skip_the_plain_probe():
    from eagle_trt.runtime.backoff import StepTimes

    cfg, times = Backoff(first_probe=6, probe_steps=2, interval=16, max_interval=64), StepTimes()
    state = cfg.start(times)
    modes = drive(state, tau=3.0, spec_s=0.02, plain_s=0.01, steps=200)  # 150 vs 100 tok/s
    assert modes[:6] == [True] * 6 and modes[6:8] == [False, False]  # the decoder's first plain timing
    plain_at = [i for i, spec in enumerate(modes) if not spec]
    assert state.switches == 0 and len(plain_at) <= 2 + 2 * (192 // 64)
    assert all(b - a > 64 for a, b in zip(plain_at[1::2], plain_at[2::2]))  # plain re-timed only once it is stale
    later = drive(cfg.start(times), tau=3.0, spec_s=0.02, plain_s=0.01, steps=100)  # the decoder's times are known
    assert later[:6] == [True] * 6 and later.count(False) <= 2 * (100 // 64 + 1)  # no probe of its own first


def test_backs_off_to_plain_and_returns_when_speculation_pays_again():
    state = Backoff(first_probe=4, probe_steps=2, interval=8, max_interval=32).start()
    modes = drive(state, tau=1.6, spec_s=0.02, plain_s=0.01, steps=100)  # 80 vs 100 tok/s
    assert not state.chosen_spec and state.switches == 1
    assert modes.count(False) > 85
    spec_at = [i for i, m in enumerate(modes) if m and i > 6]
    gaps = [b - a for a, b in zip(spec_at[::2], spec_at[2::2])]
    assert gaps == sorted(gaps) and gaps[0] < gaps[-1]  # speculation re-measured at doubling intervals
    drive(state, tau=4.0, spec_s=0.02, plain_s=0.01, steps=80)  # acceptance came back: 200 tok/s
    assert state.chosen_spec and state.switches == 2


def test_later_requests_start_plain_where_the_decoder_found_plain_faster_and_still_probe():
    from eagle_trt.runtime.backoff import StepTimes

    cfg, times = Backoff(first_probe=4, probe_steps=2, interval=8, max_interval=32), StepTimes()
    first = drive(cfg.start(times), tau=1.6, spec_s=0.02, plain_s=0.01, steps=40)  # 80 vs 100 tok/s
    assert first[:4] == [True] * 4 and times.plain_wins()
    state = cfg.start(times)
    later = drive(state, tau=1.6, spec_s=0.02, plain_s=0.01, steps=40)
    assert later[:8] == [False] * 8 and later[8:10] == [True, True]  # plain from the start, a probe after `interval`
    assert later.count(True) < first.count(True)
    state = cfg.start(times)  # a request whose own drafts are accepted: the probe finds it and it speculates
    drive(state, tau=4.0, spec_s=0.02, plain_s=0.01, steps=12)
    assert state.chosen_spec and state.switches == 1


def test_a_loss_inside_the_margin_keeps_speculating_and_plain_gives_way_without_one():
    """Single steps' times and accepted lengths are noisy: speculation chosen, plain must win by `margin` to take
    over (a tree that pays a little is not given up on noise); plain chosen, speculation wins back at par."""
    cfg = Backoff(first_probe=4, probe_steps=2, interval=8, max_interval=32, margin=0.05)
    close = cfg.start()
    drive(close, tau=2.94, spec_s=0.03, plain_s=0.01, steps=60)  # 98 vs 100 tok/s: inside the margin
    assert close.chosen_spec and close.switches == 0
    clear = cfg.start()
    drive(clear, tau=2.7, spec_s=0.03, plain_s=0.01, steps=60)  # 90 vs 100 tok/s
    assert not clear.chosen_spec and clear.switches == 1
    drive(clear, tau=3.06, spec_s=0.03, plain_s=0.01, steps=600)  # 102 vs 100 tok/s: back at par, probe by probe
    assert clear.chosen_spec and clear.switches == 2


def test_a_batch_leans_to_plain_rounds():
    """Backoff.for_batches: plain chosen, speculation must commit BATCH_SPEC_MARGIN more tokens per second to take
    over (a request's schedule takes it back at par); speculation chosen, plain takes over at par (a request's keeps
    speculating inside `margin`), each decision to keep speculating on a plain time taken afresh; probes run
    BATCH_PROBE_ROUNDS rounds. A Batcher runs its batches on for_batches of its schedule (tests/test_batching.py)."""
    from eagle_trt.runtime.backoff import BATCH_PROBE_ROUNDS, BATCH_SPEC_MARGIN

    cfg = Backoff(first_probe=4, probe_steps=2, interval=8, max_interval=32)
    batch = cfg.for_batches()
    assert (batch.spec_margin, batch.margin, batch.fresh_plain, batch.probe_steps) == (
        BATCH_SPEC_MARGIN, 0.0, True, BATCH_PROBE_ROUNDS) and BATCH_SPEC_MARGIN > 0 and BATCH_PROBE_ROUNDS > 2
    for schedule, back in ((cfg, True), (batch, False)):
        state = schedule.start()
        drive(state, tau=2.7, spec_s=0.03, plain_s=0.01, steps=40)  # 90 vs 100 tok/s: plain
        assert not state.chosen_spec
        drive(state, tau=3.09, spec_s=0.03, plain_s=0.01, steps=300)  # 103 vs 100 tok/s: inside the batch's margin
        assert state.chosen_spec == back
    state = batch.start()
    drive(state, tau=2.7, spec_s=0.03, plain_s=0.01, steps=40)
    drive(state, tau=3.3, spec_s=0.03, plain_s=0.01, steps=300)  # 110 vs 100 tok/s: past it
    assert state.chosen_spec and state.switches == 2
    for schedule, kept in ((cfg, True), (batch, False)):
        state = schedule.start()
        drive(state, tau=2.94, spec_s=0.03, plain_s=0.01, steps=60)  # 98 vs 100 tok/s: inside a request's margin
        assert state.chosen_spec == kept
    paying = batch.start()  # speculation paying: kept, plain re-timed before each decision (probes of 4 rounds)
    modes = drive(paying, tau=4.5, spec_s=0.03, plain_s=0.01, steps=100)  # 150 vs 100 tok/s
    assert paying.chosen_spec and paying.switches == 0
    plain_at = [i for i, spec in enumerate(modes) if not spec]
    starts = [i for i in plain_at if i - 1 not in plain_at]
    assert len(plain_at) == BATCH_PROBE_ROUNDS * len(starts) and len(starts) >= 3  # whole probes, 3 in 100 rounds
    assert all(b - a > 2 * cfg.interval for a, b in zip(starts, starts[1:]))  # each when plain's time was stale
    alone = cfg.start()  # a request's schedule re-times plain only once it ran none for max_interval steps
    assert drive(alone, tau=4.5, spec_s=0.03, plain_s=0.01, steps=100).count(False) < len(plain_at)


def test_a_probe_priced_below_plain_is_not_run():
    """BackoffState.price (a batch's: VerifyRows.spec_rate): while plain is chosen, a probe of speculation that its
    price puts below plain by the margin speculation needs is not run, and the interval doubles as if it had been,
    past max_interval up to PRICED_MAX_INTERVAL; priced above that, unpriced, or no plain rate yet: probes run."""
    from eagle_trt.runtime.backoff import BATCH_PROBE_ROUNDS, PRICED_MAX_INTERVAL

    batch = Backoff(first_probe=4, probe_steps=2, interval=8, max_interval=32).for_batches()
    probes = {}
    for label, price in (("none", None), ("below", 95.0), ("inside margin", 102.0), ("above", 120.0)):
        state = batch.start()
        state.price = (lambda price=price: price) if price is not None else None
        modes = drive(state, tau=2.7, spec_s=0.03, plain_s=0.01, steps=2000)  # 90 vs 100 tok/s: plain
        assert not state.chosen_spec, label
        probes[label] = (sum(1 for i, m in enumerate(modes) if m and i and not modes[i - 1]), state.skipped_probes,
                         state.interval)
    assert probes["below"][0] == 0 and probes["below"][1] >= 3 and probes["below"][2] == PRICED_MAX_INTERVAL
    for label in ("none", "inside margin", "above"):  # 102 < 100 x (1 + BATCH_SPEC_MARGIN): still run
        assert probes[label][0] >= 2000 // (32 + BATCH_PROBE_ROUNDS) - 1 and probes[label][1] == 0, (label, probes)
    unmeasured = batch.start()  # the first decision (no plain rate before the plain steps are timed) is not priced
    unmeasured.price = lambda: 0.0
    assert drive(unmeasured, tau=2.7, spec_s=0.03, plain_s=0.01, steps=4) == [True] * 4


def test_plain_steps_count_the_tokens_they_commit():
    """A plain step commits more than one token where suffix candidates match (they need no draft): the plain rate
    is the request's own tokens per plain step over the plain step time."""
    cfg = Backoff(first_probe=4, probe_steps=2, interval=8, max_interval=32)
    one = cfg.start()
    drive(one, tau=3.0, spec_s=0.02, plain_s=0.01, steps=60)  # 150 vs 100 tok/s
    assert one.chosen_spec and one.plain_tokens == pytest.approx(1.0)
    two = cfg.start()
    drive(two, tau=3.0, spec_s=0.02, plain_s=0.01, steps=60, plain_tokens=2)  # 150 vs 200 tok/s
    assert not two.chosen_spec and two.plain_tokens == pytest.approx(2.0)


def test_speculation_is_not_given_up_on_a_stale_plain_time():
    """Steps slow down as the context grows, and while speculation wins nothing times plain steps. Plain is timed
    afresh (its average restarts) once no plain step ran for `max_interval` steps, and before speculation would be
    given up on a plain time more than `interval` steps old; the decision then uses the fresh time."""
    for max_interval in (32, 128):  # the stale time re-timed by the periodic probe, then before a switch
        cfg = Backoff(first_probe=4, probe_steps=2, interval=8, max_interval=max_interval)
        grown = cfg.start()
        assert drive(grown, tau=3.0, spec_s=0.02, plain_s=0.01, steps=30).count(False) == 2  # 150 vs 100 tok/s
        later = drive(grown, tau=3.0, spec_s=0.035, plain_s=0.02, steps=70)  # 86 vs 50 tok/s; the old plain: 100
        assert grown.chosen_spec and grown.switches == 0
        assert later.count(False) == 2 and grown.times.seconds[False] == pytest.approx(0.02)  # one probe, re-timed
    lost = cfg.start()
    drive(lost, tau=3.0, spec_s=0.02, plain_s=0.01, steps=30)
    after = drive(lost, tau=3.0, spec_s=0.04, plain_s=0.01, steps=100)  # 75 vs 100 tok/s: plain does win now
    assert not lost.chosen_spec and lost.switches == 1 and after.count(False) > 60


def test_step_times_average_as_a_mean_until_alpha_takes_over():
    from eagle_trt.runtime.backoff import StepTimes

    times = StepTimes(alpha=0.25)
    for seconds in (1.0, 3.0):
        times.record(False, seconds, 1)
    assert times.seconds[False] == pytest.approx(2.0)  # the first two weigh alike
    for _ in range(3):
        times.record(False, 2.0, 1)
    times.record(False, 6.0, 1)  # the 6th step: weight alpha
    assert times.seconds[False] == pytest.approx(0.25 * 6.0 + 0.75 * 2.0)
    times.restart(False)
    times.record(False, 5.0, 1)
    assert times.seconds[False] == 5.0 and times.age(False) == 0 and times.age(True) is None
    times.record(True, 1.0, 2)
    times.record(True, 1.0, 2)
    assert times.age(False) == 2 and times.age(True) == 0


class Never:
    """A test policy: plain steps only."""

    def start(self, times=None):
        return self

    def speculate(self) -> bool:
        return False

    def record(self, spec, tokens, seconds):
        pass


def test_a_request_backed_off_to_plain_steps_still_proposes_suffix_candidates():
    """Suffix candidates come from the request's own text, not from the draft: plain steps the request's backoff
    chose still carry them (where the text repeats itself, a plain step commits several tokens), and the output is
    plain decoding's."""
    from runtime_helpers import tiny_decoder

    eagle = tiny_decoder("chain:2+suffix:2,6")
    plain = eagle.with_tree("chain:1", speculative=False)
    ids = [1, 2, 3, 1, 2, 3, 1, 2]
    result = eagle.with_backoff(Never()).generate_all(ids, 48)
    assert result.token_ids == plain.generate_all(ids, 48).token_ids
    stats = result.stats
    assert stats.num_plain_steps == stats.steps and stats.num_suffix_tokens > 0
    assert stats.num_draft_tokens == stats.num_suffix_tokens  # nothing drafted: only the text's own candidates
    assert stats.num_accepted_suffix_tokens > 0 and stats.steps < 48


class Alternate:
    """A test policy: speculative and plain steps in turn (the draft catches up every other step)."""

    def start(self, times=None):
        return self

    def __init__(self):
        self.n = 0

    def speculate(self) -> bool:
        self.n += 1
        return self.n % 2 == 1

    def record(self, spec, tokens, seconds):
        pass


@pytest.fixture(scope="module")
def native_demo():
    from eagle_trt.kernels.cpu_build import cpu_supports_native

    if cpu_supports_native() is not None:
        pytest.skip(f"the native forward cannot run here: {cpu_supports_native()}")
    from transformers import AutoTokenizer

    from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
    from eagle_trt.runtime import EagleDecoder

    base = materialize_demo_gguf_base()
    return AutoTokenizer.from_pretrained(base), EagleDecoder.load(base, shipped_draft_dir("eagle1"), tree="chain:3",
                                                                  dtype="native")


def test_output_equals_plain_and_the_draft_catches_up(native_demo):
    from eagle_trt.datasets import encode_prompt, mtbench_prompts

    tok, eagle = native_demo
    plain = eagle.with_tree("chain:1", speculative=False)
    alternating = eagle.with_backoff(Alternate())
    spec_only_tau, alt_tau = [], []
    for i in (4, 9):
        ids = encode_prompt(tok, mtbench_prompts()[i].text, True)
        want = plain.generate_all(ids, 48).token_ids
        always = eagle.generate_all(ids, 48)
        alt = alternating.generate_all(ids, 48)
        assert always.token_ids == want and alt.token_ids == want
        assert alt.stats.num_plain_steps == alt.stats.steps // 2
        spec_steps = [n for j, n in enumerate(alt.stats.accepted_lengths) if j % 2 == 0]
        alt_tau.append(sum(spec_steps) / len(spec_steps))
        spec_only_tau.append(always.stats.mean_accepted_length)
    assert sum(alt_tau) / 2 > 0.8 * sum(spec_only_tau) / 2  # a stale draft cache would collapse this


class PlainFirst(Alternate):
    """A test policy: `n` plain steps, then speculation (the draft has not even read the prompt, as for a request
    that started in a batch whose rounds decode plainly)."""

    def __init__(self, n: int):
        super().__init__()
        self.plain = n

    def start(self, times=None):
        return PlainFirst(self.plain)  # each request counts its own steps

    def speculate(self) -> bool:
        self.n += 1
        return self.n > self.plain


def test_resuming_reads_the_latest_skipped_positions_only(native_demo):
    """Speculation resuming after 40 plain steps: the draft reads its sink and the latest RESUME_WINDOW skipped
    positions, not all ~300 (prompt and steps); the output is plain decoding's and the draft's proposals after the
    resume are about as good as a draft that read everything."""
    from eagle_trt.datasets import encode_prompt, mtbench_prompts
    from eagle_trt.runtime.drafting import DRAFT_SINK, PENDING_STEPS, RESUME_WINDOW

    assert PENDING_STEPS < 40  # the plain stretch also folds its pending rows into one call before the resume
    tok, eagle = native_demo
    plain = eagle.with_tree("chain:1", speculative=False)
    resumed = eagle.with_backoff(PlainFirst(40))
    rows = []
    forward = eagle.draft.forward_packed

    def counted(calls):
        rows.extend(c.input_ids.numel() for c in calls)
        return forward(calls)

    eagle.draft.forward_packed = counted
    try:
        late_tau, always_tau = [], []
        for i in (4, 9):
            ids = encode_prompt(tok, mtbench_prompts()[i].text, True)
            want = plain.generate_all(ids, 96).token_ids
            rows.clear()
            late = resumed.generate_all(ids, 96)
            assert late.token_ids == want
            assert rows[0] == DRAFT_SINK + RESUME_WINDOW and max(rows) == rows[0]  # not the prompt's 52-126 + 40
            always = eagle.generate_all(ids, 96)
            late_tau.append(sum(late.stats.accepted_lengths[40:]) / len(late.stats.accepted_lengths[40:]))
            always_tau.append(always.stats.mean_accepted_length)
    finally:
        eagle.draft.forward_packed = forward
    assert sum(late_tau) > 0.8 * sum(always_tau)


def test_resume_rows_keep_the_sink_and_the_latest_window():
    from eagle_trt.runtime.draft import DraftCall
    from eagle_trt.runtime.drafting import resume_rows

    def call(n, start):
        return DraftCall(torch.arange(n), torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 3),  # [n], [n, 3]
                         torch.arange(100, 100 + n), start, top_k=2, last_only=True)

    short, dropped = resume_rows(call(36, 0), window=32)
    assert dropped == 0 and short.input_ids.numel() == 36
    kept, dropped = resume_rows(call(50, 0), window=32)  # an empty cache: the first 4 stay as sinks
    assert dropped == 14 and kept.positions.tolist() == [100, 101, 102, 103] + list(range(118, 150))
    assert kept.features[:, 0].tolist() == kept.input_ids.tolist() == [0, 1, 2, 3] + list(range(18, 50))
    assert kept.start == 0 and kept.top_k == 2 and kept.last_only
    later, dropped = resume_rows(call(50, 260), window=32)  # the cache holds the prompt: no new sinks
    assert dropped == 18 and later.positions.tolist() == list(range(118, 150)) and later.start == 260


class EveryFourth(Alternate):
    """A test policy: one speculative step, then three plain ones."""

    def speculate(self) -> bool:
        self.n += 1
        return self.n % 4 == 1


def test_a_speculative_step_is_timed_without_the_drafts_catch_up():
    """After plain steps the draft catches up on their positions in one call; that call is what the plain stretch
    skipped, not what a speculative step costs, so the backoff's speculative step time leaves it out (else each
    probe after a longer stretch would look slower, and plain would keep winning)."""
    import time

    from runtime_helpers import tiny_decoder

    eagle = tiny_decoder("chain:2").with_backoff(EveryFourth())
    draft_forward = eagle.draft.forward_packed
    caught_up = []

    def slow_catch_up(calls):
        if any(c.mask is None and 3 < c.input_ids.shape[0] < 6 for c in calls):  # 3 plain positions + a path
            caught_up.append(True)
            time.sleep(0.2)
        return draft_forward(calls)

    eagle.draft.forward_packed = slow_catch_up
    policy = eagle.backoff.start()
    times = []
    policy.record = lambda spec, tokens, seconds: times.append((spec, seconds))
    eagle.backoff = type("Fixed", (), {"start": lambda self, _times=None: policy})()
    eagle.generate_all(list(range(1, 7)), 40)
    assert caught_up and max(s for spec, s in times if spec) < 0.1


def test_a_useless_draft_runs_mostly_plain_steps():
    from runtime_helpers import tiny_decoder

    eagle = tiny_decoder("chain:4")
    plain = eagle.with_tree("chain:1", speculative=False)
    backoff = eagle.with_backoff(Backoff(first_probe=3, probe_steps=2, interval=8, max_interval=64))
    ids = list(range(1, 7))
    torch.manual_seed(0)
    result = backoff.generate_all(ids, 56)
    assert result.token_ids == plain.generate_all(ids, 56).token_ids
    if result.stats.mean_accepted_length < 1.5:  # the random draft did not help: plain steps won
        assert result.stats.num_plain_steps > result.stats.steps // 2
