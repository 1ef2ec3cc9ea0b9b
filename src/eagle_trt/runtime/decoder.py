"""EagleDecoder: prefill, then draft -> verify -> accept -> compact, per request.

Every step feeds the draft the base features of the positions the last base forward accepted (so drafting stays in
sync with the base; that forward also gives the root's top-k), drafts a tree (one draft forward per depth), runs
one base forward over [root + tree] (a bare root without a draft: plain decoding through the same code path),
accepts a path, commits its tokens plus the bonus token and moves the accepted K/V rows into place.

A request is a coroutine (`Generation`) that yields every forward it needs as a call carrying its own KV cache
(BaseCall for the base, DraftCall for the draft; nothing is swapped on the shared modules), so one request runs
alone and runtime.batching packs the same-phase calls of many requests through the same code. What a request gives
back (stats, step outputs, the Generation iterator) is in runtime.generation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from eagle_trt import request_rules as rules
from eagle_trt.build_spec import BuildSpec
from eagle_trt.errors import EagleTrtError
from eagle_trt.runtime.backoff import Backoff, StepTimes
from eagle_trt.runtime.draft import DraftCall, DraftOut, joined
from eagle_trt.runtime.drafting import (DRAFT_WINDOW, PENDING_STEPS, StaticPlan, TreeOffer, draft_rows,
                                        dynamic_tree, prune, resume_rows, root_only, static_tree)
from eagle_trt.runtime.generation import Generation, GenerationResult, GenerationStats, StepOutput
from eagle_trt.runtime.linears import check_precision, prepare
from eagle_trt.runtime.loading import (draft_vocab_ids, load_base, load_draft, require_shapes, stored_blocks,
                                      torch_dtype)
from eagle_trt.runtime.model import BaseCall
from eagle_trt.runtime.native import BLOCK_TYPES
from eagle_trt.runtime.prefix import HeldTokens, reusable_prefix
from eagle_trt.runtime.step_clock import StepClock
from eagle_trt.runtime.stops import Stops
from eagle_trt.runtime.suffix import SuffixAutomaton, merge_chain
from eagle_trt.runtime.verify import SamplingParams, accept_greedy, accept_sampling, greedy_ids, sampling_probs
from eagle_trt.spec import NATIVE_PRECISIONS, DraftSpec, ModelSpec, require_compatible
from eagle_trt.tree_config import DEFAULT_RUNTIME_TREE, TreeConfig, resolve


class EagleDecoder:
    """Holds the base, the draft (optional) and their caches; `generate` serves one request at a time."""

    def __init__(self, base, draft, base_spec: ModelSpec, tree: TreeConfig, device: str, max_seq_len: int):
        self.base, self.draft, self.base_spec = base, draft, base_spec
        self.tree, self.device, self.max_seq_len = tree, device, max_seq_len
        self.precision = "float32"  # set by load(): float32 | float16 | bfloat16 | int8
        self.on_verify = None  # optional callback(tree: DraftTree, logits [N+1, V]) after each verify forward
        self.backoff: Backoff | None = None  # per request: plain steps where they are faster (runtime.backoff)
        self.draft_window = DRAFT_WINDOW  # prompt positions the draft reads (0: all of them)
        self.plain_now = False  # set by runtime.batching while the batch is one its load policy decodes plainly
        self.batched = False  # set by runtime.batching while a round runs 2+ requests: the batch, not each, backs off
        # set by runtime.batching: the view whose tree this round's steps draft with (the load policy's tree at the
        # batch's size), and a root top-k enough for any tree a round may take; None / 0: this decoder's own
        self.tree_now: EagleDecoder | None = None
        self.root_k_floor = 0
        self.step_times: StepTimes | None = None  # the backoff's step times, shared by this decoder's requests
        self.plan = StaticPlan.of(tree.tree, device) if tree.kind != "dynamic" else None
        self.capture = draft.capture if draft is not None and draft.format == "eagle3" else ()
        base_len, draft_len = self.cache_lengths(max_seq_len, tree.max_draft_tokens)
        base.setup_cache(base_len)
        if draft is not None:
            draft.setup_cache(draft_len)

    @staticmethod
    def cache_lengths(max_seq_len: int, max_draft_tokens: int) -> tuple[int, int]:
        """(base, draft) KV-cache slots a request of up to max_seq_len tokens needs with trees of max_draft_tokens:
        the tree's rows land after the committed ones, and the draft expands one more tree beyond that."""
        room = max_seq_len + max_draft_tokens + 2
        return room, room + max_draft_tokens + 2

    def new_caches(self, max_seq_len: int, max_draft_tokens: int | None = None) -> tuple:
        """Fresh (base, draft or None) KV caches for a request of up to max_seq_len tokens with trees of up to
        max_draft_tokens (default: this decoder's tree), beside the decoder's own."""
        widest = self.tree.max_draft_tokens if max_draft_tokens is None else max_draft_tokens
        room, draft_room = self.cache_lengths(max_seq_len, widest)
        return self.base.new_cache(room), self.draft.new_cache(draft_room) if self.draft is not None else None

    @classmethod
    def load(cls, base_dir: str | Path, draft_dir: str | Path | None = None, tree: str | TreeConfig = DEFAULT_RUNTIME_TREE,
             device: str = "cpu", dtype: str = "float32", max_seq_len: int | None = None,
             draft_vocab: int | None = None) -> EagleDecoder:
        """dtype: float32 | float16 | bfloat16 | int8 (CPU: int8 linears, runtime.linears); draft_vocab: FR-Spec size
        of an EAGLE-1/2 draft's vocabulary (None: the draft's draft_vocab.json if it has one; 0: full)."""
        base_spec = ModelSpec.from_dir(base_dir)
        draft_spec = DraftSpec.from_dir(draft_dir) if draft_dir is not None else None
        return cls.from_specs(base_spec, draft_spec, tree, device, dtype, max_seq_len, draft_vocab)

    @classmethod
    def from_bundle(cls, spec: BuildSpec, speculative: bool = True) -> EagleDecoder:
        """The decoder a bundle's spec describes (what its served engine model runs): the base and draft as the
        build read them, its tree, device, precision, length and draft vocabulary; plain decoding when not
        `speculative` (base_engine)."""
        return cls.from_specs(spec.base, spec.draft if speculative else None, spec.tree, spec.device, spec.dtype,
                              spec.max_seq_len, spec.draft_vocab if speculative else None)

    @classmethod
    def from_specs(cls, base_spec: ModelSpec, draft_spec: DraftSpec | None, tree: str | TreeConfig, device: str,
                   dtype: str, max_seq_len: int | None, draft_vocab: int | None) -> EagleDecoder:
        """`load` from the base's and draft's specs (read once, by whoever holds them)."""
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise EagleTrtError(f"device {device!r} requested but CUDA is not available", "use --device cpu")
        check_precision(dtype, device)
        if draft_spec is not None:
            require_compatible(base_spec, draft_spec)
        require_shapes(base_spec, draft_spec)
        tree_cfg = resolve(tree)
        max_seq_len = max_seq_len or min(base_spec.max_position_embeddings, 4096)
        dt = torch_dtype(dtype)
        blocks = stored_blocks(base_spec, dtype) if dtype in NATIVE_PRECISIONS else None  # read as blocks, not floats
        kept = frozenset(n for n, (kind, _) in (blocks or {}).items() if kind in BLOCK_TYPES and ".layers." in n)
        base = load_base(base_spec, dt, device, kept)
        draft = load_draft(draft_spec, base_spec, base, dt, device) if draft_spec is not None else None
        vocab_ids = None
        if draft is not None and draft.format == "eagle1":
            vocab_ids = draft_vocab_ids(draft_spec.path, draft_vocab)
        elif draft is not None and draft_vocab:
            raise EagleTrtError(f"--draft-vocab {draft_vocab} applies to EAGLE-1/2 drafts only",
                                "EAGLE-3 drafts carry their own vocabulary; drop --draft-vocab")
        prepare(base, draft, dtype, vocab_ids, blocks)
        decoder = cls(base, draft, base_spec, tree_cfg, device, max_seq_len)
        decoder.precision = dtype
        return decoder

    def with_tree(self, tree: str | TreeConfig, speculative: bool = True) -> EagleDecoder:
        """Another decoder over the same loaded base and draft (and caches): `tree`, or plain decoding when not
        `speculative`. Requests must not run on both at once."""
        tree_cfg = resolve(tree)
        decoder = type(self)(self.base, self.draft if speculative else None, self.base_spec, tree_cfg, self.device,
                            self.max_seq_len)
        decoder.precision, decoder.backoff, decoder.draft_window = self.precision, self.backoff, self.draft_window
        if self.backoff is not None:  # step times belong to a tree: this decoder's requests share their own
            decoder.step_times = StepTimes(self.backoff.alpha)
        return decoder

    def with_backoff(self, backoff: Backoff | None = Backoff()) -> EagleDecoder:
        """Another decoder over the same base, draft and caches whose requests back off to plain steps while those
        commit more tokens per second (runtime.backoff); None: always speculate."""
        decoder = self.with_tree(self.tree)
        decoder.backoff = backoff
        decoder.step_times = StepTimes(getattr(backoff, "alpha", Backoff.alpha))
        return decoder

    def with_draft(self, draft) -> EagleDecoder:
        """Another decoder over the same loaded base (and its cache) with `draft` in place of this one's: a draft
        head built elsewhere (a trained candidate, a test's oracle). Requests must not run on both at once."""
        decoder = type(self)(self.base, draft, self.base_spec, self.tree, self.device, self.max_seq_len)
        decoder.precision, decoder.backoff, decoder.draft_window = self.precision, self.backoff, self.draft_window
        return decoder

    # ---- public API ---------------------------------------------------------------------------------------------
    def generate_all(self, input_ids: Sequence[int], max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
                     stop_token_ids: Sequence[int] = (), stop_strings: Sequence[str] = (), tokenizer=None,
                     stop_sequences: Sequence[Sequence[int]] = (), caches: tuple | None = None,
                     reuse_prefix: bool = False) -> GenerationResult:
        """The whole request at once (`generate`'s arguments)."""
        tokens, reason, stats = [], "length", GenerationStats()
        for step in self.generate(input_ids, max_new_tokens, sampling, stop_token_ids, stop_strings, tokenizer,
                                  caches=caches, stop_sequences=stop_sequences, reuse_prefix=reuse_prefix):
            tokens = tokens[:len(tokens) - step.retract] + step.token_ids
            stats, reason = step.stats, step.finish_reason or reason
        return GenerationResult(tokens, reason, stats)

    def generate(self, input_ids: Sequence[int], max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
                 stop_token_ids: Sequence[int] = (), stop_strings: Sequence[str] = (),
                 tokenizer=None, caches: tuple | None = None,
                 stop_sequences: Sequence[Sequence[int]] = (), reuse_prefix: bool = False) -> Generation:
        """Iterate over the verify steps of one request; `.stats` is live while it runs. Bad requests raise
        EagleTrtError here, before any work. Stops (runtime.stops): stop token ids (kept), stop sequences of token
        ids (cut before), stop strings (cut after; need `tokenizer`). `caches`: (base KVCache, draft KVCache or None)
        of this request when several run at once (runtime.batching); None: the decoder's own. `reuse_prefix`: where
        the base cache holds a finished request this prompt continues, prefill only the rest (runtime.prefix)."""
        prompt = [int(t) for t in input_ids]
        self._check_request(prompt, max_new_tokens, stop_strings, tokenizer)
        stats = GenerationStats()
        stops = Stops.of(stop_token_ids, stop_sequences, stop_strings, tokenizer)
        caches = caches or (self.base.cache, self.draft.cache if self.draft is not None else None)
        reused = reusable_prefix(caches[0].held, prompt) if reuse_prefix and self.base.batch_invariant else 0
        steps = self._steps(prompt, max_new_tokens, sampling, stops, stats, caches, reused)
        next(steps)  # primed: the first `send` starts the work
        return Generation(steps, stats, self)

    @torch.inference_mode()
    def _steps(self, prompt, max_new_tokens, sampling, stops: Stops, stats: GenerationStats, caches: tuple,
               reused: int) -> Iterator:
        """The request as a coroutine: yields StepOutputs, and BaseCalls / DraftCalls whose answers come back by
        `send` (Generation answers them alone, runtime.batching packs those of several requests). The base cache
        holds the K/V of `reused` leading prompt tokens already; at the end it records what it holds."""
        cache, fed = caches[0], []  # fed: the tokens whose K/V the base cache holds at slots 0..len-1
        cache.held = None
        try:
            yield None  # primed by generate()
            yield from self._request(prompt, max_new_tokens, sampling, stops, stats, caches, reused, fed)
        finally:
            cache.held = HeldTokens(len(prompt), tuple(fed)) if fed else None

    def _request(self, prompt, max_new_tokens, sampling, stops: Stops, stats: GenerationStats, caches: tuple,
                 reused: int, fed: list[int]) -> Iterator:
        cache, draft_cache = caches
        gen = torch.Generator().manual_seed(sampling.seed if sampling.seed is not None else
                                            int(torch.randint(0, 2**62, ()).item()))
        out_tokens = []
        clock = StepClock(self.device)
        t0 = clock.mark()
        ids = torch.tensor(prompt, dtype=torch.long, device=self.device)  # [P]
        fed += prompt[:reused]
        logits, hidden, captured = yield BaseCall(ids[reused:], torch.arange(reused, len(prompt), device=self.device),
                                                  reused, None, cache, last_logits_only=True)  # hidden: [P - reused, H]
        fed += prompt[reused:]
        stats.cached_prompt_tokens = reused
        root = self._sample(logits[-1], sampling, gen)
        # this request's text (fed, then the root) for suffix candidates, extended by the steps that propose them
        sam = SuffixAutomaton()
        update = None  # the draft rows the last base forward gives: the prompt (shifted by one), then accepted paths
        skipped = 0  # prompt positions the draft does not read: its cache slot of position p is p - skipped
        if self.draft is not None:
            rows = draft_rows(len(prompt), self.draft_window, self.device)  # [W] prompt positions
            rows = rows[rows >= reused]  # the base ran these (always the last)
            skipped = len(prompt) - rows.numel()
            shifted = torch.cat((ids[1:], torch.tensor([root], device=self.device)))  # [P]
            run = rows - reused  # [W] rows of this prefill's hidden
            update = DraftCall(shifted[rows], self.draft.base_features(
                hidden[run], captured[run] if captured is not None else None), rows, 0, draft_cache,
                top_k=self._root_k(), last_only=True)
        clock.add(stats, "prefill_time_s", t0, clock.mark())
        committed = [root]
        length = len(prompt)  # tokens in the base cache (the root is not yet in it)
        pending = []  # (tokens, hidden [A, H], captured [A, n*H] or None, first position) per step the draft has not read
        policy = self.backoff.start(self.step_times) if self.backoff is not None and self.draft is not None else None
        while True:
            step, reason, retract = stops.cut(out_tokens, committed, max_new_tokens)
            out_tokens = out_tokens[:len(out_tokens) - retract] + step
            clock.settle(stats, wait=reason is not None)
            yield StepOutput(step, stats, reason, retract)
            if reason is not None:
                return
            t0 = clock.mark()
            step_start = time.perf_counter()
            own = policy is not None and not self.batched  # this request's backoff decides (it runs alone)
            speculate = self.draft is not None and not self.plain_now and (not own or policy.speculate())
            shape = self.tree_now or self  # whose tree this step drafts (runtime.batching: the batch's), else own
            if not speculate:
                tree = root_only(root, self.device)
            else:
                caught_up = len(pending) > 1 or (update is not None and stats.steps > 0)  # after plain steps
                if pending:
                    update = self._draft_update(update, pending, skipped, draft_cache)
                    pending = []
                if caught_up:  # the latest skipped positions only; later positions sit `dropped` more slots back
                    update, dropped = resume_rows(update)
                    skipped += dropped
                root_draft = yield update  # the root's draft output [1, H] and its top-k
                if stats.steps == 0:  # the draft's pass over the prompt: prefill
                    t0, t_prefill = clock.mark(), t0
                    clock.add(stats, "prefill_time_s", t_prefill, t0)
                    step_start = time.perf_counter()
                elif caught_up:  # the draft's catch-up on plain steps' positions is not a speculative step's cost
                    step_start = time.perf_counter()  # (the backoff's timing)
                update = None
                tree = yield from shape._tree_steps(root, root_draft, length, skipped, draft_cache)
                if self.batched and tree.scores is not None:  # the batch picks the nodes it verifies (runtime.batching)
                    tree = prune(tree, (yield TreeOffer(tree.scores)))
            drafted = tree.num_draft_tokens
            # suffix candidates need no draft: a step the request's own backoff runs plain still proposes them
            suffix = shape.tree.suffix if speculate or (own and not self.plain_now) else None
            if suffix is not None:
                merged = merge_chain(tree, sam.catch_up(fed, root).propose(suffix.min_match, suffix.max_tokens))
                tree = merged.tree
                stats.num_suffix_tokens += merged.added
            t1 = clock.mark()
            positions = length + tree.depths  # [N+1]
            logits, hidden, captured = yield BaseCall(tree.tokens, positions, length, tree.mask, cache,
                                                      tree.shape.packed)
            if self.on_verify is not None:
                self.on_verify(tree, logits)
            if sampling.greedy:
                accepted = accept_greedy(logits, tree)
            else:
                accepted = accept_sampling(logits, tree, sampling, gen)
            path, committed = accepted.path, accepted.tokens
            sel = slice(0, len(path))  # the accepted node ids, root first: the first rows, or [A] where they are not
            if path != list(range(len(path))):
                sel = torch.tensor(path, device=self.device)
                cache.compact(length, sel + length)
            fed += [root] + committed[:-1]  # the path's tokens: their K/V now sit at length..length+len(path)-1
            stats.steps += 1
            stats.accepted_lengths.append(len(committed))
            stats.num_draft_tokens += tree.num_draft_tokens
            stats.num_accepted_draft_tokens += len(path) - 1
            if suffix is not None:
                stats.num_accepted_suffix_tokens += sum(1 for node in path if node > drafted)
            if self.draft is not None:  # read at the next draft call (a plain step only keeps them: cheap)
                pending.append((committed, hidden[sel], captured[sel] if captured is not None else None, length))
                if len(pending) > PENDING_STEPS:  # a long plain stretch: the draft will read only the latest rows
                    update, dropped = resume_rows(self._draft_update(update, pending, skipped, draft_cache))
                    pending, skipped = [], skipped + dropped
            if own:
                policy.record(speculate, len(committed), time.perf_counter() - step_start)
            stats.num_plain_steps += self.draft is not None and not speculate
            length += len(path)
            root = accepted.bonus
            clock.add(stats, "draft_time_s", t0, t1)
            clock.add(stats, "verify_time_s", t1, clock.mark())

    # ---- internals ----------------------------------------------------------------------------------------------
    def _root_k(self) -> int:
        """The top-k of the root's draft output that depth 1 of this decoder's tree reads (at least root_k_floor:
        the next step may draft another view's tree, runtime.batching)."""
        return max(self.plan.root_k if self.plan is not None else self.tree.top_k, self.root_k_floor)

    def _draft_update(self, update: DraftCall | None, pending: list[tuple], skipped: int, draft_cache) -> DraftCall:
        """One draft call over the accepted rows the draft has not read: the last step's path, or every step's since
        it last ran (plain steps), after `update` (the prompt's, not yet run) when there is one."""
        tokens = [t for step in pending for t in step[0]]
        hidden = torch.cat([step[1] for step in pending]) if len(pending) > 1 else pending[0][1]  # [A, H]
        captured = None
        if pending[0][2] is not None:
            captured = torch.cat([step[2] for step in pending]) if len(pending) > 1 else pending[0][2]  # [A, n*H]
        first = pending[0][3]
        call = DraftCall(torch.tensor(tokens, device=self.device), self.draft.base_features(hidden, captured),
                         torch.arange(first, first + len(tokens), device=self.device), first - skipped, draft_cache,
                         top_k=self._root_k(), last_only=True)  # [A] ids and positions, [A, H] features
        return call if update is None else joined(update, call)

    def _tree_steps(self, root: int, root_draft: DraftOut, length: int, skipped: int, draft_cache):
        """The draft tree's generator (static or dynamic) over this request's draft cache, whose slots run
        `skipped` behind the positions (the prompt positions the draft did not read). In a batch (`batched`, set on
        every view of a Batcher) the tree carries its nodes' draft scores, which the batch verifies by."""
        if self.plan is not None:
            return static_tree(self.plan, root, root_draft, length - skipped, draft_cache, skipped, self.batched)
        t = self.tree
        return dynamic_tree(t.depth, t.top_k, t.total_tokens, root, root_draft, length - skipped, draft_cache,
                            skipped)

    @staticmethod
    def _sample(logits: torch.Tensor, sampling: SamplingParams, gen: torch.Generator) -> int:
        if sampling.greedy:
            return int(greedy_ids(logits).item())
        return int(torch.multinomial(sampling_probs(logits, sampling).cpu(), 1, generator=gen).item())

    def _check_request(self, prompt, max_new_tokens, stop_strings, tokenizer) -> None:
        """The request rules every front end shares (eagle_trt.request_rules), on token ids."""
        if not prompt:
            raise rules.bad_request("input_ids", "the prompt is empty (0 tokens)", "pass at least one token")
        for token in prompt:
            rules.check_token_id("input_ids", token, self.base.args.vocab_size)
        rules.check_max_tokens("max_new_tokens", max_new_tokens, len(prompt), self.max_seq_len)
        if stop_strings and tokenizer is None:
            raise EagleTrtError("stop strings need a tokenizer", "pass tokenizer= or use stop token ids")
