"""Train the SmolLM2 EAGLE-1 draft on one GPU inside a fixed time budget: self-distilled answers to ShareGPT turns
(real history, several temperatures) plus every recoverable ShareGPT conversation teacher-forced.

Input: the base's HF directory and the token file of `scripts/sharegpt_turns.py` (conversations already templated
and cleared of MT-bench, HumanEval and calibration prompts). Steps, each inside its own budget in seconds:
1. answer: the base answers user turns of the conversations (prompt = the real history up to that turn), batches
   sorted by length, temperatures cycled per batch (0 = greedy), up to --gen-tokens each (transformers' generate,
   bf16); a few answers are held out;
2. features: the base's final normed hidden state at every position (fp32, TF32 matmuls), for the answers (their
   last --prompt-tail prompt tokens are kept as context) and for the conversations themselves (their real
   answers: the targets are still the base's own features and next-token distribution);
3. train: the package's EAGLE-1 training (SmoothL1 on the next feature + 0.1 x soft CE over the 8192 most frequent
   tokens, packed chunks, AdamW, warmup + cosine) with a time budget: the step time measured over the warmup steps
   sets the number of steps;
4. export: the draft (SafeAILab EAGLE-1 layout, fp16), draft_vocab.json (the CE's 8192 ids, most frequent first),
   the held-out losses and top-1 agreement, and a JSON record of every figure.

Prints each step's progress and figures with the elapsed time; the record is OUT/train_record.json.

    python scripts/train_smollm2_draft_gpu.py --base DIR --turns turns.npz.xz -o OUT [--device cuda]
"""

import argparse
import json
import random
import time
from pathlib import Path

import torch
from sharegpt_turns import read_turns  # scripts/sharegpt_turns.py, the file's writer

from eagle_trt.runtime.loading import DRAFT_VOCAB_FILE, build_draft, load_base
from eagle_trt.spec import ModelSpec
from eagle_trt.train.eagle1 import TrainConfig, evaluate, init_from_identity, train_eagle1, vocab_subset
from eagle_trt.train.export import eagle1_config, eagle1_state_dict, save_draft
from eagle_trt.train.pipeline import new_draft_spec

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


@torch.inference_mode()
def answer(hf, ids, convs, answers, args, deadline, stop_ids: list[int], pad_id: int, rng) -> list[dict]:
    """The base's own answers to user turns (prompt = the conversation up to that turn)."""
    device = args.device
    prompts = []
    for c, start, _ in answers:
        if start <= args.max_prompt:
            at = convs[c][0]
            prompts.append(ids[at: at + start])
    rng.shuffle(prompts)
    prompts = prompts[: args.max_gen_prompts]
    prompts.sort(key=len)
    batches = [prompts[i: i + args.gen_batch] for i in range(0, len(prompts), args.gen_batch)]
    rng.shuffle(batches)
    temps = [float(t) for t in args.temps.split(",")]
    out, stop = [], set(stop_ids)
    for b, batch in enumerate(batches):
        if time.time() > deadline:
            break
        temp = temps[b % len(temps)]
        width = max(len(p) for p in batch)
        input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)  # [B, W] left-padded
        mask = torch.zeros(len(batch), width, dtype=torch.long)  # [B, W]
        for r, p in enumerate(batch):
            input_ids[r, width - len(p):] = p
            mask[r, width - len(p):] = 1
        sample = temp > 0
        gen = hf.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                          max_new_tokens=args.gen_tokens, do_sample=sample, temperature=temp if sample else None,
                          top_k=0 if sample else None, top_p=1.0 if sample else None, pad_token_id=pad_id,
                          eos_token_id=stop_ids)
        for r, p in enumerate(batch):
            reply = []
            for t in gen[r, width:].tolist():
                reply.append(t)
                if t in stop:
                    break
            out.append({"ids": torch.cat([p, torch.tensor(reply)]), "n_prompt": len(p), "temp": temp})
        log(f"answer batch {b + 1}/{len(batches)}: {len(batch)} prompts <= {width} tokens, temperature {temp}, "
            f"{sum(len(o['ids']) - o['n_prompt'] for o in out)} answer tokens so far")
    return out


