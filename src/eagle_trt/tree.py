"""EAGLE draft trees: choices, validation, TRT-LLM brace syntax, masks and depths.

A static tree is a list of *choices* (Medusa format): each choice is a path of child ranks from the root, e.g.
``[0]`` is the top-1 child of the root and ``[0, 1]`` the 2nd-ranked child of that node. The root (the last committed
token, the one the verify step starts from) is implicit. Every prefix of a choice must itself be a choice.

Worked example, choices ``[[0], [1], [0, 0], [0, 1]]``::

    node 0 (root)                    depth 0
    ├── node 1  [0]                  depth 1
    │   ├── node 3  [0, 0]           depth 2
    │   └── node 4  [0, 1]           depth 2
    └── node 2  [1]                  depth 1

    attention_mask (row i sees column j)   pack_mask(attention_mask) (bit j of row i)
      0 1 2 3 4                              row 0: 0b00001 = 1
    0 1 . . . .                              row 1: 0b00011 = 3
    1 1 1 . . .                              row 2: 0b00101 = 5
    2 1 . 1 . .                              row 3: 0b01011 = 11
    3 1 1 . 1 .                              row 4: 0b10011 = 19
    4 1 1 . . 1

Nodes are numbered root first, then the choices sorted by (depth, lexicographic), so parents come before
children and the mask is lower-triangular. A node's RoPE position is (prefix length + depth), never its index.
The packed mask is TRT-LLM's ``spec_decoding_packed_mask`` layout: int32 words, LSB first, bit 0 = the root.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from eagle_trt.errors import EagleTrtError

# TensorRT-LLM's default (FasterDecoding/Medusa mc_sim_7b_63): 63 nodes, depth 4, at most 10 non-leaves per depth.
MC_SIM_7B_63 = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5], [0, 0, 1],
    [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8], [9], [1, 0, 0],
    [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6],
    [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2],
    [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1],
    [1, 6], [0, 7, 0],
]
# SafeAILab/EAGLE eagle/model/choices.py uses the same name for a different, smaller tree: 25 nodes, depth 5.
EAGLE_DEFAULT = [
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0], [0, 0, 0], [0, 0, 1],
    [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2],
    [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]
NAMED_TREES = {"mc_sim_7b_63": MC_SIM_7B_63, "eagle_default": EAGLE_DEFAULT}
# Draft tokens per verify step, root excluded: TRT-LLM's limit (max_draft_len <= 256), and ours for every engine.
# Checked on the numbers of a --tree value before any structure is built (a chain of N nodes holds N^2/2 ranks).
MAX_DRAFT_TOKENS = 256
MAX_TREE_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Tree:
    """A validated static tree. `choices` is sorted by (depth, lexicographic); node i+1 is choices[i]."""

    choices: tuple[tuple[int, ...], ...]

    # ---- construction -------------------------------------------------------------------------------------------
    @classmethod
    def from_choices(cls, choices, source: str = "choices") -> Tree:
        if not isinstance(choices, (list, tuple)) or not choices:
            raise EagleTrtError(f"{source}: a tree needs a non-empty list of paths, got {choices!r}",
                                "write it like [[0], [1], [0, 0]]: each path lists child ranks from the root")
        check_draft_tokens(len(choices), source)
        paths = []
        for c in choices:
            if (not isinstance(c, (list, tuple)) or not c
                    or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in c)):
                raise EagleTrtError(f"{source}: invalid path {c!r}",
                                    "every path is a non-empty list of non-negative integer child ranks")
            paths.append(tuple(c))
        seen = set()
        for p in paths:
            if p in seen:
                raise EagleTrtError(f"{source}: path {list(p)} appears twice", "list every node once")
            seen.add(p)
        for p in paths:
            if len(p) > 1 and p[:-1] not in seen:
                raise EagleTrtError(f"{source}: path {list(p)} has no parent {list(p[:-1])}",
                                    "give every node explicitly, including all prefixes of each path")
        return cls(tuple(sorted(paths, key=lambda p: (len(p), p))))

    @classmethod
    def chain(cls, n: int) -> Tree:
        if not isinstance(n, int) or n < 1:
            raise EagleTrtError(f"chain length must be a positive integer, got {n!r}", "use e.g. chain:4")
        check_draft_tokens(n, f"chain:{n}")
        return cls(tuple((0,) * d for d in range(1, n + 1)))

    @classmethod
    def named(cls, name: str) -> Tree:
        if name not in NAMED_TREES:
            raise EagleTrtError(f"unknown tree name {name!r}", f"known trees: {', '.join(sorted(NAMED_TREES))}")
        return cls.from_choices(NAMED_TREES[name], source=name)

    @classmethod
    def from_file(cls, path: str | Path) -> Tree:
        path = Path(path)
        try:
            if path.stat().st_size > MAX_TREE_FILE_BYTES:
                raise EagleTrtError(f"tree file {path} is {path.stat().st_size} bytes, too large for a tree of at most "
                                    f"{MAX_DRAFT_TOKENS} nodes", "pass a JSON list of at most 256 paths")
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise EagleTrtError(f"tree file {path} does not exist", "pass a JSON file holding a list of paths") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise EagleTrtError(f"tree file {path} is not readable JSON: {exc}",
                                "write the choices as a JSON list, e.g. [[0], [1], [0, 0]]") from None
        return cls.from_choices(data, source=str(path))

    # ---- structure ----------------------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        """Draft nodes, root excluded (TRT-LLM's count against max_draft_len)."""
        return len(self.choices)

    @property
    def depth(self) -> int:
        return max(len(c) for c in self.choices)

    @cached_property
    def _index(self) -> dict[tuple[int, ...], int]:
        return {c: i + 1 for i, c in enumerate(self.choices)} | {(): 0}

    def parents(self) -> np.ndarray:
        """[N+1] int64: parent node of each node; -1 for the root."""
        return np.array([-1] + [self._index[c[:-1]] for c in self.choices], dtype=np.int64)

    def depths(self) -> np.ndarray:
        """[N+1] int64: depth of each node (root 0); verify positions are prefix length + depth."""
        return np.array([0] + [len(c) for c in self.choices], dtype=np.int64)

    def ranks(self) -> np.ndarray:
        """[N+1] int64: draft rank of each node among its siblings (root 0)."""
        return np.array([0] + [c[-1] for c in self.choices], dtype=np.int64)

    def children(self) -> list[list[int]]:
        """children()[i] = node ids of node i's children, in draft-rank order."""
        kids: list[list[int]] = [[] for _ in range(self.num_nodes + 1)]
        for node, parent in enumerate(self.parents()[1:], start=1):
            kids[parent].append(node)
        ranks = self.ranks()
        return [sorted(k, key=lambda n: ranks[n]) for k in kids]

    def attention_mask(self) -> np.ndarray:
        """[N+1, N+1] bool: row i may attend to column j iff j is an ancestor of i or i itself."""
        return ancestor_mask(self.parents().tolist())

    def non_leaves_per_depth(self) -> list[int]:
        """Number of nodes with children at each depth 0..depth-1 (the root counts at depth 0)."""
        counts = [0] * self.depth
        depths = self.depths()
        for parent in set(self.parents()[1:].tolist()):
            counts[depths[parent]] += 1
        return counts

    # ---- rendering ----------------------------------------------------------------------------------------------
    def to_list(self) -> list[list[int]]:
        return [list(c) for c in self.choices]

    def to_brace(self) -> str:
        """TRT-LLM brace syntax for the tensorrtllm backend's `eagle_choices` parameter."""
        return ", ".join("{" + ", ".join(str(r) for r in c) + "}" for c in self.choices)


def check_draft_tokens(count: int, what: str) -> None:
    """Refuse a tree larger than MAX_DRAFT_TOKENS before anything is built from it."""
    if count > MAX_DRAFT_TOKENS:
        raise EagleTrtError(f"{what}: {count} draft tokens per step, more than {MAX_DRAFT_TOKENS} (TRT-LLM's limit)",
                            "use a smaller tree, e.g. chain:4 or dynamic:5,8,48")


def ancestor_mask(parents: list[int]) -> np.ndarray:
    """[n, n] bool from parent indices (parents[0] = -1, parents before children): row i sees column j iff j is
    an ancestor of i or i itself. The one ancestor-mask builder (static trees, dynamic trees, kernel tests)."""
    n = len(parents)
    mask = np.eye(n, dtype=bool)  # [n, n]
    for i in range(1, n):
        mask[i] |= mask[parents[i]]
    return mask


def pack_mask(mask: np.ndarray) -> np.ndarray:
    """[rows, n] bool -> [rows, ceil(n/32)] int32, bit j of word j//32 set iff mask[:, j] (LSB first): TRT-LLM's
    packed mask layout, which the tree-attention kernel reads."""
    rows, n = mask.shape
    words = (n + 31) // 32
    packed = np.zeros((rows, words * 4), dtype=np.uint8)  # [rows, 4 * words] bytes, little-endian words
    packed[:, :(n + 7) // 8] = np.packbits(mask, axis=1, bitorder="little")
    return packed.view("<u4").astype(np.uint32).view(np.int32)  # [rows, words]
