"""The int8 and packed fp32 engines (runtime/linears.py): exact per-row int8 arithmetic, oneDNN-packed fp32 linears, a
batch-invariant forward (a verify row equals a one-token decode step bit for bit, through a tree's gaps), greedy
identity against the same engine's plain int8 decoding, and the FR-Spec truncated draft vocabulary."""

import json

import pytest
import torch

from eagle_trt.errors import EagleTrtError
from eagle_trt.kernels.cpu_build import cpu_supports_native
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.linears import Int8Linear, PackedLinear, check_precision, rows_are_independent
from eagle_trt.runtime.native import W_F32
from runtime_helpers import OracleDraft

PROMPTS = [list(range(5, 30)), [1, 77, 88, 99, 2], [300, 12]]


@pytest.fixture(scope="module")
def int8_plain(tiny_base):
    decoder = EagleDecoder.load(tiny_base, None, dtype="int8")
    return {tuple(p): decoder.generate_all(p, 40).token_ids for p in PROMPTS}


def test_int8_linear_rows_are_independent_and_close_to_fp32():
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 64, generator=gen)  # [N, K]
    x = torch.randn(7, 64, generator=gen) * torch.arange(1, 8).float()[:, None]  # rows of very different scale
    lin = Int8Linear(weight)
    assert lin.qweight_t.dtype == torch.int8 and lin.qweight_t.shape == (64, 96)
    batch = lin(x)  # [7, 96]
    for i in range(7):
        assert torch.equal(lin(x[i:i + 1])[0], batch[i])  # bit for bit, whatever else is in the batch
    ref = x @ weight.t()
    assert ((batch - ref).norm() / ref.norm()).item() < 0.02
    rows = torch.tensor([5, 0, 93])
    sliced = Int8Linear.from_rows(lin, rows)
    assert torch.equal(sliced(x), batch[:, rows])  # FR-Spec head rows: the same numbers as the full head


def _decode(model, token, pos):
    logits, _, _ = model(torch.tensor([token]), torch.tensor([pos]), pos)
    return logits[0]


def test_int8_vocabulary_head_on_onednn_gives_the_same_numbers():
    gen = torch.Generator().manual_seed(2)
    lin = Int8Linear(torch.randn(4096, 64, generator=gen))  # [N, K]
    x = torch.randn(5, 64, generator=gen) * 3  # [5, K]
    before = lin(x)  # [5, N] through torch._int_mm
    if not lin.use_onednn():
        pytest.skip("oneDNN's int8 kernel is not exact on this CPU (no VNNI) or not built in")
    assert lin.onednn is not None and lin.qweight_t is None  # one copy of the weight, oneDNN's
    assert torch.equal(lin(x), before)  # exact int32 sums either way: the same bits
    assert torch.equal(lin(x[2:3])[0], before[2])


def test_int8_linear_on_our_kernel_gives_the_same_numbers_and_fastest_is_chosen():
    from eagle_trt.kernels.cpu_build import cpu_supports_native
    from eagle_trt.runtime.linears import use_fastest_int8_kernels

    if cpu_supports_native() is not None:
        pytest.skip(f"the native kernels cannot run here: {cpu_supports_native()}")
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(200, 83, generator=gen)  # [N, K]: K not a multiple of 32 (the kernel's scalar tail)
    lin = Int8Linear(weight)
    x = torch.randn(9, 83, generator=gen) * torch.arange(1, 10).float()[:, None]  # [9, K]
    x[4] = 0.0
    before = lin(x)  # [9, N] through torch._int_mm
    extreme = torch.full((2, 83), 127.0)  # [2, K]: every product at its bound, both signs
    extreme[1] = -127.0
    extreme_before = lin(extreme)
    assert lin.use_native() and lin.native is not None and lin.qweight_t is None  # one copy of the weight, ours
    assert torch.equal(lin(x), before)  # exact int32 sums either way: the same bits
    assert torch.equal(lin(extreme), extreme_before)
    for i in range(9):
        assert torch.equal(lin(x[i:i + 1])[0], before[i])
    odd = Int8Linear(torch.randn(201, 83, generator=gen))  # an odd N: the last weight row runs without a pair
    odd_before = [odd(x[:t]) for t in range(1, 10)]  # every tail of the 4-row tiles, through torch._int_mm
    assert odd.use_native()
    for t in range(1, 10):
        assert torch.equal(odd(x[:t]), odd_before[t - 1])
    model = torch.nn.Sequential(Int8Linear(weight), Int8Linear(weight), Int8Linear(torch.randn(16, 83, generator=gen)))
    refs = [m(x) for m in model]  # [9, N] each, through torch._int_mm
    use_fastest_int8_kernels([model, None])
    kernels = [("native" if m.native is not None else "onednn" if m.onednn is not None else "int_mm") for m in model]
    assert kernels[0] == kernels[1]  # one shape, one timing: the second follows the first
    for m, ref in zip(model, refs):
        assert torch.equal(m(x), ref)  # whichever kernel won: the same bits


