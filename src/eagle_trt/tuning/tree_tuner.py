"""`--tree auto`, the arithmetic: pick the tree that maximises expected accepted tokens per second on this machine.

Inputs: a cost model (tuning/profile.py's table: a base forward over T tokens, a draft forward over W rows, a top-k)
and the draft's acceptance statistics, `p[d][r]` = probability that the base's next token is the draft's rank-r
candidate at depth d+1, given the path to the parent was accepted (measured along the rank-0 spine on calibration
prompts, tuning/calibrate.py; assumed the same for every parent at that depth, as Sequoia does).

A static tree's expected accepted length is 1 + the sum over its nodes of the product of p along the node's path.
Node values only shrink going down (p <= 1) and, with p[d] decreasing in rank, going right, so the best tree of
N nodes is the N most valuable nodes, grown greedily from the root; its cost is one verify forward over N+1 tokens,
one top-k per depth, one draft forward per depth with children, and the draft forward over the accepted tokens that
prepares the next step. Every N up to `max_nodes` is scored and the fastest wins. A dynamic tree (EAGLE-2) is
scored from its measured accepted length and the same cost terms.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from eagle_trt.errors import EagleTrtError
from eagle_trt.tree import Tree
from eagle_trt.tree_config import TreeConfig, resolve

# suffix candidates are kept unless they lose by more than this on the calibration prompts: first turns, which rarely
# repeat themselves, where they accept ~3 % more per step and their extra rows cost about as much; served text
# repeats (later turns, code). Their measured ratio there is noise: the same two trees, the same accepted tokens, on
# this machine measured 1.111x in one `make demo` and 0.987x in the next, 0.997-1.018x in 4 repeats in one process
# (docs/results/2026-11-28-tuner-int8-draft); the demo's second turns ran 1.69x with them, 1.36x without
SUFFIX_KEEP_WITHIN = 0.03
# trees measured within this of the best are a tie on the calibration prompts (the same spread as above); a tie goes
# to the tree that verifies fewer drafted rows. Its cost depends less on acceptance holding up: the calibration
# prompts are ShareGPT first turns, the draft's own training distribution, where deep nodes accept more than they do
# on most served text; and a narrow tree leaves the batch room under load (runtime.batching).
TIE_WITHIN = SUFFIX_KEEP_WITHIN


def _interpolate(table: dict[int, float], x: float) -> float:
    """Piecewise-linear in x over the measured points; linear extrapolation past the last two."""
    keys = sorted(table)
    if len(keys) == 1:
        return table[keys[0]]
    if x <= keys[0]:
        return table[keys[0]]
    for lo, hi in zip(keys, keys[1:]):
        if x <= hi:
            return table[lo] + (table[hi] - table[lo]) * (x - lo) / (hi - lo)
    lo, hi = keys[-2], keys[-1]
    return table[hi] + (table[hi] - table[lo]) * (x - hi) / (hi - lo)


@dataclass(frozen=True)
class CostModel:
    """Milliseconds on this machine. verify: T -> base forward over T tokens (T = 1 is a plain decode step)."""

    verify: dict[int, float]
    draft: dict[int, float]  # W -> draft forward over W rows
    topk: dict[int, float]  # W -> top-k of W rows' draft distributions (host transfer included)
    overhead: float = 0.0  # per EAGLE step, beyond the forwards (host work: acceptance, compaction, bookkeeping)
    plain_overhead: float = 0.0  # per plain decode step, beyond the one-token forward

    @classmethod
    def from_profile(cls, profile: dict, context: int, overhead: float = 0.0, plain_overhead: float = 0.0) -> CostModel:
        """The profile's base-forward rows interpolated at `context` (the calibration prompts' mean length)."""
        rows = {int(c): {int(t): ms for t, ms in row.items()} for c, row in profile["base_forward_ms"].items()}
        if not rows:
            raise EagleTrtError("the cost table has no base-forward rows", "run eagle-trt profile with --contexts")
        ctxs = sorted(rows)
        verify = {t: _interpolate({c: rows[c][t] for c in ctxs}, context) for t in rows[ctxs[0]]}
        draft = {int(w): ms for w, ms in profile.get("draft_step_ms", {}).items()}
        topk = {int(w): ms for w, ms in profile.get("topk_ms", {}).items()}
        return cls(verify, draft or {1: 0.0}, topk or {1: 0.0}, overhead, plain_overhead)

    def plain_step(self) -> float:
        return self.verify[min(self.verify)] + self.plain_overhead

    def verify_ms(self, tokens: int) -> float:
        return _interpolate(self.verify, tokens)

    def draft_ms(self, rows: float) -> float:
        return _interpolate(self.draft, rows)

    def topk_ms(self, rows: float) -> float:
        return _interpolate(self.topk, rows)


@dataclass(frozen=True)
class TreeChoice:
    arg: str  # the --tree value (chain:N | static:[[...]] | dynamic:D,K,T)
    accepted_length: float  # predicted tokens per verify step, bonus included
    step_ms: float  # predicted milliseconds per verify step (drafting included)
    plain_ms: float  # predicted milliseconds per plain decode step

    @property
    def tok_per_s(self) -> float:
        return 1000.0 * self.accepted_length / self.step_ms

    @property
    def speedup(self) -> float:
        return self.accepted_length * self.plain_ms / self.step_ms

    def to_dict(self) -> dict:
        return {"tree": self.arg, "predicted_accepted_length": round(self.accepted_length, 4),
                "predicted_step_ms": round(self.step_ms, 4), "predicted_tok_per_s": round(self.tok_per_s, 3),
                "predicted_plain_tok_per_s": round(1000.0 / self.plain_ms, 3),
                "predicted_speedup": round(self.speedup, 4)}


def grow_tree(accept: list[list[float]], nodes: int) -> tuple[Tree, float]:
    """The `nodes` most valuable nodes (value = product of p along the path) and the expected accepted length."""
    if nodes < 1:
        raise EagleTrtError(f"a tree needs at least one node, got {nodes}", "ask for 1 or more nodes")
    heap = [(-accept[0][r], (r,)) for r in range(len(accept[0]))]
    heapq.heapify(heap)
    chosen, total = [], 0.0
    while heap and len(chosen) < nodes:
        neg, path = heapq.heappop(heap)
        chosen.append(path)
        total += -neg
        if len(path) < len(accept):
            for r, p in enumerate(accept[len(path)]):
                heapq.heappush(heap, (neg * p, path + (r,)))  # -(value * p)
    return Tree.from_choices([list(p) for p in chosen]), 1.0 + total


def static_step_ms(tree: Tree, cost: CostModel, accepted_length: float) -> float:
    """Verify over N+1 tokens + per depth a top-k over the parents (and a forward over the nodes with children
    below the last depth) + the draft forward over the accepted tokens + overhead."""
    depths, parents = tree.depths(), tree.parents()
    has_child = set(parents[1:].tolist())
    ms = cost.verify_ms(tree.num_nodes + 1) + cost.overhead + cost.draft_ms(accepted_length)
    for d in range(1, tree.depth + 1):
        parent_count = len({int(parents[n]) for n in range(1, len(parents)) if depths[n] == d})
        ms += cost.topk_ms(parent_count)
        expand = sum(1 for n in range(1, len(parents)) if depths[n] == d and n in has_child)
        if expand:
            ms += cost.draft_ms(expand)
    return ms


def dynamic_step_ms(cfg: TreeConfig, cost: CostModel, accepted_length: float) -> float:
    """EAGLE-2 (runtime.drafting.draft_dynamic): top-k of the root, then per depth a forward over top_k rows and
    their top-k; the verify forward over total_tokens+1; the draft forward over the accepted tokens."""
    ms = cost.verify_ms(cfg.total_tokens + 1) + cost.overhead + cost.draft_ms(accepted_length) + cost.topk_ms(1)
    return ms + cfg.depth * (cost.draft_ms(cfg.top_k) + cost.topk_ms(cfg.top_k))


def tree_arg(tree: Tree) -> str:
    if all(all(r == 0 for r in c) for c in tree.choices):
        return f"chain:{tree.num_nodes}"
    return TreeConfig("static", tree=tree).to_arg()


def ranked_static_trees(accept: list[list[float]], cost: CostModel, max_nodes: int = 32) -> list[TreeChoice]:
    """The greedy best tree of every size 1..max_nodes and every chain, fastest predicted first (distinct trees)."""
    if not accept or not accept[0]:
        raise EagleTrtError("the acceptance table is empty", "calibrate on at least one prompt")
    candidates = [grow_tree(accept, n) for n in range(1, max_nodes + 1)]
    for depth in range(1, len(accept) + 1):  # chains, which the greedy growth may not visit
        chain_value, value = 1.0, 1.0
        for d in range(depth):
            value *= accept[d][0]
            chain_value += value
        candidates.append((Tree.chain(depth), chain_value))
    choices = {}
    for tree, accepted in candidates:
        choice = TreeChoice(tree_arg(tree), accepted, static_step_ms(tree, cost, accepted), cost.plain_step())
        choices.setdefault(choice.arg, choice)
    return sorted(choices.values(), key=lambda c: -c.tok_per_s)


def choose_tree(measured_tps: dict[str, float]) -> str:
    """The fastest tree measured, or, where that one has no suffix candidates, the fastest with them if it is within
    SUFFIX_KEEP_WITHIN of it; then, of the trees within TIE_WITHIN of that one (with suffix candidates where it has
    them), the one that verifies the fewest drafted rows, the fastest of those. Drafted rows are a cost every step
    carries; suffix rows come only where the text repeats."""
    fastest = max(measured_tps, key=measured_tps.get)
    suffixed = [arg for arg in measured_tps if resolve(arg).suffix is not None]
    keep_suffix = bool(suffixed) and (resolve(fastest).suffix is not None or max(
        measured_tps[arg] for arg in suffixed) >= (1.0 - SUFFIX_KEEP_WITHIN) * measured_tps[fastest])
    pool = suffixed if keep_suffix else list(measured_tps)
    top = max(measured_tps[arg] for arg in pool)
    tied = [arg for arg in pool if measured_tps[arg] >= (1.0 - TIE_WITHIN) * top]
    return min(tied, key=lambda arg: (resolve(arg).drafted.max_draft_tokens, -measured_tps[arg]))
