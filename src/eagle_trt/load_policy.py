"""The load policy of the pytorch engine: which tree a request drafts with, by how many requests run at once.

A verify forward over B requests carries B x (tree + 1) rows, so the tree that pays at batch 1 stops paying as B
grows (production servers lower speculation with the batch in the same way). A policy lists trees by batch size,
`;`-separated: entry i is the tree every request drafts in a round where i+1 requests run (runtime.batching), the last
entry covers larger batches, `none` is plain decoding. `auto` keeps the runtime tree for batch 1, then the tail
measured on this project's CPUs (scripts/batch_policy.py; the figures are in docs/load.md): AUTO_TAIL (the tree's suffix
candidates kept up to batch AUTO_TAIL_SUFFIX_UP_TO), or AUTO_TAIL_NATIVE for the native precisions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from eagle_trt.errors import EagleTrtError
from eagle_trt.tree_config import AUTO, TreeConfig, resolve

PLAIN = "none"  # the policy entry for plain decoding
# batches 2..4 chain:2, larger chain:1. Measured (1 thread, SmolLM2 int8, aggregate tok/s chain:2 / chain:1 / plain):
# AVX-512 + VNNI (docs/results/2026-11-24-serving/batch_policy.json) 79.5/73.4/55.6 at batch 2, 72.0/70.5/63.6 at 4,
# 71.5/69.4/67.3 at 8; AVX2 (docs/results/2026-11-28-avx2-int8/batch_policy_int8*.json, two runs) 51.9/47.4/35.9
# and 54.5/52.7/42.6 at 2, 46.3/46.1/42.2 and 54.4/52.6/51.6 at 4, 36.9/45.2/38.3 and 45.1/49.1/49.0 at 8
AUTO_TAIL = ("chain:2",) * 3 + ("chain:1",) * 5
# the batch sizes up to which the tail keeps the tree's suffix candidates (up to 8 more rows per request when the text
# repeats itself). Measured on an AVX2 CPU without VNNI (docs/results/2026-11-28-avx2-int8/batch_policy_*.json, 1
# thread, SmolLM2 int8): aggregate tok/s chain:2+suffix:4,8 / chain:2 / plain = 53.8/54.5/42.6 at batch 2,
# 51.8/54.4/51.6 at 4; chain:1+suffix:4,8 / chain:1 / plain = 47.6/49.1/49.0 at 8 (perf load with suffix candidates
# at every batch size: 0.98x at 4 streams, 0.92x at 8)
AUTO_TAIL_SUFFIX_UP_TO = 3
# the native precisions' CPU forward makes a decode step so cheap that extra verify rows stop paying sooner: batch 2
# chain:2, batches 3-4 chain:1, larger plain (each entry capped at the bundle's tree: the tuner picks chain:1 with
# suffix candidates at one thread, so served bundles draft chain:1 at 2-4). Measured (scripts/batch_policy.py
# --dtype native-q8, 1 thread, SmolLM2 Q4_1, the decoding rounds without the prompts' prefill, Intel Xeon AVX-512
# VNNI; three runs, 64 and 96 tokens;
# docs/results/2026-11-29-kv-pages/batch_policy_native_q8.json the last): aggregate tok/s chain:2 / chain:1 / plain =
# 322.4/309.9/303.9, 308.0/271.3/255.8, 346.9/298.8/266.4 at batch 2; 353.9/363.3/334.7, 350.3/339.6/282.1,
# 376.1/379.7/318.3 at 3; 330.1/364.7/343.4, 327.0/344.3/324.2, 345.0/369.9/345.6 at 4; 309.7/334.9/352.2,
# 301.4/325.0/327.4, 330.3/356.5/369.0 at 5; 368.2/418.7/448.8 at 8 (the last run). With the prefill timed too
# (docs/results/2026-11-27-attn/batch_policy.json) the trees' differences drowned in it and plain looked as good from
# batch 4.
AUTO_TAIL_NATIVE = ("chain:2", "chain:1", "chain:1", PLAIN)


@dataclass(frozen=True)
class LoadPolicy:
    """trees[i]: the tree of every request in a round where i+1 requests run; None: plain."""

    trees: tuple[TreeConfig | None, ...]

    @classmethod
    def parse(cls, value: str) -> LoadPolicy:
        """From the text users write: --tree values (or `none`) separated by ';'."""
        entries = [t.strip() for t in str(value).split(";") if t.strip()]
        if not entries:
            raise EagleTrtError(f"load policy {value!r} names no tree",
                                "pass trees by batch size separated by ';', e.g. dynamic:3,2,4;chain:2;none")
        trees = []
        for entry in entries:
            try:
                trees.append(None if entry == PLAIN else resolve(entry))
            except EagleTrtError as exc:
                raise EagleTrtError(f"load policy {value!r}: {exc.message}", exc.hint) from None
        return cls(tuple(trees))

    @classmethod
    def auto(cls, tree: TreeConfig, tail: tuple[str, ...] = AUTO_TAIL, tail_suffix: bool = True) -> LoadPolicy:
        """The bundle's tree at batch 1, then `tail`, each entry drafting no more rows than the bundle's tree (else
        that tree is the entry: a batch makes every drafted row cost more per token than it did alone, so the tree
        tuned alone is the widest that can pay); up to batch AUTO_TAIL_SUFFIX_UP_TO each with the tree's suffix
        candidates when `tail_suffix` (they add rows only when the text repeats itself), else without."""
        def entry(batch: int, arg: str) -> TreeConfig | None:
            if arg == PLAIN:
                return None
            drafted = resolve(arg)
            if drafted.max_draft_tokens > tree.drafted.max_draft_tokens:
                drafted = tree.drafted
            suffix = tree.suffix if tail_suffix and batch <= AUTO_TAIL_SUFFIX_UP_TO else None
            return replace(drafted, suffix=suffix)

        return cls((tree, *(entry(batch, t) for batch, t in enumerate(tail, start=2))))

    def tree_for(self, batch: int) -> TreeConfig | None:
        return self.trees[min(max(batch, 1), len(self.trees)) - 1]

    def to_arg(self) -> str:
        return ";".join(PLAIN if t is None else t.to_arg() for t in self.trees)

    def to_list(self) -> list[dict | None]:
        """What the engine model's config stores (read back by `from_list`, no text parsed)."""
        return [None if t is None else t.to_dict() for t in self.trees]

    @classmethod
    def from_list(cls, data: list) -> LoadPolicy:
        if not isinstance(data, list) or not data:
            raise EagleTrtError(f"not a stored load policy: {data!r}", "rebuild the bundle")
        return cls(tuple(None if t is None else TreeConfig.from_dict(t, where="load policy") for t in data))


def resolve_load_policy(tree: TreeConfig, value: str = AUTO, native: bool = False) -> LoadPolicy:
    """The policy a bundle records: `value` checked, or (auto) the bundle's tree then AUTO_TAIL (AUTO_TAIL_NATIVE,
    without suffix candidates, for an engine on the native precisions: their rows cost more than they win in a
    batch there, e.g. chain:1+suffix:4,8 / chain:1 = 217.9/240.2 tok/s at batch 2, 213.2/274.4 at 3, measured with
    the prefill timed)."""
    if value != AUTO:
        return LoadPolicy.parse(value)
    return LoadPolicy.auto(tree, AUTO_TAIL_NATIVE, tail_suffix=False) if native else LoadPolicy.auto(tree, AUTO_TAIL)
