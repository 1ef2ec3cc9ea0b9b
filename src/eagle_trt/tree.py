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

DEFAULT_RUNTIME_TREE = "dynamic:5,8,48"  # the pytorch engine's tree when none is given (EAGLE-2's shape)

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
TREE_ARG_HELP = "chain:N | static:NAME|FILE (NAME: mc_sim_7b_63, eagle_default) | dynamic:DEPTH,TOPK,TOKENS"


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


def validate_for_trtllm(tree: Tree, num_eagle_layers: int, max_draft_len: int, max_non_leaves_per_layer: int) -> None:
    """TRT-LLM's rules for eagle_choices (examples/eagle/README.md): depth == num_eagle_layers, nodes <=
    max_draft_len, non-leaf nodes per depth <= max_non_leaves_per_layer. Raises EagleTrtError listing every breach."""
    problems = []
    if tree.depth != num_eagle_layers:
        problems.append(f"tree depth {tree.depth} != num_eagle_layers {num_eagle_layers} (TRT-LLM needs them equal; "
                        f"pass --num-eagle-layers {tree.depth} or a tree of depth {num_eagle_layers})")
    if tree.num_nodes > max_draft_len:
        problems.append(f"tree has {tree.num_nodes} nodes > max_draft_len {max_draft_len} "
                        f"(pass --max-draft-len {tree.num_nodes} or a smaller tree)")
    worst = max(tree.non_leaves_per_depth())
    if worst > max_non_leaves_per_layer:
        problems.append(f"tree has {worst} non-leaf nodes at one depth > max_non_leaves_per_layer "
                        f"{max_non_leaves_per_layer} (pass --max-non-leaves-per-layer {worst})")
    if problems:
        raise EagleTrtError("the EAGLE tree does not fit the TensorRT-LLM engine: " + "; ".join(problems),
                            "adjust the tree or the engine limits as suggested")


def validate_for_llmapi(cfg: TreeConfig) -> None:
    """Eagle3DecodingConfig's rule for a dynamic tree (tensorrt_llm/llmapi/llm_args.py, validate_eagle_config):
    max_draft_len <= max_total_draft_tokens <= dynamic_tree_max_topK * max_draft_len, where its max_draft_len
    (drafter layers = tree levels) is our DEPTH + 1."""
    levels = cfg.depth + 1 if cfg.kind == "dynamic" else 0
    if cfg.kind == "dynamic" and not levels <= cfg.total_tokens <= cfg.top_k * levels:
        raise EagleTrtError(f"TensorRT-LLM's dynamic tree needs DEPTH+1 <= TOKENS <= TOPK x (DEPTH+1), got "
                            f"{cfg.to_arg()} ({levels} <= {cfg.total_tokens} <= {cfg.top_k * levels} fails)",
                            f"pass e.g. --tree dynamic:{cfg.depth},{cfg.top_k},{cfg.top_k * levels} or a chain:N")


@dataclass(frozen=True)
class TreeConfig:
    """How the runtime drafts: a static tree (`kind` "static" or "chain") or an EAGLE-2 dynamic tree."""

    kind: str  # "chain" | "static" | "dynamic"
    tree: Tree | None = None
    depth: int = 0
    top_k: int = 0
    total_tokens: int = 0  # draft nodes selected per step (root excluded)

    def to_arg(self) -> str:
        if self.kind == "dynamic":
            return f"dynamic:{self.depth},{self.top_k},{self.total_tokens}"
        if self.kind == "chain":
            return f"chain:{self.tree.num_nodes}"
        return "static:" + json.dumps(self.tree.to_list(), separators=(",", ":"))

    @property
    def max_draft_tokens(self) -> int:
        return self.total_tokens if self.kind == "dynamic" else self.tree.num_nodes


def parse_tree_arg(arg: str) -> TreeConfig:
    """Parse a --tree value: ``chain:N``, ``static:NAME``, ``static:FILE``, ``static:[[0],[0,0]]`` or
    ``dynamic:DEPTH,TOPK,TOKENS`` (EAGLE-2: the root's TOPK children, then DEPTH expansions of the TOPK best
    frontier nodes by TOPK children each, keep the TOKENS best draft nodes: up to DEPTH+1 levels; EAGLE's
    depth=DEPTH, top_k=TOPK, total_token=TOKENS+1)."""
    kind, sep, value = str(arg).partition(":")
    if not sep or not value:
        raise EagleTrtError(f"invalid tree spec {arg!r}", f"use {TREE_ARG_HELP}")
    if kind == "chain":
        try:
            n = int(value)
        except ValueError:
            raise EagleTrtError(f"invalid chain length in {arg!r}", "use chain:N with N >= 1, e.g. chain:4") from None
        return TreeConfig("chain", tree=Tree.chain(n))
    if kind == "static":
        if value in NAMED_TREES:
            return TreeConfig("static", tree=Tree.named(value))
        if value.lstrip().startswith("["):
            try:
                return TreeConfig("static", tree=Tree.from_choices(json.loads(value), source=arg))
            except json.JSONDecodeError:
                raise EagleTrtError(f"invalid inline tree in {arg!r}", "write static:[[0],[1],[0,0]]") from None
        if not Path(value).exists():
            raise EagleTrtError(f"unknown tree {value!r} in {arg!r}: neither a named tree nor an existing file",
                                f"named trees: {', '.join(sorted(NAMED_TREES))}; or a JSON file of paths")
        return TreeConfig("static", tree=Tree.from_file(value))
    if kind == "dynamic":
        try:
            depth, top_k, total = (int(x) for x in value.split(","))
        except ValueError:
            raise EagleTrtError(f"invalid dynamic tree spec {arg!r}",
                                "use dynamic:DEPTH,TOPK,TOKENS with three integers, e.g. dynamic:5,8,48") from None
        if depth < 1 or top_k < 1 or total < 1:
            raise EagleTrtError(f"dynamic tree values must be >= 1, got {arg!r}", "e.g. dynamic:5,8,48")
        for what, number in (("DEPTH", depth), ("TOPK", top_k), ("TOKENS", total)):
            check_draft_tokens(number, f"{what} of {arg}")
        if total > top_k + depth * top_k * top_k:
            raise EagleTrtError(f"dynamic tree {arg!r} asks for {total} tokens but can draft at most "
                                f"{top_k + depth * top_k * top_k}", "lower TOKENS or raise DEPTH/TOPK")
        return TreeConfig("dynamic", depth=depth, top_k=top_k, total_tokens=total)
    raise EagleTrtError(f"unknown tree kind {kind!r} in {arg!r}", f"use {TREE_ARG_HELP}")
