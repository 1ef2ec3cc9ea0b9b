"""Speculation that never costs: per request, run whichever of speculative steps (draft + tree verify) and plain
steps (the root alone, no draft; the tree's suffix candidates still ride along, runtime.suffix: they come from the
request's own text) commits more tokens per second, and measure speculation again now and then. It judges a
request's steps while the request runs alone; in a round of 2+ requests the batch decides (runtime.batching), on
`Backoff.for_batches` of the same schedule (leaning to plain rounds).

Why measured rates and not acceptance alone: whether a tree pays depends on acceptance *and* on what a verify step
costs against a decode step on this engine and machine (on the native CPU forward a 4-token verify costs 1.35x a
decode step). The committed-tokens-per-second of each mode folds both in, and the same number
decides on any engine. Output is unchanged by construction: a plain step is the same verify with a one-node tree,
and the draft catches up on the skipped positions (one draft call over them) when speculation resumes.

What is measured where: the seconds a speculative step and a plain step take are properties of the engine, the
tree and the machine, so they are averaged over every request of a decoder (`StepTimes`, shared); the tokens a
speculative step commits (its accepted length) belong to the request. A request's speculative rate is its own
accepted length over the shared speculative step time, the plain rate its own tokens per plain step (one, more
where suffix candidates match) over the shared plain step time.
The decoder also keeps the accepted length over all its requests: a new request starts from it (its prior), so
on a workload where speculation does not pay, requests start plain instead of each paying `first_probe` losing
speculative steps to find out.

Schedule: speculate first, unless the decoder's history says plain wins (then start plain and probe after
`interval` steps); after `first_probe` steps decide (the first request of a decoder measures plain steps first:
`probe_steps` of them); while plain wins, run plain steps and re-measure speculation with `probe_steps`
speculative steps every `interval` steps, the interval doubling (up to `max_interval`) each time a probe confirms
plain. Averages are exponential (weight `alpha` per step). A probe of a mode last run `interval` or more steps
ago times it afresh (its average restarts): an old time was taken at a shorter context, where steps ran faster, or
in another minute of a machine whose speed drifts. While speculation is chosen, plain is timed again once the
decoder has run no plain step for `max_interval` steps, and before speculation is given up on a plain time more
than `interval` steps old (a batch of 2 on the native CPU forward kept speculating at 0.88x of plain rounds on a
plain time from two rounds long before). Once speculation is chosen, plain must commit `margin`
more tokens per second to take over: single steps' times and accepted lengths move by more than a tree that pays a
little wins, and each wrong switch gives up the tree's gain until the next probe (at alpha 0.25 and no margin a
request alone ran 56 % of its steps plain on MT-bench where its tree paid 1.12x, and lost 3 % against the tree;
alpha 0.1 with a 5 % margin and suffix candidates in plain steps: 3-12 % plain steps, 1.14-1.15x against the tree's
1.11-1.13x in the same runs, docs/native_cpu.md).

A batch's schedule can also be priced (`BackoffState.price`, runtime.batch_backoff.VerifyRows.spec_rate: its
measured row costs and its nodes' average probabilities by rank): a probe of speculation its price puts below plain
by `spec_margin` is not run, the interval doubling as if it had confirmed plain, up to PRICED_MAX_INTERVAL. On the
native CPU forward at one thread a batch of 4 pays each verify row ~1.2-1.7 ms against ~1.7 ms a plain token, so
speculation there can only tie, and each 4-round probe with its catch-up cost ~1 % of the rounds between probes.

TensorRT-LLM's LLM API has a coarser cousin (`acceptance_rate_window_size` / `acceptance_rate_threshold`, 1.3.0rc2x
on; 1.2's `acceptance_window` / `acceptance_length_threshold` worked per finished request): the mean accepted/drafted
ratio over a window of iterations below a threshold turns speculation off for good, for the whole executor
(docs/native_cpu.md). This one is per request, judges tokens per second, and comes back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace


BATCH_SPEC_MARGIN, BATCH_PROBE_ROUNDS = 0.05, 4  # Backoff.for_batches
PRICED_MAX_INTERVAL = 1024  # steps between probes a price may stretch the interval to (BackoffState.price)


@dataclass(frozen=True)
class Backoff:
    first_probe: int = 6  # speculative steps before the first decision
    probe_steps: int = 2  # steps of the other mode per probe
    interval: int = 16  # plain steps between speculative probes (after a switch)
    max_interval: int = 128  # the interval doubles up to this while probes confirm plain
    alpha: float = 0.1  # weight of a new step in the moving averages
    margin: float = 0.05  # speculation chosen: plain must commit this fraction more tokens per second to take over
    spec_margin: float = 0.0  # plain chosen: speculation must commit this fraction more to take over (for_batches)
    fresh_plain: bool = False  # speculation chosen: time plain afresh before every decision on an older time

    def start(self, times: StepTimes | None = None) -> BackoffState:
        return BackoffState(self, times if times is not None else StepTimes(self.alpha))

    def for_batches(self) -> Backoff:
        """This schedule as a batch's rounds run it (runtime.batching), leaning to plain rounds where a request's
        leans to speculation: speculation takes over only when it commits BATCH_SPEC_MARGIN more tokens per second,
        keeps going only while it commits at least as many as plain (no `margin`), each decision to keep it on a plain
        time taken afresh (`fresh_plain`), and probes run at least BATCH_PROBE_ROUNDS rounds. A plain round of a
        batch costs what the base's does; a speculative one that loses costs every request its share until the next
        decision; and a batch's speculative rounds vary more than one request's steps (each verifies the rows its
        drafts' confidence buys, 0 to all). SmolLM2 native-q8, 4 streams, one thread, AMD EPYC Zen 4, where batch 4
        speculates at ~0.9x of plain: a request's schedule took it to speculation for stretches of ~150 rounds."""
        return replace(self, margin=0.0, spec_margin=max(self.spec_margin, BATCH_SPEC_MARGIN), fresh_plain=True,
                       probe_steps=max(self.probe_steps, BATCH_PROBE_ROUNDS))


class StepTimes:
    """Seconds per speculative and per plain step, and tokens per speculative step, averaged over the requests of
    one decoder. A mode's seconds average as a plain mean over its first 1/alpha steps, then exponentially; `restart`
    begins them anew (a time taken many steps ago, at a shorter context or in a slower minute, says little now)."""

    def __init__(self, alpha: float = Backoff.alpha):
        self.alpha = alpha
        self.seconds: dict[bool, float | None] = {True: None, False: None}  # True: speculative
        self.timed: dict[bool, int] = {True: 0, False: 0}  # steps in each mode's average since it (re)started
        self.accepted: float | None = None  # tokens a speculative step commits, over every request
        self.steps = 0  # steps recorded
        self.last: dict[bool, int | None] = {True: None, False: None}  # `steps` when each mode last ran

    def record(self, spec: bool, seconds: float, tokens: int) -> None:
        self.timed[spec] += 1
        self.seconds[spec] = warm_average(self.seconds[spec], seconds, self.alpha, self.timed[spec])
        self.steps += 1
        self.last[spec] = self.steps
        if spec:
            self.accepted = _average(self.accepted, tokens, self.alpha)

    def age(self, spec: bool) -> int | None:
        """Steps of the other mode recorded since this mode last ran (None: never)."""
        return None if self.last[spec] is None else self.steps - self.last[spec]

    def restart(self, spec: bool) -> None:
        """Forget a mode's step time: the next step of that mode starts its average."""
        self.seconds[spec], self.timed[spec] = None, 0

    def plain_wins(self) -> bool:
        """Whether this decoder's requests so far committed more tokens per second plain."""
        spec, plain = self.seconds[True], self.seconds[False]
        return None not in (spec, plain, self.accepted) and self.accepted / spec < 1.0 / plain


def _average(old: float | None, new: float, alpha: float) -> float:
    return new if old is None else alpha * new + (1 - alpha) * old


def warm_average(old: float | None, new: float, alpha: float, count: int) -> float:
    """`_average` of the count-th value (1-based): a plain mean over the first 1/alpha values, then exponential."""
    return _average(old, new, max(alpha, 1.0 / count))


class BackoffState:
    """One request's choice between speculative and plain steps."""

    def __init__(self, cfg: Backoff, times: StepTimes):
        self.cfg, self.times = cfg, times
        self.chosen_spec = not times.plain_wins()
        self.interval = cfg.first_probe if self.chosen_spec else cfg.interval
        self.since_probe = 0
        self.probe_left = 0
        self.accepted: float | None = None  # this request's tokens per speculative step (moving average)
        self.plain_tokens: float | None = None  # its tokens per plain step (more where suffix candidates match)
        self.switches = 0
        self.plain_steps = 0
        self.skipped_probes = 0
        # set by runtime.batching: the tokens per second a speculative step would commit as its measured costs price
        # it (runtime.batch_backoff.VerifyRows.spec_rate; None: not priced yet). A probe it prices below plain is
        # not run: the interval doubles as if it had confirmed plain, up to PRICED_MAX_INTERVAL.
        self.price: Callable[[], float | None] | None = None

    def speculate(self) -> bool:
        """Whether the next step drafts (a probe runs the mode not chosen)."""
        return self.chosen_spec != (self.probe_left > 0)

    def rate(self, spec: bool) -> float | None:
        """Committed tokens per second of a step of this kind for this request (None: not measured yet)."""
        seconds = self.times.seconds[spec]
        if spec:
            tokens = self.accepted if self.accepted is not None else self.times.accepted
        else:
            tokens = self.plain_tokens if self.plain_tokens is not None else 1.0
        return None if seconds is None or tokens is None or seconds <= 0 else tokens / seconds

    def record(self, spec: bool, tokens: int, seconds: float) -> None:
        """A step ran in mode `spec`, committed `tokens` in `seconds`."""
        if self.probe_left > 0 and spec != self.chosen_spec and (self.times.age(spec) or 0) >= self.cfg.interval:
            self.times.restart(spec)  # a probe's first step: the mode's old time is stale, the probe times it anew
        self.times.record(spec, seconds, tokens)
        if spec:
            self.accepted = _average(self.accepted, tokens, self.cfg.alpha)
        else:
            self.plain_tokens = _average(self.plain_tokens, tokens, self.cfg.alpha)
        self.plain_steps += not spec
        if self.probe_left > 0 and spec != self.chosen_spec:
            self.probe_left -= 1
            if self.probe_left == 0:
                self._decide()
            return
        self.since_probe += 1
        if self.since_probe >= self.interval:
            self.since_probe = 0
            plain_age = self.times.age(False)
            if self.chosen_spec and (plain_age is None or plain_age > self.cfg.max_interval):
                self.probe_left = self.cfg.probe_steps  # no plain step timed lately on this decoder: time some
            elif self.chosen_spec:
                self._decide()
            elif self._priced_out():
                self.interval = min(2 * self.interval, max(PRICED_MAX_INTERVAL, self.cfg.max_interval))
                self.skipped_probes += 1
            else:
                self.probe_left = self.cfg.probe_steps

    def _priced_out(self) -> bool:
        """Whether speculation's price stays below plain's measured rate by the margin it needs to take over."""
        plain = self.rate(False)
        price = self.price() if self.price is not None and plain is not None else None
        return price is not None and price * (1 + self.cfg.spec_margin) < plain

    def _decide(self) -> None:
        spec, plain = self.rate(True), self.rate(False)
        best = spec is not None and (plain is None or (spec * (1 + self.cfg.margin) >= plain if self.chosen_spec
                                                       else spec >= plain * (1 + self.cfg.spec_margin)))
        if self.chosen_spec and (not best or self.cfg.fresh_plain) and (self.times.age(False) or 0) > self.cfg.interval:
            # plain last timed that many steps ago (a shorter context, where steps ran faster; another minute): never
            # give up speculation on that; time plain now, then decide
            self.probe_left = self.cfg.probe_steps
            return
        if best == self.chosen_spec:
            self.interval = min(2 * self.interval, self.cfg.max_interval)
        else:
            self.chosen_spec, self.interval = best, self.cfg.interval
            self.switches += 1
