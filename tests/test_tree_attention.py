"""The tree-attention kernel against the fp32 oracle (CPU: Triton's interpreter at small sizes; GPU: full sizes).

Error bound: ||out - ref|| / ||ref|| <= 1e-5 (fp32) and 5e-3 (fp16/bf16). The output is poisoned with NaN before
each run, so an element the kernel fails to write fails the check. bf16 is GPU-only: Triton 3.9's interpreter
mis-reads bf16 tensors (numpy has no bfloat16), which the CPU check below documents.
"""

import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

from eagle_trt.errors import EagleTrtError  # noqa: E402
from eagle_trt.kernels.tree_attention import LaunchPlan, plan_splits, tree_attention  # noqa: E402
from eagle_trt.kernels.tree_attention_ref import tree_attention_ref  # noqa: E402
from eagle_trt.tree import Tree, ancestor_mask, pack_mask  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BOUND = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 5e-3}
SIX_NODE = Tree.from_choices([[0], [1], [0, 0], [0, 1], [1, 0]])  # root + 5 nodes = 6 tree tokens


def random_tree(rng: np.random.Generator, n: int) -> np.ndarray:
    """Packed mask of a random dynamic tree with n tokens (root first, parents before children)."""
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    return pack_mask(ancestor_mask(parents))


