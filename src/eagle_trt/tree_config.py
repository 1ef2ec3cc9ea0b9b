"""The `--tree` language: how a request drafts (`TreeConfig`: a static tree or chain, or an EAGLE-2 dynamic tree,
optionally with suffix-automaton candidates), read from a --tree value by `resolve`. Engine-neutral: each engine
kind checks what it can draft (eagle_trt.engines), our runtime drafts them all. docs/tree_vocabulary.md has the
mapping to other tools' words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from eagle_trt.errors import EagleTrtError
from eagle_trt.tree import NAMED_TREES, Tree, check_draft_tokens

DEFAULT_RUNTIME_TREE = "dynamic:5,8,48"  # the pytorch engine's tree when none is given (EAGLE-2's shape)
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


AUTO = "auto"  # a --tree value that asks for tuning (eagle_trt.tuning.calibrate), never resolved here


def resolve(value: str | TreeConfig | None) -> TreeConfig:
    """The one reading of a --tree value. Values: ``chain:N``; ``dynamic:DEPTH,TOPK,TOKENS`` (EAGLE-2: the root's
    TOPK children, then DEPTH expansions of the TOPK best frontier nodes by TOPK children each, keep the TOKENS best
    draft nodes: up to DEPTH+1 levels; EAGLE's depth=DEPTH, top_k=TOPK, total_token=TOKENS+1); ``static:X`` or plain
    ``X`` with X a named tree, inline JSON choices or a JSON file (read now: the result holds its choices, so it
    means the same from any directory); each optionally ``+suffix[:MIN_MATCH,TOKENS]``. None: our runtime's default
    (DEFAULT_RUNTIME_TREE). What an engine kind can draft is that engine's check (Engine.tree)."""
    if value is None:
        value = DEFAULT_RUNTIME_TREE
    return value if isinstance(value, TreeConfig) else _parse(str(value))


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
