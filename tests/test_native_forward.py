"""Precision native (runtime/native.py, kernels/cpu_forward.c): the fused C forward on weights as stored.

- Each GGUF block type the kernel reads (Q4_0, Q4_1, Q8_0) and float32 rows: a linear equals x W^T over the weights
  the `gguf` package dequantizes, within float32 summation error, and every row's result is bitwise the same
  whether it runs alone or beside other rows.
- The demo GGUF base (Q4_1 + Q8_0 as shipped): logits within 5e-4 of the torch float32 engine on its dequantized
  weights, the same greedy tokens; EAGLE output equals plain decoding exactly (chain, dynamic and suffix trees);
  a packed forward of two sequences equals each alone, bit for bit.
- native-q8 (8-bit activations per 32-block, int32 sums by VNNI or AVX2 over repacked blocks): each block type's linear equals
  the reference that quantizes the activations as llama.cpp does, within float32 summation error, rows bitwise
  independent; on the demo, next-token distributions within 0.1 (L1, mean over a prompt's rows) of float32 and the
  same top-1 on >= 95 % of rows; EAGLE equals plain decoding exactly; packed equals alone.
- One thread runs the kernel built without OpenMP: the same bits as the OpenMP build on two threads.
- Tiny transformers-written families (biases, llama3 and YaRN RoPE, tied heads): logits equal transformers' within
  float32 error; q/k-norm and sliding-window models are refused by name; native on a GPU is refused.
"""

import ctypes

import numpy as np
import pytest
import torch

from eagle_trt.errors import EagleTrtError
from hf_builders import hf_logits, make_hf_base

gguf = pytest.importorskip("gguf")

from eagle_trt.kernels.cpu_build import cpu_supports_native  # noqa: E402

pytestmark = pytest.mark.skipif(cpu_supports_native() is not None,
                                reason=f"the native forward cannot run here: {cpu_supports_native()}")


@pytest.fixture(scope="module")
def lib():
    from eagle_trt.kernels.cpu_build import load_cpu_forward

    return load_cpu_forward()


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0", "F32"])
def test_linear_equals_dequantized_weights_and_rows_are_independent(lib, type_name):
    from gguf.quants import dequantize, quantize

    from eagle_trt.runtime.native import BLOCK_TYPES, W_F32, CLinear

    gen = np.random.default_rng(0)
    out, k = 96, 256
    w = gen.standard_normal((out, k)).astype(np.float32) * 0.05  # [out, K]
    if type_name == "F32":
        stored, code, ref = np.ascontiguousarray(w), W_F32, w
    else:
        qtype = gguf.GGMLQuantizationType[type_name]
        stored = np.ascontiguousarray(quantize(w, qtype))  # [out, K/32 blocks as bytes]
        code, ref = BLOCK_TYPES[type_name], dequantize(stored, qtype).astype(np.float32).reshape(out, k)
    bias = torch.randn(out)  # [out]
    lin = CLinear(code, out, k, stored.ctypes.data, bias.data_ptr())
    x = torch.randn(7, k)  # [T, K]
    y = torch.empty(7, out)  # [T, out]
    lib.ef_linear(ctypes.byref(lin), 7, ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()))
    expected = x.double() @ torch.from_numpy(ref).double().T + bias.double()  # [T, out]
    scale = x.abs().double() @ torch.from_numpy(np.abs(ref)).double().T  # [T, out]: sum |x||w|
    assert ((y.double() - expected).abs() <= 1e-5 * scale + 1e-6).all()
    for t in range(7):  # each row alone: the same bits
        one = torch.empty(1, out)
        lib.ef_linear(ctypes.byref(lin), 1, ctypes.c_void_p(x[t:t + 1].contiguous().data_ptr()),
                      ctypes.c_void_p(one.data_ptr()))
        assert torch.equal(one[0], y[t])


