"""Every supported family against Hugging Face transformers, the oracle: tiny random bases built and saved by
transformers' own classes (hf_builders), read by ModelSpec, run by our engine in fp32 and int8, plain and with EAGLE.

fp32 logits must equal transformers' within 1e-4 (the sums run in another order; the largest difference seen is
3e-5 on logits of magnitude 16-50), greedy output over 32 tokens must be identical, EAGLE must equal plain decoding
token for token (fp32 and int8, random EAGLE-1 and EAGLE-3 drafts, chains and trees, windows included), and int8
must stay as close to our fp32 as it does for the Llama fixture."""

import pytest
import torch

import builders
import hf_builders
from eagle_trt.runtime import EagleDecoder
from eagle_trt.spec import ModelSpec

PROMPT = list(range(5, 45))  # 40 tokens: past Mistral v0.1's window (24) and the Qwen2 window variant's (20)
NEW = 32
VARIANTS = list(hf_builders.VARIANTS)


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {v: hf_builders.make_hf_base(root / v, v) for v in VARIANTS}


@pytest.fixture(scope="module")
def drafts(bases, tmp_path_factory):
    root = tmp_path_factory.mktemp("family_drafts")
    return {v: (builders.make_eagle1_draft(root / f"{v}-e1", base), builders.make_eagle3_draft(root / f"{v}-e3", base))
            for v, base in bases.items()}


