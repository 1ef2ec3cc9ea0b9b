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
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from eagle_trt.errors import EagleTrtError
from eagle_trt.llmapi_release import LlmapiRelease, llmapi_release

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
TREE_ARG_HELP = ("chain:N | NAME|FILE|static:NAME|FILE (NAME: mc_sim_7b_63, eagle_default) | dynamic:DEPTH,TOPK,TOKENS"
                 ", each optionally +suffix[:MIN_MATCH,TOKENS]")
SUFFIX_MARK = "+suffix"


@dataclass(frozen=True)
class Suffix:
    """Suffix-automaton candidates merged into every step's tree (runtime/suffix.py): when the text's longest
    repeated suffix is at least `min_match` tokens, the `max_tokens` tokens that followed its first occurrence."""

    min_match: int = 4
    max_tokens: int = 8
    LIMIT = 64  # the most either may be (a ClassVar: no annotation)

    def __post_init__(self):
        if not 1 <= self.min_match <= self.LIMIT or not 1 <= self.max_tokens <= self.LIMIT:
            raise EagleTrtError(f"suffix candidates need 1 <= MIN_MATCH <= {self.LIMIT} and 1 <= TOKENS <= "
                                f"{self.LIMIT}, got {self.min_match},{self.max_tokens}", "e.g. +suffix:4,8")

    def to_arg(self) -> str:
        return f"{SUFFIX_MARK}:{self.min_match},{self.max_tokens}"

    def to_dict(self) -> dict:
        return {"min_match": self.min_match, "max_tokens": self.max_tokens}


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


def validate_for_llmapi(cfg: TreeConfig, release: LlmapiRelease) -> None:
    """Eagle3DecodingConfig's rules in TensorRT-LLM release line `release` (tensorrt_llm/llmapi/llm_args.py @
    00043967, docs/trtllm_formats.md §6, §6a). A static tree needs `eagle_choices` (gone from 1.4). A dynamic tree
    (validate_eagle_config): max_draft_len <= max_total_draft_tokens <= dynamic_tree_max_topK * max_draft_len, where
    its max_draft_len (drafter layers = tree levels) is our DEPTH + 1. Suffix candidates (`sa_config`, an
    SAEnhancerConfig, from 1.3): its threshold is our MIN_MATCH, but it has no token count: the enhancer overwrites the
    whole linear draft (max_draft_len tokens) when the match is long enough (_torch/speculative/sa_enhancer.py), and
    the dynamic-tree worker gets no suffix automaton at all (_torch/speculative/utils.py) - so only
    chain:N+suffix:M,N means on the LLM API what it means here."""
    if cfg.kind == "static" and not release.static_trees:
        tree = cfg.tree
        width = max(len(c) for c in tree.children())
        nearest = f"dynamic:{tree.depth - 1},{width},{min(tree.num_nodes, width * tree.depth)}" \
            if tree.depth > 1 else f"chain:{tree.depth}"
        raise EagleTrtError(f"--tree {cfg.label()}: TensorRT-LLM {release.version} has no static trees "
                            "(Eagle3DecodingConfig.eagle_choices was removed in 1.4)",
                            f"pass the nearest tree it runs, --tree {nearest} (the same depth, width and node count, "
                            f"chosen per step) or chain:{tree.depth}; or --backend-version 1.3 for this static tree")
    levels = cfg.depth + 1 if cfg.kind == "dynamic" else 0
    if cfg.kind == "dynamic" and not levels <= cfg.total_tokens <= cfg.top_k * levels:
        raise EagleTrtError(f"TensorRT-LLM's dynamic tree needs DEPTH+1 <= TOKENS <= TOPK x (DEPTH+1), got "
                            f"{cfg.to_arg()} ({levels} <= {cfg.total_tokens} <= {cfg.top_k * levels} fails)",
                            f"pass e.g. --tree dynamic:{cfg.depth},{cfg.top_k},{cfg.top_k * levels} or a chain:N")
    if cfg.suffix is None:
        return
    if not release.suffix:
        raise EagleTrtError(f"--tree {cfg.label()}: TensorRT-LLM {release.version} has no suffix automaton "
                            "(Eagle3DecodingConfig.sa_config arrived in 1.3)",
                            f"pass --backend-version 1.3 or newer, or drop {SUFFIX_MARK} from --tree")
    if cfg.kind != "chain":
        raise EagleTrtError(f"--tree {cfg.label()}: TensorRT-LLM's suffix automaton (sa_config) overwrites a linear "
                            f"draft of max_draft_len tokens; its dynamic-tree worker has no suffix automaton and a "
                            f"static tree drafts other nodes, so these candidates would be dropped or mean another "
                            f"thing",
                            f"use --tree chain:N{SUFFIX_MARK}:{cfg.suffix.min_match},N on --engine llmapi, or keep "
                            f"this tree on --engine pytorch")
    chain = cfg.tree.num_nodes
    if cfg.suffix.max_tokens != chain:
        fix = (f"--tree chain:{chain}{SUFFIX_MARK}:{cfg.suffix.min_match},{chain}" if chain <= Suffix.LIMIT else
               f"a chain of at most {Suffix.LIMIT} tokens")
        raise EagleTrtError(f"--tree {cfg.to_arg()}: TensorRT-LLM's suffix automaton (sa_config) proposes as many "
                            f"tokens as the draft (max_draft_len {chain}), not {cfg.suffix.max_tokens}: it has no "
                            f"knob for our TOKENS", f"pass {fix}")


