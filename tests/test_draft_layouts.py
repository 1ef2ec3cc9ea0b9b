"""Every published EAGLE draft layout (eagle_trt.draft_layouts) loads and runs as its writer defined it.

A draft made to be accepted - trained by `train-draft` on an 8-layer tiny base, measured on its training prompts -
is written in each layout (layout_builders): each must be read as the same draft (same proposals, the same accepted
lengths, mean > 2) with EAGLE output equal to plain decoding; capture ids in each layout's own convention must land
on the same base layers (and one layer off must not); each layout's extra math (norm_before_residual, norm_before_fc,
fc_norm, norm_output, biases, q/k norms, its own RoPE) must equal a longhand forward written from the writers'
formulas."""

import json

import pytest
import torch
from click.testing import CliRunner

import builders
import layout_builders
from eagle_trt.cli import main
from eagle_trt.draft_layouts import standard_capture_layers
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.loading import load_base, load_draft
from eagle_trt.spec import DraftSpec, ModelSpec
from test_train import PROMPTS

LAYERS = 8  # standard capture (2, 4, 5): output-counting ids (1, 3, 4) differ from input-counting ones
TREE = "chain:4"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(base, EAGLE-1 draft, EAGLE-3 draft, prompt ids): drafts trained on the prompts they are measured on."""
    root = tmp_path_factory.mktemp("layouts")
    base = builders.make_base(root / "base", builders.TinyDims(num_hidden_layers=LAYERS), seed=5)
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p + f" #{i}"}) + "\n" for i, p in enumerate(PROMPTS)))
    drafts = {}
    for fmt in ("eagle1", "eagle3"):
        res = CliRunner().invoke(main, ["train-draft", "--base", str(base), "--prompts", str(prompts), "-o",
                                        str(root / fmt), "--format", fmt, "--max-prompts", "24", "--gen-tokens", "32",
                                        "--epochs", "60", "--batch-size", "256", "--lr", "3e-3", "--ttt-steps", "4",
                                        "--draft-vocab-size", "300", "--gen-batch-size", "8"])
        assert res.exit_code == 0, res.output
        drafts[fmt] = root / fmt
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    texts = json.loads((root / "eagle3.work" / "prompts.json").read_text())[:4]
    ids = [tok(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                       tokenize=False), add_special_tokens=False)["input_ids"] for t in texts]
    return base, drafts["eagle1"], drafts["eagle3"], ids


def _run(base, draft, ids, tree=TREE, dtype="float32"):
    """(outputs, accepted lengths) over the prompts."""
    decoder = EagleDecoder.load(base, draft, tree=tree, dtype=dtype)
    results = [decoder.generate_all(x, 32) for x in ids]
    return [r.token_ids for r in results], [a for r in results for a in r.stats.accepted_lengths]


@pytest.fixture(scope="module")
def plain(trained):
    base, _, _, ids = trained
    return {dtype: _run(base, None, ids, dtype=dtype)[0] for dtype in ("float32", "int8")}


@pytest.fixture(scope="module")
def reference(trained):
    base, _, eagle3, ids = trained
    return _run(base, eagle3, ids)


@pytest.mark.parametrize("layout", layout_builders.LAYOUTS)
def test_a_trained_draft_is_the_same_draft_in_every_layout(trained, plain, reference, layout, tmp_path):
    base, _, eagle3, ids = trained
    draft = layout_builders.write_layout(eagle3, tmp_path / layout, layout, base=base)
    spec = DraftSpec.from_dir(draft)
    assert (spec.format, spec.layout) == ("eagle3", layout)
    assert spec.prefix == ("layers.0." if layout in ("modelopt", "speculators") else "midlayer.")
    outputs, lengths = _run(base, draft, ids)
    assert outputs == plain["float32"]
    assert lengths == reference[1]  # the same proposals, step by step
    assert sum(lengths) / len(lengths) > 2.0


def test_a_trained_eagle1_draft_is_accepted(trained, plain):
    base, eagle1, _, ids = trained
    assert DraftSpec.from_dir(eagle1).layout == "safeailab-eagle1"
    outputs, lengths = _run(base, eagle1, ids)
    assert outputs == plain["float32"] and sum(lengths) / len(lengths) > 2.0, sum(lengths) / len(lengths)
    assert _run(base, eagle1, ids, dtype="int8")[0] == plain["int8"]  # int8: another model, the same identity


@pytest.mark.parametrize("layout", layout_builders.LAYOUTS)
def test_capture_ids_in_each_convention_name_the_same_layers(trained, reference, layout, tmp_path):
    """The standard layers written explicitly in the layout's own convention read back as the same inputs (and
    run as the same draft); written one layer off - the other convention's numbers - they do not."""
    base, _, eagle3, ids = trained
    standard = list(standard_capture_layers(LAYERS))
    draft = layout_builders.write_layout(eagle3, tmp_path / "named", layout, capture_inputs=standard, base=base)
    spec = DraftSpec.from_dir(draft)
    assert spec.capture_layers == tuple(standard), spec.capture_source
    assert _run(base, draft, ids)[1] == reference[1]
    shifted = [i + 1 for i in standard]
    off = layout_builders.write_layout(eagle3, tmp_path / "off", layout, capture_inputs=shifted, base=base)
    assert DraftSpec.from_dir(off).capture_layers == tuple(shifted)
    assert _run(base, off, ids)[1] != reference[1]