INT8_KERNEL_CHECK = """
import torch
from eagle_trt.kernels.cpu_build import load_cpu_forward
from eagle_trt.runtime.linears import Int8Linear
gen = torch.Generator().manual_seed(5)
for n, k in ((200, 83), (33, 64), (70, 130), (16, 576)):  # N past whole 16-output tiles, K past whole 64-byte chunks
    lin = Int8Linear(torch.randn(n, k, generator=gen))
    weight = lin.qweight_t
    x = torch.randint(-127, 128, (21, k), dtype=torch.int8, generator=gen)  # [21, K]: two 16-row tiles, then 4-row ones
    x[3], x[4] = 127, -127  # every product at its bound
    refs = [torch._int_mm(x[:t], weight) for t in (1, 2, 3, 4, 5, 8, 16, 17, 21)]  # before: torch's own kernel
    assert lin.use_native()
    for i, t in enumerate((1, 2, 3, 4, 5, 8, 16, 17, 21)):
        got = lin._int32(x[:t])  # [t, N]
        want = (x[:t].int() @ weight.int()).float()  # exact int32 sums
        assert torch.equal(got, want) and torch.equal(got, refs[i].float()), (n, k, t)
    biased = Int8Linear(torch.randn(n, k, generator=gen), torch.randn(n, generator=gen))
    xf = torch.randn(21, k, generator=gen) * torch.linspace(0.01, 50, 21)[:, None]  # [21, K]: rows of any scale
    xf[2] = 0.0  # an all-zero row: its scale is the 1e-12 floor
    before = [biased(xf[:t]) for t in (1, 4, 17, 21)]  # [t, N]: the torch ops
    assert biased.use_native()
    for t, ref in zip((1, 4, 17, 21), before):
        assert torch.equal(biased(xf[:t]), ref), (n, k, t)  # quantized, summed and scaled in one C call: same bits
print(load_cpu_forward(False).ef_int8_kernel(), load_cpu_forward(True).ef_int8_kernel())
"""