def _q8_reference(x: torch.Tensor) -> torch.Tensor:
    """[T, K] activations as the q8 kernel sees them: per 32-block d = max|x| / 127, round(x / d) * d (float64)."""
    xb = x.reshape(x.shape[0], -1, 32)  # [T, K/32, 32]
    amax = xb.abs().amax(-1, keepdim=True)
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))  # float32, as the kernel computes it
    return (torch.round(xb * inv).double() * (amax / 127.0).double()).reshape(x.shape)


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_q8_linear_equals_quantized_activation_reference_and_rows_are_independent(lib, type_name):
    from gguf.quants import dequantize, quantize

    from eagle_trt.runtime.native import BLOCK_TYPES, CLinear

    if not lib.ef_has_q8():
        pytest.skip("this build has no 8-bit-activation linears (an AVX-512 CPU without VNNI)")
    gen = np.random.default_rng(1)
    out, k = 96, 256
    w = gen.standard_normal((out, k)).astype(np.float32) * 0.05  # [out, K]
    qtype = gguf.GGMLQuantizationType[type_name]
    stored = np.ascontiguousarray(quantize(w, qtype))  # [out, K/32 blocks as bytes]
    ref = torch.from_numpy(dequantize(stored, qtype).astype(np.float32).reshape(out, k)).double()  # [out, K]
    bias = torch.randn(out)  # [out]
    src = CLinear(BLOCK_TYPES[type_name], out, k, stored.ctypes.data, bias.data_ptr())
    assert lib.ef_repacked_bytes(src.type, 40, k) == 0  # rows not a multiple of 16: not repacked
    packed = np.empty(lib.ef_repacked_bytes(src.type, out, k), np.uint8)  # [units]
    kind = lib.ef_repack(ctypes.byref(src), ctypes.c_void_p(packed.ctypes.data))
    lin = CLinear(kind, out, k, packed.ctypes.data, bias.data_ptr())
    x = torch.randn(11, k)  # [T, K]
    x[3] = 0.0  # an all-zero row: scale 0
    y = torch.empty(11, out)  # [T, out]
    lib.ef_linear(ctypes.byref(lin), 11, ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()))
    xq = _q8_reference(x)  # [T, K]
    expected = xq @ ref.T + bias.double()  # [T, out]
    assert ((y.double() - expected).abs() <= 1e-5 * (xq.abs() @ ref.abs().T) + 1e-6).all()
    assert not torch.allclose(y.double(), x.double() @ ref.T + bias.double(), atol=1e-4)  # activations quantized
    for t in range(11):  # each row alone: the same bits
        one = torch.empty(1, out)
        lib.ef_linear(ctypes.byref(lin), 1, ctypes.c_void_p(x[t:t + 1].contiguous().data_ptr()),
                      ctypes.c_void_p(one.data_ptr()))
        assert torch.equal(one[0], y[t])


@pytest.fixture(scope="module")
def demo():
    from transformers import AutoTokenizer

    from eagle_trt.demo_model import materialize_demo_base, materialize_demo_gguf_base, shipped_draft_dir
    from eagle_trt.runtime import EagleDecoder

    gguf_dir = materialize_demo_gguf_base()
    native = EagleDecoder.load(gguf_dir, shipped_draft_dir("eagle1"), tree="chain:3", dtype="native")
    reference = EagleDecoder.load(materialize_demo_base(), None, tree="chain:1", dtype="float32")
    tok = AutoTokenizer.from_pretrained(gguf_dir)
    return tok, native, reference


@pytest.fixture(scope="module")
def demo_q8(demo):
    from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
    from eagle_trt.kernels.cpu_build import cpu_supports_native
    from eagle_trt.runtime import EagleDecoder

    if cpu_supports_native(q8=True):
        pytest.skip(cpu_supports_native(q8=True))
    return EagleDecoder.load(materialize_demo_gguf_base(), shipped_draft_dir("eagle1"), tree="chain:3",
                             dtype="native-q8")


@pytest.fixture(params=["native", "native-q8"])
def engine(request, demo):
    return demo[1] if request.param == "native" else request.getfixturevalue("demo_q8")


def _prompt(tok, i: int) -> list[int]:
    from eagle_trt.datasets import encode_prompt, mtbench_prompts

    return encode_prompt(tok, mtbench_prompts()[i].text, True)


def test_demo_gguf_runs_its_blocks_as_stored(demo):
    _, native, _ = demo
    assert native.base.native.block_types == ["Q4_1", "Q8_0"]
    assert native.base.native.weight_bytes() < 110e6  # the blocks (~97 MB), not a 540 MB float32 copy
    assert len(native.base.layers) == 0  # the torch copies of the layers were dropped


def test_demo_logits_and_greedy_match_dequantized_float32(demo):
    tok, native, reference = demo
    ids = _prompt(tok, 0)
    positions = torch.arange(len(ids))
    with torch.inference_mode():
        ours = native.base(torch.tensor(ids), positions, 0)[0]  # [T, V]
        ref = reference.base(torch.tensor(ids), positions, 0)[0]
    assert (ours - ref).abs().max().item() < 5e-4
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))
    plain = native.with_tree("chain:1", speculative=False)
    assert plain.generate_all(ids, 24).token_ids == reference.generate_all(ids, 24).token_ids


