"""EAGLE-3 training on the tiny fixture: training-time test computes exactly what the runtime computes for a chain,
the loss drops, the saved draft reloads as EAGLE-3 with consistent d2t/t2d, beats a random EAGLE-3 draft, and an
EAGLE-3 run resumed in an EAGLE-1 run's work dir reuses its answers."""

import json

import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open

from eagle_trt.cli import main
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.loading import build_draft, load_base, load_draft
from eagle_trt.draft_layouts import standard_capture_layers
from eagle_trt.spec import DraftSpec, ModelSpec
from eagle_trt.train.data import DataConfig, generate_data, load_records
from eagle_trt.train.eagle3 import (Eagle3TrainConfig, chunk_tensors, draft_vocabulary, evaluate3, init_from_base,
                                    train_eagle3, ttt_forward, vocab_maps)
from eagle_trt.train.pipeline import new_draft_spec

from test_train import PROMPTS



@pytest.fixture(scope="module")
def records(tiny_base, tmp_path_factory):
    spec = ModelSpec.from_dir(tiny_base)
    capture = standard_capture_layers(spec.num_hidden_layers)
    paths = generate_data(tiny_base, PROMPTS[:8], tmp_path_factory.mktemp("d3") / "data",
                          DataConfig(gen_tokens=16, shard_records=4), capture=capture)
    recs = load_records(paths)
    assert recs[0]["captured"].shape[1] == 3 * spec.hidden_size and recs[0]["greedy"].shape == recs[0]["input_ids"].shape
    return recs


@torch.no_grad()
def test_ttt_steps_equal_the_runtime_chain(tiny_base, eagle3_draft, records):
    """Row t of TTT step j == the runtime draft's depth-(j+1) chain node after accepting rows 0..t, in a packed
    chunk of two sequences (the second one checks that sequences do not see each other)."""
    spec = ModelSpec.from_dir(tiny_base)
    base = load_base(spec, torch.float32, "cpu")
    draft = load_draft(DraftSpec.from_dir(eagle3_draft), spec, base, torch.float32, "cpu")
    steps = 4
    chunk = records[:2]
    batch = chunk_tensors(chunk, 4096, steps)
    outs = ttt_forward(draft, batch, steps)
    rec = chunk[1]
    first = len(chunk[0]["input_ids"]) - 1  # row offset of the second sequence in the chunk
    x, cap = rec["input_ids"], rec["captured"].float()
    checked = 0
    for t in (0, 3, len(x) - 2 - steps):
        draft.cache = draft.rope = None
        draft.setup_cache(128)
        g = draft(x[1:t + 2], draft.fc(cap[: t + 1]), torch.arange(t + 1), 0)[t:t + 1]
        assert torch.allclose(g, outs[0][first + t: first + t + 1], atol=1e-5)
        for j in range(1, steps):
            g = draft(x[t + 1 + j: t + 2 + j], g, torch.tensor([t + j]), t + j)
            assert torch.allclose(g, outs[j][first + t: first + t + 1], atol=1e-5), (t, j)
            checked += 1
    assert checked == 3 * (steps - 1)


def test_vocabulary_maps(records, tiny_base):
    vocab = ModelSpec.from_dir(tiny_base).vocab_size
    used = draft_vocabulary(records, vocab, 50)
    d2t, t2d = vocab_maps(used, vocab)
    assert used.tolist() == sorted(set(used.tolist())) and len(used) == 50
    assert torch.equal(torch.arange(50) + d2t, used) and int(t2d.sum()) == 50 and bool(t2d[used].all())
    ids = torch.cat([r["input_ids"] for r in records])
    most = torch.bincount(ids, minlength=vocab).argmax()
    assert bool(t2d[most])  # the most frequent token is in the draft vocabulary


