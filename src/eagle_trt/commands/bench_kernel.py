"""`eagle-trt bench-kernel`: the tree-attention kernel benchmark (see eagle_trt.plugins.bench)."""

from __future__ import annotations

import click


@click.command("bench-kernel", context_settings={"ignore_unknown_options": True})
@click.option("--interpret-smoke", is_flag=True, help="Tiny sizes on CPU through Triton's interpreter.")
@click.option("--json-out", default="bench_kernel.json", show_default=True)
def bench_kernel_cmd(interpret_smoke, json_out):
    """Time our tree-attention kernel against SDPA with a mask, FlexAttention, a decode step and the HBM floor.

    \b
    Example (on a GPU):
      eagle-trt bench-kernel --json-out bench_kernel.json
    """
    from eagle_trt.plugins.bench import main

    main((["--interpret-smoke"] if interpret_smoke else []) + ["--json-out", json_out])