@dataclass(frozen=True)
class TreeConfig:
    """How a request drafts: a static tree (`kind` "static" or "chain") or an EAGLE-2 dynamic tree. Self-contained:
    a static tree holds its choices, whatever named or held them (`source`, for messages only)."""

    kind: str  # "chain" | "static" | "dynamic"
    tree: Tree | None = None
    depth: int = 0
    top_k: int = 0
    total_tokens: int = 0  # draft nodes selected per step (root excluded)
    source: str = field(default="", compare=False)  # the name or file a static tree came from
    suffix: Suffix | None = None  # suffix-automaton candidates merged into each step's tree (pytorch, llmapi)

    def to_arg(self) -> str:
        """The --tree value that resolves to this config anywhere (static choices inline)."""
        if self.kind == "dynamic":
            arg = f"dynamic:{self.depth},{self.top_k},{self.total_tokens}"
        elif self.kind == "chain":
            arg = f"chain:{self.tree.num_nodes}"
        else:
            arg = "static:" + json.dumps(self.tree.to_list(), separators=(",", ":"))
        return arg + (self.suffix.to_arg() if self.suffix else "")

    def label(self) -> str:
        """Short name for tables and logs: the --tree value, or a static tree's source and size."""
        if self.kind == "static" and (self.source or len(self.to_arg()) > 60):
            return (f"static:{self.source or 'inline'} ({self.tree.num_nodes} nodes, depth {self.tree.depth})"
                    + (self.suffix.to_arg() if self.suffix else ""))
        return self.to_arg()

    @property
    def drafted(self) -> TreeConfig:
        """The same tree without suffix candidates."""
        return replace(self, suffix=None)

    @property
    def max_draft_tokens(self) -> int:
        drafted = self.total_tokens if self.kind == "dynamic" else self.tree.num_nodes
        return drafted + (self.suffix.max_tokens if self.suffix else 0)

    def to_dict(self) -> dict:
        """What a bundle stores (eagle_trt_spec.json, the engine model's config): no text to parse again."""
        extra = {"suffix": self.suffix.to_dict()} if self.suffix else {}
        if self.kind == "dynamic":
            return {"kind": "dynamic", "depth": self.depth, "top_k": self.top_k, "total_tokens": self.total_tokens,
                    **extra}
        return ({"kind": self.kind, "choices": self.tree.to_list()} | ({"source": self.source} if self.source else {})
                | extra)

    @classmethod
    def from_dict(cls, data: dict, where: str = "tree") -> TreeConfig:
        """Inverse of `to_dict`, validated as a --tree value is."""
        kind = data.get("kind") if isinstance(data, dict) else None
        try:
            suffix = Suffix(int(data["suffix"]["min_match"]), int(data["suffix"]["max_tokens"])) \
                if data.get("suffix") is not None else None
            if kind == "dynamic":
                return replace(_dynamic(int(data["depth"]), int(data["top_k"]), int(data["total_tokens"]), where),
                               suffix=suffix)
            if kind in ("chain", "static"):
                tree = Tree.from_choices(data["choices"], source=where)
                if kind == "chain" and tree != Tree.chain(tree.num_nodes):
                    raise EagleTrtError(f"{where}: a chain's choices must be [[0], [0, 0], ...]", "rebuild the bundle")
                return cls(kind, tree=tree, source=str(data.get("source", "")), suffix=suffix)
        except (AttributeError, KeyError, TypeError, ValueError):
            pass
        raise EagleTrtError(f"{where}: not a stored tree: {data!r}",
                            "the bundle was written by another eagle-trt version; rebuild it")


