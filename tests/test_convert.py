"""TensorRT-LLM EAGLE checkpoint conversion: every expected tensor with the docs/trtllm_formats.md §2 slice of its
HF source (the expectation is computed here independently of the converter), config keys, TP 1/2/4, bias/embed/tied
variants."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

import builders
from eagle_trt.engines.trtllm_checkpoint import convert
from eagle_trt.build_spec import BuildSpec
from eagle_trt.errors import EagleTrtError
from eagle_trt.engines import create_spec

LAYER_PARTS = {"mlp.fc.weight": "mlp.gate_proj.weight", "mlp.gate.weight": "mlp.up_proj.weight",
               "mlp.proj.weight": "mlp.down_proj.weight", "attention.dense.weight": "self_attn.o_proj.weight",
               "post_layernorm.weight": "post_attention_layernorm.weight",
               "input_layernorm.weight": "input_layernorm.weight"}


def trt_spec(base, draft, **options) -> BuildSpec:
    """The validated trtllm BuildSpec convert() takes; the defaults are the convert command's."""
    options = {"dtype": "float16", "num_eagle_layers": 4, "max_draft_len": 63, "max_non_leaves_per_layer": 10,
               **options}
    return create_spec(base, draft, engine="trtllm", tree=f"chain:{options['num_eagle_layers']}", **options)


def hf(d):
    sd = {}
    for f in sorted(d.glob("*.safetensors")):
        sd.update(load_file(str(f)))
    return sd


