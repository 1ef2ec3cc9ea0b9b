"""Table tests in vLLM's style, with exact expected values: greedy acceptance over chains and branching trees,
static and dynamic drafting on a scripted draft, and KV-cache compaction."""

from __future__ import annotations

import pytest
import torch

from eagle_trt.runtime.draft import DraftHead, DraftOut
from eagle_trt.runtime.drafting import DraftTree, StaticPlan, dynamic_tree, run_alone, static_tree
from eagle_trt.runtime.model import KVCache
from eagle_trt.runtime.verify import Acceptance, accept_greedy
from eagle_trt.tree import Tree

V = 8  # vocabulary of the scripted tables


def base_logits(best: list[int]) -> torch.Tensor:
    """[N+1, V] logits whose argmax at node i is best[i]."""
    return torch.nn.functional.one_hot(torch.tensor(best), V).float() * 10.0  # [N+1, V]


# ---- greedy acceptance ----------------------------------------------------------------------------------------
CHAIN = ([-1, 0, 1, 2], [0, 5, 6, 7])  # root -> 5 -> 6 -> 7
BRANCHY = ([-1, 0, 0, 1, 1, 2], [0, 5, 6, 7, 4, 3])  # root -> {5 -> {7, 4}, 6 -> 3}


@pytest.mark.parametrize("tree, best, path, bonus", [
    (CHAIN, [5, 6, 7, 1], [0, 1, 2, 3], 1),  # perfect match: every draft token and the bonus
    (CHAIN, [2, 6, 7, 1], [0], 2),  # mismatch at depth 1: only the base's own token
    (CHAIN, [5, 1, 7, 1], [0, 1], 1),  # mismatch at depth 2
    (CHAIN, [5, 6, 2, 1], [0, 1, 2], 2),  # mismatch at depth 3
    (BRANCHY, [1, 0, 0, 0, 0, 0], [0], 1),  # no child of the root matches
    (BRANCHY, [6, 0, 3, 0, 0, 2], [0, 2, 5], 2),  # the root's second child, then its only child
    (BRANCHY, [5, 1, 0, 0, 0, 0], [0, 1], 1),  # first child, mismatch at depth 2
    (BRANCHY, [5, 4, 0, 0, 6, 0], [0, 1, 4], 6),  # first child, then its second child
    (BRANCHY, [5, 7, 0, 2, 0, 0], [0, 1, 3], 2),  # first child, then its first child
], ids=["chain-all", "chain-d1", "chain-d2", "chain-d3", "tree-d1", "tree-second-branch", "tree-d2",
        "tree-sibling-at-d2", "tree-first-at-d2"])
def test_greedy_acceptance(tree, best, path, bonus):
    parents, tokens = tree
    draft_tree = DraftTree.from_parents(torch.tensor(tokens), parents, "cpu")
    assert accept_greedy(base_logits(best), draft_tree) == Acceptance(path, [tokens[i] for i in path[1:]] + [bonus])


def walk_greedy(best: list[int], parents: list[int], tokens: list[int]) -> list[int]:
    """The reference: from the root, descend into the first child (in rank order) holding the base's token."""
    node, path = 0, [0]
    while True:
        nxt = next((c for c in range(1, len(parents)) if parents[c] == node and tokens[c] == best[node]), None)
        if nxt is None:
            return path + [best[node]]
        path.append(nxt)
        node = nxt


def test_greedy_acceptance_by_tensor_ops_matches_the_walk_on_random_trees():
    gen = torch.Generator().manual_seed(3)
    for _ in range(300):
        n = int(torch.randint(1, 14, (), generator=gen))
        parents = [-1] + [int(torch.randint(0, i, (), generator=gen)) for i in range(1, n)]
        tokens = [0] * n
        for node in range(n):  # siblings hold distinct tokens, as top-k drafting gives them
            kids = [c for c in range(1, n) if parents[c] == node]
            for c, tok in zip(kids, torch.randperm(V, generator=gen)[:len(kids)].tolist()):
                tokens[c] = tok
        best = torch.randint(0, V, (n,), generator=gen).tolist()
        want = walk_greedy(best, parents, tokens)
        got = accept_greedy(base_logits(best), DraftTree.from_parents(torch.tensor(tokens), parents, "cpu"))
        assert got.path + [got.bonus] == want
        assert got.tokens == [tokens[i] for i in got.path[1:]] + [got.bonus]


