"""Draft training on the tiny fixture: loss goes down, the saved draft reloads and is detected as EAGLE-1, a trained
draft beats a random one on acceptance, and evaluation prompts never enter the training data."""

import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from eagle_trt.cli import main
from eagle_trt.runtime import EagleDecoder
from eagle_trt.spec import DraftSpec
from eagle_trt.train.data import read_prompts
from eagle_trt.train.pipeline import eval_set_texts

SHAREGPT = Path(__file__).resolve().parents[2] / "shared" / "data" / "sharegpt_prompts.jsonl"
PROMPTS = ["Tell me a story about a robot who learns to paint.", "What is the capital of France?",
           "Write a haiku about the sea.", "Explain speculative decoding in one paragraph.",
           "def add(a, b): what does this do?", "Count from one to ten.", "Describe the quick brown fox.",
           "What does a language model predict?"] * 3


@pytest.fixture(scope="module")
def trained(tiny_base, tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p + f" #{i}"}) + "\n" for i, p in enumerate(PROMPTS)))
    res = CliRunner().invoke(main, ["train-draft", "--base", str(tiny_base), "--prompts", str(prompts), "-o",
                                    str(root / "draft"), "--max-prompts", "24", "--gen-tokens", "24", "--epochs", "25",
                                    "--batch-size", "256", "--lr", "3e-3", "--gen-batch-size", "5", "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.output[res.output.index("{"):])
    return root / "draft", record


def test_saved_draft_reloads_as_eagle1(trained, tiny_base):
    draft, record = trained
    spec = DraftSpec.from_dir(draft)
    assert spec.format == "eagle1" and spec.has_fc_bias and not spec.has_embed_tokens
    cfg = json.loads((draft / "config.json").read_text())
    assert cfg["eagle_trt_training"]["summary"]["steps"] == record["summary"]["steps"] > 0
    assert cfg["eagle_trt_training"]["data"]["batch_size"] == 5  # --gen-batch-size: 24 prompts in 5 batches
    assert cfg["num_hidden_layers"] == 1 and cfg["bias"] is True
    names = set(__import__("safetensors").safe_open(str(draft / "model.safetensors"), "pt").keys())
    assert "fc.weight" in names and "layers.0.self_attn.q_proj.weight" in names
    assert not any("input_layernorm" in n for n in names)  # EAGLE-1 layer 0 has no input norm


def test_trained_draft_beats_a_random_one(trained, tiny_base, eagle1_draft):
    draft, _ = trained
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base)
    ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
           for p in PROMPTS[:4]]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in ids]

    def tau(d):
        decoder = EagleDecoder.load(tiny_base, d, tree="chain:4")
        lengths = [a for x in ids for a in decoder.generate_all(x, 24).stats.accepted_lengths]
        return sum(lengths) / len(lengths)

    assert tau(draft) > tau(eagle1_draft) + 0.2


def test_a_few_steps_lower_the_loss(tiny_base, tmp_path):
    from eagle_trt.runtime.loading import build_draft, load_base
    from eagle_trt.spec import ModelSpec
    from eagle_trt.train.data import DataConfig, generate_data, load_records
    from eagle_trt.train.eagle1 import TrainConfig, evaluate, init_from_identity, train_eagle1
    from eagle_trt.train.pipeline import new_draft_spec

    spec = ModelSpec.from_dir(tiny_base)
    paths = generate_data(tiny_base, PROMPTS[:8], tmp_path / "data", DataConfig(gen_tokens=16, shard_records=4))
    assert len(paths) == 2  # bounded shards
    records = load_records(paths)
    base = load_base(spec, torch.float32, "cpu")
    draft = build_draft(new_draft_spec(spec), spec, base)
    init_from_identity(draft)
    cfg = TrainConfig(epochs=8, lr=3e-3, chunk_tokens=128, warmup_steps=2)
    before = evaluate(draft, base.lm_head.weight, records, cfg)["loss"]
    train_eagle1(draft, base.lm_head.weight, records, cfg)
    after = evaluate(draft, base.lm_head.weight, records, cfg)["loss"]
    assert after < 0.8 * before, (before, after)


def test_evaluation_sets_never_reach_training():
    banned = eval_set_texts()
    assert len(banned) == 80 + 164
    if SHAREGPT.exists():
        assert not any(p.strip() in banned for p in read_prompts(SHAREGPT))


def test_eval_prompts_are_filtered_out(tiny_base, tmp_path):
    from eagle_trt.datasets import mtbench_prompts

    leaked = mtbench_prompts()[0].text
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in (leaked, "hello there", "good day")))
    res = CliRunner().invoke(main, ["train-draft", "--base", str(tiny_base), "--prompts", str(prompts), "-o",
                                    str(tmp_path / "d"), "--gen-tokens", "4", "--epochs", "1", "--batch-size", "64"])
    assert res.exit_code == 0, res.output
    used = json.loads((tmp_path / "d.work" / "prompts.json").read_text())
    assert sorted(used) == ["good day", "hello there"]


