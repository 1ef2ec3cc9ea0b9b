"""`eagle-trt train-draft`: train an EAGLE draft for a base that has none, by self-distillation."""

from __future__ import annotations

import json
from pathlib import Path

import click

from eagle_trt.commands.options import BASE
from eagle_trt.errors import EagleTrtError
from eagle_trt.train.data import DataConfig  # the defaults below are the configs' own (config_option)
from eagle_trt.train.eagle1 import TrainConfig
from eagle_trt.train.eagle3 import Eagle3TrainConfig
from eagle_trt.train.loop import LoopConfig


def _progress(stage: str, total):
    from tqdm import tqdm

    bar = tqdm(total=total, desc=stage, unit="prompt" if stage == "data" else "step", leave=True)

    def update(*args):
        if stage == "data":
            bar.update(args[0])
        else:
            step, steps, metrics = args
            bar.total = steps
            bar.n = step
            bar.set_postfix(loss=f"{metrics['loss']:.3f}", top1=f"{metrics['top1']:.2f}")
            bar.refresh()

    return update


def config_option(flag: str, config: type, field: str, minimum: float = 1, help: str | None = None):
    """--flag whose default (and int/float type) is the training config's own field: defined once, there."""
    default = getattr(config, field)
    kind = click.IntRange(min=int(minimum)) if isinstance(default, int) else click.FloatRange(min=minimum)
    name = flag.lstrip("-").replace("-", "_")
    return click.option(flag, name, type=kind, default=default, show_default=True, help=help)


@click.command("train-draft")
@click.option("--base", "base_dir", required=True, type=BASE, help="HF base model directory or hub id.")
@click.option("--prompts", "prompts_file", required=True, type=click.Path(path_type=Path),
              help="JSONL of training prompts (prompt/text/turns/ShareGPT conversations).")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(path_type=Path), help="Draft output dir.")
@click.option("--format", "fmt", type=click.Choice(["eagle1", "eagle3"]), default="eagle1", show_default=True)
@config_option("--max-prompts", DataConfig, "max_prompts")
@config_option("--gen-tokens", DataConfig, "gen_tokens", help="Answer length per prompt.")
@click.option("--extra-prompts", type=click.IntRange(min=0), default=0, show_default=True,
              help="More prompts used teacher-forced only (no answer generated): cheap extra features.")
@config_option("--gen-batch-size", DataConfig, "batch_size",
               help="Prompts the base answers at once while generating data (raise it on a GPU: 512 on an H100).")
@config_option("--temperature", DataConfig, "temperature", minimum=0.0, help="0 = greedy answers.")
@config_option("--epochs", LoopConfig, "epochs")
@click.option("--lr", type=click.FloatRange(min=0.0, min_open=True), default=LoopConfig.lr, show_default=True)
@click.option("--max-steps", type=click.IntRange(min=1),
              default=None, help="Stop after this many steps (schedule still spans --epochs).")
@click.option("--time-budget", type=click.FloatRange(min=0.0, min_open=True), default=None,
              help="Train for about this many seconds: the step time measured over the warmup steps sets the "
                   "number of steps (at most --epochs) and the learning rate's cosine ends there.")
@config_option("--batch-size", LoopConfig, "chunk_tokens", help="Draft rows (tokens) per step.")
@click.option("--draft-vocab-size", type=click.IntRange(min=1), default=32000, show_default=True,
              help="EAGLE-3: draft vocabulary size, the most frequent tokens of the data (capped at the base's).")
@click.option("--draft-vocab", "renamed_draft_vocab", type=int, default=None, hidden=True,
              help="Renamed --draft-vocab-size (--draft-vocab is FR-Spec truncation in build/generate).")
@config_option("--ttt-steps", Eagle3TrainConfig, "ttt_steps",
               help="EAGLE-3: unrolled draft steps in training-time test (losses weighted 0.8^j).")
@config_option("--seed", LoopConfig, "seed", minimum=0)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where the base answers and the draft trains.")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from OUT.work/.")
@click.option("--force", is_flag=True, help="Overwrite an existing output directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the training record as JSON.")
def train_draft_cmd(base_dir, prompts_file, out_dir, fmt, max_prompts, gen_tokens, gen_batch_size, extra_prompts,
                    temperature, epochs, lr, max_steps, time_budget, batch_size, draft_vocab_size, renamed_draft_vocab, ttt_steps,
                    seed, device, resume, force, as_json):
    """Train an EAGLE draft by self-distillation: the base answers the prompts, the draft learns its features.

    --format eagle1 trains an EAGLE-1/2 head (feature regression + CE through the base lm_head); --format eagle3 an
    EAGLE-3 head (three captured layers, training-time test, own reduced vocabulary with d2t/t2d). An EAGLE-3 run
    started with --resume in an EAGLE-1 run's work dir reuses its answers.

    \b
    Example:
      eagle-trt train-draft --base $(eagle-trt demo-model | tail -1) \\
        --prompts my_prompts.jsonl -o smollm2-eagle1 --max-prompts 512
    """
    from eagle_trt.train.pipeline import TrainRequest, run

    if renamed_draft_vocab is not None:
        raise EagleTrtError(f"train-draft --draft-vocab {renamed_draft_vocab}: the option is now --draft-vocab-size "
                            "(in build and generate, --draft-vocab means FR-Spec truncation of an EAGLE-1/2 draft)",
                            f"pass --draft-vocab-size {renamed_draft_vocab}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise EagleTrtError("--device cuda: no CUDA device is visible to PyTorch",
                                "run on a machine with a GPU and a CUDA build of torch, or use --device cpu")
    req = TrainRequest(base_dir, prompts_file, out_dir, fmt,
                       DataConfig(max_prompts=max_prompts, gen_tokens=gen_tokens, batch_size=gen_batch_size,
                                  temperature=temperature, seed=seed, device=device),
                       TrainConfig(epochs=epochs, lr=lr, chunk_tokens=batch_size, seed=seed, max_steps=max_steps,
                                   time_budget_s=time_budget),
                       Eagle3TrainConfig(epochs=epochs, lr=lr, chunk_tokens=batch_size, ttt_steps=ttt_steps, seed=seed,
                                         max_steps=max_steps, time_budget_s=time_budget),
                       draft_vocab_size, extra_prompts=extra_prompts, resume=resume, force=force)
    record = run(req, progress=_progress)
    if as_json:
        click.echo(json.dumps(record, indent=2))
    else:
        click.echo(f"held-out mean accepted length (greedy, {req.eval_tree}): {record['heldout_tau']:.2f}")
        click.echo(str(out_dir))