def _logits(decoder: EagleDecoder, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        decoder.base.setup_cache(len(ids) + 8)
        return decoder.base(torch.tensor(ids), torch.arange(len(ids)), 0)[0]  # [T, V]


def test_each_config_is_read_as_transformers_reads_it(bases):
    """The family's reading of config.json: biases, q/k norms, head_dim, windows per layer, RoPE in both layouts."""
    spec = {v: ModelSpec.from_dir(bases[v]) for v in VARIANTS}
    assert spec["llama31"].rope_theta == spec["llama31_tf4"].rope_theta == 500000.0
    assert spec["llama31"].rope_scaling == spec["llama31_tf4"].rope_scaling == {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}
    assert (spec["llama_bias"].qkv_bias, spec["llama_bias"].o_bias, spec["llama_bias"].mlp_bias) == (True,) * 3
    assert spec["mistral_v01"].sliding_window == 24 and spec["mistral_v01"].sliding_layers == (0, 1, 2)
    assert spec["mistral_v03"].sliding_window is None and spec["mistral_v03"].rope_theta == 1e6
    assert spec["qwen2"].qkv_bias and not spec["qwen2"].o_bias and spec["qwen2"].sliding_window is None
    assert spec["qwen2_window"].sliding_window == 20 and spec["qwen2_window"].sliding_layers == (1, 2)
    assert spec["qwen25_yarn"].rope_scaling["rope_type"] == "yarn"
    assert spec["qwen3"].qk_norm and spec["qwen3"].head_dim == 32 and not spec["qwen3"].qkv_bias
    assert spec["qwen3_tied"].tie_word_embeddings and spec["qwen3_tied"].o_bias and spec["qwen3_tied"].head_dim == 24
    assert {s.family for s in spec.values()} == {"llama", "mistral", "qwen2", "qwen3"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_fp32_logits_and_greedy_output_equal_transformers(bases, variant):
    base = bases[variant]
    decoder = EagleDecoder.load(base, None)
    ids = PROMPT + list(range(60, 68))
    ours, theirs = _logits(decoder, ids), hf_builders.hf_logits(base, ids)
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=0), (ours - theirs).abs().max()
    assert decoder.generate_all(PROMPT, NEW).token_ids == hf_builders.hf_greedy(base, PROMPT, NEW)


@pytest.mark.parametrize("variant", ["mistral_v01", "qwen2_window"])
def test_the_window_matters_on_this_prompt(bases, variant):
    """The greedy test above has power: the same weights without the window give another answer."""
    import dataclasses

    spec = ModelSpec.from_dir(bases[variant])
    unwindowed = dataclasses.replace(spec, sliding_window=None, sliding_layers=())
    from eagle_trt.runtime.loading import load_base

    with torch.inference_mode():
        full, windowed = load_base(unwindowed, torch.float32, "cpu"), load_base(spec, torch.float32, "cpu")
        for model in (full, windowed):
            model.setup_cache(64)
        ids = torch.tensor(PROMPT)
        a, b = full(ids, torch.arange(len(PROMPT)), 0)[0], windowed(ids, torch.arange(len(PROMPT)), 0)[0]
    assert not torch.allclose(a[-1], b[-1], atol=1e-3)  # the last rows see keys the window hides
    assert torch.equal(a[:20], b[:20])  # before the window fills, nothing differs


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_eagle_equals_plain_decoding(bases, drafts, variant, dtype):
    plain = EagleDecoder.load(bases[variant], None, dtype=dtype).generate_all(PROMPT, NEW).token_ids
    e1, e3 = drafts[variant]
    for draft, tree in ((e1, "chain:3"), (e1, "dynamic:3,2,4"), (e3, "static:[[0],[1],[0,0],[0,1],[1,0]]")):
        decoder = EagleDecoder.load(bases[variant], draft, tree=tree, dtype=dtype)
        assert decoder.generate_all(PROMPT, NEW).token_ids == plain, (draft.name, tree)


@pytest.mark.parametrize("variant", ["llama"] + VARIANTS)
def test_int8_stays_as_close_to_fp32_as_for_llama(bases, tiny_base, variant):
    """int8 is another model (per-row activations, per-channel weights): its top-1 agrees with our fp32 at >= 90 %
    of the positions and its logits stay within 5 % of their range, on every family as on the Llama fixture."""
    base = tiny_base if variant == "llama" else bases[variant]
    ids = PROMPT + list(range(60, 68))
    fp32, int8 = _logits(EagleDecoder.load(base, None), ids), _logits(EagleDecoder.load(base, None, dtype="int8"), ids)
    assert (fp32.argmax(-1) == int8.argmax(-1)).float().mean() >= 0.9
    assert (fp32 - int8).abs().max() <= 0.05 * fp32.abs().max()


# ---- refused at the door: before anything is written -------------------------------------------------------------

def _refused(tmp_path, base, draft, words):
    """inspect, build and generate each exit 1 with `words` in the message; build leaves nothing behind."""
    from click.testing import CliRunner

    from eagle_trt.cli import main

    out = tmp_path / "out"
    for args in (["inspect", "--base", str(base), "--draft", str(draft)],
                 ["build", "--base", str(base), "--draft", str(draft), "-o", str(out), "--engine", "pytorch",
                  "--tree", "chain:2"],
                 ["generate", "--base", str(base), "--draft", str(draft), "--tree", "chain:2", "--max-tokens", "4",
                  "hello"]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and words in res.output and "Traceback" not in res.output, (args, res.output)
    assert not out.exists() and not list(tmp_path.glob(".out*"))


@pytest.mark.parametrize("model_type, arch", [("gemma2", "Gemma2ForCausalLM"), ("phi3", "Phi3ForCausalLM"),
                                              ("qwen2_moe", "Qwen2MoeForCausalLM")])
def test_an_unsupported_family_is_refused_by_name(tiny_base, eagle1_draft, tmp_path, model_type, arch):
    import json
    import shutil

    base = tmp_path / model_type
    shutil.copytree(tiny_base, base)
    cfg = json.loads((base / "config.json").read_text()) | {"model_type": model_type, "architectures": [arch]}
    (base / "config.json").write_text(json.dumps(cfg))
    _refused(tmp_path, base, eagle1_draft, f"model_type {model_type!r} (architecture {arch!r}) is not a family")


def test_a_base_tensor_nothing_reads_is_refused_by_name(tiny_base, eagle1_draft, tmp_path):
    """A Llama checkpoint with q/k/v biases its config does not declare (attention_bias false): running without
    them would be another model."""
    import shutil

    from safetensors.torch import load_file, save_file

    base = tmp_path / "biased"
    shutil.copytree(tiny_base, base)
    weights = load_file(str(base / "model.safetensors"))
    rows = weights["model.layers.1.self_attn.v_proj.weight"].shape[0]
    weights["model.layers.1.self_attn.v_proj.bias"] = torch.ones(rows)
    save_file(weights, str(base / "model.safetensors"))
    _refused(tmp_path, base, eagle1_draft, "'model.layers.1.self_attn.v_proj.bias'")


@pytest.mark.parametrize("rope, words", [({"rope_type": "wavelet", "factor": 2.0}, "unknown rope_type 'wavelet'"),
                                         ({"rope_type": "longrope", "factor": 2.0}, "rope_type 'longrope' is not"),
                                         ({"rope_type": "llama3", "factor": 8.0}, "needs a number 'low_freq_factor'")])
def test_a_rope_we_do_not_compute_is_refused(tiny_base, eagle1_draft, tmp_path, rope, words):
    import json
    import shutil

    base = tmp_path / "rope"
    shutil.copytree(tiny_base, base)
    cfg = json.loads((base / "config.json").read_text())
    cfg.pop("rope_theta")
    cfg["rope_scaling"] = None
    (base / "config.json").write_text(json.dumps(cfg | {"rope_parameters": {"rope_theta": 10000.0, **rope}}))
    _refused(tmp_path, base, eagle1_draft, words)


def test_refusal_hints_name_only_routes_that_run_the_pair(bases, drafts):
    """Qwen3 + an EAGLE-1 draft through the LLM API: the hint may not send the user to the TensorRT-LLM engine path
    (Llama only) but to the engines that run this very pair."""
    from eagle_trt.engines import compatibility
    from eagle_trt.spec import DraftSpec

    base, draft = ModelSpec.from_dir(bases["qwen3"]), DraftSpec.from_dir(drafts["qwen3"][0])
    (problem,) = compatibility(base, draft, "llmapi")
    assert problem.message == "TRT-LLM's LLM-API (PyTorch backend) runs EAGLE-3 drafts only"
    assert problem.hint.startswith("this pair runs with --engine pytorch or --engine vllm;")
    assert "trtllm" not in problem.hint and "train-draft --format eagle3" in problem.hint
    assert not compatibility(base, DraftSpec.from_dir(drafts["qwen3"][1]), "llmapi")  # EAGLE-3: it runs


@pytest.mark.parametrize("engine", ["llmapi", "vllm"])
def test_engines_reading_hf_configs_get_both_rope_layouts(bases, drafts, engine, tmp_path):
    """An engine on transformers 4 (TensorRT-LLM <= 1.2, vLLM of its time) reads rope_theta/rope_scaling only: a
    transformers-5 base is served as OUT/base, its files linked and config.json holding both layouts; a base that
    has them already is served as it is."""
    import json

    import yaml
    from click.testing import CliRunner
    from transformers import LlamaConfig

    from eagle_trt.cli import main

    out = tmp_path / "bundle"
    args = ["build", "--base", str(bases["llama31"]), "--draft", str(drafts["llama31"][1]), "-o", str(out),
            "--engine", engine, "--tree", "chain:3"] + (["--dry-run"] if engine == "llmapi" else [])
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    served = out / "base"
    model = yaml.safe_load((out / "model_repository/eagle_engine/1/model.yaml").read_text()) if engine == "llmapi" \
        else json.loads((out / "model_repository/eagle_model/1/model.json").read_text())
    assert model["model"] == str(served.resolve())
    cfg = json.loads((served / "config.json").read_text())
    assert cfg["rope_theta"] == 500000.0 and cfg["rope_scaling"]["rope_type"] == "llama3"  # transformers 4 reads these
    assert LlamaConfig.from_pretrained(served).rope_parameters == LlamaConfig.from_pretrained(
        bases["llama31"]).rope_parameters  # transformers 5 reads the same RoPE
    assert ModelSpec.from_dir(served).rope_scaling == ModelSpec.from_dir(bases["llama31"]).rope_scaling
    assert (served / "model.safetensors").is_symlink() and (served / "model.safetensors").resolve() == (
        bases["llama31"] / "model.safetensors").resolve()
    assert "transformers 5's rope_parameters only" in json.loads((out / "eagle_trt_spec.json").read_text())[
        "served_base_reason"]
    res = CliRunner().invoke(main, [*args[:2], str(bases["llama31_tf4"]), *args[3:6], str(tmp_path / "tf4"),
                                    *args[7:]])
    assert res.exit_code == 0 and not (tmp_path / "tf4" / "base").exists()