# ---- drafting on a scripted draft ---------------------------------------------------------------------------------
# next-token logits per current token: two ranked choices each, the rest 0 (no ties among the top two)
SCRIPT = {0: {1: 4.0, 2: 3.0}, 1: {3: 4.0, 4: 1.0}, 2: {5: 4.0, 6: 3.5}, 3: {7: 4.0, 0: 2.0},
          4: {5: 4.0, 1: 2.0}, 5: {6: 4.0, 7: 2.5}, 6: {7: 4.0, 2: 1.0}, 7: {0: 4.0, 3: 1.0}}


class ScriptedDraft(DraftHead):
    """A draft whose output for a row is the one-hot of the row's token, and whose next-token distribution is
    SCRIPT's row for that token: what it proposes depends on the token alone."""

    format = "eagle1"

    def __init__(self):
        super().__init__()
        table = torch.zeros(V, V)  # [current token, next token] logits
        for tok, nxt in SCRIPT.items():
            for t, logit in nxt.items():
                table[tok, t] = logit
        self.table = table
        self.calls: list[list[int]] = []

    def hidden_packed(self, calls):
        self.calls += [c.input_ids.tolist() for c in calls]
        return [torch.nn.functional.one_hot(c.input_ids, V).float() for c in calls]  # [T, H=V] each

    def log_probs(self, out):
        return torch.log_softmax(out @ self.table, dim=-1)  # [T, V]


def root_out(draft: DraftHead, token: int, k: int) -> DraftOut:
    """The root's draft output [1, H] with its top-k, as the engine's update call returns it."""
    out = torch.nn.functional.one_hot(torch.tensor([token]), V).float()  # [1, H]
    return DraftOut(out, *draft.topk(out, k))


def test_static_drafting_fills_each_node_with_its_rank():
    tree = Tree.from_choices([[0], [1], [0, 0], [0, 1], [1, 0]])
    draft = ScriptedDraft()
    plan = StaticPlan.of(tree)
    out = run_alone(draft, static_tree(plan, root=0, root_draft=root_out(draft, 0, plan.root_k), stable=4,
                                       cache=None))
    # node 1 = rank 0 of token 0, node 2 = rank 1 of token 0, nodes 3, 4 = ranks 0, 1 of token 1, node 5 = rank 0 of 2
    assert out.tokens.tolist() == [0, 1, 2, 3, 4, 5]
    assert out.parents == [-1, 0, 0, 1, 1, 2]
    assert out.depths.tolist() == [0, 1, 1, 2, 2, 2]
    assert out.children == [[1, 2], [3, 4], [5], [], [], []]
    assert draft.calls == [[1, 2]]  # only depth-1 nodes with children are drafted further


def test_dynamic_drafting_expands_the_best_frontier_and_keeps_the_best_pool():
    """depth 2, top-k 2, 4 tokens. Log-probs of the pool (by hand from SCRIPT): 1: -0.39, 2: -1.39, 1->3: -0.54,
    1->4: -3.54, 2->5: -1.93, 2->6: -2.43; the frontier is {1->3, 2->5}, then 1->3->7: -0.76, 1->3->0: -2.76,
    2->5->6: -2.22, 2->5->7: -3.72. The best four are 1, 1->3, 1->3->7 and 2."""
    draft = ScriptedDraft()
    out = run_alone(draft, dynamic_tree(depth=2, top_k=2, total_tokens=4, root=0, root_draft=root_out(draft, 0, 2),
                                        stable=3, cache=None))
    assert out.tokens.tolist() == [0, 1, 2, 3, 7]
    assert out.parents == [-1, 0, 0, 1, 3]
    assert out.depths.tolist() == [0, 1, 1, 2, 3]
    assert out.mask.int().tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0],
                                       [1, 1, 0, 1, 1]]
    assert draft.calls == [[1, 2], [3, 5]]


# ---- KV compaction ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dst, src, expect", [
    (3, [3, 4], [0, 1, 2, 3, 4, 5, 6, 7]),  # the accepted path is already in place
    (3, [3, 5, 6], [0, 1, 2, 3, 5, 6, 6, 7]),  # root kept, a branch moved down
    (2, [4, 7], [0, 1, 4, 7, 4, 5, 6, 7]),  # rows after the new end are left as they were (overwritten later)
    (0, [7], [7, 1, 2, 3, 4, 5, 6, 7]),
])
def test_kv_compaction(dst, src, expect):
    cache = KVCache(2, 1, 8, 1, torch.float32, "cpu")
    cache.k[:, 0, :, 0] = torch.arange(8.0)  # [layers, kv_heads, slots, head_dim]: slot i holds i
    cache.v[:, 0, :, 0] = -torch.arange(8.0)
    cache.compact(dst, torch.tensor(src))
    for layer in range(2):
        assert cache.k[layer, 0, :, 0].tolist() == expect
        assert cache.v[layer, 0, :, 0].tolist() == [-x for x in expect]
