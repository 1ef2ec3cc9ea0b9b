"""4-bit quantized bases on the native CPU forward (quantization/blocks.py): an AutoAWQ, GPTQ, compressed-tensors or
Model-Optimizer INT4 base's linears written as GGUF Q4_0 / Q4_1 blocks, read by the kernel at 20 (Q4_1) or 18
(Q4_0) bytes per 32 weights instead of a float32 copy.

- Each writer's layout (quant_builders) as blocks, dequantized by the `gguf` package's own reader: exactly the
  oracle weight where `exact` holds (GPTQ sym: fp16 scales, zero points 8), else within the stated rounding
  (|err| <= 2^-11 |w| + 2^-11 |z s| per weight, bounded here by 2^-10 (|w| + 15 s)).
- What stays on the float32 path, by name: act-order groups, 8-bit codes, Model-Optimizer's pre_quant_scale, and
  for precision native the scales or zero points that fp16 does not hold.
- GPTQ sym on precision native: Q4_0 blocks, logits within 1e-4 of transformers on the dequantized weights, the same
  greedy tokens, a third of the float32 path's weight bytes. AWQ on native-q8: Q4_1 blocks (its float head as Q8_0,
  as native-q8 reads every float weight), next-token distributions near float32 (the 8-bit activations' own
  tolerance, test_native_forward), EAGLE equal to plain decoding exactly.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import builders
import hf_builders
import quant_builders as qb
from eagle_trt.checkpoints import open_weights
from eagle_trt.quantization.blocks import quantized_blocks
from eagle_trt.runtime import EagleDecoder
from eagle_trt.spec import ModelSpec

gguf = pytest.importorskip("gguf")

from eagle_trt.kernels.cpu_build import cpu_supports_native  # noqa: E402

pytestmark = pytest.mark.skipif(cpu_supports_native() is not None,
                                reason=f"the native forward cannot run here: {cpu_supports_native()}")

FOUR_BIT = ("awq-gemm", "gptq-v1", "gptq-sym", "ct-w4a16", "ct-w4a16-asym", "modelopt-w4a16-awq")
PROMPT = list(range(5, 37))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """name -> (checkpoint dir, {module: oracle weight}) for the 4-bit schemes and two that stay float32."""
    root = tmp_path_factory.mktemp("native_quantized")
    source = hf_builders.make_hf_base(root / "llama31", "llama31")
    return {name: qb.write_scheme(name, source, root / name)
            for name in FOUR_BIT + ("gptq-v2-act-order", "ct-w8a16")}


def _blocks(path, exact: bool):
    spec = ModelSpec.from_dir(path)
    with open_weights(path) as raw:
        return quantized_blocks(raw, spec.quantization, exact)


@pytest.mark.parametrize("name", FOUR_BIT)
def test_blocks_read_back_as_the_oracle_weights(written, name):
    path, oracle = written[name]
    blocks, left = _blocks(path, exact=False)
    for module, weight in oracle.items():
        if module in left:  # Model-Optimizer's pre_quant_scale modules (test_what_stays_float32_is_named)
            continue
        kind, rows = blocks[f"{module}.weight"]
        ref = weight.float().numpy()  # [O, I]
        assert rows.shape[1] == ref.shape[1] // 32 * (18 if kind == "Q4_0" else 20)  # the file's 4-bit bytes
        ours = gguf.quants.dequantize(rows, gguf.GGMLQuantizationType[kind]).reshape(ref.shape)
        # per 32-input block (one group here): (max - min) / 15 is at least half its scale s, and |z| <= 15
        span = ref.reshape(ref.shape[0], -1, 32)  # [O, B, 32]
        s = (span.max(-1, keepdims=True) - span.min(-1, keepdims=True)) / 15
        bound = 2.0 ** -10 * (np.abs(span) + 15 * s)
        assert (np.abs(ours.reshape(span.shape) - span) <= bound).all(), (module, kind)
    assert {kind for kind, _ in blocks.values()} == ({"Q4_0"} if name in ("gptq-sym", "ct-w4a16",
                                                                          "modelopt-w4a16-awq") else {"Q4_1"})


def test_exact_blocks_only_where_fp16_holds_the_scales(written):
    path, oracle = written["gptq-sym"]
    blocks, left = _blocks(path, exact=True)
    assert not left and len(blocks) == len(oracle)
    for module, weight in oracle.items():
        kind, rows = blocks[f"{module}.weight"]
        assert kind == "Q4_0"
        assert np.array_equal(gguf.quants.dequantize(rows, gguf.GGMLQuantizationType.Q4_0).reshape(weight.shape),
                              weight.float().numpy())
    # asymmetric fp16 AWQ: -z s rounds in fp16; compressed-tensors written from a float32 model: float32 scales
    for name, why in (("awq-gemm", "zero points times scales"), ("ct-w4a16", "scales are not all fp16 values")):
        blocks, left = _blocks(written[name][0], exact=True)
        assert not blocks and len(left) == len(written[name][1])
        assert all(why in reason and "native-q8 rounds them" in reason for reason in left.values())


def test_what_stays_float32_is_named(written):
    _, left = _blocks(written["gptq-v2-act-order"][0], exact=False)
    assert left and all("aligned runs of 32 inputs" in why and "act order" in why for why in left.values())
    blocks, left = _blocks(written["ct-w8a16"][0], exact=False)
    assert not blocks and all("not a 4-bit integer layout" in why for why in left.values())
    blocks, left = _blocks(written["modelopt-w4a16-awq"][0], exact=False)
    assert blocks and left and all("pre_quant_scale" in why for why in left.values())


def test_gptq_sym_on_native_computes_the_dequantized_weights(written):
    path, oracle = written["gptq-sym"]
    native = EagleDecoder.load(path, None, dtype="native")
    assert native.base.native.block_types == ["Q4_0"]
    float_path = EagleDecoder.load(written["gptq-v2-act-order"][0], None, dtype="native")  # same shapes, float32
    assert float_path.base.native.block_types == []
    assert native.base.native.weight_bytes() < float_path.base.native.weight_bytes() / 3
    reference = qb.transformers_on(path, oracle)
    ids = PROMPT + list(range(60, 68))
    with torch.no_grad():
        theirs = reference(torch.tensor([ids])).logits[0]  # [T, V]
        expected = reference.generate(torch.tensor([PROMPT]), max_new_tokens=24, min_new_tokens=24,
                                      do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(PROMPT):].tolist()
    with torch.inference_mode():
        native.base.setup_cache(len(ids) + 8)
        ours = native.base(torch.tensor(ids), torch.arange(len(ids)), 0)[0]  # [T, V]
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=0), (ours - theirs).abs().max()
    assert native.generate_all(PROMPT, 24).token_ids == expected


def test_awq_on_native_q8_runs_blocks_and_eagle_equals_plain(written, tmp_path, caplog):
    path, _ = written["awq-gemm"]
    with caplog.at_level(logging.INFO, logger="eagle_trt.runtime.loading"):
        exact = EagleDecoder.load(path, None, dtype="native")  # asymmetric: not exact in fp16, so float32
    assert exact.base.native.block_types == [] and "zero points times scales" in caplog.text
    q8 = EagleDecoder.load(path, None, dtype="native-q8")
    assert q8.base.native.block_types == ["Q4_1"]
    from eagle_trt.runtime.native import W_F32, W_X4, W_X8

    assert q8.base.native.layers[0].q.type == W_X4  # the Q4_1 blocks repacked for 8-bit activations
    assert q8.base.native.model.lm_head.type == W_X8 and exact.base.native.model.lm_head.type == W_F32  # float head
    assert q8.base.native.weight_bytes() < exact.base.native.weight_bytes() / 3
    ids = PROMPT + list(range(60, 68))
    with torch.inference_mode():
        exact.base.setup_cache(len(ids) + 8)
        q8.base.setup_cache(len(ids) + 8)
        ref = exact.base(torch.tensor(ids), torch.arange(len(ids)), 0)[0]  # [T, V]
        ours = q8.base(torch.tensor(ids), torch.arange(len(ids)), 0)[0]
    assert (ours.softmax(-1) - ref.softmax(-1)).abs().sum(-1).mean().item() < 0.1
    plain = q8.generate_all(PROMPT, 24).token_ids
    draft = builders.make_eagle3_draft(tmp_path / "draft", path)
    for tree in ("chain:3", "dynamic:3,2,4"):
        decoder = EagleDecoder.load(path, draft, tree=tree, dtype="native-q8")
        assert decoder.base.native.block_types == ["Q4_1"]
        assert decoder.generate_all(PROMPT, 24).token_ids == plain, tree