def test_demo_q8_distributions_near_float32(demo, demo_q8):
    tok, _, reference = demo
    from eagle_trt.runtime.native import W_X4, W_X8

    layer = demo_q8.base.native.layers[0]
    assert {getattr(layer, f).type for f in ("q", "k", "v", "o", "gate", "up", "down")} == {W_X4}  # Q4_1 repacked
    assert demo_q8.base.native.model.lm_head.type == W_X8  # the Q8_0 head repacked
    ours, ref = [], []
    for i in range(6):  # 400 rows: one prompt's ~50 make the top-1 rate move 2 % with any change of sum order
        ids = _prompt(tok, i)
        positions = torch.arange(len(ids))
        with torch.inference_mode():
            ours.append(demo_q8.base(torch.tensor(ids), positions, 0)[0])  # [T, V]
            ref.append(reference.base(torch.tensor(ids), positions, 0)[0])
    ours, ref = torch.cat(ours), torch.cat(ref)  # [sum T, V]
    l1 = (ours.softmax(-1) - ref.softmax(-1)).abs().sum(-1)  # [sum T]
    assert l1.mean().item() < 0.1
    assert (ours.argmax(-1) == ref.argmax(-1)).float().mean().item() >= 0.95


def test_native_q8_keeps_a_float16_cache(demo, demo_q8):
    """native-q8 stores K/V in float16 (the base's and the C draft's caches): layer 0's K/V (computed before any
    attention reads the cache) are the float32 path's rounded to nearest; native keeps float32."""
    from eagle_trt.runtime.model import BaseCall

    tok, native, _ = demo
    base = demo_q8.base
    assert base.cache.k.dtype == demo_q8.draft.cache.k.dtype == torch.float16
    assert native.base.cache.k.dtype == native.draft.cache.k.dtype == torch.float32
    ids = torch.tensor(_prompt(tok, 6)[:40])  # [40]
    half = base.new_cache(64)
    base.native.cache_dtype = torch.float32
    try:
        full = base.new_cache(64)
        with torch.inference_mode():
            base.forward_packed([BaseCall(ids, torch.arange(40), 0, cache=full)])
    finally:
        base.native.cache_dtype = torch.float16
    with torch.inference_mode():
        base.forward_packed([BaseCall(ids, torch.arange(40), 0, cache=half)])
    assert full.k.dtype == torch.float32 and half.k.dtype == torch.float16
    assert torch.equal(half.k[0, :, :40], full.k[0, :, :40].half())
    assert torch.equal(half.v[0, :, :40], full.v[0, :, :40].half())
    assert not half.k[0, :, 40:].any()  # nothing written past the rows


@pytest.mark.parametrize("tree", ["chain:3", "dynamic:3,3,6", "auto-suffix"])
def test_demo_eagle_equals_plain_exactly(demo, engine, tree):
    tok, _, _ = demo
    native = engine
    plain = native.with_tree("chain:1", speculative=False)
    decoder = native if tree == "chain:3" else native.with_tree("dynamic:3,3,6") if tree.startswith("dynamic") \
        else native.with_tree("chain:3+suffix")
    for i in (1, 5):
        ids = _prompt(tok, i)
        assert decoder.generate_all(ids, 40).token_ids == plain.generate_all(ids, 40).token_ids


def test_packed_forward_equals_each_sequence_alone(demo, engine):
    from eagle_trt.runtime.model import BaseCall

    tok, _, _ = demo
    native = engine
    base = native.base
    a, b = _prompt(tok, 2)[:20], _prompt(tok, 3)[:9]
    caches = [base.new_cache(64) for _ in range(4)]
    with torch.inference_mode():
        calls = [BaseCall(torch.tensor(ids), torch.arange(len(ids)), 0, cache=c) for ids, c in ((a, caches[0]), (b, caches[1]))]
        together = base.forward_packed(calls)
        alone = [base.forward_packed([BaseCall(torch.tensor(ids), torch.arange(len(ids)), 0, cache=c)])[0]
                 for ids, c in ((a, caches[2]), (b, caches[3]))]
    for joint, single in zip(together, alone):
        assert torch.equal(joint[0], single[0]) and torch.equal(joint[1], single[1])
    assert torch.equal(caches[0].k[:, :, :20], caches[2].k[:, :, :20])


