"""`eagle-trt demo` (what `make demo` runs): SmolLM2-135M-Instruct + our EAGLE draft, PyTorch engine, a real
tritonserver, AIPerf on a subset of MT-bench at concurrency 1, the summary table and the report path."""

from __future__ import annotations

import time
from pathlib import Path

import click

from eagle_trt.commands.options import tuning_progress
from eagle_trt.spec import PRECISIONS

DEMO_DTYPE = "int8"  # eagle_model and base_model alike: int8 linears on the CPU (runtime/linears.py)
DEMO_ROUNDS = 3  # one run per model moved the speedup by +-10 % on the 2-core machine; 3 alternating: +-4 %


@click.command("demo")
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path), default=Path("out/demo"),
              show_default=True, help="Where the demo bundle and report go (replaced on each run).")
@click.option("--requests", type=click.IntRange(min=1),
              default=8, show_default=True, help="MT-bench prompts to measure (one per category in turn).")
@click.option("--rounds", type=click.IntRange(min=1), default=DEMO_ROUNDS, show_default=True,
              help="AIPerf runs per model, alternating which goes first; the fastest of each is compared.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--tree", default="auto", show_default=True,
              help="Runtime tree of the PyTorch engine; auto: tuned to this machine (cached after the first run).")
@click.option("--dtype", type=click.Choice(PRECISIONS), default=DEMO_DTYPE, show_default=True,
              help="Precision of both engines (eagle_model and base_model use the same weights).")
@click.option("--draft-format", type=click.Choice(["eagle1", "eagle3"]), default="eagle1", show_default=True,
              help="Which shipped SmolLM2 draft to serve.")
def demo_cmd(out_dir, requests, max_tokens, rounds, tree, dtype, draft_format):
    """Build, serve and measure the embedded default end to end; print speedup, mean accepted length and whether
    eagle and base outputs are identical.

    \b
    Example:
      eagle-trt demo --requests 12 --max-tokens 96
    """
    from eagle_trt.build.request import BuildRequest, run_build
    from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
    from eagle_trt.perf.report import summary_table
    from eagle_trt.perf.run import PerfRequest, run_perf

    t0 = time.time()
    say = (lambda msg: click.echo(msg, err=True))
    say("[1/3] demo base and draft")
    base, draft = materialize_demo_base(), shipped_draft_dir(draft_format)
    say(f"  base  {base}\n  draft {draft}")
    say(f"[2/3] eagle-trt build --engine pytorch --dtype {dtype} --tree {tree} -o {out_dir} --force")
    with tuning_progress() as progress:  # the same build path as `eagle-trt build` (tuning included)
        outcome = run_build(BuildRequest(base_dir=base, draft_dir=draft, out=out_dir, engine="pytorch", tree=tree,
                                         dtype=dtype, device="cpu", force=True), echo=say, progress=progress)
    bundle, spec = outcome.out, outcome.plan.spec
    say(f"[3/3] perf run: {requests} MT-bench prompts (one per category in turn), both turns (the second sees "
        f"the model's own first answer), {max_tokens} tokens, concurrency 1, {rounds} round(s)")
    report = run_perf(PerfRequest(bundle, None, "mt-bench", requests, max_tokens, 1, rounds=rounds, turns="both"),
                      echo=say)
    click.echo("")
    click.echo(summary_table(report))
    if report.get("per_turn_speedup"):
        click.echo("per turn (mean of per-request speedups): " + ", ".join(
            f"{turn} {value:.2f}x" for turn, value in report["per_turn_speedup"].items()))
    suffix = spec.tree.suffix
    click.echo(f"tree: {spec.tree.label()}, suffix candidates: "
               f"{'on (' + suffix.to_arg().lstrip('+') + ')' if suffix else 'off'}, dtype: {dtype} "
               "(eagle_model and base_model alike)")
    click.echo(f"report: {bundle / 'perf' / 'report.md'}")
    click.echo(f"demo finished in {time.time() - t0:.0f} s")
