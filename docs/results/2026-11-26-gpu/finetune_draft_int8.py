"""Fine-tune an EAGLE-1 draft for SmolLM2 on the int8 engine's own features (an experiment, 2026-11-26).

The demo serves the int8 engine, whose final hidden states differ from fp32's; a draft trained on fp32 features
reads perturbed inputs there. This teacher-forces ShareGPT conversations (the token file of
`scripts/sharegpt_turns.py`) through our runtime's int8 base, records its features, and continues training the
draft on them with the package's EAGLE-1 losses; the result is a draft directory (with the source's
draft_vocab.json) to compare with `eagle-trt bench --dtype int8`.

    .venv/bin/python docs/results/2026-11-26-gpu/finetune_draft_int8.py --draft DIR --turns turns.npz.xz -o OUT [--convs 600]
"""

import argparse
import random
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from sharegpt_turns import read_turns  # noqa: E402  scripts/sharegpt_turns.py, the file's writer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", type=Path, required=True)
    ap.add_argument("--turns", type=Path, required=True)
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--convs", type=int, default=600, help="conversations teacher-forced")
    ap.add_argument("--max-tokens", type=int, default=768, help="tokens kept per conversation")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--chunk-tokens", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, help="safetensors file of the features: written once, reused")
    args = ap.parse_args()

    from eagle_trt.demo_model import materialize_demo_base
    from eagle_trt.runtime import EagleDecoder
    from eagle_trt.runtime.loading import DRAFT_VOCAB_FILE, load_base, load_draft
    from eagle_trt.spec import DraftSpec, ModelSpec
    from eagle_trt.train.data import features_record, pack_records, load_records
    from eagle_trt.train.eagle1 import TrainConfig, train_eagle1
    from eagle_trt.train.export import eagle1_config, eagle1_state_dict, save_draft

    base_dir = materialize_demo_base()
    spec = ModelSpec.from_dir(base_dir)
    ids, convs, _ = read_turns(args.turns)
    random.Random(args.seed).shuffle(convs)
    t0 = time.time()
    if args.cache is not None and args.cache.exists():
        records = load_records([args.cache])
    else:
        int8 = EagleDecoder.load(base_dir, None, tree="chain:1", dtype="int8").base
        int8.setup_cache(args.max_tokens + 8)
        records = [features_record(int8, ids[at: at + min(n, args.max_tokens)].tolist(), 0, ())
                   for at, n in convs[: args.convs]]
        if args.cache is not None:
            save_file(pack_records(records), str(args.cache))
    tokens = sum(len(r["input_ids"]) for r in records)
    print(f"int8 features: {len(records)} conversations, {tokens} tokens, {time.time() - t0:.0f} s", flush=True)
    base32 = load_base(spec, torch.float32, "cpu")
    draft = load_draft(DraftSpec.from_dir(args.draft), spec, base32, torch.float32, "cpu")
    cfg = TrainConfig(epochs=args.epochs, lr=args.lr, chunk_tokens=args.chunk_tokens, warmup_steps=10, seed=args.seed)
    t1 = time.time()
    summary = train_eagle1(draft, base32.lm_head.weight, records, cfg)
    print(f"trained {summary['steps']} steps in {time.time() - t1:.0f} s: {summary}", flush=True)
    record = {"script": "docs/results/2026-11-26-gpu/finetune_draft_int8.py", "source_draft": str(args.draft),
              "conversations": len(records), "tokens": tokens, "features": "int8 runtime base", "train": asdict(cfg),
              "summary": summary}
    save_draft(args.out, eagle1_state_dict(draft), eagle1_config(spec, draft, record), force=True)
    if (args.draft / DRAFT_VOCAB_FILE).exists():
        shutil.copy(args.draft / DRAFT_VOCAB_FILE, args.out / DRAFT_VOCAB_FILE)
    print(args.out)


if __name__ == "__main__":
    main()