# ---- each layout's extra math against a longhand forward ------------------------------------------------------

def _rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _longhand_eagle3(t, cfg, captured, emb, prefix, nbr, norm_output):
    """One draft step at position 0 (no cache): the vLLM/speculators `llama_eagle3.py` formulas, written out."""
    eps = cfg.get("rms_norm_eps", 1e-5)
    x = captured
    if "input_norm.weight" in t:
        x = _rms(x, t["input_norm.weight"], eps)
    if "fc_norm.0.weight" in t:
        x = torch.cat([_rms(c, t[f"fc_norm.{k}.weight"], eps) for k, c in enumerate(x.chunk(3, -1))], -1)
    g = x @ t["fc.weight"].T
    p = prefix
    hidden = _rms(g, t[p + "hidden_norm.weight"], eps)
    residual = hidden if nbr else g
    a = torch.cat((_rms(emb, t[p + "input_layernorm.weight"], eps), hidden), -1)
    v = a @ t[p + "self_attn.v_proj.weight"].T  # one position: attention returns its own value
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    v = v.view(1, kv, -1).repeat_interleave(heads // kv, dim=1).reshape(1, -1)
    h = residual + v @ t[p + "self_attn.o_proj.weight"].T
    m = _rms(h, t[p + "post_attention_layernorm.weight"], eps)
    gate, up = m @ t[p + "mlp.gate_proj.weight"].T, m @ t[p + "mlp.up_proj.weight"].T
    out = h + (torch.nn.functional.silu(gate) * up) @ t[p + "mlp.down_proj.weight"].T
    normed = _rms(out, t["norm.weight"], eps)
    return (normed if norm_output else out), normed @ t["lm_head.weight"].T


SWITCHES = {
    "norm_before_residual": ("speculators", {"config": {"norm_before_residual": True}}),
    "norm_before_fc": ("speculators", {"config": {"norm_before_fc": True}, "tensors": {"input_norm.weight": 3}}),
    "fc_norm": ("specforge", {"config": {"fc_norm": True}, "tensors": {f"fc_norm.{k}.weight": 1 for k in range(3)}}),
    "norm_output": ("speculators", {"config": {"norm_output": True}}),
}


@pytest.mark.parametrize("switch", SWITCHES)
def test_layout_switches_compute_the_writers_formula(tiny_base, eagle3_draft, switch, tmp_path):
    from safetensors.torch import load_file

    layout, extra = SWITCHES[switch]
    h = json.loads((eagle3_draft / "config.json").read_text())["hidden_size"]
    gen = torch.Generator().manual_seed(3)
    extra = {"config": extra["config"],
             "tensors": {k: 1 + 0.3 * torch.randn(n * h, generator=gen) for k, n in extra.get("tensors", {}).items()}}
    draft_dir = layout_builders.write_layout(eagle3_draft, tmp_path / switch, layout, extra=extra, base=tiny_base)
    spec, base_spec = DraftSpec.from_dir(draft_dir), ModelSpec.from_dir(tiny_base)
    base = load_base(base_spec, torch.float32, "cpu")
    draft = load_draft(spec, base_spec, base, torch.float32, "cpu")
    draft.setup_cache(8)
    captured = torch.randn(1, 3 * h, generator=gen)  # [1, 3H]
    token = torch.tensor([7])
    with torch.no_grad():
        out = draft(token, draft.base_features(None, captured), torch.tensor([0]), 0)
        logits = draft.lm_head(out if spec.norm_output else draft.norm(out))
    t = load_file(str(draft_dir / "model.safetensors"))
    cfg = json.loads((eagle3_draft / "config.json").read_text())
    want_out, want_logits = _longhand_eagle3(t, cfg, captured, base.embed_tokens(token), spec.prefix,
                                             spec.norm_before_residual, spec.norm_output)
    assert torch.allclose(out, want_out, atol=1e-5) and torch.allclose(logits, want_logits, atol=1e-4)


# ---- biases, q/k norms, RoPE and tensors nobody reads ----------------------------------------------------------

def _with(src, dst, config=None, tensors=None):
    """A copy of the draft `src` with config keys and tensors added."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text()) | (config or {})
    (dst / "config.json").write_text(json.dumps(cfg))
    t = load_file(str(dst / "model.safetensors")) | (tensors or {})
    save_file({k: v.contiguous() for k, v in t.items()}, str(dst / "model.safetensors"))
    return dst


def _draft_logits(base_dir, draft_dir):
    """The draft's logits over a 3-token block (positions 0-2): q, k, their biases and norms all matter here."""
    spec, base_spec = DraftSpec.from_dir(draft_dir), ModelSpec.from_dir(base_dir)
    base = load_base(base_spec, torch.float32, "cpu")
    draft = load_draft(spec, base_spec, base, torch.float32, "cpu")
    draft.setup_cache(8)
    gen = torch.Generator().manual_seed(0)
    width = draft.fc.in_features - (base_spec.hidden_size if spec.format == "eagle1" else 0)
    feats = torch.randn(3, width, generator=gen)  # [3, H] EAGLE-1 features / [3, 3H] EAGLE-3 captures
    with torch.no_grad():
        g = feats if spec.format == "eagle1" else draft.base_features(None, feats)
        return draft.log_probs(draft(torch.tensor([5, 9, 11]), g, torch.arange(3), 0)), draft


def test_an_eagle_qwen2_draft_reads_its_qkv_biases(tiny_base, eagle1_draft, tmp_path):
    """SafeAILab cnets1 with `qkv_bias`: q/k/v biases, o_proj none. Without the key the biases are refused by
    name (the silent drop the issue found), with it they are loaded and change the draft's answer."""
    h = json.loads((eagle1_draft / "config.json").read_text())["hidden_size"]
    kv = json.loads((eagle1_draft / "config.json").read_text())["num_key_value_heads"] * 16
    gen = torch.Generator().manual_seed(1)
    biases = {f"layers.0.self_attn.{p}_proj.bias": torch.randn(n, generator=gen)
              for p, n in (("q", h), ("k", kv), ("v", kv))}
    unread = _with(eagle1_draft, tmp_path / "unread", tensors=biases)
    res = CliRunner().invoke(main, ["inspect", "--base", str(tiny_base), "--draft", str(unread)])
    assert res.exit_code == 1 and "'layers.0.self_attn.k_proj.bias'" in res.output
    assert "nothing would read" in res.output
    qwen = _with(eagle1_draft, tmp_path / "qwen", config={"qkv_bias": True}, tensors=biases)
    spec = DraftSpec.from_dir(qwen)
    assert spec.qkv_bias and not spec.o_bias
    with_bias, draft = _draft_logits(tiny_base, qwen)
    assert torch.equal(draft.layer.self_attn.k_proj.bias, biases["layers.0.self_attn.k_proj.bias"])
    zero = _with(eagle1_draft, tmp_path / "zero", config={"qkv_bias": True},
                 tensors={k: torch.zeros_like(v) for k, v in biases.items()})
    assert not torch.allclose(with_bias, _draft_logits(tiny_base, zero)[0], atol=1e-4)


@pytest.mark.parametrize("layout, layer_type", [("modelopt", "llama"), ("speculators", "llama"),
                                                ("speculators", "qwen3")])
def test_stock_draft_layers_read_biases_and_qk_norms(tiny_base, eagle3_draft, layout, layer_type, tmp_path):
    """Model-Optimizer and speculators draft layers are transformers layers: attention_bias gives q/k/v/o biases,
    a Qwen3-type speculators layer q/k RMSNorms; each is loaded and changes the draft's answer."""
    cfg = json.loads((eagle3_draft / "config.json").read_text())
    h, d, kv = cfg["hidden_size"], cfg["head_dim"], cfg["num_key_value_heads"]
    p = "layers.0.self_attn."
    gen = torch.Generator().manual_seed(2)
    extra = {p + "q_proj.bias": torch.randn(h, generator=gen), p + "k_proj.bias": torch.randn(kv * d, generator=gen),
             p + "v_proj.bias": torch.randn(kv * d, generator=gen), p + "o_proj.bias": torch.randn(h, generator=gen)}
    switch = {"attention_bias": True}
    if layer_type == "qwen3":
        extra = {p + "q_norm.weight": 1 + 0.5 * torch.randn(d, generator=gen),
                 p + "k_norm.weight": 1 + 0.5 * torch.randn(d, generator=gen)}
        switch = {"model_type": "qwen3"}
    draft = layout_builders.write_layout(eagle3_draft, tmp_path / "d", layout, base=tiny_base)
    plain_logits = _draft_logits(tiny_base, draft)[0]
    c = json.loads((draft / "config.json").read_text())
    if layout == "speculators":
        c["transformer_layer_config"] |= switch
    else:
        c |= switch
    (draft / "config.json").write_text(json.dumps(c))
    draft = _with(draft, tmp_path / "with", tensors=extra)
    spec = DraftSpec.from_dir(draft)
    assert (spec.qk_norm, spec.qkv_bias, spec.o_bias) == ((True, False, False) if layer_type == "qwen3" else
                                                           (False, True, True))
    logits, head = _draft_logits(tiny_base, draft)
    attn = head.midlayer.self_attn
    if layer_type == "qwen3":
        assert torch.equal(attn.k_norm.weight, extra[p + "k_norm.weight"])
    else:
        assert torch.equal(attn.o_proj.bias, extra[p + "o_proj.bias"])
    assert not torch.allclose(logits, plain_logits, atol=1e-4)
    assert EagleDecoder.load(tiny_base, draft, tree="chain:3").generate_all(list(range(5, 30)), 16).token_ids == \
        EagleDecoder.load(tiny_base, None).generate_all(list(range(5, 30)), 16).token_ids


def test_a_draft_keeps_its_own_rope_scaling(tiny_base, eagle3_draft, tmp_path):
    """SpecForge's 70B config carries llama3 rope_scaling: the draft layer's RoPE is computed with it."""
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}
    scaled = layout_builders.write_layout(eagle3_draft, tmp_path / "s", "specforge",
                                          extra={"config": {"rope_scaling": scaling, "rope_theta": 500000.0}})
    spec = DraftSpec.from_dir(scaled)
    assert spec.rope_scaling == scaling and spec.rope_theta == 500000.0
    head = _draft_logits(tiny_base, scaled)[1]
    plain = _draft_logits(tiny_base, eagle3_draft)[1]
    assert not torch.allclose(head.rope.cos, plain.rope.cos)
    from eagle_trt.runtime.rope import rope_frequencies

    inv, _ = rope_frequencies(spec.head_dim, 500000.0, scaling)
    assert torch.allclose(head.rope.cos[5, : spec.head_dim // 2], torch.cos(5 * inv).float(), atol=1e-6)


# ---- engines: their own draft models, and the layout each reads ------------------------------------------------

def _build(base, draft, out, engine, *extra):
    args = ["build", "--base", str(base), "--draft", str(draft), "-o", str(out), "--engine", engine, "--tree",
            "chain:3", *extra]
    return CliRunner().invoke(main, args + (["--dry-run"] if engine == "llmapi" else []))


def test_llmapi_gets_a_speculators_draft_in_the_layout_it_reads(trained, reference, tmp_path):
    """TensorRT-LLM loads midlayer.* from a flat Llama config: build writes that copy into OUT/draft, model.yaml
    points at it, the spec says why, and the copy is the same draft (our engine runs it to the same steps)."""
    import yaml

    base, _, eagle3, ids = trained
    draft = layout_builders.write_layout(eagle3, tmp_path / "spec", "speculators", base=base)
    out = tmp_path / "bundle"
    res = _build(base, draft, out, "llmapi")
    assert res.exit_code == 0, res.output
    served = out / "draft"
    model = yaml.safe_load((out / "model_repository/eagle_engine/1/model.yaml").read_text())
    assert model["speculative_config"]["speculative_model"] == str(served.resolve())
    spec = json.loads((out / "eagle_trt_spec.json").read_text())
    assert spec["served_draft"] == str(served.resolve()) and "midlayer.*" in spec["served_draft_reason"]
    copy = DraftSpec.from_dir(served)
    assert (copy.layout, copy.prefix) == ("safeailab-eagle3", "midlayer.")
    assert json.loads((served / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert _run(base, served, ids)[1] == reference[1]


def test_vllm_gets_capture_ids_in_its_convention(trained, reference, tmp_path):
    """vLLM reads capture ids as layer inputs, from the top level first: SpecForge's output ids are rewritten."""
    base, _, eagle3, ids = trained
    standard = list(standard_capture_layers(LAYERS))
    draft = layout_builders.write_layout(eagle3, tmp_path / "sf", "specforge", capture_inputs=standard)
    out = tmp_path / "bundle"
    res = _build(base, draft, out, "vllm")
    assert res.exit_code == 0, res.output
    model = json.loads((out / "model_repository/eagle_model/1/model.json").read_text())
    assert model["speculative_config"]["model"] == str((out / "draft").resolve())
    cfg = json.loads((out / "draft" / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == standard and "eagle_aux_hidden_state_layer_ids" not in \
        cfg["eagle_config"]
    assert _run(base, out / "draft", ids)[1] == reference[1]
    plain = _build(base, eagle3, tmp_path / "plain", "vllm")  # a draft vLLM reads as it is: no copy
    assert plain.exit_code == 0 and not (tmp_path / "plain" / "draft").exists()


@pytest.mark.parametrize("engine, layout, change, words", [
    ("llmapi", "speculators", {"norm_before_residual": True}, "norm_before_residual (TensorRT-LLM takes"),
    ("llmapi", "speculators", {"norm_before_fc": True}, "norm_before_fc"),
    ("vllm", "speculators", {"model_type": "qwen3"}, "q/k RMSNorm in the draft layer"),
])
def test_an_engine_without_the_drafts_math_refuses_it(tiny_base, eagle3_draft, engine, layout, change, words,
                                                      tmp_path):
    draft = layout_builders.write_layout(eagle3_draft, tmp_path / "d", layout, base=tiny_base)
    cfg = json.loads((draft / "config.json").read_text())
    if "model_type" in change:
        cfg["transformer_layer_config"] |= change
        extra = {f"layers.0.self_attn.{n}_norm.weight": torch.ones(cfg["transformer_layer_config"]["head_dim"])
                 for n in "qk"}
    else:
        cfg |= change
        extra = {"input_norm.weight": torch.ones(3 * 64)} if "norm_before_fc" in change else {}
    (draft / "config.json").write_text(json.dumps(cfg))
    draft = _with(draft, tmp_path / "d2", tensors=extra)
    res = _build(tiny_base, draft, tmp_path / "out", engine)
    assert res.exit_code == 1 and words in res.output and "--engine pytorch" in res.output
    assert not (tmp_path / "out").exists()
    ok = _build(tiny_base, draft, tmp_path / "ours", "pytorch", "--max-seq-len", "512")
    assert ok.exit_code == 0, ok.output  # the pytorch engine runs it as its writer defined it
