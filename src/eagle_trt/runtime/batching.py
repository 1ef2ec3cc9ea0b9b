"""Several requests through one decoder at once. Each round advances every running request to its next base forward
(prefill or verify). On the way each request asks for its draft forwards (the update with the accepted positions,
then one per tree depth): the requests waiting on a draft forward run as one packed draft forward
(`DraftHead.forward_packed`, each request's rows over its own draft cache, its top-k from one head matmul), phase
after phase until every request waits on its base forward. Those run as one packed forward
(`Llama.forward_packed`: every linear layer reads its weights once for all rows; attention stays per request, over
the request's own KV cache) and each request gets its rows back. Outputs are those of running each request alone:
with int8 linears and exact attention bit for bit, otherwise to the same float tolerance as any change of batch
shape.

Which tree a round drafts with follows the load policy (eagle_trt.load_policy): by the number of requests running
in that round, down to plain decoding (`none`) through the same decoder. Every running request drafts the round's
tree, whatever the batch was when it started: a request that started alone would otherwise keep adding its large
tree's rows to every step of a full batch, and one that started in a full batch would keep a small tree (or none)
once it runs alone. In a plain round every request takes a plain step; its draft catches up when a round
speculates again, in one call over the latest of the skipped positions (runtime.drafting.RESUME_WINDOW).

With a batch backoff (the Batcher's `batch_backoff`, else the decoder's own, which also backs off each request that
runs alone; runtime.backoff) the batch backs off as one: per batch size of 2 or more, rounds speculate or run plain
by which commits more tokens per second per request over the rounds measured at that size (a round's tokens come out
in the next round, its seconds run to the next round's start, so what the caller does with them counts; rounds where
a request prefills are not measured, nor the first round of a mode: speculating after plain rounds it runs the
drafts' catch-up, plain after speculative ones it reads the base weights the draft pushed out of the cache), on one
request's schedule leaning to plain rounds (Backoff.for_batches: speculation takes over by a margin and keeps going
only at par on a fresh plain time; a batch's plain round costs what the base's does; a probe of speculation that its
batch size's VerifyRows prices below plain is not run). A policy's tree that pays on the workload it was measured on
can lose on another (e.g. fewer accepted tokens, or one core per engine: SmolLM2 native-q8 at one thread on
MT-bench, chain:1 ran 0.81-0.83x of plain at batch 2, 0.82-0.87x at 3, 0.88-0.91x at 4; docs/load.md): the batch
then decodes plainly and probes again. Each batch size starts speculative: starting plain (speculation probed after
`interval` rounds) cost the int8 engine, whose batches pay, its gain at 4 and 8 streams in a short `perf load`
(1.02x / 0.95x; 1.19x / 1.17x once reverted). In a speculative round every request drafts its tree, then offers it
(a TreeOffer: its nodes' cumulative draft log-probs), and the batch verifies the nodes of the highest draft
probabilities across its requests, as many as its batch size's measured row costs say commit the most tokens per
second (runtime.batch_backoff.VerifyRows): a request whose draft is unsure takes a plain step in that round, one
whose draft is sure gets the rows. Without a backoff every request verifies its whole tree.

Each request's KV caches hold what it can commit (prompt + max_new_tokens, rounded up to a power of two from
MIN_CACHE_TOKENS) plus the widest tree, not max_seq_len: a SmolLM2 request's float64 base cache at max_seq_len 8192 is
755 MB, and zeroing it took ~0.3 s during which no running request advanced. Finished requests' caches are kept for
the next ones, at most max_batch + 1 of them. They still hold their tokens' K/V: a request that continues a finished
one (the next turn of its conversation) takes that request's caches and prefills only what is new (runtime.prefix;
batch-invariant engines; copied into a larger pair when the conversation outgrew its own). Other requests take a
fitting spare that holds nothing, else a new pair while fewer than max_batch + 1 exist (so that the last turns of up
to that many conversations stay held, within the memory the pool takes at full load anyway), else the spare that
holds nothing or finished first. The decoder's own caches are the first spare, so Batchers over one decoder must
not have requests running at the same time (scripts that compare settings run them one after another).

    batcher = Batcher(decoder, max_batch=8, policy=LoadPolicy.parse("dynamic:3,2,4;chain:2;none"))
    slot = batcher.start(prompt_ids, 64)
    while batcher.active:
        for slot, step in batcher.round(): ...     # StepOutputs; slot.done / slot.error when a request ends
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from eagle_trt.errors import EagleTrtError
from eagle_trt.load_policy import PLAIN, LoadPolicy
from eagle_trt.runtime.backoff import Backoff, BackoffState, StepTimes
from eagle_trt.runtime.batch_backoff import VerifyRows
from eagle_trt.runtime.draft import DraftCall
from eagle_trt.runtime.decoder import EagleDecoder
from eagle_trt.runtime.drafting import TreeOffer
from eagle_trt.runtime.generation import Generation, StepOutput
from eagle_trt.runtime.prefix import copy_prefix, reusable_prefix
from eagle_trt.runtime.verify import SamplingParams
from eagle_trt.tree_config import TreeConfig

MIN_CACHE_TOKENS = 128  # the smallest cache a request gets (tokens it can commit, before the tree's rows)


@dataclass(eq=False)
class Slot:
    """One running request: its generation, its KV caches, and how it ended."""

    key: object
    tree: TreeConfig | None  # the load policy's tree when it started (rounds draft the batch's tree); None: plain
    generation: Generation | None = None
    caches: tuple | None = None
    done: bool = False
    error: Exception | None = None

    @property
    def tree_label(self) -> str:
        return self.tree.label() if self.tree is not None else PLAIN


class Batcher:
    def __init__(self, decoder: EagleDecoder, max_batch: int, policy: LoadPolicy, reuse_prefix: bool = True,
                 batch_backoff: Backoff | None = None):
        if max_batch < 1:
            raise EagleTrtError(f"max_batch must be >= 1, got {max_batch}", "pass the largest batch to run")
        self.decoder, self.max_batch, self.policy = decoder, max_batch, policy
        # a request continuing a finished one prefills only what is new (runtime.prefix): batch-invariant bases only
        self.reuse_prefix = reuse_prefix and bool(decoder.base.batch_invariant)
        self.views: dict[TreeConfig | None, EagleDecoder] = {}  # None: plain decoding
        for tree in dict.fromkeys(policy.trees):
            speculative = tree is not None and decoder.draft is not None
            self.views[tree] = decoder.with_tree(tree if speculative else "chain:1", speculative=speculative)
        drafting = [v for v in self.views.values() if v.draft is not None]
        self.widest = max((v.tree.max_draft_tokens for v in drafting), default=0)
        root_k = max((v._root_k() for v in drafting), default=0)
        for view in drafting:  # any of them may draft another's tree in a round (EagleDecoder.tree_now)
            view.root_k_floor = root_k
        # where a request starts in a plain batch: a drafting view, so that it drafts once the batch shrinks
        self.lead = drafting[0] if drafting else None
        self.spare: list[tuple] = []  # (base, draft) caches of finished requests, reused; the decoder's own first
        own = (decoder.base.cache, decoder.draft.cache if decoder.draft is not None else None)
        if self._fits(own, decoder.max_seq_len):
            self.spare.append(own)
        self.active: list[Slot] = []
        # batches of 2 or more back off with `batch_backoff`, else with the decoder's own (which backs each request
        # off when it runs alone), either as Backoff.for_batches; None: the policy's tree at every batch size, always
        backoff = batch_backoff or decoder.backoff
        self.backoff = backoff.for_batches() if backoff is not None else None
        self.batch_backoff: dict[int, BackoffState] = {}  # batch size (>= 2) -> whether its rounds speculate
        self.rows: dict[int, VerifyRows] = {}  # batch size (>= 2) -> what its verify rows cost (runtime.batch_backoff)
        # the last round, if timed: (batch, speculated, clock at its start, draft rows verified, base forward seconds)
        self.measured: tuple[int, bool, float, int, float] | None = None
        self.speculated = True  # whether the last round drafted
        self.clock = time.perf_counter

    def start(self, input_ids: Sequence[int], max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
              stop_token_ids: Sequence[int] = (), key: object = None,
              stop_sequences: Sequence[Sequence[int]] = ()) -> Slot:
        """Admit a request (EagleTrtError for a bad one, before any work); it runs from the next round."""
        if len(self.active) >= self.max_batch:
            raise EagleTrtError(f"{len(self.active)} requests already running (max_batch {self.max_batch})",
                                "wait for one to finish")
        tree = self.policy.tree_for(len(self.active) + 1)
        view = self.views[tree] if tree is not None or self.lead is None else self.lead
        caches = self._take_caches(input_ids, len(input_ids) + max_new_tokens)
        slot = Slot(key, tree, caches=caches)
        try:
            slot.generation = view.generate(input_ids, max_new_tokens, sampling, stop_token_ids,
                                            caches=(caches[0], caches[1] if view.draft is not None else None),
                                            stop_sequences=stop_sequences, reuse_prefix=self.reuse_prefix)
        except Exception:
            self._keep(caches)
            raise
        self.active.append(slot)
        return slot

    def round(self, emit=None) -> list[tuple[Slot, StepOutput]]:
        """Advance every running request to its next base forward, running the draft forwards on the way packed
        phase by phase (all requests waiting on a draft forward form one; a request whose tree needs fewer draft
        forwards waits on its base forward meanwhile), then run the base forwards packed and answer them. Returns
        the StepOutputs produced on the way; a request that ended is marked done (or error) and leaves `active`.
        `emit(events)`: called with the last round's StepOutputs before this round's forwards run (a server sends
        them then: returned at the end, each token would reach the client a forward late, the first one too), and
        those are not returned again."""
        events: list[tuple[Slot, StepOutput]] = []
        waiting = {}  # slot -> the BaseCall or DraftCall it waits on
        prefilling = any(slot.generation.stats.steps == 0 for slot in self.active)
        for slot in list(self.active):  # the last round's answers: each request's StepOutput
            self._advance(slot, events, waiting, until_output=True)
        tokens = sum(len(step.token_ids) for _, step in events)
        if emit is not None and events:
            emit(events)
            events = []
        t0 = self.clock()  # the last round ran from its t0 to here: its acceptance and the caller's sending count
        self._measure(tokens, t0)
        batch = len(self.active)
        speculate = self._speculates(batch)
        tree = self.policy.tree_for(batch)
        for view in self.views.values():
            view.plain_now, view.batched = not speculate, batch >= 2
            view.tree_now = self.views[tree] if tree is not None else None
        for slot in list(self.active):
            if slot not in waiting:
                self._advance(slot, events, waiting)
        while True:
            drafts = [(slot, call) for slot, call in waiting.items() if isinstance(call, DraftCall)]
            if not drafts:
                break
            with torch.inference_mode():
                answers = self.decoder.draft.forward_packed([c for _, c in drafts])
            for (slot, _), answer in zip(drafts, answers):
                del waiting[slot]
                slot.generation.answer(answer)
                self._advance(slot, events, waiting)
        offers = [(slot, offer) for slot, offer in waiting.items() if isinstance(offer, TreeOffer)]
        for (slot, _), keep in zip(offers, self._keep_nodes(batch, [offer for _, offer in offers])):
            del waiting[slot]
            slot.generation.answer(keep)
            self._advance(slot, events, waiting)
        rows = verify_s = 0
        if waiting:
            calls = list(waiting.items())
            rows = sum(call.input_ids.numel() for _, call in calls) - len(calls)  # beyond each request's root
            started = self.clock()
            with torch.inference_mode():
                results = self.decoder.base.forward_packed([c for _, c in calls], self.decoder.capture)
            verify_s = self.clock() - started
            for (slot, _), result in zip(calls, results):
                slot.generation.answer(result)
        # the first round of a mode is not timed: speculating after plain rounds it also runs the drafts' catch-up on
        # the skipped positions (as for a request alone, runtime.decoder), and plain after speculative rounds it
        # reads base weights the draft pushed out of the cache; neither is what a round of that mode costs
        changed = speculate != self.speculated
        measured = waiting and not prefilling and not changed and batch in self.batch_backoff
        self.measured = (batch, speculate, t0, rows, verify_s) if measured else None
        self.speculated = speculate
        return events

    def _keep_nodes(self, batch: int, offers: list[TreeOffer]) -> list[int]:
        """How many of its tree's nodes each offering request verifies: with a batch backoff the nodes of the highest
        draft probabilities across the batch, as many as its batch size's VerifyRows chooses; else all of them."""
        if not offers:
            return []
        sizes = [offer.scores.numel() for offer in offers]
        if self.backoff is None or batch not in self.rows:
            return sizes
        scored = sorted(((x, i) for i, offer in enumerate(offers) for x in offer.scores.tolist()), reverse=True)
        chosen = self.rows[batch].choose([x for x, _ in scored], batch)
        keep = [0] * len(offers)
        for _, i in scored[:chosen]:
            keep[i] += 1
        return keep

    def _speculates(self, batch: int) -> bool:
        """Whether this round's requests draft: the policy's tree at this batch size, then (backoff, batch >= 2) the
        batch's own choice."""
        if self.policy.tree_for(batch) is None:
            return False
        if self.backoff is None or batch < 2:  # one request: its own backoff decides
            return True
        if batch not in self.batch_backoff:
            rows = self.rows[batch] = VerifyRows(self.backoff.alpha)
            state = self.batch_backoff[batch] = self.backoff.start(StepTimes(self.backoff.alpha))
            state.price = lambda: rows.spec_rate(batch)  # a probe priced below plain is not run
        return self.batch_backoff[batch].speculate()

    def _measure(self, tokens: int, now: float) -> None:
        """The last round's base forward committed `tokens` (they came out in this round): per request, with the
        seconds from that round's start to this one's (what the caller did with its outputs, e.g. sending them,
        counts: a plain round sends more per token), to the backoff of its batch size."""
        if self.measured is not None:
            batch, speculated, started, rows, verify_s = self.measured
            self.batch_backoff[batch].record(speculated, tokens / batch, now - started)
            self.rows[batch].record(rows, verify_s, now - started if speculated else None)
            self.measured = None

    def _advance(self, slot: Slot, events: list, waiting: dict, until_output: bool = False) -> None:
        """Resume `slot` until it waits on a forward (recorded in `waiting`), ends, or (`until_output`) gives a
        StepOutput; its StepOutputs go to events."""
        try:
            while True:
                item = slot.generation.advance()
                if isinstance(item, StepOutput):
                    events.append((slot, item))
                    if until_output:
                        return
                    continue
                waiting[slot] = item
                return
        except StopIteration:
            self._finish(slot)
        except Exception as exc:  # noqa: BLE001 - one failed request must not take the others down
            slot.error = exc
            self._finish(slot)

    def cancel(self, slot: Slot) -> None:
        if slot in self.active:
            slot.generation.close()
            self._finish(slot)

    def _finish(self, slot: Slot) -> None:
        slot.done = True
        self.active.remove(slot)
        self._keep(slot.caches)

    def _keep(self, caches: tuple) -> None:
        """Back to the spare caches, last; beyond max_batch + 1 of them one goes: with prefix reuse the `_victim`,
        else the smallest (the cheapest to make again)."""
        self.spare.append(caches)
        if len(self.spare) > self.max_batch + 1:
            self.spare.remove(self._victim() if self.reuse_prefix else min(self.spare, key=lambda c: c[0].max_len))

    def _victim(self) -> tuple:
        """The spare pair to give up: one that holds nothing (or what a later turn continued), else the one whose
        request finished first (spares are kept in the order requests ended)."""
        return next((c for c in self.spare if c[0].held is None), self.spare[0])

    def _fits(self, caches: tuple, tokens: int) -> bool:
        room, draft_room = EagleDecoder.cache_lengths(tokens, self.widest)
        return caches[0].max_len >= room and (caches[1] is None or caches[1].max_len >= draft_room)

    def _take_caches(self, prompt: Sequence[int], tokens: int) -> tuple:
        """(base, draft) caches for a request of `prompt` that commits at most `tokens` (prompt + max_new_tokens):
        the spare pair holding the longest prefix `prompt` continues (runtime.prefix) if it fits; else the smallest
        fitting spare that holds nothing; else, with max_batch + 1 pairs about, the `_victim` if it fits, else a new
        pair for the next power of two (MIN_CACHE_TOKENS to max_seq_len), the victim given up. A held prefix too long
        for its pair is copied into the one taken, and its pair then counts as holding nothing (the conversation went
        on). Without prefix reuse: the smallest fitting spare, else a new pair."""
        held = {id(c): reusable_prefix(c[0].held, prompt) if self.reuse_prefix else 0 for c in self.spare}
        source = max(self.spare, key=lambda c: held[id(c)], default=None)
        source = source if source is not None and held[id(source)] else None
        fitting = [c for c in self.spare if self._fits(c, tokens)]
        empty = [c for c in fitting if c[0].held is None]
        caches = None
        if source is not None and source in fitting:
            caches = source
        elif empty or (fitting and not self.reuse_prefix):
            caches = min(empty or fitting, key=lambda c: c[0].max_len)
        elif self.reuse_prefix and len(self.spare) + len(self.active) > self.max_batch:
            victim = self._victim()
            self.spare.remove(victim)
            caches = victim if self._fits(victim, tokens) else None
        if caches is None:
            bucket = min(self.decoder.max_seq_len, max(MIN_CACHE_TOKENS, 1 << (tokens - 1).bit_length()))
            caches = self.decoder.new_caches(bucket, self.widest)
        if caches in self.spare:
            self.spare.remove(caches)
        if source is not None and caches is not source:
            copy_prefix(source[0], caches[0], held[id(source)])
            source[0].held = None
        return caches
