"""`eagle-trt bench-kernel`: the tree-attention kernel benchmark (see eagle_trt.kernels.bench)."""

from __future__ import annotations

import click


@click.command("bench-kernel", context_settings={"ignore_unknown_options": True})
@click.option("--interpret-smoke", is_flag=True, help="Tiny sizes on CPU through Triton's interpreter.")
@click.option("--sweep", is_flag=True, help="Also time a grid of launch settings (splits, block, warps, stages).")
@click.option("--flex", is_flag=True, help="Also time FlexAttention (batch 1, long prefixes; compiles per shape).")
@click.option("--json-out", default="bench_kernel.json", show_default=True)
def bench_kernel_cmd(interpret_smoke, sweep, flex, json_out):
    """Time our tree-attention kernel (split as planned, and unsplit) against SDPA with a mask, FlexAttention, a
    decode step and the HBM floor.

    \b
    Example (on a GPU):
      eagle-trt bench-kernel --json-out bench_kernel.json
    """
    from eagle_trt.kernels.bench import main

    flags = [flag for flag, on in (("--interpret-smoke", interpret_smoke), ("--sweep", sweep), ("--flex", flex)) if on]
    main(flags + ["--json-out", json_out])