def expected_rank(base_sd, draft_sd, cfg, tp, r, nets, has_bias, tied):
    """What TRT-LLM's loader wants in rank r (docs/trtllm_formats.md §2), written out longhand."""
    h, nh, nkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    vocab = cfg["vocab_size"]

    def rows(w):
        n = w.shape[0] // tp
        return w[r * n:(r + 1) * n]

    def cols(w):
        n = w.shape[1] // tp
        return w[:, r * n:(r + 1) * n]

    def qkv(q, k, v):
        qh = nh // tp
        if nkv >= tp:
            kvh = list(range(r * nkv // tp, (r + 1) * nkv // tp))
        else:
            kvh = [r // (tp // nkv)]
        pick = lambda w, hs: torch.cat([w[x * d:(x + 1) * d] for x in hs])  # noqa: E731
        return torch.cat((q[r * qh * d:(r + 1) * qh * d], pick(k, kvh), pick(v, kvh)))

    def head(w):
        pad = -(-vocab // tp) * tp
        w = torch.cat((w, torch.zeros(pad - vocab, h))) if pad > vocab else w
        return w[r * pad // tp:(r + 1) * pad // tp]

    lm = base_sd["model.embed_tokens.weight"] if tied else base_sd["lm_head.weight"]
    out = {"transformer.vocab_embedding.weight": base_sd["model.embed_tokens.weight"],
           "transformer.ln_f.weight": base_sd["model.norm.weight"], "lm_head.weight": head(lm)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for trt, src in LAYER_PARTS.items():
            w = base_sd[p + src]
            out[f"transformer.layers.{i}.{trt}"] = rows(w) if trt in ("mlp.fc.weight", "mlp.gate.weight") else (
                cols(w) if trt in ("mlp.proj.weight", "attention.dense.weight") else w)
        out[f"transformer.layers.{i}.attention.qkv.weight"] = qkv(*(base_sd[p + f"self_attn.{x}_proj.weight"]
                                                                    for x in "qkv"))
    if draft_sd is None:
        return out
    for k in range(nets):
        e = f"eagle_nets.{k}."
        out[e + "drafter.vocab_embedding.weight"] = draft_sd.get("embed_tokens.weight",
                                                                 base_sd["model.embed_tokens.weight"])
        out[e + "drafter.fc.weight"] = rows(draft_sd["fc.weight"])
        out[e + "drafter.fc.bias"] = rows(draft_sd["fc.bias"]) if has_bias else torch.zeros(h // tp)
        for trt, src in LAYER_PARTS.items():
            if trt == "input_layernorm.weight":
                continue
            w = draft_sd["layers.0." + src]
            out[e + "drafter.layers.0." + trt] = rows(w) if trt in ("mlp.fc.weight", "mlp.gate.weight") else (
                cols(w) if trt in ("mlp.proj.weight", "attention.dense.weight") else w)
        out[e + "drafter.layers.0.attention.qkv.weight"] = qkv(*(draft_sd[f"layers.0.self_attn.{x}_proj.weight"]
                                                                 for x in "qkv"))
        out[e + "lm_head.weight"] = head(lm)
    return out


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("variant", ["bias_embed", "nobias_noembed", "tied_base", "base_only"])
def test_tensors_match_the_trtllm_layout(tmp_path, tiny_base, tiny_base_tied, eagle1_draft, eagle1_draft_nobias,
                                         tp, variant):
    base = tiny_base_tied if variant == "tied_base" else tiny_base
    draft = {"bias_embed": eagle1_draft, "nobias_noembed": eagle1_draft_nobias, "base_only": None,
             "tied_base": builders.make_eagle1_draft(tmp_path / "d", tiny_base_tied)}[variant]
    out = convert(trt_spec(base, draft, tp_size=tp, dtype="float32", num_eagle_layers=3), tmp_path / "ckpt")
    cfg_hf = json.loads((base / "config.json").read_text())
    base_sd, draft_sd = hf(base), (hf(draft) if draft else None)
    for r in range(tp):
        want = expected_rank(base_sd, draft_sd, cfg_hf, tp, r, 3, variant != "nobias_noembed", variant == "tied_base")
        with safe_open(str(out / f"rank{r}.safetensors"), "pt") as fh:
            assert set(fh.keys()) == set(want), set(fh.keys()) ^ set(want)
            for name, tensor in want.items():
                got = fh.get_tensor(name)
                assert got.shape == tensor.shape, name
                assert torch.equal(got, tensor.float()), name
    assert sorted(p.name for p in out.iterdir()) == ["config.json"] + [f"rank{r}.safetensors" for r in range(tp)]


def test_config_keys_and_values(tmp_path, tiny_base, eagle1_draft):
    out = convert(trt_spec(tiny_base, eagle1_draft, tp_size=2, dtype="bfloat16"), tmp_path / "c")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architecture"] == "EagleForCausalLM" and cfg["dtype"] == "bfloat16"
    assert (cfg["max_draft_len"], cfg["num_eagle_layers"], cfg["max_non_leaves_per_layer"]) == (63, 4, 10)
    assert cfg["mapping"] == {"world_size": 2, "tp_size": 2, "pp_size": 1}
    assert cfg["position_embedding_type"] == "rope_gpt_neox" and cfg["logits_dtype"] == "float32"
    assert cfg["head_size"] == cfg["head_dim"] == 16 and cfg["rotary_base"] == 10000.0
    net = cfg["eagle_net_config"]
    assert net["num_hidden_layers"] == 1 and net["architecture"] == "LlamaForCausalLM"
    assert net["max_position_embeddings"] == 2048 and net["hidden_size"] == 64
    with safe_open(str(out / "rank0.safetensors"), "pt") as fh:
        assert fh.get_tensor("lm_head.weight").dtype == torch.bfloat16


def test_llama3_rope_scaling_is_kept_whole(tmp_path, tiny_base, eagle1_draft):
    import shutil

    base = tmp_path / "b"
    shutil.copytree(tiny_base, base)
    cfg = json.loads((base / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192}
    (base / "config.json").write_text(json.dumps(cfg))
    out = json.loads((convert(trt_spec(base, eagle1_draft), tmp_path / "c") / "config.json").read_text())
    assert out["rotary_scaling"] == cfg["rope_scaling"] | {"type": "llama3"}
    assert out["eagle_net_config"]["rotary_scaling"] == out["rotary_scaling"]


@pytest.mark.parametrize("kwargs, words", [
    ({"tp_size": 3}, "tp_size 3 does not divide"),
    ({"dtype": "int8"}, "dtype int8 is the pytorch engine's CPU mode"),
    ({"max_draft_len": 300}, "max_draft_len 300 > 256"),
])
def test_bad_options(tmp_path, tiny_base, eagle1_draft, kwargs, words):
    with pytest.raises(EagleTrtError, match=words):
        convert(trt_spec(tiny_base, eagle1_draft, **kwargs), tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_refusals(tmp_path, tiny_base, eagle1_draft, eagle3_draft):
    with pytest.raises(EagleTrtError, match="EAGLE-3 drafts are not supported by the TensorRT-LLM engine"):
        convert(trt_spec(tiny_base, eagle3_draft), tmp_path / "c")
    qwen = builders.make_base(tmp_path / "q")
    cfg = json.loads((qwen / "config.json").read_text())
    (qwen / "config.json").write_text(json.dumps(cfg | {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}))
    with pytest.raises(EagleTrtError, match="does not run Qwen2 / Qwen2.5 bases"):
        convert(trt_spec(qwen, None), tmp_path / "c")
    (tmp_path / "exists").mkdir()
    with pytest.raises(EagleTrtError, match="already exists"):
        convert(trt_spec(tiny_base, eagle1_draft), tmp_path / "exists")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_interrupted_conversion_leaves_no_checkpoint(tmp_path, sig):
    big = builders.make_base(tmp_path / "big", builders.TinyDims(hidden_size=512, num_hidden_layers=24,
                                                                  num_attention_heads=8, num_key_value_heads=4,
                                                                  intermediate_size=1536))
    draft = builders.make_eagle1_draft(tmp_path / "bd", big)
    out = tmp_path / "ckpt"
    code = ("from eagle_trt.engines.trtllm_checkpoint import convert; from eagle_trt.engines import create_spec; "
            f"spec = create_spec({str(big)!r}, {str(draft)!r}, engine='trtllm', tree='chain:8', tp_size=2, "
            "dtype='float32', num_eagle_layers=8); "
            f"convert(spec, {str(out)!r}, progress=lambda d, t, n: __import__('time').sleep(0.01))")
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 60
    while not list(tmp_path.glob(".ckpt.tmp-*/rank0.safetensors")) and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the conversion finished before it could be interrupted"
    os.kill(proc.pid, sig)
    proc.wait(timeout=30)
    assert not out.exists(), "a half-written checkpoint was left behind"
    if sig == signal.SIGTERM:
        assert not list(tmp_path.glob(".ckpt.tmp-*")), "the temporary directory was not removed"
    # a later run cleans up and succeeds
    convert(trt_spec(big, draft, num_eagle_layers=1), out)
    assert (out / "rank0.safetensors").exists() and not list(tmp_path.glob(".ckpt.tmp-*"))


def test_dtype_auto_says_when_it_leaves_fp32(tmp_path, tiny_base, eagle1_draft):
    """The fixture base is float32: auto converts to float16 and says so (TensorRT-LLM's converter keeps float32)."""
    import json

    from click.testing import CliRunner

    from eagle_trt.cli import main

    res = CliRunner().invoke(main, ["convert", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o",
                                    str(tmp_path / "ck")])
    assert res.exit_code == 0, res.output
    assert "the base is float32, converting to float16" in res.output and "--dtype float32" in res.output
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["dtype"] == "float16"
    helped = CliRunner().invoke(main, ["convert", "--help"])
    assert "fp32 base becomes float16" in " ".join(helped.output.split())


def test_a_transformers5_llama31_config_converts_as_its_transformers4_layout(tmp_path):
    """transformers >= 5 writes `rope_parameters` (theta inside, no `rope_theta`/`rope_scaling`). TensorRT-LLM's own
    converter (<= 1.2, transformers 4.57 pinned) reads `rotary_base = getattr(hf_config, "rope_theta", 10000.0)`
    and `rotary_scaling = getattr(hf_config, "rope_scaling", None)` (tensorrt_llm/models/llama/config.py,
    LLaMAConfig.from_hugging_face): the transformers-4 layout of the same model is its input. Ours must write from
    the transformers-5 layout exactly what that converter writes from the transformers-4 one: rotary_base 500000 and
    the whole llama3 dict (its RotaryScalingType reads "type"), not 10000 and no scaling."""
    import hf_builders

    tf5 = hf_builders.make_hf_base(tmp_path / "tf5", "llama31")
    tf4 = hf_builders.make_hf_base(tmp_path / "tf4", "llama31_tf4")
    hf4 = json.loads((tf4 / "config.json").read_text())
    assert "rope_theta" not in json.loads((tf5 / "config.json").read_text())  # the layout under test
    outs = {}
    for name, base in (("tf5", tf5), ("tf4", tf4)):
        draft = builders.make_eagle1_draft(tmp_path / f"d_{name}", base)
        outs[name] = convert(trt_spec(base, draft, dtype="float32"), tmp_path / f"ck_{name}")
    cfg5, cfg4 = (json.loads((outs[n] / "config.json").read_text()) for n in ("tf5", "tf4"))
    assert cfg5 == cfg4
    assert cfg5["rotary_base"] == hf4["rope_theta"] == 500000.0  # what from_hugging_face reads
    assert cfg5["rotary_scaling"] == hf4["rope_scaling"] | {"type": "llama3"}
    assert cfg5["eagle_net_config"]["rotary_base"] == 500000.0  # the EagleNets reuse the base's RoPE
    assert cfg5["eagle_net_config"]["rotary_scaling"] == cfg5["rotary_scaling"]
    ranks5, ranks4 = hf(outs["tf5"]), hf(outs["tf4"])
    assert ranks5.keys() == ranks4.keys() and all(torch.equal(ranks5[k], ranks4[k]) for k in ranks5)
