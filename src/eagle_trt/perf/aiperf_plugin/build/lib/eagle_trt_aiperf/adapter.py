"""Spec-decode adapter: per-step accepted/drafted counts -> AIPerf's SpecDecodeAcceptanceRecord."""

from __future__ import annotations

from collections import Counter

from aiperf.common.models import SpecDecodeAcceptanceRecord


def _stats(responses):
    for r in reversed(responses):
        if r.spec_decode_stats:
            return r.spec_decode_stats
    return None


class TritonSpecDecodeAdapter:
    @classmethod
    def can_adapt(cls, responses) -> bool:
        stats = _stats(responses)
        return isinstance(stats, dict) and stats.get("engine") == "eagle-trt-triton"

    @classmethod
    def adapt(cls, responses):
        stats = _stats(responses)
        accepted, drafted = list(stats["per_step_accepted"]), list(stats["per_step_drafted"])
        steps, n_acc, n_draft = len(accepted), sum(accepted), sum(drafted)
        if steps == 0 or n_draft == 0:
            return None
        return SpecDecodeAcceptanceRecord(
            engine="eagle-trt-triton", mean_acceptance_length=1.0 + n_acc / steps,
            draft_acceptance_rate=n_acc / n_draft, acceptance_histogram=dict(Counter(accepted)),
            num_accepted_draft_tokens=n_acc, num_draft_tokens=n_draft, num_spec_steps=steps,
            num_spec_tokens=drafted[0] if len(set(drafted)) == 1 else None,
            per_step_accepted=accepted, per_step_drafted=drafted,
        )