# The tree each engine kind drafts with when --tree is not given: ours EAGLE-2's shape; TensorRT-LLM's engine its
# mc_sim_7b_63 default; the LLM API and vLLM a chain of 3 (TensorRT-LLM's EAGLE-3 examples; its static trees are
# deprecated in llm_args.py, and vLLM drafts chains only).
DEFAULT_TREES = {"pytorch": DEFAULT_RUNTIME_TREE, "trtllm": "static:mc_sim_7b_63", "llmapi": "chain:3",
                 "vllm": "chain:3"}
AUTO = "auto"  # a --tree value that asks for tuning (eagle_trt.tuning.calibrate), never resolved here


def resolve(value: str | TreeConfig | None, engine: str = "pytorch", backend_version: str | None = None) -> TreeConfig:
    """The one reading of a --tree value, for the engine kind that will draft with it. Values: ``chain:N``;
    ``dynamic:DEPTH,TOPK,TOKENS`` (EAGLE-2: the root's TOPK children, then DEPTH expansions of the TOPK best
    frontier nodes by TOPK children each, keep the TOKENS best draft nodes: up to DEPTH+1 levels; EAGLE's
    depth=DEPTH, top_k=TOPK, total_token=TOKENS+1); ``static:X`` or plain ``X`` with X a named tree, inline JSON
    choices or a JSON file (read now: the result holds its choices, so it means the same from any directory);
    None: the engine's default (DEFAULT_TREES). The engine's own rules are checked here: TensorRT-LLM's engine
    takes static trees, vLLM chains, the LLM API (release line `backend_version`) dynamic trees within its bounds and
    static trees up to 1.3."""
    if value is None:
        value = DEFAULT_TREES.get(engine, DEFAULT_RUNTIME_TREE)
    cfg = value if isinstance(value, TreeConfig) else _parse(str(value))
    if cfg.suffix is not None and engine in ("trtllm", "vllm"):
        raise EagleTrtError(f"--tree {cfg.label()}: suffix candidates run on --engine pytorch and llmapi (TensorRT-LLM's "
                            f"sa_config), not {engine}", f"drop {SUFFIX_MARK} from --tree")
    if engine == "trtllm" and cfg.kind == "dynamic":
        raise EagleTrtError(f"the TensorRT-LLM engine (trtllm-build) needs a static tree, got {cfg.to_arg()}",
                            "pass a named tree, a JSON file or chain:N; dynamic trees run on --engine pytorch or "
                            "llmapi")
    if engine == "vllm" and cfg.kind != "chain":
        raise EagleTrtError(f"vLLM drafts chains only (its tree attention was removed), got --tree {cfg.label()}: "
                            "pass chain:N", "pass --tree chain:N, e.g. chain:3")
    if engine == "llmapi":
        validate_for_llmapi(cfg, llmapi_release(backend_version))
    return cfg


