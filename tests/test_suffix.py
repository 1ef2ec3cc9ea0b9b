"""Suffix-automaton candidates: the automaton against a brute-force longest repeated suffix on random token strings
(incremental = what a rebuild finds), proposals, and merging a proposal into a drafted tree (shared prefixes
deduplicated, node ids kept, parents before children)."""

import random

import pytest
import torch

from eagle_trt.runtime.drafting import DraftTree
from eagle_trt.runtime.suffix import SuffixAutomaton, merge_chain
from eagle_trt.tree_config import Suffix, resolve


def brute_match(tokens: list[int]) -> tuple[int, int]:
    """(longest L such that tokens[-L:] also ends at an earlier position, the first such end) by brute force."""
    n = len(tokens)
    for length in range(n - 1, 0, -1):
        suffix = tokens[n - length:]
        for end in range(length - 1, n - 1):
            if tokens[end - length + 1:end + 1] == suffix:
                return length, end
    return 0, -1


@pytest.mark.parametrize("alphabet,n,seed", [(2, 300, 0), (3, 300, 1), (5, 200, 2), (50, 200, 3)])
def test_incremental_automaton_matches_brute_force(alphabet, n, seed):
    rng = random.Random(seed)
    tokens = [rng.randrange(alphabet) for _ in range(n)]
    sam = SuffixAutomaton()
    for i, token in enumerate(tokens):
        sam.extend(token)
        assert sam.match() == brute_match(tokens[:i + 1]), i
    assert len(sam.length) <= 2 * n  # at most 2n - 1 states (plus the initial one)
    rebuilt = SuffixAutomaton()
    rebuilt.extend_all(tokens)
    assert (rebuilt.next, rebuilt.link, rebuilt.length, rebuilt.first_end) == (sam.next, sam.link, sam.length,
                                                                                sam.first_end)


def test_proposal_is_what_followed_the_earlier_occurrence():
    sam = SuffixAutomaton()
    sam.extend_all([7, 1, 2, 3, 4, 5, 9, 9, 1, 2, 3])
    assert sam.match() == (3, 3)  # "1 2 3" first ended at position 3
    assert sam.propose(min_match=3, max_tokens=2) == [4, 5]
    assert sam.propose(min_match=3, max_tokens=50) == [4, 5, 9, 9, 1, 2, 3]  # up to the end of the text
    assert sam.propose(min_match=4, max_tokens=2) == []  # the match is too short
    fresh = SuffixAutomaton()
    fresh.extend_all([1, 2, 3])
    assert fresh.match() == (0, -1) and fresh.propose(1, 4) == []


def test_catch_up_extends_a_request_text_to_its_latest_root():
    """A request's automaton holds a prefix of its text (the tokens fed, then the root) and is extended only when a
    step proposes: catching up equals building from scratch, and a second catch-up on the same text adds nothing."""
    text, root = [5, 1, 2, 3, 8, 1, 2], 3
    sam = SuffixAutomaton()
    sam.catch_up(text[:3], 3)  # an early step: fed [5, 1, 2], root 3
    assert sam.tokens == [5, 1, 2, 3]
    assert sam.catch_up(text, root) is sam and sam.tokens == text + [root]
    assert sam.catch_up(text, root).tokens == text + [root]  # nothing new: not extended twice
    whole = SuffixAutomaton()
    whole.extend_all(text + [root])
    assert (sam.next, sam.link, sam.length, sam.first_end) == (whole.next, whole.link, whole.length, whole.first_end)
    assert sam.propose(min_match=3, max_tokens=2) == [8, 1]


def _tree(tokens, parents):
    return DraftTree.from_parents(torch.tensor(tokens), parents, "cpu")


def test_merge_shares_the_agreeing_prefix_and_appends_the_rest():
    # root 10; children 11 (rank 0) and 12; 11 has child 13
    tree = _tree([10, 11, 12, 13], [-1, 0, 0, 1])
    merged = merge_chain(tree, [11, 13, 14, 15])
    assert merged.added == 2
    assert merged.tree.tokens.tolist() == [10, 11, 12, 13, 14, 15]
    assert merged.tree.parents == [-1, 0, 0, 1, 3, 4]  # 14 under 13 (shared path 11 -> 13), then 15
    assert merged.tree.mask[5].tolist() == [True, True, False, True, True, True]  # its ancestors and itself
    assert merged.tree.depths.tolist() == [0, 1, 1, 2, 3, 4]

    new_branch = merge_chain(tree, [20, 21])
    assert new_branch.tree.parents == [-1, 0, 0, 1, 0, 4] and new_branch.added == 2
    assert merge_chain(tree, [12]).tree is tree and merge_chain(tree, []).added == 0  # nothing new


def test_merged_siblings_keep_distinct_tokens():
    rng = random.Random(0)
    for _ in range(200):
        tree = _tree([0, 1, 2, 3], [-1, 0, 0, 1])
        for _ in range(3):
            tree = merge_chain(tree, [rng.randrange(5) for _ in range(rng.randrange(1, 5))]).tree
        tokens = tree.tokens.tolist()
        for kids in tree.children:
            assert len({tokens[k] for k in kids}) == len(kids)
        assert all(p < i for i, p in enumerate(tree.parents) if i)


def test_suffix_settings_resolve_and_round_trip():
    cfg = resolve("chain:2+suffix:3,5")
    assert cfg.suffix == Suffix(3, 5) and cfg.max_draft_tokens == 7 and cfg.drafted == resolve("chain:2")
    assert resolve(cfg.to_arg()) == cfg and resolve("dynamic:3,2,4+suffix").suffix == Suffix()
