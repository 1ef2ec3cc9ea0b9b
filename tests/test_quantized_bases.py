"""Quantized bases on our engine: every scheme eagle-trt reads, written in its writer's exact layout (quant_builders),
computes what transformers computes on the dequantized weights, and EAGLE equals plain decoding on it.

Tolerance: fp32 logits within 1e-4 of transformers' on the same dequantized weights (the sums run in another order,
as for unquantized bases in test_families.py); greedy output over 24 tokens identical. The dequantized weights
themselves equal the oracle's exactly (torch.equal; NVFP4 in float32 and, rounded to bf16, equal to what
compressed-tensors' own decompressor gives). Model-Optimizer's oracle decodes its export as its writer encodes it;
that decoding agrees with Model-Optimizer's in-memory fake-quantized weights (test_modelopt_decoding_is_its_own).
"""

from __future__ import annotations

import pytest
import torch

import builders
import hf_builders
import quant_builders as qb
from eagle_trt.checkpoints import open_weights
from eagle_trt.quantization.reader import DequantizedWeights
from eagle_trt.runtime import EagleDecoder
from eagle_trt.spec import ModelSpec

PROMPT = list(range(5, 37))
NEW = 24

@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return hf_builders.make_hf_base(tmp_path_factory.mktemp("quant_src") / "llama31", "llama31")


@pytest.fixture(scope="module")
def quantized(source, tmp_path_factory):
    """name -> (checkpoint dir, {module: oracle weight}), written once per module."""
    root = tmp_path_factory.mktemp("quantized")
    out = {}
    for name in qb.SCHEMES:
        out[name] = qb.write_scheme(name, source, root / name)
    return out


def _logits(decoder: EagleDecoder, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        decoder.base.setup_cache(len(ids) + 8)
        return decoder.base(torch.tensor(ids), torch.arange(len(ids)), 0)[0]  # [T, V]


@pytest.mark.parametrize("name", list(qb.SCHEMES))
def test_dequantized_weights_equal_the_oracles(quantized, name):
    path, oracle = quantized[name]
    spec = ModelSpec.from_dir(path)
    assert spec.quantization is not None and spec.quantization.groups
    with DequantizedWeights(open_weights(path), spec.quantization) as reader:
        assert set(oracle) == {n.removesuffix(".weight") for n in reader.names() if ".layers." in n
                               and n.rpartition(".")[0].rpartition(".")[2] in qb.LINEAR_NAMES}
        for module, weight in oracle.items():
            ours = reader.get(f"{module}.weight")
            assert ours.dtype == torch.float32 and torch.equal(ours, weight.float()), (
                module, (ours - weight).abs().max())


@pytest.mark.parametrize("name", list(qb.SCHEMES))
def test_engine_equals_transformers_on_the_dequantized_weights(quantized, name):
    path, oracle = quantized[name]
    decoder = EagleDecoder.load(path, None)
    reference = qb.transformers_on(path, oracle)
    ids = PROMPT + list(range(60, 68))
    with torch.no_grad():
        theirs = reference(torch.tensor([ids])).logits[0]
        expected = reference.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, min_new_tokens=NEW,
                                      do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(PROMPT):].tolist()
    ours = _logits(decoder, ids)
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=0), (ours - theirs).abs().max()
    assert decoder.generate_all(PROMPT, NEW).token_ids == expected


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("name", ["modelopt-fp8", "modelopt-nvfp4", "modelopt-w4a16-awq", "ct-w4a16-asym",
                                  "awq-gemm", "gptq-v2-act-order"])
def test_eagle_equals_plain_on_a_quantized_base(quantized, tmp_path, name, dtype):
    path, _ = quantized[name]
    plain = EagleDecoder.load(path, None, dtype=dtype).generate_all(PROMPT, NEW).token_ids
    draft = builders.make_eagle3_draft(tmp_path / "draft", path)
    for tree in ("chain:3", "dynamic:3,2,4"):
        decoder = EagleDecoder.load(path, draft, tree=tree, dtype=dtype)
        assert decoder.generate_all(PROMPT, NEW).token_ids == plain, tree


def test_nvfp4_equals_compressed_tensors_own_decompression_in_bf16(quantized):
    """compressed-tensors decompresses NVFP4 to bf16; our float32 values round to exactly those."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    path, oracle = quantized["ct-nvfp4"]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                 quantization_config=CompressedTensorsConfig(dequantize=True))
    theirs = dict(model.named_parameters())
    for module, weight in oracle.items():
        assert torch.equal(weight.to(torch.bfloat16).float(), theirs[f"{module}.weight"].float()), module


@pytest.mark.parametrize("algo", ["FP8", "FP8_PER_CHANNEL_PER_TOKEN", "W4A16_AWQ", "W4A8_AWQ", "W8A8_SQ_PER_CHANNEL"])
def test_modelopt_decoding_is_its_own(source, tmp_path, algo):
    """The test's decoding of a Model-Optimizer export equals what Model-Optimizer itself computes with in memory
    (its fake-quantized weights), to one float32 ulp (it forms code x scale its own way), but where the export
    rounded a value sitting on a tie the other way (at most 1 in 2000 here)."""
    path, own = qb.write_modelopt(source, tmp_path / "export", algo)
    decoded = qb.decode_modelopt(path)
    assert set(decoded) == set(own)
    for module, weight in own.items():
        close = torch.isclose(decoded[module], weight, rtol=2 ** -22, atol=0)
        assert close.float().mean() >= 0.9995, (module, (decoded[module] - weight).abs().max())