def test_bad_arguments(tiny_base, tmp_path):
    res = CliRunner().invoke(main, ["train-draft", "--base", str(tiny_base), "--prompts", str(tmp_path / "no.jsonl"),
                                    "-o", str(tmp_path / "d")])
    assert res.exit_code == 1 and "does not exist" in res.output
    res = CliRunner().invoke(main, ["train-draft", "--base", str(tiny_base), "--prompts", str(tmp_path / "x"),
                                    "-o", str(tmp_path / "d"), "--epochs", "0"])
    assert res.exit_code == 2 and "Invalid value for '--epochs': 0 is not in the range x>=1" in res.output
    res = CliRunner().invoke(main, ["train-draft", "--base", str(tiny_base), "--prompts", str(tmp_path / "x"),
                                    "-o", str(tmp_path / "d"), "--gen-batch-size", "0"])
    assert res.exit_code == 2 and "Invalid value for '--gen-batch-size': 0 is not in the range x>=1" in res.output


def test_cuda_without_a_gpu_is_a_clear_error(tiny_base, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello"}) + "\n")
    res = CliRunner().invoke(main, ["train-draft", "--base", str(tiny_base), "--prompts", str(prompts), "-o",
                                    str(tmp_path / "d"), "--device", "cuda"])
    assert res.exit_code == 1 and "no CUDA device" in res.output and not (tmp_path / "d").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["eagle1", "eagle3"])
def test_training_on_cuda(tiny_base, tmp_path, fmt):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p + f" #{i}"}) + "\n" for i, p in enumerate(PROMPTS)))
    res = CliRunner().invoke(main, ["train-draft", "--base", str(tiny_base), "--prompts", str(prompts), "-o",
                                    str(tmp_path / "d"), "--format", fmt, "--device", "cuda", "--gen-tokens", "16",
                                    "--epochs", "3", "--batch-size", "256", "--draft-vocab-size", "256", "--json"])
    assert res.exit_code == 0, res.output
    assert DraftSpec.from_dir(tmp_path / "d").format == fmt


@pytest.mark.parametrize("warmup, total", [(20, 100), (2, 16), (1, 5), (30, 10)])
def test_lr_schedule_is_linear_warmup_times_cosine(warmup, total):
    """lr * min(1, (k + 1) / warmup) * (1 + cos(pi k / total)) / 2, and zero from the total on."""
    from eagle_trt.train.loop import WarmupCosine

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    schedule = WarmupCosine(opt, warmup, total)
    got = []
    for _ in range(total + 3):
        got.append(schedule.get_last_lr()[0])
        opt.step()
        schedule.step()
    want = [0.5 * min(1.0, (k + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(k, total) / total))
            for k in range(total + 3)]
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert got[-1] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("budget, want_steps", [(1e-9, 5), (1e9, 40)])
def test_time_budget_sets_the_number_of_steps(budget, want_steps):
    """After the warmup steps the measured step time sets the total: a budget too small for more stops one step
    after the warmup with the learning rate's cosine ended there; a huge one keeps every epoch."""
    from eagle_trt.train.loop import LoopConfig, train_loop

    w = torch.nn.Parameter(torch.ones(4))
    records = [{"input_ids": torch.arange(9)} for _ in range(8)]  # 8 rows each: one record per chunk
    cfg = LoopConfig(epochs=5, chunk_tokens=8, warmup_steps=4, time_budget_s=budget)
    seen = []

    def on_step(step, total, metrics, opt):
        seen.append((step, total, metrics["lr"]))

    def step_loss(chunk):
        return (w * w).sum(), {}

    summary = train_loop(torch.nn.Linear(1, 1), [w], records, cfg, step_loss, on_step=on_step)
    assert summary["steps"] == want_steps == seen[-1][0] == seen[-1][1]
    assert all(total == 40 for step, total, _ in seen if step < cfg.warmup_steps)  # 5 epochs x 8 chunks before
    if want_steps == 5:
        assert seen[-1][2] == pytest.approx(cfg.lr * 0.5 * (1 + math.cos(math.pi * 4 / 5)))  # the cosine's last step


def test_train_draft_vocab_size_was_renamed(tiny_base, tmp_path):
    """`--draft-vocab` means FR-Spec truncation in build/generate; train-draft's EAGLE-3 vocabulary size is
    `--draft-vocab-size`, and the old spelling is refused by name before any work."""
    out = tmp_path / "d"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello"}\n')
    res = CliRunner().invoke(main, ["train-draft", "--base", str(tiny_base), "--prompts", str(prompts), "-o",
                                    str(out), "--format", "eagle3", "--draft-vocab", "256"])
    assert res.exit_code == 1 and "--draft-vocab-size 256" in res.output
    assert not out.exists() and not (tmp_path / "d.work").exists()
