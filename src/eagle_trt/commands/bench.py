"""`eagle-trt bench`: the runtime benchmark (plain vs EAGLE per tree setting); table on stdout, JSON to a file."""

from __future__ import annotations

import json
from pathlib import Path

import click

from eagle_trt.commands.options import BASE, DRAFT, tune_budget_option, tuning_progress
from eagle_trt.spec import PRECISIONS


@click.command("bench")
@click.option("--base", "base_dir", required=True, type=BASE)
@click.option("--draft", "draft_dirs", type=DRAFT, multiple=True,
              help="EAGLE draft; repeat to compare drafts (e.g. EAGLE-1 vs EAGLE-3) on the same prompts.")
@click.option("--trees", default="auto;chain:3;dynamic:4,4,8", show_default=True,
              help="Tree settings separated by ';' (auto | chain:N | static:NAME|FILE | dynamic:D,K,T); auto: tuned "
                   "to this machine and draft (tuning/calibrate.py, cached), its predicted tok/s shown beside.")
@click.option("--dataset", default="mt-bench", show_default=True, help="mt-bench, humaneval or a JSONL file.")
@click.option("--prompts", type=click.IntRange(min=0), default=None,
              help="How many, one per category in turn (MT-bench: writing, roleplay, ...); 0 = every prompt. "
                   "Default 10 (4 per length with --contexts).")
@click.option("--turns", type=click.Choice(["both", "first"]), default="both", show_default=True,
              help="both: every user turn of a multi-turn prompt (MT-bench as defined: the second turn sees the "
                   "model's own first answer, cut at --max-tokens); first: first turns only.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--dtype", type=click.Choice(PRECISIONS), default="float32", show_default=True,
              help="int8: int8 linears on the CPU (runtime.linears); native: the fused C forward on the weights as "
                   "stored (a GGUF base's 4-bit blocks; runtime.native); native-q8: the same with 8-bit activations "
                   "(llama.cpp's numerics, int32 sums by AVX-512 VNNI or AVX2). Plain and EAGLE alike.")
@click.option("--draft-vocab", type=click.IntRange(min=0), default=None,
              help="FR-Spec: an EAGLE-1/2 draft proposes among its N most frequent tokens (0: full vocabulary; "
                   "default: the draft's draft_vocab.json if it has one).")
@click.option("--chat/--no-chat", default=True, show_default=True)
@tune_budget_option
@click.option("--llamacpp", "llamacpp_gguf", type=click.Path(path_type=Path), default=None,
              help="A GGUF of the base: llama.cpp's plain decoding of the same prompts in the same run, as one more "
                   "row, with every row's ratio to it (needs llama-cpp-python: `make llamacpp`; the demo base's "
                   "GGUF: `eagle-trt demo-model --gguf`).")
@click.option("--also-plain", "also_plain", multiple=True, type=click.Choice(PRECISIONS),
              help="One more plain-decoding row per value: the same base at that precision (e.g. int8 beside "
                   "--dtype native), its outputs compared, not expected equal.")
@click.option("--backoff", is_flag=True,
              help="Also run each EAGLE setting with per-request backoff (runtime.backoff: plain steps while they "
                   "commit more tokens per second), as a row '<setting> +backoff'.")
@click.option("--whole-prompt-draft", "whole_prompt", is_flag=True,
              help="Also run each EAGLE setting with its draft reading the whole prompt (by default it reads a "
                   "window of a long prompt's first and latest positions, runtime.drafting.DRAFT_WINDOW), as a row "
                   "'<setting> +whole prompt'.")
@click.option("--reuse-prefix", is_flag=True,
              help="Serve a next turn as the served engine does: prefill only what the conversation adds, from the "
                   "cache its last turn left (each row on its own cache, llama.cpp too; batch-invariant engines).")
@click.option("--contexts", default=None, metavar="N,N,...",
              help="Instead of the dataset: prompts of about N tokens each (held-out ShareGPT text, --prompts of "
                   "them, default 4), one run per N, and a table of how tok/s falls with the context.")
@click.option("--json-out", type=click.Path(path_type=Path), default=Path("bench_runtime.json"), show_default=True)
def bench_cmd(base_dir, draft_dirs, trees, dataset, prompts, turns, max_tokens, device, dtype, draft_vocab, chat, tune_budget,
              llamacpp_gguf, also_plain, backoff, whole_prompt, reuse_prefix, contexts, json_out):
    """Benchmark the PyTorch runtime: plain vs EAGLE tok/s, speedup and mean accepted length (greedy).

    Settings run each prompt in turn (interleaved), the JSON is rewritten after every prompt (an interrupted run
    keeps what it measured).

    \b
    Example:
      eagle-trt bench --base $(eagle-trt demo-model | tail -1) --draft $(eagle-trt demo-model --draft | tail -1) \\
        --trees "chain:3;dynamic:4,4,12" --prompts 20 --max-tokens 96
      eagle-trt bench --base $(eagle-trt demo-model | tail -1) --draft $(eagle-trt demo-model --draft | tail -1) \
        --dtype int8 --llamacpp $(eagle-trt demo-model --gguf | tail -1)
      eagle-trt bench --base $(eagle-trt demo-model --gguf-dir | tail -1) --draft $(eagle-trt demo-model --draft | \
        tail -1) --dtype native --also-plain int8 --trees "auto;chain:2" --llamacpp $(eagle-trt demo-model --gguf | tail -1)
    """
    import dataclasses

    from eagle_trt.perf.bench_runtime import BenchConfig, format_contexts, format_table, run_bench

    lengths = _context_lengths(contexts) if contexts else []
    prompts = prompts if prompts is not None else (4 if lengths else 10)
    cfg = BenchConfig(base_dir, tuple(draft_dirs) or None, tuple(t for t in trees.split(";") if t), dataset, prompts,
                      max_tokens, device, dtype, chat, draft_vocab, turns=turns, tune_budget=tune_budget,
                      llamacpp=llamacpp_gguf, also_plain=tuple(also_plain), backoff=backoff, whole_prompt=whole_prompt,
                      reuse_prefix=reuse_prefix)
    with tuning_progress() as progress:
        if not lengths:
            result = run_bench(cfg, echo=lambda m: click.echo(m, err=True), checkpoint=json_out, progress=progress)
        else:
            result = {"contexts": {}}
            for n in lengths:
                click.echo(f"context ~{n} tokens", err=True)
                result["contexts"][n] = run_bench(dataclasses.replace(cfg, context=n),
                                                  echo=lambda m: click.echo(m, err=True), progress=progress)
                json_out.write_text(json.dumps(result, indent=2))
    json_out.write_text(json.dumps(result, indent=2))
    click.echo(format_contexts(result["contexts"]) if lengths else format_table(result))
    click.echo(f"json: {json_out}", err=True)


def _context_lengths(value: str) -> list[int]:
    try:
        lengths = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 16:
        raise click.BadParameter(f"{value!r}: expected token counts of 16 or more separated by commas, e.g. "
                                 "128,1024,4096", param_hint="--contexts")
    return lengths
