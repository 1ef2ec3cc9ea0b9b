"""What a request gives back: its live statistics, its steps' outputs, the whole result, and `Generation`, the
iterator over its steps that runs each forward the request's coroutine (EagleDecoder._steps) asks for."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from eagle_trt.runtime.draft import DraftCall
from eagle_trt.runtime.drafting import TreeOffer


@dataclass
class GenerationStats:
    """Per request. accepted_lengths: tokens committed per verify step (bonus included). prefill_time_s: the base
    and draft passes over the prompt; draft_time_s: the draft's update with the accepted positions and its tree;
    verify_time_s: the base forward over the tree and acceptance."""

    steps: int = 0
    accepted_lengths: list[int] = field(default_factory=list)
    num_draft_tokens: int = 0
    num_accepted_draft_tokens: int = 0
    num_suffix_tokens: int = 0  # of num_draft_tokens: nodes the suffix automaton added (runtime/suffix.py)
    num_accepted_suffix_tokens: int = 0  # of num_accepted_draft_tokens: accepted nodes it added
    prefill_time_s: float = 0.0
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    num_plain_steps: int = 0  # of steps: run without drafting (the backoff found them faster, or the batch's policy)
    cached_prompt_tokens: int = 0  # prompt tokens a finished request's cache served (runtime.prefix), not prefilled

    @property
    def mean_accepted_length(self) -> float:
        return sum(self.accepted_lengths) / len(self.accepted_lengths) if self.accepted_lengths else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_draft_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    def to_dict(self) -> dict:
        return {"steps": self.steps, "mean_accepted_length": self.mean_accepted_length,
                "acceptance_rate": self.acceptance_rate, "accepted_lengths": self.accepted_lengths,
                "num_draft_tokens": self.num_draft_tokens, "num_accepted_draft_tokens": self.num_accepted_draft_tokens,
                "num_suffix_tokens": self.num_suffix_tokens,
                "num_accepted_suffix_tokens": self.num_accepted_suffix_tokens,
                "prefill_time_s": self.prefill_time_s, "draft_time_s": self.draft_time_s,
                "verify_time_s": self.verify_time_s, "cached_prompt_tokens": self.cached_prompt_tokens}


@dataclass
class StepOutput:
    token_ids: list[int]  # committed in this step, already cut at a stop / the token budget
    stats: GenerationStats
    finish_reason: str | None = None  # "stop" | "length" on the last step
    retract: int = 0  # earlier steps' tokens a stop sequence began in: not part of the answer (runtime.stops)


@dataclass
class GenerationResult:
    token_ids: list[int]
    finish_reason: str
    stats: GenerationStats
    text: str | None = None


class Generation:
    """The iterator `EagleDecoder.generate` returns: StepOutputs, plus the request's live `stats`.

    Underneath is a coroutine that yields a StepOutput, a BaseCall (a base forward it needs), a DraftCall (a draft
    forward) or, in a batch, a TreeOffer (how many of its tree's nodes to verify), answered by `send`. Iterating
    runs each call at once, alone, through the same packed forwards (`Llama.forward_packed`,
    `DraftHead.forward_packed`) with one call, and verifies whole trees; `runtime.batching` instead answers the
    calls of several generations with one packed forward per phase."""

    def __init__(self, steps, stats: GenerationStats, decoder):  # decoder: the EagleDecoder whose models answer
        self._steps, self.stats, self._decoder = steps, stats, decoder
        self._answer = None  # what the coroutine gets back at its next resume

    def __iter__(self):
        return self

    def __next__(self) -> StepOutput:
        while True:
            item = self.advance()
            if isinstance(item, StepOutput):
                return item
            if isinstance(item, TreeOffer):  # alone, a request verifies its whole tree
                self.answer(item.scores.numel())
                continue
            with torch.inference_mode():
                if isinstance(item, DraftCall):
                    self.answer(self._decoder.draft.forward_packed([item])[0])
                else:
                    self.answer(self._decoder.base.forward_packed([item], self._decoder.capture)[0])

    def advance(self):
        """Resume until the next StepOutput, BaseCall or DraftCall (StopIteration at the end)."""
        answer, self._answer = self._answer, None
        return self._steps.send(answer)

    def answer(self, result) -> None:
        """The answer to the call the last `advance` returned: (logits, hidden, captured) of a BaseCall, the DraftOut
        of a DraftCall."""
        self._answer = result

    def close(self) -> None:
        self._steps.close()
