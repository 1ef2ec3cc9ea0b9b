"""Build one step's draft tree: a static tree (choices) or an EAGLE-2 dynamic tree (expand + rerank).

The draft's KV cache holds `stable` rows (the accepted prefix; its last row pairs the last accepted feature with
the root token, so its output `root_out` predicts depth 1). Tree rows are written after the stable rows, each one
pairing its parent's draft output with its own token at draft position stable + depth - 1, and attend to the
stable prefix plus their tree ancestors. They are discarded after the step (docs/eagle_algorithms.md §3).

Drafting is written as generators (`static_tree`, `dynamic_tree`) that yield one DraftCall per draft forward and
get its DraftOut back, so runtime.batching can answer the same-depth calls of all running requests with one packed
draft forward; `run_alone` answers them one at a time.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import torch

from eagle_trt.runtime.draft import DraftCall, DraftHead, DraftOut
from eagle_trt.runtime.model import KVCache
from eagle_trt.tree import Tree, ancestor_mask, pack_mask

# The prompt positions the draft reads of a longer prompt: the first DRAFT_SINK (attention sinks, StreamingLLM) and
# the most recent ones, DRAFT_WINDOW in all (MagicDec drafts over such a window). A draft pass over a whole 4k prompt
# costs ~4 % of the base's prefill, more than EAGLE saves on a short answer; text from further back still reaches the
# tree through the suffix candidates, which index the whole prompt. Lossless either way: the base verifies.
DRAFT_SINK, DRAFT_WINDOW = 4, 256
# Speculation resuming after plain steps (runtime.backoff, a batch's load policy or backoff): the draft reads the
# most recent RESUME_WINDOW of the positions it skipped (and a prompt it never read: its sink and as many of its
# latest positions), not all of them. A probe that finds plain faster then costs a short draft call, not one over
# every position since the draft last ran (a batch of 4 after a stretch of plain rounds: ~57 ms, 4 plain rounds).
# 16, not 32 (since 2026-11-30): tau after a resume read 1.438 with either (docs/native_cpu.md), and a batch of 4
# resuming on native-q8 at one thread spent ~5.2 ms in a catch-up of 4 x 36 rows (~0.7 of a plain round).
RESUME_WINDOW = 16
# Steps of accepted rows a request keeps for the draft while it decodes plainly; past them it joins them into one call
# of the latest RESUME_WINDOW rows (what resuming reads anyway), so a long plain stretch holds no row per step.
PENDING_STEPS = 2 * RESUME_WINDOW


@dataclass(frozen=True)
class TreeShape:
    """A tree's structure as the verify step uses it, built once (per static tree, or per dynamic step) on the
    tree's device: what the base forward masks with and what acceptance walks."""

    parents: list[int]  # [N+1], parents[0] = -1
    children: list[list[int]]  # children[i] in draft-rank order
    depths: torch.Tensor  # [N+1] int64
    mask: torch.Tensor  # [N+1, N+1] bool, ancestor-or-self
    packed: torch.Tensor | None  # [N+1, ceil((N+1)/32)] int32 TRT-LLM packed mask, on CUDA only (tree kernel)

    @classmethod
    def of(cls, parents: list[int], device) -> TreeShape:
        n = len(parents)
        mask = ancestor_mask(parents)  # [n, n] bool
        depths = [0] * n
        children: list[list[int]] = [[] for _ in range(n)]
        for i in range(1, n):
            depths[i] = depths[parents[i]] + 1
            children[parents[i]].append(i)
        on_cuda = torch.device(device).type == "cuda"
        packed = torch.from_numpy(pack_mask(mask)).to(device) if on_cuda and n > 1 else None
        return cls(list(parents), children, torch.tensor(depths, device=device), torch.from_numpy(mask).to(device),
                   packed)


@dataclass
class DraftTree:
    """One step's tree, root first, parents before children: its tokens over a TreeShape, and each node's
    cumulative draft log-prob (the draft's estimate that the base accepts the path to it; None where not known)."""

    tokens: torch.Tensor  # [N+1] int64, tokens[0] = root
    shape: TreeShape
    scores: torch.Tensor | None = None  # [N] float32, nodes 1..N

    @property
    def num_draft_tokens(self) -> int:
        return len(self.shape.parents) - 1

    @property
    def parents(self) -> list[int]:
        return self.shape.parents

    @property
    def children(self) -> list[list[int]]:
        return self.shape.children

    @property
    def depths(self) -> torch.Tensor:
        return self.shape.depths

    @property
    def mask(self) -> torch.Tensor:
        return self.shape.mask

    @classmethod
    def from_parents(cls, tokens: torch.Tensor, parents: list[int], device, scores=None) -> DraftTree:
        return cls(tokens, TreeShape.of(parents, device), scores)