def make_batch(masks, prefixes, hq, hkv, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    ns = [m.shape[0] for m in masks]
    cu = torch.tensor([0] + list(np.cumsum(ns)), dtype=torch.int32)
    width = max(m.shape[1] for m in masks)
    packed = torch.zeros(sum(ns), width, dtype=torch.int32)
    for i, m in enumerate(masks):
        packed[cu[i]:cu[i + 1], : m.shape[1]] = torch.from_numpy(m)
    s = max(p + n for p, n in zip(prefixes, ns))
    q = torch.randn(sum(ns), hq, d, generator=g).to(dtype)
    k = torch.randn(len(ns), hkv, s, d, generator=g).to(dtype)
    v = torch.randn(len(ns), hkv, s, d, generator=g).to(dtype)
    t = lambda x: x.to(DEVICE)  # noqa: E731
    return t(q), t(k), t(v), t(packed), t(cu), t(torch.tensor(prefixes, dtype=torch.int32))


def check(q, k, v, packed, cu, prefixes, dtype, **kw):
    out = torch.full_like(q, float("nan"))
    tree_attention(q, k, v, packed, cu, prefixes, out=out, **kw)
    ref = tree_attention_ref(q, k, v, packed, cu, prefixes)
    assert not torch.isnan(out).any(), "unwritten output elements"
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    assert err <= BOUND[dtype], f"relative error {err:.2e} > {BOUND[dtype]:.0e}"
    return out


DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tree", ["chain", "six", "mc_sim_7b_63"])
@pytest.mark.parametrize("prefix", [0, 7, 130])
def test_static_trees(dtype, tree, prefix):
    t = {"chain": Tree.chain(5), "six": SIX_NODE, "mc_sim_7b_63": Tree.named("mc_sim_7b_63")}[tree]
    check(*make_batch([pack_mask(t.attention_mask())], [prefix], hq=4, hkv=2, d=32, dtype=dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ragged_batch_of_random_dynamic_trees(dtype):
    rng = np.random.default_rng(5)
    masks = [random_tree(rng, n) for n in (1, 9, 33, 17)]
    check(*make_batch(masks, [3, 64, 0, 100], hq=6, hkv=2, d=16, dtype=dtype, seed=2), dtype)


@pytest.mark.parametrize("group", [1, 3])
@pytest.mark.parametrize("d", [64, 128] if DEVICE == "cuda" else [64])
def test_gqa_groups_and_head_dims(group, d):
    masks = [pack_mask(SIX_NODE.attention_mask()), pack_mask(Tree.chain(3).attention_mask())]
    check(*make_batch(masks, [20, 5], hq=2 * group, hkv=2, d=d, dtype=torch.float32), torch.float32)


@pytest.mark.parametrize("num_splits", [2, 3, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_prefix_split_over_programs_and_merged(num_splits, dtype):
    """The split (flash-decoding) path: each program streams a run of whole key blocks, a second kernel merges the
    fp32 partials. Ragged lengths leave some splits empty for some row blocks (m = -inf, l = 0 must merge away)."""
    rng = np.random.default_rng(num_splits)
    masks = [random_tree(rng, n) for n in (1, 9, 33, 17)]
    batch = make_batch(masks, [3, 200, 0, 100], hq=6, hkv=2, d=16, dtype=dtype, seed=2)
    keys = batch[1].shape[2]
    plan = LaunchPlan.of(4, 6, 2, keys, 33, 64, 132, num_splits=num_splits)
    assert 1 < plan.num_splits <= num_splits and plan.split_len % 64 == 0
    assert plan.num_splits * plan.split_len >= keys > (plan.num_splits - 1) * plan.split_len
    check(*batch, dtype, num_splits=num_splits)


@pytest.mark.parametrize("programs, keys, tile_rows, want", [
    (8, 8208, 64, 26),  # Llama-3-8B at batch 1: 8 programs, 26 runs of 320 keys fill 2 x 132 SMs
    (8, 6200, 64, 20),  # at least MIN_SPLIT_KEYS keys per split (20 runs of 320)
    (8, 6000, 64, 1),  # under SPLIT_FROM_KEYS: one pass (the second launch and the partials cost more)
    (32, 8256, 256, 8),  # 64 tree rows x G=4 per tile: 4 keys per tile row keep the partials small
    (512, 8208, 64, 1),  # a full grid already: one pass, no merge
])
def test_split_plan_fills_the_gpu_without_tiny_splits(programs, keys, tile_rows, want):
    splits, split_len = plan_splits(programs, keys, tile_rows, 64, 132)
    assert splits == want and splits * split_len >= keys and (splits - 1) * split_len < keys
    assert splits == 1 or (split_len % 64 == 0 and split_len >= max(256, 4 * tile_rows) - 64)


def test_each_branch_equals_causal_attention_over_its_path():
    """vLLM's branch check: a tree row's output equals plain causal attention over prefix + its own path."""
    tree = Tree.named("eagle_default")
    mask = tree.attention_mask()
    q, k, v, packed, cu, prefixes = make_batch([pack_mask(mask)], [11], hq=4, hkv=2, d=32, dtype=torch.float32)
    out = tree_attention(q, k, v, packed, cu, prefixes)
    for leaf in sorted(set(range(1, tree.num_nodes + 1)) - set(tree.parents().tolist())):
        nodes = np.flatnonzero(mask[leaf]).tolist()  # the root-to-leaf path
        keys = list(range(11)) + [11 + x for x in nodes]
        kp, vp = k[0][:, keys].repeat_interleave(2, 0), v[0][:, keys].repeat_interleave(2, 0)
        qp = q[nodes].transpose(0, 1)  # [Hq, len, D]
        causal = torch.ones(len(nodes), len(keys), dtype=torch.bool, device=DEVICE).tril(diagonal=11)
        want = torch.nn.functional.scaled_dot_product_attention(qp, kp, vp, attn_mask=causal).transpose(0, 1)
        assert torch.allclose(out[nodes], want, atol=1e-5), nodes


@pytest.mark.skipif(DEVICE == "cuda", reason="documents an interpreter limitation")
def test_bf16_is_not_trusted_in_the_interpreter():
    q, k, v, packed, cu, prefixes = make_batch([pack_mask(SIX_NODE.attention_mask())], [4], 4, 2, 32, torch.bfloat16)
    out = tree_attention(q, k, v, packed, cu, prefixes)
    ref = tree_attention_ref(q, k, v, packed, cu, prefixes)
    if torch.allclose(out.float(), ref.float(), atol=1e-2):
        pytest.fail("bf16 now works in the interpreter: move it into DTYPES for CPU runs")


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
@pytest.mark.parametrize("hq, hkv, d", [(32, 8, 128), (9, 3, 64)])
@pytest.mark.parametrize("n, prefix", [(64, 4096), (16, 8192)])
@pytest.mark.parametrize("batch", [1, 8])
def test_full_sizes_on_gpu(hq, hkv, d, n, prefix, batch):
    """Batch 1 runs the planned split path, batch 8 (Llama) one pass or few splits; num_splits=1 the single pass."""
    rng = np.random.default_rng(n)
    masks = [random_tree(rng, n) for _ in range(batch)]
    for dtype in (torch.float16, torch.bfloat16):
        inputs = make_batch(masks, [prefix - 3 * i for i in range(batch)], hq, hkv, d, dtype)
        check(*inputs, dtype)
        check(*inputs, dtype, num_splits=1)


def test_benchmark_script_smoke(tmp_path):
    import json as _json

    from eagle_trt.kernels import bench

    if DEVICE == "cuda":
        pytest.skip("the full benchmark runs by hand on GPUs")
    assert bench.main(["--interpret-smoke", "--json-out", str(tmp_path / "b.json")]) == 0
    rows = _json.loads((tmp_path / "b.json").read_text())["rows"]
    assert len(rows) == 2 and all(r["ours_us"] > 0 and r["unsplit_us"] > 0 and r["sdpa_us"] > 0 for r in rows)
    assert [r["splits"] for r in rows] == [1, 1]  # short prefixes run in one pass, and the row says so


def test_bench_kernel_command_passes_its_flags(tmp_path):
    """`eagle-trt bench-kernel` is the module's main: --sweep swaps the comparison table for the sweep."""
    import json as _json

    from click.testing import CliRunner

    from eagle_trt.cli import main

    if DEVICE == "cuda":
        pytest.skip("the full benchmark runs by hand on GPUs")
    out = tmp_path / "k.json"
    res = CliRunner().invoke(main, ["bench-kernel", "--interpret-smoke", "--sweep", "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    result = _json.loads(out.read_text())
    assert "rows" not in result and "sweep smoke B=1 N=8 L=64" in res.output
    (swept,) = result["sweep"]
    settings = {(t["num_splits"], t["block_k"], t["num_warps"], t["num_stages"], t["block_q"]) for t in swept["all"]}
    assert len(swept["all"]) == 112 and swept["best"]["us"] == min(t["us"] for t in swept["all"] if t["us"])
    assert swept["plan_default"]["splits"] == "plan" and len(settings) > 50  # distinct launches, not one repeated


def test_trt_plugin_is_described_and_needs_tensorrt():
    from eagle_trt.kernels import trt_plugin

    info = trt_plugin.describe_plugin()
    assert info["name"] == "eagle_trt::tree_attention" and "packed_mask" in info["inputs"]
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        with pytest.raises(EagleTrtError, match="Python plugin API"):
            trt_plugin.register()


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
def test_runtime_greedy_identity_with_the_kernel_on_gpu(tiny_base):
    """With a draft that proposes the base's own continuation, every verify step runs whole tree paths through the
    kernel and accepts them: identity then covers the kernel's masks, not only the root row."""
    from runtime_helpers import OracleDraft

    from eagle_trt.runtime import EagleDecoder

    prompt = list(range(5, 30))
    plain = EagleDecoder.load(tiny_base, None, device="cuda").generate_all(prompt, 40).token_ids
    eagle = EagleDecoder.load(tiny_base, None, tree="static:mc_sim_7b_63", device="cuda")
    eagle = eagle.with_draft(OracleDraft(prompt + plain, eagle.base.args.vocab_size))
    result = eagle.generate_all(prompt, 40)
    assert result.token_ids == plain
    assert result.stats.mean_accepted_length > 4  # depth-4 paths accepted, the bonus token on top


@pytest.mark.parametrize("change, words", [
    ({"d": 48}, "head dim 48 is not supported"),
    ({"hq": 3}, "3 query heads are not a multiple of 2 KV heads"),
    ({"mask_dtype": torch.int64}, "packed_mask is torch.int64"),
    ({"dtype": torch.float64}, "dtype torch.float64 is not supported"),  # the CPU engine's exact K/V cache dtype
])
def test_bad_kernel_inputs_raise_our_error(change, words):
    """The kernel wrapper checks its inputs before any launch and says what is wrong (no assert, no RuntimeError)."""
    d, hq = change.get("d", 32), change.get("hq", 4)
    q = torch.zeros(6, hq, d, dtype=change.get("dtype", torch.float32))  # [total_q, Hq, D]
    k = torch.zeros(1, 2, 10, d, dtype=q.dtype)  # [B, Hkv, S, D]
    packed = torch.from_numpy(pack_mask(SIX_NODE.attention_mask())).to(change.get("mask_dtype", torch.int32))
    with pytest.raises(EagleTrtError, match=words):
        tree_attention(q, k, k.clone(), packed, torch.tensor([0, 6], dtype=torch.int32),
                       torch.tensor([4], dtype=torch.int32))
