"""Suffix-automaton candidates: the text's own repeats, merged into the step's EAGLE tree.

`SuffixAutomaton` is built over one request's tokens (prompt, then every committed token) and extended one token at
a time (the classic online construction: amortised O(1) per token, at most 2n states; docs/eagle_algorithms.md §9).
Its `last` state is the whole text; the suffix link of `last` is the longest suffix of the text that also ends
earlier, and `first_end` of that state is where it first ended. What followed there is the proposal: if the
current suffix matched at least `min_match` tokens, the next `max_tokens` tokens after that earlier occurrence.

`merge_chain` adds a proposal to a drafted tree as one more branch from the root: it walks down the tree while a
child already holds the next proposed token (EAGLE's nodes are shared), then appends the rest as a chain. The
base verifies it in the same forward. Nothing of the draft changes: nodes the draft never produced need no draft
forward, and the draft's cache is rewritten from the base's features of the accepted path after every step.
Lossless: the proposal is a deterministic candidate like a top-k child (runtime/verify.py's rule tries each
distinct child token once), a function of the committed text only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eagle_trt.runtime.drafting import DraftTree


class SuffixAutomaton:
    """Online suffix automaton over token ids. States: `next` (token -> state), `link`, `length` and `first_end`
    (the position, 0-based, of the last token of the first occurrence of the state's strings)."""

    def __init__(self):
        self.next: list[dict[int, int]] = [{}]
        self.link: list[int] = [-1]
        self.length: list[int] = [0]
        self.first_end: list[int] = [-1]
        self.tokens: list[int] = []
        self.last = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def _state(self, length: int, first_end: int, nxt: dict[int, int], link: int) -> int:
        self.next.append(nxt)
        self.link.append(link)
        self.length.append(length)
        self.first_end.append(first_end)
        return len(self.length) - 1

    def extend(self, token: int) -> None:
        """Append one token (amortised O(1))."""
        pos = len(self.tokens)
        self.tokens.append(token)
        cur = self._state(self.length[self.last] + 1, pos, {}, -1)
        p = self.last
        while p != -1 and token not in self.next[p]:
            self.next[p][token] = cur
            p = self.link[p]
        if p == -1:
            self.link[cur] = 0
        else:
            q = self.next[p][token]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = self._state(self.length[p] + 1, self.first_end[q], dict(self.next[q]), self.link[q])
                while p != -1 and self.next[p].get(token) == q:
                    self.next[p][token] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur

    def extend_all(self, tokens) -> None:
        for token in tokens:
            self.extend(int(token))

    def catch_up(self, text: list[int], last: int) -> SuffixAutomaton:
        """Extend to the text `text + [last]`, of which this automaton holds a prefix (a request's text grows only at
        its end): a request extends it when a step proposes candidates, not on every step (plain steps in a batch
        propose none). Returns self."""
        if len(self.tokens) < len(text):
            self.extend_all(text[len(self.tokens):])
        if len(self.tokens) == len(text):
            self.extend(last)
        return self

    def match(self) -> tuple[int, int]:
        """(length of the longest suffix of the text that also ends earlier, where it first ended; -1 if none)."""
        state = self.link[self.last] if self.last else -1
        if state <= 0:
            return 0, -1
        return self.length[state], self.first_end[state]

    def propose(self, min_match: int, max_tokens: int) -> list[int]:
        """The tokens that followed the earlier occurrence of the longest repeated suffix, if it is at least
        `min_match` long: at most `max_tokens` of them ([] otherwise)."""
        length, end = self.match()
        if length < min_match:
            return []
        return self.tokens[end + 1:end + 1 + max_tokens]


@dataclass(frozen=True)
class Merged:
    """A tree with a proposal merged in, and how many of the proposal's tokens were new nodes."""

    tree: DraftTree
    added: int


def merge_chain(tree: DraftTree, chain: list[int]) -> Merged:
    """`tree` plus the path root -> chain[0] -> chain[1] ..., sharing the nodes whose tokens agree (first matching
    child, in draft-rank order). New nodes are appended (parents before children holds), so the drafted part keeps
    its node ids."""
    if not chain:
        return Merged(tree, 0)
    tokens = tree.tokens.tolist()
    node, i = 0, 0
    while i < len(chain):
        child = next((c for c in tree.children[node] if tokens[c] == chain[i]), None)
        if child is None:
            break
        node, i = child, i + 1
    if i == len(chain):
        return Merged(tree, 0)
    parents = list(tree.parents)
    for token in chain[i:]:
        parents.append(node)
        node = len(parents) - 1
    device = tree.tokens.device
    new = torch.tensor(chain[i:], dtype=tree.tokens.dtype, device=device)  # [added]
    return Merged(DraftTree.from_parents(torch.cat((tree.tokens, new)), parents, device), len(chain) - i)
