"""StepClock: times a request's phases (prefill, drafting, verify) into its GenerationStats without stalling the
device: wall time on the CPU, CUDA events on a GPU."""

from __future__ import annotations

import time

import torch


class StepClock:
    """Times a request's phases into its GenerationStats: wall time on the CPU; on CUDA, events read without a
    synchronize per step (an interval is added once its end event has completed; all of them by the last step)."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.pending: list[tuple[str, object, object]] = []  # (stats field, start event, end event)

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def add(self, stats, field_name: str, start, end) -> None:
        if self.cuda:
            self.pending.append((field_name, start, end))
        else:
            setattr(stats, field_name, getattr(stats, field_name) + end - start)

    def settle(self, stats, wait: bool = False) -> None:
        if wait and self.pending:
            self.pending[-1][2].synchronize()
        waiting = []
        for field_name, start, end in self.pending:
            if end.query():
                setattr(stats, field_name, getattr(stats, field_name) + start.elapsed_time(end) / 1000.0)
            else:
                waiting.append((field_name, start, end))
        self.pending = waiting