@pytest.mark.parametrize("amx", ["1", "0"])
def test_every_int8_kernel_branch_gives_the_exact_sums(amx):
    """The branch this CPU runs (AMX where Linux grants it; EAGLE_TRT_AMX=0 keeps an AMX CPU on VNNI) sums
    exactly, whatever the row count, the last partial tile of outputs or inputs, or the extreme bytes."""
    import os
    import subprocess
    import sys

    from eagle_trt.kernels.cpu_build import cpu_flags

    if cpu_supports_native() is not None:
        pytest.skip(f"the native kernels cannot run here: {cpu_supports_native()}")
    env = {**os.environ, "EAGLE_TRT_AMX": amx}
    proc = subprocess.run([sys.executable, "-c", INT8_KERNEL_CHECK], env=env, capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    flags = set(cpu_flags())
    vnni = "avx512f" in flags and "avx512_vnni" in flags
    expected = 2 if amx == "1" and vnni and "amx_int8" in flags else 1 if vnni else 0
    assert proc.stdout.split() == [str(expected)] * 2  # both builds (one thread, OpenMP) on one branch


def test_packed_fp32_linear_rows_are_independent_and_match_f_linear():
    gen = torch.Generator().manual_seed(1)
    linear = torch.nn.Linear(80, 48, bias=True)
    x = torch.randn(7, 80, generator=gen)  # [7, K]
    packed = PackedLinear(linear)
    batch = packed(x)  # [7, N]
    assert batch.shape == (7, 48) and packed.out_features == 48
    for i in range(7):
        assert torch.equal(packed(x[i:i + 1])[0], batch[i])  # one row runs as two: the same kernel, the same bits
        assert torch.equal(packed(x[: i + 1]), batch[: i + 1])
    assert torch.allclose(batch, linear(x), rtol=1e-5, atol=1e-5)  # fp32, only the summation order differs
    assert rows_are_independent([packed])


def test_fp32_cpu_engine_packs_its_linears(tiny_base, eagle1_draft):
    decoder = EagleDecoder.load(tiny_base, eagle1_draft)
    assert isinstance(decoder.base.layers[0].mlp.gate_up_proj, PackedLinear)
    assert isinstance(decoder.draft.lm_head, Int8Linear)  # the draft only proposes: int8 on the CPU
    assert isinstance(decoder.draft.fc, PackedLinear)  # fc has a bias: packed fp32
    int8 = EagleDecoder.load(tiny_base, eagle1_draft, dtype="int8")
    assert isinstance(int8.base.lm_head, Int8Linear)
    if cpu_supports_native(q8=True) is None:  # the EAGLE-1 draft's whole call in C, its fc float32 as on torch
        assert int8.draft.native is not None and int8.draft.native.fc.type == W_F32
    else:
        assert int8.draft.native is None and isinstance(int8.draft.fc, PackedLinear)
    assert decoder.base.batch_invariant and decoder.base.cache.k.dtype == torch.float64  # proven at load


def test_fp32_engine_says_so_when_its_rows_are_not_independent(tiny_base, eagle1_draft, monkeypatch, caplog):
    monkeypatch.setattr("eagle_trt.runtime.linears.rows_are_independent", lambda linears: False)
    decoder = EagleDecoder.load(tiny_base, eagle1_draft)
    assert not decoder.base.batch_invariant and decoder.base.cache.k.dtype == torch.float32  # SDPA attention
    assert "not batch-invariant" in caplog.text and "--dtype int8" in caplog.text


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_forward_is_batch_invariant_through_tree_gaps(tiny_base, dtype):
    base = EagleDecoder.load(tiny_base, None, dtype=dtype).base
    prompt = torch.tensor(PROMPTS[0])
    p = len(prompt)
    with torch.inference_mode():
        base(prompt, torch.arange(p), 0)
        root, a, b, c = 40, 41, 42, 43
        plain = [_decode(base, root, p), _decode(base, b, p + 1), _decode(base, c, p + 2)]
        # root; a and b both children of the root; c child of b: c's path skips slot p+1 (a's)
        parents = [-1, 0, 0, 2]
        mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
        logits, _, _ = base(torch.tensor([root, a, b, c]), torch.tensor([p, p + 1, p + 1, p + 2]), p, tree_mask=mask)
    assert parents[3] == 2
    for plain_row, tree_row in zip(plain, (0, 2, 3)):
        assert torch.equal(plain_row, logits[tree_row])


@pytest.mark.parametrize("tree", ["chain:4", "static:mc_sim_7b_63", "dynamic:3,4,10"])
def test_int8_oracle_draft_is_identical_and_accepts_whole_paths(tiny_base, int8_plain, tree):
    prompt = PROMPTS[0]
    decoder = EagleDecoder.load(tiny_base, None, tree=tree, dtype="int8")
    decoder = decoder.with_draft(OracleDraft(prompt + int8_plain[tuple(prompt)], decoder.base.args.vocab_size))
    result = decoder.generate_all(prompt, 40)
    assert result.token_ids == int8_plain[tuple(prompt)]
    assert result.stats.mean_accepted_length > 3


@pytest.mark.parametrize("draft_name", ["eagle1_draft", "eagle3_draft"])
@pytest.mark.parametrize("tree", ["chain:3", "static:eagle_default", "dynamic:5,8,48"])
def test_int8_random_draft_is_identical(request, tiny_base, int8_plain, draft_name, tree):
    decoder = EagleDecoder.load(tiny_base, request.getfixturevalue(draft_name), tree=tree, dtype="int8")
    for prompt in PROMPTS:
        assert decoder.generate_all(prompt, 40).token_ids == int8_plain[tuple(prompt)]


def _with_vocab(draft_dir, tmp_path, ids):
    import shutil

    out = tmp_path / "draft_with_vocab"
    shutil.copytree(draft_dir, out)
    (out / "draft_vocab.json").write_text(json.dumps({"token_ids": ids}))
    return out


def test_truncated_draft_vocab_proposes_only_its_tokens_and_keeps_outputs(tiny_base, eagle1_draft, tmp_path):
    ids = list(range(0, 384, 3))  # 128 of the 384 tokens
    draft = _with_vocab(eagle1_draft, tmp_path, ids)
    plain = EagleDecoder.load(tiny_base, None)
    for vocab, allowed in ((None, set(ids)), (16, set(ids[:16]))):
        decoder = EagleDecoder.load(tiny_base, draft, tree="dynamic:3,4,10", draft_vocab=vocab)
        assert decoder.draft.lm_head.out_features == len(allowed)
        seen = set()
        decoder.on_verify = lambda tree, logits: seen.update(tree.tokens[1:].tolist())
        for prompt in PROMPTS:
            assert decoder.generate_all(prompt, 24).token_ids == plain.generate_all(prompt, 24).token_ids
        assert seen and seen <= allowed
    full = EagleDecoder.load(tiny_base, draft, draft_vocab=0)
    assert full.draft.vocab_ids is None


def test_draft_vocab_errors(tiny_base, eagle1_draft, eagle3_draft, tmp_path):
    with pytest.raises(EagleTrtError, match="draft_vocab.json, which does not exist"):
        EagleDecoder.load(tiny_base, eagle1_draft, draft_vocab=10)
    draft = _with_vocab(eagle1_draft, tmp_path, [1, 2, 3])
    with pytest.raises(EagleTrtError, match="exceeds the 3 ids"):
        EagleDecoder.load(tiny_base, draft, draft_vocab=4)
    with pytest.raises(EagleTrtError, match="EAGLE-1/2 drafts only"):
        EagleDecoder.load(tiny_base, eagle3_draft, draft_vocab=10)


def test_precision_errors():
    with pytest.raises(EagleTrtError, match="int8 runs on the CPU only"):
        check_precision("int8", "cuda")
    with pytest.raises(EagleTrtError, match="unsupported dtype 'int4'"):
        check_precision("int4", "cpu")