def test_one_thread_runs_the_build_without_openmp_and_computes_the_same_bits(demo, engine):
    """On one thread the kernel runs its build without OpenMP (runtime.native picks it per call); a prompt, then a
    4-row verify block over it, give the same logits, hidden states and cache bits as the OpenMP build on two
    threads (where attention also groups the rows differently)."""
    from eagle_trt.kernels.cpu_build import load_cpu_forward
    from eagle_trt.runtime.model import BaseCall

    tok, _, _ = demo
    base = engine.base
    ids = torch.tensor(_prompt(tok, 4)[:30])  # [30]
    block = torch.tensor([5, 17, 42, 9])  # [4] a root and three draft tokens, causal
    outs, caches, threads = [], [], torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            assert base.native.lib is load_cpu_forward(n > 1)
            cache = base.new_cache(64)
            with torch.inference_mode():
                base.forward_packed([BaseCall(ids, torch.arange(30), 0, cache=cache)])
                outs.append(base.forward_packed([BaseCall(block, torch.arange(30, 34), 30, cache=cache)])[0])
            caches.append(cache)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert torch.equal(caches[0].k[:, :, :34], caches[1].k[:, :, :34])


@pytest.mark.parametrize("variant", ["llama31", "llama_bias", "qwen2", "qwen25_tied", "qwen25_yarn"])
def test_float_families_match_transformers(tmp_path, variant):
    from eagle_trt.runtime import EagleDecoder

    base = make_hf_base(tmp_path / variant, variant)
    decoder = EagleDecoder.load(base, None, tree="chain:1", dtype="native")
    ids = [1, 5, 9, 33, 17, 4, 60, 2, 8, 100]
    with torch.inference_mode():
        ours = decoder.base(torch.tensor(ids), torch.arange(len(ids)), 0)[0]  # [T, V]
    ref = hf_logits(base, ids)
    assert (ours - ref).abs().max().item() < 1e-4 * max(1.0, ref.abs().max().item())


@pytest.mark.parametrize("variant, named", [("qwen3", "q/k RMSNorm"), ("qwen2_window", "sliding-window")])
def test_unsupported_layers_are_refused_by_name(tmp_path, variant, named):
    from eagle_trt.runtime import EagleDecoder

    base = make_hf_base(tmp_path / variant, variant)
    with pytest.raises(EagleTrtError, match=named) as info:
        EagleDecoder.load(base, None, tree="chain:1", dtype="native")
    assert "int8" in info.value.hint


def test_native_on_a_gpu_is_refused():
    from eagle_trt.runtime.linears import check_precision

    with pytest.raises(EagleTrtError, match="native runs on the CPU only"):
        check_precision("native", "cuda:0")


def test_native_draft_equals_the_torch_draft(demo):
    """The EAGLE-1 draft in C (precision native: float32 weights) computes what its torch layer computes, a mask
    that hides part of the cached prefix (a tree expansion's) included; its head scores the truncated vocabulary."""
    from eagle_trt.runtime.draft import DraftCall

    tok, native, _ = demo
    draft = native.draft
    assert draft.native is not None and draft.native.head.rows == draft.lm_head.weight.shape[0] < 49152
    ids = torch.tensor(_prompt(tok, 4)[:12])  # [12]
    feats = torch.randn(12, draft.args.hidden_size) * 3  # [12, H]
    mask = torch.ones(4, 12, dtype=torch.bool)  # [4, start + 4]: rows 8..11 over slots 0..11
    mask[:, 5] = False  # a prefix slot hidden from every row
    mask[1:, 8] = False
    mask[3, 10] = False

    def run():
        cache = draft.new_cache(32)
        first = draft.hidden_packed([DraftCall(ids[:8], feats[:8], torch.arange(8), 0, cache)])[0]  # [8, H]
        then = draft.hidden_packed([DraftCall(ids[8:], feats[8:], torch.arange(8, 12), 8, cache, mask)])[0]  # [4, H]
        return torch.cat((first, then)), draft.log_probs(then)

    with torch.inference_mode():
        ours, ours_lp = run()
        kept, draft.native = draft.native, None
        try:
            ref, ref_lp = run()
        finally:
            draft.native = kept
    assert (ours - ref).abs().max().item() < 1e-3 * ref.abs().max().item()
    assert (ours_lp - ref_lp).abs().max().item() < 1e-3
    assert torch.equal(ours_lp.argmax(-1), ref_lp.argmax(-1))


