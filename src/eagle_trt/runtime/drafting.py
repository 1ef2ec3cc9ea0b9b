"""Build one step's draft tree: a static tree (choices) or an EAGLE-2 dynamic tree (expand + rerank).

The draft's KV cache holds `stable` rows (the accepted prefix; its last row pairs the last accepted feature with
the root token, so its output `root_out` predicts depth 1). Tree rows are written after the stable rows, each one
pairing its parent's draft output with its own token at draft position stable + depth - 1, and attend to the
stable prefix plus their tree ancestors. They are discarded after the step (docs/eagle_algorithms.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eagle_trt.runtime.draft import DraftHead
from eagle_trt.tree import Tree, ancestor_mask, pack_mask


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
    """One step's tree, root first, parents before children: its tokens over a TreeShape."""

    tokens: torch.Tensor  # [N+1] int64, tokens[0] = root
    shape: TreeShape

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
    def from_parents(cls, tokens: torch.Tensor, parents: list[int], device) -> DraftTree:
        return cls(tokens, TreeShape.of(parents, device))


_ROOT_SHAPES: dict[str, TreeShape] = {}  # device -> the bare root's shape, built once


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
    """What drafting one depth of a static tree needs, precomputed: which parents' top-k feed which nodes, and the
    draft forward over the nodes that have children (their rows' mask over the tree rows written so far)."""

    nodes: list[int]  # node ids at this depth
    parent_ids: list[int]  # distinct parents, in the order their draft outputs are stacked
    idx_parent: torch.Tensor  # [len(nodes)] index into parent_ids
    idx_rank: torch.Tensor  # [len(nodes)] draft rank of each node
    k: int  # top-k needed at this depth
    expand: list[int]  # nodes at this depth that have children (drafted further)
    expand_feats: list[int]  # their parents (whose outputs are their features)
    tree_mask: torch.Tensor | None  # [len(expand), rows so far incl. these] bool over the tree rows
    rows_before: int  # tree rows written before this depth


@dataclass(frozen=True)
class StaticPlan:
    """A static tree grouped by depth, with every structural tensor built once (not per step)."""

    tree: Tree
    parents: list[int]
    steps: list[DepthStep]
    shape: TreeShape  # every step's DraftTree shares it

    @classmethod
    def of(cls, tree: Tree, device="cpu") -> StaticPlan:
        parents, depths, ranks = tree.parents().tolist(), tree.depths().tolist(), tree.ranks().tolist()
        kids = set(parents[1:])
        row_of, ancestors, steps = {}, {0: []}, []
        for depth in range(1, tree.depth + 1):
            nodes = [n for n in range(1, len(parents)) if depths[n] == depth]
            parent_ids = sorted({parents[x] for x in nodes})
            slot = {p: i for i, p in enumerate(parent_ids)}
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
            steps.append(DepthStep(nodes, parent_ids, torch.tensor([slot[parents[x]] for x in nodes], device=device),
                                   torch.tensor([ranks[x] for x in nodes], device=device),
                                   max(ranks[x] for x in nodes) + 1, expand, [parents[x] for x in expand], mask,
                                   rows_before))
        return cls(tree, parents, steps, TreeShape.of(parents, device))


@torch.inference_mode()
def draft_static(draft: DraftHead, plan: StaticPlan, root: int, root_out: torch.Tensor, stable: int) -> DraftTree:
    """Fill a static tree: each node takes the rank-r token of its parent's draft distribution."""
    device = root_out.device
    tokens = torch.empty(len(plan.parents), dtype=torch.long, device=device)  # [N+1]
    tokens[0] = root
    outs = {0: root_out[0]}  # node -> draft output hidden [H]
    for depth, step in enumerate(plan.steps, start=1):
        _, top = draft.topk(torch.stack([outs[p] for p in step.parent_ids]), step.k)  # [num_parents, k]
        tokens[step.nodes] = top[step.idx_parent, step.idx_rank]
        if not step.expand:
            continue
        feats = torch.stack([outs[p] for p in step.expand_feats])  # [t, H]
        t = len(step.expand)
        mask = torch.cat((torch.ones(t, stable, dtype=torch.bool, device=device), step.tree_mask), dim=1)
        pos = torch.full((t,), stable + depth - 1, dtype=torch.long, device=device)  # [t]
        out = draft(tokens[step.expand], feats, pos, stable + step.rows_before, mask)  # [t, H]
        outs.update({x: out[i] for i, x in enumerate(step.expand)})
    return DraftTree(tokens, plan.shape)


@torch.inference_mode()
def draft_dynamic(draft: DraftHead, depth: int, top_k: int, total_tokens: int, root: int,
                  root_out: torch.Tensor, stable: int) -> DraftTree:
    """EAGLE-2: expand the top_k best frontier nodes `depth` times by cumulative log-prob, then keep the
    `total_tokens` best of the pool (a connected subtree: a child never scores above its parent). One transfer to
    the host per depth (the frontier) and one at the end (the kept nodes)."""
    device = root_out.device
    scores, toks = draft.topk(root_out, top_k)  # [1, k]
    pool_scores, pool_tokens = [scores[0]], [toks[0]]
    pool_parent = [-1] * top_k  # pool index -> pool index of its parent (-1: the root)
    frontier = torch.arange(top_k, device=device)  # [k] pool indices
    frontier_scores = scores[0]
    frontier_feats = root_out.expand(top_k, -1)
    rows = _TreeRows(stable, device)
    for step in range(depth):
        nodes = frontier.tolist()  # the step's one transfer to the host
        mask = rows.mask([x + 1 for x in nodes], [pool_parent[x] + 1 for x in nodes])
        start = stable + len(rows.row_of) - len(nodes)
        pos = torch.full((len(nodes),), stable + step, dtype=torch.long, device=device)  # [k]
        ids = torch.cat(pool_tokens)[frontier]  # [k]
        out = draft(ids, frontier_feats, pos, start, mask)  # [k, H]
        cs, ct = draft.topk(out, top_k)  # [k, k]
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
    return DraftTree.from_parents(tokens, parents, device)
