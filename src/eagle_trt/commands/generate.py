"""`eagle-trt generate`: EAGLE generation locally with the PyTorch runtime (--base) or from a Triton server (--url)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from eagle_trt.commands.options import BASE, DRAFT
from eagle_trt.datasets import encode_prompt
from eagle_trt.spec import EAGLE_MODEL, PRECISIONS
from eagle_trt.tree_config import TREE_ARG_HELP


def run_local(base_dir: Path, draft_dir: Path | None, prompt: str, *, chat: bool, max_tokens: int, sampling,
              tree: str, device: str, dtype: str, stream: bool, as_json: bool, draft_vocab: int | None = None) -> dict:
    from transformers import AutoTokenizer

    from eagle_trt.tuning.calibrate import preset_tree
    from eagle_trt.runtime import EagleDecoder

    tree, _ = preset_tree(tree, base_dir, draft_dir, echo=lambda m: click.echo(m, err=True), device=device,
                           dtype=dtype, draft_vocab=draft_vocab)
    decoder = EagleDecoder.load(base_dir, draft_dir, tree=tree, device=device, dtype=dtype, draft_vocab=draft_vocab)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    ids = encode_prompt(tokenizer, prompt, chat)
    tokens, printed, reason, stats = [], "", "length", None
    for step in decoder.generate(ids, max_tokens, sampling, stop_token_ids=decoder.base_spec.eos_token_ids):
        tokens += step.token_ids
        stats, reason = step.stats, step.finish_reason or reason
        if stream and not as_json:
            text = tokenizer.decode(tokens, skip_special_tokens=True)
            if not text.endswith("\ufffd"):  # wait for a complete UTF-8 character
                click.echo(text[len(printed):], nl=False)
                printed = text
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    result = {"text": text, "token_ids": tokens, "finish_reason": reason, "prompt_tokens": len(ids),
              "stats": stats.to_dict()}
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(text[len(printed):] if stream else text)
        s = stats
        click.echo(f"[{'eagle' if draft_dir else 'plain'}] {len(tokens)} tokens in {s.steps} steps, mean accepted "
                   f"length {s.mean_accepted_length:.2f}, acceptance rate {s.acceptance_rate:.3f}, draft "
                   f"{s.draft_time_s:.2f} s / verify {s.verify_time_s:.2f} s", err=True)
    return result


@click.command("generate")
@click.argument("prompt")
@click.option("--base", "base_dir", type=BASE, help="Local mode: HF base model directory or hub id.")
@click.option("--draft", "draft_dir", type=DRAFT, help="Local mode: EAGLE draft (omit: plain).")
@click.option("--url", help="Remote mode: Triton server, e.g. http://127.0.0.1:8000 or grpc://127.0.0.1:8001.")
@click.option("--model", default=EAGLE_MODEL, show_default=True, help="Remote mode: model to call.")
@click.option("--chat/--no-chat", default=True, show_default=True, help="Apply the base's chat template.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0.0), default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", type=click.FloatRange(0.0, 1.0, min_open=True), default=1.0, show_default=True)
@click.option("--top-k", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--seed", type=int, default=None)
@click.option("--tree", default="auto", show_default=True,
              help=f"Local mode: {TREE_ARG_HELP} | auto (the tree `eagle-trt tune` chose on this machine, else a preset; "
                   "generate never measures).")
@click.option("--device", default="cpu", show_default=True, help="Local mode: cpu or cuda.")
@click.option("--dtype", type=click.Choice(PRECISIONS), default="float32", show_default=True,
              help="Local mode; int8: int8 linears on the CPU (plain decoding with the same weights is identical).")
@click.option("--draft-vocab", type=click.IntRange(min=0), default=None,
              help="Local mode, EAGLE-1/2 draft: FR-Spec vocabulary size (0: full; default: the draft's file).")
@click.option("--stream", is_flag=True, help="Print text as tokens commit.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: text, token_ids, stats.")
def generate_cmd(prompt, base_dir, draft_dir, url, model, chat, max_tokens, temperature, top_p, top_k, seed, tree,
                 device, dtype, draft_vocab, stream, as_json):
    """Generate text with EAGLE speculative decoding.

    \b
    Examples:
      eagle-trt generate --base BASE --draft DRAFT "What is the capital of France?" --stream
      eagle-trt generate --base BASE "Same prompt, plain decoding" --json
      eagle-trt generate --url http://127.0.0.1:8000 --model eagle_model "Hello" --stream
    """
    from eagle_trt.runtime import SamplingParams

    if (base_dir is None) == (url is None):
        raise click.UsageError("pass either --base (local runtime) or --url (a Triton server), not both")
    from eagle_trt import request_rules as rules

    rules.check_int("--max-tokens", max_tokens, 1, 2**31 - 1, "ask for at least 1 token")
    SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)  # the shared range checks
    if url is not None:
        from eagle_trt.client.triton import print_remote_generation

        options = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
        if seed is not None:
            options["seed"] = seed
        protocol = "grpc" if url.startswith("grpc://") else "http"
        print_remote_generation(url.removeprefix("grpc://") if protocol == "grpc" else url, model, prompt,
                                max_tokens=max_tokens, stream=stream, chat=chat, as_json=as_json, protocol=protocol,
                                **options)
        return
    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    run_local(base_dir, draft_dir, prompt, chat=chat, max_tokens=max_tokens, sampling=sampling, tree=tree,
              device=device, dtype=dtype, stream=stream, as_json=as_json, draft_vocab=draft_vocab)
    sys.stdout.flush()