def test_a_few_ttt_steps_lower_the_loss(tiny_base, records):
    spec = ModelSpec.from_dir(tiny_base)
    base = load_base(spec, torch.float32, "cpu")
    used = draft_vocabulary(records, spec.vocab_size, 128)
    _, t2d = vocab_maps(used, spec.vocab_size)
    draft = build_draft(new_draft_spec(spec, "eagle3", len(used)), spec, base)
    init_from_base(draft, base, used)
    cfg = Eagle3TrainConfig(epochs=8, lr=3e-3, chunk_tokens=128, ttt_steps=3, warmup_steps=2)
    before = evaluate3(draft, base.lm_head.weight, t2d, records, cfg)
    summary = train_eagle3(draft, base.lm_head.weight, t2d, records, cfg)
    after = evaluate3(draft, base.lm_head.weight, t2d, records, cfg)
    assert summary["steps"] > 8 and len(after["top1_per_step"]) == 3
    assert after["loss"] < 0.8 * before["loss"], (before, after)
    assert after["top1"] > before["top1"]


@pytest.fixture(scope="module")
def trained3(tiny_base, tmp_path_factory):
    """An EAGLE-1 run, then an EAGLE-3 run resumed in its work dir (answers reused, captured layers added)."""
    root = tmp_path_factory.mktemp("train3")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p + f" #{i}"}) + "\n" for i, p in enumerate(PROMPTS)))
    common = ["train-draft", "--base", str(tiny_base), "--prompts", str(prompts), "--max-prompts", "24",
              "--gen-tokens", "24", "--batch-size", "256", "--lr", "3e-3", "--json"]
    res = CliRunner().invoke(main, common + ["-o", str(root / "d1"), "--epochs", "1"])
    assert res.exit_code == 0, res.output
    shard = sorted((root / "d1.work" / "data").glob("shard-*"))[0]
    with safe_open(str(shard), "pt") as f:
        ids_before = f.get_tensor("input_ids")
        assert "captured" not in f.keys()
    (root / "d1.work").rename(root / "d3.work")
    res = CliRunner().invoke(main, common + ["-o", str(root / "d3"), "--format", "eagle3", "--epochs", "30",
                                             "--draft-vocab-size", "256", "--ttt-steps", "3", "--resume"])
    assert res.exit_code == 0, res.output
    with safe_open(str(root / "d3.work" / "data" / shard.name), "pt") as f:
        assert torch.equal(f.get_tensor("input_ids"), ids_before) and "captured" in f.keys()
    return root / "d3", json.loads(res.output[res.output.index("{"):])


def test_saved_eagle3_draft_reloads(trained3, tiny_base):
    draft, record = trained3
    spec = DraftSpec.from_dir(draft)
    assert spec.format == "eagle3" and spec.draft_vocab_size == 256 and not spec.has_fc_bias
    assert spec.fc_in_features == 3 * ModelSpec.from_dir(tiny_base).hidden_size
    cfg = json.loads((draft / "config.json").read_text())
    assert cfg["draft_vocab_size"] == 256 and cfg["eagle_trt_training"]["format"] == "eagle3"
    assert record["summary"]["steps"] > 0 and len(record["heldout"]["top1_per_step"]) == 3
    with safe_open(str(draft / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        d2t, t2d = f.get_tensor("d2t"), f.get_tensor("t2d")
        assert f.get_tensor("midlayer.self_attn.q_proj.weight").shape[1] == 2 * spec.hidden_size
    assert {"fc.weight", "norm.weight", "lm_head.weight", "midlayer.hidden_norm.weight"} <= names
    assert not any(n.startswith(("embed_tokens", "layers.")) for n in names)
    used = torch.arange(256) + d2t
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool and int(t2d.sum()) == 256
    assert bool(t2d[used].all()) and bool((used[1:] > used[:-1]).all())


def test_trained_eagle3_beats_a_random_one(trained3, tiny_base, eagle3_draft):
    draft, _ = trained3
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base)
    ids = [tok(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False),
               add_special_tokens=False)["input_ids"] for p in PROMPTS[:4]]

    def run(d):
        decoder = EagleDecoder.load(tiny_base, d, tree="chain:4")
        results = [decoder.generate_all(x, 24) for x in ids]
        lengths = [a for r in results for a in r.stats.accepted_lengths]
        return sum(lengths) / len(lengths), [r.token_ids for r in results]

    tau_trained, out_trained = run(draft)
    tau_random, out_random = run(eagle3_draft)
    assert out_trained == out_random  # lossless either way
    assert tau_trained > tau_random + 0.2, (tau_trained, tau_random)
