"""Which of a batch's draft nodes a speculative round verifies (runtime.batching): the most likely ones across all its
requests, as many as the measured cost of verify rows says commit the most tokens per second.

Every request of a speculative round drafts its tree (one packed draft forward per depth, whose cost hardly grows
with the requests in it); each node comes with the draft's cumulative log-prob, its estimate that the base accepts
the path to it. That estimate is calibrated well enough to spend rows on: SmolLM2's EAGLE draft on MT-bench, chain:1,
top-1 probability 0.02-0.13 accepted 13 %, 0.41-0.50 50 %, 0.92-1.00 97 %
(docs/results/2026-11-30-per-request/confidence_probe.py). A batch's rows do not all cost the same: on the native CPU
forward at one thread (SmolLM2 Q4_1, 2 requests) a base forward over 3 rows took what one over 2 did, over 4 rows
1.2 ms more (rows_bench.py there; by our reading the rows' integer dot products then outgrow the time the weights
take to stream in). So the round verifies the R nodes of the
highest probabilities across its requests (a request's kept nodes are its own best, a connected subtree:
runtime.drafting.prune), R the one maximising predicted tokens per second

    (batch + sum of the R best probabilities) / (rest + verify[R])

where verify[R] is the measured base forward over batch + R rows (R = 0: a plain round's forward) and rest the
measured remainder of a speculative round (draft forwards, bookkeeping, what the caller does with the tokens). A
row count not measured yet is priced between measured ones around it; before a speculative round was timed, the
whole trees are verified. On the same MT-bench rounds of 2 requests the one extra row given by confidence committed
0.69 extra tokens a round, by each request's running acceptance 0.55, by an oracle 0.77; both rows 1.05.

Whether a batch size speculates at all (drafting costs a draft forward for every request) is the batch backoff's
(runtime.backoff's BackoffState over its round times, as for a request alone). The same costs, with the average
probability of each rank's node over the speculative rounds seen, price a speculative round before the backoff
probes one (`spec_rate`): a probe priced below plain is not run.
"""

from __future__ import annotations

import math

from eagle_trt.runtime.backoff import warm_average


class VerifyRows:
    """One batch size's measured costs: seconds of a base forward by the draft rows it verifies, and the rest of a
    speculative round. Averages are a mean over their first 1/alpha rounds, then exponential."""

    def __init__(self, alpha: float):
        self.alpha = alpha
        self.verify: dict[int, float] = {}  # draft rows verified -> seconds of the round's base forward
        self.timed: dict[int, int] = {}
        self.rest: float | None = None  # seconds of a speculative round besides its base forward
        self.rest_timed = 0
        self.rank_probs: list[float] = []  # the k-th likeliest node's probability in a speculative round (average)
        self.ranked = 0  # speculative rounds in rank_probs

    def record(self, rows: int, verify_s: float, round_s: float | None) -> None:
        """A round verified `rows` draft rows in a base forward of `verify_s`; `round_s`: the whole speculative
        round's seconds (None: a plain round, or not timed)."""
        self.timed[rows] = self.timed.get(rows, 0) + 1
        self.verify[rows] = warm_average(self.verify.get(rows), verify_s, self.alpha, self.timed[rows])
        if round_s is not None:
            self.rest_timed += 1
            self.rest = warm_average(self.rest, max(0.0, round_s - verify_s), self.alpha, self.rest_timed)

    def cost(self, rows: int) -> float | None:
        """Seconds of a base forward verifying `rows` draft rows: measured, else between the nearest measured
        counts around it (None: none above or none below)."""
        if rows in self.verify:
            return self.verify[rows]
        below = max((r for r in self.verify if r < rows), default=None)
        above = min((r for r in self.verify if r > rows), default=None)
        if below is None or above is None:
            return None
        lo, hi = self.verify[below], self.verify[above]
        return lo + (hi - lo) * (rows - below) / (above - below)

    def choose(self, log_probs: list[float], batch: int) -> int:
        """How many of the round's draft nodes (their cumulative log-probs, any order) to verify: the count of the
        highest predicted tokens per second; all of them until the costs are known."""
        probs = sorted((math.exp(x) for x in log_probs), reverse=True)
        self._rank(probs)
        best = self._best(probs, batch)
        return best[0] if best is not None else len(probs)

    def spec_rate(self, batch: int) -> float | None:
        """Tokens per second per request a speculative round of this batch size would commit at its measured costs
        and its nodes' average probabilities by rank, verifying the best-paying count of them (None: no speculative
        round priced yet). What a probe of speculation would find, without running it (runtime.backoff)."""
        best = self._best(self.rank_probs, batch) if self.rank_probs else None
        return best[1] / batch if best is not None else None

    def _best(self, probs: list[float], batch: int) -> tuple[int, float] | None:
        """(rows, tokens per second) of the best-paying count of nodes of probabilities `probs` (highest first), the
        first on ties; None while no count is priced."""
        if self.rest is None:
            return None
        best, expected = None, float(batch)
        for rows in range(len(probs) + 1):
            seconds = self.cost(rows)
            if seconds is not None and self.rest + seconds > 0:
                rate = expected / (self.rest + seconds)
                if best is None or rate > best[1]:
                    best = rows, rate
            if rows < len(probs):
                expected += probs[rows]
        return best

    def _rank(self, probs: list[float]) -> None:
        """Average a speculative round's node probabilities by rank (a rank a round lacks counts 0)."""
        self.ranked += 1
        self.rank_probs += [0.0] * (len(probs) - len(self.rank_probs))
        for k, old in enumerate(self.rank_probs):
            self.rank_probs[k] = warm_average(old if self.ranked > 1 else None, probs[k] if k < len(probs) else 0.0,
                                              self.alpha, self.ranked)
