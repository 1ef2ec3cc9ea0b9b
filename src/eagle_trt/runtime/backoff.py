"""Speculation that never costs: per request, run whichever of speculative steps (draft + tree verify) and plain
steps (the root alone, no draft) commits more tokens per second, measured on this request as it runs, and measure
the other again now and then.

Why measured rates and not acceptance alone: whether a tree pays depends on acceptance *and* on what a verify step
costs against a decode step on this engine and machine (on the native CPU forward a 4-token verify costs 1.5x a
decode step, on int8 about 1.1x). The committed-tokens-per-second of each mode folds both in, and the same number
decides on any engine. Output is unchanged by construction: a plain step is the same verify with a one-node tree,
and the draft catches up on the skipped positions (one draft call over them) when speculation resumes.

Schedule: speculate first; after `first_probe` steps run `probe_steps` plain steps; keep the faster mode; probe
the other every `interval` steps, doubling the interval (up to `max_interval`) each time a probe confirms the
choice. Rates are exponential moving averages of tokens and seconds (weight `alpha` per step).

TensorRT-LLM's LLM API has a coarser cousin (`acceptance_rate_window_size` / `acceptance_rate_threshold`, 1.3.0rc27
on): the mean acceptance over a window of iterations below a threshold turns speculation off for good, for the whole
executor. This one is per request and comes back.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    first_probe: int = 6  # speculative steps before the first plain probe
    probe_steps: int = 2  # steps of the other mode per probe
    interval: int = 16  # steps of the chosen mode between probes (after a switch)
    max_interval: int = 128  # the interval doubles up to this while probes confirm the choice
    alpha: float = 0.25  # weight of a new step in the moving averages

    def start(self) -> BackoffState:
        return BackoffState(self)


class BackoffState:
    """One request's choice between speculative and plain steps."""

    def __init__(self, cfg: Backoff):
        self.cfg = cfg
        self.chosen_spec = True
        self.interval = cfg.first_probe
        self.since_probe = 0
        self.probe_left = 0
        self.tokens = {True: 0.0, False: 0.0}  # moving averages per mode (True: speculative)
        self.seconds = {True: 0.0, False: 0.0}
        self.measured = {True: False, False: False}
        self.switches = 0
        self.plain_steps = 0

    def speculate(self) -> bool:
        """Whether the next step drafts (a probe runs the mode not chosen)."""
        return self.chosen_spec != (self.probe_left > 0)

    def rate(self, spec: bool) -> float | None:
        return self.tokens[spec] / self.seconds[spec] if self.measured[spec] and self.seconds[spec] > 0 else None

    def record(self, spec: bool, tokens: int, seconds: float) -> None:
        """A step ran in mode `spec`, committed `tokens` in `seconds`."""
        a = self.cfg.alpha if self.measured[spec] else 1.0
        self.tokens[spec] = a * tokens + (1 - a) * self.tokens[spec]
        self.seconds[spec] = a * seconds + (1 - a) * self.seconds[spec]
        self.measured[spec] = True
        self.plain_steps += not spec
        if self.probe_left > 0 and spec != self.chosen_spec:
            self.probe_left -= 1
            if self.probe_left == 0:
                self._decide()
            return
        self.since_probe += 1
        if self.since_probe >= self.interval:
            self.probe_left, self.since_probe = self.cfg.probe_steps, 0

    def _decide(self) -> None:
        spec, plain = self.rate(True), self.rate(False)
        best = spec is not None and (plain is None or spec >= plain)
        if best == self.chosen_spec:
            self.interval = min(2 * self.interval, self.cfg.max_interval)
        else:
            self.chosen_spec, self.interval = best, self.cfg.interval
            self.switches += 1