def test_native_draft_topk_is_the_head_log_softmax_topk(demo):
    """The C draft's fused head + log-softmax + top-k (what a draft call returns) equals torch's on its logits: the
    same ids in the same order, log-probs within float32 rounding; equal logits keep the lower head row first."""
    _, native, _ = demo
    head = native.draft.native
    out = torch.randn(5, native.draft.args.hidden_size) * 3  # [5, H]
    out[4] = 0.0  # every logit equal (no head bias): the first k rows, in order
    with torch.inference_mode():
        scores, ids = head.topk(out, 8)  # [5, 8] each
        ref_scores, ref_ids = torch.log_softmax(head.logits(out), dim=-1).topk(8, dim=-1)
    assert torch.equal(ids[:4], ref_ids[:4])
    assert ids[4].tolist() == list(range(8))
    assert (scores - ref_scores).abs().max().item() < 1e-5


def test_native_draft_call_is_its_parts_in_one_c_call(demo, engine):
    """A draft call in one C call (NativeDraft.forward_packed, kernels/cpu_draft.h) gives the bits its parts give one
    by one (the layer through `hidden_packed`, then the head's top-k and the base ids): two requests packed, one a
    causal block over its cache asking for its last row's top-3, one a tree block under a mask asking for every
    row's top-4; the caches get the same K/V. Bad ids and positions are refused."""
    from eagle_trt.runtime.draft import DraftCall

    tok, _, _ = demo
    draft = engine.draft
    ids = torch.tensor(_prompt(tok, 6)[:13])  # [13]
    feats = torch.randn(13, draft.args.hidden_size) * 3  # [13, H]
    mask = torch.ones(3, 8, dtype=torch.bool)  # [3, start + 3]: tree rows 5..7 over slots 0..7
    mask[1:, 5] = False
    mask[2, 6] = False

    def calls():
        caches = [draft.new_cache(32), draft.new_cache(32)]
        with torch.inference_mode():  # the second request's stable prefix
            draft.forward_packed([DraftCall(ids[:5], feats[:5], torch.arange(5), 0, caches[1])])
        return caches, [DraftCall(ids[5:10], feats[5:10], torch.arange(3, 8), 0, caches[0], top_k=3, last_only=True),
                        DraftCall(ids[10:], feats[10:], torch.tensor([5, 6, 6]), 5, caches[1], mask, top_k=4)]

    with torch.inference_mode():
        caches, joint = calls()
        ours = draft.forward_packed(joint)
        ref_caches, parts = calls()
        outs = draft.hidden_packed(parts)
        ref = [draft.native.topk(outs[0][-1:], 3), draft.native.topk(outs[1], 4)]
    assert torch.equal(ours[0].out, outs[0][-1:]) and torch.equal(ours[1].out, outs[1])
    for answer, (scores, rows) in zip(ours, ref):
        assert torch.equal(answer.scores, scores) and torch.equal(answer.ids, draft.to_base_ids(rows))
    assert draft.vocab_ids is not None and not torch.equal(ours[1].ids, ref[1][1])  # base ids, not head rows
    for c, r in zip(caches, ref_caches):
        assert torch.equal(c.k[:, :, :8], r.k[:, :, :8]) and torch.equal(c.v[:, :, :8], r.v[:, :, :8])
    with torch.inference_mode(), pytest.raises(EagleTrtError, match="outside the draft's embedding or RoPE table"):
        draft.forward_packed([DraftCall(torch.tensor([49152]), feats[:1], torch.tensor([0]), 0, draft.new_cache(4))])
    with torch.inference_mode(), pytest.raises(EagleTrtError, match="outside the draft's embedding or RoPE table"):
        draft.forward_packed([DraftCall(ids[:1], feats[:1], torch.tensor([10 ** 6]), 0, draft.new_cache(4))])


def test_a_gguf_base_builds_native_by_default_on_this_cpu():
    """`build --dtype auto` (the pytorch engine on the CPU): a GGUF base runs its blocks as stored (native), an HF
    checkpoint float32 as before."""
    from eagle_trt.demo_model import materialize_demo_base, materialize_demo_gguf_base
    from eagle_trt.engines.pytorch import PYTORCH
    from eagle_trt.spec import ModelSpec

    assert PYTORCH.default_dtype(ModelSpec.from_dir(materialize_demo_gguf_base()), "cpu") == "native"
    assert PYTORCH.default_dtype(ModelSpec.from_dir(materialize_demo_base()), "cpu") == "float32"