@dataclass
class TreeOffer:
    """What a request in a batch yields once it drafted its tree (runtime.batching): the nodes' cumulative draft
    log-probs [N]; the batch answers how many of them (the most likely first) the request verifies."""

    scores: torch.Tensor  # [N]


_ROOT_SHAPES: dict[str, TreeShape] = {}  # device -> the bare root's shape, built once
_PRUNED_SHAPES: dict[tuple, TreeShape] = {}  # (device, parents) -> shape: the subtrees `prune` keeps, built once
_PRUNED_SHAPES_MAX = 512


def prune(tree: DraftTree, keep: int) -> DraftTree:
    """The root and the tree's `keep` nodes of the highest cumulative draft log-probs: a connected subtree (a child's
    score is its parent's plus a log-prob <= 0; on equal scores the lower node id, a parent before its children, comes
    first). The whole tree where keep >= N or the scores are not known."""
    n = tree.num_draft_tokens
    if tree.scores is None or keep >= n:
        return tree
    device = tree.tokens.device
    if keep <= 0:
        return root_only(int(tree.tokens[0]), device)
    best = torch.sort(-tree.scores, stable=True).indices[:keep].sort().values.tolist()  # node ids - 1, in order
    node_of, parents, kept = {0: 0}, [-1], [0]
    for i in best:
        parent = tree.parents[i + 1]
        if parent in node_of:  # (NaN scores could orphan a child: it goes)
            node_of[i + 1] = len(parents)
            parents.append(node_of[parent])
            kept.append(i + 1)
    key = (str(device), tuple(parents))
    if key not in _PRUNED_SHAPES:
        if len(_PRUNED_SHAPES) >= _PRUNED_SHAPES_MAX:
            _PRUNED_SHAPES.clear()
        _PRUNED_SHAPES[key] = TreeShape.of(parents, device)
    return DraftTree(tree.tokens[kept], _PRUNED_SHAPES[key], tree.scores[[k - 1 for k in kept[1:]]])


