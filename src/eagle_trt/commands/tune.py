"""`eagle-trt tune`: measure `--tree auto` for a base and draft on this machine now, with progress, and cache it.

`generate` never measures (it takes this cache or a preset); `build`, `bench` and `demo` tune when nothing is cached,
within --tune-budget. The cache entry is keyed by base, draft, device, dtype, draft vocabulary, CPU threads and the
runtime's code (tuning/calibrate.py), so a tree tuned here is the one those commands read back."""

from __future__ import annotations

import json

import click

from eagle_trt.commands.options import BASE, DRAFT, tune_budget_option, tuning_progress
from eagle_trt.spec import PRECISIONS


@click.command("tune")
@click.option("--base", "base_dir", required=True, type=BASE, help="HF base model directory or hub id.")
@click.option("--draft", "draft_dir", required=True, type=DRAFT, help="EAGLE draft directory or hub id.")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
@click.option("--dtype", type=click.Choice(PRECISIONS), default="float32", show_default=True)
@click.option("--draft-vocab", type=click.IntRange(min=0), default=None,
              help="EAGLE-1/2 draft: FR-Spec vocabulary size (0: full; default: the draft's file).")
@tune_budget_option
@click.option("--force", is_flag=True, help="Measure again even if this machine has a cached result.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole tuning result as JSON.")
def tune_cmd(base_dir, draft_dir, device, dtype, draft_vocab, tune_budget, force, as_json):
    """Tune the draft tree to this machine's measured costs and the draft's acceptance; cache the choice.

    \b
    Example:
      eagle-trt tune --base $(eagle-trt demo-model | tail -1) --draft $(eagle-trt demo-model --draft | tail -1) \\
        --dtype int8
    """
    from eagle_trt.tuning.calibrate import TuneRequest, cache_path, tune

    req = TuneRequest(base_dir, draft_dir, device=device, dtype=dtype, draft_vocab=draft_vocab, budget_s=tune_budget)
    with tuning_progress() as progress:
        result = tune(req, echo=lambda m: click.echo(m, err=True), use_cache=not force, progress=progress)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    rows = sorted(result.candidates, key=lambda c: -c["measured_tok_per_s"])
    width = max(len(c["tree"]) for c in rows)
    click.echo(f"{'tree'.ljust(width)}  measured tok/s  predicted tok/s  accepted length")
    for c in rows:
        click.echo(f"{c['tree'].ljust(width)}  {c['measured_tok_per_s']:14.1f}  {c['predicted_tok_per_s']:15.1f}  "
                   f"{c['predicted_accepted_length']:.2f}")
    click.echo(f"chosen: {result.tree} (plain decoding {1000.0 / result.measured_plain_ms:.1f} "
               f"tok/s; tuned in {result.seconds:.0f} s)")
    if result.skipped:
        click.echo(f"not measured (budget {result.budget_s:.0f} s): {', '.join(result.skipped)}")
    click.echo(f"cache: {cache_path(req)}")