@torch.inference_mode()
def features(model, seqs: list[torch.Tensor], batch_tokens: int, device: str, deadline: float) -> list:
    """[T, H] fp16 final normed hidden state per sequence (None for those not reached before the deadline)."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))  # shortest first: a group's last is its widest
    out: list = [None] * len(seqs)
    i = 0
    while i < len(order) and time.time() < deadline:
        j = i + 1
        while j < len(order) and (j - i + 1) * len(seqs[order[j]]) <= batch_tokens:
            j += 1
        group = order[i:j]
        width = len(seqs[group[-1]])
        input_ids = torch.zeros(len(group), width, dtype=torch.long)  # [B, W] right-padded
        mask = torch.zeros(len(group), width, dtype=torch.long)  # [B, W]
        for r, k in enumerate(group):
            input_ids[r, : len(seqs[k])] = seqs[k]
            mask[r, : len(seqs[k])] = 1
        hidden = model(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                       use_cache=False).last_hidden_state  # [B, W, H]
        for r, k in enumerate(group):
            out[k] = hidden[r, : len(seqs[k])].to(torch.float16)
        i = j
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--turns", type=Path, required=True)
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gen-budget", type=float, default=170)
    ap.add_argument("--feature-budget", type=float, default=80)
    ap.add_argument("--train-budget", type=float, default=200)
    ap.add_argument("--gen-batch", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=320)
    ap.add_argument("--max-prompt", type=int, default=1024, help="answer only turns whose history fits this")
    ap.add_argument("--max-gen-prompts", type=int, default=60000)
    ap.add_argument("--prompt-tail", type=int, default=512, help="prompt tokens kept before each answer")
    ap.add_argument("--temps", default="0,0.7,0,1.0")
    ap.add_argument("--max-convs", type=int, default=0, help="use only this many conversations (0 = all)")
    ap.add_argument("--feature-batch-tokens", type=int, default=65536)
    ap.add_argument("--chunk-tokens", type=int, default=8192)
    ap.add_argument("--max-epochs", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--heldout", type=float, default=0.02, help="fraction of the answers held out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    from transformers import AutoModelForCausalLM

    spec = ModelSpec.from_dir(args.base)
    ids, convs, answers = read_turns(args.turns)
    if args.max_convs:
        convs = convs[: args.max_convs]
        answers = [a for a in answers if a[0] < args.max_convs]
    log(f"{len(convs)} conversations, {len(answers)} answers, {sum(n for _, n in convs)} tokens")
    hf32 = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32).to(args.device).eval()
    hf16 = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.bfloat16).to(args.device).eval()
    pad = spec.eos_token_ids[0]
    record: dict = {"script": "scripts/train_smollm2_draft_gpu.py", "args": {k: str(v) for k, v in vars(args).items()},
                    "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    t = time.time()
    answered = answer(hf16, ids, convs, answers, args, t + args.gen_budget, spec.eos_token_ids, pad, rng)
    del hf16
    record["answer_time_s"] = round(time.time() - t, 1)
    record["answers"] = len(answered)
    record["answer_tokens"] = sum(len(a["ids"]) - a["n_prompt"] for a in answered)
    record["answers_by_temperature"] = {str(k): sum(a["temp"] == k for a in answered)
                                        for k in sorted({a["temp"] for a in answered})}
    log(f"answered {record['answers']} turns, {record['answer_tokens']} tokens in {record['answer_time_s']} s")
    t = time.time()
    seqs = [a["ids"] for a in answered] + [ids[at: at + n] for at, n in convs]
    feats = features(hf32.model, seqs, args.feature_batch_tokens, args.device, t + args.feature_budget)
    del hf32
    records, held = [], []
    for k, (seq, f) in enumerate(zip(seqs, feats)):
        if f is None:
            continue
        cut = max(0, answered[k]["n_prompt"] - args.prompt_tail) if k < len(answered) else 0
        rec = {"input_ids": seq[cut:].to(args.device), "n_prompt": 0, "features": f[cut:],
               "self_distilled": k < len(answered)}
        (held if k < len(answered) and rng.random() < args.heldout else records).append(rec)
    record["feature_time_s"] = round(time.time() - t, 1)
    record["conversations_used"] = sum(f is not None for f in feats[len(answered):])
    record["train_records"], record["heldout_records"] = len(records), len(held)
    record["train_tokens"] = int(sum(len(r["input_ids"]) for r in records))
    record["self_distilled_train_tokens"] = int(sum(len(r["input_ids"]) for r in records if r["self_distilled"]))
    log(f"features: {record['conversations_used']}/{len(convs)} conversations, {len(records)} train records, "
        f"{record['train_tokens']} tokens, {len(held)} held out, {record['feature_time_s']} s")
    base = load_base(spec, torch.float32, args.device)
    draft = build_draft(new_draft_spec(spec), spec, base)
    init_from_identity(draft)
    draft.to(args.device)
    cfg = TrainConfig(epochs=args.max_epochs, lr=args.lr, chunk_tokens=args.chunk_tokens, seed=args.seed,
                      time_budget_s=args.train_budget)
    out_draft = args.out / "smollm2-eagle1"
    history: list[dict] = []

    def export(step: int) -> None:
        save_draft(out_draft, eagle1_state_dict(draft), eagle1_config(spec, draft, dict(record, train_step=step)),
                   force=True)

    def on_step(step: int, total: int, metrics: dict, opt) -> None:
        if step == cfg.warmup_steps:
            log(f"train: {total} steps after {step} warmup steps")
        if step % 200 == 0 or step == total:
            history.append({"step": step, **metrics})
            log(f"train step {step}/{total}: {metrics}")
            export(step)

    t = time.time()
    summary = train_eagle1(draft, base.lm_head.weight, records, cfg, on_step=on_step)
    record["train_time_s"] = round(time.time() - t, 1)
    held_metrics = evaluate(draft, base.lm_head.weight, held, cfg) if held else {}
    record["heldout"] = held_metrics
    log(f"held-out: {held_metrics}")
    record["summary"] = {**summary, "history": history}
    export(summary["steps"])
    counts = torch.bincount(torch.cat([r["input_ids"] for r in records]), minlength=spec.vocab_size)  # [V]
    vocab = vocab_subset(records, spec.vocab_size)  # [8192] the ids the CE was computed over
    ordered = vocab[counts[vocab].argsort(descending=True, stable=True)].tolist()
    (out_draft / DRAFT_VOCAB_FILE).write_text(json.dumps({"token_ids": ordered, "source": (
        "the 8192 most frequent tokens of the draft's training data (its CE vocabulary), most frequent first; "
        "scripts/train_smollm2_draft_gpu.py")}) + "\n", encoding="utf-8")
    (args.out / "train_record.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    log(f"done: {out_draft}")


if __name__ == "__main__":
    main()