def draft_rows(prompt_len: int, window: int, device) -> torch.Tensor:
    """The prompt positions [W] the draft reads: all of a prompt up to `window` (0: any prompt), else its first
    DRAFT_SINK and its most recent positions, `window` in all."""
    if not window or prompt_len <= window:
        return torch.arange(prompt_len, device=device)
    sink = min(DRAFT_SINK, window // 2)
    return torch.cat((torch.arange(sink, device=device),
                      torch.arange(prompt_len - (window - sink), prompt_len, device=device)))


def resume_rows(call: DraftCall, window: int = RESUME_WINDOW) -> tuple[DraftCall, int]:
    """The rows of a catch-up call (the positions the draft skipped, in order, at slots call.start..) it reads: all
    of them up to `window` (plus DRAFT_SINK where the cache is still empty), else the sink (from slot 0 only) and
    the latest `window`; and how many it drops. The kept rows take consecutive slots from call.start, so positions
    after them sit `dropped` more slots back (the caller's `skipped`)."""
    n = call.input_ids.numel()
    sink = DRAFT_SINK if call.start == 0 else 0
    if n <= sink + window:
        return call, 0
    keep = torch.cat((torch.arange(sink), torch.arange(n - window, n))).to(call.positions.device)  # [sink + window]
    return DraftCall(call.input_ids[keep], call.features[keep], call.positions[keep], call.start, call.cache,
                     call.mask, call.top_k, call.last_only), n - sink - window


def root_only(root: int, device) -> DraftTree:
    """The bare root: plain decoding through the verify path."""
    key = str(device)
    if key not in _ROOT_SHAPES:
        _ROOT_SHAPES[key] = TreeShape.of([-1], device)
    return DraftTree(torch.tensor([root], device=device), _ROOT_SHAPES[key])


class _TreeRows:
    """Bookkeeping of the tree rows written into the draft cache this step (for ancestor masks)."""

    def __init__(self, stable: int, device):
        self.stable, self.device = stable, device
        self.row_of: dict[int, int] = {}  # node id -> row index after the stable prefix
        self.ancestors: dict[int, list[int]] = {0: []}  # node id -> tree-row indices of its ancestors incl. itself

    def mask(self, nodes: list[int], parents: list[int]) -> torch.Tensor:
        """[len(nodes), stable + rows + len(nodes)] bool for a new block of rows: the stable prefix is made on the
        device, only the tree part [len(nodes), rows + len(nodes)] is built here and copied."""
        rows, t = len(self.row_of), len(nodes)
        tree_part = torch.zeros(t, rows + t, dtype=torch.bool)  # [t, rows + t]
        for i, (node, parent) in enumerate(zip(nodes, parents)):
            anc = self.ancestors[parent] + [rows + i]
            self.ancestors[node] = anc
            tree_part[i, anc] = True
            self.row_of[node] = rows + i
        prefix = torch.ones(t, self.stable, dtype=torch.bool, device=self.device)  # [t, stable]
        return torch.cat((prefix, tree_part.to(self.device)), dim=1)


@dataclass(frozen=True)
class DepthStep:
    """What drafting one depth of a static tree needs, precomputed: which rows of the previous draft forward (the
    root's update for depth 1) and which ranks of their top-k fill which nodes, and the draft forward over the nodes
    that have children (their rows' mask over the tree rows written so far)."""

    nodes: list[int]  # node ids at this depth
    parent_nodes: torch.Tensor  # [len(nodes)] node id of each node's parent
    idx_parent: torch.Tensor  # [len(nodes)] row of each node's parent in the previous draft forward's output
    idx_rank: torch.Tensor  # [len(nodes)] draft rank of each node
    k: int  # top-k needed at this depth
    expand: list[int]  # nodes at this depth that have children (drafted further)
    feat_rows: torch.Tensor  # [len(expand)] row of each expanded node's parent (whose output is its feature)
    tree_mask: torch.Tensor | None  # [len(expand), rows so far incl. these] bool over the tree rows
    rows_before: int  # tree rows written before this depth


@dataclass(frozen=True)
class StaticPlan:
    """A static tree grouped by depth, with every structural tensor built once (not per step)."""

    tree: Tree
    parents: list[int]
    steps: list[DepthStep]
    shape: TreeShape  # every step's DraftTree shares it

    @property
    def root_k(self) -> int:
        """The top-k the root's draft output needs (depth 1)."""
        return self.steps[0].k

    @classmethod
    def of(cls, tree: Tree, device="cpu") -> StaticPlan:
        parents, depths, ranks = tree.parents().tolist(), tree.depths().tolist(), tree.ranks().tolist()
        kids = set(parents[1:])
        row_of, ancestors, steps = {}, {0: []}, []
        prev_rows = {0: 0}  # node -> its row in the previous draft forward (the root's update before depth 1)
        for depth in range(1, tree.depth + 1):
            nodes = [n for n in range(1, len(parents)) if depths[n] == depth]
            expand = [x for x in nodes if x in kids]
            rows_before = len(row_of)
            mask = None
            if expand:
                mask = torch.zeros(len(expand), rows_before + len(expand), dtype=torch.bool)
                for i, x in enumerate(expand):
                    ancestors[x] = ancestors[parents[x]] + [rows_before + i]
                    mask[i, ancestors[x]] = True
                    row_of[x] = rows_before + i
                mask = mask.to(device)
            steps.append(DepthStep(nodes, torch.tensor([parents[x] for x in nodes], device=device),
                                   torch.tensor([prev_rows[parents[x]] for x in nodes], device=device),
                                   torch.tensor([ranks[x] for x in nodes], device=device),
                                   max(ranks[x] for x in nodes) + 1, expand,
                                   torch.tensor([prev_rows[parents[x]] for x in expand], device=device), mask,
                                   rows_before))
            prev_rows = {x: i for i, x in enumerate(expand)}
        return cls(tree, parents, steps, TreeShape.of(parents, device))


def static_tree(plan: StaticPlan, root: int, root_draft: DraftOut, stable: int, cache: KVCache | None,
                skipped: int = 0, scored: bool = False) -> Generator[DraftCall, DraftOut, DraftTree]:
    """Fill a static tree: each node takes the rank-r token of its parent's draft distribution. A generator: it
    yields one DraftCall per depth that has nodes with children (answered by `send`) and returns the DraftTree
    (`scored`: with its nodes' cumulative draft log-probs, ~60 us a step for a 5-depth tree on a CPU, so only where
    a batch reads them). root_draft: the root's draft output [1, H] with its top-`plan.root_k`; stable: the draft
    cache's committed slots, whose positions run `skipped` ahead (prompt positions the draft did not read)."""
    device = root_draft.out.device
    tokens = torch.empty(len(plan.parents), dtype=torch.long, device=device)  # [N+1]
    tokens[0] = root
    scores = torch.zeros(len(plan.parents), device=device) if scored else None  # [N+1] the root's 0
    prev = root_draft  # the draft forward whose rows are this depth's parents
    for depth, step in enumerate(plan.steps, start=1):
        tokens[step.nodes] = prev.ids[step.idx_parent, step.idx_rank]
        if scored:
            scores[step.nodes] = scores[step.parent_nodes] + prev.scores[step.idx_parent, step.idx_rank]
        if not step.expand:
            break  # a depth without children is the last
        t = len(step.expand)
        mask = torch.cat((torch.ones(t, stable, dtype=torch.bool, device=device), step.tree_mask), dim=1)
        pos = torch.full((t,), skipped + stable + depth - 1, dtype=torch.long, device=device)  # [t]
        feats = prev.out[step.feat_rows]  # [t, H]
        prev = yield DraftCall(tokens[step.expand], feats, pos, stable + step.rows_before, cache, mask,
                               top_k=plan.steps[depth].k)
    return DraftTree(tokens, plan.shape, scores[1:] if scored else None)


def dynamic_tree(depth: int, top_k: int, total_tokens: int, root: int, root_draft: DraftOut, stable: int,
                 cache: KVCache | None, skipped: int = 0) -> Generator[DraftCall, DraftOut, DraftTree]:
    """EAGLE-2: expand the top_k best frontier nodes `depth` times by cumulative log-prob, then keep the
    `total_tokens` best of the pool (a connected subtree: a child never scores above its parent). A generator like
    `static_tree` (one DraftCall per depth; stable and skipped as there); root_draft carries the root's top-`top_k`. One transfer to the host per
    depth (the frontier) and one at the end (the kept nodes)."""
    root_out = root_draft.out  # [1, H]
    device = root_out.device
    scores, toks = root_draft.scores[:, :top_k], root_draft.ids[:, :top_k]  # [1, k] (it may carry more)
    pool_scores, pool_tokens = [scores[0]], [toks[0]]
    pool_parent = [-1] * top_k  # pool index -> pool index of its parent (-1: the root)
    frontier = torch.arange(top_k, device=device)  # [k] pool indices
    frontier_scores = scores[0]
    frontier_feats = root_out.expand(top_k, -1)  # [k, H]
    rows = _TreeRows(stable, device)
    for step in range(depth):
        nodes = frontier.tolist()  # the step's one transfer to the host
        mask = rows.mask([x + 1 for x in nodes], [pool_parent[x] + 1 for x in nodes])
        start = stable + len(rows.row_of) - len(nodes)
        pos = torch.full((len(nodes),), skipped + stable + step, dtype=torch.long, device=device)  # [k]
        ids = torch.cat(pool_tokens)[frontier]  # [k]
        answer = yield DraftCall(ids, frontier_feats, pos, start, cache, mask, top_k=top_k)
        out, cs, ct = answer.out, answer.scores, answer.ids  # [k, H], [k, k], [k, k]
        child_scores = (frontier_scores[:, None] + cs).reshape(-1)  # [k*k]
        offset = len(pool_parent)
        pool_scores.append(child_scores)
        pool_tokens.append(ct.reshape(-1))
        pool_parent += [x for x in nodes for _ in range(top_k)]
        if step == depth - 1:
            break
        best = child_scores.topk(top_k).indices  # [k]
        frontier = offset + best
        frontier_scores = child_scores[best]
        frontier_feats = out[best // top_k]
    all_scores, all_tokens = torch.cat(pool_scores), torch.cat(pool_tokens)
    # stable sort: on equal scores the lower pool index (a parent precedes its children) wins
    order = torch.sort(-all_scores, stable=True).indices
    keep = order[: min(total_tokens, all_scores.numel())].sort().values.tolist()
    node_of = {-1: 0}
    parents, chosen = [-1], []
    for pool_idx in keep:
        parent = pool_parent[pool_idx]
        if parent not in node_of:  # ties/NaN can orphan a child; drop it (docs/eagle_algorithms.md §3)
            continue
        node_of[pool_idx] = len(parents)
        parents.append(node_of[parent])
        chosen.append(pool_idx)
    tokens = torch.cat((torch.tensor([root], device=device), all_tokens[chosen]))  # [N+1]
    return DraftTree.from_parents(tokens, parents, device, all_scores[chosen])


@torch.inference_mode()
def run_alone(draft: DraftHead, steps: Generator[DraftCall, DraftOut, DraftTree]) -> DraftTree:
    """Drive a tree generator for one request on its own: each DraftCall through `draft.forward_packed`."""
    try:
        call = next(steps)
        while True:
            call = steps.send(draft.forward_packed([call])[0])
    except StopIteration as done:
        return done.value