def _parse(arg: str) -> TreeConfig:
    tree_arg, mark, rest = arg.partition(SUFFIX_MARK)
    if mark:
        return replace(_parse(tree_arg), suffix=_suffix(rest, arg))
    if arg == AUTO:
        raise EagleTrtError("--tree auto asks for tuning, which this step does not do",
                            "tune first (eagle-trt build/bench tune it) or pass a tree such as chain:3")
    kind, sep, value = arg.partition(":")
    if not sep or kind not in ("chain", "static", "dynamic"):
        kind, value = "static", arg  # a name, a file or inline JSON
    if not value:
        raise EagleTrtError(f"invalid tree spec {arg!r}", f"use {TREE_ARG_HELP}")
    if kind == "chain":
        try:
            n = int(value)
        except ValueError:
            raise EagleTrtError(f"invalid chain length in {arg!r}", "use chain:N with N >= 1, e.g. chain:4") from None
        return TreeConfig("chain", tree=Tree.chain(n))
    if kind == "dynamic":
        try:
            depth, top_k, total = (int(x) for x in value.split(","))
        except ValueError:
            raise EagleTrtError(f"invalid dynamic tree spec {arg!r}",
                                "use dynamic:DEPTH,TOPK,TOKENS with three integers, e.g. dynamic:5,8,48") from None
        return _dynamic(depth, top_k, total, arg)
    if value in NAMED_TREES:
        return TreeConfig("static", tree=Tree.named(value), source=value)
    if value.lstrip().startswith("["):
        try:
            return TreeConfig("static", tree=Tree.from_choices(json.loads(value), source=arg))
        except json.JSONDecodeError:
            raise EagleTrtError(f"invalid inline tree in {arg!r}", "write static:[[0],[1],[0,0]]") from None
    path = Path(value).expanduser()
    if not path.exists():
        raise EagleTrtError(f"unknown tree {value!r} in {arg!r}: neither a named tree nor an existing file "
                            f"(looked for {path.absolute()})",
                            f"named trees: {', '.join(sorted(NAMED_TREES))}; or a JSON file of paths; {TREE_ARG_HELP}")
    return TreeConfig("static", tree=Tree.from_file(path), source=str(path.absolute()))


def _suffix(rest: str, arg: str) -> Suffix:
    """`+suffix` (defaults) or `+suffix:MIN_MATCH,TOKENS`."""
    if not rest:
        return Suffix()
    try:
        min_match, tokens = (int(x) for x in rest.removeprefix(":").split(","))
    except ValueError:
        raise EagleTrtError(f"invalid suffix setting in {arg!r}", "write +suffix or +suffix:MIN_MATCH,TOKENS, e.g. "
                            "chain:3+suffix:4,8") from None
    return Suffix(min_match, tokens)


def _dynamic(depth: int, top_k: int, total: int, what: str) -> TreeConfig:
    arg = f"dynamic:{depth},{top_k},{total}"
    if depth < 1 or top_k < 1 or total < 1:
        raise EagleTrtError(f"dynamic tree values must be >= 1, got {what!r}", "e.g. dynamic:5,8,48")
    for name, number in (("DEPTH", depth), ("TOPK", top_k), ("TOKENS", total)):
        check_draft_tokens(number, f"{name} of {arg}")
    if total > top_k + depth * top_k * top_k:
        raise EagleTrtError(f"dynamic tree {arg!r} asks for {total} tokens but can draft at most "
                            f"{top_k + depth * top_k * top_k}", "lower TOKENS or raise DEPTH/TOPK")
    return TreeConfig("dynamic", depth=depth, top_k=top_k, total_tokens=total)
