"""`--tree auto`, the draft's acceptance by depth and rank: a probe tree (a rank-0 spine with PROBE_WIDTH candidates
at every depth) verified on calibration prompts, and the counter that reads, at each verify step, which candidate
held the base's greedy token (tuning/calibrate.py runs it; tuning/tree_tuner.py grows trees from its table)."""

from __future__ import annotations

import torch

from eagle_trt.tree import Tree

PROBE_DEPTH, PROBE_WIDTH = 6, 8  # the calibration tree: a rank-0 spine, PROBE_WIDTH candidates at every depth


def probe_tree(depth: int = PROBE_DEPTH, width: int = PROBE_WIDTH) -> Tree:
    """[[0..W-1], [0,0..W-1], ...]: the spine (rank 0) and its W candidates at each depth."""
    return Tree.from_choices([[0] * d + [r] for d in range(depth) for r in range(width)])


class AcceptanceCounter:
    """Engine on_verify hook: at each spine node the base's greedy token is reached by, walk the candidates."""

    def __init__(self, depth: int, width: int):
        self.reached = [0] * depth
        self.hits = [[0] * width for _ in range(depth)]

    def __call__(self, tree, logits: torch.Tensor) -> None:
        best = logits.argmax(dim=-1).tolist()
        tokens = tree.tokens.tolist()
        node = 0
        for d in range(len(self.reached)):
            kids = tree.children[node]
            if not kids:
                return
            self.reached[d] += 1
            match = next((r for r, c in enumerate(kids) if tokens[c] == best[node]), None)
            if match is None:
                return
            self.hits[d][match] += 1
            if match != 0:
                return
            node = kids[0]

    def table(self) -> list[list[float]]:
        """p[d][r], made non-increasing in r (the greedy tree growth relies on it)."""
        out = []
        for reached, hits in zip(self.reached, self.hits):
            row = [h / reached if reached else 0.0 for h in hits]
            out.append([min(row[: r + 1]) for r in range(len(row))])
        return out
